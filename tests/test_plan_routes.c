/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_plan_routes: one transfer whose peers are partly on this node and partly on others takes
 * both routes at once: node-local copies for the peers of this node, MPI messages for the rest
 * (issue 23, section 5). With simulated nodes (LM_TEST_NODES=k, `make check-multinode`; world
 * rank r on node r % k, tests/README.md) the world mesh of np >= 3 ranks spans two nodes, so an
 * all-gather mixes them; on one machine without it every peer is node-local.
 *
 * The expectation is this file's own, from the documented rules, not from the library: where
 * each shard lies (lm_oracle.h, torch.chunk), which node a rank is on (lm_test_node_of), and which
 * flows take the node-local path (a peer of this node and at least LM_NODE_LOCAL_MIN_BYTES, pinned
 * here to 32K). Per rank, lm_reshard_plan_info's routes, bytes sent and received and
 * bytes_node_local must equal it exactly; the sums over the ranks (LM_PLAN_INFO_ALL_RANKS) too.
 * What the execution really did is counted through PMPI: to and from a peer of another node (or a
 * flow under the floor) the MPI messages carry exactly the flow's bytes; to and from a peer of this
 * node only descriptors travel as MPI messages (under 4 KiB per flow), so the data went node-local.
 * And the values moved are checked at the oracle's positions. With simulated nodes at np >= 3 the
 * sums must show both routes, 0 < bytes_node_local < bytes_sent + bytes_received.
 * The node-local path, the floor and the board exchange are set here (LM_NODE_LOCAL=1,
 * LM_NODE_LOCAL_MIN_BYTES=32K, LM_BOARD_EXCHANGE_BYTES=0), the same on every rank.
 */
// lm-test-np: 1 2 3 4 8
#include <stdlib.h>
#include <string.h>

#include "lm_oracle.h"
#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

enum { kMinBytes = 32 * 1024, kDescBytesPerFlow = 4096, kMaxRanks = 64 };

__attribute__((constructor)) static void set_environment(void) {
  setenv("LM_NODE_LOCAL", "1", 1);
  setenv("LM_NODE_LOCAL_MIN_BYTES", "32K", 1);
  setenv("LM_BOARD_EXCHANGE_BYTES", "0", 1); /* this test is about the two other routes */
}

/* ---- What the library posts to and from each peer during one execution (counted while
 * g_counting), both directions together: descriptors and data alike. */
static long long g_mpi_bytes[kMaxRanks];
static int g_counting = 0;

static void count(int n, MPI_Datatype t, int peer, int tag, MPI_Comm c) {
  if (!g_counting || c == MPI_COMM_WORLD || tag == 0x7fff || peer < 0 || peer >= kMaxRanks) return;
  int size = 0;
  PMPI_Type_size(t, &size);
  long long b = (long long)n * size;
  if (tag == LM_TEST_AGREE_MSG_TAG) b -= 64; /* agreement words; a small plan's block rides after */
  if (b > 0) g_mpi_bytes[peer] += b;
}
int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  count(n, t, dst, tag, c);
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}
/* Agreement messages are probed, then received (their size is the sender's). */
int MPI_Mrecv(void *b, int n, MPI_Datatype t, MPI_Message *m, MPI_Status *st) {
  MPI_Status s;
  int rc = PMPI_Mrecv(b, n, t, m, &s), got = 0;
  if (rc == MPI_SUCCESS && PMPI_Get_count(&s, t, &got) == MPI_SUCCESS)
    count(got, t, s.MPI_SOURCE, s.MPI_TAG, MPI_COMM_SELF);
  if (st != MPI_STATUS_IGNORE) *st = s;
  return rc;
}
int MPI_Irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request *q) {
  count(n, t, src, tag, c);
  return PMPI_Irecv(b, n, t, src, tag, c, q);
}

static double value(int64_t i, int64_t j, int64_t cols) { return (double)(i * cols + j) + 0.5; }

/* This rank's box of a g[0] x g[1] tensor placed p on the 1-D world mesh (torch.chunk). */
static void box_of(int rank, lm_placement_t p, const int64_t *g, int64_t *off, int64_t *len) {
  off[0] = off[1] = 0;
  len[0] = g[0];
  len[1] = g[1];
  if (p.kind == LM_SHARD) lm_oracle_chunk(g[p.dim], NP, rank, &off[p.dim], &len[p.dim]);
}

