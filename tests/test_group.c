/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_group: grouped reshards (lm_reshard_group_t). A group of mixed entries (every kind of step:
 * all-gather, all-to-all, reduce-scatter with sum, max and integer avg, Replicate -> Partial,
 * slices, uneven and empty shards, 2-D meshes, across meshes) must give the same bits as one
 * lm_reshard_plan_execute per entry, for every bucket bound (every entry alone, a few buckets,
 * one bucket), blocking and nonblocking, and made once for a list of tensors (test_one_shot,
 * what the bindings' reshard_many do). Coalescing is
 * counted through PMPI: a bucket of K identical entries sends one message per peer and step, as
 * many as one entry's plan, not K times as many. Then the argument checks and the agreement.
 * The node-local path is off (LM_NODE_LOCAL=0) so that every message is an MPI_Isend, unless the
 * environment turns it on (tests/script_node_local.sh runs this suite with every message
 * node-local): then the counting test skips and test_parts_in_place checks, by counting the
 * library's process_vm_readv calls, that a round's message moves straight into the entries'
 * buffers (kernel copies, or memcpy from the sender's arena), never through an unpack.
 */
// lm-test-np: 1 2 3 4 8
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()
#define S(d) LM_PLACEMENT_SHARD(d)
#define R LM_PLACEMENT_REPLICATE
#define P(o) LM_PLACEMENT_PARTIAL(o)

__attribute__((constructor)) static void set_environment(void) {
  setenv("LM_NODE_LOCAL", "0", 0); /* the node-local suite sets it */
}

static int g_counting = 0;
static long long g_isends = 0;
int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  /* (an agreement message counts when it carries a block after its words: lm_test_agree_words) */
  if (g_counting && c != MPI_COMM_WORLD && n > 0 && !lm_test_agree_words(tag, n, t)) ++g_isends;
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}

/* The library's kernel copies (it calls the libc wrapper; this definition takes its place). */
static int g_vm_counting = 0;
static long long g_vm_calls = 0, g_vm_bytes = 0;
static unsigned long g_vm_max_local = 0;
ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long nl, const struct iovec *r,
                         unsigned long nr, unsigned long flags) {
  if (g_vm_counting) {
    ++g_vm_calls;
    if (nl > g_vm_max_local) g_vm_max_local = nl;
    for (unsigned long i = 0; i < nl; ++i) g_vm_bytes += (long long)l[i].iov_len;
  }
  return syscall(SYS_process_vm_readv, pid, l, nl, r, nr, flags);
}

static int node_local_on(void) {
  const char *v = getenv("LM_NODE_LOCAL");
  return v == NULL || strcmp(v, "0") != 0;
}

typedef struct {
  lm_placement_t src[2], dst[2];
  int ndim;
  int64_t shape[3];
  DLDataType dt;
} entry_t;

enum { kMaxEntries = 32 };

static lm_mesh_t mesh_1d(int reversed) {
  int ranks[8];
  for (int i = 0; i < NP; ++i) ranks[i] = reversed ? NP - 1 - i : i;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = NP;
  int64_t shape[1] = {NP};
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  return m;
}

static lm_mesh_t mesh_2d(void) {
  int64_t shape[2] = {2, NP / 2};
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape, NULL));
  return m;
}

static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* Rank- and entry-dependent values (partial sources differ per rank). */
static void fill(lm_dist_tensor_t t, int salt) {
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = (i * 7 + salt * 131 + ME * 17) % 97 - 40;
    if (v.dtype.code == kDLFloat && v.dtype.bits == 64) ((double *)v.data)[i] = (double)x / 8;
    else if (v.dtype.code == kDLFloat) ((float *)v.data)[i] = (float)x / 4;
    else if (v.dtype.code == kDLBfloat) /* x / 3 in bf16 (its top 16 bits): sums that round */
      ((uint16_t *)v.data)[i] = bf16_bits((float)x / 3);
    else ((int32_t *)v.data)[i] = (int32_t)x;
  }
}

static int same_local(lm_dist_tensor_t a, lm_dist_tensor_t b) {
  DLTensor va, vb;
  LM_ASSERT_OK(lm_dist_tensor_local(a, &va));
  LM_ASSERT_OK(lm_dist_tensor_local(b, &vb));
  int64_t n = (va.dtype.bits / 8);
  for (int d = 0; d < va.ndim; ++d) n *= va.shape[d];
  return va.ndim == vb.ndim && (n == 0 || memcmp(va.data, vb.data, (size_t)n) == 0);
}

