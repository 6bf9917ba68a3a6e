/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_agree_messages: agreements by messages (src/comm/agree_msg.cpp). A set of up to
 * LM_AGREE_MESSAGES ranks without an agreement board agrees by one message from each rank to
 * every other (tag LM_TEST_AGREE_MSG_TAG on the set's agreement communicator), and a small plan's
 * blocks ride those messages (transport/mpi/message_exchange.cpp). Here the ranks are split into
 * two simulated nodes (LM_TEST_NODES=2) with the node-local path off, so the set spans nodes and
 * has no board; test_agree_messages_one_node builds this file with LM_TEST_ONE_NODE: one node,
 * the node-local path off (no board either). Checked:
 *   - S0->S1, S1->S0, S0->R at 2-D [12, 10] (uneven shards) by lm_dist_tensor_reshard and by a
 *     plan's execution, against the global index of every element; each execution posts exactly
 *     one message to every other rank, all agreement messages, and those to the ranks it has data
 *     for carry the block (counted through PMPI); no other point-to-point message;
 *   - P->S0 (one reduce-scatter step) and P->R (a reduce-scatter and its gather: one round, each
 *     rank's whole partial to every other) at [13, 10] (np 4: a short last chunk) for sum and max
 *     of float64 and avg of float64 and int64 (128-bit accumulation): each rank's partial is
 *     (rank + 1) x the global index, so every reduced value is exact; the execution rides as
 *     above (P->S0: a block to every member whose chunk is not empty; P->R: to every other rank;
 *     no other message);
 *   - across meshes (the world to the world reversed, S0 -> S0 and S0 -> S1): the same, by
 *     lm_dist_tensor_reshard and by a plan;
 *   - blocks of 4 KiB or more that are one run of the input ([64, 64] float64: S0->R, P(sum)->S0,
 *     P(sum)->R, across meshes S0->S0) go as messages of their own after the words on one node,
 *     and after the words in one message across nodes; strided ones (S0->S1) after the words on
 *     both; values checked, by lm_dist_tensor_reshard and by a plan;
 *   - a tensor above LM_MESSAGE_EXCHANGE_BYTES per rank takes the transport (data messages of
 *     their own) after a words-only agreement round;
 *   - ranks that run different reshards with no deadline: of the same byte counts (S0->S1 against
 *     S1->S0 on a square tensor) and of different ones (S0->R against S0->S1): LM_ERR_MISMATCH on
 *     every rank naming the target placements, nothing left behind: the mesh works afterwards;
 *   - ranks that run different reshards whose blocks go apart: the same byte counts (float64
 *     against int64) and different ones (S0->R against S0->S1): LM_ERR_MISMATCH, the mesh works;
 *   - one rank's failure before the round (a wrong target tensor): its own error there,
 *     LM_ERR_REMOTE elsewhere.
 */
// lm-test-np: 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

/* Across two simulated nodes, blocks go after the words in one message; on one node, blocks
 * that are one run of the input and of 4 KiB or more go as messages of their own. */
#ifdef LM_TEST_ONE_NODE
#define APART 1
#else
#define APART 0
#endif

__attribute__((constructor)) static void set_environment(void) {
  if (APART) unsetenv("LM_TEST_NODES"); /* one node even under make check-multinode */
  else setenv("LM_TEST_NODES", "2", 1);
  setenv("LM_NODE_LOCAL", "0", 1);
  setenv("LM_MPI_COLLECTIVES", "0", 1);
}

static int g_counting = 0;
static long g_agree_words, g_agree_blocks, g_other; /* sends while counting */
int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  if (g_counting && c != MPI_COMM_WORLD) {
    if (tag != LM_TEST_AGREE_MSG_TAG) ++g_other;
    else if (lm_test_agree_words(tag, n, t)) ++g_agree_words;
    else ++g_agree_blocks;
  }
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}

static lm_mesh_t mesh1(void) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  return m;
}