/* Fills (check = 0) or checks (1) the local part of t at the oracle's box; 1 when it is there. */
static int fill_or_check(lm_dist_tensor_t t, lm_placement_t p, const int64_t *g, int check) {
  int64_t off[2], len[2], lo[2], ll[2];
  DLTensor v;
  box_of(ME, p, g, off, len);
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, lo, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ll, 2));
  if (lo[0] != off[0] || lo[1] != off[1] || ll[0] != len[0] || ll[1] != len[1]) {
    lm_test__diag("rank %d: shard at (%lld, %lld) of (%lld, %lld), torch.chunk says (%lld, %lld) "
                  "of (%lld, %lld)\n", ME, (long long)lo[0], (long long)lo[1], (long long)ll[0],
                  (long long)ll[1], (long long)off[0], (long long)off[1], (long long)len[0],
                  (long long)len[1]);
    return 0;
  }
  double *d = (double *)v.data;
  for (int64_t i = 0; i < len[0]; ++i)
    for (int64_t j = 0; j < len[1]; ++j) {
      const double x = value(off[0] + i, off[1] + j, g[1]);
      if (!check) {
        d[i * len[1] + j] = x;
      } else if (d[i * len[1] + j] != x) {
        lm_test__diag("rank %d: element (%lld, %lld): %g, expected %g\n", ME, (long long)(off[0] + i),
                      (long long)(off[1] + j), d[i * len[1] + j], x);
        return 0;
      }
    }
  return 1;
}

/* The oracle's flows of one direct exchange, src -> dst on the 1-D world mesh: what this rank
 * sends to peer q is the part of its source box that q's target box holds, and what it receives
 * from q the part of q's source box that its own target box holds. */
static int64_t overlap_bytes(int from, lm_placement_t sp, int to, lm_placement_t dp, const int64_t *g) {
  int64_t so[2], sl[2], to_[2], tl[2], n = (int64_t)sizeof(double);
  box_of(from, sp, g, so, sl);
  box_of(to, dp, g, to_, tl);
  for (int d = 0; d < 2; ++d) {
    int64_t lo = so[d] > to_[d] ? so[d] : to_[d];
    int64_t hi = so[d] + sl[d] < to_[d] + tl[d] ? so[d] + sl[d] : to_[d] + tl[d];
    n *= hi > lo ? hi - lo : 0;
  }
  return n;
}

typedef struct {
  long long sent, received, node_local;
  unsigned routes;
} expect_t;

/* Runs src -> dst on a g[0] x g[1] float64 tensor; returns 1 when everything matched the oracle.
 * *all_out: the plan's info summed over the ranks. */
