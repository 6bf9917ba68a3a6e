/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_tensor: lm_dist_tensor_* — zeros for every dtype, accessors against torch.chunk math
 * (uneven and zero-sized extents, 2-D meshes, nested sharding in both orders), from_local in each
 * shape mode, COPY vs BORROW, from_managed ownership, from_global, gather (S/R/P), export,
 * reference counts, placeholders on non-members, and the bad inputs of each function.
 */
#include "lm_test.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

#define NP lm_test_size()
#define ME lm_test_rank()

static _Alignas(64) unsigned char g_foreign[4096];

static const lm_placement_t R_ = {LM_REPLICATE, 0, 0, 0, 0, 0, 0, 0};
static lm_placement_t S_(int d) { lm_placement_t p = {LM_SHARD, d, 0, 0, 0, 0, 0, 0}; return p; }
static lm_placement_t So(int d, int order) { lm_placement_t p = LM_PLACEMENT_SHARD(d); p.order = order; return p; }
static lm_placement_t P_(int op) { return LM_PLACEMENT_PARTIAL(op); }

static lm_mesh_t mesh_1d(void) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  return m;
}

/* {2, n/2} when the world size is even, else {1, n}. */
static lm_mesh_t mesh_2d(void) {
  lm_mesh_t m = NULL;
  int a = NP % 2 == 0 ? 2 : 1;
  int64_t s[2] = {a, NP / a};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, s, NULL));
  return m;
}

/* A mesh of world rank 0 alone (everyone else is outside it). */
static lm_mesh_t mesh_rank0(void) {
  lm_mesh_t m = NULL;
  int ranks[1] = {0};
  int64_t s[1] = {1};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = 1;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, &cfg));
  return m;
}

static int64_t prod(int n, const int64_t *s) {
  int64_t p = 1;
  int i;
  for (i = 0; i < n; ++i) p *= s[i];
  return p;
}

/* The expected box of mesh coordinate `coord` (torch.chunk per sharding mesh dim, co-shards in
 * order of (order, mesh dim)). */
static void expect_box(int tnd, const int64_t *g, int mnd, const int64_t *ms, const int64_t *coord,
                       const lm_placement_t *pl, int64_t *off, int64_t *len) {
  int d, i, j, k;
  for (d = 0; d < tnd; ++d) {
    int ms_list[32], cnt = 0;
    off[d] = 0;
    len[d] = g[d];
    for (i = 0; i < mnd; ++i)
      if (pl[i].kind == LM_SHARD && pl[i].dim == d) ms_list[cnt++] = i;
    for (i = 1; i < cnt; ++i) /* insertion sort by (order, mesh dim) */
      for (j = i; j > 0 && pl[ms_list[j]].order < pl[ms_list[j - 1]].order; --j) {
        k = ms_list[j];
        ms_list[j] = ms_list[j - 1];
        ms_list[j - 1] = k;
      }
    for (i = 0; i < cnt; ++i) {
      int64_t o = 0, l = 0;
      int m = ms_list[i];
      if (lm_layout_chunk(len[d], ms[m], coord[m], &o, &l) != LM_SUCCESS) abort();
      off[d] += o;
      len[d] = l;
    }
  }
}

/* This rank's expected box on mesh m (member), via the public mesh accessors. Returns membership. */
static int my_box(lm_mesh_t m, int tnd, const int64_t *g, const lm_placement_t *pl, int64_t *off,
                  int64_t *len) {
  int mnd = 0, mem = 0, d;
  int64_t ms[8], coord[8];
  if (lm_mesh_ndim(m, &mnd) != LM_SUCCESS || lm_mesh_is_member(m, &mem) != LM_SUCCESS) abort();
  if (lm_mesh_shape(m, ms, 8) != LM_SUCCESS) abort();
  if (!mem) {
    for (d = 0; d < tnd; ++d) off[d] = len[d] = 0;
    return 0;
  }
  if (lm_mesh_coord(m, coord, 8) != LM_SUCCESS) abort();
  expect_box(tnd, g, mnd, ms, coord, pl, off, len);
  return 1;
}

static int dtype_eq(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static size_t esize_of(DLDataType t) { return (size_t)(t.bits / 8) * t.lanes; }

/* Checks every accessor of t against the expected layout; collective (one LM_ASSERT_ALL). */
#define CHECK_LAYOUT(t, m, tnd, g, pl, dt) check_layout((t), (m), (tnd), (g), (pl), (dt), __LINE__)
static void check_layout(lm_dist_tensor_t t, lm_mesh_t m, int tnd, const int64_t *g,
                         const lm_placement_t *pl, DLDataType dt, int line) {
  int ok = 1, nd = -1, mnd = 0, d, member;
  lm_mesh_t tm = NULL;
  DLDataType gdt;
  DLDevice dev;
  lm_placement_t gpl[8];
  int64_t gs[33], ls[33], lo[33], eoff[33], elen[33];
  DLTensor view;
  const char *why = "";
#define BAD(w)  \
  do {          \
    ok = 0;     \
    why = (w);  \
  } while (0)
  if (lm_mesh_ndim(m, &mnd) != LM_SUCCESS) BAD("mesh ndim");
  member = my_box(m, tnd, g, pl, eoff, elen);
  if (lm_dist_tensor_ndim(t, &nd) != LM_SUCCESS || nd != tnd) BAD("ndim");
  if (lm_dist_tensor_mesh(t, &tm) != LM_SUCCESS || tm != m) BAD("mesh");
  if (lm_dist_tensor_dtype(t, &gdt) != LM_SUCCESS || !dtype_eq(gdt, dt)) BAD("dtype");
  if (lm_dist_tensor_device(t, &dev) != LM_SUCCESS || dev.device_type != kDLCPU || dev.device_id != 0)
    BAD("device");
  if (lm_dist_tensor_placements(t, gpl, mnd) != LM_SUCCESS ||
      memcmp(gpl, pl, sizeof(lm_placement_t) * (size_t)mnd) != 0)
    BAD("placements");
  if (lm_dist_tensor_global_shape(t, gs, tnd) != LM_SUCCESS ||
      (tnd > 0 && memcmp(gs, g, sizeof(int64_t) * (size_t)tnd) != 0))
    BAD("global shape");
  if (lm_dist_tensor_local_shape(t, ls, tnd) != LM_SUCCESS) BAD("local shape call");
  if (lm_dist_tensor_local_offset(t, lo, tnd) != LM_SUCCESS) BAD("local offset call");
  if (ok) {
    if (member) {
      for (d = 0; d < tnd; ++d)
        if (ls[d] != elen[d] || lo[d] != eoff[d]) BAD("local shape/offset vs lm_layout_chunk");
    } else {
      /* Placeholder: empty shard, offsets 0. */
      if (tnd > 0 && prod(tnd, ls) != 0) BAD("non-member local shape not empty");
      for (d = 0; d < tnd; ++d)
        if (lo[d] != 0) BAD("non-member offset");
    }
  }
  memset(&view, 0x5a, sizeof view);
  if (lm_dist_tensor_local(t, &view) != LM_SUCCESS) {
    BAD("local view");
  } else {
    if (view.ndim != tnd || !dtype_eq(view.dtype, dt) || view.strides != NULL ||
        view.byte_offset != 0 || view.device.device_type != kDLCPU)
      BAD("view fields");
    for (d = 0; ok && d < tnd; ++d)
      if (view.shape[d] != ls[d]) BAD("view shape");
    if (ok && member && prod(tnd, ls) > 0 && view.data == NULL) BAD("view data NULL");
  }
  if (!ok) {
    fprintf(stderr, "rank %d: check_layout (line %d): %s wrong (member %d)\n", ME, line, why,
            member);
    for (d = 0; d < tnd; ++d)
      fprintf(stderr, "   dim %d: g %lld local %lld@%lld expected %lld@%lld\n", d, (long long)g[d],
              (long long)ls[d], (long long)lo[d], (long long)elen[d], (long long)eoff[d]);
  }
  lm_test__assert_all(ok, "check_layout", __FILE__, line);
#undef BAD
}

/* value of global element at linear index i: distinct, nonzero, exact in every integer type */
static int64_t val_at(int64_t i) { return 3 * i + 1; }

/* Fills a compact local buffer (int64) of box (off, len) of global shape g with val_at(global). */
static void fill_box(int64_t *buf, int tnd, const int64_t *g, const int64_t *off, const int64_t *len) {
  int64_t n = prod(tnd, len), e;
  int d;
  for (e = 0; e < n; ++e) {
    int64_t rem = e, gi = 0, idx[33];
    for (d = tnd - 1; d >= 0; --d) {
      idx[d] = rem % len[d];
      rem /= len[d];
    }
    for (d = 0; d < tnd; ++d) gi = gi * g[d] + off[d] + idx[d];
    buf[e] = val_at(gi);
  }
}

static int64_t *iota_global(int tnd, const int64_t *g) {
  int64_t n = prod(tnd, g), i;
  int64_t *b = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  for (i = 0; i < n; ++i) b[i] = val_at(i);
  return b;
}

static DLTensor dl(void *data, int ndim, int64_t *shape, DLDataType dt) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device = LM_CPU;
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* Builds a tensor from this rank's slice of the iota tensor (GIVEN shape, COPY). Collective check. */
static lm_dist_tensor_t from_iota(lm_mesh_t m, int tnd, const int64_t *g, const lm_placement_t *pl) {
  int64_t off[33], len[33];
  int64_t *buf;
  DLTensor t;
  lm_dist_tensor_t out = NULL;
  my_box(m, tnd, g, pl, off, len);
  buf = (int64_t *)malloc(sizeof(int64_t) * (size_t)(prod(tnd, len) + 1));
  fill_box(buf, tnd, g, off, len);
  t = dl(buf, tnd, len, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY));
  free(buf);
  return out;
}

/* Gathers t to every rank (root < 0) or to `root` and checks against iota; collective. */
static void check_gather_iota(lm_dist_tensor_t t, int tnd, const int64_t *g, int root, int line) {
  int64_t n = prod(tnd, g);
  int64_t *exp = iota_global(tnd, g);
  int64_t *got = (int64_t *)calloc((size_t)(n > 0 ? n : 1), sizeof(int64_t));
  int64_t shape[33];
  int mr = -1, ok = 1, receives;
  lm_mesh_t m = NULL;
  DLTensor dst;
  lm_status_t s;
  memcpy(shape, g, sizeof(int64_t) * (size_t)tnd);
  dst = dl(got, tnd, shape, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(t, &m));
  LM_ASSERT_OK_ALL(lm_mesh_rank(m, &mr));
  receives = root < 0 || mr == root;
  s = lm_dist_tensor_gather(t, root, receives ? &dst : NULL);
  if (s != LM_SUCCESS)
    fprintf(stderr, "rank %d: gather (line %d) failed: %s\n", ME, line, lm_last_error_message());
  if (receives && s == LM_SUCCESS && n > 0 && memcmp(got, exp, sizeof(int64_t) * (size_t)n) != 0) {
    ok = 0;
    fprintf(stderr, "rank %d: gather (line %d, root %d) wrong values\n", ME, line, root);
  }
  lm_test__assert_all(s == LM_SUCCESS && ok, "gather matches the global tensor", __FILE__, line);
  free(exp);
  free(got);
}