/* The world's ranks in reverse order, as a 1-D mesh. */
static lm_mesh_t mesh_reversed(void) {
  lm_mesh_t rev = NULL;
  int *ranks = malloc(sizeof(int) * (size_t)NP);
  for (int i = 0; i < NP; ++i) ranks[i] = NP - 1 - i;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = NP;
  int64_t ms[1] = {NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&rev, lm_test_comm_f(), 1, ms, &cfg));
  free(ranks);
  return rev;
}

/* A float64 [rows, cols] tensor with value i * cols + j, placed as pl. */
static lm_dist_tensor_t iota(lm_mesh_t m, int64_t rows, int64_t cols, lm_placement_t pl) {
  double *buf = malloc(sizeof(double) * (size_t)(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) buf[i] = (double)i;
  int64_t g[2] = {rows, cols};
  DLTensor gt = {buf, LM_CPU, 2, LM_FLOAT64, g, NULL, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &gt, &pl, -1));
  free(buf);
  return t;
}

/* Every element of t's shard holds its global index. */
static int64_t wrong_values(lm_dist_tensor_t t, int64_t cols) {
  DLTensor v;
  int64_t shape[2], off[2], wrong = 0;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, shape, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      wrong += ((double *)v.data)[i * shape[1] + j] != (double)((off[0] + i) * cols + off[1] + j);
  return wrong;
}

static void start_counting(void) {
  MPI_Barrier(MPI_COMM_WORLD);
  g_agree_words = g_agree_blocks = g_other = 0;
  g_counting = 1;
}

/* A plan (sm, sp) -> (dm, dp) of a [g0, g1] tensor of dtype dt: created, run once, then run again
 * on x while counting. Returns its target; *info: the plan's own numbers. */
static lm_dist_tensor_t counted_run(lm_mesh_t sm, const lm_placement_t *sp, lm_mesh_t dm,
                                    const lm_placement_t *dp, const int64_t *g, DLDataType dt,
                                    lm_dist_tensor_t x, lm_reshard_plan_info_t *info) {
  lm_reshard_plan_t p = NULL;
  lm_dist_tensor_t z = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, sm, sp, dm, dp, 2, g, dt));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&z, p, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, z)); /* warm */
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(p, 0, info));
  start_counting();
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, z));
  g_counting = 0;
  lm_reshard_plan_destroy(&p);
  return z;
}

/* Whether the last counted run (case c) sent what a plan of `flows` blocks sends: one message of
 * words to every other rank, each block apart after them (apart) or in the same message, and no
 * other point-to-point message; says what it saw where not. */
static int sent_as(int apart, long long flows, int c) {
  const long words = apart ? g_agree_words : g_agree_words + g_agree_blocks;
  const int ok = g_other == 0 && words == NP - 1 && g_agree_blocks == flows;
  if (!ok)
    lm_test__diag("rank %d case %d: words-only %ld, with a block %ld, other %ld, flows %lld\n",
                  ME, c, g_agree_words, g_agree_blocks, g_other, flows);
  return ok;
}

static void test_small_plans_ride_the_agreement(void **state) {
  (void)state;
  lm_mesh_t m = mesh1();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1),
                       r = LM_PLACEMENT_REPLICATE;
  const lm_placement_t from[3] = {s0, s1, s0}, to[3] = {s1, s0, r};
  const int64_t rows = 12, cols = 10, g[2] = {12, 10};
  for (int c = 0; c < 3; ++c) {
    lm_dist_tensor_t x = iota(m, rows, cols, from[c]), y = NULL, z = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, &to[c]));
    LM_ASSERT_ALL(wrong_values(y, cols) == 0);
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    z = counted_run(m, &from[c], m, &to[c], g, LM_FLOAT64, x, &info);
    LM_ASSERT_ALL(wrong_values(z, cols) == 0);
    /* one message to every other rank; those with a block for the peer carry it */
    LM_ASSERT_ALL(sent_as(0, info.flows_sent, c));
    lm_dist_tensor_destroy(&x);
    lm_dist_tensor_destroy(&y);
    lm_dist_tensor_destroy(&z);
  }
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Expected value of element idx of a P(op) -> S0 reshard of partials (rank + 1) * idx (an
 * integer avg truncates). */
