/* SPDX-License-Identifier: BSD-3-Clause */
/* Bad inputs of the smaller public functions (plans, requests, queries, bootstrap) that the
 * larger suites do not reach: each gives a status and a message naming the argument, no crash. */
// lm-test-np: 1 2 3
#include "lm_test.h"

#include <localmap.h>
#include <string.h>


static char g_foreign[256]; /* zero-filled: no magic word */

static int msg_has(const char *word) { return strstr(lm_last_error_message(), word) != NULL; }

static void test_bootstrap_helpers(void **state) {
  (void)state;
  int r = -1, n = -1, f = 0;
  LM_ASSERT_OK(lm_init(NULL, NULL)); /* already initialised: nothing to do */
  LM_ASSERT_OK(lm_world_rank(&r, &n));
  LM_ASSERT_ALL(r == lm_test_rank() && n == lm_test_size());
  LM_ASSERT_STATUS(lm_world_rank(NULL, &n), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("rank"));
  LM_ASSERT_STATUS(lm_world_rank(&r, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("size"));
  LM_ASSERT_OK(lm_comm_world(&f));
  LM_ASSERT_ALL(f == lm_test_comm_f());
  LM_ASSERT_STATUS(lm_comm_world(NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("comm_f"));
  int sup = -1;
  LM_ASSERT_OK(lm_device_supported(kDLCPU, &sup));
  LM_ASSERT_ALL(sup == 1);
  LM_ASSERT_STATUS(lm_device_supported(kDLCPU, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("supported"));
  /* lm_finalize only finalises what lm_init initialised: the harness owns MPI here. */
  LM_ASSERT_OK(lm_finalize());
  int fin = 1;
  MPI_Finalized(&fin);
  LM_ASSERT_ALL(fin == 0);
  /* kDLCUDA: exactly what the build and machine call for (1: a CUDA build with a GPU), decided
   * outside the library by LM_EXPECT_GPU (tests/run-tests.sh). A regressed answer fails here. */
  LM_ASSERT_OK(lm_device_supported(kDLCUDA, &sup));
  if (lm_test_expect_gpu() < 0) lm_test_skip("LM_EXPECT_GPU is not set (tests/run-tests.sh sets it)");
  if (sup != lm_test_expect_gpu())
    lm_test__diag("rank %d: lm_device_supported(kDLCUDA) = %d, LM_EXPECT_GPU = %d\n", lm_test_rank(),
                  sup, lm_test_expect_gpu());
  LM_ASSERT_ALL(sup == lm_test_expect_gpu());
}

static void test_plan_and_request_bad_inputs(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t s[1] = {lm_test_size()}, g[2] = {5, 3};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  lm_reshard_plan_t p = NULL, foreign = (lm_reshard_plan_t)g_foreign;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, NULL, &r, 2, g, LM_FLOAT32));

  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK(lm_reshard_plan_info(p, 0, &info));
  LM_ASSERT_ALL(info.bytes_sent >= 0);
  LM_ASSERT_STATUS(lm_reshard_plan_info(NULL, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("plan"));
  LM_ASSERT_STATUS(lm_reshard_plan_info(foreign, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_reshard_plan_info(p, 0, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("info"));

  char buf[256];
  LM_ASSERT_OK(lm_reshard_plan_describe(p, buf, sizeof buf));
  LM_ASSERT_ALL(strlen(buf) > 0);
  LM_ASSERT_STATUS(lm_reshard_plan_describe(p, NULL, 10), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("buf"));
  LM_ASSERT_STATUS(lm_reshard_plan_describe(p, buf, 0), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_reshard_plan_describe(foreign, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT);

  lm_dist_tensor_t t = NULL;
  LM_ASSERT_STATUS(lm_reshard_plan_alloc_target(&t, NULL, LM_CPU), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_reshard_plan_alloc_target(NULL, p, LM_CPU), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("out"));
  int cuda_ok = lm_test_expect_gpu() == 1; /* not the library's own answer */
  LM_ASSERT_STATUS(lm_reshard_plan_alloc_target(&t, p, (DLDevice){kDLCUDA, 9999}),
                   cuda_ok ? LM_ERR_INVALID_ARGUMENT : LM_ERR_NOT_SUPPORTED);
  LM_ASSERT_ALL(msg_has("device") && t == NULL);

  int done = -1;
  lm_request_t req = NULL, freq = (lm_request_t)g_foreign;
  LM_ASSERT_STATUS(lm_request_test(NULL, &done), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("request"));
  LM_ASSERT_STATUS(lm_request_test(&req, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(msg_has("done"));
  LM_ASSERT_OK(lm_request_test(&req, &done)); /* a NULL request is complete */
  LM_ASSERT_ALL(done == 1);
  LM_ASSERT_STATUS(lm_request_test(&freq, &done), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_request_wait(NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_OK(lm_request_wait(&req));
  LM_ASSERT_STATUS(lm_request_wait(&freq), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_reshard_plan_start(NULL, p, NULL, NULL), LM_ERR_INVALID_ARGUMENT);

  LM_ASSERT_STATUS(lm_reshard_plan_destroy(&foreign), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&p));
  LM_ASSERT_ALL(p == NULL);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&p)); /* NULL handle: fine */
  LM_ASSERT_OK(lm_reshard_plan_destroy(NULL));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static lm_status_t fn_fails_with_message(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                                         int nout, lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)in; (void)nout; (void)out;
  lm_set_error_message("the loss was NaN");
  return LM_ERR_INVALID_ARGUMENT;
}

static void test_user_message_reaches_caller(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t s[1] = {lm_test_size()};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  lm_arg_t out[1];
  const lm_placement_t *none[1] = {NULL};
  LM_ASSERT_STATUS_ALL(lm_local_map(fn_fails_with_message, NULL, 0, NULL, NULL, 1, none, NULL, m, 0, out),
                       LM_ERR_USER);
  LM_ASSERT_ALL(msg_has("the loss was NaN") && msg_has("LM_ERR_INVALID_ARGUMENT"));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_NONE);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bootstrap_helpers),
    cmocka_unit_test(test_plan_and_request_bad_inputs),
    cmocka_unit_test(test_user_message_reaches_caller),
};

LM_TEST_MAIN(tests)