static const DLDataType *all_dtypes(int *n) {
  static DLDataType t[12];
  t[0] = LM_FLOAT16;
  t[1] = LM_BFLOAT16;
  t[2] = LM_FLOAT32;
  t[3] = LM_FLOAT64;
  t[4] = LM_INT8;
  t[5] = LM_INT16;
  t[6] = LM_INT32;
  t[7] = LM_INT64;
  t[8] = LM_UINT8;
  t[9] = LM_BOOL;
  t[10] = LM_COMPLEX64;
  t[11] = LM_COMPLEX128;
  *n = 12;
  return t;
}

/* ---------------------------------------------------------------------------------------------
 * zeros and accessors
 * ------------------------------------------------------------------------------------------- */
static void test_zeros_all_dtypes(void **state) {
  lm_mesh_t m = mesh_1d();
  int nt, i;
  const DLDataType *dts = all_dtypes(&nt);
  int64_t g[2] = {5, 3};
  lm_placement_t pl[1];
  (void)state;
  pl[0] = S_(0);
  for (i = 0; i < nt; ++i) {
    lm_dist_tensor_t t = NULL;
    DLTensor v;
    int64_t n, k;
    int zero = 1;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, dts[i], LM_CPU, pl));
    CHECK_LAYOUT(t, m, 2, g, pl, dts[i]);
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
    n = prod(2, v.shape) * (int64_t)esize_of(dts[i]);
    for (k = 0; k < n; ++k)
      if (((unsigned char *)v.data)[k] != 0) zero = 0;
    LM_ASSERT_ALL(zero);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    LM_ASSERT_ALL(t == NULL);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_zeros_uneven_1d(void **state) {
  lm_mesh_t m = mesh_1d();
  static const int64_t shapes[][2] = {{5, 1}, {1, 4}, {17, 2}, {13, 3}, {14, 3}, {0, 4}, {4, 0},
                                      {0, 0}, {8, 8}, {3, 17}};
  size_t s;
  int k;
  (void)state;
  for (s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    for (k = 0; k < 5; ++k) {
      lm_placement_t pl[1];
      lm_dist_tensor_t t = NULL;
      pl[0] = k == 0 ? S_(0) : k == 1 ? S_(1) : k == 2 ? R_ : k == 3 ? P_(LM_REDUCE_SUM)
                                                              : P_(LM_REDUCE_MAX);
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, shapes[s], LM_FLOAT32, LM_CPU, pl));
      CHECK_LAYOUT(t, m, 2, shapes[s], pl, LM_FLOAT32);
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    }
  }
  /* 1-d extents from the torch.chunk examples. */
  {
    static const int64_t n1[] = {5, 1, 17, 13, 14, 0};
    lm_placement_t pl[1];
    pl[0] = S_(0);
    for (s = 0; s < sizeof n1 / sizeof n1[0]; ++s) {
      lm_dist_tensor_t t = NULL;
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n1[s], LM_INT8, LM_CPU, pl));
      CHECK_LAYOUT(t, m, 1, &n1[s], pl, LM_INT8);
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    }
  }
  /* A 0-d tensor (Replicate) holds one element everywhere. */
  {
    lm_dist_tensor_t t = NULL;
    lm_placement_t pl[1];
    DLTensor v;
    pl[0] = R_;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 0, NULL, LM_FLOAT64, LM_CPU, pl));
    CHECK_LAYOUT(t, m, 0, NULL, pl, LM_FLOAT64);
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
    LM_ASSERT_ALL(v.ndim == 0 && v.data != NULL && *(double *)v.data == 0.0);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_zeros_2d_mesh_nested(void **state) {
  lm_mesh_t m = mesh_2d();
  static const int64_t shapes[][2] = {{13, 7}, {17, 5}, {2, 3}, {1, 1}, {0, 5}, {9, 0}};
  lm_placement_t pls[8][2];
  size_t s;
  int k;
  (void)state;
  pls[0][0] = S_(0), pls[0][1] = S_(0);          /* nested, mesh dim 0 first */
  pls[1][0] = So(0, 1), pls[1][1] = So(0, 0);    /* nested, mesh dim 1 first */
  pls[2][0] = S_(0), pls[2][1] = S_(1);
  pls[3][0] = R_, pls[3][1] = S_(1);
  pls[4][0] = P_(LM_REDUCE_SUM), pls[4][1] = S_(0);
  pls[5][0] = S_(1), pls[5][1] = So(1, 3);
  pls[6][0] = So(1, 2), pls[6][1] = So(1, 1);
  pls[7][0] = R_, pls[7][1] = R_;
  for (s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
    for (k = 0; k < 8; ++k) {
      lm_dist_tensor_t t = NULL;
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, shapes[s], LM_INT32, LM_CPU, pls[k]));
      CHECK_LAYOUT(t, m, 2, shapes[s], pls[k], LM_INT32);
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    }
  /* Nested order matters: with both orders the shards tile the tensor, and they differ
   * whenever the first split is uneven (13 over {2, n/2}). Check by gathering iota. */
  for (k = 0; k < 2; ++k) {
    int64_t g[2] = {13, 3};
    lm_dist_tensor_t t = from_iota(m, 2, g, pls[k]);
    CHECK_LAYOUT(t, m, 2, g, pls[k], LM_INT64);
    check_gather_iota(t, 2, g, -1, __LINE__);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* ---------------------------------------------------------------------------------------------
 * from_local
 * ------------------------------------------------------------------------------------------- */
static void test_from_local_given_copy(void **state) {
  lm_mesh_t m = mesh_1d();
  int64_t g[2] = {13, 3};
  lm_placement_t pl[1];
  lm_dist_tensor_t t;
  (void)state;
  pl[0] = S_(0);
  t = from_iota(m, 2, g, pl);
  CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
  check_gather_iota(t, 2, g, -1, __LINE__);
  check_gather_iota(t, 2, g, NP - 1, __LINE__);
  check_gather_iota(t, 2, g, 0, __LINE__);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  pl[0] = S_(1);
  t = from_iota(m, 2, g, pl);
  check_gather_iota(t, 2, g, -1, __LINE__);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_from_local_even(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t ls[2] = {2, 3}, g[2];
  int64_t buf[64];
  DLTensor t;
  lm_dist_tensor_t out = NULL;
  int64_t o, l;
  (void)state;
  memset(buf, 0, sizeof buf);
  pl[0] = S_(0);
  /* Even: every rank holds 2 rows. */
  t = dl(buf, 2, ls, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_EVEN, NULL, LM_FROM_LOCAL_COPY));
  g[0] = 2 * NP;
  g[1] = 3;
  CHECK_LAYOUT(out, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  /* Replicate dims are not multiplied. */
  pl[0] = R_;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_EVEN, NULL, LM_FROM_LOCAL_COPY));
  CHECK_LAYOUT(out, m, 2, ls, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  /* Uneven: rows from torch.chunk(13, n). EVEN assumes local * n; ranks where that layout does
   * not give them their extent fail with INVALID_ARGUMENT, the others succeed (EVEN is local). */
  pl[0] = S_(0);
  LM_ASSERT_OK_ALL(lm_layout_chunk(13, NP, ME, &o, &l));
  ls[0] = l;
  {
    int64_t o2, l2;
    lm_status_t want;
    LM_ASSERT_OK_ALL(lm_layout_chunk(l * NP, NP, ME, &o2, &l2));
    want = (l2 == l) ? LM_SUCCESS : LM_ERR_INVALID_ARGUMENT;
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_EVEN, NULL, LM_FROM_LOCAL_COPY),
               want, "local shape");
    LM_ASSERT_ALL(want == LM_SUCCESS ? out != NULL : out == NULL);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_from_local_allgather(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t ls[2], g[2] = {13, 3}, o, l;
  int64_t buf[64];
  DLTensor t;
  lm_dist_tensor_t out = NULL;
  (void)state;
  memset(buf, 0, sizeof buf);
  pl[0] = S_(0);
  /* Uneven, following torch.chunk: the global shape comes back right on every rank. */
  LM_ASSERT_OK_ALL(lm_layout_chunk(13, NP, ME, &o, &l));
  ls[0] = l;
  ls[1] = 3;
  t = dl(buf, 2, ls, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_ALLGATHER, NULL,
                                             LM_FROM_LOCAL_COPY));
  CHECK_LAYOUT(out, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  /* 1 row on n ranks: ranks > 0 hold 0 rows. */
  LM_ASSERT_OK_ALL(lm_layout_chunk(1, NP, ME, &o, &l));
  ls[0] = l;
  g[0] = 1;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_ALLGATHER, NULL,
                                             LM_FROM_LOCAL_COPY));
  CHECK_LAYOUT(out, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  /* Extents that do not follow torch.chunk (rank 0 has 1, the others 2): an error everywhere. */
  if (NP > 1) {
    ls[0] = ME == 0 ? 1 : 2;
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_ALLGATHER, NULL,
                                         LM_FROM_LOCAL_COPY),
               LM_ERR_INVALID_ARGUMENT, "torch.chunk");
    LM_ASSERT_ALL(out == NULL);
    /* Different ndim on one rank: an error on every rank, no hang. */
    ls[0] = 1;
    t.ndim = ME == 0 ? 1 : 2;
    {
      lm_status_t s = lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_ALLGATHER, NULL,
                                                LM_FROM_LOCAL_COPY);
      LM_ASSERT_ALL(s != LM_SUCCESS && lm_last_error_message()[0] != '\0');
    }
    t.ndim = 2;
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));

  /* 2-D mesh, nested S(0),S(0) in both orders, and S(0),S(1). */
  m = mesh_2d();
  {
    lm_placement_t pls[3][2];
    int k;
    int64_t g2[2] = {13, 5};
    pls[0][0] = S_(0), pls[0][1] = S_(0);
    pls[1][0] = So(0, 1), pls[1][1] = So(0, 0);
    pls[2][0] = S_(0), pls[2][1] = S_(1);
    for (k = 0; k < 3; ++k) {
      int64_t off[2], len[2];
      int64_t *b;
      my_box(m, 2, g2, pls[k], off, len);
      b = (int64_t *)malloc(sizeof(int64_t) * (size_t)(prod(2, len) + 1));
      fill_box(b, 2, g2, off, len);
      t = dl(b, 2, len, LM_INT64);
      LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pls[k], LM_SHAPE_ALLGATHER, NULL,
                                                 LM_FROM_LOCAL_BORROW));
      CHECK_LAYOUT(out, m, 2, g2, pls[k], LM_INT64);
      check_gather_iota(out, 2, g2, -1, __LINE__);
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
      free(b);
    }
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_from_local_copy_strided(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int32_t base[4 * 3];
  int64_t shape[2] = {3, 4}, strides[2] = {1, 3}, gs[2] = {3, 4};
  DLTensor t, v;
  lm_dist_tensor_t out = NULL;
  int i, j, ok = 1;
  (void)state;
  pl[0] = R_;
  for (i = 0; i < 12; ++i) base[i] = 100 + i; /* a 4x3 row-major buffer */
  /* Its transpose: a 3x4 view with strides {1, 3}. */
  t = dl(base, 2, shape, LM_INT32);
  t.strides = strides;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, gs, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(out, &v));
  for (i = 0; i < 3; ++i)
    for (j = 0; j < 4; ++j)
      if (((int32_t *)v.data)[i * 4 + j] != base[j * 3 + i]) ok = 0;
  LM_ASSERT_ALL(ok && v.data != (void *)base);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  /* byte_offset + strides: skip the first row of the 4x3 buffer -> a 3x3 transposed view. */
  {
    int64_t s3[2] = {3, 3}, g3[2] = {3, 3};
    t.shape = s3;
    t.byte_offset = 3 * sizeof(int32_t);
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g3,
                                               LM_FROM_LOCAL_COPY));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(out, &v));
    ok = 1;
    for (i = 0; i < 3; ++i)
      for (j = 0; j < 3; ++j)
        if (((int32_t *)v.data)[i * 3 + j] != base[3 + j * 3 + i]) ok = 0;
    LM_ASSERT_ALL(ok);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
    t.shape = shape;
    t.byte_offset = 0;
  }
  /* BORROW needs a compact buffer. */
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, gs, LM_FROM_LOCAL_BORROW),
             LM_ERR_INVALID_ARGUMENT, "strides");
  LM_ASSERT_ALL(out == NULL);
  /* Strides that are compact are fine for BORROW. */
  {
    int64_t cs[2] = {4, 1};
    t.strides = cs;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, gs,
                                               LM_FROM_LOCAL_BORROW));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* lm_local_map's fn on a padded input: the view has the input's strides; it returns the sum of
 * each row (read through the strides) as a compact [rows] output. */
