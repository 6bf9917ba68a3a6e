/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_agree: every collective agrees on what it was asked (issue 8 item 1) and carries the
 * cause of a failure to every rank (issue 7 item 4). Each kind of mismatch is seeded on one rank
 * (the last) and on several (every odd rank); every rank must return LM_ERR_MISMATCH naming the
 * field, nothing may hang, and the mesh must still work afterwards.
 */
// lm-test-np: 2 3 4
#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static const lm_placement_t R_ = {LM_REPLICATE, 0, 0, 0, 0, 0, 0, 0};
static lm_placement_t S_(int d) { lm_placement_t p = {LM_SHARD, d, 0, 0, 0, 0, 0, 0}; return p; }
static lm_placement_t P_(int op) { return LM_PLACEMENT_PARTIAL(op); }

/* Seeding: mode 0 = the last rank differs, mode 1 = every odd rank differs. */
static int odd_one(int mode) { return mode == 0 ? ME == NP - 1 : ME % 2 == 1; }

static lm_mesh_t mesh_1d(void) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  return m;
}

static lm_mesh_t mesh_1d_cfg(int level, double timeout) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.check_level = level;
  cfg.timeout = timeout;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, &cfg));
  return m;
}

/* A float tensor of global shape [n] with value i at index i, placed as `p` on m. */
static lm_dist_tensor_t iota(lm_mesh_t m, int64_t n, lm_placement_t p) {
  float *buf = (float *)malloc(sizeof(float) * (size_t)(n ? n : 1));
  int64_t i;
  for (i = 0; i < n; ++i) buf[i] = (float)i;
  DLTensor g = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &g, &p, -1));
  free(buf);
  return t;
}

/* The mesh still works: S(0) -> R of an iota gathers back to the iota on every rank. */
static void mesh_works(lm_mesh_t m) {
  int64_t n = 7;
  lm_dist_tensor_t t = iota(m, n, S_(0)), r = NULL;
  lm_placement_t rep = R_;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &rep));
  float out[7] = {0};
  DLTensor d = {out, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(r, -1, &d));
  int ok = 1, i;
  for (i = 0; i < 7; ++i) ok &= out[i] == (float)i;
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&t);
  lm_dist_tensor_destroy(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Reshard
 * ------------------------------------------------------------------------------------------- */
static void test_reshard_target_placements(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    lm_dist_tensor_t t = iota(m, 8, S_(0)), out = NULL;
    lm_placement_t want = odd_one(mode) ? S_(0) : R_;
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, &want), LM_ERR_MISMATCH,
                  "ranks disagree on target placements");
    LM_ASSERT_ALL(out == NULL);
    lm_dist_tensor_destroy(&t);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

static void test_reshard_message_names_ranks(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  lm_dist_tensor_t t = iota(m, 8, R_), out = NULL;
  lm_placement_t want = ME == NP - 1 ? S_(0) : R_;
  lm_status_t st = lm_dist_tensor_reshard(&out, t, NULL, &want);
  char expect[128] = "", who[64] = "";
  int r;
  for (r = 0; r < NP - 1; ++r) snprintf(who + strlen(who), sizeof who - strlen(who), "%s%d", r ? "," : "", r);
  snprintf(expect, sizeof expect, "target placements: rank%s %s [R], rank %d [S(0)]",
           NP > 2 ? "s" : "", who, NP - 1);
  LM_EXPECT_ALL(st, LM_ERR_MISMATCH, expect);
  lm_dist_tensor_destroy(&t);
  mesh_works(m);
  lm_mesh_destroy(&m);
}

static void test_reshard_source_placements_shape_dtype_op(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    int64_t n8 = 8, n9 = 9;
    lm_placement_t rep = R_, s0 = S_(0);
    lm_dist_tensor_t a = NULL, out = NULL;
    /* source placements */
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&a, m, 1, &n8, LM_FLOAT32, LM_CPU, odd ? &rep : &s0));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, a, NULL, &rep), LM_ERR_MISMATCH,
                  "disagree on source placements");
    lm_dist_tensor_destroy(&a);
    /* global shape */
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&a, m, 1, odd ? &n9 : &n8, LM_FLOAT32, LM_CPU, &s0));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, a, NULL, &rep), LM_ERR_MISMATCH,
                  "disagree on global shape");
    lm_dist_tensor_destroy(&a);
    /* dtype */
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&a, m, 1, &n8, odd ? LM_FLOAT64 : LM_FLOAT32, LM_CPU, &s0));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, a, NULL, &rep), LM_ERR_MISMATCH,
                  "disagree on dtype");
    lm_dist_tensor_destroy(&a);
    /* Partial op */
    lm_placement_t psum = P_(LM_REDUCE_SUM), pmax = P_(LM_REDUCE_MAX);
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&a, m, 1, &n8, LM_FLOAT32, LM_CPU, odd ? &pmax : &psum));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, a, NULL, &rep), LM_ERR_MISMATCH,
                  "disagree on source placements");
    lm_dist_tensor_destroy(&a);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

