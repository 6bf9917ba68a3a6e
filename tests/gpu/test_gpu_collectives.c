/* SPDX-License-Identifier: BSD-3-Clause */
/* Device reshards on NCCL take NCCL's collectives where a step's blocks allow (issue 41,
 * src/plan/collective.hpp) and grouped ncclSend/ncclRecv elsewhere. On a 1-D mesh of all ranks,
 * each case reshards a device tensor with a persistent plan and checks on every rank:
 *   - the values, against the host's arithmetic (small integers: exact in every dtype and order);
 *   - the NCCL calls of that execution (tests/gpu/nccl_calls.h: the test interposes NCCL, and
 *     under the simulator compares with its own record): where the transport is NCCL and
 *     collectives are on (LM_NCCL_COLLECTIVES unset or 1), an even case issues exactly one
 *     collective, of its kind, and no ncclSend/ncclRecv; every other case (uneven shards, ragged,
 *     block-cyclic, int16 that NCCL cannot reduce, integer avg; and every case under
 *     LM_NCCL_COLLECTIVES=0) issues no collective and sends and receives exactly the bytes its
 *     blocks hold, each byte once. An all-reduce needs no even split: Partial -> Replicate of an
 *     uneven shape is one all-reduce too.
 * Staged through host (ranks sharing a GPU) or at np 1: no NCCL call at all. */
// lm-test-np: 1 2 3 4
#define _GNU_SOURCE /* RTLD_NEXT (nccl_calls.h) */
#include "gpu_test.h"
#include "nccl_calls.h"

#include <stdlib.h>
#include <string.h>

/* The bytes a case sends and receives as messages: none, or those of a gather to Replicate, a
 * reduce-scatter, both (Partial -> Replicate), an all-to-all. */
enum traffic { T_NONE, T_GATHER, T_RSCATTER, T_ALLRED, T_ALLTOALL };

typedef struct {
  const char *name;
  int64_t g[2];
  lm_placement_t from, to;
  DLDataType dt;
  int coll;             /* where collectives are on: the one collective expected (-1: none) */
  enum traffic on;      /* ... and the messages beside it */
  enum traffic off;     /* the messages where collectives are off (LM_NCCL_COLLECTIVES=0) */
  int rs_dim;           /* P -> R: the dim the planner's reduce-scatter splits */
} coll_case;

static size_t es_of(DLDataType t) { return t.bits / 8; }

static void put(DLDataType t, void *buf, int64_t i, double v) {
  if (t.code == kDLFloat && t.bits == 32) ((float *)buf)[i] = (float)v;
  else if (t.code == kDLFloat) ((double *)buf)[i] = v;
  else if (t.bits == 16) ((int16_t *)buf)[i] = (int16_t)v;
  else ((int32_t *)buf)[i] = (int32_t)v;
}
static double get(DLDataType t, const void *buf, int64_t i) {
  if (t.code == kDLFloat && t.bits == 32) return ((const float *)buf)[i];
  if (t.code == kDLFloat) return ((const double *)buf)[i];
  if (t.bits == 16) return ((const int16_t *)buf)[i];
  return ((const int32_t *)buf)[i];
}

/* Element i of the source (global row-major index), and rank r's contribution to a Partial. */
static double value(int64_t i) { return (double)(i % 97) - 40; }
static double part(int64_t i, int r) { return (double)(i % 13) + r - 3; }
/* The target's element i: the value, or the reduction of every rank's part. */
static double expected(const coll_case *c, int64_t i) {
  const int np = lm_test_size();
  if (c->from.kind != LM_PARTIAL) return value(i);
  double s = 0, mx = part(i, 0);
  for (int r = 0; r < np; ++r) s += part(i, r), mx = part(i, r) > mx ? part(i, r) : mx;
  if (c->from.reduce_op == LM_REDUCE_MAX) return mx;
  if (c->from.reduce_op != LM_REDUCE_AVG) return s;
  return c->dt.code == kDLFloat ? s / np : (double)((int64_t)s / np); /* ints: toward zero */
}