static lm_status_t row_sums(void *user, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  (void)user, (void)mesh, (void)nin, (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  if (!x->strides || x->strides[1] != 1) return LM_ERR_INVALID_ARGUMENT; /* padded rows expected */
  DLManagedTensor *y = NULL;
  lm_status_t st = lm_tensor_alloc(&y, 1, x->shape, LM_INT32, LM_CPU);
  if (st != LM_SUCCESS) return st;
  for (int64_t i = 0; i < x->shape[0]; ++i) {
    int32_t sum = 0;
    for (int64_t j = 0; j < x->shape[1]; ++j) sum += ((const int32_t *)x->data)[i * x->strides[0] + j];
    ((int32_t *)y->dl_tensor.data)[i] = sum;
  }
  out[0] = lm_arg_managed(y);
  return LM_SUCCESS;
}

/* A padded borrow (LM_FROM_LOCAL_BORROW of the first 3 columns of a row-major 4 x 5 array, strides
 * {5, 1}; also a column [4, 1]): no copy, views with the strides (local, export, lm_local_map),
 * reshards and gather read it, a plan and a nonblocking request write into it, the padding never
 * touched; transposed strides are still refused. */
static void test_from_local_borrow_padded(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  int32_t base[4 * 5], back[4 * 5];
  for (int i = 0; i < 20; ++i) base[i] = 100 + i;
  int64_t shape[2] = {4, 3}, strides[2] = {5, 1};
  DLTensor t = dl(base, 2, shape, LM_INT32), v;
  t.strides = strides;
  lm_placement_t rep[1] = {{LM_REPLICATE, 0, 0, 0, 0, 0, 0, 0}}, s0[1] = {S_(0)};
  lm_dist_tensor_t x = NULL, y = NULL, z = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &t, rep, LM_SHAPE_EVEN, NULL,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(x, &v));
  int ok = v.data == (void *)base && v.strides && v.strides[0] == 5 && v.strides[1] == 1;
  /* lm_padded_extents: the array the view lies in; a compact view's own shape; refusals. */
  int64_t ext[2] = {0, 0};
  LM_ASSERT_OK(lm_padded_extents(&v, ext, 2));
  ok &= ext[0] == 4 && ext[1] == 5;
  DLTensor cv = dl(base, 2, shape, LM_INT32);
  LM_ASSERT_OK(lm_padded_extents(&cv, ext, 2));
  ok &= ext[0] == 4 && ext[1] == 3;
  int64_t tr[2] = {1, 4}, col_st[2] = {5, 1}, col_sh[2] = {4, 1};
  DLTensor cl = dl(base, 2, col_sh, LM_INT32); /* a column: padded to the array's 5 columns */
  cl.strides = col_st;
  LM_ASSERT_OK(lm_padded_extents(&cl, ext, 2));
  ok &= ext[0] == 4 && ext[1] == 5;
  cv.strides = tr;
  LM_EXPECT_ALL(lm_padded_extents(&cv, ext, 2), LM_ERR_INVALID_ARGUMENT,
                "neither compact nor padded");
  LM_EXPECT_ALL(lm_padded_extents(&v, ext, 1), LM_ERR_INVALID_ARGUMENT, "n = 1");
  LM_EXPECT_ALL(lm_padded_extents(&v, NULL, 2), LM_ERR_INVALID_ARGUMENT, "extents");
  LM_EXPECT_ALL(lm_padded_extents(NULL, ext, 2), LM_ERR_INVALID_ARGUMENT, "view");
  DLManagedTensor *e = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(x, &e));
  ok &= e->dl_tensor.data == (void *)base && e->dl_tensor.strides && e->dl_tensor.strides[0] == 5;
  e->deleter(e);
  /* Read: a reshard to row shards and a gather see the 4 x 3 matrix. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, s0));
  int64_t ls[2] = {0, 0}, lo[2] = {0, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_shape(y, ls, 2));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_offset(y, lo, 2));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(y, &v));
  ok &= v.strides == NULL;
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int j = 0; j < 3; ++j) ok &= ((int32_t *)v.data)[i * 3 + j] == base[(lo[0] + i) * 5 + j];
  int32_t full[12];
  int64_t fs[2] = {4, 3};
  DLTensor ft = dl(full, 2, fs, LM_INT32);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(x, -1, &ft));
  for (int i = 0; i < 12; ++i) ok &= full[i] == base[(i / 3) * 5 + i % 3];
  /* lm_local_map sees the strides. */
  lm_arg_t in[1] = {lm_arg_dist(x)}, out[1];
  const lm_placement_t *opl[1] = {rep};
  LM_ASSERT_OK_ALL(lm_local_map(row_sums, NULL, 1, in, NULL, 1, opl, NULL, NULL, 0, out));
  z = (lm_dist_tensor_t)out[0].ptr;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(z, &v));
  for (int i = 0; i < 4; ++i) ok &= ((int32_t *)v.data)[i] == 3 * (100 + 5 * i) + 3;
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&z));
  /* Written: a plan and a nonblocking request from the row shards into a padded borrow. */
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < 20; ++i) back[i] = i % 5 < 3 ? -1 : -7;
    t.data = back;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&z, m, &t, rep, LM_SHAPE_EVEN, NULL,
                                               LM_FROM_LOCAL_BORROW));
    lm_reshard_plan_t plan = NULL;
    LM_ASSERT_OK(lm_reshard_plan_create(&plan, m, s0, NULL, rep, 2, shape, LM_INT32));
    if (k == 0) {
      LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, y, z));
    } else {
      lm_request_t q = NULL;
      LM_ASSERT_OK_ALL(lm_reshard_plan_start(&q, plan, y, z));
      LM_ASSERT_OK_ALL(lm_request_wait(&q));
    }
    for (int i = 0; i < 20; ++i) ok &= back[i] == (i % 5 < 3 ? base[i] : -7);
    LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&z));
  }
  /* A column [4, 1] (strides {5, 1}: one element per row of the array) is padded too; as a 1-D
   * tensor (strides {5}) it is not (no dim to pad): refused below. */
  int64_t cshape[2] = {4, 1}, cstr[2] = {5, 1};
  DLTensor c = dl(base + 1, 2, cshape, LM_INT32);
  c.strides = cstr;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&z, m, &c, rep, LM_SHAPE_EVEN, NULL,
                                             LM_FROM_LOCAL_BORROW));
  int32_t col[4];
  DLTensor ct = dl(col, 2, cshape, LM_INT32);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(z, -1, &ct));
  for (int i = 0; i < 4; ++i) ok &= col[i] == base[1 + 5 * i];
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&z));
  LM_ASSERT_ALL(ok);
  /* Transposed (not nested) strides stay refused for a borrow. */
  int64_t tst[2] = {1, 4};
  t.strides = tst;
  t.data = base;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&z, m, &t, rep, LM_SHAPE_EVEN, NULL,
                                          LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "neither compact nor padded");
  c.ndim = 1;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&z, m, &c, rep, LM_SHAPE_EVEN, NULL,
                                          LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "neither compact nor padded");
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Padded borrows are read and written in place. A [N, C] f64 matrix (N uneven over the ranks),
 * element (i, j) = i * C + j, in row shards whose local arrays have 7 columns more than they hold
 * (their padding a sentinel): resharded to column shards by a one-shot reshard and by a plan into
 * a padded column-shard array (blocking and nonblocking), back into padded row shards, and
 * gathered; every element and every padding element checked. Between two padded arrays of the
 * same layout (a local copy, by a plan and by a group) the buffer pool's high-water mark does not
 * move: no compact stand-in of either shard (each would take its shard's bytes). A Partial(sum)
 * padded borrow reshards exactly, read in place by the reduce-scatter, and is written by one into
 * a padded target row by row, the padding kept: no more pool memory than into a compact target
 * (a compact stand-in of the target would take its shard's bytes). */
static int64_t padded_rows(int64_t n, int64_t *lo) {
  const int64_t per = (n + NP - 1) / NP;
  *lo = per * ME < n ? per * ME : n;
  return *lo + per < n ? per : n - *lo;
}
/* Pool bytes one execution of plan p (src x, dst y) takes above what is in use, after a first
 * execution that prepares the plan's buffers and variants. */
static int64_t execute_pool_bytes(lm_reshard_plan_t p, lm_dist_tensor_t x, lm_dist_tensor_t y) {
  int64_t in_use = 0, peak = 0;
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, y));
  LM_ASSERT_OK(lm_pool_stats(&in_use, NULL, 1));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, y));
  LM_ASSERT_OK(lm_pool_stats(NULL, &peak, 0));
  return peak - in_use;
}
static DLTensor padded_view(double *a, int64_t *shape, int64_t *strides) {
  DLTensor t = dl(a, 2, shape, LM_FLOAT64);
  t.strides = strides;
  return t;
}
static void test_padded_in_place(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  const int64_t N = 37 * NP + 3, C = 300, G[2] = {N, C};
  int64_t lo, clo;
  const int64_t rows = padded_rows(N, &lo), cols = padded_rows(C, &clo);
  const int64_t rld = C + 7, cld = cols + 7;
  double *a = malloc(sizeof(double) * (size_t)((rows ? rows : 1) * rld));
  double *b = malloc(sizeof(double) * (size_t)(N * cld));
  double *z = malloc(sizeof(double) * (size_t)((rows ? rows : 1) * rld));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rld; ++j) a[i * rld + j] = j < C ? (double)((lo + i) * C + j) : -7;
  int64_t rshape[2] = {rows, C}, rstr[2] = {rld, 1}, cshape[2] = {N, cols}, cstr[2] = {cld, 1};
  DLTensor ta = padded_view(a, rshape, rstr), tb = padded_view(b, cshape, cstr);
  DLTensor tz = padded_view(z, rshape, rstr);
  lm_placement_t s0[1] = {S_(0)}, s1[1] = {S_(1)};
  lm_dist_tensor_t x = NULL, y = NULL, w = NULL, back = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &ta, s0, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  int64_t bad = 0;
  /* One-shot: column shards read from the padded rows. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&w, x, NULL, s1));
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(w, &v));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < cols; ++j) bad += ((double *)v.data)[i * cols + j] != (double)(i * C + clo + j);
  /* Plans into the padded column array, blocking then nonblocking. */
  lm_reshard_plan_t to_cols = NULL, to_rows = NULL, same = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&to_cols, m, s0, NULL, s1, 2, G, LM_FLOAT64));
  LM_ASSERT_OK(lm_reshard_plan_create(&to_rows, m, s1, NULL, s0, 2, G, LM_FLOAT64));
  LM_ASSERT_OK(lm_reshard_plan_create(&same, m, s0, NULL, s0, 2, G, LM_FLOAT64));
  for (int k = 0; k < 2; ++k) {
    for (int64_t e = 0; e < N * cld; ++e) b[e] = e % cld < cols ? -1 : -7;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&y, m, &tb, s1, LM_SHAPE_GIVEN, G,
                                               LM_FROM_LOCAL_BORROW));
    if (k == 0) {
      LM_ASSERT_OK_ALL(lm_reshard_plan_execute(to_cols, x, y));
    } else {
      lm_request_t q = NULL;
      LM_ASSERT_OK_ALL(lm_reshard_plan_start(&q, to_cols, x, y));
      LM_ASSERT_OK_ALL(lm_request_wait(&q));
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < cld; ++j)
        bad += b[i * cld + j] != (j < cols ? (double)(i * C + clo + j) : -7);
    /* Back into padded rows (the padded columns read in place), then gathered. */
    for (int64_t e = 0; e < rows * rld; ++e) z[e] = e % rld < C ? -1 : -7;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&back, m, &tz, s0, LM_SHAPE_GIVEN, G,
                                               LM_FROM_LOCAL_BORROW));
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(to_rows, y, back));
    for (int64_t e = 0; e < rows * rld; ++e) bad += z[e] != a[e];
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&y));
    if (k == 0) LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&back));
  }
  double *full = malloc(sizeof(double) * (size_t)(N * C));
  int64_t fs[2] = {N, C};
  DLTensor ft = dl(full, 2, fs, LM_FLOAT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(back, -1, &ft));
  for (int64_t e = 0; e < N * C; ++e) bad += full[e] != (double)e;
  /* Same layout, padded to padded: a local copy that needs no pool memory at all. */
  for (int64_t e = 0; e < rows * rld; ++e) z[e] = e % rld < C ? -1 : -7;
  int64_t in_use = 0, peak = 0;
  const int64_t copy_bytes = execute_pool_bytes(same, x, back);
  for (int64_t e = 0; e < rows * rld; ++e) bad += z[e] != a[e];
  if (copy_bytes != 0)
    fprintf(stderr, "rank %d: a padded copy took %lld pool bytes\n", ME, (long long)copy_bytes);
  bad += copy_bytes != 0;
  /* The same copy as a group of one entry (its executor built at the first execution). */
  lm_reshard_entry_t ge = {2, G, LM_FLOAT64, s0, s0};
  lm_reshard_group_t grp = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&grp, m, NULL, 1, &ge, NULL));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(grp, 1, &x, &back));
  for (int64_t e = 0; e < rows * rld; ++e) z[e] = e % rld < C ? -1 : -7;
  LM_ASSERT_OK(lm_pool_stats(&in_use, NULL, 1));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(grp, 1, &x, &back));
  LM_ASSERT_OK(lm_pool_stats(NULL, &peak, 0));
  for (int64_t e = 0; e < rows * rld; ++e) bad += z[e] != a[e];
  if (peak != in_use)
    fprintf(stderr, "rank %d: a grouped padded copy took %lld pool bytes\n", ME,
            (long long)(peak - in_use));
  bad += peak != in_use;
  LM_ASSERT_OK(lm_reshard_group_destroy(&grp));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&same));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&to_rows));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&to_cols));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&w));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x));
  /* Partial(sum): every rank holds the whole [N, C] (its own array's padded rows), value ME + 1. */
  double *p = malloc(sizeof(double) * (size_t)(N * rld));
  for (int64_t e = 0; e < N * rld; ++e) p[e] = e % rld < C ? (double)(ME + 1) + (double)(e / rld) : -7;
  int64_t pshape[2] = {N, C};
  DLTensor tp = padded_view(p, pshape, rstr);
  lm_placement_t ps[1] = {P_(LM_REDUCE_SUM)};
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &tp, ps, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&w, x, NULL, s0));
  LM_ASSERT_OK(lm_dist_tensor_local(w, &v));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < C; ++j)
      bad += ((double *)v.data)[i * C + j] != (double)(NP * (NP + 1) / 2) + (double)(NP * (lo + i));
  for (int64_t e = 0; e < N * rld; ++e) bad += e % rld >= C && p[e] != -7;
  for (int64_t e = 0; e < rows * rld; ++e) z[e] = e % rld < C ? -1 : -7;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&back, m, &tz, s0, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  lm_reshard_plan_t rs = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&rs, m, ps, NULL, s0, 2, G, LM_FLOAT64));
  /* The pool memory of the same plan into a compact target, after a first execution. */
  lm_dist_tensor_t cz = NULL;
  const DLDevice host = {kDLCPU, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&cz, m, 2, G, LM_FLOAT64, host, s0));
  const int64_t compact_bytes = execute_pool_bytes(rs, x, cz);
  const int64_t padded_bytes = execute_pool_bytes(rs, x, back);
  /* Both shards are used in place: the reduce-scatter reads the padded source and reduces into
   * the padded target's rows, taking no more pool memory than into a compact target. */
  if (padded_bytes > compact_bytes) {
    fprintf(stderr, "rank %d: a padded P(sum) -> S(0) took %lld pool bytes, %lld into a compact "
            "target (target shard %lld)\n", ME, (long long)padded_bytes,
            (long long)compact_bytes, (long long)(rows * C * 8));
    ++bad;
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rld; ++j)
      bad += z[i * rld + j] !=
             (j < C ? (double)(NP * (NP + 1) / 2) + (double)(NP * (lo + i)) : -7);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&cz));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&rs));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&w));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x));
  if (bad) fprintf(stderr, "rank %d: %lld wrong\n", ME, (long long)bad);
  LM_ASSERT_ALL(bad == 0);
  free(p);
  free(full);
  free(z);
  free(b);
  free(a);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Padded targets of reduce-scatters and Partial fills (P -> S, R -> P) are written row by row in
 * place where their rows take LM_PAD_IN_PLACE_MIN_RUN bytes (default 1K; here 2400 and 1200): a
 * padded P(sum) source into a padded S(0) target (test_padded_in_place), R -> P(sum) into a
 * padded target with no pool memory, and a group of P(sum) -> S(0), R -> P(sum) and an int32
 * Partial(avg) -> S(0) (128-bit sums) into padded targets, every padding element kept. Rows
 * shorter than the setting take a stand-in of the target, the source still read in place (pool
 * memory below copies of both shards). */
