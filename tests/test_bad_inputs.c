/* SPDX-License-Identifier: BSD-3-Clause */
/* Bad input that used to get through (issue 8 item 4), and what the fuzzers found:
 * lm_layout_chunk near INT64_MAX, borrowed data misaligned for its dtype, strides whose byte span
 * overflows, Partial ops the dtype cannot take, a user fn returning one DLManagedTensor twice,
 * nout = INT_MAX, and the documented meaning of plan_create(dst_mesh = NULL) and local_map with no mesh at all. */
// lm-test-np: 1 2 3
#include "lm_test.h"

#include <limits.h>
#include <localmap.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static lm_mesh_t world(void) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {lm_test_size()};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  return m;
}

/* torch.chunk computed in 128 bits: the reference. */
static void chunk_ref(int64_t n, int64_t parts, int64_t i, int64_t *off, int64_t *len) {
  __int128 b = ((__int128)n + parts - 1) / parts;
  __int128 o = b * i < n ? b * i : n;
  __int128 e = o + b < n ? o + b : n;
  *off = (int64_t)o;
  *len = (int64_t)(e - o);
}

static void test_chunk_near_int64_max(void **state) {
  (void)state;
  const int64_t M = INT64_MAX;
  const int64_t ns[] = {M, M - 1, M - 2, M / 2 + 1, (int64_t)1 << 62, 0, 1, 7};
  const int64_t ps[] = {1, 2, 3, 7, M, M - 1, (int64_t)1 << 32, 1000003};
  int ok = 1, nchecked = 0;
  for (size_t a = 0; a < sizeof ns / sizeof *ns; ++a)
    for (size_t b = 0; b < sizeof ps / sizeof *ps; ++b) {
      int64_t n = ns[a], p = ps[b];
      int64_t is[] = {0, 1, p / 2, p - 2, p - 1};
      for (size_t c = 0; c < 5; ++c) {
        int64_t i = is[c], off = -1, len = -1, ro, rl;
        if (i < 0 || i >= p) continue;
        if (lm_layout_chunk(n, p, i, &off, &len) != LM_SUCCESS) ok = 0;
        chunk_ref(n, p, i, &ro, &rl);
        if (off != ro || len != rl || off < 0 || len < 0 || off > n || len > n - off) ok = 0;
        ++nchecked;
      }
    }
  LM_ASSERT_ALL(ok && nchecked > 100);
  /* What was wrong: lm_layout_chunk(INT64_MAX, 2, 1) overflowed in n + parts - 1 (UBSan) and gave a
   * negative offset with LM_SUCCESS. */
  int64_t off, len;
  LM_ASSERT_OK_ALL(lm_layout_chunk(M, 2, 1, &off, &len));
  LM_ASSERT_ALL(off == ((int64_t)1 << 62) && len == ((int64_t)1 << 62) - 1);
  LM_ASSERT_OK_ALL(lm_layout_chunk(M, M, M - 1, &off, &len));
  LM_ASSERT_ALL(off == M - 1 && len == 1);
  LM_EXPECT_ALL(lm_layout_chunk(M, M, M, &off, &len), LM_ERR_INVALID_ARGUMENT, "index");
  LM_EXPECT_ALL(lm_layout_chunk(-1, 2, 0, &off, &len), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_layout_chunk(5, INT64_MIN, 0, &off, &len), LM_ERR_INVALID_ARGUMENT, "parts");
}