/* Uploads fn(global index) into a device tensor's shard (a compact box: its offset and shape). */
static void fill(lm_dist_tensor_t t, const coll_case *c, int partial) {
  DLTensor v;
  int64_t off[2] = {0, 0};
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  const int64_t n = v.shape[0] * v.shape[1];
  void *h = malloc((size_t)(n ? n : 1) * es_of(c->dt));
  for (int64_t a = 0; a < v.shape[0]; ++a)
    for (int64_t b = 0; b < v.shape[1]; ++b) {
      const int64_t i = (off[0] + a) * c->g[1] + off[1] + b;
      put(c->dt, h, a * v.shape[1] + b, partial ? part(i, lm_test_rank()) : value(i));
    }
  lm_gpu_copy_to(v.data, h, (size_t)n * es_of(c->dt));
  free(h);
}

/* The case's source: a Partial filled with each rank's parts, or the values resharded locally
 * from a replicated tensor (no message: Replicate -> anything but Partial is local). */
static lm_dist_tensor_t make_source(lm_mesh_t m, const coll_case *c) {
  lm_dist_tensor_t t = NULL, rep = NULL;
  const lm_placement_t R = LM_PLACEMENT_REPLICATE;
  if (c->from.kind == LM_PARTIAL) {
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, c->g, c->dt, lm_gpu_dev(), &c->from));
    fill(t, c, 1);
    return t;
  }
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&rep, m, 2, c->g, c->dt, lm_gpu_dev(), &R));
  fill(rep, c, 0);
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &R, NULL, &c->from, 2, c->g, c->dt));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&t, p, lm_gpu_dev()));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, rep, t));
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&rep));
  return t;
}

/* Whether the target's shard holds the expected values. */
static int holds(lm_dist_tensor_t t, const coll_case *c) {
  DLTensor v;
  int64_t off[2] = {0, 0};
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  const int64_t n = v.shape[0] * v.shape[1];
  void *h = malloc((size_t)(n ? n : 1) * es_of(c->dt));
  lm_gpu_download(h, v.data, (size_t)n * es_of(c->dt));
  int ok = 1;
  for (int64_t a = 0; a < v.shape[0] && ok; ++a)
    for (int64_t b = 0; b < v.shape[1]; ++b) {
      const int64_t i = (off[0] + a) * c->g[1] + off[1] + b;
      if (get(c->dt, h, a * v.shape[1] + b) == expected(c, i)) continue;
      fprintf(stderr, "rank %d: %s: element %lld is %g, not %g\n", lm_test_rank(), c->name,
              (long long)i, get(c->dt, h, a * v.shape[1] + b), expected(c, i));
      ok = 0;
      break;
    }
  free(h);
  return ok;
}

static int64_t shard_bytes(lm_dist_tensor_t t, size_t es) {
  int64_t s[2] = {0, 0};
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, s, 2));
  return s[0] * s[1] * (int64_t)es;
}
static int64_t chunk_len(int64_t n, int64_t i) {
  int64_t off = 0, len = 0;
  LM_ASSERT_OK(lm_layout_chunk(n, lm_test_size(), i, &off, &len));
  return len;
}

/* The bytes this rank sends and receives in messages of traffic t (each byte once). */
static void message_bytes(const coll_case *c, enum traffic t, lm_dist_tensor_t src,
                          lm_dist_tensor_t dst, int64_t *send, int64_t *recv) {
  const int np = lm_test_size(), me = lm_test_rank();
  const int64_t es = (int64_t)es_of(c->dt), total = c->g[0] * c->g[1] * es;
  const int64_t in = shard_bytes(src, (size_t)es), out = shard_bytes(dst, (size_t)es);
  const int64_t rs = (c->rs_dim ? c->g[0] * chunk_len(c->g[1], me) : chunk_len(c->g[0], me) * c->g[1]) *
                     es; /* P -> R: this rank's reduce-scatter chunk */
  const int64_t self = chunk_len(c->g[0], me) * chunk_len(c->g[1], me) * es;
  *send = *recv = 0;
  switch (t) {
    case T_NONE: break;
    case T_GATHER: *send = (np - 1) * in, *recv = total - in; break;
    case T_RSCATTER: { /* this rank's chunk: its target shard, or P -> R's S(0) chunk */
      const int64_t mine = c->to.kind == LM_REPLICATE ? rs : out;
      *send = total - mine, *recv = (np - 1) * mine;
      break;
    }
    case T_ALLRED: *send = *recv = total - rs + (np - 1) * rs; break;
    case T_ALLTOALL: *send = in - self, *recv = out - self; break;
  }
}

