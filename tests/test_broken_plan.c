/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_broken_plan: persistent plans follow the broken-mesh rule (issue 19 item 2). An injected
 * transport failure on rank 1 (LM_FAULT=transport:rank=1:nth=3, set here before the library reads
 * its settings; the board exchange off, so every execution posts transport calls) breaks the mesh
 * there. The tensor is small, so rank 1's messages are delivered eagerly before its fault fires at
 * its wait: the other ranks complete that execution successfully, unaware. The next
 * lm_reshard_plan_execute must then fail on every rank (the broken rank joins the agreement with
 * its failure) instead of leaving the others waiting for it, and so must every later one. A deadline (10 s) turns a
 * regression into LM_ERR_TIMEOUT, which fails the test, instead of a hung job.
 */
// lm-test-np: 2 3 4
#include "lm_test.h"

/* After the injected transport failure, what the others sent to rank 1 is never received
 * (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

__attribute__((constructor)) static void set_environment(void) {
  setenv("LM_FAULT", "transport:rank=1:nth=3", 1);
  setenv("LM_BOARD_EXCHANGE_BYTES", "0", 1);
}

static void test_execute_after_a_transport_failure(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, shape[2] = {16, 12};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = 10.0;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  lm_reshard_plan_t p = NULL;
  lm_dist_tensor_t src = NULL, dst = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, NULL, &s1, 2, shape, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 2, shape, LM_FLOAT64, LM_CPU, &s0));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, LM_CPU));
  /* Executions until the injected fault fires (its third transport call on rank 1). */
  lm_status_t st = LM_SUCCESS;
  int any_failed = 0;
  for (int i = 0; i < 8 && !any_failed; ++i) {
    st = lm_reshard_plan_execute(p, src, dst);
    int failed = st != LM_SUCCESS;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  LM_ASSERT_ALL(any_failed); /* the fault fired */
  /* Every later execution fails on every rank, promptly, and never with a timeout. */
  for (int i = 0; i < 2; ++i) {
    st = lm_reshard_plan_execute(p, src, dst);
    const char *msg = lm_last_error_message();
    int ok = (st == LM_ERR_INVALID_USAGE || st == LM_ERR_REMOTE) && !strstr(msg, "LM_TIMEOUT");
    if (!ok) fprintf(stderr, "rank %d: execution %d after the fault: status %d: %s\n", ME, i,
                     (int)st, msg);
    LM_ASSERT_ALL(ok);
  }
  lm_dist_tensor_destroy(&dst);
  lm_dist_tensor_destroy(&src);
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_execute_after_a_transport_failure),
};

LM_TEST_MAIN(tests)
