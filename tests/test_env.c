/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_env: the environment settings themselves, read once per process (the other suites set the
 * same knobs through lm_mesh_config_t): this program starts with LM_CHECK=2 and LM_TIMEOUT=1 in
 * its environment, set before main. A mesh with the default config then checks the data of
 * Replicate tensors (level 2 from the environment), a mesh whose config says 1 does not (the
 * config overrides the environment), and a rank that skips a call makes the others return
 * LM_ERR_TIMEOUT after the deadline from the environment (2 s), not before. The meshes of the
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

/* The last rank never calls gather: the others return LM_ERR_TIMEOUT after LM_TIMEOUT = 2 s. */
static void test_timeout_from_environment(void **state) {
  (void)state;
  lm_mesh_t m = mesh_with(-1, -1);
  int64_t n = 8;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_FLOAT32, LM_CPU, &s0));
  float buf[8];
  DLTensor d = {buf, LM_CPU, 1, LM_FLOAT32, &n, NULL, 0};
  lm_status_t st = LM_SUCCESS;
  char msg[1024] = "";
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (ME != NP - 1) {
    st = lm_dist_tensor_gather(t, -1, &d);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  }
  double waited = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  int ok = ME == NP - 1 ||
           (st == LM_ERR_TIMEOUT && strstr(msg, "LM_TIMEOUT") && waited >= 1.9);
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, waited, msg);
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_check_level_from_environment),
    cmocka_unit_test(test_timeout_from_environment),
};

LM_TEST_MAIN(tests)