static void test_reshard_different_mesh(void **state) {
  (void)state;
  lm_mesh_t m1 = mesh_1d(), m2 = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    lm_dist_tensor_t t = iota(odd_one(mode) ? m2 : m1, 8, S_(0)), out = NULL;
    lm_placement_t rep = R_;
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, &rep), LM_ERR_MISMATCH,
                  "disagree on source mesh");
    lm_dist_tensor_destroy(&t);
    /* and a target mesh that differs */
    t = iota(m1, 8, S_(0));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, odd_one(mode) ? m2 : m1, &rep), LM_ERR_MISMATCH,
                  "disagree on target mesh");
    lm_dist_tensor_destroy(&t);
    mesh_works(m1);
    mesh_works(m2);
  }
  lm_mesh_destroy(&m1);
  lm_mesh_destroy(&m2);
}

/* ---------------------------------------------------------------------------------------------
 * Plans
 * ------------------------------------------------------------------------------------------- */
static void test_plan_execute_different_plans(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  int64_t n = 8;
  lm_placement_t s0 = S_(0), rep = R_;
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    lm_reshard_plan_t p = NULL;
    /* the odd ranks plan R -> S(0), the others S(0) -> R */
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, odd ? &rep : &s0, m, odd ? &s0 : &rep, 1, &n,
                                            LM_FLOAT32));
    lm_dist_tensor_t src = iota(m, n, odd ? R_ : S_(0)), dst = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, LM_CPU));
    LM_EXPECT_ALL(lm_reshard_plan_execute(p, src, dst), LM_ERR_MISMATCH,
                  "disagree on source placements");
    lm_request_t rq = NULL;
    LM_EXPECT_ALL(lm_reshard_plan_start(&rq, p, src, dst), LM_ERR_MISMATCH, "disagree on");
    LM_ASSERT_ALL(rq == NULL);
    lm_dist_tensor_destroy(&src);
    lm_dist_tensor_destroy(&dst);
    lm_reshard_plan_destroy(&p);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

/* Plans that differ only in dtype, or only in global shape, and a co-shard order that differs
 * (the same two mesh dims sharding dim 0, nested the other way round: another layout). */
static void test_plan_dtype_shape_and_coshard_order(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  lm_placement_t s0 = S_(0), rep = R_;
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    int64_t n = 8, n9 = 9;
    lm_reshard_plan_t p = NULL;
    lm_dist_tensor_t src = NULL, dst = NULL;
    /* dtype */
    DLDataType dt = odd ? LM_FLOAT64 : LM_FLOAT32;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, m, &rep, 1, &n, dt));
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 1, &n, dt, LM_CPU, &s0));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, LM_CPU));
    LM_EXPECT_ALL(lm_reshard_plan_execute(p, src, dst), LM_ERR_MISMATCH, "disagree on dtype");
    lm_dist_tensor_destroy(&src);
    lm_dist_tensor_destroy(&dst);
    lm_reshard_plan_destroy(&p);
    /* global shape */
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, m, &rep, 1, odd ? &n9 : &n, LM_FLOAT32));
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 1, odd ? &n9 : &n, LM_FLOAT32, LM_CPU, &s0));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, LM_CPU));
    LM_EXPECT_ALL(lm_reshard_plan_execute(p, src, dst), LM_ERR_MISMATCH,
                  "disagree on global shape");
    lm_dist_tensor_destroy(&src);
    lm_dist_tensor_destroy(&dst);
    lm_reshard_plan_destroy(&p);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
  if (NP % 2) lm_test_skip("the rest, on a [2, NP/2] mesh, needs an even np (np %d)", NP);
  lm_mesh_t g = NULL;
  int64_t ms[2] = {2, NP / 2}, n = 12;
  LM_ASSERT_OK_ALL(lm_mesh_create(&g, lm_test_comm_f(), 2, ms, NULL));
  lm_placement_t outer[2] = {{LM_SHARD, 0, 0, 0, 0, 0, 0, 0}, {LM_SHARD, 0, 1, 0, 0, 0, 0, 0}},
                 inner[2] = {{LM_SHARD, 0, 1, 0, 0, 0, 0, 0}, {LM_SHARD, 0, 0, 0, 0, 0, 0, 0}}, rr[2] = {R_, R_};
  for (int mode = 0; mode < 2; ++mode) {
    lm_dist_tensor_t t = NULL, out = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, g, 1, &n, LM_FLOAT32, LM_CPU, rr));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, odd_one(mode) ? inner : outer),
                  LM_ERR_MISMATCH, "disagree on target placements");
    LM_ASSERT_ALL(out == NULL);
    lm_dist_tensor_destroy(&t);
  }
  lm_mesh_destroy(&g);
}

