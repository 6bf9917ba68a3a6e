/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_transpose: lm_dist_tensor_transpose (numpy.transpose of a dist tensor, laid out anew).
 *
 * test_random_transposes: random 1-D to 3-D tensors (extents 0 to 9), random permutations, random
 * source and target placements (Shard, Replicate, Partial(sum), block-cyclic with any block and
 * source coordinate) on the 1-D world mesh, a 2-D mesh and the reversed world (cross-mesh). The
 * source is made from the full tensor (element i holds i), the result gathered to every rank and
 * checked element by element against the permutation computed here. `LM_SEED=s LM_CASE=c`
 * replays one case; LM_TRANSPOSE_CASES sets the count.
 * The directed tests pin a matrix transpose between row shards, the refusals (perm, placements),
 * the agreement on perm, a padded borrow as the source, and the transposition fused into the
 * reshard's copies for every element size (test_fused_dtypes), and lm_dist_tensor_transpose_into
 * (test_into: library-made, cross-mesh and padded targets, refusals).
 */
// lm-test-np: 1 2 3 4 8
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"
#include "lm_rng.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static const DLDataType kF64 = {kDLFloat, 64, 1};

typedef struct {
  lm_mesh_t mesh;
  int nd;
} tmesh_t;

static tmesh_t make_mesh(int kind) {
  tmesh_t t = {NULL, 1};
  int ranks[64];
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  int64_t shape[2] = {NP, 1};
  for (int i = 0; i < NP; ++i) ranks[i] = kind == 2 ? NP - 1 - i : i;
  if (kind == 1) { /* 2-D: the largest factor <= sqrt(NP) rows */
    int a = 1;
    for (int f = 1; f * f <= NP; ++f)
      if (NP % f == 0) a = f;
    shape[0] = a;
    shape[1] = NP / a;
    t.nd = 2;
  }
  cfg.ranks = ranks;
  cfg.nranks = NP;
  LM_ASSERT_OK_ALL(lm_mesh_create(&t.mesh, lm_test_comm_f(), t.nd, shape, &cfg));
  return t;
}

/* One placement per mesh dim: Replicate, Partial(sum), or a split of a tensor dim no other mesh
 * dim splits (Shard, or BlockCyclic with block 1-3 from any coordinate of that mesh dim). */
static void random_placements(lm_placement_t *pl, const tmesh_t *m, int ndim) {
  int used[4] = {0, 0, 0, 0};
  int64_t ms[2];
  LM_ASSERT_OK(lm_mesh_shape(m->mesh, ms, m->nd));
  for (int k = 0; k < m->nd; ++k) {
    const int r = rndi(4), d = ndim ? rndi(ndim) : 0;
    if (r == 0 || ndim == 0 || used[d]) {
      pl[k] = (lm_placement_t)LM_PLACEMENT_REPLICATE;
    } else if (r == 1) {
      pl[k] = (lm_placement_t)LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
    } else if (r == 2) {
      pl[k] = (lm_placement_t)LM_PLACEMENT_SHARD(d);
      used[d] = 1;
    } else {
      pl[k] = (lm_placement_t)LM_PLACEMENT_BLOCK_CYCLIC(d, 1 + rndi(3), rndi((int)ms[k]));
      used[d] = 1;
    }
  }
}

/* The number of wrong elements of transpose(full, perm) gathered from out (or 1 on a failure). */
static int64_t check_out(lm_dist_tensor_t out, const double *full, int nd, const int64_t *shape,
                         const int *perm) {
  int64_t oshape[3], n = 1, bad = 0;
  for (int d = 0; d < nd; ++d) n *= (oshape[d] = shape[perm[d]]);
  double *got = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
  DLTensor g = {got, {kDLCPU, 0}, nd, kF64, oshape, NULL, 0};
  if (lm_dist_tensor_gather(out, -1, &g) != LM_SUCCESS) {
    free(got);
    return 1;
  }
  for (int64_t e = 0; e < n; ++e) {
    int64_t i[3], j[3], src = 0;
    for (int d = nd - 1, r = (int)e; d >= 0; --d) {
      i[d] = r % oshape[d];
      r /= (int)oshape[d];
    }
    for (int d = 0; d < nd; ++d) j[perm[d]] = i[d];
    for (int d = 0; d < nd; ++d) src = src * shape[d] + j[d];
    bad += got[e] != full[src];
  }
  free(got);
  return bad;
}