static void test_padded_partial_targets(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  const int64_t N = 37 * NP + 3, C = 300, G[2] = {N, C};
  int64_t lo;
  const int64_t rows = padded_rows(N, &lo), rld = C + 7;
  int64_t rstr[2] = {rld, 1}, pshape[2] = {N, C}, rshape[2] = {rows, C};
  int64_t bad = 0;
  lm_placement_t s0[1] = {S_(0)}, ps[1] = {P_(LM_REDUCE_SUM)};
  double *p = malloc(sizeof(double) * (size_t)(N * rld));
  double *z = malloc(sizeof(double) * (size_t)((rows ? rows : 1) * rld));
  for (int64_t e = 0; e < N * rld; ++e) p[e] = e % rld < C ? (double)(ME + 1) + (double)(e / rld) : -7;
  DLTensor tp = padded_view(p, pshape, rstr), tz = padded_view(z, rshape, rstr);
  lm_dist_tensor_t x = NULL, back = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &tp, ps, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&back, m, &tz, s0, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  /* R -> P(sum) of x's sum: the rows of ranks but the first filled with zeros. */
  double *q = malloc(sizeof(double) * (size_t)(N * rld));
  for (int64_t e = 0; e < N * rld; ++e) q[e] = -7;
  lm_dist_tensor_t pq = NULL, rep = NULL;
  DLTensor tq = padded_view(q, pshape, rstr);
  lm_placement_t r1[1] = {R_};
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&pq, m, &tq, ps, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&rep, x, NULL, r1));
  lm_reshard_plan_t rp = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&rp, m, r1, NULL, ps, 2, G, LM_FLOAT64));
  const int64_t fill_bytes = execute_pool_bytes(rp, rep, pq);
  if (fill_bytes != 0) { /* a local copy and a fill of the rows: nothing from the pool */
    fprintf(stderr, "rank %d: a padded R -> P(sum) took %lld pool bytes\n", ME,
            (long long)fill_bytes);
    ++bad;
  }
  const double total = (double)(NP * (NP + 1) / 2);
  for (int64_t e = 0; e < N * rld; ++e)
    bad += q[e] != (e % rld >= C ? -7 : ME ? 0 : total + (double)(NP * (e / rld)));
  /* The group's third entry: an int32 Partial(avg) (128-bit sums) into padded int32 rows. */
  int32_t *pi = malloc(sizeof(int32_t) * (size_t)(N * rld));
  int32_t *zi = malloc(sizeof(int32_t) * (size_t)((rows ? rows : 1) * rld));
  for (int64_t e = 0; e < N * rld; ++e) pi[e] = e % rld < C ? (int32_t)(2 * ME + (e / rld) % 100) : -7;
  DLTensor tpi = padded_view((double *)(void *)pi, pshape, rstr);
  DLTensor tzi = padded_view((double *)(void *)zi, rshape, rstr);
  tpi.dtype = tzi.dtype = LM_INT32;
  lm_placement_t pa[1] = {P_(LM_REDUCE_AVG)};
  lm_dist_tensor_t xi = NULL, bi = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&xi, m, &tpi, pa, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&bi, m, &tzi, s0, LM_SHAPE_GIVEN, G,
                                             LM_FROM_LOCAL_BORROW));
  lm_reshard_entry_t three[3] = {{2, G, LM_FLOAT64, ps, s0}, {2, G, LM_FLOAT64, r1, ps},
                                 {2, G, LM_INT32, pa, s0}};
  lm_reshard_group_t g3 = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g3, m, NULL, 3, three, NULL));
  for (int k = 0; k < 2; ++k) {
    for (int64_t e = 0; e < rows * rld; ++e) z[e] = e % rld < C ? -1 : -7;
    for (int64_t e = 0; e < rows * rld; ++e) zi[e] = e % rld < C ? -1 : -7;
    for (int64_t e = 0; e < N * rld; ++e) q[e] = e % rld < C ? -1 : -7;
    lm_dist_tensor_t gs[3] = {x, rep, xi}, gd[3] = {back, pq, bi};
    LM_ASSERT_OK_ALL(lm_reshard_group_execute(g3, 3, gs, gd));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < rld; ++j) {
        bad += z[i * rld + j] != (j < C ? total + (double)(NP * (lo + i)) : -7);
        bad += zi[i * rld + j] != (j < C ? (int32_t)(NP - 1 + (lo + i) % 100) : -7);
      }
    for (int64_t e = 0; e < N * rld; ++e)
      bad += q[e] != (e % rld >= C ? -7 : ME ? 0 : total + (double)(NP * (e / rld)));
  }
  LM_ASSERT_OK(lm_reshard_group_destroy(&g3));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&bi));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&xi));
  free(zi);
  free(pi);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&rp));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&rep));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&pq));
  free(q);
  /* Rows shorter than LM_PAD_IN_PLACE_MIN_RUN (default 1 KiB: a reduction call per row would
   * cost more than a copy): N4 x 4 in rows of 7, chunks of 32 KiB or more (sent as boxes). The
   * padded target goes through a compact copy of its shard while the padded source is read in
   * place: less pool memory than a compact copy of each shard and the compact reduce-scatter's
   * NP - 1 receive slots (what running on copies of both takes). */
  int64_t lo4;
  const int64_t C4 = 4, ld4 = 7, N4 = 1024 * NP + 3, rows4 = padded_rows(N4, &lo4);
  int64_t g4[2] = {N4, C4}, p4shape[2] = {N4, C4}, z4shape[2] = {rows4, C4}, str4[2] = {ld4, 1};
  double *p4 = malloc(sizeof(double) * (size_t)(N4 * ld4));
  double *z4 = malloc(sizeof(double) * (size_t)((rows4 ? rows4 : 1) * ld4));
  for (int64_t e = 0; e < N4 * ld4; ++e)
    p4[e] = e % ld4 < C4 ? (double)(ME + 1) + (double)(e / ld4) : -7;
  for (int64_t e = 0; e < rows4 * ld4; ++e) z4[e] = e % ld4 < C4 ? -1 : -7;
  DLTensor tp4 = padded_view(p4, p4shape, str4), tz4 = padded_view(z4, z4shape, str4);
  lm_dist_tensor_t x4 = NULL, b4 = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x4, m, &tp4, ps, LM_SHAPE_GIVEN, g4,
                                             LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&b4, m, &tz4, s0, LM_SHAPE_GIVEN, g4,
                                             LM_FROM_LOCAL_BORROW));
  lm_reshard_plan_t rs4 = NULL;
  LM_ASSERT_OK(lm_reshard_plan_create(&rs4, m, ps, NULL, s0, 2, g4, LM_FLOAT64));
  const int64_t short_bytes = execute_pool_bytes(rs4, x4, b4);
  const int64_t copies = (N4 + rows4 + (NP - 1) * rows4) * C4 * (int64_t)sizeof(double);
  if (short_bytes >= copies) {
    fprintf(stderr, "rank %d: a padded P(sum) -> S(0) of short rows took %lld pool bytes (on "
            "copies of both shards: %lld)\n", ME, (long long)short_bytes, (long long)copies);
    ++bad;
  }
  for (int64_t i = 0; i < rows4; ++i)
    for (int64_t j = 0; j < ld4; ++j)
      bad += z4[i * ld4 + j] != (j < C4 ? total + (double)(NP * (lo4 + i)) : -7);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&rs4));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&b4));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x4));
  free(z4);
  free(p4);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x));
  if (bad) fprintf(stderr, "rank %d: %lld wrong\n", ME, (long long)bad);
  LM_ASSERT_ALL(bad == 0);
  free(z);
  free(p);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_from_local_borrow_vs_copy(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  double buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t ls[1] = {6}, g[1];
  DLTensor t, v;
  lm_dist_tensor_t b = NULL, c = NULL;
  (void)state;
  pl[0] = S_(0);
  g[0] = 6 * NP;
  t = dl(buf, 1, ls, LM_FLOAT64);
  t.byte_offset = 2 * sizeof(double); /* the shard starts at buf[2] */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&b, m, &t, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  t.byte_offset = 0;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&c, m, &t, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(b, &v));
  LM_ASSERT_ALL((double *)v.data == &buf[2] && ((double *)v.data)[0] == 3.0);
  ((double *)v.data)[1] = -42.0; /* writing through the view changes the caller's buffer */
  LM_ASSERT_ALL(buf[3] == -42.0);
  buf[2] = 99.0; /* and the other way round */
  LM_ASSERT_ALL(((double *)v.data)[0] == 99.0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(c, &v));
  LM_ASSERT_ALL((double *)v.data != buf && ((double *)v.data)[0] == 1.0 && ((double *)v.data)[3] == 4.0);
  ((double *)v.data)[0] = -1.0;
  LM_ASSERT_ALL(buf[0] == 1.0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&b));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&c));
  LM_ASSERT_ALL(buf[0] == 1.0 && buf[3] == -42.0); /* the borrowed buffer is not freed */
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* ---------------------------------------------------------------------------------------------
 * from_managed, export, reference counts
 * ------------------------------------------------------------------------------------------- */