/* A cross-mesh reshard whose two sides disagree, with bystanders in neither mesh (NP >= 3): the
 * source rank and the target rank both get LM_ERR_MISMATCH, the bystanders return at once. */
static void test_cross_mesh_with_bystanders(void **state) {
  (void)state;
  if (NP < 3) lm_test_skip("needs 3 ranks or more for a bystander (np %d)", NP);
  lm_mesh_t a = NULL, b = NULL;
  int ra[1] = {0}, rb[1] = {1};
  int64_t one[1] = {1}, n = 8;
  lm_mesh_config_t ca = LM_MESH_CONFIG_INIT, cb = LM_MESH_CONFIG_INIT;
  ca.ranks = ra;
  ca.nranks = 1;
  cb.ranks = rb;
  cb.nranks = 1;
  LM_ASSERT_OK_ALL(lm_mesh_create(&a, lm_test_comm_f(), 1, one, &ca));
  LM_ASSERT_OK_ALL(lm_mesh_create(&b, lm_test_comm_f(), 1, one, &cb));
  lm_placement_t s0 = S_(0), rep = R_;
  lm_dist_tensor_t t = NULL, out = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, a, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  lm_status_t st = lm_dist_tensor_reshard(&out, t, b, ME == 1 ? &s0 : &rep);
  int ok = ME >= 2 || (st == LM_ERR_MISMATCH && out == NULL &&
                       strstr(lm_last_error_message(), "target placements"));
  if (!ok) fprintf(stderr, "rank %d: %d %s\n", ME, (int)st, lm_last_error_message());
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&out);
  /* and when they agree, the data arrives (the meshes still work) */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, t, b, &rep));
  lm_dist_tensor_destroy(&out);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&a);
  lm_mesh_destroy(&b);
}

/* ---------------------------------------------------------------------------------------------
 * Gather, from_global, from_local
 * ------------------------------------------------------------------------------------------- */
static void test_gather_mismatches(void **state) {
  (void)state;
  lm_mesh_t m1 = mesh_1d(), m2 = mesh_1d();
  int64_t n = 8;
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    float buf[8];
    double dbuf[8];
    DLTensor d = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
    DLTensor dd = {dbuf, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0};
    /* roots */
    lm_dist_tensor_t t = iota(m1, n, S_(0));
    int root = odd ? NP - 1 : 0;
    LM_EXPECT_ALL(lm_dist_tensor_gather(t, root, ME == root ? &d : NULL), LM_ERR_MISMATCH,
                  "disagree on root");
    /* placements */
    lm_dist_tensor_t r = iota(m1, n, odd ? R_ : S_(0));
    LM_EXPECT_ALL(lm_dist_tensor_gather(r, -1, &d), LM_ERR_MISMATCH, "disagree on placements");
    lm_dist_tensor_destroy(&r);
    /* mesh */
    r = iota(odd ? m2 : m1, n, S_(0));
    LM_EXPECT_ALL(lm_dist_tensor_gather(r, -1, &d), LM_ERR_MISMATCH, "disagree on mesh");
    lm_dist_tensor_destroy(&r);
    /* dtype */
    lm_placement_t s0 = S_(0);
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&r, m1, 1, &n, odd ? LM_FLOAT64 : LM_FLOAT32, LM_CPU, &s0));
    LM_EXPECT_ALL(lm_dist_tensor_gather(r, -1, odd ? &dd : &d), LM_ERR_MISMATCH, "disagree on dtype");
    lm_dist_tensor_destroy(&r);
    lm_dist_tensor_destroy(&t);
    mesh_works(m1);
  }
  lm_mesh_destroy(&m1);
  lm_mesh_destroy(&m2);
}

static void test_from_global_root_shapes(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode) && ME != 0;
    int64_t n = odd ? 9 : 8;
    float buf[9] = {0};
    DLTensor g = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
    lm_placement_t s0 = S_(0);
    lm_dist_tensor_t t = NULL;
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&t, m, &g, &s0, 0), LM_ERR_MISMATCH,
                    "disagree on shape of global");
    /* and different roots */
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&t, m, &g, &s0, odd_one(mode) ? NP - 1 : 0),
                  LM_ERR_MISMATCH, "disagree on root");
    LM_ASSERT_ALL(t == NULL);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