static int64_t one_case(const tmesh_t *meshes, uint64_t seed, int ci) {
  rng_state = seed;
  const int nd = 1 + rndi(3);
  int64_t shape[3] = {1, 1, 1}, n = 1;
  for (int d = 0; d < nd; ++d) n *= (shape[d] = rndi(10));
  int perm[3] = {0, 1, 2};
  for (int d = nd - 1; d > 0; --d) { /* Fisher-Yates */
    const int k = rndi(d + 1), t = perm[d];
    perm[d] = perm[k];
    perm[k] = t;
  }
  const tmesh_t *S = &meshes[rndi(2)], *D = &meshes[rndi(3)];
  lm_placement_t sp[2], dp[2];
  random_placements(sp, S, nd);
  random_placements(dp, D, nd);
  double *full = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t e = 0; e < n; ++e) full[e] = (double)e;
  DLTensor ft = {full, {kDLCPU, 0}, nd, kF64, shape, NULL, 0};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, S->mesh, &ft, sp, -1));
  lm_status_t st = lm_dist_tensor_transpose(&y, x, perm, D->mesh, dp);
  int64_t bad = st != LM_SUCCESS ? 1 : check_out(y, full, nd, shape, perm);
  if (bad) {
    char a[128], b[128];
    (void)!lm_placements_format(sp, S->nd, a, sizeof a);
    (void)!lm_placements_format(dp, D->nd, b, sizeof b);
    fprintf(stderr, "rank %d: LM_SEED=%llu LM_CASE=%d: [%lld %lld %lld] (nd %d) perm [%d %d %d] "
            "%s -> %s: %s, %lld wrong\n", ME, (unsigned long long)seed, ci, (long long)shape[0],
            (long long)shape[1], (long long)shape[2], nd, perm[0], perm[1], perm[2], a, b,
            st ? lm_last_error_message() : "ok", (long long)bad);
  }
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  free(full);
  return bad;
}

static void test_random_transposes(void **state) {
  (void)state;
  tmesh_t meshes[3] = {make_mesh(0), make_mesh(1), make_mesh(2)};
  const char *cs = getenv("LM_TRANSPOSE_CASES"), *ss = getenv("LM_SEED"), *c1 = getenv("LM_CASE");
  const int cases = cs ? atoi(cs) : 150;
  const uint64_t base = ss ? strtoull(ss, NULL, 10) : 20261205;
  int64_t bad = 0;
  for (int c = 0; c < cases; ++c) {
    if (c1 && atoi(c1) != c) continue;
    bad += one_case(meshes, base * 1000003u + (uint64_t)c, c);
  }
  if (ME == 0) printf("test_transpose: %d random transposes checked element by element\n", cases);
  LM_ASSERT_ALL(bad == 0);
  for (int k = 0; k < 3; ++k) LM_ASSERT_OK(lm_mesh_destroy(&meshes[k].mesh));
}

/* A 5 x 7 matrix in row shards -> its 7 x 5 transpose in row shards: each rank's rows are the
 * matrix's columns; and back, the original again. */
static void test_matrix_rows(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  int64_t shape[2] = {5, 7};
  double full[35];
  for (int e = 0; e < 35; ++e) full[e] = e;
  DLTensor ft = {full, {kDLCPU, 0}, 2, kF64, shape, NULL, 0};
  const lm_placement_t rows[1] = {LM_PLACEMENT_SHARD(0)};
  const int perm[2] = {1, 0};
  lm_dist_tensor_t a = NULL, at = NULL, back = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&a, m, &ft, rows, -1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&at, a, perm, NULL, rows));
  int64_t g[2], ls[2], lo[2];
  LM_ASSERT_OK(lm_dist_tensor_global_shape(at, g, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(at, ls, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(at, lo, 2));
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(at, &v));
  int ok = g[0] == 7 && g[1] == 5 && ls[1] == 5;
  for (int64_t i = 0; i < ls[0]; ++i) /* local row i is matrix column lo[0] + i */
    for (int j = 0; j < 5; ++j) ok &= ((double *)v.data)[i * 5 + j] == full[j * 7 + lo[0] + i];
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&back, at, perm, NULL, rows));
  LM_ASSERT_ALL(check_out(back, full, 2, shape, (const int[]){0, 1}) == 0);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&at));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&a));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Wrong elements of out (gathered) against full (esize-byte elements, extents shape) with its
 * dims permuted by perm. */
