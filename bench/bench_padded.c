/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_padded: reshards into padded targets (issue 21: a ScaLAPACK array with LLD > LOCr, rows
 * of a larger array) against the same reshards into compact targets. An n x n f64 matrix on a 1-D
 * mesh; the target shard lies in rows of its columns + 8 elements (its padding never written). Cases, each
 * through one persistent plan created once:
 *   P(sum)->S0  a reduce-scatter: the source every rank's whole partial matrix (compact);
 *   R->P(sum)   a Partial fill: rank 0 keeps the value, the others write zeros;
 *   S1->S0      an exchange, for reference (padded targets were written in place before).
 * Timed in interleaved rounds, padded then compact, then the other way round (median over rounds
 * of the max over ranks), with the pool's high-water mark above its use during one execution.
 * Every padded result is checked (values and padding) once. One JSON line per (case, size).
 * Usage: mpirun -np N bench_padded [--n N (default: 362 and 2896, 1 MiB and 64 MiB)] [--rounds R]
 *        [--cols C (an n x C matrix; default square)]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localmap.h"
#include "bench_util.h"

static int rank, size, ROUNDS = 9;
static int64_t COLS = 0; /* --cols: an n x COLS matrix (0: square) */
enum { PAD = 8 };

/* Chunk j of n over size ranks (torch.chunk). */
static int64_t chunk_lo(int64_t n, int j) {
  int64_t c = (n + size - 1) / size, lo = c * j;
  return lo > n ? n : lo;
}
static int64_t chunk_len(int64_t n, int j) {
  int64_t lo = chunk_lo(n, j), hi = chunk_lo(n, j + 1);
  return hi - lo;
}

static double now_max(double t0) {
  double dt = MPI_Wtime() - t0, mx;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx * 1e3;
}

typedef struct {
  const char *name;
  lm_placement_t src, dst;
} bcase_t;

/* The source's local value at (i, j) of its shard (global row gi, column gj). */
static double src_value(const bcase_t *c, int64_t gi, int64_t gj, int64_t n) {
  if (c->src.kind == LM_PARTIAL) return (double)(rank + 1) + (double)((gi * n + gj) % 1000);
  return (double)(gi * n + gj);
}
/* The target's expected local value at global (gi, gj). */
static double dst_value(const bcase_t *c, int64_t gi, int64_t gj, int64_t n) {
  if (c->src.kind == LM_PARTIAL)
    return (double)(size * (size + 1) / 2) + (double)size * (double)((gi * n + gj) % 1000);
  if (c->dst.kind == LM_PARTIAL) return rank == 0 ? (double)(gi * n + gj) : 0.0;
  return (double)(gi * n + gj);
}

/* Local extents of placement p of the n x nc matrix on this rank; *row0 / *col0 its offsets. */
static void local_box(lm_placement_t p, int64_t n, int64_t nc, int64_t *rows, int64_t *cols,
                      int64_t *row0, int64_t *col0) {
  *rows = n;
  *cols = nc;
  *row0 = *col0 = 0;
  if (p.kind == LM_SHARD && p.dim == 0) *rows = chunk_len(n, rank), *row0 = chunk_lo(n, rank);
  if (p.kind == LM_SHARD && p.dim == 1) *cols = chunk_len(nc, rank), *col0 = chunk_lo(nc, rank);
}

