/* SPDX-License-Identifier: BSD-3-Clause */
/* Randomized property test of the reshard engine.
 *
 * Every case draws (with one seeded generator shared by all ranks) a source and a target mesh
 * from a pool (same mesh, other shapes, reversed and disjoint rank sets), a global shape
 * (including extents smaller than the mesh and zero), a dtype, and random Shard / Replicate /
 * Partial placements (co-shard orders too). Each rank fills its source shard from the global
 * index; Partial sources are split so the exact reduction is known. After the reshard each rank
 * checks its own shard without gathering; Partial targets are reduced by a second reshard to
 * Replicate first. The API path (plain reshard, persistent plan, nonblocking start/test/wait) is
 * drawn too. Failures print the seed and case so `LM_SEED=s LM_CASE=c` replays one case.
 * Positions come from an oracle of this file, not from the library: torch.chunk written again
 * from the documented rule (docs/DESIGN.md, "Layout math, worked"), the mesh coordinates from the
 * rank lists the test gave. Each shard's local offset and shape must equal the oracle's box, and
 * every element is written and checked at the oracle's position.
 * Cases per run: LM_RESHARD_CASES, default chosen per np so that np 1,2,3,4,8 sum to > 10,000.
 * Own streams: 0-d tensors, ragged shards, and padded borrows (sources and targets whose shards
 * lie in longer rows; their padding must stay untouched). */
#include "lm_oracle.h"
#include "lm_test.h"
#include "lm_rng.h"

#include <localmap.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------- dtypes */
enum { T_I32, T_I64, T_F32, T_F64, T_I8, T_I16, T_U8, T_BOOL, T_F16, T_BF16, T_C64, T_C128, T_N };
static DLDataType dl_of(int t) {
  switch (t) {
    case T_I32: return LM_INT32;
    case T_I64: return LM_INT64;
    case T_F32: return LM_FLOAT32;
    case T_F64: return LM_FLOAT64;
    case T_I8: return LM_INT8;
    case T_I16: return LM_INT16;
    case T_U8: return LM_UINT8;
    case T_BOOL: return LM_BOOL;
    case T_F16: return LM_FLOAT16;
    case T_BF16: return LM_BFLOAT16;
    case T_C64: return LM_COMPLEX64;
    default: return LM_COMPLEX128;
  }
}
static const char *name_of(int t) {
  static const char *n[] = {"int32", "int64", "float32", "float64", "int8", "int16", "uint8",
                            "bool", "float16", "bfloat16", "complex64", "complex128"};
  return n[t];
}
static size_t size_of(int t) {
  static const size_t s[] = {4, 8, 4, 8, 1, 2, 1, 1, 2, 2, 8, 16};
  return s[t];
}
/* Exact for the small integers used here. */
static uint16_t to_half(float f) {
  if (f == 0) return 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  if (f < 0) f = -f;
  int e;
  float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}
static float from_half(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
  return (h & 0x8000) ? -v : v;
}
static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static void put(int t, void *base, int64_t i, double re, double im) {
  char *p = (char *)base + (size_t)i * size_of(t);
  switch (t) {
    case T_I32: *(int32_t *)p = (int32_t)re; break;
    case T_I64: *(int64_t *)p = (int64_t)re; break;
    case T_F32: *(float *)p = (float)re; break;
    case T_F64: *(double *)p = re; break;
    case T_I8: *(int8_t *)p = (int8_t)re; break;
    case T_I16: *(int16_t *)p = (int16_t)re; break;
    case T_U8: *(uint8_t *)p = (uint8_t)(int)re; break;
    case T_BOOL: *(uint8_t *)p = re != 0; break;
    case T_F16: *(uint16_t *)p = to_half((float)re); break;
    case T_BF16: *(uint16_t *)p = to_bf16((float)re); break;
    case T_C64: ((float *)p)[0] = (float)re; ((float *)p)[1] = (float)im; break;
    default: ((double *)p)[0] = re; ((double *)p)[1] = im; break;
  }
}
static void get(int t, const void *base, int64_t i, double *re, double *im) {
  const char *p = (const char *)base + (size_t)i * size_of(t);
  *im = 0;
  switch (t) {
    case T_I32: *re = *(const int32_t *)p; break;
    case T_I64: *re = (double)*(const int64_t *)p; break;
    case T_F32: *re = *(const float *)p; break;
    case T_F64: *re = *(const double *)p; break;
    case T_I8: *re = *(const int8_t *)p; break;
    case T_I16: *re = *(const int16_t *)p; break;
    case T_U8: *re = *(const uint8_t *)p; break;
    case T_BOOL: *re = *(const uint8_t *)p; break;
    case T_F16: *re = from_half(*(const uint16_t *)p); break;
    case T_BF16: *re = from_bf16(*(const uint16_t *)p); break;
    case T_C64: *re = ((const float *)p)[0]; *im = ((const float *)p)[1]; break;
    default: *re = ((const double *)p)[0]; *im = ((const double *)p)[1]; break;
  }
}
/* Which reduce ops give exact, meaningful results for the dtype with the values used here. */
static int op_ok(int t, int op) {
  if (t == T_BOOL) return op != LM_REDUCE_AVG;
  if (t == T_C64 || t == T_C128) return op == LM_REDUCE_SUM || op == LM_REDUCE_AVG || op == LM_REDUCE_PROD;
  if (t == T_BF16) return op == LM_REDUCE_MAX || op == LM_REDUCE_MIN; /* 8-bit mantissa */
  if (t == T_I8 || t == T_U8) return op != LM_REDUCE_AVG;           /* sums would overflow */
  return 1;
}