/* The group of `n` entries from sm to dm (NULL: sm) against one plan per entry. */
static void check_group(lm_mesh_t sm, lm_mesh_t dm, const entry_t *e, int n, size_t bucket,
                        int nonblocking, const char *what) {
  lm_reshard_entry_t ent[kMaxEntries];
  lm_dist_tensor_t x[kMaxEntries], y[kMaxEntries], ref[kMaxEntries];
  for (int i = 0; i < n; ++i) {
    ent[i] = (lm_reshard_entry_t){e[i].ndim, e[i].shape, e[i].dt, e[i].src, e[i].dst};
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], sm, e[i].ndim, e[i].shape, e[i].dt, LM_CPU, e[i].src));
    fill(x[i], i);
    lm_reshard_plan_t plan = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, sm, e[i].src, dm, e[i].dst, e[i].ndim, e[i].shape, e[i].dt));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&ref[i], plan, LM_CPU));
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x[i], ref[i]));
    LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  }
  lm_reshard_group_config_t cfg = LM_RESHARD_GROUP_CONFIG_INIT;
  cfg.bucket_bytes = bucket;
  lm_reshard_group_t g = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, sm, dm, n, ent, &cfg));
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, n));
  int ok = 1;
  for (int round = 0; round < 2; ++round) { /* twice: the executor's state is reused */
    if (nonblocking) {
      lm_request_t req = NULL;
      LM_ASSERT_OK_ALL(lm_reshard_group_start(&req, g, n, x, y));
      int done = 0;
      while (!done) LM_ASSERT_OK(lm_request_test(&req, &done));
      LM_ASSERT_ALL(req == NULL);
    } else {
      LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, n, x, y));
    }
    for (int i = 0; i < n; ++i) {
      int same = same_local(y[i], ref[i]);
      if (!same) lm_test__diag("rank %d: %s: entry %d differs from its plan's result\n", ME, what, i);
      ok &= same;
    }
  }
  int entries = -1, buckets = -1;
  LM_ASSERT_OK(lm_reshard_group_size(g, &entries, &buckets));
  ok &= entries == n && buckets >= (n > 0) && buckets <= n;
  LM_ASSERT_ALL(ok);
  for (int i = 0; i < n; ++i) {
    lm_dist_tensor_destroy(&x[i]);
    lm_dist_tensor_destroy(&y[i]);
    lm_dist_tensor_destroy(&ref[i]);
  }
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_ALL(g == NULL);
}

static const size_t kBuckets[] = {1, 700, 0 /* default: one bucket */};