static double reduced(int op, int is_int, int64_t idx) {
  const int64_t sum = idx * NP * (NP + 1) / 2;
  if (op == LM_REDUCE_MAX) return (double)(idx * NP);
  if (op == LM_REDUCE_AVG) return is_int ? (double)(sum / NP) : (double)sum / NP;
  return (double)sum;
}

static void test_partial_plans_ride_the_agreement(void **state) {
  (void)state;
  lm_mesh_t m = mesh1();
  const lm_placement_t targets[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_REPLICATE};
  const int64_t rows = 13, cols = 10, g[2] = {13, 10};
  const int ops[4] = {LM_REDUCE_SUM, LM_REDUCE_MAX, LM_REDUCE_AVG, LM_REDUCE_AVG};
  for (int c = 0; c < 8; ++c) {
    const int is_int = c % 4 == 3, to_r = c >= 4;
    const lm_placement_t s0 = targets[to_r];
    const DLDataType dt = is_int ? LM_INT64 : LM_FLOAT64;
    const lm_placement_t p_op = LM_PLACEMENT_PARTIAL(ops[c % 4]);
    lm_dist_tensor_t x = NULL, z = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, g, dt, LM_CPU, &p_op));
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(x, &v));
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (is_int) ((int64_t *)v.data)[i] = (ME + 1) * i;
      else ((double *)v.data)[i] = (double)((ME + 1) * i);
    }
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    z = counted_run(m, &p_op, m, &s0, g, dt, x, &info);
    int64_t shape[2], off[2], wrong = 0;
    LM_ASSERT_OK(lm_dist_tensor_local(z, &v));
    LM_ASSERT_OK(lm_dist_tensor_local_shape(z, shape, 2));
    LM_ASSERT_OK(lm_dist_tensor_local_offset(z, off, 2));
    for (int64_t i = 0; i < shape[0] * shape[1]; ++i) {
      const double want = reduced(ops[c % 4], is_int, off[0] * cols + i);
      wrong += (is_int ? (double)((int64_t *)v.data)[i] : ((double *)v.data)[i]) != want;
    }
    const int ok = wrong == 0 && g_other == 0 && g_agree_words + g_agree_blocks == NP - 1 &&
                   g_agree_blocks == (to_r ? NP - 1 : info.flows_sent);
    if (!ok)
      lm_test__diag("rank %d case %d: wrong %lld, words-only %ld, with a block %ld, other %ld, "
                    "flows %lld\n", ME, c, (long long)wrong, g_agree_words, g_agree_blocks,
                    g_other, (long long)info.flows_sent);
    LM_ASSERT_ALL(ok);
    lm_dist_tensor_destroy(&x);
    lm_dist_tensor_destroy(&z);
  }
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_cross_mesh_plans_ride_the_agreement(void **state) {
  (void)state;
  lm_mesh_t m = mesh1(), rev = mesh_reversed();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  const lm_placement_t to[2] = {s0, s1};
  const int64_t rows = 12, cols = 10, g[2] = {12, 10};
  for (int c = 0; c < 2; ++c) {
    lm_dist_tensor_t x = iota(m, rows, cols, s0), y = NULL, z = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, rev, &to[c]));
    LM_ASSERT_ALL(wrong_values(y, cols) == 0);
    lm_dist_tensor_destroy(&y);
    start_counting();
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, rev, &to[c])); /* the cached plan */
    g_counting = 0;
    const long by_reshard = g_agree_blocks, other_reshard = g_other;
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    z = counted_run(m, &s0, rev, &to[c], g, LM_FLOAT64, x, &info);
    LM_ASSERT_ALL(wrong_values(z, cols) == 0);
    const int ok = g_other == 0 && other_reshard == 0 && g_agree_words + g_agree_blocks == NP - 1 &&
                   g_agree_blocks == info.flows_sent && by_reshard == info.flows_sent;
    if (!ok)
      lm_test__diag("rank %d case %d: words-only %ld, with a block %ld (reshard %ld), other %ld "
                    "(reshard %ld), flows %lld\n", ME, c, g_agree_words, g_agree_blocks,
                    by_reshard, g_other, other_reshard, (long long)info.flows_sent);
    LM_ASSERT_ALL(ok);
    lm_dist_tensor_destroy(&x);
    lm_dist_tensor_destroy(&y);
    lm_dist_tensor_destroy(&z);
  }
  LM_ASSERT_OK(lm_mesh_destroy(&rev));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_large_plans_take_the_transport(void **state) {
  (void)state;
  lm_mesh_t m = mesh1();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  const int64_t n = 256, g[2] = {256, 256}; /* 512 KiB: above 32 KiB per rank up to 16 ranks */
  lm_dist_tensor_t x = iota(m, n, n, s0), z = NULL;
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, m, &s1, 2, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&z, p, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, z));
  start_counting();
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, x, z));
  g_counting = 0;
  LM_ASSERT_ALL(wrong_values(z, n) == 0);
  LM_ASSERT_ALL(g_agree_words == NP - 1 && g_agree_blocks == 0 && g_other >= NP - 1);
  lm_reshard_plan_destroy(&p);
  lm_dist_tensor_destroy(&x);
  lm_dist_tensor_destroy(&z);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_large_blocks_go_apart_on_one_node(void **state) {
  (void)state;
  lm_mesh_t m = mesh1(), rev = mesh_reversed();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1),
                       r = LM_PLACEMENT_REPLICATE, sum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  /* 32 KiB: 8 KiB rows of blocks or more at np <= 4 */
  const int64_t n = 64, g[2] = {64, 64};
  const lm_placement_t from[5] = {s0, sum, sum, s0, s0}, to[5] = {r, s0, r, s0, s1};
  const int on_rev[5] = {0, 0, 0, 1, 0}, whole[5] = {1, 1, 1, 1, 0};
  for (int c = 0; c < 5; ++c) {
    lm_dist_tensor_t x = NULL, y = NULL, z = NULL;
    if (from[c].kind == LM_PARTIAL) {
      /* rank 0 holds the values, the others zeros: the sum is the global index */
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, g, LM_FLOAT64, LM_CPU, &from[c]));
      DLTensor v;
      LM_ASSERT_OK(lm_dist_tensor_local(x, &v));
      for (int64_t i = 0; ME == 0 && i < n * n; ++i) ((double *)v.data)[i] = (double)i;
    } else {
      x = iota(m, n, n, from[c]);
    }
    lm_mesh_t dm = on_rev[c] ? rev : m;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, dm, &to[c]));
    LM_ASSERT_ALL(wrong_values(y, n) == 0);
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    z = counted_run(m, &from[c], dm, &to[c], g, LM_FLOAT64, x, &info);
    LM_ASSERT_ALL(wrong_values(z, n) == 0);
    LM_ASSERT_ALL(sent_as(APART && whole[c], info.flows_sent, c));
    lm_dist_tensor_destroy(&x);
    lm_dist_tensor_destroy(&y);
    lm_dist_tensor_destroy(&z);
  }
  LM_ASSERT_OK(lm_mesh_destroy(&rev));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* After a mismatch the mesh still works: a reshard and its values. */
