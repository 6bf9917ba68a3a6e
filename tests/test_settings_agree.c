/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_settings_agree: settings that change which collectives run or how bytes travel must have
 * the same value on every rank (src/common/settings.hpp, "must agree"). The first lm_mesh_create
 * over a process set compares them, and when one rank differs every rank gets LM_ERR_MISMATCH
 * naming the variable, instead of a hang in the node probe or wrong data later.
 *
 * LM_TEST_SETTING="VAR=VALUE@RANK:EXPECT" (set by tests/script_settings.sh) makes launcher rank
 * RANK set VAR=VALUE in its own environment before the library reads it; EXPECT is "mismatch"
 * (every rank: LM_ERR_MISMATCH naming VAR) or "ok" (the values parse to the same setting: the
 * mesh works, and a reshard through it moves the right data). Without it, the plain case: all
 * ranks alike, the mesh works.
 */
// lm-test-np: 2 3
#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static char g_var[64] = "", g_expect[16] = "ok";

/* The launcher's rank of this process, before MPI_Init (Open MPI, MPICH/Hydra, PMIx). */
static int launcher_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char *v = getenv(names[i]);
    if (v && *v) return atoi(v);
  }
  return -1;
}

__attribute__((constructor)) static void set_case(void) {
  const char *c = getenv("LM_TEST_SETTING");
  if (!c || !*c) return;
  char var[64] = "", value[64] = "", expect[16] = "";
  int rank = -1;
  if (sscanf(c, "%63[^=]=%63[^@]@%d:%15s", var, value, &rank, expect) != 4) {
    fprintf(stderr, "test_settings_agree: bad LM_TEST_SETTING \"%s\"\n", c);
    exit(2);
  }
  snprintf(g_var, sizeof g_var, "%s", var);
  snprintf(g_expect, sizeof g_expect, "%s", expect);
  if (launcher_rank() == rank) setenv(var, value, 1);
}

static void test_mesh_create(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t shape[1] = {NP};
  double t0 = MPI_Wtime();
  lm_status_t st = lm_mesh_create(&m, lm_test_comm_f(), 1, shape, NULL);
  double took = MPI_Wtime() - t0;
  if (strcmp(g_expect, "mismatch") == 0) {
    const char *msg = lm_last_error_message();
    int ok = st == LM_ERR_MISMATCH && m == NULL && strstr(msg, g_var) && strstr(msg, "world rank");
    if (!ok) fprintf(stderr, "rank %d: status %d: %s\n", ME, (int)st, msg);
    LM_ASSERT_ALL(ok);
    print_message("rank %d after %.2f s: %s\n", ME, took, msg);
    return;
  }
  LM_ASSERT_OK_ALL(st);
  /* The mesh works: S(0) -> R of 64 KiB moves every element (large enough for the node-local
   * path and datatypes, small enough for the board exchange at its default). */
  enum { N = 8192 };
  int64_t n = N;
  double *full = malloc(sizeof(double) * N), *got = malloc(sizeof(double) * N);
  for (int i = 0; i < N; ++i) full[i] = i * 0.5 + 1;
  DLTensor g = {full, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0};
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &g, &s0, -1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &rep));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(r, &v));
  memcpy(got, v.data, sizeof(double) * N);
  LM_ASSERT_ALL(memcmp(got, full, sizeof(double) * N) == 0);
  lm_dist_tensor_destroy(&r);
  lm_dist_tensor_destroy(&t);
  lm_mesh_destroy(&m);
  free(full);
  free(got);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mesh_create),
};

LM_TEST_MAIN(tests)
