/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_env: the environment settings themselves, read once per process (the other suites set the
 * same knobs through lm_mesh_config_t): this program starts with LM_CHECK=2 and LM_TIMEOUT=2 in
 * its environment, set before main. A mesh with the default config then checks the data of
 * Replicate tensors (level 2 from the environment), a mesh whose config says 1 does not (the
 * config overrides the environment), and a rank that skips a call makes the others return
 * LM_ERR_TIMEOUT after the deadline from the environment (2 s), not before and not much later
 * (a deadline that never comes fails the test instead of hanging it). The meshes of the
 * first test say timeout = 0 in their config (wait for ever: the config overrides the
 * environment there too), so none of its collectives runs under a deadline (tests/README.md,
 * "Timing"). The timeout case runs last: a timed-out agreement leaves its communicator unusable
 * on the ranks that waited.
 */
// lm-test-np: 2 3
#include <stdlib.h>

#include "lm_test.h"

/* MPI keeps the skipped gather's messages unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

__attribute__((constructor)) static void set_environment(void) {
  setenv("LM_CHECK", "2", 1);
  setenv("LM_TIMEOUT", "2", 1);
}

/* level, timeout: -1 takes the environment's. */
static lm_mesh_t mesh_with(int level, double timeout) {
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.check_level = level;
  cfg.timeout = timeout;
  MPI_Barrier(MPI_COMM_WORLD);
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  return m;
}

/* Unequal replicas: refused at level 2 (environment), accepted at level 1 (config). */
static void test_check_level_from_environment(void **state) {
  (void)state;
  int64_t n = 4;
  float buf[4] = {1, 2, 3, 4};
  if (ME == NP - 1) buf[2] = 99;
  DLTensor l = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_placement_t rep = LM_PLACEMENT_REPLICATE, s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL, out = NULL;
  lm_mesh_t m = mesh_with(-1, 0); /* the environment's level, no deadline */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_COPY));
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&out, t, NULL, &s0), LM_ERR_MISMATCH,
                "data of a Replicate tensor");
  LM_ASSERT_ALL(out == NULL);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
  m = mesh_with(1, 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &l, &rep, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, t, NULL, &s0));
  lm_dist_tensor_destroy(&out);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

/* The last rank skips a gather: the others return LM_ERR_TIMEOUT after LM_TIMEOUT = 2 s, not
 * before and not much later. Were the setting ignored (no deadline: the default), the others would
 * wait for ever; so the skipping rank hears from each of them when it returns, and if they have
 * not all returned by a backstop far past the deadline it makes the call after all, letting them
 * finish (with success, after the backstop): the test then fails on their status and elapsed time
 * instead of hanging. */
#define ENV_TMO 2.0      /* the LM_TIMEOUT of set_environment */
#define SLACK 8.0        /* a loaded machine may return this late past the deadline */
#define BACKSTOP 20.0    /* past ENV_TMO + SLACK: only a deadline that never came waits this long */
#define TAG_RETURNED 4242

static void test_timeout_from_environment(void **state) {
  (void)state;
  lm_mesh_t m = mesh_with(-1, -1);
  const int late = NP - 1;
  int64_t n = 8;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  float buf[8];
  DLTensor d = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_status_t st = LM_SUCCESS;
  char msg[1024] = "";
  int joined = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (ME != late) {
    st = lm_dist_tensor_gather(t, -1, &d);
    snprintf(msg, sizeof msg, "%s", st != LM_SUCCESS ? lm_last_error_message() : "");
    int one = 1;
    MPI_Send(&one, 1, MPI_INT, late, TAG_RETURNED, MPI_COMM_WORLD);
  } else {
    MPI_Request *rq = malloc(sizeof(MPI_Request) * (size_t)late);
    /* Real statuses, not MPI_STATUSES_IGNORE: MPICH's header annotates the array's size, which
     * GCC then checks against the ignore constant (-Werror=stringop-overflow). */
    MPI_Status *sts = malloc(sizeof(MPI_Status) * (size_t)late);
    int *got = malloc(sizeof(int) * (size_t)late), all = 0;
    for (int r = 0; r < late; ++r) MPI_Irecv(&got[r], 1, MPI_INT, r, TAG_RETURNED, MPI_COMM_WORLD, &rq[r]);
    while (!all && MPI_Wtime() - t0 < BACKSTOP) MPI_Testall(late, rq, &all, sts);
    if (!all) { /* the others still wait: no deadline came; let them finish */
      joined = 1;
      st = lm_dist_tensor_gather(t, -1, &d);
      MPI_Waitall(late, rq, sts);
    }
    free(sts);
    free(rq);
    free(got);
  }
  double waited = MPI_Wtime() - t0;
  MPI_Bcast(&joined, 1, MPI_INT, late, MPI_COMM_WORLD);
  int ok = ME == late ||
           (st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT = 2 s") && waited >= ENV_TMO - 0.1 &&
            waited < ENV_TMO + SLACK);
  if (!ok)
    fprintf(stderr, "rank %d: status %s after %.2f s (LM_TIMEOUT = %g s: LM_ERR_TIMEOUT expected "
            "in [%.1f, %.1f) s)%s: %s\n", ME, lm_status_string(st), waited, ENV_TMO,
            ENV_TMO - 0.1, ENV_TMO + SLACK,
            joined ? "; no deadline came, the skipping rank joined the call after the backstop" : "",
            msg);
  LM_ASSERT_ALL(ok && !joined);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_check_level_from_environment),
    cmocka_unit_test(test_timeout_from_environment),
};

LM_TEST_MAIN(tests)