/* This rank's coordinates along the Partial mesh dims of the source (for avg splits). */
static int pc_n, pc_c[3], pc_e[3];

/* The value at global linear index lin, and the part partial coordinate p of K holds. */
static void value(int t, int64_t lin, double *re, double *im) {
  if (t == T_BOOL) {
    *re = lin % 3 == 0;
    *im = 0;
    return;
  }
  *re = (double)((lin * 7 + 3) % 50);
  *im = (t == T_C64 || t == T_C128) ? (double)((lin * 3 + 1) % 20) : 0;
}
static double part1(int t, int op, double v, int64_t lin, int p, int K) {
  int64_t q;
  double s = 0;
  if (t == T_BOOL) {
    int alt = (int)((lin + p) % 2);
    if (p == 0) return v;
    return (op == LM_REDUCE_SUM || op == LM_REDUCE_MAX) ? (v != 0 && alt) : (v != 0 || alt);
  }
  switch (op) {
    case LM_REDUCE_SUM: {
      if (p > 0) return (double)((lin + p) % 5 - 2);
      for (q = 1; q < K; ++q) s += (double)((lin + q) % 5 - 2);
      return v - s;
    }
    case LM_REDUCE_AVG: {
      /* v + h(lin) * prod_m g(c_m) with sum_c g(c) = 0 along each Partial dim: the mean along
       * any subset of the Partial dims is exactly v, also in integers. */
      double d = (double)(lin % 3 - 1);
      for (int m = 0; m < pc_n; ++m) d *= pc_c[m] == 0 ? -(double)(pc_e[m] - 1) : 1.0;
      return v + d;
    }
    case LM_REDUCE_PROD: return p == 0 ? v : 1;
    case LM_REDUCE_MAX: return p == 0 ? v : floor(v / 2);
    default: return p == 0 ? v : v + 1 + (double)((lin + p) % 3);
  }
}
static void part(int t, int op, int64_t lin, int p, int K, double *re, double *im) {
  double vr, vi;
  value(t, lin, &vr, &vi);
  if (K <= 1) {
    *re = vr;
    *im = vi;
    return;
  }
  *re = part1(t, op, vr, lin, p, K);
  *im = (op == LM_REDUCE_PROD) ? (p == 0 ? vi : 0) : part1(t, op, vi, lin + 11, p, K);
  if (t != T_C64 && t != T_C128) *im = 0;
}

/* ----------------------------------------------------------------------------- meshes */
#define MAXM 24
typedef struct {
  lm_mesh_t mesh;
  int ndim;
  int64_t shape[3];
  int nranks;    /* 0: every world rank, in order */
  int ranks[64]; /* else the world rank of each mesh index, row-major */
  char desc[64];
} pool_mesh;
static pool_mesh pool[MAXM];
static int npool;

static void add_mesh(int ndim, const int64_t *shape, const int *ranks, int nranks, const char *d) {
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = ranks ? nranks : 0;
  pool_mesh *pm = &pool[npool];
  LM_ASSERT_OK_ALL(lm_mesh_create(&pm->mesh, lm_test_comm_f(), ndim, shape, ranks ? &cfg : NULL));
  pm->ndim = ndim;
  for (int i = 0; i < ndim; ++i) pm->shape[i] = shape[i];
  pm->nranks = ranks ? nranks : 0;
  for (int i = 0; ranks && i < nranks; ++i) pm->ranks[i] = ranks[i];
  snprintf(pm->desc, sizeof pm->desc, "%s", d);
  ++npool;
}