static void test_from_local_allgather_mismatches(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    int64_t ls = 2;
    float buf[2] = {1, 2};
    DLTensor l = {buf, LM_CPU, 1, LM_FLOAT32, &ls, NULL, 0};
    lm_placement_t s0 = S_(0), rep = R_;
    lm_dist_tensor_t t = NULL;
    /* Shard on some ranks, Replicate on others */
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, odd ? &rep : &s0, LM_SHAPE_ALLGATHER, NULL,
                                            LM_FROM_LOCAL_COPY),
                  LM_ERR_MISMATCH, "disagree on placements");
    LM_ASSERT_ALL(t == NULL);
    /* ALLGATHER on some ranks, GIVEN (local) on others: the GIVEN ranks' next collective meets
     * the ALLGATHER ranks' agreement, and every rank learns of the mismatch. */
    if (odd) {
      int64_t g = 2 * NP;
      LM_ASSERT_OK(lm_dist_tensor_from_local(&t, m, &l, &s0, LM_SHAPE_GIVEN, &g, LM_FROM_LOCAL_COPY));
      lm_dist_tensor_t out = NULL;
      LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, &rep), LM_ERR_MISMATCH,
                    "disagree on operation");
      lm_dist_tensor_destroy(&t);
    } else {
      LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &s0, LM_SHAPE_ALLGATHER, NULL,
                                              LM_FROM_LOCAL_COPY),
                    LM_ERR_MISMATCH, "disagree on operation");
    }
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * local_map
 * ------------------------------------------------------------------------------------------- */
static void free_managed(DLManagedTensor *mt) {
  free(mt->dl_tensor.data);
  free(mt->dl_tensor.shape);
  free(mt);
}

/* Copies input 0's shard into output 0 (when nout > 0). ud: if non-NULL, an int: fail with
 * "label -100 out of range" on ranks where it is nonzero. */
static lm_status_t copy_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)mesh;
  (void)nin;
  if (ud && *(int *)ud) {
    lm_set_error_message("label -100 out of range");
    return LM_ERR_INVALID_ARGUMENT;
  }
  if (nout == 0) return LM_SUCCESS;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  int64_t n = x->shape[0];
  mt->dl_tensor = *x;
  mt->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t));
  mt->dl_tensor.shape[0] = n;
  mt->dl_tensor.strides = NULL;
  mt->dl_tensor.byte_offset = 0;
  mt->dl_tensor.data = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (n) memcpy(mt->dl_tensor.data, x->data, sizeof(float) * (size_t)n);
  mt->deleter = free_managed;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}

static void test_local_map_mismatches(void **state) {
  (void)state;
  lm_mesh_t m1 = mesh_1d(), m2 = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    int odd = odd_one(mode);
    lm_dist_tensor_t x = iota(m1, 8, S_(0));
    lm_arg_t in = {LM_ARG_DIST_TENSOR, 0, 0, 0, x}, out = {0};
    lm_placement_t s0 = S_(0), rep = R_;
    const lm_placement_t *inp[1] = {odd ? &rep : &s0};
    const lm_placement_t *outp[1] = {&s0};
    /* different in_placements with RESHARD_INPUTS */
    LM_EXPECT_ALL(lm_local_map(copy_fn, NULL, 1, &in, inp, 1, outp, NULL, NULL,
                               LM_LOCAL_MAP_RESHARD_INPUTS, &out),
                  LM_ERR_MISMATCH, "disagree on in_placements");
    LM_ASSERT_ALL(out.kind == LM_ARG_NONE);
    /* different meshes of the input (mesh inferred) */
    lm_dist_tensor_t y = iota(odd ? m2 : m1, 8, S_(0));
    lm_arg_t iny = {LM_ARG_DIST_TENSOR, 0, 0, 0, y};
    const lm_placement_t *same[1] = {&s0};
    LM_EXPECT_ALL(lm_local_map(copy_fn, NULL, 1, &iny, same, 1, outp, NULL, NULL,
                               LM_LOCAL_MAP_RESHARD_INPUTS, &out),
                  LM_ERR_MISMATCH, "disagree on mesh");
    lm_dist_tensor_destroy(&y);
    /* different flags */
    LM_EXPECT_ALL(lm_local_map(copy_fn, NULL, 1, &in, same, 1, outp, NULL, NULL,
                               odd ? LM_LOCAL_MAP_RESHARD_INPUTS : 0u, &out),
                  LM_ERR_MISMATCH, "disagree on");
    /* different out_placements (no reshard: one agreement after fn) */
    const lm_placement_t *outq[1] = {odd ? &rep : &s0};
    LM_EXPECT_ALL(lm_local_map(copy_fn, NULL, 1, &in, NULL, 1, outq, NULL, NULL, 0u, &out),
                  LM_ERR_MISMATCH, "disagree on out_placements");
    LM_ASSERT_ALL(out.kind == LM_ARG_NONE);
    /* and the same call, agreed, works */
    LM_ASSERT_OK_ALL(lm_local_map(copy_fn, NULL, 1, &in, NULL, 1, outp, NULL, NULL, 0u, &out));
    LM_ASSERT_ALL(out.kind == LM_ARG_DIST_TENSOR);
    lm_dist_tensor_t o = (lm_dist_tensor_t)out.ptr;
    lm_dist_tensor_destroy(&o);
    lm_dist_tensor_destroy(&x);
    mesh_works(m1);
  }
  lm_mesh_destroy(&m1);
  lm_mesh_destroy(&m2);
}

