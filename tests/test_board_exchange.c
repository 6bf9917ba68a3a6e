/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_board_exchange: small same-mesh plan executions whose ranks all share one node move their
 * data through the agreement board (comm/board.hpp, transport/node/board_exchange.cpp): every rank packs
 * what it sends into its outbox before it publishes its agreement words, and copies its blocks out
 * of its peers' outboxes after the round. This suite checks, against the global index of every
 * element: S0->S1, S1->S0, S0->R, R->S1, P(sum) and P(max) -> S (one reduce-scatter step, reduced
 * out of the peers' outboxes) and -> R (one round: each rank reads its peers' whole inputs), uneven and empty shards, three dtypes, compact tensors and
 * padded borrows (their arrays packed and unpacked in place, the padding untouched), many
 * executions in a row (the outbox banks alternate), and that no MPI point-to-point message is posted on the
 * library's communicators for them (counted through PMPI) while a tensor above
 * LM_BOARD_EXCHANGE_BYTES per rank, or a run with the board or the exchange off (the
 * environment, tests/script_node_local.sh), posts them; lm_reshard_plan_info says which route.
 * One rank starting the plan nonblocking while the others execute it: refused on every rank as a
 * mismatch of the operation (a blocking execution may take the board or the node-local path, a
 * nonblocking one never does).
 * Positions come from this file's own torch.chunk (docs/DESIGN.md, "Layout math"), not from the
 * library: every shard's offset and shape must equal it, and values are checked there.
 */
// lm-test-np: 1 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_oracle.h"
#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static long g_p2p; /* point-to-point posts on communicators other than MPI_COMM_WORLD */

int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  if (c != MPI_COMM_WORLD) ++g_p2p;
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}
int MPI_Irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request *q) {
  if (c != MPI_COMM_WORLD) ++g_p2p;
  return PMPI_Irecv(b, n, t, src, tag, c, q);
}

static int env_off(const char *name) {
  const char *e = getenv(name);
  return e && e[0] == '0' && e[1] == '\0';
}
/* Whether a small plan execution here should go through the board: every rank on one node
 * (simulated nodes: LM_TEST_NODES, tests/README.md) and nothing turned off. */
static int board_expected(void) {
  return NP > 1 && lm_test_one_node(NULL, 0) && !env_off("LM_AGREE_BOARD") &&
         !env_off("LM_NODE_LOCAL") && !env_off("LM_BOARD_EXCHANGE_BYTES") &&
         !env_off("LM_NODE_ARENA_BYTES");
}

static double value(int64_t i, int64_t j, int64_t cols) { return (double)(i * cols + j) + 0.25; }

/* This rank's box (off, len) of t, placement p on the 1-D mesh of every rank, global shape g;
 * 1 when the library's local offset and shape (and the local DLTensor's) agree with it. */
static int oracle_box(lm_dist_tensor_t t, lm_placement_t p, const int64_t *g, int64_t *off,
                      int64_t *len) {
  int64_t lo[2], ll[2];
  DLTensor v;
  off[0] = off[1] = 0;
  len[0] = g[0];
  len[1] = g[1];
  if (p.kind == LM_SHARD) lm_oracle_chunk(g[p.dim], NP, ME, &off[p.dim], &len[p.dim]);
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, lo, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ll, 2));
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  int ok = lo[0] == off[0] && lo[1] == off[1] && ll[0] == len[0] && ll[1] == len[1] &&
           v.shape[0] == len[0] && v.shape[1] == len[1];
  if (!ok)
    lm_test__diag("rank %d: shard at (%lld, %lld) of (%lld, %lld), torch.chunk says (%lld, %lld) of "
                  "(%lld, %lld)\n", ME, (long long)lo[0], (long long)lo[1], (long long)ll[0],
                  (long long)ll[1], (long long)off[0], (long long)off[1], (long long)len[0],
                  (long long)len[1]);
  return ok;
}

static int fill(lm_dist_tensor_t t, lm_placement_t p, DLDataType dt) {
  DLTensor v;
  int64_t off[2], len[2];
  int64_t g[2];
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_global_shape(t, g, 2));
  if (!oracle_box(t, p, g, off, len)) return 0;
  for (int64_t i = 0; i < v.shape[0]; ++i)
    for (int64_t j = 0; j < v.shape[1]; ++j) {
      double x = value(off[0] + i, off[1] + j, g[1]);
      if (p.kind == LM_PARTIAL) /* sum: the value on rank 0 only; max: the value on the last */
        x = p.reduce_op == LM_REDUCE_SUM ? (ME == 0 ? x : 0.0) : x - (double)(NP - 1 - ME);
      int64_t k = i * (v.strides ? v.strides[0] : v.shape[1]) + j; /* (padded borrows) */
      if (dt.code == kDLFloat && dt.bits == 64) ((double *)v.data)[k] = x;
      else if (dt.code == kDLFloat) ((float *)v.data)[k] = (float)x;
      else ((int32_t *)v.data)[k] = (int32_t)x;
    }
  return 1;
}