static void build_pool(void) {
  int n = lm_test_size();
  int ranks[64];
  char d[64];
  int64_t s[3];
  npool = 0;
  s[0] = n;
  add_mesh(1, s, NULL, 0, "1d");
  for (int a = 2; a < n; ++a)
    if (n % a == 0) {
      s[0] = a;
      s[1] = n / a;
      snprintf(d, sizeof d, "%dx%d", a, n / a);
      add_mesh(2, s, NULL, 0, d);
    }
  s[0] = 1;
  s[1] = n;
  add_mesh(2, s, NULL, 0, "1xN");
  if (n == 8) {
    s[0] = s[1] = s[2] = 2;
    add_mesh(3, s, NULL, 0, "2x2x2");
  }
  if (n == 4) {
    s[0] = 2; s[1] = 1; s[2] = 2;
    add_mesh(3, s, NULL, 0, "2x1x2");
  }
  for (int i = 0; i < n; ++i) ranks[i] = n - 1 - i;
  s[0] = n;
  add_mesh(1, s, ranks, n, "1d-reversed");
  if (n >= 2) {
    int h = (n + 1) / 2;
    for (int i = 0; i < h; ++i) ranks[i] = i;
    s[0] = h;
    add_mesh(1, s, ranks, h, "first-half");
    int h2 = n - h;
    for (int i = 0; i < h2; ++i) ranks[i] = h + i;
    if (h2 % 2 == 0 && h2 >= 4) {
      s[0] = 2;
      s[1] = h2 / 2;
      add_mesh(2, s, ranks, h2, "second-half-2d");
    } else {
      s[0] = h2;
      add_mesh(1, s, ranks, h2, "second-half");
    }
    /* every other rank, in reverse */
    int k = 0;
    for (int i = n - 1; i >= 0; i -= 2) ranks[k++] = i;
    s[0] = k;
    add_mesh(1, s, ranks, k, "odd-reversed");
  }
}

static void free_pool(void) {
  for (int i = 0; i < npool; ++i) LM_ASSERT_OK(lm_mesh_destroy(&pool[i].mesh));
}

/* This rank's coordinates in pm (row-major over its rank list); 0 when it is not a member. */
static int my_coord(const pool_mesh *pm, int64_t *coord) {
  int me = lm_test_rank(), idx = -1;
  if (pm->nranks == 0) idx = me;
  for (int i = 0; i < pm->nranks; ++i)
    if (pm->ranks[i] == me) idx = i;
  if (idx < 0) return 0;
  for (int d = pm->ndim - 1; d >= 0; --d) {
    coord[d] = idx % pm->shape[d];
    idx /= (int)pm->shape[d];
  }
  return 1;
}

/* The oracle's box of this rank for tensor t (placements pl on pm), compared with the library's
 * local offset and shape. Returns 1 when they agree (and the box in off/len), 0 otherwise. */
static int oracle_box(lm_dist_tensor_t t, const pool_mesh *pm, const lm_placement_t *pl, int ndim,
                      const int64_t *g, int64_t *off, int64_t *len) {
  int64_t coord[3] = {0, 0, 0}, lo[3] = {0, 0, 0}, ls[3] = {0, 0, 0};
  my_coord(pm, coord);
  lm_oracle_box(pm->shape, pm->ndim, coord, pl, ndim, g, off, len);
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ls, ndim));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, lo, ndim));
  for (int d = 0; d < ndim; ++d)
    if (lo[d] != off[d] || ls[d] != len[d]) return 0;
  return 1;
}

/* ----------------------------------------------------------------------------- cases */
typedef struct {
  int ndim;
  int64_t g[3];
  int t, op;
  int sm, dm;
  lm_placement_t sp[3], dp[3];
  int path;
  int shard_0d; /* the target asks for Shard of a 0-d tensor: must be refused */
  int pad;      /* 1: the source, 2: the target (paths 1-2) is a padded borrow (draw_case_padded) */
} case_t;

static void draw_placements(lm_placement_t *pl, int mdim, int ndim, int op) {
  for (int m = 0; m < mdim; ++m) {
    int r = rndi(100);
    memset(&pl[m], 0, sizeof pl[m]);
    if (r < 30 || (ndim == 0 && r < 60)) {
      pl[m].kind = LM_REPLICATE;
    } else if (r < 75 && ndim > 0) {
      pl[m].kind = LM_SHARD;
      pl[m].dim = rndi(ndim);
      pl[m].order = rndi(4) == 0 ? rndi(3) : 0;
    } else {
      pl[m].kind = LM_PARTIAL;
      pl[m].reduce_op = op;
    }
  }
}