/* Issue 7 item 4: the failing rank's status and message reach every rank. */
static void test_failure_cause_travels(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  for (int mode = 0; mode < 2; ++mode) {
    int fail = odd_one(mode);
    lm_dist_tensor_t x = iota(m, 8, S_(0));
    lm_arg_t in = {LM_ARG_DIST_TENSOR, 0, 0, 0, x}, out = {0};
    lm_placement_t s0 = S_(0);
    const lm_placement_t *outp[1] = {&s0};
    lm_status_t st = lm_local_map(copy_fn, &fail, 1, &in, NULL, 1, outp, NULL, NULL, 0u, &out);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
    LM_ASSERT_STATUS_ALL(st, fail ? LM_ERR_USER : LM_ERR_REMOTE);
    int lowest = mode == 0 ? NP - 1 : 1;
    char expect[128];
    snprintf(expect, sizeof expect, "rank %d (mesh rank %d) failed: LM_ERR_USER: ", lowest, lowest);
    int ok = strstr(msg, "label -100 out of range") != NULL &&
             (fail || strstr(msg, expect) != NULL);
    int nfail = mode == 0 ? 1 : NP / 2;
    if (!fail && nfail > 1) {
      char more[64];
      snprintf(more, sizeof more, "and %d other rank", nfail - 1);
      ok = ok && strstr(msg, more) != NULL;
    }
    if (!ok) fprintf(stderr, "rank %d: message: %s\n", ME, msg);
    LM_ASSERT_ALL(ok);
    LM_ASSERT_ALL(out.kind == LM_ARG_NONE);
    lm_dist_tensor_destroy(&x);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

/* A gather whose dst is refused on one rank: the others learn why. */
static void test_failure_cause_gather(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  int64_t n = 8, bad = 5;
  float buf[8];
  DLTensor d = {buf, LM_CPU, 1, LM_FLOAT32, ME == NP - 1 ? &bad : &n, NULL, 0};
  lm_dist_tensor_t t = iota(m, n, S_(0));
  lm_status_t st = lm_dist_tensor_gather(t, -1, &d);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  LM_ASSERT_STATUS_ALL(st, ME == NP - 1 ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE);
  LM_ASSERT_ALL(strstr(msg, "LM_ERR_INVALID_ARGUMENT") != NULL || ME == NP - 1);
  LM_ASSERT_ALL(strstr(msg, "dst has shape [5]") != NULL);
  lm_dist_tensor_destroy(&t);
  mesh_works(m);
  lm_mesh_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * Placements that differ past the first mesh dim (issue 43 section 3 item 1): ranks that agree on
 * placement 0 and differ in placement 1 (or 2) of a 2-D (3-D) mesh are as wrong as any other
 * mismatch. The mesh is [2, NP/2] where NP is even and at least 4, else [1, NP]; so mesh dim 1
 * has extent 2 or more and the placements really lay out the tensor differently. Its config
 * says timeout = 30 s: were a mismatch let through, the ranks would run different reshards, and
 * the test fails instead of hanging (tests/README.md, "Timing").
 * ------------------------------------------------------------------------------------------- */
static lm_mesh_t mesh_nd(int nd) {
  lm_mesh_t m = NULL;
  int64_t s[3] = {1, 1, NP}; /* 3-D: [1, 1, NP] */
  if (nd == 2) {
    s[0] = NP % 2 == 0 && NP >= 4 ? 2 : 1;
    s[1] = NP / s[0];
  }
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = 30.0;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), nd, s, &cfg));
  return m;
}

/* A 2-D float tensor [rows, cols] with value 100 i + j at (i, j), placed as pl. */
static lm_dist_tensor_t iota2(lm_mesh_t m, const lm_placement_t *pl) {
  int64_t g[2] = {6, 10};
  float buf[60];
  for (int i = 0; i < 60; ++i) buf[i] = (float)(100 * (i / 10) + i % 10);
  DLTensor gt = {buf, LM_CPU, 2, LM_FLOAT32, g, NULL, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &gt, pl, -1));
  return t;
}

