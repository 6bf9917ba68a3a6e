/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_one_rank: a deadline set on one rank only. Rank 0 gets LM_TIMEOUT from its
 * environment (set in main, before any localmap call); the other ranks have none, or set one of
 * their own in config->timeout. docs/DESIGN.md: mesh creation makes the same collectives on every
 * rank whatever its own deadline, and the mesh takes the highest any rank asked for.
 *  - Meshes are created, over a new process set and a known one, and used: a rank's own deadline
 *    never leaves it a round behind the others (it used to fail after the deadline with
 *    LM_ERR_TIMEOUT while the others waited for ever).
 *  - The mesh's deadline is rank 0's on every rank: when rank 0 comes late to a call, the ranks
 *    without a deadline of their own give up at rank 0's, then rank 0 finds nobody (LM_ERR_TIMEOUT),
 *    and the mesh says at once that it is unusable. The last test: it breaks the channel of these
 *    processes for good (tests/test_timeout_late.c).
 * tests/script_failures.sh runs it with agreements over MPI (LM_AGREE_BOARD=0) as well.
 */
// lm-test-np: 2 3
#include "lm_late_rank.h"

LM_TEST_ABANDONED_MPI_OK()

#define FIRST 0 /* the rank with the deadline, which comes late in the last test */

static int64_t g_np[1];

static void test_meshes_with_one_deadline(void **state) {
  (void)state;
  g_np[0] = NP;
  char msg[1024] = "";
  lm_mesh_t a = NULL, b = NULL, c = NULL;
  /* The first mesh over these processes: their settings agreed, the node probe, the mesh's own
   * agreement, with rank 0's deadline from LM_TIMEOUT and none elsewhere. */
  LM_ASSERT_OK_ALL(lm_mesh_create(&a, lm_test_comm_f(), 1, g_np, NULL));
  /* A known set, the deadline now in the last rank's config only (0: off on the others, which
   * overrides rank 0's LM_TIMEOUT). */
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = ME == NP - 1 ? TMO : 0;
  LM_ASSERT_OK_ALL(lm_mesh_create(&b, lm_test_comm_f(), 1, g_np, &cfg));
  /* A new set (the even ranks, and the odd ones: at np 3 ranks 0 and 2, rank 0 with a deadline). */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, ME % 2, ME, &half);
  int hn = 0;
  MPI_Comm_size(half, &hn);
  int64_t hs[1] = {hn};
  LM_ASSERT_OK_ALL(lm_mesh_create(&c, (int)MPI_Comm_c2f(half), 1, hs, NULL));
  /* Each is usable on every rank. */
  LM_ASSERT_OK_ALL(call(a, msg, sizeof msg));
  LM_ASSERT_OK_ALL(call(b, msg, sizeof msg));
  LM_ASSERT_OK_ALL(call(c, msg, sizeof msg));
  lm_mesh_destroy(&c);
  lm_mesh_destroy(&b);
  lm_mesh_destroy(&a);
  MPI_Comm_free(&half);
}

static void test_deadline_is_the_highest(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, g_np, NULL));
  char msg[1024] = "";
  lm_status_t st;
  int ok = 1;
  double took = 0;
  if (ME != FIRST) {  /* no deadline of their own: they wait for rank 0's */
    double t0 = MPI_Wtime();
    st = call(m, msg, sizeof msg);
    took = MPI_Wtime() - t0;
    ok = st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT") != NULL && took > 0.9 * TMO &&
         took < TMO + 60;
    MPI_Send(&ok, 1, MPI_INT, FIRST, 77, MPI_COMM_WORLD); /* "we gave up" */
  } else {
    for (int r = 0; r < NP; ++r)
      if (r != FIRST) MPI_Recv(&ok, 1, MPI_INT, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    st = call(m, msg, sizeof msg); /* comes after every other rank gave up */
    ok = st == LM_ERR_TIMEOUT && strstr(msg, "gave up") != NULL;
  }
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, took, msg);
  LM_ASSERT_ALL(ok);
  double t0 = MPI_Wtime();
  st = call(m, msg, sizeof msg);
  took = MPI_Wtime() - t0;
  ok = st == LM_ERR_INVALID_USAGE && took < TMO / 2;
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, took, msg);
  LM_ASSERT_ALL(ok);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_meshes_with_one_deadline),
    cmocka_unit_test(test_deadline_is_the_highest),
};

int main(int argc, char **argv) {
  lm_test_init(&argc, &argv);
  /* Before any localmap call: the settings are read once, at the first. */
  if (lm_test_rank() == FIRST)
    setenv("LM_TIMEOUT", "2", 1); /* TMO */
  else
    unsetenv("LM_TIMEOUT");
  return lm_test_run(tests, sizeof tests / sizeof tests[0], lm_test_basename(argv[0]));
}
