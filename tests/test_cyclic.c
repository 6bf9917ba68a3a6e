/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_cyclic: block-cyclic placements (LM_BLOCK_CYCLIC, issue 21 section 2).
 *
 * test_random_cyclic: random reshards between block-cyclic and every other placement (Shard,
 * ragged, Replicate, Partial sources and targets), 1-D to 3-D tensors with extents 0 to 40, block
 * sizes 1 to 5 and every source coordinate, on the 1-D world mesh, a 2-D mesh and the reversed
 * world (cross-mesh), through the three API paths (reshard, persistent plan, nonblocking). Every
 * element of every shard is checked at the position an oracle of this file gives (ScaLAPACK's
 * NUMROC and INDXL2G written again from their definitions, torch.chunk, ragged offsets), never
 * from the library. `LM_SEED=s LM_CASE=c` replays one case; LM_CYCLIC_CASES sets the count.
 * The directed tests pin the refusals, the format, from_local (borrowed), from_global and gather,
 * and the ScaLAPACK 2-D layout against row shards. test_rows_in_place (where the node-local suite
 * asks for it, LM_TEST_EXPECT_PIECES=kernel|mapped) counts the library's process_vm_readv calls:
 * rows of a page or more move straight between the two shards, with one kernel read of each
 * received byte, or none at all when the sender's shard lies in its shared arena (memcpy).
 */
// lm-test-np: 1 2 3 4 8
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lm_test.h"
#include "lm_rng.h"

#define NP lm_test_size()
#define ME lm_test_rank()

/* The library's kernel copies (it calls the libc wrapper; this definition takes its place). */
static int g_vm_counting = 0;
static long long g_vm_bytes = 0;
ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long nl, const struct iovec *r,
                         unsigned long nr, unsigned long flags) {
  if (g_vm_counting)
    for (unsigned long i = 0; i < nl; ++i) g_vm_bytes += (long long)l[i].iov_len;
  return syscall(SYS_process_vm_readv, pid, l, nl, r, nr, flags);
}

/* ----------------------------------------------------------------------------- oracle */
/* A layout as the test knows it: mesh shape, the world rank at each mesh index, placements,
 * ragged extents per mesh dim. */
typedef struct {
  int mnd;
  int64_t mshape[2];
  int ranks[64];
  lm_placement_t pl[2];
  int64_t ext[2][64];
  lm_mesh_t mesh;
} olayout_t;

/* Which mesh dim splits tensor dim d (-1: none; the cases never co-shard). */
static int splitter(const olayout_t *L, int d) {
  for (int m = 0; m < L->mnd; ++m)
    if (L->pl[m].kind != LM_REPLICATE && L->pl[m].kind != LM_PARTIAL && L->pl[m].dim == d)
      return m;
  return -1;
}

/* NUMROC: the local extent of coordinate c (blocks of b over p from s). */
static int64_t numroc(int64_t n, int64_t b, int64_t c, int64_t s, int64_t p) {
  int64_t e = 0;
  for (int64_t k = 0; k * b < n; ++k) /* deal every block: the definition, not the formula */
    if ((k + s) % p == c) e += (k + 1) * b <= n ? b : n - k * b;
  return e;
}

/* Local extent and global index of local index l along tensor dim d at mesh coordinate c. */
static int64_t o_len(const olayout_t *L, const int64_t *c, int d, int64_t n) {
  int m = splitter(L, d);
  if (m < 0) return n;
  int64_t p = L->mshape[m], i = c[m];
  if (L->pl[m].kind == LM_SHARD) {
    int64_t b = (n + p - 1) / p, o = i * b < n ? i * b : n;
    return (o + b < n ? o + b : n) - o;
  }
  if (L->pl[m].kind == LM_RAGGED) return L->ext[m][i];
  return numroc(n, L->pl[m].block, i, L->pl[m].source, p);
}
static int64_t o_glob(const olayout_t *L, const int64_t *c, int d, int64_t n, int64_t l) {
  int m = splitter(L, d);
  if (m < 0) return l;
  int64_t p = L->mshape[m], i = c[m];
  if (L->pl[m].kind == LM_SHARD) {
    int64_t b = (n + p - 1) / p;
    return i * b + l;
  }
  if (L->pl[m].kind == LM_RAGGED) {
    int64_t o = 0;
    for (int64_t k = 0; k < i; ++k) o += L->ext[m][k];
    return o + l;
  }
  int64_t b = L->pl[m].block, dist = (i - L->pl[m].source + p) % p; /* INDXL2G */
  return ((l / b) * p + dist) * b + l % b;
}

/* This rank's mesh coordinate in L (false: not a member). */
static int my_coord(const olayout_t *L, int64_t *c) {
  int64_t n = L->mshape[0] * (L->mnd > 1 ? L->mshape[1] : 1);
  for (int64_t i = 0; i < n; ++i)
    if (L->ranks[i] == ME) {
      c[L->mnd - 1] = i % L->mshape[L->mnd - 1];
      if (L->mnd > 1) c[0] = i / L->mshape[1];
      return 1;
    }
  return 0;
}

static int64_t value_of(const int64_t *g, const int64_t *shape, int nd) {
  int64_t v = 0;
  for (int d = 0; d < nd; ++d) v = v * shape[d] + g[d];
  return v;
}

/* Walks the local elements of t (laid out as L): fill (partial: value on coordinate 0 of the
 * Partial dims, 0 elsewhere) or check; returns the number of wrong elements (or wrong extents). */