static int64_t check_bytes(lm_dist_tensor_t out, const unsigned char *full, int nd,
                           const int64_t *shape, const int *perm, DLDataType dt) {
  const size_t es = (size_t)dt.bits / 8;
  int64_t oshape[3], n = 1, bad = 0;
  for (int d = 0; d < nd; ++d) n *= (oshape[d] = shape[perm[d]]);
  unsigned char *got = (unsigned char *)malloc(es * (size_t)n + 1);
  DLTensor g = {got, {kDLCPU, 0}, nd, dt, oshape, NULL, 0};
  if (lm_dist_tensor_gather(out, -1, &g) != LM_SUCCESS) {
    free(got);
    return 1;
  }
  for (int64_t e = 0; e < n; ++e) {
    int64_t i[3], j[3], src = 0, r = e;
    for (int d = nd - 1; d >= 0; --d) {
      i[d] = r % oshape[d];
      r /= oshape[d];
    }
    for (int d = 0; d < nd; ++d) j[perm[d]] = i[d];
    for (int d = 0; d < nd; ++d) src = src * shape[d] + j[d];
    bad += memcmp(got + (size_t)e * es, full + (size_t)src * es, es) != 0;
  }
  free(got);
  return bad;
}

/* The transposition fused into the reshard (its plan writes the target through permuted strides:
 * copies, staged receives and block-cyclic pieces) for every element size (uint8, bf16, f32, f64,
 * complex128), 2-D and 3-D, from row, column, block-cyclic and replicated sources, every byte
 * checked; the unfused path (a Partial target: the reduce-scatter writes a compact output, then
 * the local pass) alongside. A replicated source moves nothing: the fused transpose then takes
 * the pool memory of its result only, where reshard-then-permute takes twice that. */