static void mesh_works(lm_mesh_t m) {
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t x = iota(m, 12, 10, s0), y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, &r));
  LM_ASSERT_ALL(wrong_values(y, 10) == 0);
  lm_dist_tensor_destroy(&x);
  lm_dist_tensor_destroy(&y);
}

static void test_mismatch_without_deadline(void **state) {
  (void)state;
  lm_mesh_t m = mesh1();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1),
                       r = LM_PLACEMENT_REPLICATE;
  const int odd = ME == NP - 1;
  /* the same byte counts: S0->S1 on a square tensor, the last rank S1->S0's target */
  lm_dist_tensor_t x = iota(m, 8, 8, s0), y = NULL;
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&y, x, NULL, odd ? &s0 : &s1), LM_ERR_MISMATCH,
                "disagree on target placements");
  LM_ASSERT_ALL(y == NULL);
  mesh_works(m);
  /* different byte counts: S0->R on the last rank, S0->S1 on the others */
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&y, x, NULL, odd ? &r : &s1), LM_ERR_MISMATCH,
                "disagree on target placements");
  mesh_works(m);
  /* plans: created apart (local), the execution agrees */
  int64_t g[2] = {8, 8};
  lm_reshard_plan_t p = NULL;
  lm_dist_tensor_t z = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, m, odd ? &r : &s1, 2, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&z, p, LM_CPU));
  LM_EXPECT_ALL(lm_reshard_plan_execute(p, x, z), LM_ERR_MISMATCH, "disagree on target placements");
  mesh_works(m);
  /* one rank fails before the round: a target of the wrong plan */
  lm_dist_tensor_t w = NULL;
  if (odd) LM_ASSERT_OK(lm_dist_tensor_zeros(&w, m, 2, g, LM_FLOAT64, LM_CPU, &s0));
  lm_status_t st = lm_reshard_plan_execute(p, x, odd ? w : z);
  int ok = odd ? st != LM_SUCCESS && st != LM_ERR_REMOTE : st == LM_ERR_REMOTE;
  if (!ok) lm_test__diag("rank %d: %s\n", ME, lm_last_error_message());
  LM_ASSERT_ALL(ok);
  mesh_works(m);
  lm_dist_tensor_destroy(&w);
  lm_reshard_plan_destroy(&p);
  lm_dist_tensor_destroy(&z);
  lm_dist_tensor_destroy(&x);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Blocks that go apart on one node (8 KiB or more at np <= 4), in calls that differ. */