/* The 2-D mesh still works: [S(0), S(1)] -> [R, R] gathers the iota back. */
static void mesh2_works(lm_mesh_t m) {
  lm_placement_t ss[2] = {S_(0), S_(1)}, rr[2] = {R_, R_};
  lm_dist_tensor_t t = iota2(m, ss), r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, rr));
  float out[60] = {0};
  int64_t g[2] = {6, 10};
  DLTensor d = {out, LM_CPU, 2, LM_FLOAT32, g, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(r, -1, &d));
  int wrong = 0;
  for (int i = 0; i < 60; ++i) wrong += out[i] != (float)(100 * (i / 10) + i % 10);
  LM_ASSERT_ALL(wrong == 0);
  lm_dist_tensor_destroy(&t);
  lm_dist_tensor_destroy(&r);
}

static lm_status_t nothing_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                              lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)in; (void)nout; (void)out;
  return LM_SUCCESS;
}

/* Output 0: a copy of input 0's shard (any ndim, compact float). */
static lm_status_t copy_nd_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                              lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  int64_t n = 1;
  mt->dl_tensor = *x;
  mt->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t) * (size_t)(x->ndim ? x->ndim : 1));
  for (int d = 0; d < x->ndim; ++d) n *= (mt->dl_tensor.shape[d] = x->shape[d]);
  mt->dl_tensor.strides = NULL;
  mt->dl_tensor.byte_offset = 0;
  mt->dl_tensor.data = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (n) memcpy(mt->dl_tensor.data, (const char *)x->data + x->byte_offset, sizeof(float) * (size_t)n);
  mt->deleter = free_managed;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}

static void test_placements_differ_past_the_first(void **state) {
  (void)state;
  lm_mesh_t m = mesh_nd(2);
  for (int mode = 0; mode < 2; ++mode) {
    const int odd = odd_one(mode);
    lm_placement_t sr[2] = {S_(0), R_}, ss[2] = {S_(0), S_(1)}, rs[2] = {R_, S_(0)},
                   rr[2] = {R_, R_};
    lm_placement_t *mine = odd ? ss : sr; /* differs from the others in placement 1 only */
    lm_dist_tensor_t t = NULL, out = NULL;
    /* reshard: target placements */
    t = iota2(m, sr);
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, mine), LM_ERR_MISMATCH,
                  "disagree on target placements");
    LM_ASSERT_ALL(out == NULL);
    lm_dist_tensor_destroy(&t);
    /* reshard: source placements (each rank's own tensor is consistent in itself) */
    int64_t g[2] = {6, 10}, n1 = 12;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, mine));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, rr), LM_ERR_MISMATCH,
                  "disagree on source placements");
    lm_dist_tensor_destroy(&t);
    /* a 1-D tensor on the 2-D mesh, sharded over mesh dim 1 only on some ranks */
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n1, LM_FLOAT32, LM_CPU, rr));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, odd ? rs : rr), LM_ERR_MISMATCH,
                  "disagree on target placements");
    lm_dist_tensor_destroy(&t);
    /* plans: created apart (local), the execution agrees */
    lm_reshard_plan_t p = NULL;
    lm_dist_tensor_t src = NULL, dst = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, rr, m, mine, 2, g, LM_FLOAT32));
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 2, g, LM_FLOAT32, LM_CPU, rr));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, LM_CPU));
    LM_EXPECT_ALL(lm_reshard_plan_execute(p, src, dst), LM_ERR_MISMATCH,
                  "disagree on target placements");
    lm_dist_tensor_destroy(&src);
    lm_dist_tensor_destroy(&dst);
    lm_reshard_plan_destroy(&p);
    /* gather of tensors placed differently (zeros agrees on nothing) */
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, mine));
    float buf[60];
    DLTensor d = {buf, LM_CPU, 2, LM_FLOAT32, g, NULL, 0};
    LM_EXPECT_ALL(lm_dist_tensor_gather(t, -1, &d), LM_ERR_MISMATCH, "disagree on placements");
    lm_dist_tensor_destroy(&t);
    /* from_global from a root (root < 0 is local: no agreement) */
    for (int i = 0; i < 60; ++i) buf[i] = (float)i;
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&t, m, &d, mine, 0), LM_ERR_MISMATCH,
                  "disagree on placements");
    LM_ASSERT_ALL(t == NULL);
    /* from_local, LM_SHAPE_ALLGATHER: the same local extents [3, 10] or [6, 5] everywhere would
     * make two different global shapes; a [2, 2] shard on every rank is a valid shard of both. */
    int64_t ls[2] = {2, 2};
    float lb[4] = {1, 2, 3, 4};
    DLTensor l = {lb, LM_CPU, 2, LM_FLOAT32, ls, NULL, 0};
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, mine, LM_SHAPE_ALLGATHER, NULL,
                                            LM_FROM_LOCAL_COPY),
                  LM_ERR_MISMATCH, "disagree on placements");
    LM_ASSERT_ALL(t == NULL);
    /* local_map: in_placements (inputs resharded) and out_placements */
    lm_dist_tensor_t x = iota2(m, rr); /* moved to in_placements on every rank */
    lm_arg_t in = {LM_ARG_DIST_TENSOR, 0, 0, 0, x}, res = {0};
    const lm_placement_t *inp[1] = {mine}, *outp[1] = {mine};
    LM_EXPECT_ALL(lm_local_map(nothing_fn, NULL, 1, &in, inp, 0, NULL, NULL, NULL,
                               LM_LOCAL_MAP_RESHARD_INPUTS, NULL),
                  LM_ERR_MISMATCH, "disagree on in_placements");
    LM_EXPECT_ALL(lm_local_map(copy_nd_fn, NULL, 1, &in, NULL, 1, outp, NULL, NULL, 0u, &res),
                  LM_ERR_MISMATCH, "disagree on out_placements");
    LM_ASSERT_ALL(res.kind == LM_ARG_NONE);
    lm_dist_tensor_destroy(&x);
    mesh2_works(m);
  }
  lm_mesh_destroy(&m);
  /* Placement 2 of a 3-D mesh [1, 1, NP]. */
  m = mesh_nd(3);
  lm_placement_t rrr[3] = {R_, R_, R_}, rrs[3] = {R_, R_, S_(1)};
  int64_t g[2] = {6, 10};
  for (int mode = 0; mode < 2; ++mode) {
    lm_dist_tensor_t t = NULL, out = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, LM_CPU, rrr));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, odd_one(mode) ? rrs : rrr),
                  LM_ERR_MISMATCH, "disagree on target placements");
    lm_dist_tensor_destroy(&t);
  }
  lm_mesh_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * mesh_create
 * ------------------------------------------------------------------------------------------- */