static int64_t walk(lm_dist_tensor_t t, const olayout_t *L, int nd, const int64_t *shape, int esz,
                    int fill) {
  int64_t c[2] = {0, 0};
  if (!my_coord(L, c)) return 0;
  int64_t ls[3] = {1, 1, 1}, got[3] = {0, 0, 0}, n = 1;
  for (int d = 0; d < nd; ++d) n *= (ls[d] = o_len(L, c, d, shape[d]));
  if (lm_dist_tensor_local_shape(t, got, nd) != LM_SUCCESS) return 1;
  for (int d = 0; d < nd; ++d)
    if (got[d] != ls[d]) return 1;
  int zero = 0;
  for (int m = 0; m < L->mnd; ++m) zero = zero || (L->pl[m].kind == LM_PARTIAL && c[m] != 0);
  DLTensor v;
  if (lm_dist_tensor_local(t, &v) != LM_SUCCESS) return 1;
  int64_t bad = 0, idx[3] = {0, 0, 0}, g[3];
  for (int64_t e = 0; e < n; ++e) {
    for (int d = nd - 1, r = (int)e; d >= 0; --d) { /* row-major local index */
      idx[d] = r % ls[d];
      r = (int)(r / ls[d]);
    }
    for (int d = 0; d < nd; ++d) g[d] = o_glob(L, c, d, shape[d], idx[d]);
    int64_t want = value_of(g, shape, nd), at = e; /* a padded borrow's view has strides */
    if (v.strides) {
      at = 0;
      for (int d = 0; d < nd; ++d) at += idx[d] * v.strides[d];
    }
    if (esz == 8) {
      double *p = (double *)v.data + at;
      if (fill) *p = zero ? 0 : (double)want;
      else bad += *p != (double)want;
    } else {
      int8_t *p = (int8_t *)v.data + at;
      if (fill) *p = zero ? 0 : (int8_t)(want % 127);
      else bad += *p != (int8_t)(want % 127);
    }
  }
  return bad;
}

/* ----------------------------------------------------------------------------- cases */
static void make_mesh(olayout_t *L, int kind) {
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  for (int i = 0; i < NP; ++i) L->ranks[i] = kind == 2 ? NP - 1 - i : i;
  cfg.ranks = L->ranks;
  cfg.nranks = NP;
  if (kind == 1) { /* 2-D: the largest factor <= sqrt(NP) rows */
    int a = 1;
    for (int f = 1; f * f <= NP; ++f)
      if (NP % f == 0) a = f;
    L->mnd = 2;
    L->mshape[0] = a;
    L->mshape[1] = NP / a;
  } else {
    L->mnd = 1;
    L->mshape[0] = NP;
  }
  LM_ASSERT_OK_ALL(lm_mesh_create(&L->mesh, lm_test_comm_f(), L->mnd, L->mshape, &cfg));
}

/* Random placements: every mesh dim R, S, ragged, block-cyclic or Partial (beside block-cyclic
 * dims too); no tensor dim split twice. Ragged extents are registered (ids returned in ids[]). */
static void draw_placements(olayout_t *L, int nd, const int64_t *shape, int want_bc,
                            int32_t *ids) {
  int used[3] = {0, 0, 0}, bc = 0;
  for (int m = 0; m < L->mnd; ++m) {
    ids[m] = 0;
    int k = rndi(5), d = nd ? rndi(nd) : 0;
    if (want_bc && m == L->mnd - 1 && !bc) k = 3;
    if ((k == 1 || k == 2 || k == 3) && (nd == 0 || used[d])) k = 0;
    lm_placement_t p = LM_PLACEMENT_REPLICATE;
    if (k == 1) p = (lm_placement_t)LM_PLACEMENT_SHARD(d);
    if (k == 2) {
      int64_t left = shape[d];
      for (int64_t i = 0; i < L->mshape[m]; ++i) {
        L->ext[m][i] = i == L->mshape[m] - 1 ? left : (left ? rndi((int)left + 1) : 0);
        left -= L->ext[m][i];
      }
      LM_ASSERT_OK(lm_extents_create(&ids[m], L->ext[m], L->mshape[m]));
      p = (lm_placement_t)LM_PLACEMENT_RAGGED(d, ids[m]);
    }
    if (k == 3) {
      p = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(d, 1 + rndi(5), rndi((int)L->mshape[m]));
      bc = 1;
    }
    if (k == 4) p = (lm_placement_t)LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
    if (k >= 1 && k <= 3) used[d] = 1;
    L->pl[m] = p;
  }
  (void)bc;
}

static int has_kind(const olayout_t *L, int kind) {
  for (int m = 0; m < L->mnd; ++m)
    if (L->pl[m].kind == kind) return 1;
  return 0;
}

/* Reshards src (laid out as S) to D along the drawn API path; the result, or NULL. */
static lm_dist_tensor_t run_path(lm_dist_tensor_t src, const olayout_t *S, const olayout_t *D,
                                 int nd, const int64_t *shape, DLDataType dt, int path) {
  lm_dist_tensor_t out = NULL;
  if (path == 0) {
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, src, D->mesh, D->pl));
    return out;
  }
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&plan, S->mesh, S->pl, D->mesh, D->pl, nd, shape, dt));
  LM_ASSERT_OK(lm_reshard_plan_alloc_target(&out, plan, (DLDevice){kDLCPU, 0}));
  if (path == 1) {
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, out));
  } else {
    lm_request_t rq = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_start(&rq, plan, src, out));
    LM_ASSERT_OK_ALL(lm_request_wait(&rq));
  }
  LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  return out;
}