/* Whether d holds exactly one collective call, of kind coll (-1: none). */
static int one_collective(const lm_nccl_counts *d, int coll) {
  if (coll < 0) return lm_nccl_collectives(d) == 0;
#ifdef CUDASIM_VERSION
  return d->calls[coll] == 1 && lm_nccl_collectives(d) == 1;
#else /* ncclAlltoAll is not interposed (nccl_calls.h): then the others must be silent */
  return coll == LM_NC_ALLTOALL ? lm_nccl_collectives(d) == 0
                                : d->calls[coll] == 1 && lm_nccl_collectives(d) == 1;
#endif
}

/* The NCCL calls d of one execution are those the case calls for (on: NCCL with np > 1): its
 * collective, and messages of exactly the bytes expected (send, recv). */
static int calls_as_expected(const coll_case *c, const lm_nccl_counts *d, int on, int coll,
                             int64_t send, int64_t recv) {
  int ok;
  if (!on)
    ok = lm_nccl_collectives(d) == 0 && d->calls[LM_NC_SEND] == 0 && d->calls[LM_NC_RECV] == 0;
  else
    ok = one_collective(d, coll) && d->bytes[LM_NC_SEND] == send && d->bytes[LM_NC_RECV] == recv;
  if (!ok)
    fprintf(stderr, "rank %d: %s (NCCL %d, expected %s): send %ld/%lld B (expected %lld B), recv "
            "%ld/%lld B (%lld B), all-gather %ld, reduce-scatter %ld, all-reduce %ld, all-to-all "
            "%ld\n", lm_test_rank(), c->name, on, coll >= 0 ? lm_nc_names[coll] : "messages",
            d->calls[LM_NC_SEND], d->bytes[LM_NC_SEND], (long long)send, d->calls[LM_NC_RECV],
            d->bytes[LM_NC_RECV], (long long)recv, d->calls[LM_NC_ALLGATHER],
            d->calls[LM_NC_REDUCESCATTER], d->calls[LM_NC_ALLREDUCE], d->calls[LM_NC_ALLTOALL]);
  return ok;
}

/* One case: a plan executed once, its calls counted, its values checked. */
static void run_case(lm_mesh_t m, const coll_case *c) {
  lm_dist_tensor_t src = make_source(m, c), dst = NULL;
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &c->from, NULL, &c->to, 2, c->g, c->dt));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, p, lm_gpu_dev()));
  lm_nccl_counts a, b, d;
  lm_nccl_snapshot(&a);
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(p, src, dst));
  lm_nccl_snapshot(&b);
  lm_nccl_since(&a, &b, &d);
  int tr = -1;
  LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCUDA, &tr));
  const char *ce = getenv("LM_NCCL_COLLECTIVES");
  int coll = ce && !strcmp(ce, "0") ? -1 : c->coll;
  if (coll == LM_NC_ALLTOALL && !lm_nccl_has_alltoall()) coll = -1;
  int64_t send = 0, recv = 0;
  message_bytes(c, coll < 0 ? c->off : c->on, src, dst, &send, &recv);
  const int on = tr == LM_TRANSPORT_NCCL && lm_test_size() > 1;
  LM_ASSERT_ALL(calls_as_expected(c, &d, on, coll, send, recv));
  LM_ASSERT_ALL(holds(dst, c));
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&dst));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&src));
}