static void test_mesh_create_different_parents(void **state) {
  (void)state;
  MPI_Comm rev, dup;
  MPI_Comm_split(MPI_COMM_WORLD, 0, NP - ME, &rev);  /* same processes, reversed order */
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int64_t s[1] = {NP};
  for (int mode = 0; mode < 2; ++mode) {
    lm_mesh_t m = NULL;
    MPI_Comm parent = odd_one(mode) ? rev : MPI_COMM_WORLD;
    LM_EXPECT_ALL(lm_mesh_create(&m, (int)MPI_Comm_c2f(parent), 1, s, NULL), LM_ERR_MISMATCH,
                  "disagree on parent communicator");
    LM_ASSERT_ALL(m == NULL);
    /* a different shape */
    int64_t s2[2] = {1, NP};
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), odd_one(mode) ? 2 : 1,
                                 odd_one(mode) ? s2 : s, NULL),
                  LM_ERR_MISMATCH, "disagree on mesh shape");
  }
  /* Parents with the same processes in the same order make the same mesh: no mismatch. */
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, (int)MPI_Comm_c2f(ME % 2 ? dup : MPI_COMM_WORLD), 1, s, NULL));
  mesh_works(m);
  lm_mesh_destroy(&m);
  MPI_Comm_free(&rev);
  MPI_Comm_free(&dup);
}

/* ---------------------------------------------------------------------------------------------
 * LM_CHECK levels
 * ------------------------------------------------------------------------------------------- */
static void test_check_level_2_replicas(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d_cfg(2, -1);
  int64_t n = 4;
  float buf[4] = {1, 2, 3, 4};
  if (ME == NP - 1) buf[2] = 99;
  DLTensor l = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_placement_t rep = R_, s0 = S_(0);
  lm_dist_tensor_t t = NULL, out = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_COPY));
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, &s0), LM_ERR_MISMATCH,
                "data of a Replicate tensor");
  lm_dist_tensor_destroy(&t);
  mesh_works(m);
  lm_mesh_destroy(&m);
  /* level 1 does not read the data */
  m = mesh_1d_cfg(1, -1);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, t, NULL, &s0));
  lm_dist_tensor_destroy(&out);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