struct managed_box {
  DLManagedTensor mt;
  int64_t shape[2];
  int *deleted;
  int64_t data[64];
};

static void managed_deleter(DLManagedTensor *self) {
  struct managed_box *b = (struct managed_box *)self->manager_ctx;
  (*b->deleted)++;
  free(b);
}

static DLManagedTensor *make_managed(int *deleted, int64_t rows, int64_t cols) {
  struct managed_box *b = (struct managed_box *)calloc(1, sizeof *b);
  int i;
  b->shape[0] = rows;
  b->shape[1] = cols;
  b->deleted = deleted;
  for (i = 0; i < 64; ++i) b->data[i] = 1000 + i;
  b->mt.dl_tensor = dl(b->data, 2, b->shape, LM_INT64);
  b->mt.manager_ctx = b;
  b->mt.deleter = managed_deleter;
  return &b->mt;
}

static void test_from_managed_ownership(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int deleted = 0;
  int64_t g[2];
  DLManagedTensor *mt = make_managed(&deleted, 2, 3);
  lm_dist_tensor_t t = NULL, copy;
  DLTensor v;
  (void)state;
  pl[0] = S_(0);
  g[0] = 2 * NP;
  g[1] = 3;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, g));
  LM_ASSERT_ALL(deleted == 0);
  CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  LM_ASSERT_ALL(v.data == mt->dl_tensor.data && ((int64_t *)v.data)[5] == 1005);
  LM_ASSERT_OK_ALL(lm_dist_tensor_retain(t));
  copy = t;
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&copy));
  LM_ASSERT_ALL(copy == NULL && deleted == 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(deleted == 1);

  /* EVEN and ALLGATHER work too. */
  mt = make_managed(&deleted, 2, 3);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_ALLGATHER, NULL));
  CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(deleted == 2);

  /* Failures keep ownership with the caller: the deleter is not called. */
  mt = make_managed(&deleted, 2, 3);
  {
    lm_placement_t bad[1];
    int64_t wrong[2] = {2 * NP + 5, 3};
    bad[0] = S_(2);
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, bad, LM_SHAPE_GIVEN, g),
               LM_ERR_INVALID_ARGUMENT, "placements");
    LM_ASSERT_ALL(t == NULL && deleted == 2);
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, wrong),
               LM_ERR_INVALID_ARGUMENT, "shape");
    LM_ASSERT_ALL(t == NULL && deleted == 2);
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, NULL, LM_SHAPE_GIVEN, g),
               LM_ERR_INVALID_ARGUMENT, "placements");
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, NULL, mt, pl, LM_SHAPE_GIVEN, g),
               LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, NULL, pl, LM_SHAPE_GIVEN, g),
               LM_ERR_INVALID_ARGUMENT, "local");
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(NULL, m, mt, pl, LM_SHAPE_GIVEN, g),
               LM_ERR_INVALID_ARGUMENT, "out");
    /* A strided managed tensor is refused (it must be compact). */
    {
      int64_t st[2] = {1, 2};
      mt->dl_tensor.strides = st;
      LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, g),
                 LM_ERR_INVALID_ARGUMENT, "strides");
      mt->dl_tensor.strides = NULL;
    }
    LM_ASSERT_ALL(deleted == 2);
  }
  mt->deleter(mt); /* still ours */
  LM_ASSERT_ALL(deleted == 3);

  /* Export of a managed-backed tensor keeps the data alive past the tensor. */
  mt = make_managed(&deleted, 2, 3);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, g));
  {
    DLManagedTensor *ex = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    LM_ASSERT_ALL(deleted == 3);
    LM_ASSERT_ALL(((int64_t *)ex->dl_tensor.data)[4] == 1004);
    ex->deleter(ex);
    LM_ASSERT_ALL(deleted == 4);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}