static void draw_case(case_t *c) {
  c->ndim = 1 + rndi(3);
  for (int i = 0; i < c->ndim; ++i) {
    int r = rndi(10);
    c->g[i] = r == 0 ? 0 : r < 3 ? 1 + rndi(2) : 1 + rndi(9);
  }
  c->t = rndi(T_N);
  do {
    c->op = rndi(5);
  } while (!op_ok(c->t, c->op));
  c->sm = rndi(npool);
  c->dm = rndi(10) < 6 ? c->sm : rndi(npool);
  int op2 = rndi(8) == 0 ? rndi(5) : c->op; /* sometimes another op: must be refused */
  if (!op_ok(c->t, op2)) op2 = c->op;
  draw_placements(c->sp, pool[c->sm].ndim, c->ndim, c->op);
  draw_placements(c->dp, pool[c->dm].ndim, c->ndim, op2);
  c->path = rndi(10) < 6 ? 0 : rndi(2) + 1;
  c->shard_0d = 0;
  c->pad = 0;
}

/* Ragged shards: the first splitter of a tensor dim (lowest (order, mesh dim)) becomes ragged
 * with probability 1/2, its extents random (cut points drawn in [0, g], so empty blocks occur),
 * registered with lm_extents_create. Odd ranks register a throwaway set first, so the ids of
 * equal extents differ between ranks (agreement must compare extents, not ids). */
static int32_t ragged_ids[6];
static int nragged;

static void raggedize(lm_placement_t *pl, const pool_mesh *pm, int ndim, const int64_t *g) {
  for (int d = 0; d < ndim; ++d) {
    int first = -1;
    for (int m = 0; m < pm->ndim; ++m)
      if (pl[m].kind == LM_SHARD && pl[m].dim == d && (first < 0 || pl[m].order < pl[first].order))
        first = m;
    if (first < 0 || rndi(2)) continue;
    int64_t k = pm->shape[first], cut[64], e[64];
    for (int64_t i = 0; i + 1 < k; ++i) cut[i] = (int64_t)(rnd() % (uint64_t)(g[d] + 1));
    for (int64_t i = 1; i + 1 < k; ++i) /* sort the cuts */
      for (int64_t j = i; j > 0 && cut[j - 1] > cut[j]; --j) {
        int64_t t = cut[j];
        cut[j] = cut[j - 1];
        cut[j - 1] = t;
      }
    for (int64_t i = 0; i < k; ++i) e[i] = (i + 1 < k ? cut[i] : g[d]) - (i ? cut[i - 1] : 0);
    if (lm_test_rank() % 2) {
      int64_t junk[2] = {1 + (int64_t)nragged, 7};
      int32_t j;
      LM_ASSERT_OK(lm_extents_create(&j, junk, 2));
      ragged_ids[nragged++] = j;
    }
    int32_t id;
    LM_ASSERT_OK(lm_extents_create(&id, e, k));
    ragged_ids[nragged++] = id;
    pl[first].kind = LM_RAGGED;
    pl[first].extents = id;
  }
}

static void release_ragged(void) {
  for (int i = 0; i < nragged; ++i) LM_ASSERT_OK(lm_extents_destroy(ragged_ids[i]));
  nragged = 0;
}

static void draw_case_ragged(case_t *c) {
  draw_case(c);
  raggedize(c->sp, &pool[c->sm], c->ndim, c->g);
  raggedize(c->dp, &pool[c->dm], c->ndim, c->g);
}

/* Padded borrows: the source, the target, or both held in arrays whose dims after the first are
 * longer than the shard (padded_twin); the target only on the plan paths (a plain reshard makes
 * its own). At least 2 dims, so that there is a dim to pad. */
static void draw_case_padded(case_t *c) {
  draw_case(c);
  if (c->ndim < 2) {
    c->ndim = 2;
    c->g[1] = 1 + rndi(9);
    draw_placements(c->sp, pool[c->sm].ndim, c->ndim, c->op);
    draw_placements(c->dp, pool[c->dm].ndim, c->ndim, c->op);
  }
  c->pad = 1 + rndi(3);
  if (c->path == 0) c->pad = 1;
}