static void test_mixed_1d(void **state) {
  (void)state;
  const DLDataType f64 = LM_FLOAT64, f32 = LM_FLOAT32, i32 = LM_INT32, bf16 = LM_BFLOAT16;
  const entry_t e[] = {
      {{P(LM_REDUCE_SUM)}, {S(0)}, 2, {13, 6}, bf16}, /* bf16 sums in one pass per pair */
      {{P(LM_REDUCE_SUM)}, {R}, 1, {37}, f32},
      {{S(0)}, {S(1)}, 2, {16, 12}, f64},
      {{S(0)}, {R}, 2, {7, 5}, f64}, /* uneven all-gather */
      {{R}, {S(1)}, 2, {7, 5}, f32}, /* a slice */
      {{P(LM_REDUCE_SUM)}, {R}, 2, {9, 4}, f64},
      {{P(LM_REDUCE_SUM)}, {S(0)}, 2, {9, 4}, f64}, /* reduce-scatter */
      {{P(LM_REDUCE_MAX)}, {S(1)}, 2, {3, 2}, i32}, /* empty chunks at np > 2 */
      {{P(LM_REDUCE_AVG)}, {S(0)}, 1, {11}, i32},   /* integer avg: wide accumulator */
      {{R}, {P(LM_REDUCE_SUM)}, 1, {10}, f64},
      {{S(0)}, {S(0)}, 1, {2}, f64},                /* nothing to do; empty shards */
      {{S(1)}, {S(0)}, 3, {5, 6, 3}, f32},
      {{P(LM_REDUCE_AVG)}, {R}, 2, {4, 3}, f32},
      {{P(LM_REDUCE_SUM)}, {R}, 0, {0}, f64},       /* a scalar */
  };
  const int n = (int)(sizeof e / sizeof e[0]);
  lm_mesh_t m = mesh_1d(0);
  for (size_t b = 0; b < sizeof kBuckets / sizeof kBuckets[0]; ++b)
    for (int nb = 0; nb < 2; ++nb) {
      char what[64];
      snprintf(what, sizeof what, "1-D, bucket %zu, %s", kBuckets[b], nb ? "start" : "execute");
      check_group(m, NULL, e, n, kBuckets[b], nb, what);
    }
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_cross_mesh_and_2d(void **state) {
  (void)state;
  const DLDataType f64 = LM_FLOAT64, f32 = LM_FLOAT32;
  const entry_t cross[] = {
      {{S(0)}, {S(0)}, 2, {33, 3}, f64},
      {{P(LM_REDUCE_SUM)}, {R}, 2, {5, 6}, f32},
      {{R}, {S(1)}, 2, {4, 9}, f64},
  };
  lm_mesh_t a = mesh_1d(0), b = mesh_1d(1);
  for (size_t k = 0; k < sizeof kBuckets / sizeof kBuckets[0]; ++k)
    check_group(a, b, cross, 3, kBuckets[k], (int)(k % 2), "cross-mesh");
  lm_mesh_destroy(&b);
  LM_ASSERT_OK(lm_mesh_destroy(&a));
  if (NP % 2 != 0 || NP < 4) return; /* 2-D meshes below need an even count >= 4 */
  const entry_t two[] = {
      {{S(0), S(1)}, {R, S(0)}, 2, {11, 6}, f64},
      {{P(LM_REDUCE_SUM), S(0)}, {S(0), R}, 2, {8, 5}, f64},
      {{S(0), S(0)}, {S(1), P(LM_REDUCE_SUM)}, 2, {13, 9}, f32},
      {{R, R}, {S(1), S(0)}, 2, {6, 6}, f64},
  };
  lm_mesh_t m = mesh_2d();
  for (size_t k = 0; k < sizeof kBuckets / sizeof kBuckets[0]; ++k)
    check_group(m, NULL, two, 4, kBuckets[k], (int)(k % 2), "2-D");
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* K identical entries in one bucket send as many messages as one entry's plan does. */
static void test_one_message_per_peer(void **state) {
  (void)state;
  if (node_local_on()) lm_test_skip("node-local messages add descriptors and replies");
  enum { K = 16 };
  const lm_placement_t cases[][2] = {{S(0), R}, {P(LM_REDUCE_SUM), S(0)}, {S(0), S(1)}};
  lm_mesh_t m = mesh_1d(0);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const int64_t shape[2] = {24, 10};
    lm_reshard_entry_t ent[K];
    lm_dist_tensor_t x[K], y[K];
    for (int i = 0; i < K; ++i) {
      ent[i] = (lm_reshard_entry_t){2, shape, LM_FLOAT64, &cases[c][0], &cases[c][1]};
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], m, 2, shape, LM_FLOAT64, LM_CPU, &cases[c][0]));
    }
    lm_reshard_plan_t plan = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &cases[c][0], NULL, &cases[c][1], 2, shape, LM_FLOAT64));
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &info));
    lm_reshard_group_t g = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, K, ent, NULL));
    LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, K));
    LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, K, x, y)); /* warm */
    MPI_Barrier(MPI_COMM_WORLD);
    g_isends = 0;
    g_counting = 1;
    LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, K, x, y));
    g_counting = 0;
    const long long grouped = g_isends;
    MPI_Barrier(MPI_COMM_WORLD);
    g_isends = 0;
    g_counting = 1;
    for (int i = 0; i < K; ++i) LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x[i], y[i]));
    g_counting = 0;
    const long long each = g_isends;
    const int ok = grouped == info.flows_sent && each == K * info.flows_sent;
    if (!ok)
      lm_test__diag("rank %d: case %zu: grouped %lld messages, per tensor %lld, one plan's flows %lld\n",
                    ME, c, grouped, each, (long long)info.flows_sent);
    LM_ASSERT_ALL(ok);
    for (int i = 0; i < K; ++i) {
      lm_dist_tensor_destroy(&x[i]);
      lm_dist_tensor_destroy(&y[i]);
    }
    lm_reshard_plan_destroy(&plan);
    LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  }
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* With the node-local path, a round's message from a peer lands in the K entries' output tensors
 * with no unpacking. LM_TEST_EXPECT_PARTS says how the node-local suite runs this: "kernel" (the
 * arena off): this rank's kernel copies write the K buffers at once and read each received byte
 * once (the sender's run list is one more read); "mapped" (the arena on, its default threshold):
 * the senders copy their small shards, outside the arena, into their arena staging and this rank
 * reads them with memcpy, so the kernel reads only the run lists. */
static void test_parts_in_place(void **state) {
  (void)state;
  const char *expect = getenv("LM_TEST_EXPECT_PARTS");
  const int kernel = expect && strcmp(expect, "kernel") == 0;
  if (NP < 2 || !node_local_on() || !expect || (!kernel && strcmp(expect, "mapped") != 0))
    lm_test_skip("needs 2 ranks, the node-local path and LM_TEST_EXPECT_PARTS=kernel|mapped");
  enum { K = 12 };
  /* Uneven; shards of ~8 KiB (outside the arena), outputs of 16 KiB and more; messages >= 96 KiB. */
  const int64_t n = 1024 * NP + 5;
  const int64_t shape[1] = {n};
  const lm_placement_t s0[] = {S(0)}, r[] = {R};
  lm_mesh_t m = mesh_1d(0);
  lm_reshard_entry_t ent[K];
  lm_dist_tensor_t x[K], y[K], ref[K];
  for (int i = 0; i < K; ++i) {
    ent[i] = (lm_reshard_entry_t){1, shape, LM_FLOAT64, s0, r};
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], m, 1, shape, LM_FLOAT64, LM_CPU, s0));
    fill(x[i], i);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&ref[i], x[i], NULL, r));
  }
  lm_reshard_group_t g = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, K, ent, NULL));
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, K));
  MPI_Barrier(MPI_COMM_WORLD);
  g_vm_calls = g_vm_bytes = 0;
  g_vm_max_local = 0;
  g_vm_counting = 1;
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, K, x, y));
  g_vm_counting = 0;
  /* What this rank receives from the peers on its node (simulated nodes, LM_TEST_NODES=k: world
   * rank r on node r % k; the others' messages travel over MPI): their torch.chunk shards. */
  const char *tn = getenv("LM_TEST_NODES");
  const int nodes = tn && atoi(tn) > 1 ? atoi(tn) : 1;
  const int64_t blk = (n + NP - 1) / NP;
  long long recv_bytes = 0;
  int local_peers = 0;
  for (int p = 0; p < NP; ++p) {
    if (p == ME || p % nodes != ME % nodes) continue;
    const int64_t len = n - p * blk < 0 ? 0 : (n - p * blk < blk ? n - p * blk : blk);
    recv_bytes += (long long)len * 8 * K;
    ++local_peers;
  }
  int ok = 1;
  for (int i = 0; i < K; ++i) ok &= same_local(y[i], ref[i]);
  /* Run lists: 24 bytes per run (PartRun), at most one run per entry and peer. */
  const long long lists = g_vm_bytes - (kernel ? recv_bytes : 0);
  int in_place = lists >= 0 && lists <= 24LL * K * local_peers;
  if (kernel)
    in_place &= local_peers == 0 || (g_vm_max_local >= (unsigned long)K && g_vm_calls >= local_peers);
  else  /* none: the data and the senders' run lists (copied into their arena staging) mapped */
    in_place &= g_vm_calls == 0;
  /* With simulated nodes the other "node's" messages go over MPI, whose own single copy (Open MPI's
   * CMA) counts here too: only the kernel copy into the K outputs tells the path apart then. */
  if (nodes > 1) in_place = !kernel || local_peers == 0 || g_vm_max_local >= (unsigned long)K;
  if (!in_place || !ok)
    lm_test__diag("rank %d: %s: %lld kernel reads of %lld bytes (%lld received), at most %lu "
                  "buffers in one; results %s\n", ME, expect, g_vm_calls, g_vm_bytes, recv_bytes,
                  g_vm_max_local, ok ? "right" : "WRONG");
  LM_ASSERT_ALL(ok && in_place);
  for (int i = 0; i < K; ++i) {
    lm_dist_tensor_destroy(&x[i]);
    lm_dist_tensor_destroy(&y[i]);
    lm_dist_tensor_destroy(&ref[i]);
  }
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Partial sources borrowed from malloc'd arrays (outside the shared arena: a node-local sender
 * copies their small chunks into its arena staging, where a held receive reduces them): an odd
 * count of bf16 chunk bytes before an f64 chunk must not leave the f64 one misaligned there
 * (UBSan's alignment check in the sanitizer build), and the sums must match each entry's plan. */
static void test_borrowed_partials(void **state) {
  (void)state;
  enum { K = 4 };
  const lm_placement_t ps[] = {P(LM_REDUCE_SUM)}, s0[] = {S(0)};
  const DLDataType dts[K] = {LM_BFLOAT16, LM_FLOAT64, LM_BFLOAT16, LM_FLOAT32};
  const int64_t n[K] = {16385 * NP, 4096 * NP, 3075 * NP, 3072 * NP};  /* chunks of 2-32 KiB */
  lm_mesh_t m = mesh_1d(0);
  lm_reshard_entry_t ent[K];
  lm_dist_tensor_t x[K], y[K], ref[K];
  void *buf[K];
  for (int i = 0; i < K; ++i) {
    const size_t es = dts[i].bits / 8;
    buf[i] = malloc((size_t)n[i] * es);
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = buf[i];
    t.device = (DLDevice){kDLCPU, 0};
    t.ndim = 1;
    t.dtype = dts[i];
    t.shape = (int64_t *)&n[i];
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x[i], m, &t, ps, LM_SHAPE_GIVEN, &n[i],
                                               LM_FROM_LOCAL_BORROW));
    fill(x[i], 40 + i);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&ref[i], x[i], NULL, s0));
    ent[i] = (lm_reshard_entry_t){1, &n[i], dts[i], ps, s0};
  }
  lm_reshard_group_t g = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, K, ent, NULL));
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, K));
  int ok = 1;
  for (int round = 0; round < 2; ++round) {
    LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, K, x, y));
    for (int i = 0; i < K; ++i) ok &= same_local(y[i], ref[i]);
  }
  if (!ok) lm_test__diag("rank %d: a borrowed Partial group differs from its plans\n", ME);
  LM_ASSERT_ALL(ok);
  for (int i = 0; i < K; ++i) {
    lm_dist_tensor_destroy(&x[i]);
    lm_dist_tensor_destroy(&y[i]);
    lm_dist_tensor_destroy(&ref[i]);
    free(buf[i]);
  }
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* A list of tensors resharded once, the way the bindings' reshard_many go: a group made from the
 * tensors' entries, its targets allocated, executed and destroyed. The same bits as one
 * lm_dist_tensor_reshard per tensor; an entry without target placements is refused naming it,
 * leaving no group; n = 0 takes NULL arrays; n > 0 refuses a NULL out, before any work. */
