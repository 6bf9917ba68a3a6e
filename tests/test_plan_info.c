/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_plan_info: lm_reshard_plan_info says what an execution moves, and the numbers are the
 * executor's own. This program counts, through the MPI profiling interface, every MPI_Isend and
 * MPI_Irecv the library posts on its communicators during one lm_reshard_plan_execute (bytes per
 * peer, the (peer, tag) pairs: one tag per step), and requires equality with the plan's info:
 * bytes sent and received, flows sent and received, distinct peers; the sums over all ranks
 * (LM_PLAN_INFO_ALL_RANKS) against an MPI_Allreduce of the local ones, and the pool's peak
 * during the execution against work_bytes + staging_bytes_max. Directed transitions (every kind
 * of step, uneven and empty shards, 2-D meshes, cross-mesh, block-cyclic pieces) and seeded
 * random ones. The node-
 * local path is off here (LM_NODE_LOCAL=0), so that every byte travels in an MPI message.
 * Then the argument checks and the versioned struct.
 */
// lm-test-np: 1 2 3 4 8
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

__attribute__((constructor)) static void set_environment(void) {
  setenv("LM_NODE_LOCAL", "0", 1);
}

/* ---- What the library posts (counted while g_counting) */
enum { kMaxFlows = 4096 };
typedef struct {
  int peer, tag, send;
  long long bytes;
} flow_t;
static flow_t g_flows[kMaxFlows];
static int g_nflows = 0, g_counting = 0, g_overflow = 0;

static void count(int send, int n, MPI_Datatype t, int peer, int tag, MPI_Comm c) {
  if (!g_counting || c == MPI_COMM_WORLD || tag == 0x7fff) return;
  int size = 0;
  PMPI_Type_size(t, &size);
  long long b = (long long)n * size;
  if (tag == LM_TEST_AGREE_MSG_TAG) b -= 64; /* a small plan's block rides after the words */
  if (b <= 0) return;
  for (int i = 0; i < g_nflows; ++i)
    if (g_flows[i].peer == peer && g_flows[i].tag == tag && g_flows[i].send == send) {
      g_flows[i].bytes += b;
      return;
    }
  if (g_nflows == kMaxFlows) {
    g_overflow = 1;
    return;
  }
  g_flows[g_nflows++] = (flow_t){peer, tag, send, b};
}

int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  count(1, n, t, dst, tag, c);
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}
int MPI_Irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request *q) {
  count(0, n, t, src, tag, c);
  return PMPI_Irecv(b, n, t, src, tag, c, q);
}
/* Agreement messages are probed, then received (the size is the sender's) */
int MPI_Mrecv(void *b, int n, MPI_Datatype t, MPI_Message *m, MPI_Status *st) {
  MPI_Status s;
  int rc = PMPI_Mrecv(b, n, t, m, &s), got = 0;
  if (rc == MPI_SUCCESS && PMPI_Get_count(&s, t, &got) == MPI_SUCCESS)
    count(0, got, t, s.MPI_SOURCE, s.MPI_TAG, MPI_COMM_SELF);
  if (st != MPI_STATUS_IGNORE) *st = s;
  return rc;
}

/* ---- One case */
typedef struct {
  int mdim;
  int64_t mshape[2];
  int reversed_dst; /* the target on the same shape over the ranks in reverse order */
  lm_placement_t src[2], dst[2];
  int ndim;
  int64_t shape[3];
  DLDataType dt;
} case_t;

static int distinct_peers(void) {
  int n = 0;
  for (int i = 0; i < g_nflows; ++i) {
    int seen = 0;
    for (int j = 0; j < i; ++j) seen |= g_flows[j].peer == g_flows[i].peer;
    n += !seen;
  }
  return n;
}

static lm_mesh_t make_mesh(const case_t *c, int reversed) {
  int ranks[8];
  for (int i = 0; i < NP; ++i) ranks[i] = reversed ? NP - 1 - i : i;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = NP;
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), c->mdim, c->mshape, &cfg));
  return m;
}