static void test_export(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t g[2] = {13, 3}, off[2], len[2];
  lm_dist_tensor_t t, keep;
  DLManagedTensor *ex = NULL, *ex2 = NULL;
  DLTensor v;
  int64_t *expect;
  int ok = 1;
  (void)state;
  pl[0] = S_(0);
  t = from_iota(m, 2, g, pl);
  my_box(m, 2, g, pl, off, len);
  expect = (int64_t *)malloc(sizeof(int64_t) * (size_t)(prod(2, len) + 1));
  fill_box(expect, 2, g, off, len);
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex));
  LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex2));
  LM_ASSERT_ALL(ex != NULL && ex2 != NULL && ex != ex2 && ex->deleter != NULL);
  LM_ASSERT_ALL(ex->dl_tensor.data == v.data && ex->dl_tensor.ndim == 2 &&
                ex->dl_tensor.shape[0] == len[0] && ex->dl_tensor.shape[1] == len[1] &&
                dtype_eq(ex->dl_tensor.dtype, LM_INT64) && ex->dl_tensor.device.device_type == kDLCPU &&
                (ex->dl_tensor.strides == NULL ||
                 (ex->dl_tensor.strides[1] == 1 && ex->dl_tensor.strides[0] == len[1])));
  /* The export holds a reference: destroy the tensor, the data stays valid. */
  keep = t;
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(t == NULL);
  if (prod(2, len) > 0 &&
      memcmp((char *)ex->dl_tensor.data + ex->dl_tensor.byte_offset, expect,
             sizeof(int64_t) * (size_t)prod(2, len)) != 0)
    ok = 0;
  LM_ASSERT_ALL(ok);
  /* ... but the destroyed handle is dead (issue 8 item 3: it used to stay live, and destroying
   * it again dropped the export's reference). */
  {
    int nd = -1;
    LM_EXPECT_ALL(lm_dist_tensor_ndim(keep, &nd), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_destroy(&keep), LM_ERR_INVALID_ARGUMENT, "tensor");
  }
  if (prod(2, len) > 0 && memcmp(ex->dl_tensor.data, expect, sizeof(int64_t) * (size_t)prod(2, len)) != 0)
    ok = 0;
  LM_ASSERT_ALL(ok);
  ex->deleter(ex);
  /* The second export still holds it. */
  if (prod(2, len) > 0 && memcmp(ex2->dl_tensor.data, expect, sizeof(int64_t) * (size_t)prod(2, len)) != 0)
    ok = 0;
  LM_ASSERT_ALL(ok);
  ex2->deleter(ex2);
  free(expect);
  LM_EXPECT_ALL(lm_dist_tensor_to_dlpack(NULL, &ex), LM_ERR_INVALID_ARGUMENT, "tensor");
  {
    lm_dist_tensor_t z = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&z, m, 2, g, LM_INT64, LM_CPU, pl));
    LM_EXPECT_ALL(lm_dist_tensor_to_dlpack(z, NULL), LM_ERR_INVALID_ARGUMENT, "managed");
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&z));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* A tensor keeps its mesh alive; retain/destroy counts; destroy of NULL is fine. */
static void test_retain_destroy_and_mesh_lifetime(void **state) {
  lm_mesh_t m = mesh_1d(), tm = NULL;
  lm_placement_t pl[1];
  int64_t g[2] = {7, 2};
  lm_dist_tensor_t t, a, b, nul = NULL;
  int deleted = 0, sz = -1;
  DLManagedTensor *mt;
  int64_t g2[2];
  (void)state;
  pl[0] = S_(0);
  t = from_iota(m, 2, g, pl);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m)); /* the tensor still holds the mesh */
  LM_ASSERT_ALL(m == NULL);
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(t, &tm));
  LM_ASSERT_OK_ALL(lm_mesh_size(tm, &sz));
  LM_ASSERT_ALL(sz == NP);
  check_gather_iota(t, 2, g, -1, __LINE__);
  LM_ASSERT_OK_ALL(lm_dist_tensor_retain(t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_retain(t));
  a = t;
  b = t;
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&a));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&b));
  LM_ASSERT_ALL(a == NULL && b == NULL);
  check_gather_iota(t, 2, g, 0, __LINE__); /* one reference left: still works */
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(NULL));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&nul));

  /* Count the releases through a managed tensor's deleter: n retains need n+1 destroys. */
  m = mesh_1d();
  mt = make_managed(&deleted, 1, 2);
  g2[0] = NP;
  g2[1] = 2;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, g2));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  {
    int i;
    for (i = 0; i < 3; ++i) LM_ASSERT_OK_ALL(lm_dist_tensor_retain(t));
    for (i = 0; i < 3; ++i) {
      a = t;
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&a));
      LM_ASSERT_ALL(deleted == 0);
    }
  }
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(deleted == 1);
}

/* ---------------------------------------------------------------------------------------------
 * from_global, gather
 * ------------------------------------------------------------------------------------------- */
static void from_global_case(lm_mesh_t m, int tnd, const int64_t *g, const lm_placement_t *pl,
                             int root, int line) {
  int64_t *full = iota_global(tnd, g);
  int64_t shape[33], off[33], len[33];
  int mr = -1, ok = 1, member, mnd = 0, k, partial_nonzero = 0;
  DLTensor gt, v;
  lm_dist_tensor_t t = NULL;
  lm_status_t s;
  int64_t *expect;
  memcpy(shape, g, sizeof(int64_t) * (size_t)tnd);
  gt = dl(full, tnd, shape, LM_INT64);
  member = my_box(m, tnd, g, pl, off, len);
  if (member) LM_ASSERT_OK(lm_mesh_rank(m, &mr));
  s = lm_dist_tensor_from_global(&t, m, (root < 0 || mr == root) ? &gt : NULL, pl, root);
  if (s != LM_SUCCESS)
    fprintf(stderr, "rank %d: from_global (line %d) failed: %s\n", ME, line, lm_last_error_message());
  lm_test__assert_all(s == LM_SUCCESS, "from_global", __FILE__, line);
  check_layout(t, m, tnd, g, pl, LM_INT64, line);
  /* The local shard is the slice of the global tensor, except Partial dims at coordinate != 0
   * (sum: zeros, as in a reshard from Replicate), which we check through gather. */
  LM_ASSERT_OK_ALL(lm_mesh_ndim(m, &mnd));
  if (member) {
    int64_t coord[8];
    LM_ASSERT_OK(lm_mesh_coord(m, coord, 8));
    for (k = 0; k < mnd; ++k)
      if (pl[k].kind == LM_PARTIAL && coord[k] != 0) partial_nonzero = 1;
  }
  expect = (int64_t *)malloc(sizeof(int64_t) * (size_t)(prod(tnd, len) + 1));
  fill_box(expect, tnd, g, off, len);
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  if (member && !partial_nonzero && prod(tnd, len) > 0 &&
      memcmp(v.data, expect, sizeof(int64_t) * (size_t)prod(tnd, len)) != 0)
    ok = 0;
  lm_test__assert_all(ok, "from_global local slice", __FILE__, line);
  check_gather_iota(t, tnd, g, -1, line);
  check_gather_iota(t, tnd, g, 0, line);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  free(expect);
  free(full);
}

static void test_from_global(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[2];
  int64_t g[2] = {13, 5}, g1[1] = {17};
  int k;
  (void)state;
  for (k = 0; k < 4; ++k) {
    pl[0] = k == 0 ? S_(0) : k == 1 ? S_(1) : k == 2 ? R_ : P_(LM_REDUCE_SUM);
    from_global_case(m, 2, g, pl, -1, __LINE__);
    from_global_case(m, 2, g, pl, NP - 1, __LINE__);
    from_global_case(m, 2, g, pl, 0, __LINE__);
  }
  pl[0] = S_(0);
  from_global_case(m, 1, g1, pl, NP / 2, __LINE__);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  m = mesh_2d();
  {
    lm_placement_t p2[4][2];
    p2[0][0] = S_(0), p2[0][1] = S_(0);
    p2[1][0] = So(0, 1), p2[1][1] = So(0, 0);
    p2[2][0] = P_(LM_REDUCE_SUM), p2[2][1] = S_(1);
    p2[3][0] = S_(1), p2[3][1] = R_;
    for (k = 0; k < 4; ++k) {
      from_global_case(m, 2, g, p2[k], -1, __LINE__);
      from_global_case(m, 2, g, p2[k], NP - 1, __LINE__);
    }
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Partial tensors made from local values whose reduction is known exactly (integers). */
static void partial_case(lm_mesh_t m, int pdim, const lm_placement_t *pl, int op, int line) {
  int64_t g[2] = {6, 5}, off[2], len[2], coord[8], ms[8];
  int64_t n, i, c, k;
  int64_t *buf;
  DLTensor t;
  lm_dist_tensor_t out = NULL;
  my_box(m, 2, g, pl, off, len);
  LM_ASSERT_OK_ALL(lm_mesh_coord(m, coord, 8));
  LM_ASSERT_OK_ALL(lm_mesh_shape(m, ms, 8));
  c = coord[pdim];
  k = ms[pdim];
  n = prod(2, len);
  buf = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n + 1));
  fill_box(buf, 2, g, off, len);
  for (i = 0; i < n; ++i) {
    switch (op) {
      case LM_REDUCE_SUM: buf[i] = c == 0 ? buf[i] - 5 * (k - 1) : 5; break;
      case LM_REDUCE_MAX: buf[i] = buf[i] - c; break;
      case LM_REDUCE_MIN: buf[i] = buf[i] + c; break;
      case LM_REDUCE_PROD: buf[i] = c == 0 ? buf[i] : 1; break;
      case LM_REDUCE_AVG: break; /* all equal: the average is the value */
    }
  }
  t = dl(buf, 2, len, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY));
  check_gather_iota(out, 2, g, -1, line);
  check_gather_iota(out, 2, g, (int)(prod(1, &k) > 0 ? NP - 1 : 0), line);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  free(buf);
}

static void test_gather_placements(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[2];
  int64_t g[2] = {14, 3};
  int op;
  (void)state;
  pl[0] = S_(0);
  {
    lm_dist_tensor_t t = from_iota(m, 2, g, pl);
    check_gather_iota(t, 2, g, -1, __LINE__);
    check_gather_iota(t, 2, g, NP / 2, __LINE__);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  pl[0] = S_(1);
  {
    lm_dist_tensor_t t = from_iota(m, 2, g, pl);
    check_gather_iota(t, 2, g, NP - 1, __LINE__);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  pl[0] = R_;
  {
    lm_dist_tensor_t t = from_iota(m, 2, g, pl);
    check_gather_iota(t, 2, g, -1, __LINE__);
    check_gather_iota(t, 2, g, 0, __LINE__);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  for (op = LM_REDUCE_SUM; op <= LM_REDUCE_PROD; ++op) {
    pl[0] = P_(op);
    partial_case(m, 0, pl, op, __LINE__);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  m = mesh_2d();
  pl[0] = P_(LM_REDUCE_SUM);
  pl[1] = S_(0);
  partial_case(m, 0, pl, LM_REDUCE_SUM, __LINE__);
  pl[0] = S_(1);
  pl[1] = P_(LM_REDUCE_MAX);
  partial_case(m, 1, pl, LM_REDUCE_MAX, __LINE__);
  /* Zero-sized global tensor. */
  {
    int64_t gz[2] = {0, 3};
    lm_dist_tensor_t t = NULL;
    int64_t dummy[1];
    DLTensor dst;
    pl[0] = S_(0);
    pl[1] = S_(1);
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, gz, LM_INT64, LM_CPU, pl));
    dst = dl(dummy, 2, gz, LM_INT64);
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &dst));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* ---------------------------------------------------------------------------------------------
 * Non-members: placeholder tensors on a mesh of world rank 0 alone
 * ------------------------------------------------------------------------------------------- */
static void test_nonmember_placeholders(void **state) {
  lm_mesh_t m = mesh_rank0();
  const int member = ME == 0;
  lm_placement_t pl[1];
  int64_t g[2] = {5, 3}, empty[2] = {0, 3};
  lm_dist_tensor_t t = NULL;
  int64_t *full = iota_global(2, g);
  DLTensor lt;
  (void)state;
  pl[0] = S_(0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, pl));
  CHECK_LAYOUT(t, m, 2, g, pl, LM_FLOAT32);
  {
    DLManagedTensor *ex = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex));
    LM_ASSERT_ALL(ex != NULL && ex->dl_tensor.ndim == 2);
    LM_ASSERT_ALL(member || ex->dl_tensor.shape[0] * ex->dl_tensor.shape[1] == 0);
    ex->deleter(ex);
  }
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));

  /* from_local with GIVEN: non-members pass an empty local tensor. */
  lt = member ? dl(full, 2, g, LM_INT64) : dl(NULL, 2, empty, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &lt, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY));
  CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* EVEN / ALLGATHER need membership. */
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &lt, pl, LM_SHAPE_EVEN, NULL, LM_FROM_LOCAL_COPY),
             member ? LM_SUCCESS : LM_ERR_INVALID_USAGE, "mesh");
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &lt, pl, LM_SHAPE_ALLGATHER, NULL, LM_FROM_LOCAL_COPY),
             member ? LM_SUCCESS : LM_ERR_INVALID_USAGE, "mesh");
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));

  /* from_global with root < 0: a placeholder on non-members. */
  {
    DLTensor gt = dl(full, 2, g, LM_INT64);
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &gt, pl, -1));
    CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
    if (member) { /* gather is collective over the 1-rank mesh: local checks only */
      int64_t got[15];
      DLTensor dst = dl(got, 2, g, LM_INT64);
      LM_ASSERT_OK(lm_dist_tensor_gather(t, -1, &dst));
      assert_memory_equal(got, full, sizeof got);
    }
    LM_ASSERT_ALL(1);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }

  /* from_managed on a non-member: ownership passes on success, so the deleter must run exactly
   * once when the placeholder dies. */
  {
    int deleted = 0;
    DLManagedTensor *mt = make_managed(&deleted, member ? 5 : 0, 3);
    if (member) {
      int i;
      for (i = 0; i < 15; ++i) ((int64_t *)mt->dl_tensor.data)[i] = full[i];
    }
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, pl, LM_SHAPE_GIVEN, g));
    CHECK_LAYOUT(t, m, 2, g, pl, LM_INT64);
    LM_ASSERT_ALL(deleted == 0);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    if (deleted != 1)
      fprintf(stderr, "rank %d (member %d): managed deleter called %d times after the last "
              "destroy, expected 1\n", ME, member, deleted);
    LM_ASSERT_ALL(deleted == 1);
  }
  free(full);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* ---------------------------------------------------------------------------------------------
 * Bad inputs
 * ------------------------------------------------------------------------------------------- */