static int one_case(uint64_t seed, int ci, olayout_t *meshes) {
  rng_state = seed * 1000003ull + (uint64_t)ci;
  int nd = 1 + rndi(3);
  int64_t shape[3];
  for (int d = 0; d < nd; ++d) shape[d] = rndi(4) == 0 ? 20 + rndi(21) : rndi(9);
  olayout_t S = meshes[rndi(3)], D = meshes[rndi(3)];
  int32_t sid[2], did[2];
  const int bc_side = rndi(3); /* 0: source block-cyclic, 1: target, 2: both */
  draw_placements(&S, nd, shape, bc_side != 1, sid);
  draw_placements(&D, nd, shape, bc_side != 0, did);
  if (has_kind(&S, LM_PARTIAL) && has_kind(&D, LM_PARTIAL)) D.pl[0] = S.pl[0] =
      (lm_placement_t)LM_PLACEMENT_REPLICATE; /* Partial -> Partial is the ordinary engine's */
  const int esz = rndi(2) ? 8 : 1, path = rndi(3);
  DLDataType dt = esz == 8 ? (DLDataType){kDLFloat, 64, 1} : (DLDataType){kDLInt, 8, 1};
  lm_dist_tensor_t src = NULL, out = NULL, red = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, S.mesh, nd, shape, dt, (DLDevice){kDLCPU, 0}, S.pl));
  walk(src, &S, nd, shape, esz, 1);
  out = run_path(src, &S, &D, nd, shape, dt, path);
  olayout_t C = D; /* what is checked: Partial targets reduced to Replicate first */
  if (has_kind(&D, LM_PARTIAL)) {
    for (int m = 0; m < C.mnd; ++m)
      if (C.pl[m].kind == LM_PARTIAL) C.pl[m] = (lm_placement_t)LM_PLACEMENT_REPLICATE;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&red, out, C.mesh, C.pl));
  }
  int64_t bad = walk(red ? red : out, &C, nd, shape, esz, 0);
  int64_t all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (all && ME == 0) {
    char a[128], b[128];
    LM_ASSERT_OK(lm_placements_format(S.pl, S.mnd, a, sizeof a));
    LM_ASSERT_OK(lm_placements_format(D.pl, D.mnd, b, sizeof b));
    fprintf(stderr, "LM_SEED=%llu LM_CASE=%d: %s -> %s, shape [%lld %lld %lld] (nd %d), esize %d, "
            "path %d: %lld wrong\n", (unsigned long long)seed, ci, a, b, (long long)shape[0],
            nd > 1 ? (long long)shape[1] : 0LL, nd > 2 ? (long long)shape[2] : 0LL, nd, esz, path,
            (long long)all);
  }
  LM_ASSERT_OK(lm_dist_tensor_destroy(&red));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&out));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&src));
  for (int m = 0; m < 2; ++m) {
    if (m < S.mnd && sid[m]) LM_ASSERT_OK(lm_extents_destroy(sid[m]));
    if (m < D.mnd && did[m]) LM_ASSERT_OK(lm_extents_destroy(did[m]));
  }
  return all == 0;
}

static void test_random_cyclic(void **state) {
  (void)state;
  olayout_t meshes[3];
  for (int k = 0; k < 3; ++k) make_mesh(&meshes[k], k);
  const char *s = getenv("LM_SEED"), *c = getenv("LM_CASE"), *n = getenv("LM_CYCLIC_CASES");
  uint64_t seed = s ? strtoull(s, NULL, 10) : 20261205ull;
  int cases = n ? atoi(n) : 2000, first = 0, fails = 0;
  if (c) first = atoi(c), cases = first + 1;
  for (int ci = first; ci < cases; ++ci) fails += !one_case(seed, ci, meshes);
  if (ME == 0) printf("test_cyclic: %d random reshards checked element by element\n", cases - first);
  LM_ASSERT_ALL(fails == 0);
  for (int k = 0; k < 3; ++k) LM_ASSERT_OK(lm_mesh_destroy(&meshes[k].mesh));
}


/* ----------------------------------------------------------------------------- directed */
/* Rows of a page and more (f64 x 700): the pieces the MPI transport moves straight between the
 * two processes' buffers (pieces_direct: one kernel copy, no packing) where the message is large
 * enough for the node-local path (LM_NODE_LOCAL_MIN_BYTES; tests/script_node_local.sh runs this at
 * 1 byte), packed otherwise; block-cyclic rows to and from Shard, Replicate and another block size,
 * on the 1-D and reversed meshes, through the reshard, plan and nonblocking paths. */
static void test_wide_rows(void **state) {
  (void)state;
  olayout_t meshes[2];
  make_mesh(&meshes[0], 0);
  make_mesh(&meshes[1], 2);
  const int64_t shape[2] = {13, 700};
  const DLDataType f64 = {kDLFloat, 64, 1};
  const lm_placement_t others[4] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_REPLICATE,
                                    LM_PLACEMENT_BLOCK_CYCLIC(0, 3, 0),
                                    LM_PLACEMENT_BLOCK_CYCLIC(0, 1, 1 % NP)};
  int64_t bad = 0;
  for (int k = 0; k < 24; ++k) {
    olayout_t S = meshes[k % 2], D = meshes[(k / 2) % 2];
    S.pl[0] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(0, 2, (k / 4) % NP);
    D.pl[0] = others[(k / 4) % 4];
    if (k % 8 >= 4) { /* the way back */
      const lm_placement_t t = S.pl[0];
      S.pl[0] = D.pl[0];
      D.pl[0] = t;
    }
    lm_dist_tensor_t x = NULL;
    LM_ASSERT_OK(lm_dist_tensor_zeros(&x, S.mesh, 2, shape, f64, (DLDevice){kDLCPU, 0}, S.pl));
    walk(x, &S, 2, shape, 8, 1);
    lm_dist_tensor_t y = run_path(x, &S, &D, 2, shape, f64, k % 3);
    const int64_t b = walk(y, &D, 2, shape, 8, 0);
    if (b) fprintf(stderr, "rank %d: wide rows case %d: %lld wrong\n", ME, k, (long long)b);
    bad += b;
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  }
  LM_ASSERT_ALL(bad == 0);
  LM_ASSERT_OK(lm_mesh_destroy(&meshes[0].mesh));
  LM_ASSERT_OK(lm_mesh_destroy(&meshes[1].mesh));
}