static void run_case(const case_t *c, const char *what) {
  lm_mesh_t sm = make_mesh(c, 0), dm = c->reversed_dst ? make_mesh(c, 1) : NULL;
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, sm, c->src, dm, c->dst, c->ndim, c->shape, c->dt));
  lm_reshard_plan_info_t mine = LM_RESHARD_PLAN_INFO_INIT, all = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &mine));
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(plan, LM_PLAN_INFO_ALL_RANKS, &all));
  /* lm_reshard_estimate: the same numbers without a plan, this rank's and all ranks'. */
  lm_reshard_plan_info_t est = LM_RESHARD_PLAN_INFO_INIT, est_all = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK(lm_reshard_estimate(sm, c->src, dm, c->dst, c->ndim, c->shape, c->dt, 0, &est));
  LM_ASSERT_OK_ALL(lm_reshard_estimate(sm, c->src, dm, c->dst, c->ndim, c->shape, c->dt,
                                       LM_PLAN_INFO_ALL_RANKS, &est_all));
  const int same_est = memcmp(&est, &mine, sizeof est) == 0 && memcmp(&est_all, &all, sizeof all) == 0;
  if (!same_est)
    lm_test__diag("rank %d: %s: estimate sent %lld received %lld flows %lld/%lld routes %u; plan "
                  "info %lld %lld %lld/%lld routes %u\n", ME, what, (long long)est.bytes_sent,
                  (long long)est.bytes_received, (long long)est.flows_sent,
                  (long long)est.flows_received, est.routes, (long long)mine.bytes_sent,
                  (long long)mine.bytes_received, (long long)mine.flows_sent,
                  (long long)mine.flows_received, mine.routes);
  LM_ASSERT_ALL(same_est);

  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, sm, c->ndim, c->shape, c->dt, LM_CPU, c->src));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&y, plan, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y)); /* plans once, warms the pool */
  int64_t in_use = 0, peak = 0;
  LM_ASSERT_OK(lm_pool_stats(NULL, NULL, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  g_nflows = 0;
  g_counting = 1;
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
  g_counting = 0;
  LM_ASSERT_OK(lm_pool_stats(&in_use, &peak, 0));

  long long sent = 0, recvd = 0, fs = 0, fr = 0;
  for (int i = 0; i < g_nflows; ++i) {
    (g_flows[i].send ? &sent : &recvd)[0] += g_flows[i].bytes;
    ++*(g_flows[i].send ? &fs : &fr);
  }
  /* One exchange step without Partial: every byte of this rank's target is received or copied
   * locally, once. */
  int partial = 0;
  for (int m = 0; m < c->mdim; ++m) partial |= c->src[m].kind == LM_PARTIAL || c->dst[m].kind == LM_PARTIAL;
  int64_t yshape[3] = {0, 0, 0}, ybytes = c->dt.bits / 8;
  LM_ASSERT_OK(lm_dist_tensor_local_shape(y, yshape, c->ndim));
  for (int d = 0; d < c->ndim; ++d) ybytes *= yshape[d];
  const int covered = partial || mine.steps != 1 || mine.bytes_received + mine.bytes_copied == ybytes;
  long long sums[2] = {mine.bytes_sent, mine.bytes_received};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  const int64_t extra = peak - in_use, bound = mine.work_bytes + mine.staging_bytes_max + 64 * (mine.steps + 1);
  int ok = covered && !g_overflow && sent == mine.bytes_sent && recvd == mine.bytes_received &&
           fs == mine.flows_sent && fr == mine.flows_received && distinct_peers() == mine.peers &&
           all.bytes_sent == sums[0] && all.bytes_received == sums[1] &&
           all.bytes_sent == all.bytes_received && extra <= bound &&
           mine.routes == (sent + recvd ? (uint32_t)LM_ROUTE_MPI : 0u) && mine.bytes_node_local == 0 &&
           mine.size == sizeof mine && mine.magic == LM_RESHARD_PLAN_INFO_MAGIC &&
           mine.version == LM_RESHARD_PLAN_INFO_VERSION && mine.reserved == 0;
  if (!ok)
    lm_test__diag("rank %d: %s: counted sent %lld in %lld flows, received %lld in %lld, %d peers; "
                  "info sent %lld in %lld, received %lld in %lld, %lld peers, routes %u; "
                  "all-ranks sent %lld received %lld (sums %lld %lld); pool rise %lld, "
                  "bound %lld; copied %lld, target %lld bytes, %lld steps\n",
                  ME, what, sent, fs, recvd, fr, distinct_peers(), (long long)mine.bytes_sent,
                  (long long)mine.flows_sent, (long long)mine.bytes_received,
                  (long long)mine.flows_received, (long long)mine.peers, mine.routes,
                  (long long)all.bytes_sent, (long long)all.bytes_received,
                  sums[0], sums[1], (long long)extra, (long long)bound,
                  (long long)mine.bytes_copied, (long long)ybytes, (long long)mine.steps);
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  lm_reshard_plan_destroy(&plan);
  lm_mesh_destroy(&dm);
  LM_ASSERT_OK(lm_mesh_destroy(&sm));
}

#define S(d) LM_PLACEMENT_SHARD(d)
#define R LM_PLACEMENT_REPLICATE
#define P(o) LM_PLACEMENT_PARTIAL(o)
#define BC(d, b, s) LM_PLACEMENT_BLOCK_CYCLIC(d, b, s)

static void test_directed(void **state) {
  (void)state;
  const DLDataType f64 = LM_FLOAT64, f32 = LM_FLOAT32, i32 = LM_INT32;
  const int64_t np = NP;
  const case_t one[] = {
      {1, {np}, 0, {S(0)}, {S(1)}, 2, {64, 48}, f64},
      {1, {np}, 0, {S(0)}, {R}, 2, {7, 5}, f64},        /* uneven: all-gather */
      {1, {np}, 0, {R}, {S(1)}, 2, {7, 5}, f32},        /* a slice, nothing moves */
      {1, {np}, 0, {P(LM_REDUCE_SUM)}, {R}, 2, {9, 4}, f64},
      {1, {np}, 0, {P(LM_REDUCE_SUM)}, {S(0)}, 2, {9, 4}, f64}, /* reduce-scatter */
      {1, {np}, 0, {P(LM_REDUCE_MAX)}, {S(1)}, 2, {3, 2}, i32}, /* empty chunks at np > 2 */
      {1, {np}, 0, {R}, {P(LM_REDUCE_SUM)}, 1, {10}, f64},
      {1, {np}, 0, {S(0)}, {S(0)}, 1, {2}, f64},        /* nothing to do; empty shards */
      {1, {np}, 1, {S(0)}, {S(0)}, 2, {33, 3}, f64},    /* cross-mesh: ranks reversed */
      {1, {np}, 1, {P(LM_REDUCE_SUM)}, {R}, 2, {5, 6}, f32},
      /* block-cyclic: pieces steps (Partial sources reduced first, Partial targets filled) */
      {1, {np}, 0, {BC(0, 2, 0)}, {S(0)}, 2, {9, 5}, f64},
      {1, {np}, 0, {S(1)}, {BC(1, 3, np - 1)}, 2, {4, 11}, f32},
      {1, {np}, 0, {BC(0, 1, 0)}, {R}, 1, {13}, f64},
      {1, {np}, 0, {R}, {BC(0, 3, 0)}, 2, {10, 3}, f64},   /* local copies only */
      {1, {np}, 0, {BC(1, 2, 0)}, {BC(1, 3, 1 % np)}, 2, {3, 17}, i32},
      {1, {np}, 0, {P(LM_REDUCE_SUM)}, {BC(0, 2, 0)}, 2, {7, 4}, f64},
      {1, {np}, 0, {BC(0, 2, 0)}, {P(LM_REDUCE_SUM)}, 2, {7, 4}, f64},
      {1, {np}, 1, {BC(0, 2, 0)}, {BC(0, 2, 0)}, 2, {11, 2}, f64}, /* cross-mesh */
  };
  for (size_t i = 0; i < sizeof one / sizeof one[0]; ++i) {
    char what[64];
    snprintf(what, sizeof what, "1-D case %zu", i);
    run_case(&one[i], what);
  }
  if (NP % 2 == 0 && NP >= 4) {
    const int64_t a = 2, b = np / 2;
    const case_t two[] = {
        {2, {a, b}, 0, {S(0), S(1)}, {R, S(0)}, 2, {11, 6}, f64},
        {2, {a, b}, 0, {P(LM_REDUCE_SUM), S(0)}, {S(0), R}, 2, {8, 5}, f64},
        {2, {a, b}, 0, {P(LM_REDUCE_SUM), S(0)}, {R, S(0)}, 2, {9, 5}, f64}, /* one P -> R dim */
        {2, {a, b}, 0, {S(0), S(0)}, {S(1), P(LM_REDUCE_SUM)}, 2, {13, 9}, f32},
        {2, {a, b}, 1, {S(1), R}, {S(0), S(1)}, 3, {4, 6, 5}, f64},
        {2, {a, b}, 0, {BC(0, 2, 1), BC(1, 3, 0)}, {S(0), R}, 2, {13, 10}, f64}, /* ScaLAPACK's */
        {2, {a, b}, 1, {S(1), S(0)}, {BC(1, 2, 0), BC(0, 1, b - 1)}, 2, {9, 7}, f32},
    };
    for (size_t i = 0; i < sizeof two / sizeof two[0]; ++i) {
      char what[64];
      snprintf(what, sizeof what, "2-D case %zu", i);
      run_case(&two[i], what);
    }
  }
}

static lm_placement_t random_placement(unsigned *seed, int ndim) {
  switch (rand_r(seed) % 4) {
    case 0: return R;
    case 1: return P(LM_REDUCE_SUM);
    default: return S(rand_r(seed) % ndim);
  }
}

static void test_random(void **state) {
  (void)state;
  unsigned seed = 20261203u;
  for (int i = 0; i < 40; ++i) {
    case_t c;
    memset(&c, 0, sizeof c);
    const int two = NP % 2 == 0 && NP >= 4 && rand_r(&seed) % 2;
    c.mdim = two ? 2 : 1;
    c.mshape[0] = two ? 2 : NP;
    c.mshape[1] = two ? NP / 2 : 1;
    c.reversed_dst = rand_r(&seed) % 3 == 0;
    c.ndim = 1 + rand_r(&seed) % 3;
    for (int d = 0; d < c.ndim; ++d) c.shape[d] = rand_r(&seed) % 10;
    for (int m = 0; m < c.mdim; ++m) {
      c.src[m] = random_placement(&seed, c.ndim);
      c.dst[m] = random_placement(&seed, c.ndim);
    }
    c.dt = rand_r(&seed) % 2 ? LM_FLOAT64 : LM_FLOAT32;
    char what[96], a[32], b[32];
    LM_ASSERT_OK(lm_placements_format(c.src, c.mdim, a, sizeof a));
    LM_ASSERT_OK(lm_placements_format(c.dst, c.mdim, b, sizeof b));
    snprintf(what, sizeof what, "random case %d %s -> %s%s", i, a, b, c.reversed_dst ? " (cross)" : "");
    run_case(&c, what);
  }
}

static void test_arguments(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_placement_t s0 = S(0), r = R;
  int64_t g[1] = {16};
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &s0, NULL, &r, 1, g, LM_FLOAT64));
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_STATUS(lm_reshard_plan_info(NULL, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "plan") != NULL);
  LM_ASSERT_STATUS(lm_reshard_plan_info(plan, 0, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info is NULL") != NULL);
  /* lm_reshard_estimate names its bad arguments as lm_reshard_plan_create does. */
  LM_ASSERT_STATUS(lm_reshard_estimate(NULL, &s0, NULL, &r, 1, g, LM_FLOAT64, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "lm_reshard_estimate: src_mesh") != NULL);
  LM_ASSERT_STATUS(lm_reshard_estimate(m, &s0, NULL, NULL, 1, g, LM_FLOAT64, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "dst_placements") != NULL);
  LM_ASSERT_STATUS(lm_reshard_estimate(m, &s0, NULL, &r, 1, g, LM_FLOAT64, 4, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "flags") != NULL);
  LM_ASSERT_STATUS(lm_reshard_estimate(m, &s0, NULL, &r, 1, g, LM_FLOAT64, 0, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info is NULL") != NULL);
  lm_placement_t pmax = P(LM_REDUCE_MAX), psum = P(LM_REDUCE_SUM);
  LM_ASSERT_STATUS(lm_reshard_estimate(m, &pmax, NULL, &psum, 1, g, LM_FLOAT64, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_reshard_plan_info(plan, 2, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "flags") != NULL);
  info.size = 16;
  LM_ASSERT_STATUS(lm_reshard_plan_info(plan, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info->size") != NULL);
  info.size = sizeof info;
  info.version = 99;
  LM_ASSERT_STATUS(lm_reshard_plan_info(plan, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info->version") != NULL);
  info.version = LM_RESHARD_PLAN_INFO_VERSION;
  info.magic = LM_LOCAL_MAP_OPTIONS_MAGIC; /* another struct's magic */
  LM_ASSERT_STATUS(lm_reshard_plan_info(plan, 0, &info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info->magic") != NULL);
  LM_ASSERT_STATUS(lm_reshard_estimate(m, &s0, NULL, &r, 1, g, LM_FLOAT64, 0, &info),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "info->magic") != NULL);
  /* The library writes no byte past the caller's size. */
  struct {
    lm_reshard_plan_info_t info;
    unsigned char guard[64];
  } box;
  memset(&box, 0xa5, sizeof box);
  lm_reshard_plan_info_t init = LM_RESHARD_PLAN_INFO_INIT;
  box.info = init;
  LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &box.info));
  int untouched = 1;
  for (size_t i = 0; i < sizeof box.guard; ++i) untouched &= box.guard[i] == 0xa5;
  LM_ASSERT_ALL(untouched && box.info.size == sizeof box.info && box.info.steps >= 1);
  /* A destroyed plan is refused. */
  lm_reshard_plan_t dead = plan;
  LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  LM_ASSERT_STATUS(lm_reshard_plan_info(dead, 0, &box.info), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_directed),
    cmocka_unit_test(test_random),
    cmocka_unit_test(test_arguments),
};

/* The counts compare the plan's messages with MPI's point-to-point posts; where even steps run
 * as MPI collectives (LM_MPI_COLLECTIVES=auto or 1) there are
 * none, so this suite keeps the message path unless told otherwise. */
static void keep_messages(void) __attribute__((constructor));
static void keep_messages(void) { setenv("LM_MPI_COLLECTIVES", "0", 0); }

LM_TEST_MAIN(tests)
