/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_skip: LM_TIMEOUT (issue 8 item 2) with a rank that never makes the call: the
 * others return LM_ERR_TIMEOUT after the deadline instead of waiting for ever, and their mesh is
 * broken. (One scenario per program: a timed-out agreement leaves its communicator unusable on
 * the ranks that waited.) The ranks line up with a barrier before each call under the 2 s
 * deadline; the one time bound checked is the behaviour itself: no rank gives up before the
 * deadline (tests/README.md, "Timing").
 */
// lm-test-np: 2 3 4
#include "lm_test.h"

/* MPI keeps the skipped call's messages unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

static void test_rank_skips_the_call(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, n = 8;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = 2.0;
  MPI_Barrier(MPI_COMM_WORLD);
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  float buf[8];
  DLTensor d = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_status_t st = LM_SUCCESS;
  char msg[1024] = "";
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (ME != NP - 1) { /* the last rank skips the gather */
    st = lm_dist_tensor_gather(t, -1, &d);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  }
  double waited = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  int ok = ME == NP - 1 || (st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT") && waited >= 1.9);
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, waited, msg);
  LM_ASSERT_ALL(ok);
  /* the waiting ranks' mesh is broken: later calls say so at once (locally) */
  if (ME != NP - 1) {
    st = lm_dist_tensor_gather(t, -1, &d);
    ok = st == LM_ERR_INVALID_USAGE && strstr(lm_last_error_message(), "broken");
  } else {
    ok = 1;
  }
  LM_ASSERT_ALL(ok);
  LM_ASSERT_ALL(lm_status_string(LM_ERR_TIMEOUT)[0] == 'L' &&
                strstr(lm_status_string(LM_ERR_TIMEOUT), "LM_ERR_TIMEOUT") != NULL);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_rank_skips_the_call),
};

LM_TEST_MAIN(tests)