static void test_refusals_and_format(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh(), m2 = NULL;
  lm_dist_tensor_t t = NULL;
  int64_t g[2] = {7, 3}, s2[2] = {1, NP};
  DLDataType f64 = {kDLFloat, 64, 1};
  DLDevice cpu = {kDLCPU, 0};
  lm_placement_t p = LM_PLACEMENT_BLOCK_CYCLIC(0, 0, 0);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "placements[0]: BlockCyclic block 0 must be >= 1");
  p = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(0, 2, NP);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "source coordinate");
  p = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(2, 2, 0);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "BlockCyclic dim 2 out of range");
  LM_ASSERT_OK_ALL(lm_mesh_create(&m2, lm_test_comm_f(), 2, s2, NULL));
  lm_placement_t q[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 0)};
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m2, 2, g, f64, cpu, q), LM_ERR_INVALID_ARGUMENT,
                "the only mesh dim splitting tensor dim 0");
  lm_placement_t f[2] = {LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 0), LM_PLACEMENT_BLOCK_CYCLIC(1, 3, 1)};
  char buf[64];
  LM_ASSERT_OK(lm_placements_format(f, 2, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[BC(0, 2), BC(1, 3, 1)]") == 0);
  LM_ASSERT_OK(lm_mesh_destroy(&m2));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* Block-cyclic beside Partial on a 2-D mesh: sources reduced in place over the Partial dim, targets
 * filled after the pieces, Partial -> Partial; every element checked after reducing the target. */
static void test_partial_beside(void **state) {
  (void)state;
  olayout_t L;
  make_mesh(&L, 1);
  const int64_t P1 = L.mshape[1], shape[2] = {11, 6};
  const lm_placement_t PS = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), R = LM_PLACEMENT_REPLICATE;
  const lm_placement_t cases[][4] = {
      {PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 4, 1 % P1), R, R}, /* NUMROC != torch.chunk extents */
      {PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 3, 0), LM_PLACEMENT_SHARD(0), R},
      {PS, LM_PLACEMENT_BLOCK_CYCLIC(1, 1, 0), R, LM_PLACEMENT_BLOCK_CYCLIC(0, 3, P1 - 1)},
      {R, R, PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 0)},
      {LM_PLACEMENT_SHARD(1), R, PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 4, 1 % P1)},
      {PS, LM_PLACEMENT_BLOCK_CYCLIC(1, 2, 0), PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 3, 0)},
      {LM_PLACEMENT_BLOCK_CYCLIC(1, 2, 0), PS, LM_PLACEMENT_BLOCK_CYCLIC(0, 1, 0), R},
  };
  const DLDataType f64 = {kDLFloat, 64, 1};
  int64_t bad = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
    olayout_t S = L, D = L, C = L;
    S.pl[0] = cases[k][0];
    S.pl[1] = cases[k][1];
    D.pl[0] = C.pl[0] = cases[k][2];
    D.pl[1] = C.pl[1] = cases[k][3];
    for (int m = 0; m < 2; ++m)
      if (C.pl[m].kind == LM_PARTIAL) C.pl[m] = R;
    lm_dist_tensor_t x = NULL, y = NULL, z = NULL;
    LM_ASSERT_OK(lm_dist_tensor_zeros(&x, L.mesh, 2, shape, f64, (DLDevice){kDLCPU, 0}, S.pl));
    walk(x, &S, 2, shape, 8, 1);
    y = run_path(x, &S, &D, 2, shape, f64, (int)(k % 3));
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&z, y, NULL, C.pl));
    const int64_t b = walk(z, &C, 2, shape, 8, 0);
    if (b) fprintf(stderr, "rank %d: Partial beside block-cyclic, case %zu: %lld wrong\n", ME, k,
                   (long long)b);
    bad += b;
    LM_ASSERT_OK(lm_dist_tensor_destroy(&z));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  }
  LM_ASSERT_ALL(bad == 0);
  LM_ASSERT_OK(lm_mesh_destroy(&L.mesh));
}

/* Grouped reshards with block-cyclic entries between coalesced ones (each block-cyclic entry
 * runs its own plan in the group's order): lm_reshard_group_execute, _start and a group made,
 * allocated, executed and destroyed at once (the bindings' reshard_many), every element of every
 * target checked. */
static void test_group(void **state) {
  (void)state;
  olayout_t L;
  make_mesh(&L, 0);
  enum { N = 5 };
  const int64_t shapes[N][2] = {{9, 4}, {11, 3}, {7, 7}, {0, 5}, {13, 2}};
  const lm_placement_t src[N] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_BLOCK_CYCLIC(0, 3, 0),
                                 LM_PLACEMENT_SHARD(1), LM_PLACEMENT_BLOCK_CYCLIC(1, 2, NP - 1),
                                 LM_PLACEMENT_SHARD(0)};
  const lm_placement_t dst[N] = {LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 1 % NP), LM_PLACEMENT_SHARD(0),
                                 LM_PLACEMENT_REPLICATE, LM_PLACEMENT_SHARD(0),
                                 LM_PLACEMENT_BLOCK_CYCLIC(0, 1, 0)};
  const DLDataType f64 = {kDLFloat, 64, 1};
  lm_reshard_entry_t e[N];
  lm_dist_tensor_t x[N], y[N], z[N];
  for (int i = 0; i < N; ++i) {
    e[i] = (lm_reshard_entry_t){2, shapes[i], f64, &src[i], &dst[i]};
    olayout_t S = L;
    S.pl[0] = src[i];
    LM_ASSERT_OK(lm_dist_tensor_zeros(&x[i], L.mesh, 2, shapes[i], f64, (DLDevice){kDLCPU, 0}, &src[i]));
    walk(x[i], &S, 2, shapes[i], 8, 1);
  }
  lm_reshard_group_t grp = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&grp, L.mesh, NULL, N, e, NULL));
  LM_ASSERT_OK(lm_reshard_group_alloc_targets(y, grp, (DLDevice){kDLCPU, 0}, N));
  int64_t bad = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      LM_ASSERT_OK_ALL(lm_reshard_group_execute(grp, N, x, y));
    } else {
      lm_request_t rq = NULL;
      LM_ASSERT_OK_ALL(lm_reshard_group_start(&rq, grp, N, x, y));
      LM_ASSERT_OK_ALL(lm_request_wait(&rq));
    }
    for (int i = 0; i < N; ++i) {
      olayout_t D = L;
      D.pl[0] = dst[i];
      bad += walk(y[i], &D, 2, shapes[i], 8, 0);
    }
  }
  lm_reshard_group_t once = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&once, L.mesh, NULL, N, e, NULL));
  LM_ASSERT_OK(lm_reshard_group_alloc_targets(z, once, (DLDevice){kDLCPU, 0}, N));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(once, N, x, z));
  LM_ASSERT_OK(lm_reshard_group_destroy(&once));
  for (int i = 0; i < N; ++i) {
    olayout_t D = L;
    D.pl[0] = dst[i];
    bad += walk(z[i], &D, 2, shapes[i], 8, 0);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&z[i]));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y[i]));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&x[i]));
  }
  LM_ASSERT_ALL(bad == 0);
  LM_ASSERT_OK(lm_reshard_group_destroy(&grp));
  LM_ASSERT_OK(lm_mesh_destroy(&L.mesh));
}