static void test_collectives(void **state) {
  (void)state;
  const int64_t n = lm_test_size();
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE, Psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM),
                       Pavg = LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG),
                       Pmax = LM_PLACEMENT_PARTIAL(LM_REDUCE_MAX),
                       BC = LM_PLACEMENT_BLOCK_CYCLIC(0, 2, 0);
  int64_t ext[64];
  for (int64_t r = 0; r < n; ++r) ext[r] = r + 1; /* ragged rows 1, 2, ..., n */
  int32_t id = 0;
  LM_ASSERT_OK(lm_extents_create(&id, ext, n));
  const lm_placement_t RS0 = LM_PLACEMENT_RAGGED(0, id);
  const coll_case cases[] = {
      {"S0->R even", {4 * n, 3}, S0, R, LM_FLOAT32, LM_NC_ALLGATHER, T_NONE, T_GATHER, 0},
      {"S1->R even (unpacked)", {3, 2 * n}, S1, R, LM_FLOAT32, LM_NC_ALLGATHER, T_NONE, T_GATHER, 0},
      {"P->S0 even", {2 * n, 5}, Psum, S0, LM_FLOAT32, LM_NC_REDUCESCATTER, T_NONE, T_RSCATTER, 0},
      {"P->S1 even (packed)", {3, 2 * n}, Psum, S1, LM_FLOAT64, LM_NC_REDUCESCATTER, T_NONE,
       T_RSCATTER, 0},
      {"P->R even", {2 * n, 3}, Psum, R, LM_FLOAT32, LM_NC_ALLREDUCE, T_NONE, T_ALLRED, 0},
      {"P->R uneven", {2 * n + 1, 3}, Psum, R, LM_FLOAT32, LM_NC_ALLREDUCE, T_NONE, T_ALLRED, 0},
      {"P->R scattered along dim 1", {3, 4 * n}, Psum, R, LM_FLOAT32, LM_NC_ALLREDUCE, T_NONE,
       T_ALLRED, 1},
      {"P(avg)->R float", {2 * n, 3}, Pavg, R, LM_FLOAT32, LM_NC_ALLREDUCE, T_NONE, T_ALLRED, 0},
      {"P(max)->S0 int32", {2 * n, 4}, Pmax, S0, LM_INT32, LM_NC_REDUCESCATTER, T_NONE, T_RSCATTER, 0},
      {"S0->S1 even", {2 * n, 3 * n}, S0, S1, LM_FLOAT32, LM_NC_ALLTOALL, T_NONE, T_ALLTOALL, 0},
      /* not even, not reducible by NCCL, not plain shards: messages (an even step beside one
       * that is not still takes its collective) */
      {"S0->R uneven", {4 * n + 1, 3}, S0, R, LM_FLOAT32, -1, T_GATHER, T_GATHER, 0},
      {"P->S0 uneven", {2 * n + 1, 5}, Psum, S0, LM_FLOAT32, -1, T_RSCATTER, T_RSCATTER, 0},
      {"P->R int16 (NCCL reduces none)", {2 * n, 3}, Psum, R, LM_INT16, LM_NC_ALLGATHER,
       T_RSCATTER, T_ALLRED, 0},
      {"P(avg)->R int32 (128-bit avg)", {2 * n, 3}, Pavg, R, LM_INT32, LM_NC_ALLGATHER, T_RSCATTER,
       T_ALLRED, 0},
      {"ragged S0->R", {n * (n + 1) / 2, 3}, RS0, R, LM_FLOAT32, -1, T_GATHER, T_GATHER, 0},
      {"block-cyclic S0->R", {4 * n + 2, 3}, BC, R, LM_FLOAT32, -1, T_GATHER, T_GATHER, 0},
  };
  lm_mesh_t m = lm_gpu_mesh_1d();
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) run_case(m, &cases[k]);
  LM_ASSERT_ALL(lm_nccl_check_sim());
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  if (lm_test_rank() == 0)
    printf("test_gpu_collectives: %zu cases (LM_NCCL_COLLECTIVES=%s)\n",
           sizeof cases / sizeof cases[0], getenv("LM_NCCL_COLLECTIVES") ? getenv("LM_NCCL_COLLECTIVES") : "1");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_collectives),
};
LM_GPU_TEST_MAIN(tests)