static void test_borrow_misaligned_data_refused(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  _Alignas(16) unsigned char buf[64] = {0};
  int64_t shp[1] = {4};
  lm_dist_tensor_t t = NULL;
  /* float64 at an odd address: was borrowed, then read misaligned by the reduce kernels. */
  DLTensor l = {buf + 1, LM_CPU, 1, LM_FLOAT64, shp, NULL, 0};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "aligned");
  LM_ASSERT_ALL(t == NULL);
  l.data = buf;
  l.byte_offset = 4; /* the offset counts too */
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "aligned");
  /* A copy does not care; an aligned borrow works; complex64 needs only 4 bytes. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  l.byte_offset = 8;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  l.byte_offset = 4;
  l.dtype = LM_COMPLEX64;
  shp[0] = 2;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_strides_whose_span_overflows_refused(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  double buf[8] = {0};
  int64_t shp[2] = {2, 2}, st[2] = {INT64_MAX / 4, 1};
  lm_dist_tensor_t t = NULL;
  /* (2-1) * 2^61 elements of 8 bytes: the byte offsets wrapped, and a copy read outside buf. */
  DLTensor l = {buf, LM_CPU, 2, LM_FLOAT64, shp, st, 0};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY),
                LM_ERR_INVALID_ARGUMENT, "strides");
  st[0] = INT64_MIN;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY),
                LM_ERR_INVALID_ARGUMENT, "strides");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "strides");
  /* Sane strides (a transpose) still copy. */
  st[0] = 1;
  st[1] = 2;
  for (int i = 0; i < 4; ++i) buf[i] = i;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  const double *d = v.data;
  LM_ASSERT_ALL(d[0] == 0 && d[1] == 2 && d[2] == 1 && d[3] == 3);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* An empty tensor with absurd extents and strides is fine: nothing is read. It spans no byte
   * (include/localmap.h, lm_dist_tensor_from_local: the span that shape x strides covers must
   * fit), it is compact (lm_padded_extents: "a view with an empty extent is compact", so it may be
   * borrowed) and holds 0 elements (under the 2^58 limit): LM_SUCCESS, with and without a copy. */
  int64_t eshp[3] = {0, INT64_MAX / 2, 3}, est[3] = {INT64_MAX, INT64_MAX, 1};
  DLTensor e = {buf, LM_CPU, 3, LM_FLOAT64, eshp, est, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &e, &rep, LM_SHAPE_GIVEN, eshp, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &e, &rep, LM_SHAPE_GIVEN, eshp, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static lm_status_t fn_make(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out);

static int g_deleted;
static void del_free(DLManagedTensor *mt) {
  ++g_deleted;
  free(mt->dl_tensor.data);
  free(mt->dl_tensor.shape);
  free(mt);
}
static DLManagedTensor *managed(DLDataType dt, int64_t n) {
  DLManagedTensor *mt = calloc(1, sizeof *mt);
  int64_t *shape = malloc(sizeof *shape);
  shape[0] = n;
  mt->dl_tensor = (DLTensor){calloc((size_t)(n ? n : 1), 16), LM_CPU, 1, dt, shape, NULL, 0};
  mt->deleter = del_free;
  return mt;
}

static int g_mode;
static lm_status_t fn_make(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)in;
  if (g_mode == 0) { /* a bool output declared Partial(avg) */
    out[0] = (lm_arg_t){.kind = LM_ARG_MANAGED_TENSOR, .ptr = managed(LM_BOOL, 3)};
  } else if (g_mode == 1) { /* the same managed tensor twice */
    DLManagedTensor *mt = managed(LM_FLOAT64, 3);
    for (int j = 0; j < nout; ++j) out[j] = (lm_arg_t){.kind = LM_ARG_MANAGED_TENSOR, .ptr = mt};
  } else if (g_mode == 2) { /* twice, and fn fails: the deleter still runs once */
    DLManagedTensor *mt = managed(LM_FLOAT64, 3);
    out[0] = out[1] = (lm_arg_t){.kind = LM_ARG_MANAGED_TENSOR, .ptr = mt};
    return LM_ERR_USER;
  } else if (g_mode == 3) { /* misaligned output data */
    DLManagedTensor *mt = managed(LM_FLOAT64, 3);
    mt->dl_tensor.byte_offset = 2;
    out[0] = (lm_arg_t){.kind = LM_ARG_MANAGED_TENSOR, .ptr = mt};
  } else { /* local call: a scalar */
    out[0] = (lm_arg_t){.kind = LM_ARG_INT64, .i64 = mesh == NULL ? 42 : -1};
  }
  return LM_SUCCESS;
}