/* ScaLAPACK's 2-D layout (MB = 3, NB = 2, RSRC = 1 where the grid has rows) of a 13 x 10 matrix:
 * from_global, from_local borrowed (every shape mode), local offsets, gather, and a reshard to
 * row shards [S(0), R] whose bytes are counted from the oracle. */
static void test_scalapack_layout(void **state) {
  (void)state;
  olayout_t L;
  make_mesh(&L, 1);
  const int64_t M = 13, N = 10, shape[2] = {M, N};
  const int rsrc = L.mshape[0] > 1 ? 1 : 0;
  L.pl[0] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(0, 3, rsrc);
  L.pl[1] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(1, 2, 0);
  DLDataType f64 = {kDLFloat, 64, 1};
  double *full = (double *)malloc(sizeof(double) * (size_t)(M * N));
  for (int64_t i = 0; i < M * N; ++i) full[i] = (double)i;
  int64_t gs[2] = {M, N};
  DLTensor gt = {full, {kDLCPU, 0}, 2, f64, gs, NULL, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, L.mesh, &gt, L.pl, 0));
  LM_ASSERT_ALL(walk(t, &L, 2, shape, 8, 0) == 0);
  int64_t c[2], off[2];
  my_coord(&L, c);
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  LM_ASSERT_ALL(off[0] == (o_len(&L, c, 0, M) ? o_glob(&L, c, 0, M, 0) : M) &&
                off[1] == (o_len(&L, c, 1, N) ? o_glob(&L, c, 1, N, 0) : N));
  /* Borrow a local array laid out as ScaLAPACK's (row-major here). */
  int64_t ls[2] = {o_len(&L, c, 0, M), o_len(&L, c, 1, N)};
  double *mine = (double *)malloc(sizeof(double) * (size_t)(ls[0] * ls[1] + 1));
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < ls[1]; ++j)
      mine[i * ls[1] + j] = (double)(o_glob(&L, c, 0, M, i) * N + o_glob(&L, c, 1, N, j));
  DLTensor lt = {mine, {kDLCPU, 0}, 2, f64, ls, NULL, 0};
  double *back = (double *)calloc((size_t)(M * N), sizeof(double));
  DLTensor bt = {back, {kDLCPU, 0}, 2, f64, gs, NULL, 0};
  const lm_shape_mode_t modes[2] = {LM_SHAPE_GIVEN, LM_SHAPE_ALLGATHER};
  for (int k = 0; k < 2; ++k) {
    lm_dist_tensor_t b = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&b, L.mesh, &lt, L.pl, modes[k], gs,
                                               LM_FROM_LOCAL_BORROW));
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(b, &v));
    LM_ASSERT_ALL(v.data == (void *)mine);
    memset(back, 0, sizeof(double) * (size_t)(M * N));
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather(b, -1, &bt));
    LM_ASSERT_ALL(memcmp(back, full, sizeof(double) * (size_t)(M * N)) == 0);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&b));
  }
  /* To row shards: every element goes to the pc ranks of its row block, but not to myself. */
  olayout_t R = L;
  R.pl[0] = (lm_placement_t)LM_PLACEMENT_SHARD(0);
  R.pl[1] = (lm_placement_t)LM_PLACEMENT_REPLICATE;
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&plan, L.mesh, L.pl, NULL, R.pl, 2, shape, f64));
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  int64_t want = 0, rb = (M + L.mshape[0] - 1) / L.mshape[0];
  for (int64_t i = 0; i < ls[0]; ++i) {
    int64_t row_owner = o_glob(&L, c, 0, M, i) / rb; /* mesh row holding this row */
    want += (L.mshape[1] - (row_owner == c[0])) * ls[1] * 8;
  }
  LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &info));
  LM_ASSERT_ALL(info.bytes_sent == want);
  lm_dist_tensor_t rows = NULL;
  LM_ASSERT_OK(lm_reshard_plan_alloc_target(&rows, plan, (DLDevice){kDLCPU, 0}));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, t, rows));
  LM_ASSERT_ALL(walk(rows, &R, 2, shape, 8, 0) == 0);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&rows));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  free(back);
  free(mine);
  free(full);
  LM_ASSERT_OK(lm_mesh_destroy(&L.mesh));
}