static void run_case(lm_mesh_t m, const bcase_t *c, int64_t n) {
  const int64_t nc = COLS ? COLS : n, G[2] = {n, nc};
  int64_t sr, sc, sr0, sc0, dr, dc, dr0, dc0;
  local_box(c->src, n, nc, &sr, &sc, &sr0, &sc0);
  local_box(c->dst, n, nc, &dr, &dc, &dr0, &dc0);
  double *a = malloc(sizeof(double) * (size_t)(sr * sc + 1));
  for (int64_t i = 0; i < sr; ++i)
    for (int64_t j = 0; j < sc; ++j) a[i * sc + j] = src_value(c, sr0 + i, sc0 + j, nc);
  const int64_t ld = dc + PAD;
  double *b = malloc(sizeof(double) * (size_t)(dr * ld + 1));
  for (int64_t e = 0; e < dr * ld; ++e) b[e] = -7;
  int64_t sshape[2] = {sr, sc}, dshape[2] = {dr, dc}, dstr[2] = {ld, 1};
  DLTensor ta = {a, {kDLCPU, 0}, 2, LM_FLOAT64, sshape, NULL, 0};
  DLTensor tb = {b, {kDLCPU, 0}, 2, LM_FLOAT64, dshape, dstr, 0};
  lm_dist_tensor_t x = NULL, padded = NULL, compact = NULL;
  OK(lm_dist_tensor_from_local(&x, m, &ta, &c->src, LM_SHAPE_GIVEN, G, LM_FROM_LOCAL_BORROW));
  OK(lm_dist_tensor_from_local(&padded, m, &tb, &c->dst, LM_SHAPE_GIVEN, G, LM_FROM_LOCAL_BORROW));
  const DLDevice host = {kDLCPU, 0};
  OK(lm_dist_tensor_zeros(&compact, m, 2, G, LM_FLOAT64, host, &c->dst));
  lm_reshard_plan_t p = NULL;
  OK(lm_reshard_plan_create(&p, m, &c->src, NULL, &c->dst, 2, G, LM_FLOAT64));
  OK(lm_reshard_plan_execute(p, x, padded)); /* the first of each prepares */
  OK(lm_reshard_plan_execute(p, x, compact));
  long bad = 0;
  for (int64_t i = 0; i < dr; ++i)
    for (int64_t j = 0; j < ld; ++j)
      bad += b[i * ld + j] != (j < dc ? dst_value(c, dr0 + i, dc0 + j, nc) : -7);
  long bad_all = 0;
  MPI_Allreduce(&bad, &bad_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  int64_t peak[2] = {0, 0};
  double *t[2];
  t[0] = malloc(sizeof(double) * (size_t)ROUNDS);
  t[1] = malloc(sizeof(double) * (size_t)ROUNDS);
  for (int r = 0; r < ROUNDS; ++r)
    for (int k = 0; k < 2; ++k) {
      const int v = (r + k) % 2; /* 0: padded, 1: compact; each first in turn */
      int64_t in_use = 0, pk = 0;
      OK(lm_pool_stats(&in_use, NULL, 1));
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      OK(lm_reshard_plan_execute(p, x, v ? compact : padded));
      t[v][r] = now_max(t0);
      OK(lm_pool_stats(NULL, &pk, 0));
      if (pk - in_use > peak[v]) peak[v] = pk - in_use;
    }
  qsort(t[0], (size_t)ROUNDS, sizeof(double), bench_cmp);
  qsort(t[1], (size_t)ROUNDS, sizeof(double), bench_cmp);
  int64_t pmax[2];
  MPI_Allreduce(peak, pmax, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    printf("{\"bench\": \"padded\", \"case\": \"%s\", \"np\": %d, \"n\": %lld, "
           "\"cols\": %lld, \"bytes\": %lld, "
           "\"padded_ms\": %.4f, \"compact_ms\": %.4f, \"padded_over_compact\": %.2f, "
           "\"padded_pool_bytes\": %lld, \"compact_pool_bytes\": %lld, \"wrong\": %ld}\n",
           c->name, size, (long long)n, (long long)nc, (long long)(n * nc * 8), t[0][ROUNDS / 2],
           t[1][ROUNDS / 2], t[0][ROUNDS / 2] / t[1][ROUNDS / 2], (long long)pmax[0],
           (long long)pmax[1], bad_all);
  fflush(stdout);
  free(t[0]);
  free(t[1]);
  OK(lm_reshard_plan_destroy(&p));
  OK(lm_dist_tensor_destroy(&compact));
  OK(lm_dist_tensor_destroy(&padded));
  OK(lm_dist_tensor_destroy(&x));
  free(b);
  free(a);
  if (bad_all) MPI_Abort(MPI_COMM_WORLD, 1); /* a benchmark never reports a wrong result's time */
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int64_t only = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) only = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) ROUNDS = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--cols") && i + 1 < argc) COLS = atoll(argv[++i]);
  }
  if (ROUNDS < 1) ROUNDS = 1;
  lm_mesh_t m = NULL;
  int64_t shape[1] = {size};
  OK(lm_mesh_create(&m, (int)MPI_Comm_c2f(MPI_COMM_WORLD), 1, shape, NULL));
  const bcase_t cases[3] = {
      {"P(sum)->S0", LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), LM_PLACEMENT_SHARD(0)},
      {"R->P(sum)", LM_PLACEMENT_REPLICATE, LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)},
      {"S1->S0", LM_PLACEMENT_SHARD(1), LM_PLACEMENT_SHARD(0)},
  };
  const int64_t sizes[2] = {362, 2896};
  for (int s = 0; s < 2; ++s) {
    const int64_t n = only ? only : sizes[s];
    for (int k = 0; k < 3; ++k) run_case(m, &cases[k], n);
    if (only) break;
  }
  OK(lm_mesh_destroy(&m));
  MPI_Finalize();
  return 0;
}
