/* SPDX-License-Identifier: BSD-3-Clause */
/* Regressions found in review: integer reductions (no wraparound in avg, defined wraparound in
 * sum), shapes whose sizes overflow, lm_local_map outputs that differ across ranks, and a reshard
 * at LM_CHECK=0 in which one rank's output is a view of its input while the others exchange (it
 * skipped the board round that the others ran: they waited for it). */
// lm-test-np: 1 2 3 4
#include "lm_test.h"

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

static void test_int8_avg_does_not_wrap(void **state) {
  (void)state;
  lm_mesh_t m = world();
  int8_t loc[3] = {100, -100, 127};
  int64_t shp[1] = {3};
  DLTensor l = {loc, LM_CPU, 1, LM_INT8, shp, NULL, 0};
  lm_placement_t p = LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG), r = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, o = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &p, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&o, t, NULL, &r));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(o, &v));
  const int8_t *d = v.data;
  LM_ASSERT_ALL(d[0] == 100 && d[1] == -100 && d[2] == 127);
  lm_dist_tensor_destroy(&o);
  lm_dist_tensor_destroy(&t);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_int_sum_wraps_like_twos_complement(void **state) {
  (void)state;
  lm_mesh_t m = world();
  const int n = lm_test_size();
  int32_t loc[1] = {INT32_MAX};
  int64_t shp[1] = {1};
  DLTensor l = {loc, LM_CPU, 1, LM_INT32, shp, NULL, 0};
  lm_placement_t p = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), r = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, o = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &p, LM_SHAPE_GIVEN, shp, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&o, t, NULL, &r));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(o, &v));
  uint32_t expect = (uint32_t)((uint64_t)INT32_MAX * (uint64_t)n);
  LM_ASSERT_ALL(*(const uint32_t *)v.data == expect);
  lm_dist_tensor_destroy(&o);
  lm_dist_tensor_destroy(&t);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_overflowing_shapes_refused(void **state) {
  (void)state;
  lm_mesh_t m = world(), mm = NULL;
  lm_placement_t r = LM_PLACEMENT_REPLICATE, s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  int64_t g2[2] = {(int64_t)1 << 32, (int64_t)1 << 32}, g1[1] = {(int64_t)1 << 61};
  LM_ASSERT_STATUS_ALL(lm_dist_tensor_zeros(&t, m, 2, g2, LM_INT8, LM_CPU, &r), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(t == NULL && strstr(lm_last_error_message(), "2^58") != NULL);
  LM_ASSERT_STATUS_ALL(lm_dist_tensor_zeros(&t, m, 1, g1, LM_FLOAT64, LM_CPU, &r), LM_ERR_INVALID_ARGUMENT);
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_STATUS_ALL(lm_reshard_plan_create(&p, m, &s0, NULL, &r, 1, g1, LM_FLOAT64), LM_ERR_INVALID_ARGUMENT);
  int64_t ms[2] = {2, INT64_MAX};
  LM_ASSERT_STATUS_ALL(lm_mesh_create(&mm, lm_test_comm_f(), 2, ms, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(mm == NULL);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static int64_t shp4[1] = {4};
static int g_mode;
static void del(DLManagedTensor *mt) {
  free(mt->dl_tensor.data);
  free(mt);
}
static lm_status_t fn_differs(void *ud, lm_mesh_t me, int ni, const lm_arg_t *in, int no, lm_arg_t *out) {
  (void)ud; (void)me; (void)ni; (void)in; (void)no;
  const int last = lm_test_rank() == lm_test_size() - 1;
  DLManagedTensor *mt = calloc(1, sizeof *mt);
  mt->dl_tensor.ndim = 1;
  mt->dl_tensor.shape = shp4;
  mt->dl_tensor.device = LM_CPU;
  mt->dl_tensor.dtype = (g_mode == 0 && last) ? LM_FLOAT64 : LM_FLOAT32;
  mt->dl_tensor.data = (g_mode == 1 && last) ? NULL : calloc(4, 8);
  mt->deleter = del;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}

static void test_local_map_outputs_differ_across_ranks(void **state) {
  (void)state;
  lm_mesh_t m = world();
  const int last = lm_test_rank() == lm_test_size() - 1, n = lm_test_size();
  lm_placement_t rep = LM_PLACEMENT_REPLICATE, s0 = LM_PLACEMENT_SHARD(0);
  for (int shard = 0; shard < 2; ++shard) { /* Replicate: allreduce path; Shard: allgather path */
    const lm_placement_t *op[1] = {shard ? &s0 : &rep};
    lm_arg_t out[1];
    g_mode = 0; /* the last rank returns float64, the others float32 */
    lm_status_t st = lm_local_map(fn_differs, NULL, 0, NULL, NULL, 1, op, NULL, m, 0, out);
    LM_ASSERT_ALL(n == 1 ? st == LM_SUCCESS : st == LM_ERR_MISMATCH);
    if (st == LM_SUCCESS) lm_dist_tensor_destroy((lm_dist_tensor_t *)&out[0].ptr);
    LM_ASSERT_ALL(out[0].kind == (st == LM_SUCCESS ? LM_ARG_DIST_TENSOR : LM_ARG_NONE) || st == LM_SUCCESS);
    g_mode = 1; /* the last rank returns NULL data */
    st = lm_local_map(fn_differs, NULL, 0, NULL, NULL, 1, op, NULL, m, 0, out);
    LM_ASSERT_ALL(last ? st == LM_ERR_INVALID_ARGUMENT : st == LM_ERR_REMOTE);
    LM_ASSERT_ALL(out[0].kind == LM_ARG_NONE);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_gather_all_one_bad_dst_fails_everywhere(void **state) {
  (void)state;
  lm_mesh_t m = world();
  const int last = lm_test_rank() == lm_test_size() - 1, n = lm_test_size();
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  int64_t g[1] = {7}, wrong[1] = {6};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT64, LM_CPU, &s0));
  double buf[7];
  DLTensor d = {buf, LM_CPU, 1, LM_FLOAT64, last ? wrong : g, NULL, 0};
  lm_status_t st = lm_dist_tensor_gather(t, -1, &d);
  LM_ASSERT_ALL(last ? st == LM_ERR_INVALID_ARGUMENT : (n == 1 || st == LM_ERR_REMOTE));
  d.shape = g; /* and afterwards everything works */
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &d));
  lm_dist_tensor_destroy(&t);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* S0 -> ragged (3, 4, 2, 3, 3, ...) of a [3 n] tensor at check level 0: rank 0 keeps its block as
 * a view, ranks 1 and 2 exchange one element. Values and the next call checked. */
static void test_view_rank_beside_an_exchange_at_level_0(void **state) {
  (void)state;
  const int n = lm_test_size(), me = lm_test_rank();
  if (n < 3) lm_test_skip("needs 3 ranks or more (rank 0 a view, 1 and 2 an exchange)");
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.check_level = 0;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {n}, g[1] = {3 * (int64_t)n}, e[64];
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  for (int r = 0; r < n; ++r) e[r] = r == 1 ? 4 : r == 2 ? 2 : 3;
  int32_t id = 0;
  LM_ASSERT_OK(lm_extents_create(&id, e, n));
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rag = LM_PLACEMENT_RAGGED(0, id);
  double *all = malloc(sizeof(double) * (size_t)g[0]);
  for (int64_t i = 0; i < g[0]; ++i) all[i] = (double)i;
  DLTensor gt = {all, LM_CPU, 1, LM_FLOAT64, g, NULL, 0};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, m, &gt, &s0, -1));
  for (int k = 0; k < 2; ++k) {
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, &rag));
    DLTensor v;
    int64_t len = 0, off = 0, wrong = 0;
    LM_ASSERT_OK(lm_dist_tensor_local(y, &v));
    LM_ASSERT_OK(lm_dist_tensor_local_shape(y, &len, 1));
    LM_ASSERT_OK(lm_dist_tensor_local_offset(y, &off, 1));
    for (int64_t i = 0; i < len; ++i) wrong += ((double *)v.data)[i] != (double)(off + i);
    LM_ASSERT_ALL(wrong == 0 && len == e[me]);
    lm_dist_tensor_destroy(&y);
  }
  free(all);
  lm_dist_tensor_destroy(&x);
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_gather_all_one_bad_dst_fails_everywhere),
    cmocka_unit_test(test_view_rank_beside_an_exchange_at_level_0),
    cmocka_unit_test(test_int8_avg_does_not_wrap),
    cmocka_unit_test(test_int_sum_wraps_like_twos_complement),
    cmocka_unit_test(test_overflowing_shapes_refused),
    cmocka_unit_test(test_local_map_outputs_differ_across_ranks),
};

LM_TEST_MAIN(tests)