/* lm_dist_tensor_from_scalapack / _scalapack_desc: random descriptors on the 2-D mesh, a local
 * array filled column-major at ScaLAPACK's positions (A(i, j) at i + j * LLD, global indices from
 * this file's INDXL2G), its padding rows (LLD > LOCr) holding a sentinel. Borrowed without a copy
 * (LLD = max(1, LOCr), or padded: the view then has strides {LLD, 1}) or copied; every element
 * checked in the tensor [N, M]; the descriptor read back (a padded borrow keeps its LLD); gathered
 * to every rank; resharded to row shards and back into a borrowed array by a plan (blocking,
 * nonblocking, or a group of one: `path`), its padding untouched; the refusals name the entry. */
static int64_t desc_case(olayout_t *L, int pad, int borrow, int path) {
  const int M = rndi(30), N = rndi(30), mb = 1 + rndi(5), nb = 1 + rndi(5);
  const int rs = rndi((int)L->mshape[0]), cs = rndi((int)L->mshape[1]);
  L->pl[0] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(1, mb, rs);
  L->pl[1] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(0, nb, cs);
  const int64_t shape[2] = {N, M};
  int64_t c[2];
  my_coord(L, c);
  const int64_t locc = o_len(L, c, 0, N), locr = o_len(L, c, 1, M);
  const int lld = (int)(locr > 1 ? locr : 1) + pad;
  int desc[LM_SCALAPACK_DLEN] = {1, 7, M, N, mb, nb, rs, cs, lld}, back[LM_SCALAPACK_DLEN];
  double *a = (double *)calloc((size_t)(lld * (locc ? locc : 1)), sizeof(double));
  for (int64_t j = 0; j < locc; ++j)
    for (int64_t i = 0; i < lld; ++i)
      a[i + j * lld] = i < locr ? (double)(o_glob(L, c, 0, N, j) * M + o_glob(L, c, 1, M, i)) : -7;
  const DLDataType f64 = {kDLFloat, 64, 1};
  const DLDevice cpu = {kDLCPU, 0};
  const int strided = pad && locr > 0 && locc > 1; /* rows of the array really padded */
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_scalapack(&t, L->mesh, desc, a, f64, cpu,
                                                 borrow ? LM_FROM_LOCAL_BORROW : LM_FROM_LOCAL_COPY));
  int64_t bad = walk(t, L, 2, shape, 8, 0);
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  if (borrow) bad += v.data != (void *)a;
  if (borrow && strided) bad += !v.strides || v.strides[0] != lld || v.strides[1] != 1;
  else bad += v.strides != NULL;
  LM_ASSERT_OK(lm_dist_tensor_to_scalapack(t, 7, back));
  desc[8] = borrow && strided ? lld : (int)(locr > 1 ? locr : 1); /* else its own array: compact */
  bad += memcmp(back, desc, sizeof desc) != 0;
  desc[8] = lld;
  /* Gathered to every rank: element (j, i) of [N, M] is j * M + i. */
  double *full = (double *)malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
  int64_t fs[2] = {N, M};
  DLTensor ft = {full, {kDLCPU, 0}, 2, f64, fs, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &ft));
  for (int64_t e = 0; e < (int64_t)M * N; ++e) bad += full[e] != (double)e;
  free(full);
  /* Row shards of the matrix (tensor dim 1 over both mesh dims) and back into a borrowed array. */
  lm_placement_t rows[2] = {LM_PLACEMENT_SHARD(1), LM_PLACEMENT_SHARD(1)};
  rows[1].order = 1;
  lm_dist_tensor_t r = NULL, dst = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, rows));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t)); /* (a copied t's storage is its own) */
  for (int64_t j = 0; j < locc; ++j)
    for (int64_t i = 0; i < locr; ++i) a[i + j * lld] = -1;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_scalapack(&dst, L->mesh, desc, a, f64, cpu,
                                                 LM_FROM_LOCAL_BORROW));
  if (path < 2) {
    lm_reshard_plan_t plan = NULL;
    LM_ASSERT_OK(lm_reshard_plan_create(&plan, L->mesh, rows, NULL, L->pl, 2, shape, f64));
    if (path == 0) {
      LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, r, dst));
    } else {
      lm_request_t q = NULL;
      LM_ASSERT_OK_ALL(lm_reshard_plan_start(&q, plan, r, dst));
      LM_ASSERT_OK_ALL(lm_request_wait(&q));
    }
    LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  } else {
    lm_reshard_entry_t e = {2, shape, f64, rows, L->pl};
    lm_reshard_group_t g = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, L->mesh, NULL, 1, &e, NULL));
    LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, 1, &r, &dst));
    LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  }
  for (int64_t j = 0; j < locc; ++j)
    for (int64_t i = 0; i < lld; ++i)
      bad += a[i + j * lld] !=
             (i < locr ? (double)(o_glob(L, c, 0, N, j) * M + o_glob(L, c, 1, M, i)) : -7);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&dst));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&r));
  free(a);
  return bad;
}

