/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_transfer: LM_TIMEOUT inside a transfer (issue 8 item 2). On a mesh with
 * check_level 0 a reshard runs no agreement, so when the last rank skips it the others wait in
 * the transfer itself (on one node this small reshard moves inside the failure-only round of the
 * board exchange, which is then its transfer; across nodes, as in make check-multinode, over
 * MPI): after the deadline they return LM_ERR_TIMEOUT naming the rank they were still waiting for, or LM_ERR_REMOTE carrying the timeout of a rank whose deadline passed first
 * (the agreement-phase timeouts are in test_timeout_skip/_sleep), and their mesh is broken. One
 * scenario per program: the skipped messages are never matched. The ranks line up with a barrier
 * before the calls under the 2 s deadline; the time bound checked is a lower one, the behaviour:
 * nobody gives up long before the deadline (tests/README.md, "Timing").
 */
// lm-test-np: 2 3
#include "lm_test.h"

/* MPI keeps the skipped transfer's messages unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

static void test_transfer_names_the_missing_rank(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, n = 64;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = 2.0;
  cfg.check_level = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  lm_status_t st = LM_SUCCESS;
  char msg[1024] = "", who[64];
  snprintf(who, sizeof who, "waiting for rank %d", NP - 1);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (ME != NP - 1) { /* the last rank skips the reshard */
    st = lm_dist_tensor_reshard(&r, t, NULL, &rep);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  }
  double waited = MPI_Wtime() - t0;
  /* A rank whose deadline passes first tells the others (its failure notice), so a waiting rank
   * returns either its own LM_ERR_TIMEOUT or LM_ERR_REMOTE carrying that one; both name the rank
   * still awaited, and at least one rank timed out itself. */
  int timed_out = st == LM_ERR_TIMEOUT, any_timed_out = 0;
  int ok = ME == NP - 1 ||
           ((timed_out || (st == LM_ERR_REMOTE && strstr(msg, "LM_ERR_TIMEOUT"))) && r == NULL &&
            strstr(msg, "LM_TIMEOUT") && strstr(msg, who) && waited >= 1.0);
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, waited, msg);
  LM_ASSERT_ALL(ok);
  MPI_Allreduce(&timed_out, &any_timed_out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  LM_ASSERT_ALL(any_timed_out);
  if (ME != NP - 1) { /* either way the mesh is broken there: later calls say so at once */
    st = lm_dist_tensor_reshard(&r, t, NULL, &rep);
    ok = st == LM_ERR_INVALID_USAGE && strstr(lm_last_error_message(), "broken");
  }
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_transfer_names_the_missing_rank),
};

LM_TEST_MAIN(tests)