/* LM_CHECK=2: from_local with a given global shape is checked against every rank's extents. */
static void test_check_level_2_from_local_extents(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d_cfg(2, -1);
  int64_t ls = ME == NP - 1 ? 3 : 2, g = 2 * NP; /* the last rank's shard is too long */
  float buf[3] = {0};
  DLTensor l = {buf, LM_CPU, 1, LM_FLOAT32, &ls, NULL, 0};
  lm_placement_t s0 = S_(0);
  lm_dist_tensor_t t = NULL;
  lm_status_t st = lm_dist_tensor_from_local(&t, m, &l, &s0, LM_SHAPE_GIVEN, &g, LM_FROM_LOCAL_COPY);
  LM_ASSERT_ALL(st != LM_SUCCESS && t == NULL);
  /* and right extents pass */
  ls = 2;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &s0, LM_SHAPE_GIVEN, &g, LM_FROM_LOCAL_COPY));
  lm_dist_tensor_destroy(&t);
  mesh_works(m);
  lm_mesh_destroy(&m);
}

/* LM_CHECK=0: from_local with LM_SHAPE_ALLGATHER runs no agreement first, but the local extents
 * it gathers carry every rank's ndim and dtype: ranks whose local tensors differ in either are
 * told so, every rank LM_ERR_MISMATCH (src/tensor/from_local.cpp, allgather_layout), instead of
 * making a tensor that is not one. */
static void test_check_level_0_from_local_ndim_dtype(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d_cfg(0, 30.0); /* a regression fails instead of hanging */
  for (int mode = 0; mode < 2; ++mode) {
    const int odd = odd_one(mode);
    int64_t ls[2] = {2, 1};
    double buf[2] = {1, 2};
    lm_placement_t s0 = S_(0);
    lm_dist_tensor_t t = NULL;
    /* dtype: float64 on the odd ranks, float32 (the same bytes: 4 elements) elsewhere */
    int64_t n4 = 4;
    DLTensor ld = {buf, LM_CPU, 1, odd ? LM_FLOAT64 : LM_FLOAT32, odd ? ls : &n4, NULL, 0};
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &ld, &s0, LM_SHAPE_ALLGATHER, NULL,
                                            LM_FROM_LOCAL_COPY),
                  LM_ERR_MISMATCH, "passed a local tensor of ndim 1 / another dtype");
    LM_ASSERT_ALL(t == NULL);
    /* ndim: [2, 1] on the odd ranks, [2] elsewhere (S(0) is valid for both) */
    DLTensor ln = {buf, LM_CPU, odd ? 2 : 1, LM_FLOAT64, ls, NULL, 0};
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &ln, &s0, LM_SHAPE_ALLGATHER, NULL,
                                            LM_FROM_LOCAL_COPY),
                  LM_ERR_MISMATCH, "passed a local tensor of ndim");
    LM_ASSERT_ALL(t == NULL);
    /* and the agreed call works */
    DLTensor same = {buf, LM_CPU, 1, LM_FLOAT64, ls, NULL, 0};
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &same, &s0, LM_SHAPE_ALLGATHER, NULL,
                                               LM_FROM_LOCAL_COPY));
    lm_dist_tensor_destroy(&t);
    mesh_works(m);
  }
  lm_mesh_destroy(&m);
}

static void test_check_level_config(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t s[1] = {NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.check_level = 3;
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, &cfg), LM_ERR_INVALID_ARGUMENT,
                "config->check_level");
  /* level 0 on a mesh: correct programs run as before */
  m = mesh_1d_cfg(0, -1);
  mesh_works(m);
  lm_mesh_destroy(&m);
  /* ranks that ask for different levels use the highest */
  m = mesh_1d_cfg(ME == 0 ? 2 : 0, -1);
  mesh_works(m);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reshard_target_placements),
    cmocka_unit_test(test_reshard_message_names_ranks),
    cmocka_unit_test(test_reshard_source_placements_shape_dtype_op),
    cmocka_unit_test(test_reshard_different_mesh),
    cmocka_unit_test(test_plan_execute_different_plans),
    cmocka_unit_test(test_plan_dtype_shape_and_coshard_order),
    cmocka_unit_test(test_cross_mesh_with_bystanders),
    cmocka_unit_test(test_gather_mismatches),
    cmocka_unit_test(test_from_global_root_shapes),
    cmocka_unit_test(test_from_local_allgather_mismatches),
    cmocka_unit_test(test_local_map_mismatches),
    cmocka_unit_test(test_failure_cause_travels),
    cmocka_unit_test(test_failure_cause_gather),
    cmocka_unit_test(test_placements_differ_past_the_first),
    cmocka_unit_test(test_mesh_create_different_parents),
    cmocka_unit_test(test_check_level_2_replicas),
    cmocka_unit_test(test_check_level_2_from_local_extents),
    cmocka_unit_test(test_check_level_config),
    cmocka_unit_test(test_check_level_0_from_local_ndim_dtype),
};

LM_TEST_MAIN(tests)