static void test_scalapack_desc(void **state) {
  (void)state;
  olayout_t L;
  make_mesh(&L, 1);
  rng_state = 21;
  int64_t bad = 0;
  for (int k = 0; k < 60; ++k) {  /* padded and borrowed, padded and copied, compact borrowed */
    const int64_t b = desc_case(&L, k % 3 != 0 ? 3 : 0, k % 3 != 2, (k / 3) % 3);
    if (b) fprintf(stderr, "rank %d: ScaLAPACK case %d: %lld wrong\n", ME, k, (long long)b);
    bad += b;
  }
  LM_ASSERT_ALL(bad == 0);
  /* Refusals, each naming the entry. */
  const DLDataType f64 = {kDLFloat, 64, 1};
  const DLDevice cpu = {kDLCPU, 0};
  double x[64];
  lm_dist_tensor_t t = NULL;
  struct {
    int entry, value;
    lm_status_t code;
    const char *needle;
  } bads[] = {{0, 2, LM_ERR_NOT_SUPPORTED, "DTYPE_"}, {2, -1, LM_ERR_INVALID_ARGUMENT, "M_"},
              {5, 0, LM_ERR_INVALID_ARGUMENT, "NB_"}, {6, 99, LM_ERR_INVALID_ARGUMENT, "RSRC_"},
              {7, -1, LM_ERR_INVALID_ARGUMENT, "CSRC_"}, {8, 0, LM_ERR_INVALID_ARGUMENT, "LLD_"}};
  for (size_t k = 0; k < sizeof bads / sizeof bads[0]; ++k) {
    int desc[LM_SCALAPACK_DLEN] = {1, 0, 8, 8, 8, 8, 0, 0, 8}; /* all on coordinate (0, 0) */
    desc[bads[k].entry] = bads[k].value;
    if (bads[k].entry == 8 && ME != L.ranks[0]) desc[2] = desc[3] = 0; /* LLD 0 < 1 everywhere */
    LM_EXPECT_ALL(lm_dist_tensor_from_scalapack(&t, L.mesh, desc, x, f64, cpu,
                                                LM_FROM_LOCAL_BORROW),
                  bads[k].code, bads[k].needle);
  }
  int good[LM_SCALAPACK_DLEN] = {1, 0, 8, 8, 8, 8, 0, 0, 8};
  LM_EXPECT_ALL(lm_dist_tensor_from_scalapack(&t, L.mesh, NULL, x, f64, cpu, 0),
                LM_ERR_INVALID_ARGUMENT, "desc");
  LM_EXPECT_ALL(lm_dist_tensor_from_scalapack(&t, L.mesh, good, x, f64, cpu, 5),
                LM_ERR_INVALID_ARGUMENT, "flags");
  lm_mesh_t world = lm_test_world_mesh();
  LM_EXPECT_ALL(lm_dist_tensor_from_scalapack(&t, world, good, x, f64, cpu, 0),
                LM_ERR_INVALID_ARGUMENT, "2-D");
  LM_ASSERT_OK(lm_mesh_destroy(&world));
  /* Descriptors of other layouts: lone shards become one block per coordinate; the rest refuse. */
  const int64_t shape[2] = {5, 9};
  lm_placement_t sh[2] = {LM_PLACEMENT_SHARD(1), LM_PLACEMENT_SHARD(0)};
  int d[LM_SCALAPACK_DLEN];
  LM_ASSERT_OK(lm_dist_tensor_zeros(&t, L.mesh, 2, shape, f64, cpu, sh));
  LM_ASSERT_OK(lm_dist_tensor_to_scalapack(t, 3, d));
  const int64_t P = L.mshape[0], Q = L.mshape[1];
  LM_ASSERT_ALL(d[0] == 1 && d[1] == 3 && d[2] == 9 && d[3] == 5 && d[4] == (int)((9 + P - 1) / P) &&
                d[5] == (int)((5 + Q - 1) / Q) && d[6] == 0 && d[7] == 0);
  LM_EXPECT_ALL(lm_dist_tensor_to_scalapack(t, 0, NULL), LM_ERR_INVALID_ARGUMENT, "desc");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  lm_placement_t wrong[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  LM_ASSERT_OK(lm_dist_tensor_zeros(&t, L.mesh, 2, shape, f64, cpu, wrong));
  LM_EXPECT_ALL(lm_dist_tensor_to_scalapack(t, 0, d), LM_ERR_NOT_SUPPORTED, "placement");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  const int64_t s3[3] = {2, 2, 2};
  lm_placement_t rr[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
  LM_ASSERT_OK(lm_dist_tensor_zeros(&t, L.mesh, 3, s3, f64, cpu, rr));
  LM_EXPECT_ALL(lm_dist_tensor_to_scalapack(t, 0, d), LM_ERR_INVALID_ARGUMENT, "has 3 dims");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  /* A 1 x (NP - 1) grid with the last rank outside: it gets a placeholder and reads no data. */
  if (NP > 1) {
    lm_mesh_t g = NULL;
    const int in = ME < NP - 1;
    LM_ASSERT_OK_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), in ? 0 : -1, in ? ME : -1, NULL));
    double col[2] = {ME, ME + 0.5}, all[64];
    int one[LM_SCALAPACK_DLEN] = {1, 0, 2, NP - 1, 2, 1, 0, 0, 2};
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_scalapack(&t, g, one, in ? col : NULL, f64, cpu,
                                                   LM_FROM_LOCAL_BORROW));
    int64_t ls[2] = {-1, -1}, gs[2] = {NP - 1, 2};
    LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ls, 2));
    LM_ASSERT_ALL(in ? ls[0] == 1 && ls[1] == 2 : ls[0] == 0 && ls[1] == 0);
    DLTensor gt = {all, cpu, 2, f64, gs, NULL, 0};
    if (in) LM_ASSERT_OK(lm_dist_tensor_gather(t, 0, ME == 0 ? &gt : NULL)); /* members only */
    int bad = 0;
    for (int c = 0; ME == 0 && c < NP - 1; ++c) bad += all[2 * c] != c || all[2 * c + 1] != c + 0.5;
    LM_ASSERT_ALL(bad == 0);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
    LM_ASSERT_OK(lm_mesh_destroy(&g));
  }
  LM_ASSERT_OK(lm_mesh_destroy(&L.mesh));
}

/* lm_local_map on block-cyclic rows: an output laid out like its input (global shape agreed from
 * the local shapes: NUMROCs add up), and an input resharded to Shard(0) first. */