/* A 0-d case: a scalar with Replicate / Partial placements (no Shard can exist), any dtype, op,
 * mesh pair and path; one in ten asks for Shard on the target, which must be refused. */
static void draw_case_0d(case_t *c) {
  c->ndim = 0;
  c->g[0] = c->g[1] = c->g[2] = 0;
  c->t = rndi(T_N);
  do {
    c->op = rndi(5);
  } while (!op_ok(c->t, c->op));
  c->sm = rndi(npool);
  c->dm = rndi(10) < 5 ? c->sm : rndi(npool);
  int op2 = rndi(8) == 0 ? rndi(5) : c->op;
  if (!op_ok(c->t, op2)) op2 = c->op;
  draw_placements(c->sp, pool[c->sm].ndim, 0, c->op);
  draw_placements(c->dp, pool[c->dm].ndim, 0, op2);
  c->path = rndi(3);
  c->shard_0d = rndi(10) == 0;
  if (c->shard_0d) {
    int m = rndi(pool[c->dm].ndim);
    memset(&c->dp[m], 0, sizeof c->dp[m]);
    c->dp[m].kind = LM_SHARD;
  }
}

static int has_partial(const lm_placement_t *pl, int n, int *op) {
  for (int i = 0; i < n; ++i)
    if (pl[i].kind == LM_PARTIAL) {
      if (op) *op = pl[i].reduce_op;
      return 1;
    }
  return 0;
}

/* Partial linear coordinate of this rank and the group size over the Partial mesh dims (the
 * oracle's coordinates). */
static void partial_coord(const pool_mesh *pm, const lm_placement_t *pl, int *p, int *K) {
  int64_t coord[3] = {0, 0, 0};
  *p = 0;
  *K = 1;
  pc_n = 0;
  my_coord(pm, coord);
  for (int m = 0; m < pm->ndim; ++m)
    if (pl[m].kind == LM_PARTIAL) {
      *p = *p * (int)pm->shape[m] + (int)coord[m];
      *K *= (int)pm->shape[m];
      pc_c[pc_n] = (int)coord[m];
      pc_e[pc_n++] = (int)pm->shape[m];
    }
}

/* The global linear index of every element of the box (lo, ls), in local row-major order. */
static int64_t visit(const int64_t *lo, const int64_t *ls, int ndim, const int64_t *g,
                     int64_t *lin_out, int64_t cap) {
  int64_t idx[3] = {0, 0, 0}, n = 1;
  for (int i = 0; i < ndim; ++i) n *= ls[i];
  if (n > cap) return -1;
  for (int64_t e = 0; e < n; ++e) {
    int64_t lin = 0;
    for (int i = 0; i < ndim; ++i) lin = lin * g[i] + lo[i] + idx[i];
    lin_out[e] = lin;
    for (int i = ndim - 1; i >= 0; --i) {
      if (++idx[i] < ls[i]) break;
      idx[i] = 0;
    }
  }
  return n;
}

/* Membership by the oracle (the rank lists), checked against the library's answer. */
static int mismatched_member;
static int is_member(const pool_mesh *pm) {
  int64_t coord[3];
  int mem = 0, mine = my_coord(pm, coord);
  LM_ASSERT_OK(lm_mesh_is_member(pm->mesh, &mem));
  if (mem != mine) mismatched_member = 1;
  return mine;
}

static char failbuf[4096];
static int nfail_local;

static void note_fail(uint64_t seed, int k, const case_t *c, const char *what) {
  char a[128], b[128];
  if (nfail_local++ >= 5) return;
  LM_ASSERT_OK(lm_placements_format(c->sp, pool[c->sm].ndim, a, sizeof a));
  LM_ASSERT_OK(lm_placements_format(c->dp, pool[c->dm].ndim, b, sizeof b));
  snprintf(failbuf + strlen(failbuf), sizeof failbuf - strlen(failbuf),
           "rank %d: LM_SEED=%llu LM_CASE=%d: %s %s on %s -> %s on %s, shape [%lld,%lld,%lld] ndim %d "
           "path %d: %s (%s)\n",
           lm_test_rank(), (unsigned long long)seed, k, name_of(c->t), a, pool[c->sm].desc, b,
           pool[c->dm].desc, (long long)c->g[0], (long long)c->g[1], (long long)c->g[2], c->ndim,
           c->path, what, lm_last_error_message());
}

/* Checks that t's local shard is where the oracle puts it (placements pl on pm) and that every
 * element equals the value of its global position (t must hold no Partial). */