static void test_zeros_bad_inputs(void **state) {
  lm_mesh_t m = mesh_2d();
  lm_placement_t pl[2], bad[2];
  int64_t g[2] = {4, 6}, neg[2] = {4, -1};
  int64_t g33[33];
  lm_dist_tensor_t t = (lm_dist_tensor_t)g_foreign;
  DLDevice cuda = {kDLCUDA, 0}, cpu1 = {kDLCPU, 1}, weird = {(DLDeviceType)99, 0};
  int i;
  (void)state;
  for (i = 0; i < 33; ++i) g33[i] = 1;
  memset(g_foreign, 0, sizeof g_foreign);
  pl[0] = S_(0);
  pl[1] = R_;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(NULL, m, 2, g, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "out");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, NULL, 2, g, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_ASSERT_ALL(t == NULL);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, (lm_mesh_t)g_foreign, 2, g, LM_FLOAT32, LM_CPU, pl),
             LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, -1, g, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 33, g33, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, NULL, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "shape");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, neg, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "shape[1]");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, NULL), LM_ERR_INVALID_ARGUMENT, "placements");
  /* Placements: shard dim out of range, unknown kind, bad op, mixed fields. */
  bad[1] = R_;
  bad[0] = S_(2);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[0]");
  bad[0] = S_(-1);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[0]");
  bad[0] = S_(0);
  bad[1] = S_(1);
  bad[1].kind = 3;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1].kind = -1;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = P_(5);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = P_(-1);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = R_;
  bad[1].dim = 1; /* Replicate with a dim */
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = R_;
  bad[1].order = 1;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = R_;
  bad[1].reduce_op = LM_REDUCE_MAX;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = S_(1);
  bad[1].reduce_op = LM_REDUCE_AVG; /* Shard with a reduce_op */
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = S_(1);
  bad[1].order = -2;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = P_(LM_REDUCE_SUM);
  bad[1].dim = 1; /* Partial with a dim */
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  bad[1] = P_(LM_REDUCE_SUM);
  bad[1].order = 1;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, bad), LM_ERR_INVALID_ARGUMENT, "placements[1]");
  /* Shard of a 0-d tensor. */
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 0, NULL, LM_FLOAT32, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "placements[0]");
  /* dtypes */
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_DTYPE(kDLFloat, 32) , LM_CPU, pl), LM_SUCCESS, NULL);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  {
    DLDataType lanes2 = {kDLFloat, 32, 2}, code99 = {99, 32, 1}, f8 = {kDLFloat, 8, 1},
               u16 = {kDLUInt, 16, 1}, bool1 = {LM_DL_BOOL, 1, 1}, lanes0 = {kDLInt, 32, 0};
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, lanes2, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, code99, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, f8, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, u16, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, bool1, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, lanes0, LM_CPU, pl), LM_ERR_INVALID_ARGUMENT, "dtype");
  }
  /* devices */
  {
    int sup = -1;
    LM_ASSERT_OK_ALL(lm_device_supported(kDLCUDA, &sup));
    LM_ASSERT_ALL(lm_test_expect_gpu() < 0 || sup == lm_test_expect_gpu());
    if (!sup) /* with a GPU, a kDLCUDA tensor is made: tests/gpu/ checks those */
      LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, cuda, pl), LM_ERR_NOT_SUPPORTED, "device");
  }
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, cpu1, pl), LM_ERR_INVALID_ARGUMENT, "device");
  (void)weird; /* device type 99: see test_out_of_range_enum_values */
  LM_ASSERT_ALL(t == NULL);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_accessors_bad_inputs(void **state) {
  lm_mesh_t m = mesh_1d(), mm;
  lm_placement_t pl[1], gp[2];
  int64_t g[2] = {4, 6}, s[3];
  lm_dist_tensor_t t = NULL, nul = NULL, foreign = (lm_dist_tensor_t)g_foreign;
  int i, k;
  DLDataType dt;
  DLDevice dev;
  DLTensor v;
  DLManagedTensor *ex;
  (void)state;
  memset(g_foreign, 0, sizeof g_foreign);
  pl[0] = S_(1);
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, pl));
  for (k = 0; k < 3; ++k) {
    lm_dist_tensor_t h = k == 0 ? nul : foreign;
    if (k == 2) {
      uint32_t dead = 0xdeadbeefu;
      memcpy(g_foreign, &dead, sizeof dead);
    }
    LM_EXPECT_ALL(lm_dist_tensor_ndim(h, &i), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_mesh(h, &mm), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_dtype(h, &dt), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_device(h, &dev), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_placements(h, gp, 1), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_global_shape(h, s, 2), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_local_shape(h, s, 2), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_local_offset(h, s, 2), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_local(h, &v), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_to_dlpack(h, &ex), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_retain(h), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_gather(h, -1, &v), LM_ERR_INVALID_ARGUMENT, "tensor");
    if (k > 0) {
      lm_dist_tensor_t copy = h;
      LM_EXPECT_ALL(lm_dist_tensor_destroy(&copy), LM_ERR_INVALID_ARGUMENT, "tensor");
    }
  }
  memset(g_foreign, 0, sizeof g_foreign);
  LM_EXPECT_ALL(lm_dist_tensor_ndim(t, NULL), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_dist_tensor_mesh(t, NULL), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_dist_tensor_dtype(t, NULL), LM_ERR_INVALID_ARGUMENT, "dtype");
  LM_EXPECT_ALL(lm_dist_tensor_device(t, NULL), LM_ERR_INVALID_ARGUMENT, "device");
  LM_EXPECT_ALL(lm_dist_tensor_placements(t, NULL, 1), LM_ERR_INVALID_ARGUMENT, "placements");
  LM_EXPECT_ALL(lm_dist_tensor_placements(t, gp, 0), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_placements(t, gp, 2), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_global_shape(t, NULL, 2), LM_ERR_INVALID_ARGUMENT, "shape");
  LM_EXPECT_ALL(lm_dist_tensor_global_shape(t, s, 1), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_global_shape(t, s, 3), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_local_shape(t, s, 1), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_local_shape(t, s, -1), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_local_offset(t, s, 3), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_dist_tensor_local_offset(t, NULL, 2), LM_ERR_INVALID_ARGUMENT, "offset");
  LM_EXPECT_ALL(lm_dist_tensor_local(t, NULL), LM_ERR_INVALID_ARGUMENT, "view");
  /* The failures had no effect. */
  CHECK_LAYOUT(t, m, 2, g, pl, LM_FLOAT32);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_from_local_bad_inputs(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1], bad[1];
  int64_t buf[16];
  int64_t ls[2] = {2, 3}, g[2], neg[2] = {-2, 3}, wrong[2] = {1, 3}, ls33[33];
  DLTensor t;
  lm_dist_tensor_t out = (lm_dist_tensor_t)g_foreign;
  int i;
  (void)state;
  memset(g_foreign, 0, sizeof g_foreign);
  memset(buf, 0, sizeof buf);
  for (i = 0; i < 33; ++i) ls33[i] = 1;
  pl[0] = S_(0);
  g[0] = 2 * NP;
  g[1] = 3;
  t = dl(buf, 2, ls, LM_INT64);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(NULL, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "out");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, NULL, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_ASSERT_ALL(out == NULL);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, (lm_mesh_t)g_foreign, &t, pl, LM_SHAPE_GIVEN, g, 0),
             LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, NULL, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "local");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, NULL, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "placements");
  bad[0] = S_(2);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, bad, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "placements");
  bad[0] = P_(9);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, bad, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "placements");
  /* shape_mode 7: see test_out_of_range_enum_values */
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 2u), LM_ERR_INVALID_ARGUMENT, "flags");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, NULL, 0), LM_ERR_INVALID_ARGUMENT, "global_shape");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, neg, 0), LM_ERR_INVALID_ARGUMENT, "global_shape");
  /* Local shape mismatch with the GIVEN global shape (every rank's shard is not {2, 3}). */
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, wrong, 0), LM_ERR_INVALID_ARGUMENT, "local shape");
  {
    int64_t g2[2] = {2 * NP, 4};
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g2, 0), LM_ERR_INVALID_ARGUMENT, "local shape");
  }
  /* Bad local tensors. */
  t.shape = neg;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "local");
  t.shape = NULL;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "local");
  t.shape = ls33;
  t.ndim = 33;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, ls33, 0), LM_ERR_INVALID_ARGUMENT, "ndim");
  t.ndim = -1;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "ndim");
  t = dl(NULL, 2, ls, LM_INT64);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "data");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW), LM_ERR_INVALID_ARGUMENT, "data");
  t = dl(buf, 2, ls, LM_INT64);
  {
    DLDataType lanes2 = {kDLInt, 64, 2}, code99 = {99, 64, 1};
    int sup = -1;
    t.dtype = lanes2;
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "dtype");
    t.dtype = code99;
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0), LM_ERR_INVALID_ARGUMENT, "dtype");
    t.dtype = LM_INT64;
    LM_ASSERT_OK_ALL(lm_device_supported(kDLCUDA, &sup));
    t.device.device_type = kDLCUDA;
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0),
               sup ? LM_ERR_INVALID_ARGUMENT : LM_ERR_NOT_SUPPORTED, "device");
    t.device = LM_CPU;
  }
  LM_ASSERT_ALL(out == NULL);
  /* Still fine afterwards. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_GIVEN, g, 0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_global_and_gather_bad_inputs(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t g[2] = {5, 3}, g_wrong[2] = {5, 4}, g1[1] = {15};
  int64_t *full = iota_global(2, g);
  int64_t big[64];
  DLTensor gt, dst;
  lm_dist_tensor_t out = (lm_dist_tensor_t)g_foreign, t = NULL;
  (void)state;
  memset(g_foreign, 0, sizeof g_foreign);
  pl[0] = S_(0);
  gt = dl(full, 2, g, LM_INT64);
  /* from_global */
  LM_EXPECT_ALL(lm_dist_tensor_from_global(NULL, m, &gt, pl, -1), LM_ERR_INVALID_ARGUMENT, "out");
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, NULL, &gt, pl, -1), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_ASSERT_ALL(out == NULL);
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, (lm_mesh_t)g_foreign, &gt, pl, -1), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, NULL, pl, -1), LM_ERR_INVALID_ARGUMENT, "global");
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &gt, NULL, -1), LM_ERR_INVALID_ARGUMENT, "placements");
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &gt, pl, NP), LM_ERR_INVALID_ARGUMENT, "root");
  {
    DLTensor bad = gt;
    DLDataType lanes2 = {kDLInt, 64, 2};
    bad.dtype = lanes2;
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &bad, pl, -1), LM_ERR_INVALID_ARGUMENT, "dtype");
    /* Only the root validates with root >= 0: it fails with INVALID_ARGUMENT, the others
     * LM_ERR_REMOTE (no hang). */
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, ME == NP - 1 ? &bad : NULL, pl, NP - 1),
               ME == NP - 1 ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE, ME == NP - 1 ? "dtype" : "root");
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, NULL, pl, 0),
               ME == 0 ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE, ME == 0 ? "global" : "root");
    bad = gt;
    bad.data = NULL;
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &bad, pl, -1), LM_ERR_INVALID_ARGUMENT, "data");
    bad = gt;
    {
      int64_t st[2] = {1, 5};
      bad.strides = st;
      LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &bad, pl, -1), LM_ERR_INVALID_ARGUMENT, "compact");
    }
    bad = gt;
    bad.device.device_type = kDLCUDA;
    {
      lm_status_t s = lm_dist_tensor_from_global(&out, m, &bad, pl, -1);
      LM_ASSERT_ALL(s == LM_ERR_NOT_SUPPORTED || s == LM_ERR_INVALID_ARGUMENT);
    }
    {
      lm_placement_t b2[1];
      b2[0] = S_(2);
      LM_EXPECT_ALL(lm_dist_tensor_from_global(&out, m, &gt, b2, -1), LM_ERR_INVALID_ARGUMENT, "placements");
    }
  }
  LM_ASSERT_ALL(out == NULL);
  /* The mesh still works after the failed collectives. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &gt, pl, NP - 1 >= 0 ? -1 : 0));

  /* gather */
  memset(big, 0, sizeof big);
  dst = dl(big, 2, g, LM_INT64);
  LM_EXPECT_ALL(lm_dist_tensor_gather(NULL, -1, &dst), LM_ERR_INVALID_ARGUMENT, "tensor");
  LM_EXPECT_ALL(lm_dist_tensor_gather((lm_dist_tensor_t)g_foreign, -1, &dst), LM_ERR_INVALID_ARGUMENT, "tensor");
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, NULL), LM_ERR_INVALID_ARGUMENT, "dst");
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, NP, &dst), LM_ERR_INVALID_ARGUMENT, "root");
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, NP + 100, &dst), LM_ERR_INVALID_ARGUMENT, "root");
  dst.shape = g_wrong;
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &dst), LM_ERR_INVALID_ARGUMENT, "dst");
  dst.shape = g1;
  dst.ndim = 1;
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &dst), LM_ERR_INVALID_ARGUMENT, "dst");
  dst = dl(big, 2, g, LM_FLOAT64);
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &dst), LM_ERR_INVALID_ARGUMENT, "dtype");
  dst = dl(NULL, 2, g, LM_INT64);
  LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &dst), LM_ERR_INVALID_ARGUMENT, "data");
  dst = dl(big, 2, g, LM_INT64);
  {
    int64_t st[2] = {1, 5};
    dst.strides = st;
    LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &dst), LM_ERR_INVALID_ARGUMENT, "compact");
  }
  /* All those failures left the mesh usable: a correct gather still gives the right values. */
  check_gather_iota(t, 2, g, -1, __LINE__);
  check_gather_iota(t, 2, g, NP - 1, __LINE__);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  free(full);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Enum arguments outside their enumerators (C callers can pass any int): a device type 99 gives
 * NOT_SUPPORTED, a shape_mode 7 INVALID_ARGUMENT.
 * Separate, because a library that loads it as a C++ enum trips UBSan (-fsanitize=enum), which
 * aborts the job in sanitizer builds. */