static void test_one_shot(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d(0);
  const int64_t shape[2] = {9, 6};
  const lm_placement_t s0[] = {S(0)}, s1[] = {S(1)}, r[] = {R};
  const lm_placement_t *to[3] = {r, s1, s0};
  lm_dist_tensor_t x[3], out[3] = {NULL, NULL, NULL}, ref = NULL;
  lm_reshard_entry_t e[3];
  for (int i = 0; i < 3; ++i) {
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], m, 2, shape, LM_FLOAT32, LM_CPU, s0));
    fill(x[i], i + 3);
    e[i] = (lm_reshard_entry_t){2, shape, LM_FLOAT32, s0, to[i]};
  }
  lm_reshard_group_t g = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 3, e, NULL));
  LM_ASSERT_OK(lm_reshard_group_alloc_targets(out, g, LM_CPU, 3));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, 3, x, out));
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  int ok = 1;
  for (int i = 0; i < 3; ++i) {
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&ref, x[i], NULL, to[i]));
    ok &= out[i] != NULL && same_local(out[i], ref);
    lm_dist_tensor_destroy(&ref);
  }
  LM_ASSERT_ALL(ok);
  lm_reshard_entry_t bad[3] = {e[0], e[1], e[2]};
  bad[1].dst_placements = NULL;
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 3, bad, NULL), LM_ERR_INVALID_ARGUMENT,
                "entries[1]");
  LM_ASSERT_ALL(g == NULL);
  /* n = 0 takes NULL arrays, out included; n > 0 refuses a NULL out, before any work. */
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 0, NULL, NULL));
  LM_ASSERT_OK(lm_reshard_group_alloc_targets(NULL, g, LM_CPU, 0));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, 0, NULL, NULL));
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 3, e, NULL));
  LM_EXPECT_ALL(lm_reshard_group_alloc_targets(NULL, g, LM_CPU, 3), LM_ERR_INVALID_ARGUMENT,
                "lm_reshard_group_alloc_targets: out is NULL with n = 3");
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  for (int i = 0; i < 3; ++i) {
    lm_dist_tensor_destroy(&out[i]);
    lm_dist_tensor_destroy(&x[i]);
  }
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_arguments(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d(0);
  const int64_t shape[1] = {12};
  const lm_placement_t s0[] = {S(0)}, r[] = {R};
  lm_reshard_entry_t ent[2] = {{1, shape, LM_FLOAT64, s0, r}, {1, shape, LM_FLOAT64, s0, r}};
  lm_reshard_group_t g = NULL;
  LM_EXPECT_ALL(lm_reshard_group_create(NULL, m, NULL, 2, ent, NULL), LM_ERR_INVALID_ARGUMENT, "group");
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, -1, ent, NULL), LM_ERR_INVALID_ARGUMENT, "n is -1");
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 2, NULL, NULL), LM_ERR_INVALID_ARGUMENT, "entries");
  lm_reshard_entry_t broken[2] = {ent[0], {1, shape, LM_FLOAT64, s0, NULL}};
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 2, broken, NULL), LM_ERR_INVALID_ARGUMENT,
                "entries[1]");
  lm_reshard_group_config_t cfg = LM_RESHARD_GROUP_CONFIG_INIT;
  cfg.magic = LM_MESH_CONFIG_MAGIC; /* another struct's magic */
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 2, ent, &cfg), LM_ERR_INVALID_ARGUMENT,
                "config->magic");
  cfg.magic = LM_RESHARD_GROUP_CONFIG_MAGIC;
  cfg.version = 7;
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 2, ent, &cfg), LM_ERR_INVALID_ARGUMENT, "config->version");
  cfg.version = LM_RESHARD_GROUP_CONFIG_VERSION;
  cfg.size = 4;
  LM_EXPECT_ALL(lm_reshard_group_create(&g, m, NULL, 2, ent, &cfg), LM_ERR_INVALID_ARGUMENT, "config->size");
  LM_ASSERT_ALL(g == NULL);
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 2, ent, NULL));

  lm_dist_tensor_t x[2], y[2], wrong = NULL;
  for (int i = 0; i < 2; ++i) LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], m, 1, shape, LM_FLOAT64, LM_CPU, s0));
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, 2));
  LM_EXPECT_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, 3), LM_ERR_INVALID_ARGUMENT, "n is 3");
  LM_EXPECT_ALL(lm_reshard_group_alloc_targets(NULL, g, LM_CPU, 2), LM_ERR_INVALID_ARGUMENT,
                "lm_reshard_group_alloc_targets: out is NULL with n = 2");
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 1, x, y), LM_ERR_INVALID_ARGUMENT, "n is 1");
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 2, NULL, y), LM_ERR_INVALID_ARGUMENT, "src is NULL");
  lm_dist_tensor_t twice[2] = {y[0], y[0]};
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 2, x, twice), LM_ERR_INVALID_ARGUMENT, "dst[1]");
  lm_dist_tensor_t crossed[2] = {y[0], x[0]}; /* a target that is another entry's source */
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&wrong, m, 1, shape, LM_FLOAT64, LM_CPU, r));
  lm_dist_tensor_t xs[2] = {x[0], wrong};
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 2, xs, y), LM_ERR_INVALID_ARGUMENT, "src[1]");
  (void)crossed;
  lm_dist_tensor_t src_as_dst[2] = {x[1], y[1]};
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 2, x, src_as_dst), LM_ERR_INVALID_ARGUMENT, "dst[0]");
  /* A request in flight: the group cannot be destroyed or run again until it completes. */
  lm_request_t req = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_start(&req, g, 2, x, y));
  if (NP > 1) LM_ASSERT_ALL(req != NULL);
  lm_reshard_group_t keep = g;
  if (req) {
    LM_EXPECT_ALL(lm_reshard_group_destroy(&keep), LM_ERR_INVALID_USAGE, "in flight");
    lm_request_t second = NULL;
    LM_EXPECT_ALL(lm_reshard_group_start(&second, g, 2, x, y), LM_ERR_INVALID_ARGUMENT, "in flight");
    LM_ASSERT_ALL(second == NULL);
  }
  LM_ASSERT_OK_ALL(lm_request_wait(&req));
  lm_reshard_group_t dead = g;
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_OK(lm_reshard_group_destroy(&g)); /* NULL-safe */
  LM_EXPECT_ALL(lm_reshard_group_execute(dead, 2, x, y), LM_ERR_INVALID_ARGUMENT, "group");
  /* A group of no entries is fine: every call takes n = 0 with NULL arrays (one rule). */
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 0, NULL, NULL));
  int gn = -1, gb = -1;
  LM_ASSERT_OK(lm_reshard_group_size(g, &gn, &gb));
  LM_ASSERT_ALL(gn == 0 && gb == 0);
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(NULL, g, LM_CPU, 0));
  LM_EXPECT_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, 1), LM_ERR_INVALID_ARGUMENT,
                "n is 1, the group has 0 entries");
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(g, 0, NULL, NULL));
  LM_ASSERT_OK_ALL(lm_reshard_group_start(&req, g, 0, NULL, NULL));
  LM_ASSERT_OK_ALL(lm_request_wait(&req));
  LM_ASSERT_ALL(req == NULL);
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  for (int i = 0; i < 2; ++i) {
    lm_dist_tensor_destroy(&x[i]);
    lm_dist_tensor_destroy(&y[i]);
  }
  lm_dist_tensor_destroy(&wrong);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Ranks that run different groups fail together, naming what differs; no data moves. */