/* Element e (row-major over the shard) of view v: its index in v.data's elements (strided for a
 * padded borrow). */
static int64_t at(const DLTensor *v, int64_t e) {
  if (!v->strides) return e;
  int64_t o = 0;
  for (int d = v->ndim - 1; d >= 0; --d) {
    o += (e % v->shape[d]) * v->strides[d];
    e /= v->shape[d];
  }
  return o;
}

/* A padded twin of tensor t (placements pl on mesh m, the case's shape): a borrow of an array
 * whose dims after the first are 1-3 elements longer than t's shard (by rank and dim: not drawn
 * from the shared stream), its padding bytes 0x5a; the shard copied in when `copy`. *arr: the
 * array (free it after the tensor), *bytes: its size. */
static lm_dist_tensor_t padded_twin(lm_dist_tensor_t t, lm_mesh_t m, const lm_placement_t *pl,
                                    const case_t *c, int member, int copy, unsigned char **arr,
                                    size_t *bytes) {
  static int64_t ls[3], st[3];
  const size_t es = size_of(c->t);
  int64_t ext[3] = {0, 0, 0}, total = 1;
  DLTensor v = {NULL, {kDLCPU, 0}, c->ndim, dl_of(c->t), ls, NULL, 0};
  *arr = NULL;
  *bytes = 0;
  if (member) {
    LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ls, c->ndim));
    for (int d = 0; d < c->ndim; ++d) ext[d] = ls[d] + (d ? 1 + (lm_test_rank() + d) % 3 : 0);
    for (int d = c->ndim - 1; d >= 0; --d) {
      st[d] = total;
      total *= ext[d];
    }
    *bytes = (size_t)total * es;
    *arr = malloc(*bytes ? *bytes : 1);
    memset(*arr, 0x5a, *bytes);
    v.data = *arr;
    v.strides = st;
    if (copy) {
      DLTensor cv;
      LM_ASSERT_OK(lm_dist_tensor_local(t, &cv));
      int64_t n = 1;
      for (int d = 0; d < c->ndim; ++d) n *= ls[d];
      for (int64_t e = 0; e < n; ++e)
        memcpy(*arr + at(&v, e) * (int64_t)es, (const char *)cv.data + e * (int64_t)es, es);
    }
  }
  lm_dist_tensor_t p = NULL;
  LM_ASSERT_OK(lm_dist_tensor_from_local(&p, m, &v, pl, LM_SHAPE_GIVEN, c->g,
                                         LM_FROM_LOCAL_BORROW));
  return p;
}

/* Whether the padding of a padded twin's array (shard shape `t`'s) still holds 0x5a everywhere. */
static int padding_intact(lm_dist_tensor_t t, const unsigned char *arr, size_t bytes,
                          size_t es) {
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  unsigned char *mask = calloc(bytes ? bytes : 1, 1);
  for (int64_t e = 0; e < n; ++e) memset(mask + at(&v, e) * (int64_t)es, 1, es);
  int ok = 1;
  for (size_t b = 0; b < bytes; ++b) ok &= mask[b] || arr[b] == 0x5a;
  free(mask);
  return ok;
}

static int check_values(lm_dist_tensor_t t, const pool_mesh *pm, const lm_placement_t *pl,
                        const case_t *c, const char **why) {
  static int64_t lin[4096];
  int64_t off[3], len[3];
  DLTensor v;
  if (!oracle_box(t, pm, pl, c->ndim, c->g, off, len)) {
    *why = "the target shard is not where torch.chunk puts it (local offset/shape)";
    return 0;
  }
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  int64_t n = visit(off, len, c->ndim, c->g, lin, 4096);
  *why = "wrong values at the oracle's positions";
  if (n < 0) return 0;
  for (int64_t e = 0; e < n; ++e) {
    double re, im, er, ei;
    get(c->t, v.data, at(&v, e), &re, &im);
    value(c->t, lin[e], &er, &ei);
    if (re != er || im != ei) return 0;
  }
  return 1;
}