static void test_mismatch_of_large_blocks(void **state) {
  (void)state;
  lm_mesh_t m = mesh1();
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1),
                       r = LM_PLACEMENT_REPLICATE;
  const int odd = ME == NP - 1;
  int64_t g[2] = {64, 64};
  lm_dist_tensor_t x = iota(m, 64, 64, s0), xi = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&xi, m, 2, g, LM_INT64, LM_CPU, &s0));
  /* the same byte counts: the last rank's tensor is int64 */
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&y, odd ? xi : x, NULL, &r), LM_ERR_MISMATCH,
                "disagree on dtype");
  LM_ASSERT_ALL(y == NULL);
  mesh_works(m);
  /* different byte counts: S0->S1 on the last rank, S0->R on the others */
  LM_EXPECT_ALL(lm_dist_tensor_reshard(&y, x, NULL, odd ? &s1 : &r), LM_ERR_MISMATCH,
                "disagree on target placements");
  mesh_works(m);
  lm_dist_tensor_destroy(&xi);
  lm_dist_tensor_destroy(&x);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_small_plans_ride_the_agreement),
    cmocka_unit_test(test_partial_plans_ride_the_agreement),
    cmocka_unit_test(test_cross_mesh_plans_ride_the_agreement),
    cmocka_unit_test(test_large_plans_take_the_transport),
    cmocka_unit_test(test_mismatch_without_deadline),
    cmocka_unit_test(test_large_blocks_go_apart_on_one_node),
    cmocka_unit_test(test_mismatch_of_large_blocks),
};

LM_TEST_MAIN(tests)