static int run_case(lm_mesh_t m, lm_placement_t sp, lm_placement_t dp, const int64_t *g,
                    const char *what, lm_reshard_plan_info_t *all_out) {
  lm_reshard_plan_t plan = NULL;
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &sp, m, &dp, 2, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, g, LM_FLOAT64, LM_CPU, &sp));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&y, plan, LM_CPU));
  int ok = fill_or_check(x, sp, g, 0);

  /* The oracle: per peer, the flows, their routes and bytes. */
  expect_t e = {0, 0, 0, 0};
  long long mpi_expect[kMaxRanks], desc_flows[kMaxRanks];
  for (int q = 0; q < NP; ++q) {
    mpi_expect[q] = desc_flows[q] = 0;
    if (q == ME) continue;
    const int64_t flow[2] = {overlap_bytes(ME, sp, q, dp, g), overlap_bytes(q, sp, ME, dp, g)};
    for (int k = 0; k < 2; ++k) {
      if (flow[k] == 0) continue;
      (k == 0 ? &e.sent : &e.received)[0] += flow[k];
      if (lm_test_node_of(q) == lm_test_node_of(ME) && flow[k] >= kMinBytes) {
        e.node_local += flow[k];
        e.routes |= LM_ROUTE_NODE_LOCAL;
        ++desc_flows[q];
      } else {
        mpi_expect[q] += flow[k];
        e.routes |= LM_ROUTE_MPI;
      }
    }
  }

  lm_reshard_plan_info_t mine = LM_RESHARD_PLAN_INFO_INIT, all = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &mine));
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(plan, LM_PLAN_INFO_ALL_RANKS, &all));
  const int info_ok = mine.routes == e.routes && mine.bytes_sent == e.sent &&
                      mine.bytes_received == e.received && mine.bytes_node_local == e.node_local;
  if (!info_ok)
    lm_test__diag("rank %d (node %d): %s: info routes %u, sent %lld, received %lld, node-local "
                  "%lld; the oracle says routes %u, sent %lld, received %lld, node-local %lld\n",
                  ME, lm_test_node_of(ME), what, mine.routes, (long long)mine.bytes_sent,
                  (long long)mine.bytes_received, (long long)mine.bytes_node_local, e.routes,
                  e.sent, e.received, e.node_local);
  ok &= info_ok;
  long long sums[3] = {e.sent, e.received, e.node_local};
  unsigned routes = e.routes;
  MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &routes, 1, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD);
  const int all_ok = all.bytes_sent == sums[0] && all.bytes_received == sums[1] &&
                     all.bytes_node_local == sums[2] && all.routes == routes;
  if (!all_ok)
    lm_test__diag("rank %d: %s: all ranks: info routes %u, sent %lld, received %lld, node-local "
                  "%lld; the oracle says routes %u, sent %lld, received %lld, node-local %lld\n",
                  ME, what, all.routes, (long long)all.bytes_sent, (long long)all.bytes_received,
                  (long long)all.bytes_node_local, routes, sums[0], sums[1], sums[2]);
  ok &= all_ok;
  *all_out = all;

  /* Execute once (plans, warms the pool), then once counted. */
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
  MPI_Barrier(MPI_COMM_WORLD);
  memset(g_mpi_bytes, 0, sizeof g_mpi_bytes);
  g_counting = 1;
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
  g_counting = 0;
  for (int q = 0; q < NP && q < kMaxRanks; ++q) {
    const long long extra = g_mpi_bytes[q] - mpi_expect[q];
    if (extra < 0 || extra > kDescBytesPerFlow * desc_flows[q]) {
      lm_test__diag("rank %d (node %d): %s: with rank %d (node %d) %lld bytes went as MPI "
                    "messages; the oracle says %lld of data over MPI and %lld node-local flow(s) "
                    "(descriptors only)\n", ME, lm_test_node_of(ME), what, q, lm_test_node_of(q),
                    g_mpi_bytes[q], mpi_expect[q], desc_flows[q]);
      ok = 0;
    }
  }
  ok &= fill_or_check(y, dp, g, 1);
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  lm_reshard_plan_destroy(&plan);
  return ok;
}

/* An all-gather (S(0) -> R, every flow of at least 7 rows of 8 KiB: above the floor) and an
 * all-to-all (S(0) -> S(1), strided boxes; from np 3 on, some flows just under the floor). */
static void test_routes_follow_the_nodes(void **state) {
  (void)state;
  if (NP > kMaxRanks) lm_test_skip("at most %d ranks (np %d)", kMaxRanks, NP);
  lm_mesh_t m = lm_test_world_mesh();
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE;
  const int64_t gather[2] = {8 * (int64_t)NP - 1, 1024}, a2a[2] = {64 * (int64_t)NP - 1, 64 * (int64_t)NP + 5};
  lm_reshard_plan_info_t all;
  int ok = run_case(m, S0, R, gather, "S(0) -> R", &all);
  /* Simulated nodes and a node with two ranks or more: the one transfer mixes both routes. */
  int two_nodes = lm_test_nodes() > 1 && NP > lm_test_nodes();
  if (two_nodes) {
    const int mixed = all.routes == (LM_ROUTE_MPI | LM_ROUTE_NODE_LOCAL) && all.bytes_node_local > 0 &&
                      all.bytes_node_local < all.bytes_sent + all.bytes_received;
    if (!mixed)
      lm_test__diag("rank %d: %d simulated nodes at np %d: the all-gather's routes are %u, %lld of "
                    "%lld bytes node-local (both routes expected)\n", ME, lm_test_nodes(), NP,
                    all.routes, (long long)all.bytes_node_local,
                    (long long)(all.bytes_sent + all.bytes_received));
    ok &= mixed;
  }
  ok &= run_case(m, S0, S1, a2a, "S(0) -> S(1)", &all);
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_routes_follow_the_nodes),
};

LM_TEST_MAIN(tests)