static void test_agreement(void **state) {
  (void)state;
  if (NP < 2) lm_test_skip("needs 2 ranks");
  lm_mesh_t m = mesh_1d(0);
  const int64_t shape[1] = {12}, other[1] = {13};
  const lm_placement_t s0[] = {S(0)}, r[] = {R};
  lm_reshard_entry_t ent[2] = {{1, shape, LM_FLOAT64, s0, r}, {1, ME == 1 ? other : shape, LM_FLOAT64, s0, r}};
  lm_reshard_group_t g = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&g, m, NULL, 2, ent, NULL));
  lm_dist_tensor_t x[2], y[2];
  for (int i = 0; i < 2; ++i)
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x[i], m, 1, ent[i].global_shape, LM_FLOAT64, LM_CPU, s0));
  LM_ASSERT_OK_ALL(lm_reshard_group_alloc_targets(y, g, LM_CPU, 2));
  LM_EXPECT_ALL(lm_reshard_group_execute(g, 2, x, y), LM_ERR_MISMATCH, "entries' layouts");
  for (int i = 0; i < 2; ++i) {
    lm_dist_tensor_destroy(&x[i]);
    lm_dist_tensor_destroy(&y[i]);
  }
  LM_ASSERT_OK(lm_reshard_group_destroy(&g));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mixed_1d),
    cmocka_unit_test(test_cross_mesh_and_2d),
    cmocka_unit_test(test_one_message_per_peer),
    cmocka_unit_test(test_borrowed_partials),
    cmocka_unit_test(test_one_shot),
    cmocka_unit_test(test_arguments),
    cmocka_unit_test(test_agreement),
};

/* test_parts_in_place belongs to the suite where the node-local suite asks for it
 * (LM_TEST_EXPECT_PARTS, tests/script_node_local.sh); elsewhere it is not part of it, not a skip. */
/* test_one_message_per_peer counts the messages of a plan's executions against a group's; where
 * even steps run as MPI collectives (LM_MPI_COLLECTIVES) a plan sends none. This suite keeps
 * the message path unless told otherwise. */
static void keep_messages(void) __attribute__((constructor));
static void keep_messages(void) { setenv("LM_MPI_COLLECTIVES", "0", 0); }

LM_TEST_MAIN_WITH(tests, "LM_TEST_EXPECT_PARTS", test_parts_in_place)