static void test_partial_op_the_dtype_cannot_take_refused_where_made(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_placement_t avg = LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG), mx = LM_PLACEMENT_PARTIAL(LM_REDUCE_MAX),
                 mn = LM_PLACEMENT_PARTIAL(LM_REDUCE_MIN), rep = LM_PLACEMENT_REPLICATE;
  int64_t shp[1] = {3};
  lm_dist_tensor_t t = NULL;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, shp, LM_BOOL, LM_CPU, &avg), LM_ERR_NOT_SUPPORTED, "bool");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, shp, LM_COMPLEX64, LM_CPU, &mx), LM_ERR_NOT_SUPPORTED, "max");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, shp, LM_COMPLEX128, LM_CPU, &mn), LM_ERR_NOT_SUPPORTED, "min");
  double cbuf[6] = {0};
  uint8_t bbuf[3] = {0};
  DLTensor c = {cbuf, LM_CPU, 1, LM_COMPLEX64, shp, NULL, 0}, b = {bbuf, LM_CPU, 1, LM_BOOL, shp, NULL, 0};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &c, &mx, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY),
                LM_ERR_NOT_SUPPORTED, "max");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &b, &avg, LM_SHAPE_ALLGATHER, NULL, LM_FROM_LOCAL_BORROW),
                LM_ERR_NOT_SUPPORTED, "bool");
  LM_EXPECT_ALL(lm_dist_tensor_from_global(&t, m, &b, &avg, -1), LM_ERR_NOT_SUPPORTED, "bool");
  {
    lm_status_t s = lm_dist_tensor_from_global(&t, m, lm_test_rank() == 0 ? &c : NULL, &mn, 0);
    LM_ASSERT_ALL(lm_test_rank() == 0 ? s == LM_ERR_NOT_SUPPORTED : s == LM_ERR_REMOTE);
  }
  {
    DLManagedTensor *mt = managed(LM_BOOL, 3);
    int d0 = g_deleted;
    LM_EXPECT_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, &avg, LM_SHAPE_GIVEN, shp),
                  LM_ERR_NOT_SUPPORTED, "bool");
    LM_ASSERT_ALL(g_deleted == d0); /* ownership stays with the caller */
    mt->deleter(mt);
  }
  /* Plans: a target the dtype cannot take. */
  lm_reshard_plan_t p = NULL;
  LM_EXPECT_ALL(lm_reshard_plan_create(&p, m, &rep, NULL, &avg, 1, shp, LM_BOOL), LM_ERR_NOT_SUPPORTED,
                "bool");
  LM_ASSERT_ALL(p == NULL);
  /* local_map outputs. */
  const lm_placement_t *op[1] = {&avg};
  lm_arg_t out[1];
  int d0 = g_deleted;
  g_mode = 0;
  LM_EXPECT_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, 1, op, NULL, m, 0, out),
                LM_ERR_NOT_SUPPORTED, "bool");
  LM_ASSERT_ALL(out[0].kind == LM_ARG_NONE && g_deleted == d0 + 1);
  /* The valid ones still work. */
  lm_placement_t sum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, shp, LM_BOOL, LM_CPU, &mx));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, shp, LM_COMPLEX64, LM_CPU, &sum));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_fn_returning_one_managed_tensor_twice(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  const lm_placement_t *op[3] = {&rep, &rep, &rep};
  lm_arg_t out[3];
  for (int mode = 1; mode <= 2; ++mode) {
    int d0 = g_deleted;
    g_mode = mode;
    lm_status_t s = lm_local_map(fn_make, NULL, 0, NULL, NULL, mode == 1 ? 3 : 2, op, NULL, m, 0, out);
    LM_ASSERT_ALL(mode == 1 ? s == LM_ERR_INVALID_ARGUMENT : s == LM_ERR_USER);
    if (mode == 1) LM_ASSERT_ALL(strstr(lm_last_error_message(), "earlier output") != NULL);
    LM_ASSERT_ALL(out[0].kind == LM_ARG_NONE && out[1].kind == LM_ARG_NONE);
    LM_ASSERT_ALL(g_deleted == d0 + 1); /* once: it crashed (double free) before */
  }
  /* Misaligned output data. */
  {
    int d0 = g_deleted;
    g_mode = 3;
    LM_EXPECT_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, 1, op, NULL, m, 0, out),
                  LM_ERR_INVALID_ARGUMENT, "aligned");
    LM_ASSERT_ALL(g_deleted == d0 + 1);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_local_map_absurd_counts(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_arg_t out[1];
  const lm_placement_t *op[1] = {NULL};
  g_mode = 4;
  /* nout = INT_MAX wrote INT_MAX outputs into a 1-entry array (a crash in the plain build). */
  LM_EXPECT_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, INT_MAX, op, NULL, m, 0, out),
                LM_ERR_INVALID_ARGUMENT, "nout");
  LM_EXPECT_ALL(lm_local_map(fn_make, NULL, INT_MAX, out, NULL, 1, op, NULL, m, 0, out),
                LM_ERR_INVALID_ARGUMENT, "nin");
  LM_EXPECT_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, LM_LOCAL_MAP_MAX_ARGS + 1, op, NULL, m,
                             0, out),
                LM_ERR_INVALID_ARGUMENT, "LM_LOCAL_MAP_MAX_ARGS");
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_documented_null_meshes(void **state) {
  (void)state;
  /* lm_local_map with no dist input and no mesh: a local call, fn sees mesh NULL. */
  lm_arg_t out[1];
  const lm_placement_t *op[1] = {NULL};
  g_mode = 4;
  LM_ASSERT_OK_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, 1, op, NULL, NULL, 0, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_INT64 && out[0].i64 == 42);
  /* ... and cannot make dist tensors. */
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  const lm_placement_t *tp[1] = {&rep};
  LM_EXPECT_ALL(lm_local_map(fn_make, NULL, 0, NULL, NULL, 1, tp, NULL, NULL, 0, out),
                LM_ERR_INVALID_ARGUMENT, "no mesh");
  /* lm_reshard_plan_create with dst_mesh NULL: the source mesh. */
  lm_mesh_t m = world();
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  int64_t g[1] = {6};
  lm_reshard_plan_t p = NULL;
  lm_dist_tensor_t d = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, NULL, &rep, 1, g, LM_FLOAT32));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&d, p, LM_CPU));
  lm_mesh_t dm = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(d, &dm));
  LM_ASSERT_ALL(dm == m);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&d));
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_chunk_near_int64_max),
    cmocka_unit_test(test_borrow_misaligned_data_refused),
    cmocka_unit_test(test_strides_whose_span_overflows_refused),
    cmocka_unit_test(test_partial_op_the_dtype_cannot_take_refused_where_made),
    cmocka_unit_test(test_fn_returning_one_managed_tensor_twice),
    cmocka_unit_test(test_local_map_absurd_counts),
    cmocka_unit_test(test_documented_null_meshes),
};

LM_TEST_MAIN(tests)
