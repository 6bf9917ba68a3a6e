/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_agree_board: where the argument agreement runs. When every rank of a mesh's process set
 * shares one node (as here), agreements go through the shared-memory board (comm/board.hpp)
 * and no MPI allreduce is made for them; with LM_AGREE_BOARD=0 or LM_NODE_LOCAL=0 in the
 * environment (tests/script_node_local.sh), or on one rank, each agreement is one MPI_Allreduce
 * on the agreement communicator. The program counts, through the MPI profiling interface, the
 * allreduces made on communicators other than MPI_COMM_WORLD (the test harness's own) during
 * plan executions and local_map calls, and checks that a mismatch and a failing rank are still
 * agreed on by every rank through the board.
 */
// lm-test-np: 1 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static long g_allreduces; /* on communicators other than MPI_COMM_WORLD */

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  if (c != MPI_COMM_WORLD) ++g_allreduces;
  return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
  if (c != MPI_COMM_WORLD) ++g_allreduces;
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}

static int board_expected(void) {
  const char *b = getenv("LM_AGREE_BOARD"), *n = getenv("LM_NODE_LOCAL");
  return NP > 1 && !(b && b[0] == '0') && !(n && n[0] == '0');
}

static lm_status_t noop_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)in, (void)nout, (void)out;
  return LM_SUCCESS;
}

static void test_agreements_use_the_board(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, g[1] = {4 * NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_reshard_plan_t plan = NULL;
  lm_dist_tensor_t src = NULL, dst = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &s0, m, &rep, 1, g, LM_FLOAT32));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 1, g, LM_FLOAT32, LM_CPU, &s0));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(plan, LM_CPU, &dst));
  const int calls = 20;
  long before = g_allreduces;
  int ok = 1;
  for (int i = 0; i < calls; ++i) ok &= lm_reshard_plan_execute(plan, src, dst) == LM_SUCCESS;
  for (int i = 0; i < calls; ++i) /* no arguments, on the mesh: one agreement each */
    ok &= lm_local_map(noop_fn, NULL, 0, NULL, NULL, 0, NULL, NULL, m, 0, NULL) == LM_SUCCESS;
  long made = g_allreduces - before;
  if (board_expected() ? made != 0 : made < 2 * calls) {
    lm_test__diag("rank %d: %ld agreement allreduces for %d calls (board expected: %d)\n", ME,
            made, 2 * calls, board_expected());
    ok = 0;
  }
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&dst);
  lm_reshard_plan_destroy(&plan);
  lm_mesh_destroy(&m);
}

static lm_status_t fail_on_rank0(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                                 lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)in, (void)nout, (void)out;
  return lm_test_rank() == 0 ? LM_ERR_USER : LM_SUCCESS;
}

/* Ranks asked different things, and a rank that fails before the agreement: every rank returns
 * the same kind of error, whichever way the agreement runs. */
static void test_mismatch_and_failure_agreed(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, g[1] = {4 * NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t src = NULL, out = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 1, g, LM_FLOAT32, LM_CPU, &s0));
  /* The last rank asks for S(0) -> S(0), the others for S(0) -> R. */
  lm_status_t st = lm_dist_tensor_reshard(&out, src, NULL, ME == NP - 1 ? &s0 : &rep);
  int ok = NP == 1 ? st == LM_SUCCESS
                   : st == LM_ERR_MISMATCH && strstr(lm_last_error_message(), "target placements");
  if (!ok) lm_test__diag("rank %d: mismatch: status %d: %s\n", ME, (int)st, lm_last_error_message());
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&out);
  /* fn fails on rank 0 (LM_ERR_USER): the others hear it in the agreement. */
  st = lm_local_map(fail_on_rank0, NULL, 0, NULL, NULL, 0, NULL, NULL, m, 0, NULL);
  ok = ME == 0 ? st == LM_ERR_USER
               : st == LM_ERR_REMOTE && strstr(lm_last_error_message(), "LM_ERR_USER");
  if (!ok) lm_test__diag("rank %d: failure: status %d: %s\n", ME, (int)st, lm_last_error_message());
  LM_ASSERT_ALL(ok);
  /* And the next call on the same mesh agrees again. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, src, NULL, &rep));
  lm_dist_tensor_destroy(&out);
  lm_dist_tensor_destroy(&src);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_agreements_use_the_board),
    cmocka_unit_test(test_mismatch_and_failure_agreed),
};

LM_TEST_MAIN(tests)