static int run_case(uint64_t seed, int k, const case_t *c) {
  lm_mesh_t sm = pool[c->sm].mesh, dm = pool[c->dm].mesh;
  const pool_mesh *spm = &pool[c->sm], *dpm = &pool[c->dm];
  lm_dist_tensor_t src = NULL, dst = NULL, rep = NULL;
  static int64_t lin[4096];
  const char *why = "";
  int ok = 1;
  mismatched_member = 0;
  LM_ASSERT_OK(lm_dist_tensor_zeros(&src, sm, c->ndim, c->g, dl_of(c->t), (DLDevice){kDLCPU, 0}, c->sp));
  if (is_member(spm)) {
    int p, K;
    int64_t off[3], len[3];
    DLTensor v;
    partial_coord(spm, c->sp, &p, &K);
    if (!oracle_box(src, spm, c->sp, c->ndim, c->g, off, len)) {
      note_fail(seed, k, c, "the source shard is not where torch.chunk puts it (local offset/shape)");
      ok = 0;
    }
    LM_ASSERT_OK(lm_dist_tensor_local(src, &v));
    int64_t n = ok ? visit(off, len, c->ndim, c->g, lin, 4096) : 0;
    for (int64_t e = 0; e < n; ++e) {
      double re, im;
      part(c->t, c->op, lin[e], p, K, &re, &im);
      put(c->t, v.data, e, re, im);
    }
  }
  unsigned char *sarr = NULL, *darr = NULL; /* padded twins' arrays */
  size_t sbytes = 0, dbytes = 0;
  if (c->pad & 1) {
    lm_dist_tensor_t p = padded_twin(src, sm, c->sp, c, is_member(spm), 1, &sarr, &sbytes);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&src));
    src = p;
  }
  int sop = -1, dop = -1;
  int bad_ops = has_partial(c->sp, pool[c->sm].ndim, &sop) && has_partial(c->dp, pool[c->dm].ndim, &dop) && sop != dop;
  lm_status_t st;
  if (c->path == 0) {
    st = lm_dist_tensor_reshard(&dst, src, dm, c->dp);
  } else {
    lm_reshard_plan_t plan = NULL;
    st = lm_reshard_plan_create(&plan, sm, c->sp, dm, c->dp, c->ndim, c->g, dl_of(c->t));
    if (st == LM_SUCCESS) {
      LM_ASSERT_OK(lm_reshard_plan_alloc_target(&dst, plan, (DLDevice){kDLCPU, 0}));
      if (c->pad & 2) {
        lm_dist_tensor_t p = padded_twin(dst, dm, c->dp, c, is_member(dpm), 0, &darr, &dbytes);
        LM_ASSERT_OK(lm_dist_tensor_destroy(&dst));
        dst = p;
      }
      if (c->path == 1) {
        st = lm_reshard_plan_execute(plan, src, dst);
      } else {
        lm_request_t req = NULL;
        st = lm_reshard_plan_start(&req, plan, src, dst);
        int done = 0, spins = 0;
        while (st == LM_SUCCESS && !done && spins++ < 3) st = lm_request_test(&req, &done);
        if (st == LM_SUCCESS && !done) st = lm_request_wait(&req);
      }
      LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
    }
  }
  if (c->shard_0d) {
    if (st != LM_ERR_INVALID_ARGUMENT || dst != NULL) {
      note_fail(seed, k, c, "Shard of a 0-d tensor was not refused");
      ok = 0;
    }
  } else if (bad_ops) {
    if (st != LM_ERR_INVALID_ARGUMENT) {
      note_fail(seed, k, c, "Partial(a)->Partial(b) was not refused");
      ok = 0;
    }
  } else if (st != LM_SUCCESS) {
    note_fail(seed, k, c, "reshard failed");
    ok = 0;
  } else if (has_partial(c->dp, pool[c->dm].ndim, NULL)) {
    lm_placement_t r[3] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
    int64_t off[3], len[3];
    st = lm_dist_tensor_reshard(&rep, dst, NULL, r);
    if (st != LM_SUCCESS) {
      note_fail(seed, k, c, "reduce of the Partial target failed");
      ok = 0;
    } else if (is_member(dpm) && !oracle_box(dst, dpm, c->dp, c->ndim, c->g, off, len)) {
      note_fail(seed, k, c, "the Partial target shard is not where torch.chunk puts it");
      ok = 0;
    } else if (is_member(dpm) && !check_values(rep, dpm, r, c, &why)) {
      note_fail(seed, k, c, why);
      ok = 0;
    }
  } else if (is_member(dpm) && !check_values(dst, dpm, c->dp, c, &why)) {
    note_fail(seed, k, c, why);
    ok = 0;
  }
  if (mismatched_member) {
    note_fail(seed, k, c, "lm_mesh_is_member disagrees with the mesh's rank list");
    ok = 0;
  }
  if ((sarr && !padding_intact(src, sarr, sbytes, size_of(c->t))) ||
      (darr && dst && !padding_intact(dst, darr, dbytes, size_of(c->t)))) {
    note_fail(seed, k, c, "a padded borrow's padding was written");
    ok = 0;
  }
  lm_dist_tensor_destroy(&rep);
  lm_dist_tensor_destroy(&dst);
  lm_dist_tensor_destroy(&src);
  free(darr);
  free(sarr);
  return ok;
}

