/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_scalapack: redistributing a block-cyclic f64 matrix (issue 21, section 3), side by side
 * with ScaLAPACK's pdgemr2d (Debian's libscalapack-openmpi) and, when built with COSTA
 * (LM_WITH_COSTA: `make bench COSTA_DIR=/path/to/costa/install`), COSTA's costa_pdgemr2d.
 * Every implementation moves the same ScaLAPACK arrays described by the same descriptors:
 *   bc_to_rows    blocks 64 x 64 on the most square grid -> whole rows, one block of ceil(M/P)
 *                 rows per process on a P x 1 grid (what a row-sharded code holds);
 *   rows_to_bc    the way back;
 *   bc64_to_bc48  a block size change on the same grid (64 x 64 -> 48 x 48).
 * `--block B` uses blocks of B (and 3B/4 for the change, case "bc_to_bc3/4") instead of 64.
 *   transpose     C = A^T on the same grid and blocks: lm_dist_tensor_transpose (one-shot, a new
 *                 tensor from the pool; `localmap_oneshot`) and lm_dist_tensor_transpose_into (into
 *                 C's array, borrowed; `localmap_into`) against PBLAS's pdtran (alpha 1, beta 0,
 *                 into C).
 * localmap runs a persistent plan between tensors borrowed from those arrays
 * (lm_dist_tensor_from_scalapack; `localmap`), and plans anew at every call as pdgemr2d does
 * (`localmap_oneshot`: plan create + execute + destroy). Sizes: 64 MiB (2896 x 2896) and 1 MiB
 * (362 x 362). Interleaved rounds, the median over rounds of the max over ranks; before timing,
 * every implementation's result is checked element by element ("exact"). One JSON line per
 * (size, case, implementation); run by bench/run.sh at np 2 and 4. `--small`: the 1 MiB cases.
 * COSTA runs the same-grid case only unless LM_BENCH_COSTA_ALL=1 (see main). `--arena`: the
 * ScaLAPACK arrays come from lm_tensor_alloc (the library's pool, whose large buffers lie in its
 * node-shared arena: peers on the node read them with memcpy, not kernel copies) instead of
 * calloc; every implementation moves the same arrays either way ("alloc" in the output).
 * `--pad P`: every local array gets P more rows than it holds (LLD = LOCr + P, "lld_pad"), so
 * localmap borrows padded shards (read and written in place, as pdgemr2d does).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localmap.h"
#include "localmap_mpi.h"
#include "localmap_scalapack.h"
#include "bench_util.h"

/* ScaLAPACK's redistribution and transpose (the BLACS and the descriptor tools: above). */
void pdgemr2d_(const int *m, const int *n, const double *a, const int *ia, const int *ja,
               const int *desca, double *b, const int *ib, const int *jb, const int *descb,
               const int *ictxt);
void pdtran_(const int *m, const int *n, const double *alpha, const double *a, const int *ia,
             const int *ja, const int *desca, const double *beta, double *c, const int *ic,
             const int *jc, const int *descc);
#ifdef LM_WITH_COSTA
void costa_pdgemr2d(const int *m, const int *n, const double *a, const int *ia, const int *ja,
                    const int *desca, double *b, const int *ib, const int *jb, const int *descb,
                    const int *ictxt);
#endif

static int rank, size, nb = 64;  /* nb: the block-cyclic layouts' block size (--block) */
static int use_arena = 0;        /* --arena: arrays from lm_tensor_alloc */
static int lld_pad = 0;          /* --pad P: LLD = max(1, LOCr) + P */

/* One process grid and a matrix laid out on it. */
typedef struct {
  int ctxt, nprow, npcol, myrow, mycol, mb, nb, desc[LM_SCALAPACK_DLEN];
  double *a;
  DLManagedTensor *owner; /* --arena: the array's owner */
  int64_t locr, locc;
  lm_mesh_t mesh;
} layout_t;

static void make_layout(layout_t *L, int M, int N, int nprow, int npcol, int mb, int nb) {
  int zero = 0, info = 0;
  Cblacs_get(-1, 0, &L->ctxt);
  Cblacs_gridinit(&L->ctxt, "Row", nprow, npcol);
  Cblacs_gridinfo(L->ctxt, &L->nprow, &L->npcol, &L->myrow, &L->mycol);
  L->mb = mb;
  L->nb = nb;
  L->locr = numroc_(&M, &mb, &L->myrow, &zero, &L->nprow);
  L->locc = numroc_(&N, &nb, &L->mycol, &zero, &L->npcol);
  int lld = (L->locr > 1 ? (int)L->locr : 1) + lld_pad;
  descinit_(L->desc, &M, &N, &mb, &nb, &zero, &zero, &L->ctxt, &lld, &info);
  const int64_t elems = (int64_t)lld * (L->locc ? L->locc : 1);
  L->owner = NULL;
  if (use_arena) {
    OK(lm_tensor_alloc(&L->owner, 1, &elems, LM_FLOAT64, LM_CPU));
    L->a = (double *)L->owner->dl_tensor.data;
  } else {
    L->a = (double *)calloc((size_t)elems, sizeof(double));
  }
  OK(lm_mesh_create_grid_mpi(&L->mesh, MPI_COMM_WORLD, L->myrow, L->mycol, NULL));
}

static void free_layout(layout_t *L) {
  OK(lm_mesh_destroy(&L->mesh));
  if (L->owner)
    L->owner->deleter(L->owner);
  else
    free(L->a);
  Cblacs_gridexit(L->ctxt);
}

/* Global index of local index l (0-based) along a dim with blocks b over p from source 0. */
static int64_t l2g(int64_t l, int64_t b, int64_t c, int64_t p) { return ((l / b) * p + c) * b + l % b; }

static double value(int64_t i, int64_t j) { return (double)i + 1e5 * (double)j; }

static void fill(layout_t *L, int zero) {
  const int64_t lld = L->desc[LM_SCALAPACK_DESC_LLD];
  for (int64_t j = 0; j < L->locc; ++j)
    for (int64_t i = 0; i < L->locr; ++i)
      L->a[i + j * lld] = zero ? -1 : value(l2g(i, L->mb, L->myrow, L->nprow),
                                            l2g(j, L->nb, L->mycol, L->npcol));
}

static int exact(const layout_t *L) {
  const int64_t lld = L->desc[LM_SCALAPACK_DESC_LLD];
  long bad = 0;
  for (int64_t j = 0; j < L->locc; ++j)
    for (int64_t i = 0; i < L->locr; ++i)
      bad += L->a[i + j * lld] != value(l2g(i, L->mb, L->myrow, L->nprow),
                                        l2g(j, L->nb, L->mycol, L->npcol));
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return bad == 0;
}

typedef struct {
  int M, N;
  layout_t *src, *dst;
  lm_dist_tensor_t x, y;
  lm_reshard_plan_t plan;
} move_t;

enum { IMPL_LM, IMPL_LM_ONESHOT, IMPL_PDGEMR2D, IMPL_COSTA, NIMPL };
static const char *impl_name[NIMPL] = {"localmap", "localmap_oneshot", "pdgemr2d", "costa"};

static void run(move_t *m, int impl) {
  int one = 1;
  lm_placement_t sp[2], dp[2];
  int64_t shape[2] = {m->N, m->M};
  switch (impl) {
    case IMPL_LM: OK(lm_reshard_plan_execute(m->plan, m->x, m->y)); break;
    case IMPL_LM_ONESHOT: {
      lm_reshard_plan_t p = NULL;
      OK(lm_dist_tensor_placements(m->x, sp, 2));
      OK(lm_dist_tensor_placements(m->y, dp, 2));
      OK(lm_reshard_plan_create(&p, m->src->mesh, sp, m->dst->mesh, dp, 2, shape, LM_FLOAT64));
      OK(lm_reshard_plan_execute(p, m->x, m->y));
      OK(lm_reshard_plan_destroy(&p));
      break;
    }
    case IMPL_PDGEMR2D:
      pdgemr2d_(&m->M, &m->N, m->src->a, &one, &one, m->src->desc, m->dst->a, &one, &one,
                m->dst->desc, &m->src->ctxt);
      break;
#ifdef LM_WITH_COSTA
    case IMPL_COSTA:
      costa_pdgemr2d(&m->M, &m->N, m->src->a, &one, &one, m->src->desc, m->dst->a, &one, &one,
                     m->dst->desc, &m->src->ctxt);
      break;
#endif
  }
}

static double once(move_t *m, int impl) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  run(m, impl);
  double t = MPI_Wtime() - t0, mx = 0;
  MPI_Allreduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

static void bench_case(const char *name, int M, int N, layout_t *src, layout_t *dst, int rounds,
                       const char *size_name, int with_costa) {
  move_t m = {M, N, src, dst, NULL, NULL, NULL};
  int64_t shape[2] = {N, M};
  lm_placement_t sp[2], dp[2];
  OK(lm_dist_tensor_from_scalapack(&m.x, src->mesh, src->desc, src->a, LM_FLOAT64, LM_CPU,
                                   LM_FROM_LOCAL_BORROW));
  OK(lm_dist_tensor_from_scalapack(&m.y, dst->mesh, dst->desc, dst->a, LM_FLOAT64, LM_CPU,
                                   LM_FROM_LOCAL_BORROW));
  OK(lm_dist_tensor_placements(m.x, sp, 2));
  OK(lm_dist_tensor_placements(m.y, dp, 2));
  OK(lm_reshard_plan_create(&m.plan, src->mesh, sp, dst->mesh, dp, 2, shape, LM_FLOAT64));
  int nimpl = 0, impls[NIMPL], ok[NIMPL];
  for (int i = 0; i < NIMPL; ++i) {
#ifndef LM_WITH_COSTA
    if (i == IMPL_COSTA) continue;
#endif
    if (i == IMPL_COSTA && !with_costa) continue;
    impls[nimpl++] = i;
  }
  fill(src, 0);
  for (int k = 0; k < nimpl; ++k) { /* warm-up and check */
    fill(dst, 1);
    run(&m, impls[k]);
    ok[k] = exact(dst);
  }
  double *t = (double *)malloc(sizeof(double) * (size_t)(rounds * nimpl));
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < nimpl; ++k) t[k * rounds + r] = once(&m, impls[k]);
  for (int k = 0; k < nimpl; ++k) {
    qsort(t + k * rounds, (size_t)rounds, sizeof(double), bench_cmp);
    if (rank == 0)
      printf("{\"bench\": \"scalapack\", \"np\": %d, \"size\": \"%s\", \"M\": %d, \"N\": %d, "
             "\"block\": %d, "
             "\"case\": \"%s\", \"impl\": \"%s\", \"grid_src\": \"%dx%d\", \"grid_dst\": \"%dx%d\", "
             "\"alloc\": \"%s\", \"lld_pad\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, \"rounds\": %d, "
             "\"exact\": %s}\n",
             size, size_name, M, N, nb, name, impl_name[impls[k]], src->nprow, src->npcol,
             dst->nprow, dst->npcol, use_arena ? "arena" : "malloc", lld_pad,
             t[k * rounds + rounds / 2] * 1e3,
             t[k * rounds] * 1e3,
             rounds, ok[k] ? "true" : "false");
  }
  fflush(stdout);
  free(t);
  OK(lm_reshard_plan_destroy(&m.plan));
  OK(lm_dist_tensor_destroy(&m.y));
  OK(lm_dist_tensor_destroy(&m.x));
}