static void test_out_of_range_enum_values(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t g[1] = {4};
  lm_dist_tensor_t t = NULL;
  DLDevice weird;
  (void)state;
  pl[0] = R_;
  memset(&weird, 0, sizeof weird);
  weird.device_type = (DLDeviceType)99;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT32, weird, pl), LM_ERR_NOT_SUPPORTED, "device");
  LM_ASSERT_ALL(t == NULL);
  {
    float buf[4] = {0, 0, 0, 0};
    int64_t ls[1] = {4};
    DLTensor lt = dl(buf, 1, ls, LM_FLOAT32);
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &lt, pl, (lm_shape_mode_t)7, g, 0),
               LM_ERR_INVALID_ARGUMENT, "shape_mode");
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &lt, pl, (lm_shape_mode_t)-1, g, 0),
               LM_ERR_INVALID_ARGUMENT, "shape_mode");
    LM_ASSERT_ALL(t == NULL);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* A gather to a root whose dst is wrong: the root fails; whatever the others return, no message
 * of that failed gather may be left behind for the next one (which must see the new values). */
static void test_gather_root_bad_dst_no_stray_messages(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t g[1], wrong[1] = {3}, out[64];
  lm_dist_tensor_t t = NULL;
  DLTensor v, dst;
  int ok = 1, i;
  lm_status_t s;
  (void)state;
  pl[0] = S_(0);
  g[0] = 2 * NP;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_INT64, LM_CPU, pl));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  ((int64_t *)v.data)[0] = ((int64_t *)v.data)[1] = 1;
  dst = dl(out, 1, wrong, LM_INT64);
  s = lm_dist_tensor_gather(t, 0, ME == 0 ? &dst : NULL);
  LM_ASSERT_ALL(ME != 0 || s == LM_ERR_INVALID_ARGUMENT);
  ((int64_t *)v.data)[0] = ((int64_t *)v.data)[1] = 2;
  dst.shape = g;
  memset(out, 0, sizeof out);
  s = lm_dist_tensor_gather(t, 0, ME == 0 ? &dst : NULL);
  if (ME == 0)
    for (i = 0; i < g[0]; ++i)
      if (out[i] != 2) ok = 0;
  if (!ok)
    fprintf(stderr, "rank 0: second gather got stale values: %lld %lld %lld ...\n", (long long)out[0],
            (long long)out[1], (long long)out[2]);
  LM_ASSERT_ALL(s == LM_SUCCESS && ok);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Near the end: LM_SHAPE_ALLGATHER is collective and "agrees": when one rank passes an invalid argument
 * the others must get LM_ERR_REMOTE, not wait forever in the allgather. A hang shows as a TIMEOUT
 * of this test after 20 s, which ends the job (hence near the end). */
static void test_from_local_allgather_one_rank_invalid(void **state) {
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1];
  int64_t buf[2] = {0, 0}, ls[1] = {2};
  DLTensor t = dl(buf, 1, ls, LM_INT64);
  DLDataType lanes2 = {kDLInt, 64, 2};
  lm_dist_tensor_t out = NULL;
  const int bad = NP - 1;
  (void)state;
  pl[0] = S_(0);
  if (NP < 2) {
    LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
    lm_test_skip("needs 2 ranks or more (np 1)");
    return;
  }
  if (ME == bad) t.dtype = lanes2;
  alarm(20);
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&out, m, &t, pl, LM_SHAPE_ALLGATHER, NULL, LM_FROM_LOCAL_COPY),
             ME == bad ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE,
             ME == bad ? "dtype" : "failed: LM_ERR_INVALID_ARGUMENT: lm_dist_tensor_from_local");
  LM_ASSERT_ALL(out == NULL);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_zeros_all_dtypes),
    cmocka_unit_test(test_zeros_uneven_1d),
    cmocka_unit_test(test_zeros_2d_mesh_nested),
    cmocka_unit_test(test_from_local_given_copy),
    cmocka_unit_test(test_from_local_even),
    cmocka_unit_test(test_from_local_allgather),
    cmocka_unit_test(test_from_local_copy_strided),
    cmocka_unit_test(test_from_local_borrow_padded),
    cmocka_unit_test(test_padded_in_place),
    cmocka_unit_test(test_padded_partial_targets),
    cmocka_unit_test(test_from_local_borrow_vs_copy),
    cmocka_unit_test(test_from_managed_ownership),
    cmocka_unit_test(test_export),
    cmocka_unit_test(test_retain_destroy_and_mesh_lifetime),
    cmocka_unit_test(test_from_global),
    cmocka_unit_test(test_gather_placements),
    cmocka_unit_test(test_nonmember_placeholders),
    cmocka_unit_test(test_zeros_bad_inputs),
    cmocka_unit_test(test_accessors_bad_inputs),
    cmocka_unit_test(test_from_local_bad_inputs),
    cmocka_unit_test(test_global_and_gather_bad_inputs),
    cmocka_unit_test(test_gather_root_bad_dst_no_stray_messages),
    cmocka_unit_test(test_from_local_allgather_one_rank_invalid),
    cmocka_unit_test(test_out_of_range_enum_values),
};

/* test_padded_in_place measures the message path's in-place use of padded shards; where even
 * steps run as MPI collectives (LM_MPI_COLLECTIVES=1, or auto with LM_NODE_LOCAL=0) a padded
 * shard goes through staging instead, which test_mpi_collectives checks for values. So this suite keeps the message path unless told otherwise. */
int main(int argc, char **argv) {
  setenv("LM_MPI_COLLECTIVES", "0", 0);
  lm_test_init(&argc, &argv);
  return lm_test_run(tests, sizeof(tests) / sizeof(tests[0]), lm_test_basename(argv[0]));
}