static void test_fused_dtypes(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  const DLDataType dts[5] = {{kDLUInt, 8, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 1}, kF64,
                             {kDLComplex, 128, 1}};
  const lm_placement_t srcs[4] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1),
                                  LM_PLACEMENT_BLOCK_CYCLIC(0, 3, 0), LM_PLACEMENT_REPLICATE};
  const lm_placement_t dsts[3] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_BLOCK_CYCLIC(1, 2, 0),
                                  LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  int64_t bad = 0;
  for (int nd = 2; nd <= 3; ++nd) {
    const int64_t s2[2] = {NP * 9 + 4, 37}, s3[3] = {5, NP * 3 + 2, 7};
    const int64_t *shape = nd == 2 ? s2 : s3;
    const int p2[2] = {1, 0}, p3[3] = {2, 0, 1};
    const int *perm = nd == 2 ? p2 : p3;
    int64_t n = 1;
    for (int d = 0; d < nd; ++d) n *= shape[d];
    for (int k = 0; k < 5; ++k) {
      const size_t es = (size_t)dts[k].bits / 8;
      unsigned char *full = (unsigned char *)malloc(es * (size_t)n);
      for (size_t b = 0; b < es * (size_t)n; ++b) full[b] = (unsigned char)(b * 7 + b / es * 13 + 1);
      DLTensor ft = {full, {kDLCPU, 0}, nd, dts[k], (int64_t *)shape, NULL, 0};
      for (int a = 0; a < 4; ++a)
        for (int c = 0; c < 3; ++c) {
          if (c == 2 && (dts[k].code != kDLFloat || a != 3)) continue; /* sums: floats, from R */
          lm_dist_tensor_t x = NULL, y = NULL;
          LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, m, &ft, &srcs[a], -1));
          LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&y, x, perm, NULL, &dsts[c]));
          lm_dist_tensor_t z = NULL; /* a Partial result: its sum, replicated, is the transpose */
          if (c == 2) {
            const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
            LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&z, y, NULL, rep));
          }
          /* (A Partial result is compared at np 1, where its sum has one term and keeps every
           * bit; the random suite checks Partial targets at every np with exact values.) */
          const int64_t b =
              c == 2 && NP > 1 ? 0 : check_bytes(c == 2 ? z : y, full, nd, shape, perm, dts[k]);
          if (b)
            fprintf(stderr, "rank %d: %d-d, %zu-byte elements, source %d, target %d: %lld wrong\n",
                    ME, nd, es, a, c, (long long)b);
          bad += b;
          LM_ASSERT_OK(lm_dist_tensor_destroy(&z));
          LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
          LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
        }
      free(full);
    }
  }
  LM_ASSERT_ALL(bad == 0);
  /* Long runs (140 and 600 f64 per rank and row, 57 KiB or more per peer: past
   * LM_NODE_LOCAL_MIN_BYTES): messages and pieces a transport would otherwise land in place
   * (contiguous receives; node-local pieces, placed from 512-byte runs and read straight from the
   * sender's array from a page on) go through staging here, the same transfer for the sender. */
  for (int a = 0; a < 6; ++a) {
    const int64_t wide[2] = {a < 3 ? NP * 60 + 3 : NP * 12 + 3, NP * (a < 3 ? 140 : 600)};
    const int64_t n = wide[0] * wide[1];
    double *full = (double *)malloc(sizeof(double) * (size_t)n);
    for (int64_t e = 0; e < n; ++e) full[e] = (double)e;
    DLTensor ft = {full, {kDLCPU, 0}, 2, kF64, (int64_t *)wide, NULL, 0};
    const lm_placement_t from[3] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_BLOCK_CYCLIC(0, 5, 0),
                                    LM_PLACEMENT_SHARD(1)};
    const int f = a % 3;
    const lm_placement_t rows[1] = {LM_PLACEMENT_SHARD(0)};
    const int perm[2] = {1, 0};
    lm_dist_tensor_t x = NULL, y = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, m, &ft, &from[f], -1));
    LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&y, x, perm, NULL, rows));
    const int64_t b = check_bytes(y, (const unsigned char *)full, 2, wide, perm, kF64);
    if (b) fprintf(stderr, "rank %d: long runs from source %d: %lld wrong\n", ME, a, (long long)b);
    LM_ASSERT_ALL(b == 0);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
    free(full);
  }
  /* Pool memory: a replicated [NP * 40 + 3, 301] f64 matrix into row shards of its transpose. */
  const int64_t big[2] = {NP * 40 + 3, 301};
  const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE}, rows[1] = {LM_PLACEMENT_SHARD(0)};
  const int perm[2] = {1, 0};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, big, kF64, (DLDevice){kDLCPU, 0}, rep));
  int64_t in_use = 0, peak = 0, ls[2];
  LM_ASSERT_OK(lm_pool_stats(&in_use, NULL, 1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&y, x, perm, NULL, rows));
  LM_ASSERT_OK(lm_pool_stats(NULL, &peak, 0));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(y, ls, 2));
  const int64_t shard = ls[0] * ls[1] * 8;
  if (peak - in_use >= 2 * shard)
    fprintf(stderr, "rank %d: a fused transpose took %lld pool bytes for a %lld-byte result\n",
            ME, (long long)(peak - in_use), (long long)shard);
  LM_ASSERT_ALL(peak - in_use < 2 * shard);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* lm_dist_tensor_transpose_into: into tensors made by the library (row shards, columns,
 * block-cyclic, replicated, Partial: the fallback; a cross-mesh target), into padded borrows whose
 * padding must stay as it was (a replicated [7, 5] in arrays of [7, 8]; row shards [3, 5] in
 * [3, 9]), and the refusals, agreed (a target sharing the source's memory on every rank). */
static void test_into(void **state) {
  (void)state;
  tmesh_t w = make_mesh(0), rev = make_mesh(2);
  const int64_t shape[2] = {NP * 5 + 3, 7}, tshape[2] = {7, NP * 5 + 3};
  const int perm[2] = {1, 0};
  const int64_t n = shape[0] * shape[1];
  double *full = (double *)malloc(sizeof(double) * (size_t)n);
  for (int64_t e = 0; e < n; ++e) full[e] = (double)e;
  DLTensor ft = {full, {kDLCPU, 0}, 2, kF64, (int64_t *)shape, NULL, 0};
  const lm_placement_t rows[1] = {LM_PLACEMENT_SHARD(0)};
  lm_dist_tensor_t x = NULL, y = NULL, z = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, w.mesh, &ft, rows, -1));
  const lm_placement_t targets[5] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1),
                                     LM_PLACEMENT_BLOCK_CYCLIC(1, 2, 0), LM_PLACEMENT_REPLICATE,
                                     LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  int64_t bad = 0;
  for (int k = 0; k < 10; ++k) {
    const tmesh_t *D = k < 5 ? &w : &rev;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&y, D->mesh, 2, tshape, kF64, (DLDevice){kDLCPU, 0},
                                          &targets[k % 5]));
    LM_ASSERT_OK_ALL(lm_dist_tensor_transpose_into(y, x, perm));
    if (k % 5 == 4) { /* Partial: its sum is the transpose */
      const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
      LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&z, y, NULL, rep));
    }
    const int64_t b = check_out(k % 5 == 4 ? z : y, full, 2, shape, perm);
    if (b) fprintf(stderr, "rank %d: into target %d: %lld wrong\n", ME, k, (long long)b);
    bad += b;
    LM_ASSERT_OK(lm_dist_tensor_destroy(&z));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  }
  LM_ASSERT_ALL(bad == 0);
  /* Padded borrows: replicated, then row shards (LM_SHAPE_EVEN: NP * 3 rows, 3 per rank). */
  for (int k = 0; k < 2; ++k) {
    const int64_t rs = k ? 3 : 7, rows_d = k ? NP * 3 : 7, lld = k ? 9 : 8;  /* dst [rows_d, 5] */
    const int64_t src_shape[2] = {5, rows_d}, dst_shape[2] = {rs, 5}, strides[2] = {lld, 1};
    double *arr = (double *)malloc(sizeof(double) * (size_t)(rs * lld));
    for (int64_t e = 0; e < rs * lld; ++e) arr[e] = -7;
    DLTensor lt = {arr, {kDLCPU, 0}, 2, kF64, (int64_t *)dst_shape, (int64_t *)strides, 0};
    lm_dist_tensor_t a = NULL, at = NULL;
    double *af = (double *)malloc(sizeof(double) * (size_t)(rows_d * 5));
    for (int64_t e = 0; e < rows_d * 5; ++e) af[e] = (double)e;
    DLTensor aft = {af, {kDLCPU, 0}, 2, kF64, (int64_t *)src_shape, NULL, 0};
    const lm_placement_t src_pl[1] = {LM_PLACEMENT_SHARD(k ? 1 : 0)};
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&a, w.mesh, &aft, src_pl, -1));
    const lm_placement_t dst_pl[1] = {k ? (lm_placement_t)LM_PLACEMENT_SHARD(0)
                                        : (lm_placement_t)LM_PLACEMENT_REPLICATE};
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&at, w.mesh, &lt, dst_pl, LM_SHAPE_EVEN, NULL,
                                               LM_FROM_LOCAL_BORROW));
    LM_ASSERT_OK_ALL(lm_dist_tensor_transpose_into(at, a, perm));
    int64_t wrong = 0;
    const int64_t r0 = k ? (int64_t)ME * 3 : 0;
    for (int64_t i = 0; i < rs; ++i)
      for (int64_t j = 0; j < lld; ++j)
        wrong += arr[i * lld + j] != (j < 5 ? af[j * rows_d + r0 + i] : -7);
    if (wrong) fprintf(stderr, "rank %d: padded target %d: %lld wrong\n", ME, k, (long long)wrong);
    LM_ASSERT_ALL(wrong == 0);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&at));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&a));
    free(af);
    free(arr);
  }
  /* Refusals: each names its argument; a shared shard is refused on every rank. */
  const int64_t sq[2] = {4, 4};
  const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t s4 = NULL, f32 = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&s4, w.mesh, 2, sq, kF64, (DLDevice){kDLCPU, 0}, rep));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&f32, w.mesh, 2, sq, (DLDataType){kDLFloat, 32, 1},
                                        (DLDevice){kDLCPU, 0}, rep));
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(NULL, x, perm), LM_ERR_INVALID_ARGUMENT, "dst");
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(s4, NULL, perm), LM_ERR_INVALID_ARGUMENT, "src");
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(s4, x, NULL), LM_ERR_INVALID_ARGUMENT, "perm");
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(s4, x, perm), LM_ERR_INVALID_ARGUMENT,
                "global shape");
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(f32, s4, perm), LM_ERR_INVALID_ARGUMENT,
                "dst holds float32");
  LM_EXPECT_ALL(lm_dist_tensor_transpose_into(s4, s4, perm), LM_ERR_INVALID_ARGUMENT,
                "shares memory");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&f32));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&s4));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  free(full);
  LM_ASSERT_OK(lm_mesh_destroy(&w.mesh));
  LM_ASSERT_OK(lm_mesh_destroy(&rev.mesh));
}