/* One suite: `cases` cases drawn by `draw` from seed LM_SEED (else `seed0` + np), LM_CASE runs
 * one of them; ragged extents are released after each case. */
static void run_suite(const char *name, int cases, uint64_t seed0, void (*draw)(case_t *)) {
  int n = lm_test_size();
  uint64_t seed = getenv("LM_SEED") ? strtoull(getenv("LM_SEED"), NULL, 10) : seed0 + (uint64_t)n;
  int only = getenv("LM_CASE") ? atoi(getenv("LM_CASE")) : -1;
  build_pool();
  failbuf[0] = 0;
  nfail_local = 0;
  int bad = 0, ran = 0;
  rng_state = seed;
  for (int k = 0; k < cases; ++k) {
    case_t c;
    draw(&c);
    if (only < 0 || k == only) {
      if (!run_case(seed, k, &c)) ++bad;
      ++ran;
    }
    release_ragged();
  }
  if (bad) fprintf(stderr, "%s", failbuf);
  if (lm_test_rank() == 0) printf("%s: %d cases at np %d, seed %llu\n", name, ran, n, (unsigned long long)seed);
  free_pool();
  LM_ASSERT_ALL(bad == 0);
}

static void test_random_reshards(void **state) {
  (void)state;
  int n = lm_test_size();
  const char *e = getenv("LM_RESHARD_CASES");
  int cases = e ? atoi(e) : n == 1 ? 5000 : n == 2 ? 5000 : n == 3 ? 4000 : n == 4 ? 4000 : 2000;
  run_suite("reshard random", cases, 20261129ull, draw_case);
}

/* 0-d tensors, drawn from their own stream so the cases above stay what they were. Cases:
 * LM_RESHARD_CASES_0D, default 400 per run. */
static void test_random_reshards_0d(void **state) {
  (void)state;
  const char *e = getenv("LM_RESHARD_CASES_0D");
  run_suite("reshard random 0-d", e ? atoi(e) : 400, 20261201ull, draw_case_0d);
}

/* Ragged shards on either side (and both), from their own stream: every mesh of the pool,
 * co-shards behind a ragged dim, Partial sources reduced into ragged targets, cross-mesh. Cases:
 * LM_RESHARD_CASES_RAGGED, default 1500 at np 1-2, 1000 at np 3-4, 500 at np 8, or a quarter of
 * LM_RESHARD_CASES where only that is set. */
static void test_random_reshards_ragged(void **state) {
  (void)state;
  int n = lm_test_size();
  const char *e = getenv("LM_RESHARD_CASES_RAGGED"), *all = getenv("LM_RESHARD_CASES");
  int cases = e ? atoi(e) : n <= 2 ? 1500 : n <= 4 ? 1000 : 500;
  if (!e && all) cases = atoi(all) / 4 > 1 ? atoi(all) / 4 : 1; /* scripts that cut the suite */
  run_suite("reshard random ragged", cases, 20261204ull, draw_case_ragged);
}

/* Padded borrows as sources and targets (draw_case_padded), from their own stream: every mesh
 * pair, placement, dtype and path; their padding checked untouched. Cases:
 * LM_RESHARD_CASES_PADDED, default 1000 at np 1-2, 600 at np 3-4, 300 at np 8, or a quarter of
 * LM_RESHARD_CASES where only that is set. */
static void test_random_reshards_padded(void **state) {
  (void)state;
  int n = lm_test_size();
  const char *e = getenv("LM_RESHARD_CASES_PADDED"), *all = getenv("LM_RESHARD_CASES");
  int cases = e ? atoi(e) : n <= 2 ? 1000 : n <= 4 ? 600 : 300;
  if (!e && all) cases = atoi(all) / 4 > 1 ? atoi(all) / 4 : 1;
  run_suite("reshard random padded", cases, 20261205ull, draw_case_padded);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_random_reshards),
    cmocka_unit_test(test_random_reshards_0d),
    cmocka_unit_test(test_random_reshards_ragged),
    cmocka_unit_test(test_random_reshards_padded),
};

LM_TEST_MAIN(tests)