static int check(lm_dist_tensor_t t, lm_placement_t p, DLDataType dt) {
  DLTensor v;
  int64_t off[2], len[2], g[2];
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_global_shape(t, g, 2));
  if (!oracle_box(t, p, g, off, len)) return 0;
  for (int64_t i = 0; i < v.shape[0]; ++i)
    for (int64_t j = 0; j < v.shape[1]; ++j) {
      double x = value(off[0] + i, off[1] + j, g[1]), y;
      int64_t k = i * (v.strides ? v.strides[0] : v.shape[1]) + j;
      if (dt.code == kDLFloat && dt.bits == 64) y = ((double *)v.data)[k];
      else if (dt.code == kDLFloat) y = ((float *)v.data)[k], x = (float)x;
      else y = ((int32_t *)v.data)[k], x = (int32_t)x;
      if (x != y) {
        lm_test__diag("rank %d: element (%lld, %lld): %g, expected %g\n", ME,
                      (long long)(off[0] + i), (long long)(off[1] + j), y, x);
        return 0;
      }
    }
  return 1;
}

/* A padded borrow laid out as placement p of g: this rank's torch.chunk box in an array of 3
 * columns more, the padding bytes 0x5a; *arr: the array (free it after the tensor). */
static lm_dist_tensor_t padded(lm_mesh_t m, lm_placement_t p, int64_t *g, DLDataType dt,
                               unsigned char **arr) {
  static int64_t len[2], st[2];
  int64_t off[2] = {0, 0};
  len[0] = g[0];
  len[1] = g[1];
  if (p.kind == LM_SHARD) lm_oracle_chunk(g[p.dim], NP, ME, &off[p.dim], &len[p.dim]);
  st[0] = len[1] + 3;
  st[1] = 1;
  const size_t bytes = (size_t)(len[0] * st[0]) * (dt.bits / 8);
  *arr = malloc(bytes ? bytes : 1);
  memset(*arr, 0x5a, bytes);
  DLTensor v = {*arr, LM_CPU, 2, dt, len, st, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &v, &p, LM_SHAPE_GIVEN, g,
                                             LM_FROM_LOCAL_BORROW));
  return t;
}

/* Whether the padding columns of a padded() array still hold 0x5a. */
static int padding_kept(lm_dist_tensor_t t, const unsigned char *arr, DLDataType dt) {
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  const int64_t ld = v.strides ? v.strides[0] : v.shape[1], es = dt.bits / 8;
  for (int64_t i = 0; i < v.shape[0]; ++i)
    for (int64_t b = v.shape[1] * es; b < ld * es; ++b)
      if (arr[i * ld * es + b] != 0x5a) return 0;
  return 1;
}

/* Plan src -> dst placements on a g0 x g1 tensor (pad: both padded borrows); reps executions;
 * returns the p2p posts made. */
static long run_case(lm_mesh_t m, lm_placement_t sp, lm_placement_t dp, int64_t g0, int64_t g1,
                     DLDataType dt, int reps, int pad, int *ok) {
  int64_t g[2] = {g0, g1};
  lm_reshard_plan_t plan = NULL;
  lm_dist_tensor_t src = NULL, dst = NULL;
  unsigned char *sarr = NULL, *darr = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &sp, m, &dp, 2, g, dt));
  if (pad) {
    src = padded(m, sp, g, dt, &sarr);
    dst = padded(m, dp, g, dt, &darr);
  } else {
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 2, g, dt, LM_CPU, &sp));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
  }
  *ok &= fill(src, sp, dt);
  long before = g_p2p;
  for (int r = 0; r < reps; ++r) {
    *ok &= lm_reshard_plan_execute(plan, src, dst) == LM_SUCCESS;
    *ok &= check(dst, dp, dt);
  }
  long made = g_p2p - before;
  /* lm_reshard_plan_info names the route the executions took: the board exactly when something
   * moves between ranks and no MPI message was posted for it. */
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  *ok &= lm_reshard_plan_info(plan, 0, &info) == LM_SUCCESS;
  const int moves = info.flows_sent + info.flows_received > 0;
  if (((info.routes & LM_ROUTE_BOARD) != 0) != (moves && made == 0) ||
      (info.routes & LM_ROUTE_BOARD && info.routes != LM_ROUTE_BOARD)) {
    lm_test__diag("rank %d: routes %u, %lld flows, %ld MPI posts\n", ME, info.routes,
                  (long long)(info.flows_sent + info.flows_received), made);
    *ok = 0;
  }
  if (pad && !(padding_kept(src, sarr, dt) && padding_kept(dst, darr, dt))) {
    lm_test__diag("rank %d: a padded borrow's padding was written\n", ME);
    *ok = 0;
  }
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&dst);
  lm_reshard_plan_destroy(&plan);
  free(sarr);
  free(darr);
  return made;
}

