/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_timeout_sleep: LM_TIMEOUT (issue 8 item 2) with a rank that arrives after the deadline:
 * the ranks that waited return LM_ERR_TIMEOUT; the late rank finds nobody to agree or exchange data
 * with and returns LM_ERR_TIMEOUT too (naming the ranks it waited for when it got as far as the
 * transfer). Nobody hangs.
 * No sleep orders the ranks (tests/README.md, "Timing"): the late rank makes its call only after
 * every other rank told it (a message on MPI_COMM_WORLD) that its own call returned. The ranks
 * line up with a barrier before each call under a deadline, which is 2 s: far above the time any
 * call takes that is not meant to time out.
 */
// lm-test-np: 2 3 4
#include "lm_test.h"

/* MPI keeps the late rank's abandoned agreement unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

static void test_rank_sleeps_past_the_deadline(void **state) {
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
  MPI_Barrier(MPI_COMM_WORLD);
  lm_status_t st = LM_SUCCESS;
  char msg[1024];
  int token = 1;
  if (ME != NP - 1) { /* call, then tell the late rank it may come now */
    st = lm_dist_tensor_gather(t, -1, &d);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
    MPI_Send(&token, 1, MPI_INT, NP - 1, 77, MPI_COMM_WORLD);
  } else { /* the late rank: after every other rank's call returned */
    for (int r = 0; r < NP - 1; ++r) MPI_Recv(&token, 1, MPI_INT, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    st = lm_dist_tensor_gather(t, -1, &d);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  }
  int ok = st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT") != NULL;
  if (!ok) fprintf(stderr, "rank %d: status %d: %s\n", ME, (int)st, msg);
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_rank_sleeps_past_the_deadline),
};

LM_TEST_MAIN(tests)
