/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_next: after a transfer deadline the next call fails at once (issue 19 item 1): the
 * transfer's timeout breaks the mesh and its agreement channels, so the next call, also one that
 * agrees, returns INVALID_USAGE without waiting for the unresponsive rank again. MPI_Finalize
 * afterwards does not crash. tests/script_failures.sh also runs it with agreements over MPI.
 */
// lm-test-np: 2 3
#include "lm_late_rank.h"

/* The round given up at the deadline leaves its messages unreceived (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

/* A transfer deadline (check level 0: no agreement before the data moves; the last rank skips
 * the reshard) breaks the mesh, and the next call on it fails at once, also a call that agrees
 * (local_map joins its failure agreement), instead of waiting for the unresponsive rank again. */
static void test_next_call_after_transfer_timeout_is_immediate(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, n = 64;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = TMO;
  cfg.check_level = 0;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  int ok = 1;
  char msg[1024] = "";
  if (ME != LATE) {
    lm_status_t st = lm_dist_tensor_reshard(&r, t, NULL, &rep);
    ok = (st == LM_ERR_TIMEOUT || st == LM_ERR_REMOTE) && r == NULL;
    double t0 = MPI_Wtime();
    st = call(m, msg, sizeof msg);
    double took = MPI_Wtime() - t0;
    ok = ok && st == LM_ERR_INVALID_USAGE && took < TMO / 2;
    if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, took, msg);
  }
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_next_call_after_transfer_timeout_is_immediate),
};

LM_TEST_MAIN(tests)