static void test_small_plans_through_the_board(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE;
  const struct {
    lm_placement_t s, d;
    int64_t g0, g1;
  } cases[] = {{S0, S1, 64, 64}, {S1, S0, 64, 64}, {S0, R, 40, 24}, {R, S1, 9, 13},
               {S0, S1, 7, 5},   {S1, S0, 2, 3},   {S0, S1, 1, 1},  {S1, R, 33, 17}};
  const DLDataType dts[3] = {LM_FLOAT64, LM_FLOAT32, LM_INT32};
  int ok = 1, expect = board_expected();
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
    for (int t = 0; t < 6; ++t) { /* each dtype compact, then padded borrows (read in place) */
      long made = run_case(m, cases[c].s, cases[c].d, cases[c].g0, cases[c].g1, dts[t % 3], 5,
                           t >= 3, &ok);
      if (expect && made != 0) {
        lm_test__diag("rank %d: case %zu dtype %d%s: %ld MPI messages posted\n", ME, c, t % 3,
                      t >= 3 ? " padded" : "", made);
        ok = 0;
      }
    }
  /* Partial sources, one reduce-scatter step each (compact tensors: a padded source takes the
   * transport): reduced in the round, out of the peers' outboxes; P -> R (a reduce-scatter and
   * its gather) in one round too. */
  const lm_placement_t Psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM),
                       Pmax = LM_PLACEMENT_PARTIAL(LM_REDUCE_MAX);
  const struct {
    lm_placement_t s, d;
    int64_t g0, g1;
  } partial[] = {{Psum, S0, 40, 24}, {Pmax, S1, 9, 13}, {Psum, S1, 7, 5}, {Pmax, S0, 2, 3},
                 /* P -> R: one round, every rank's whole input read by the others */
                 {Psum, R, 40, 24},  {Pmax, R, 9, 13},  {Psum, R, 7, 5},  {Pmax, R, 1, 1}};
  for (size_t c = 0; c < sizeof partial / sizeof partial[0]; ++c)
    for (int t = 0; t < 3; ++t) {
      long made = run_case(m, partial[c].s, partial[c].d, partial[c].g0, partial[c].g1, dts[t],
                           5, 0, &ok);
      if (expect && made != 0) {
        lm_test__diag("rank %d: Partial case %zu dtype %d: %ld MPI messages posted\n", ME, c, t,
                      made);
        ok = 0;
      }
    }
  /* 512 KiB: above LM_BOARD_EXCHANGE_BYTES per rank, the MPI transport. */
  long made = run_case(m, S0, S1, 256, 256, LM_FLOAT64, 2, 0, &ok);
  if (NP > 1 && made == 0) {
    lm_test__diag("rank %d: the 512 KiB reshard posted no MPI message\n", ME);
    ok = 0;
  }
  LM_ASSERT_ALL(ok);
  lm_mesh_destroy(&m);
}

/* Rank 0 starts the plan (nonblocking: never the board nor the node-local path) while the others
 * execute it: the operations differ, every rank refuses (LM_ERR_MISMATCH naming the operation),
 * nothing moved, and the plan works afterwards. */
static void test_mixed_start_and_execute(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, g[2] = {64, 64};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1);
  lm_reshard_plan_t plan = NULL;
  lm_dist_tensor_t src = NULL, dst = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &S0, m, &S1, 2, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 2, g, LM_FLOAT64, LM_CPU, &S0));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
  LM_ASSERT_ALL(fill(src, S0, LM_FLOAT64));
  lm_status_t st;
  lm_request_t q = NULL;
  const int check_on = !env_off("LM_CHECK");
  if (!check_on) { /* no agreement: mixed calls are undefined (DESIGN, LM_CHECK levels) */
    st = lm_reshard_plan_execute(plan, src, dst);
  } else if (ME == 0) {
    st = lm_reshard_plan_start(&q, plan, src, dst);
    if (st == LM_SUCCESS && q) st = lm_request_wait(&q);
  } else {
    st = lm_reshard_plan_execute(plan, src, dst);
  }
  int ok = NP == 1 || !check_on
               ? st == LM_SUCCESS
               : st == LM_ERR_MISMATCH && strstr(lm_last_error_message(), "operation") && q == NULL;
  if (!ok) lm_test__diag("rank %d: mixed: status %d: %s\n", ME, (int)st, lm_last_error_message());
  LM_ASSERT_ALL(ok);
  if (NP == 1 || !check_on) LM_ASSERT_ALL(check(dst, S1, LM_FLOAT64));
  /* And the board again for all afterwards. */
  long before = g_p2p;
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst));
  LM_ASSERT_ALL(check(dst, S1, LM_FLOAT64));
  LM_ASSERT_ALL(!board_expected() || g_p2p == before);
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&dst);
  lm_reshard_plan_destroy(&plan);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_small_plans_through_the_board),
    cmocka_unit_test(test_mixed_start_and_execute),
};

/* The counts compare the plan's messages with MPI's point-to-point posts; where even steps run
 * as MPI collectives (LM_MPI_COLLECTIVES=auto or 1) there are
 * none, so this suite keeps the message path unless told otherwise. */
static void keep_messages(void) __attribute__((constructor));
static void keep_messages(void) { setenv("LM_MPI_COLLECTIVES", "0", 0); }

LM_TEST_MAIN(tests)
