/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_late: what LM_TIMEOUT promises when a rank comes late (issue 19 item 1), ordered by
 * handshakes, not by sleeps racing the deadline:
 *  - the ranks that came return LM_ERR_TIMEOUT after the deadline; then (a handshake on
 *    MPI_COMM_WORLD) the late rank makes the same call and finds nobody: LM_ERR_TIMEOUT too,
 *    never success against the abandoned round;
 *  - afterwards the mesh is unusable on every rank and says so at once (INVALID_USAGE), without
 *    waiting for another deadline (the agreement channel of these processes is broken for good:
 *    one scenario per program, test_timeout_next has the transfer deadline);
 *  - MPI_Finalize after all that does not crash (no request outlives its buffers; the program's
 *    exit status shows it).
 * tests/script_failures.sh runs it with agreements over MPI (LM_AGREE_BOARD=0, LM_NODE_LOCAL=0) as
 * well as over the shared-memory board (the default on one node).
 */
// lm-test-np: 2 3
#include "lm_late_rank.h"

/* The rounds the others gave up leave the late rank's messages unreceived (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

static void test_late_rank_fails_too(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = TMO;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  char msg[1024] = "";
  lm_status_t st;
  int ok = 1;
  if (ME != LATE) {
    st = call(m, msg, sizeof msg);  /* the late rank is not there: the deadline passes */
    ok = st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT");
    MPI_Send(&ok, 1, MPI_INT, LATE, 77, MPI_COMM_WORLD);  /* "we gave up" */
  } else {
    for (int r = 0; r < NP - 1; ++r) MPI_Recv(&ok, 1, MPI_INT, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    st = call(m, msg, sizeof msg);  /* comes after every other rank gave up */
    ok = st == LM_ERR_TIMEOUT && strstr(msg, "gave up");
  }
  if (!ok) fprintf(stderr, "rank %d: status %d: %s\n", ME, (int)st, msg);
  LM_ASSERT_ALL(ok);
  /* Every rank's mesh is unusable now, and every rank knows it without waiting again. */
  double t0 = MPI_Wtime();
  st = call(m, msg, sizeof msg);
  double took = MPI_Wtime() - t0;
  ok = st == LM_ERR_INVALID_USAGE && took < TMO / 2;
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, took, msg);
  LM_ASSERT_ALL(ok);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_late_rank_fails_too),
};

LM_TEST_MAIN(tests)