/* One implementation of C = A^T (n x n, the same grid and blocks): localmap's transpose of the
 * tensor over A (into a new tensor, *y) or pdtran into C. */
static double transpose_once(layout_t *A, layout_t *C, lm_dist_tensor_t x, int n, int impl,
                             lm_dist_tensor_t *y, lm_dist_tensor_t c) {
  const int one = 1, perm[2] = {1, 0};
  const double d1 = 1, d0 = 0;
  lm_placement_t pl[2];
  OK(lm_dist_tensor_placements(x, pl, 2));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (impl == 0) {
    OK(lm_dist_tensor_destroy(y));
    OK(lm_dist_tensor_transpose(y, x, perm, NULL, pl));
  } else if (impl == 2) {
    OK(lm_dist_tensor_transpose_into(c, x, perm));
  } else {
    int dc[LM_SCALAPACK_DLEN];  /* PBLAS wants both operands in one BLACS context: C's grid is A's */
    memcpy(dc, C->desc, sizeof dc);
    dc[LM_SCALAPACK_DESC_CTXT] = A->desc[LM_SCALAPACK_DESC_CTXT];
    pdtran_(&n, &n, &d1, A->a, &one, &one, A->desc, &d0, C->a, &one, &one, dc);
  }
  double t = MPI_Wtime() - t0, mx = 0;
  MPI_Allreduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

/* Whether C's local array (or y's shard, its row-major [LOCc, LOCr] view) holds A^T. */
static int transposed(const layout_t *C, const double *a, int64_t lld) {
  long bad = 0;
  for (int64_t j = 0; j < C->locc; ++j)
    for (int64_t i = 0; i < C->locr; ++i)
      bad += a[i + j * lld] != value(l2g(j, C->nb, C->mycol, C->npcol),
                                     l2g(i, C->mb, C->myrow, C->nprow));
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return bad == 0;
}

static void bench_transpose(int n, layout_t *A, layout_t *C, int rounds, const char *size_name) {
  static const char *names[3] = {"localmap_oneshot", "pdtran", "localmap_into"};
  lm_dist_tensor_t x = NULL, y = NULL, c = NULL;
  OK(lm_dist_tensor_from_scalapack(&x, A->mesh, A->desc, A->a, LM_FLOAT64, LM_CPU,
                                   LM_FROM_LOCAL_BORROW));
  OK(lm_dist_tensor_from_scalapack(&c, C->mesh, C->desc, C->a, LM_FLOAT64, LM_CPU,
                                   LM_FROM_LOCAL_BORROW));
  fill(A, 0);
  int ok[3];
  double *t = (double *)malloc(sizeof(double) * (size_t)(3 * rounds));
  for (int k = 0; k < 3; ++k) { /* warm-up and check */
    fill(C, 1);
    transpose_once(A, C, x, n, k, &y, c);
    DLTensor v;
    OK(lm_dist_tensor_local(y, &v));
    ok[k] = k == 0 ? transposed(C, (const double *)v.data, C->locr > 1 ? C->locr : 1)
                   : transposed(C, C->a, C->desc[LM_SCALAPACK_DESC_LLD]);
  }
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 3; ++k) t[k * rounds + r] = transpose_once(A, C, x, n, k, &y, c);
  for (int k = 0; k < 3; ++k) {
    qsort(t + k * rounds, (size_t)rounds, sizeof(double), bench_cmp);
    if (rank == 0)
      printf("{\"bench\": \"scalapack\", \"np\": %d, \"size\": \"%s\", \"M\": %d, \"N\": %d, "
             "\"block\": %d, \"case\": \"transpose\", \"impl\": \"%s\", \"grid_src\": "
             "\"%dx%d\", \"grid_dst\": \"%dx%d\", \"alloc\": \"%s\", \"lld_pad\": %d, "
             "\"median_ms\": %.4f, \"min_ms\": %.4f, \"rounds\": %d, \"exact\": %s}\n",
             size, size_name, n, n, nb, names[k], A->nprow, A->npcol, C->nprow, C->npcol,
             use_arena ? "arena" : "malloc", lld_pad, t[k * rounds + rounds / 2] * 1e3,
             t[k * rounds] * 1e3, rounds, ok[k] ? "true" : "false");
  }
  fflush(stdout);
  free(t);
  OK(lm_dist_tensor_destroy(&c));
  OK(lm_dist_tensor_destroy(&y));
  OK(lm_dist_tensor_destroy(&x));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int only_small = 0;  /* --small: the 1 MiB cases; --block B: blocks of B (not 64) */
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--small") == 0) only_small = 1;
    if (strcmp(argv[i], "--block") == 0 && i + 1 < argc) nb = atoi(argv[++i]);
    if (strcmp(argv[i], "--arena") == 0) use_arena = 1;
    if (strcmp(argv[i], "--pad") == 0 && i + 1 < argc) lld_pad = atoi(argv[++i]);
  }
  /* COSTA v2.3.2's costa_pdgemr2d between two grids (the rows cases: a P x 1 target) returned
   * wrong elements at np 2 and crashed at np 4 here; LM_BENCH_COSTA_ALL=1 runs it anyway. */
  const int costa_all = getenv("LM_BENCH_COSTA_ALL") != NULL;
  int pr = 1;
  for (int f = 1; f * f <= size; ++f)
    if (size % f == 0) pr = f;
  const struct { const char *name; int n, rounds; } sizes[2] = {{"1MiB", 362, 21}, {"64MiB", 2896, 7}};
  for (int s = 0; s < (only_small ? 1 : 2); ++s) {
    const int n = sizes[s].n, rows = (n + size - 1) / size;
    layout_t bc, bc48, byrows;
    make_layout(&bc, n, n, pr, size / pr, nb, nb);
    make_layout(&bc48, n, n, pr, size / pr, nb * 3 / 4 > 0 ? nb * 3 / 4 : 1, nb * 3 / 4 > 0 ? nb * 3 / 4 : 1);
    make_layout(&byrows, n, n, size, 1, rows, n);
    bench_case("bc_to_rows", n, n, &bc, &byrows, sizes[s].rounds, sizes[s].name, costa_all);
    bench_case("rows_to_bc", n, n, &byrows, &bc, sizes[s].rounds, sizes[s].name, costa_all);
    bench_case(nb == 64 ? "bc64_to_bc48" : "bc_to_bc3/4", n, n, &bc, &bc48, sizes[s].rounds, sizes[s].name, 1);
    if (nb == 64) {
      layout_t bct;
      make_layout(&bct, n, n, pr, size / pr, nb, nb);
      bench_transpose(n, &bc, &bct, sizes[s].rounds, sizes[s].name);
      free_layout(&bct);
    }
    free_layout(&byrows);
    free_layout(&bc48);
    free_layout(&bc);
  }
  MPI_Finalize();
  return 0;
}