/* Refusals name the argument; the ranks agree on perm (a square replicated matrix transposed on
 * one rank and kept on the others is the same reshard, not the same call). */
static void test_refusals(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_dist_tensor_t x = NULL, y = NULL;
  const int64_t shape[2] = {3, 3};
  const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE}, bad_pl[1] = {LM_PLACEMENT_SHARD(2)};
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, shape, kF64, (DLDevice){kDLCPU, 0}, rep));
  const int p_range[2] = {1, 2}, p_twice[2] = {1, 1}, swap[2] = {1, 0}, same[2] = {0, 1};
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, NULL, NULL, rep), LM_ERR_INVALID_ARGUMENT,
                "perm is NULL");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, p_range, NULL, rep), LM_ERR_INVALID_ARGUMENT,
                "perm[1] = 2");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, p_twice, NULL, rep), LM_ERR_INVALID_ARGUMENT,
                "repeats");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, swap, NULL, NULL), LM_ERR_INVALID_ARGUMENT,
                "placements");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, swap, NULL, bad_pl), LM_ERR_INVALID_ARGUMENT,
                "placements");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(NULL, x, swap, NULL, rep), LM_ERR_INVALID_ARGUMENT,
                "out");
  LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, NULL, swap, NULL, rep), LM_ERR_INVALID_ARGUMENT,
                "src");
  if (NP > 1)
    LM_EXPECT_ALL(lm_dist_tensor_transpose(&y, x, ME == 0 ? swap : same, NULL, rep),
                  LM_ERR_MISMATCH, "perm");
  LM_ASSERT_ALL(y == NULL);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* A padded borrow (rows of a 4 x 6 array, the first 5 columns) transposed into column shards. */
static void test_padded_source(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  double base[24], full[20];
  for (int e = 0; e < 24; ++e) base[e] = e % 6 < 5 ? (double)(e / 6 * 5 + e % 6) : -7;
  for (int e = 0; e < 20; ++e) full[e] = e;
  int64_t shape[2] = {4, 5}, strides[2] = {6, 1};
  DLTensor t = {base, {kDLCPU, 0}, 2, kF64, shape, strides, 0};
  const lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE}, cols[1] = {LM_PLACEMENT_SHARD(1)};
  const int perm[2] = {1, 0};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &t, rep, LM_SHAPE_EVEN, NULL,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_transpose(&y, x, perm, NULL, cols));
  LM_ASSERT_ALL(check_out(y, full, 2, shape, perm) == 0);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_matrix_rows),
    cmocka_unit_test(test_refusals),
    cmocka_unit_test(test_fused_dtypes),
    cmocka_unit_test(test_into),
    cmocka_unit_test(test_padded_source),
    cmocka_unit_test(test_random_transposes),
};

LM_TEST_MAIN(tests)
