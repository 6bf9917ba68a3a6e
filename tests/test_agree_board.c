/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_agree_board: where the argument agreement runs. When every rank of a mesh's process set
 * shares one node (as here), agreements go through the shared-memory board (comm/board.hpp)
 * and no MPI allreduce or message is made for them; with LM_AGREE_BOARD=0 or LM_NODE_LOCAL=0 in
 * the environment (tests/script_node_local.sh), each agreement is one MPI_Allreduce on the
 * agreement communicator, or, for sets of up to LM_AGREE_MESSAGES ranks, one round of agreement
 * messages (one from each rank to every other; LM_TEST_AGREE_MSG_TAG). The program counts,
 * through the MPI profiling interface, the allreduces and agreement messages made on
 * communicators other than MPI_COMM_WORLD (the test harness's own) during plan executions and
 * local_map calls, and checks that a mismatch and a failing rank are still
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

static long g_agree_msgs; /* agreement messages sent */
int MPI_Isend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request *q) {
  if (c != MPI_COMM_WORLD && tag == LM_TEST_AGREE_MSG_TAG) ++g_agree_msgs;
  return PMPI_Isend(b, n, t, d, tag, c, q);
}

/* MPI rounds of agreement since (a, m) = (g_allreduces, g_agree_msgs) over a set of n ranks: an
 * allreduce each, or n - 1 messages from this rank each. */
static long mpi_rounds(long a, long m, int n) {
  return (g_allreduces - a) + (n > 1 ? (g_agree_msgs - m) / (n - 1) : 0);
}

/* Whether agreements over the world ranks ranks[0..n) (NULL: all) go through the board: more than
 * one rank, all on one node (simulated nodes: LM_TEST_NODES, tests/README.md), board and
 * node-local path on. */
static int board_expected_for(const int *ranks, int n) {
  const char *b = getenv("LM_AGREE_BOARD"), *l = getenv("LM_NODE_LOCAL");
  return (ranks ? n : NP) > 1 && lm_test_one_node(ranks, n) && !(b && b[0] == '0') &&
         !(l && l[0] == '0');
}
static int board_expected(void) { return board_expected_for(NULL, 0); }

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
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
  const int calls = 20;
  long before = g_allreduces, before_msgs = g_agree_msgs;
  int ok = 1;
  for (int i = 0; i < calls; ++i) ok &= lm_reshard_plan_execute(plan, src, dst) == LM_SUCCESS;
  for (int i = 0; i < calls; ++i) /* no arguments, on the mesh: one agreement each */
    ok &= lm_local_map(noop_fn, NULL, 0, NULL, NULL, 0, NULL, NULL, m, 0, NULL) == LM_SUCCESS;
  long made = mpi_rounds(before, before_msgs, NP);
  if (board_expected() ? made != 0 : made < 2 * calls) {
    lm_test__diag("rank %d: %ld agreement rounds over MPI for %d calls (board expected: %d)\n", ME,
            made, 2 * calls, board_expected());
    ok = 0;
  }
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&dst);
  lm_reshard_plan_destroy(&plan);
  lm_mesh_destroy(&m);
}

/* A mesh over the ranks of one node (with simulated nodes, LM_TEST_NODES=k: the world ranks
 * r % k == 0; on one real node: all but the last rank) agrees through that node's board, while
 * agreements over the whole world do so only when the world is on one node (checked above). */
static void test_board_of_one_node(void **state) {
  (void)state;
  int ranks[64], n = 0, member = 0;
  for (int r = 0; r < NP; ++r)
    if (lm_test_node_of(r) == lm_test_node_of(0) && (lm_test_nodes() > 1 || r < NP - 1)) ranks[n++] = r;
  if (n < 2) lm_test_skip("the ranks of node 0 (%d of np %d) are fewer than 2", n, NP);
  for (int i = 0; i < n; ++i) member |= ranks[i] == ME;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {n};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = n;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, &cfg));
  const int calls = 10;
  long before = g_allreduces, before_msgs = g_agree_msgs;
  int ok = 1;
  if (member)
    for (int i = 0; i < calls; ++i)
      ok &= lm_local_map(noop_fn, NULL, 0, NULL, NULL, 0, NULL, NULL, m, 0, NULL) == LM_SUCCESS;
  long made = mpi_rounds(before, before_msgs, n);
  int expect = board_expected_for(ranks, n);
  if (member && (expect ? made != 0 : made < calls)) {
    lm_test__diag("rank %d: %ld agreement rounds over MPI for %d calls on node %d's mesh (board expected: %d)\n",
                  ME, made, calls, lm_test_node_of(ME), expect);
    ok = 0;
  }
  LM_ASSERT_ALL(ok);
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
    cmocka_unit_test(test_board_of_one_node),
    cmocka_unit_test(test_mismatch_and_failure_agreed),
};

LM_TEST_MAIN(tests)