static void mt_free(DLManagedTensor *m) {
  free(m->dl_tensor.shape);
  free(m->dl_tensor.data);
  free(m);
}
static lm_status_t doubled(void *user, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)user, (void)mesh, (void)nin, (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *y = (DLManagedTensor *)calloc(1, sizeof *y);
  y->dl_tensor = *x;
  y->dl_tensor.shape = (int64_t *)malloc(2 * sizeof(int64_t));
  y->dl_tensor.shape[0] = x->shape[0];
  y->dl_tensor.shape[1] = x->shape[1];
  y->dl_tensor.strides = NULL;
  y->dl_tensor.byte_offset = 0;
  int64_t n = x->shape[0] * x->shape[1];
  y->dl_tensor.data = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; ++i)
    ((double *)y->dl_tensor.data)[i] = 2 * ((const double *)x->data)[i];
  y->deleter = mt_free;
  out[0] = lm_arg_managed(y);
  return LM_SUCCESS;
}

static void test_local_map(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int64_t g[2] = {11, 3};
  double full[33], got[33];
  for (int i = 0; i < 33; ++i) full[i] = (double)i;
  DLTensor gt = {full, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, NULL, 0}, bt = gt;
  bt.data = got;
  lm_placement_t bc = LM_PLACEMENT_BLOCK_CYCLIC(0, 2, NP - 1), s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t x = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, mesh, &gt, &bc, 0));
  lm_arg_t in[1] = {lm_arg_dist(x)}, out[1];
  const lm_placement_t *ip[1] = {&s0}, *opl[2][1] = {{&bc}, {&s0}};
  for (int k = 0; k < 2; ++k) {
    LM_ASSERT_OK_ALL(lm_local_map(doubled, NULL, 1, in, k ? ip : NULL, 1, opl[k], NULL, mesh,
                                  k ? LM_LOCAL_MAP_RESHARD_INPUTS : 0, out));
    lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
    lm_placement_t yp;
    int64_t gs[2] = {0, 0};
    LM_ASSERT_OK(lm_dist_tensor_placements(y, &yp, 1));
    LM_ASSERT_OK(lm_dist_tensor_global_shape(y, gs, 2));
    LM_ASSERT_ALL(yp.kind == (k ? LM_SHARD : LM_BLOCK_CYCLIC) && gs[0] == 11 && gs[1] == 3);
    memset(got, 0, sizeof got);
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather(y, -1, &bt));
    int ok = 1;
    for (int i = 0; i < 33; ++i) ok = ok && got[i] == 2 * full[i];
    LM_ASSERT_ALL(ok);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  }
  /* Without the reshard flag a block-cyclic input is refused where Shard(0) is required. */
  LM_EXPECT_ALL(lm_local_map(doubled, NULL, 1, in, ip, 1, opl[1], NULL, mesh, 0, out),
                LM_ERR_INVALID_ARGUMENT, "BC(0, 2");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* Rows of 32 KiB (BC(0, 2) -> Shard(0) on the world mesh: direct pieces, node-local messages at
 * the default LM_NODE_LOCAL_MIN_BYTES): the rows this rank
 * receives are read once by the kernel ("kernel": no arena), or not by the kernel at all
 * ("mapped": the source shards lie in the senders' arenas, read with memcpy through windows of
 * them). Descriptors travel over MPI. With simulated nodes (LM_TEST_NODES) only the results are
 * checked: the other node's rows go over MPI, whose own single copy counts here too. */
static void test_rows_in_place(void **state) {
  (void)state;
  const char *expect = getenv("LM_TEST_EXPECT_PIECES");
  const int kernel = expect && strcmp(expect, "kernel") == 0;
  if (NP < 2 || !expect || (!kernel && strcmp(expect, "mapped") != 0))
    lm_test_skip("needs 2 ranks and LM_TEST_EXPECT_PIECES=kernel|mapped");
  olayout_t S, D;
  make_mesh(&S, 0);
  D = S;
  const int64_t shape[2] = {4 * NP + 3, 4096}, blk = (shape[0] + NP - 1) / NP;
  S.pl[0] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 0);
  D.pl[0] = (lm_placement_t)LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, S.mesh, 2, shape, (DLDataType){kDLFloat, 64, 1},
                                        (DLDevice){kDLCPU, 0}, S.pl));
  walk(x, &S, 2, shape, 8, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  g_vm_bytes = 0;
  g_vm_counting = 1;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, S.mesh, D.pl));
  g_vm_counting = 0;
  const int64_t bad = walk(y, &D, 2, shape, 8, 0);
  long long recv = 0; /* rows of my Shard(0) block held by another coordinate */
  for (int64_t i = ME * blk; i < shape[0] && i < (ME + 1) * blk; ++i)
    if ((i / 2) % NP != ME) recv += 4096 * 8;
  const char *tn = getenv("LM_TEST_NODES");
  const int counted = !(tn && atoi(tn) > 1);
  const int in_place = !counted || g_vm_bytes == (kernel ? recv : 0);
  if (bad || !in_place)
    lm_test__diag("rank %d: %s: kernel read %lld bytes, %lld received; %lld wrong\n", ME, expect,
                  g_vm_bytes, recv, (long long)bad);
  LM_ASSERT_ALL(bad == 0 && in_place);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&S.mesh));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_local_map),
    cmocka_unit_test(test_refusals_and_format),
    cmocka_unit_test(test_scalapack_layout),
    cmocka_unit_test(test_scalapack_desc),
    cmocka_unit_test(test_random_cyclic),
    cmocka_unit_test(test_wide_rows),
    cmocka_unit_test(test_group),
    cmocka_unit_test(test_partial_beside),
};

/* test_rows_in_place belongs to the suite where the node-local suite asks for it
 * (LM_TEST_EXPECT_PIECES, tests/script_node_local.sh); elsewhere it is not part of it, not a skip. */
LM_TEST_MAIN_WITH(tests, "LM_TEST_EXPECT_PIECES", test_rows_in_place)
