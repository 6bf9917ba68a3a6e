/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_plan_info_alone: LM_PLAN_INFO_ALL_RANKS is a collective like any other: agreed first, its
 * sums under the deadline. A caller's mistake, asking on one rank only, is diagnosed:
 *  - rank 0 asks for all ranks' counts (lm_reshard_plan_info, then lm_reshard_estimate) while the
 *    others execute the plan: every rank gets LM_ERR_MISMATCH naming the operations (it used to
 *    be a bare allreduce: MPI_ERR_TRUNCATE on the others, or a hang), and the mesh still works;
 *  - rank 0 asks alone while the others make no call, under a deadline: it gets LM_ERR_TIMEOUT
 *    within the deadline (it used to wait for ever), and the others' next call fails too. The
 *    last test (it breaks the channel of these processes for good).
 * tests/script_failures.sh runs it with agreements over MPI (LM_AGREE_BOARD=0) as well.
 */
// lm-test-np: 2 3
#include "lm_test.h"

LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()
#define TMO 2.0

typedef struct {
  lm_mesh_t m;
  lm_reshard_plan_t plan;
  lm_dist_tensor_t src, dst;
  lm_placement_t s0, r;
  int64_t g[1];
} Fixture;

static void setup(Fixture *f) {
  int64_t ms[1] = {NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.timeout = TMO;
  LM_ASSERT_OK_ALL(lm_mesh_create(&f->m, lm_test_comm_f(), 1, ms, &cfg));
  f->s0 = LM_PLACEMENT_SHARD(0);
  f->r = LM_PLACEMENT_REPLICATE;
  f->g[0] = 7 * NP + 1;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&f->plan, f->m, &f->s0, NULL, &f->r, 1, f->g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&f->src, f->m, 1, f->g, LM_FLOAT64, LM_CPU, &f->s0));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&f->dst, f->plan, LM_CPU));
}

static void teardown(Fixture *f) {
  lm_dist_tensor_destroy(&f->dst);
  lm_dist_tensor_destroy(&f->src);
  lm_reshard_plan_destroy(&f->plan);
  lm_mesh_destroy(&f->m);
}

static void test_alone_against_execute(void **state) {
  (void)state;
  Fixture f;
  setup(&f);
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  lm_status_t st;
  if (ME == 0)
    st = lm_reshard_plan_info(f.plan, LM_PLAN_INFO_ALL_RANKS, &info);
  else
    st = lm_reshard_plan_execute(f.plan, f.src, f.dst);
  LM_EXPECT_ALL(st, LM_ERR_MISMATCH, "lm_reshard_plan_info");
  if (ME == 0)
    st = lm_reshard_estimate(f.m, &f.s0, NULL, &f.r, 1, f.g, LM_FLOAT64, LM_PLAN_INFO_ALL_RANKS,
                             &info);
  else
    st = lm_reshard_plan_execute(f.plan, f.src, f.dst);
  LM_EXPECT_ALL(st, LM_ERR_MISMATCH, "lm_reshard_estimate");
  /* Nothing broke: the same calls on every rank work. */
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(f.plan, f.src, f.dst));
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(f.plan, LM_PLAN_INFO_ALL_RANKS, &info));
  lm_reshard_plan_info_t mine = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(f.plan, 0, &mine));
  int64_t sum = 0;
  MPI_Allreduce(&mine.bytes_sent, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  LM_ASSERT_ALL(info.bytes_sent == sum);
  /* Bad arguments on one rank: that rank's error, LM_ERR_REMOTE on the others (none waits). */
  lm_placement_t bad = LM_PLACEMENT_SHARD(5);
  st = lm_reshard_estimate(f.m, ME == NP - 1 ? &bad : &f.s0, NULL, &f.r, 1, f.g, LM_FLOAT64,
                           LM_PLAN_INFO_ALL_RANKS, &info);
  if (NP == 1)
    LM_EXPECT_ALL(st, LM_ERR_INVALID_ARGUMENT, "src_placements");
  else
    LM_ASSERT_STATUS_ALL(st, ME == NP - 1 ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE);
  teardown(&f);
}

static void test_alone_under_deadline(void **state) {
  (void)state;
  Fixture f;
  setup(&f);
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  char msg[1024] = "";
  lm_status_t st = LM_SUCCESS;
  int ok = 1;
  double took = 0;
  if (ME == 0) {
    double t0 = MPI_Wtime();
    st = lm_reshard_plan_info(f.plan, LM_PLAN_INFO_ALL_RANKS, &info);
    took = MPI_Wtime() - t0;
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
    ok = st == LM_ERR_TIMEOUT && took > 0.9 * TMO && took < TMO + 60;
    for (int r = 1; r < NP; ++r) MPI_Send(&ok, 1, MPI_INT, r, 78, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&ok, 1, MPI_INT, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    /* Then the others' next call meets the round rank 0 gave up: it fails too, saying so. */
    st = lm_reshard_plan_execute(f.plan, f.src, f.dst);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
    ok = st == LM_ERR_TIMEOUT && strstr(msg, "gave up") != NULL;
  }
  if (!ok) fprintf(stderr, "rank %d: status %d after %.2f s: %s\n", ME, (int)st, took, msg);
  LM_ASSERT_ALL(ok);
  teardown(&f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_alone_against_execute),
    cmocka_unit_test(test_alone_under_deadline),
};

LM_TEST_MAIN(tests)
