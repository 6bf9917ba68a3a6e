/* SPDX-License-Identifier: BSD-3-Clause */
/* Reshard benchmark: for each case, times localmap and, in the same run, the raw MPI call that
 * moves the same bytes. Median of REPS repetitions after WARMUP, each the max over ranks.
 * Rank 0 prints one JSON object per line:
 *   {"case","np","bytes","dtype","lm_ms","baseline","baseline_ms","ratio","sent_bytes_rank0",
 *    "plan_ms","peak_extra_bytes","reshard_peak_extra_bytes",...}
 * plan_ms: median lm_reshard_plan_create time (max over ranks); peak_extra_bytes: the rise of the
 * buffer pool's high-water mark during one lm_reshard_plan_execute into a preallocated target
 * (staging and intermediates), reshard_peak_extra_bytes the same for the allocating
 * lm_dist_tensor_reshard (target included); max over ranks; -1 with a library without
 * lm_pool_stats. "plan:" lines time plan creation alone at 1 MiB and 128 MiB.
 * memcpy_floor_ms: every rank at once memcpys the bytes it sends in the plan (the largest over
 * ranks) from one touched buffer into another; floor_ratio = lm_ms / memcpy_floor_ms (0 where
 * nothing moves). target_floor_ms: the same for the bytes of each rank's target shard, every one
 * of which a reshard must write once (received or copied from its own source): the floor of a
 * path that moves each byte once; target_floor_ratio = lm_ms / target_floor_ms. "node_local"
 * says whether the node-local path was on (LM_NODE_LOCAL).
 * --sweep adds S0->S1, S1->S0 and S0->R at 32 KiB .. 128 MiB (case suffix ":n<N>"), the data of
 * the time-per-byte plot (bench/plot.py).
 * Usage: mpirun -np N bench_reshard [--n 4096] [--reps 10] [--small-only] [--plan-only] [--sweep]
 *        [--sweep-max N (largest n of the sweep, default 4096)] [--sweep-only] */
#include <localmap.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static int rank, np, REPS = 10, WARMUP = 2;
static int wf;
/* Weak, so that the same benchmark also runs against an older library (before/after figures). */
extern lm_status_t lm_pool_stats(int64_t *in_use, int64_t *peak, int reset_peak) __attribute__((weak));
static double g_plan_ms;
static int64_t g_peak_plan, g_peak_reshard;
static double g_floor_ms, g_tfloor_ms;
static int64_t g_sweep_max = 4096;


/* Runs fn REPS times after WARMUP, returns the median over reps of the max over ranks (ms). */
typedef void (*op_fn)(void *);
static double timeit(op_fn fn, void *arg) {
  double t[64];
  for (int i = 0; i < WARMUP; ++i) fn(arg);
  for (int i = 0; i < REPS; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fn(arg);
    t[i] = (MPI_Wtime() - t0) * 1e3;
  }
  MPI_Allreduce(MPI_IN_PLACE, t, REPS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(t, (size_t)REPS, sizeof(double), bench_cmp);
  return REPS % 2 ? t[REPS / 2] : 0.5 * (t[REPS / 2 - 1] + t[REPS / 2]);
}

/* ---------------------------------------------------------------- localmap side */
typedef struct {
  lm_reshard_plan_t plan;
  lm_dist_tensor_t src, dst;
  lm_mesh_t smesh;
  const lm_placement_t *dp;
  lm_mesh_t dmesh;
} lm_case;
static void lm_run(void *a) {
  lm_case *c = a;
  OK(lm_reshard_plan_execute(c->plan, c->src, c->dst));
}
static void lm_run_reshard(void *a) { /* the plain call (plan cache, allocates its output) */
  lm_case *c = a;
  lm_dist_tensor_t out;
  OK(lm_dist_tensor_reshard(&out, c->src, c->dmesh, c->dp));
  OK(lm_dist_tensor_destroy(&out));
}

/* ---------------------------------------------------------------- MPI baselines */
typedef struct {
  void *sbuf, *rbuf, *tmp;
  size_t bytes;    /* per rank send bytes (block) */
  int *counts, *displs;
  int n, kind;
  MPI_Comm comm;
  int peer;
} base_case;
static void b_allgather(void *a) {
  base_case *b = a;
  MPI_Allgather(b->sbuf, (int)b->bytes, MPI_BYTE, b->rbuf, (int)b->bytes, MPI_BYTE, b->comm);
}
static void b_allgatherv(void *a) {
  base_case *b = a;
  MPI_Allgatherv(b->sbuf, b->counts[rank], MPI_BYTE, b->rbuf, b->counts, b->displs, MPI_BYTE, b->comm);
}
static void b_alltoall(void *a) {
  base_case *b = a;
  MPI_Alltoall(b->sbuf, (int)b->bytes, MPI_BYTE, b->rbuf, (int)b->bytes, MPI_BYTE, b->comm);
}
static void b_rsb(void *a) {
  base_case *b = a;
  MPI_Reduce_scatter_block(b->sbuf, b->rbuf, b->n, MPI_DOUBLE, MPI_SUM, b->comm);
}
/* Pairwise reduce-scatter with the reduction fused as blocks arrive (n doubles per block). */
static void b_pairwise_rs(void *a) {
  base_case *b = a;
  int n = b->n;
  double *s = b->sbuf, *r = b->rbuf, *t = b->tmp;
  MPI_Request req[2 * 64];
  int k = 0;
  for (int j = 0; j < np; ++j)
    if (j != rank) MPI_Irecv(t + (size_t)n * (j < rank ? j : j - 1), n, MPI_DOUBLE, j, 7, b->comm, &req[k++]);
  for (int j = 0; j < np; ++j)
    if (j != rank) MPI_Isend(s + (size_t)n * j, n, MPI_DOUBLE, j, 7, b->comm, &req[k++]);
  memcpy(r, s + (size_t)n * rank, sizeof(double) * (size_t)n);
  for (int j = 0; j < np - 1; ++j) {
    MPI_Wait(&req[j], MPI_STATUS_IGNORE);
    const double *x = t + (size_t)n * j;
    for (int i = 0; i < n; ++i) r[i] += x[i];
  }
  MPI_Waitall(k - (np - 1), req + (np - 1), MPI_STATUSES_IGNORE);
}
static void b_rs_ag(void *a) { /* pairwise reduce-scatter + allgather (in place) */
  base_case *b = a;
  double *full = b->rbuf;
  b->rbuf = full + (size_t)b->n * rank;
  b_pairwise_rs(a);
  b->rbuf = full;
  MPI_Allgather(MPI_IN_PLACE, b->n, MPI_DOUBLE, full, b->n, MPI_DOUBLE, b->comm);
}
static void b_allreduce(void *a) {
  base_case *b = a;
  MPI_Allreduce(b->sbuf, b->rbuf, b->n * np, MPI_DOUBLE, MPI_SUM, b->comm);
}
static void b_p2p(void *a) { /* cross-mesh: ranks of the first half send to the second half */
  base_case *b = a;
  if (b->peer < 0) return;
  if (b->kind == 0)
    MPI_Send(b->sbuf, (int)b->bytes, MPI_BYTE, b->peer, 9, b->comm);
  else
    MPI_Recv(b->rbuf, (int)b->bytes, MPI_BYTE, b->peer, 9, b->comm, MPI_STATUS_IGNORE);
}
static void b_nothing(void *a) { (void)a; }

/* The hand-written MPI equivalents of S(0) -> S(1) (dir 0) and S(1) -> S(0) (dir 1) on an n x n
 * float64 tensor, n divisible by np: what a user writing the reshard with MPI alone would run.
 * The strided side (the source's column block for S0->S1, the target's for S1->S0) is either
 * described by subarray datatypes (MPI_Alltoallw) or packed/unpacked by a loop around
 * MPI_Alltoall. MPI_Alltoall alone (the issue's baseline) moves the same bytes without the pack. */
typedef struct {
  int dir, r, n;
  double *src, *dst, *tmp;
  MPI_Datatype *st, *rt;
  int *one, *zero;
} hand_case;
static void b_alltoallw(void *a) {
  hand_case *h = a;
  MPI_Alltoallw(h->src, h->one, h->zero, h->st, h->dst, h->one, h->zero, h->rt, MPI_COMM_WORLD);
}
static void b_pack_alltoall(void *a) {
  hand_case *h = a;
  const int r = h->r, n = h->n;
  const size_t blk = (size_t)r * (size_t)r;
  if (h->dir == 0) { /* src r x n: pack column block j of every row, then contiguous blocks */
    for (int j = 0; j < np; ++j)
      for (int i = 0; i < r; ++i)
        memcpy(h->tmp + blk * (size_t)j + (size_t)i * r, h->src + (size_t)i * n + (size_t)j * r,
               (size_t)r * 8);
    MPI_Alltoall(h->tmp, (int)blk, MPI_DOUBLE, h->dst, (int)blk, MPI_DOUBLE, MPI_COMM_WORLD);
  } else { /* src n x r: contiguous blocks out; unpack into the column blocks of dst r x n */
    MPI_Alltoall(h->src, (int)blk, MPI_DOUBLE, h->tmp, (int)blk, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int j = 0; j < np; ++j)
      for (int i = 0; i < r; ++i)
        memcpy(h->dst + (size_t)i * n + (size_t)j * r, h->tmp + blk * (size_t)j + (size_t)i * r,
               (size_t)r * 8);
  }
}
/* Times both equivalents; fills extra with their JSON fields (nothing when n % np != 0). */
static void hand_baselines(int64_t n64, int dir, double lm_ms, char *extra, size_t cap) {
  extra[0] = 0;
  if (n64 % np != 0 || n64 > 65536) return;
  hand_case h;
  h.dir = dir;
  h.n = (int)n64;
  h.r = h.n / np;
  size_t local = (size_t)h.r * (size_t)h.n;
  h.src = calloc(local, 8);
  h.dst = calloc(local, 8);
  h.tmp = calloc(local, 8);
  memset(h.src, 1, local * 8); /* written: a calloc'd buffer never written reads the zero page */
  h.st = malloc(sizeof(MPI_Datatype) * (size_t)np);
  h.rt = malloc(sizeof(MPI_Datatype) * (size_t)np);
  h.one = malloc(sizeof(int) * (size_t)np);
  h.zero = malloc(sizeof(int) * (size_t)np);
  int rows[2] = {h.r, h.n}, cols[2] = {h.n, h.r}, sub[2] = {h.r, h.r};
  for (int j = 0; j < np; ++j) {
    int at_col[2] = {0, j * h.r}, at_row[2] = {j * h.r, 0};
    /* S0->S1: send column block j of r x n, receive row block j of n x r; S1->S0 the reverse */
    MPI_Type_create_subarray(2, dir == 0 ? rows : cols, sub, dir == 0 ? at_col : at_row,
                             MPI_ORDER_C, MPI_DOUBLE, &h.st[j]);
    MPI_Type_create_subarray(2, dir == 0 ? cols : rows, sub, dir == 0 ? at_row : at_col,
                             MPI_ORDER_C, MPI_DOUBLE, &h.rt[j]);
    MPI_Type_commit(&h.st[j]);
    MPI_Type_commit(&h.rt[j]);
    h.one[j] = 1;
    h.zero[j] = 0;
  }
  double w = timeit(b_alltoallw, &h), pa = timeit(b_pack_alltoall, &h);
  snprintf(extra, cap,
           ", \"MPI_Alltoallw_subarray_ms\": %.4f, \"pack_MPI_Alltoall_ms\": %.4f, "
           "\"ratio_to_hand\": %.3f",
           w, pa, lm_ms / (w < pa ? w : pa));
  for (int j = 0; j < np; ++j) {
    MPI_Type_free(&h.st[j]);
    MPI_Type_free(&h.rt[j]);
  }
  free(h.st);
  free(h.rt);
  free(h.one);
  free(h.zero);
  free(h.src);
  free(h.dst);
  free(h.tmp);
}

/* Open MPI's single-copy mechanism of the MPI baselines (tools/lm-mpirun exports it). */
static const char *mpi_single_copy(void) {
  const char *m = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
  return m && *m ? m : "mpi-default";
}

/* ---------------------------------------------------------------- cases */
static void emit(const char *name, int64_t rows, int64_t cols, double lm_ms, const char *bname,
                 double b_ms, int64_t sent, double reshard_ms, const char *extra) {
  if (rank) return;
  double bytes = (double)rows * (double)cols * 8;
  printf("{\"case\": \"%s\", \"np\": %d, \"shape\": [%lld, %lld], \"bytes\": %.0f, \"dtype\": \"float64\", "
         "\"lm_ms\": %.4f, \"lm_reshard_ms\": %.4f, \"baseline\": \"%s\", \"baseline_ms\": %.4f, "
         "\"ratio\": %.3f, \"sent_bytes_rank0\": %lld, \"reps\": %d, \"plan_ms\": %.4f, "
         "\"peak_extra_bytes\": %lld, \"reshard_peak_extra_bytes\": %lld, \"memcpy_floor_ms\": %.4f, "
         "\"floor_ratio\": %.3f, \"target_floor_ms\": %.4f, \"target_floor_ratio\": %.3f, "
         "\"node_local\": %s, \"lm_check\": \"%s\", \"mpi_single_copy\": \"%s\", "
         "\"test_nodes\": \"%s\", \"mpi_collectives\": \"%s\"%s}\n",
         name, np, (long long)rows, (long long)cols, bytes, lm_ms, reshard_ms, bname, b_ms,
         b_ms > 0 ? lm_ms / b_ms : 0.0, (long long)sent, REPS, g_plan_ms, (long long)g_peak_plan,
         (long long)g_peak_reshard, g_floor_ms, g_floor_ms > 0 ? lm_ms / g_floor_ms : 0.0,
         g_tfloor_ms, g_tfloor_ms > 0 ? lm_ms / g_tfloor_ms : 0.0,
         getenv("LM_NODE_LOCAL") && getenv("LM_NODE_LOCAL")[0] == '0' ? "false" : "true",
         getenv("LM_CHECK") ? getenv("LM_CHECK") : "1", mpi_single_copy(),
         getenv("LM_TEST_NODES") ? getenv("LM_TEST_NODES") : "0",
         getenv("LM_MPI_COLLECTIVES") ? getenv("LM_MPI_COLLECTIVES") : "0", extra ? extra : "");
  fflush(stdout);
}

static void fill_local(lm_dist_tensor_t t) {
  DLTensor v;
  OK(lm_dist_tensor_local(t, &v));
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  double *d = v.data;
  for (int64_t i = 0; i < n; ++i) d[i] = (double)((i + rank) % 97);
}

/* Median over reps of the max over ranks of lm_reshard_plan_create (ms). */
static double plan_time(lm_mesh_t sm, const lm_placement_t *sp, lm_mesh_t dm, const lm_placement_t *dp,
                        int64_t rows, int64_t cols, int reps) {
  int64_t g[2] = {rows, cols};
  double t[64];
  if (reps > 64) reps = 64;
  for (int i = 0; i < reps; ++i) {
    lm_reshard_plan_t p;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    OK(lm_reshard_plan_create(&p, sm, sp, dm, dp, 2, g, LM_FLOAT64));
    t[i] = (MPI_Wtime() - t0) * 1e3;
    OK(lm_reshard_plan_destroy(&p));
  }
  MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(t, (size_t)reps, sizeof(double), bench_cmp);
  return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

/* Peak extra pool bytes of one call of fn (max over ranks), -1 without lm_pool_stats. */
static int64_t peak_extra(op_fn fn, void *arg) {
  if (!lm_pool_stats) return -1;
  int64_t before = 0, peak = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  OK(lm_pool_stats(&before, NULL, 1));
  fn(arg);
  OK(lm_pool_stats(NULL, &peak, 0));
  int64_t x = peak - before;
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return x;
}

/* The memcpy floor: every rank copies `bytes` between two touched buffers at once. */
typedef struct {
  void *s, *d;
  size_t n;
} copy_case;
static void copy_run(void *a) {
  copy_case *c = a;
  memcpy(c->d, c->s, c->n);
}
static double memcpy_floor(int64_t sent) {
  int64_t most = sent;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (most <= 0) return 0;
  copy_case c = {malloc((size_t)most), malloc((size_t)most), (size_t)most};
  memset(c.s, 1, c.n);
  memset(c.d, 0, c.n);
  double ms = timeit(copy_run, &c);
  free(c.s);
  free(c.d);
  return ms;
}

/* A localmap case on meshes sm -> dm. Returns lm median ms; fills *sent and *reshard_ms. */
static double lm_case_run(lm_mesh_t sm, const lm_placement_t *sp, lm_mesh_t dm, const lm_placement_t *dp,
                          int64_t rows, int64_t cols, int64_t *sent, double *reshard_ms) {
  int64_t g[2] = {rows, cols};
  lm_case c = {0};
  g_plan_ms = plan_time(sm, sp, dm, dp, rows, cols, 5);
  OK(lm_reshard_plan_create(&c.plan, sm, sp, dm, dp, 2, g, LM_FLOAT64));
  OK(lm_dist_tensor_zeros(&c.src, sm, 2, g, LM_FLOAT64, LM_CPU, sp));
  fill_local(c.src);
  OK(lm_reshard_plan_alloc_target(&c.dst, c.plan, LM_CPU));
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  OK(lm_reshard_plan_info(c.plan, 0, &info));
  *sent = info.bytes_sent;
  c.smesh = sm;
  c.dmesh = dm;
  c.dp = dp;
  double ms = timeit(lm_run, &c);
  *reshard_ms = timeit(lm_run_reshard, &c);
  g_peak_plan = peak_extra(lm_run, &c);
  g_peak_reshard = peak_extra(lm_run_reshard, &c);
  g_floor_ms = memcpy_floor(*sent);
  int64_t ls[2] = {0, 0};
  OK(lm_dist_tensor_local_shape(c.dst, ls, 2));
  g_tfloor_ms = memcpy_floor(ls[0] * ls[1] * 8);
  OK(lm_dist_tensor_destroy(&c.src));
  OK(lm_dist_tensor_destroy(&c.dst));
  OK(lm_reshard_plan_destroy(&c.plan));
  return ms;
}

static int64_t chunk_len(int64_t n, int parts, int i) {
  int64_t off, len;
  OK(lm_layout_chunk(n, parts, i, &off, &len));
  return len;
}

static void one_d_cases(lm_mesh_t m1, int64_t n, const char *suffix) {
  lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1), R = LM_PLACEMENT_REPLICATE,
                 P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  char name[64];
  int64_t sent;
  double rs_ms, lm;
  size_t full = (size_t)(n * n) * 8, block = full / (size_t)np;
  base_case b = {0};
  b.comm = MPI_COMM_WORLD;
  b.sbuf = malloc(full);
  b.rbuf = malloc(full);
  b.tmp = malloc(full);
  memset(b.sbuf, 1, full);
  memset(b.rbuf, 0, full);
  memset(b.tmp, 0, full);

  /* S(0) -> R vs MPI_Allgather */
  lm = lm_case_run(m1, &S0, m1, &R, n, n, &sent, &rs_ms);
  b.bytes = block;
  snprintf(name, sizeof name, "1d:S0->R%s", suffix);
  emit(name, n, n, lm, "MPI_Allgather", timeit(b_allgather, &b), sent, rs_ms, NULL);

  /* R -> S(0): no communication; the plain reshard returns a view */
  lm = lm_case_run(m1, &R, m1, &S0, n, n, &sent, &rs_ms);
  snprintf(name, sizeof name, "1d:R->S0%s", suffix);
  emit(name, n, n, lm, "none (no bytes move)", timeit(b_nothing, &b), sent, rs_ms, NULL);

  /* S(0) -> S(1) and back vs MPI_Alltoall */
  b.bytes = block / (size_t)np;
  lm = lm_case_run(m1, &S0, m1, &S1, n, n, &sent, &rs_ms);
  double a2a = timeit(b_alltoall, &b);
  char hand[192];
  hand_baselines(n, 0, lm, hand, sizeof hand);
  snprintf(name, sizeof name, "1d:S0->S1%s", suffix);
  emit(name, n, n, lm, "MPI_Alltoall", a2a, sent, rs_ms, hand);
  lm = lm_case_run(m1, &S1, m1, &S0, n, n, &sent, &rs_ms);
  hand_baselines(n, 1, lm, hand, sizeof hand);
  snprintf(name, sizeof name, "1d:S1->S0%s", suffix);
  emit(name, n, n, lm, "MPI_Alltoall", a2a, sent, rs_ms, hand);

  /* P(sum) -> S(0) vs pairwise reduce-scatter (and MPI_Reduce_scatter_block for reference) */
  b.n = (int)(n * n / np);
  lm = lm_case_run(m1, &P, m1, &S0, n, n, &sent, &rs_ms);
  double pw = timeit(b_pairwise_rs, &b), rsb = timeit(b_rsb, &b);
  char extra[128];
  snprintf(extra, sizeof extra, ", \"MPI_Reduce_scatter_block_ms\": %.4f", rsb);
  snprintf(name, sizeof name, "1d:P->S0%s", suffix);
  emit(name, n, n, lm, "pairwise reduce-scatter", pw, sent, rs_ms, extra);

  /* P(sum) -> R vs reduce-scatter + allgather (and MPI_Allreduce for reference) */
  lm = lm_case_run(m1, &P, m1, &R, n, n, &sent, &rs_ms);
  double rsag = timeit(b_rs_ag, &b), ar = timeit(b_allreduce, &b);
  snprintf(extra, sizeof extra, ", \"MPI_Allreduce_ms\": %.4f", ar);
  snprintf(name, sizeof name, "1d:P->R%s", suffix);
  emit(name, n, n, lm, "pairwise reduce-scatter + MPI_Allgather", rsag, sent, rs_ms, extra);
  free(b.sbuf);
  free(b.rbuf);
  free(b.tmp);
}

/* S0->S1, S1->S0 (vs MPI_Alltoall) and S0->R (vs MPI_Allgather) at n x n float64 for n = 64 ..
 * 4096 (32 KiB .. 128 MiB), for the time-per-byte plot. */
static void sweep_cases(lm_mesh_t m1) {
  lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1), R = LM_PLACEMENT_REPLICATE;
  for (int64_t n = 64; n <= g_sweep_max; n *= 2) {
    size_t full = (size_t)(n * n) * 8;
    base_case b = {0};
    b.comm = MPI_COMM_WORLD;
    b.sbuf = malloc(full);
    b.rbuf = malloc(full);
    memset(b.sbuf, 1, full);
    memset(b.rbuf, 0, full);
    char name[64];
    int64_t sent;
    double rs_ms, lm;
    b.bytes = full / (size_t)np / (size_t)np;
    double a2a = timeit(b_alltoall, &b);
    char hand[192];
    lm = lm_case_run(m1, &S0, m1, &S1, n, n, &sent, &rs_ms);
    hand_baselines(n, 0, lm, hand, sizeof hand);
    snprintf(name, sizeof name, "sweep:S0->S1:n%lld", (long long)n);
    emit(name, n, n, lm, "MPI_Alltoall", a2a, sent, rs_ms, hand);
    lm = lm_case_run(m1, &S1, m1, &S0, n, n, &sent, &rs_ms);
    hand_baselines(n, 1, lm, hand, sizeof hand);
    snprintf(name, sizeof name, "sweep:S1->S0:n%lld", (long long)n);
    emit(name, n, n, lm, "MPI_Alltoall", a2a, sent, rs_ms, hand);
    b.bytes = full / (size_t)np;
    lm = lm_case_run(m1, &S0, m1, &R, n, n, &sent, &rs_ms);
    snprintf(name, sizeof name, "sweep:S0->R:n%lld", (long long)n);
    emit(name, n, n, lm, "MPI_Allgather", timeit(b_allgather, &b), sent, rs_ms, NULL);
    free(b.sbuf);
    free(b.rbuf);
  }
}

int main(int argc, char **argv) {
  int64_t n = 4096;
  int small_only = 0, plan_only = 0, sweep = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) REPS = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--small-only")) small_only = 1;
    else if (!strcmp(argv[i], "--plan-only")) plan_only = 1;
    else if (!strcmp(argv[i], "--sweep")) sweep = 1;
    else if (!strcmp(argv[i], "--sweep-only")) sweep = 2;
    else if (!strcmp(argv[i], "--sweep-max") && i + 1 < argc) g_sweep_max = atoll(argv[++i]);
  }
  if (REPS > 64) REPS = 64;
  if (REPS < 1) REPS = 1;
  OK(lm_comm_world(&wf));
  lm_mesh_t m1;
  int64_t s1[1] = {np};
  OK(lm_mesh_create(&m1, wf, 1, s1, NULL));

  /* Plan creation alone, 1 MiB and 128 MiB (the issue: within 3x for a Partial source) */
  {
    lm_placement_t S0 = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE,
                   P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
    const lm_placement_t *pairs[3][2] = {{&P, &S0}, {&P, &R}, {&S0, &R}};
    const char *names[3] = {"P->S0", "P->R", "S0->R"};
    for (int k = 0; k < 3; ++k) {
      double small = plan_time(m1, pairs[k][0], m1, pairs[k][1], 512, 256, 21);
      double large = plan_time(m1, pairs[k][0], m1, pairs[k][1], 4096, 4096, 11);
      if (rank == 0) {
        printf("{\"case\": \"plan:%s\", \"np\": %d, \"plan_ms_1MiB\": %.4f, \"plan_ms_128MiB\": %.4f, "
               "\"ratio_128MiB_to_1MiB\": %.2f, \"target\": \"<= 3\"}\n",
               names[k], np, small, large, small > 0 ? large / small : 0.0);
        fflush(stdout);
      }
    }
  }
  if (plan_only) {
    OK(lm_mesh_destroy(&m1));
    MPI_Finalize();
    return 0;
  }

  if (sweep == 2) {  /* --sweep-only: the sweep cases and nothing else */
    sweep_cases(m1);
    OK(lm_mesh_destroy(&m1));
    MPI_Finalize();
    return 0;
  }
  if (!small_only) one_d_cases(m1, n, "");
  one_d_cases(m1, 64, ":small");
  if (sweep) sweep_cases(m1);

  /* Uneven: (n+1) x (n-1) S(0) -> R vs MPI_Allgatherv */
  {
    int64_t rows = small_only ? 65 : n + 1, cols = small_only ? 63 : n - 1, sent;
    lm_placement_t S0 = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
    double rs_ms, lm = lm_case_run(m1, &S0, m1, &R, rows, cols, &sent, &rs_ms);
    base_case b = {0};
    b.comm = MPI_COMM_WORLD;
    b.counts = malloc(sizeof(int) * (size_t)np);
    b.displs = malloc(sizeof(int) * (size_t)np);
    int off = 0;
    for (int j = 0; j < np; ++j) {
      b.counts[j] = (int)(chunk_len(rows, np, j) * cols * 8);
      b.displs[j] = off;
      off += b.counts[j];
    }
    b.sbuf = malloc((size_t)b.counts[rank] + 1);
    b.rbuf = malloc((size_t)off + 1);
    memset(b.sbuf, 1, (size_t)b.counts[rank] + 1); /* touched, like the tensors: no zero pages */
    memset(b.rbuf, 0, (size_t)off + 1);
    emit("1d:S0->R:uneven", rows, cols, lm, "MPI_Allgatherv", timeit(b_allgatherv, &b), sent, rs_ms, NULL);
    free(b.sbuf);
    free(b.rbuf);
    free(b.counts);
    free(b.displs);
  }

  /* 2-D mesh transitions (np 4: 2x2) */
  if (np == 4) {
    lm_mesh_t m2;
    int64_t s2[2] = {2, 2};
    OK(lm_mesh_create(&m2, wf, 2, s2, NULL));
    int64_t nn = small_only ? 64 : n, sent;
    double rs_ms, lm;
    size_t full = (size_t)(nn * nn) * 8;
    base_case b = {0};
    b.comm = MPI_COMM_WORLD;
    b.sbuf = malloc(full);
    b.rbuf = malloc(full);
    memset(b.sbuf, 1, full);
    memset(b.rbuf, 0, full);
    lm_placement_t a[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
    lm_placement_t rr[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
    lm_placement_t sr[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_REPLICATE};
    lm_placement_t rs[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_SHARD(0)};
    lm = lm_case_run(m2, a, m2, rr, nn, nn, &sent, &rs_ms);
    b.bytes = full / 4;
    emit("2d:S0S1->RR", nn, nn, lm, "MPI_Allgather (same bytes)", timeit(b_allgather, &b), sent, rs_ms, NULL);
    lm = lm_case_run(m2, sr, m2, rs, nn, nn, &sent, &rs_ms);
    b.bytes = full / 2 / 4;
    emit("2d:S0R->RS0", nn, nn, lm, "MPI_Alltoall (same bytes)", timeit(b_alltoall, &b), sent, rs_ms, NULL);
    lm = lm_case_run(m2, a, m2, sr, nn, nn, &sent, &rs_ms);
    b.bytes = full / 4;
    emit("2d:S0S1->S0R", nn, nn, lm, "MPI_Allgather (same bytes)", timeit(b_allgather, &b), sent, rs_ms, NULL);
    free(b.sbuf);
    free(b.rbuf);
    OK(lm_mesh_destroy(&m2));
  }

  /* Cross-mesh: first half of the ranks (S0) -> second half (S0), the pipeline hand-off */
  if (np >= 2 && np % 2 == 0) {
    int h = np / 2, lo[32], hi[32];
    for (int i = 0; i < h; ++i) {
      lo[i] = i;
      hi[i] = h + i;
    }
    lm_mesh_config_t ca = LM_MESH_CONFIG_INIT, cb = LM_MESH_CONFIG_INIT;
    ca.ranks = lo;
    ca.nranks = h;
    cb.ranks = hi;
    cb.nranks = h;
    int64_t sh[1] = {h};
    lm_mesh_t ma, mb;
    OK(lm_mesh_create(&ma, wf, 1, sh, &ca));
    OK(lm_mesh_create(&mb, wf, 1, sh, &cb));
    int64_t nn = small_only ? 64 : n, sent;
    lm_placement_t S0 = LM_PLACEMENT_SHARD(0);
    double rs_ms, lm = lm_case_run(ma, &S0, mb, &S0, nn, nn, &sent, &rs_ms);
    base_case b = {0};
    b.comm = MPI_COMM_WORLD;
    b.bytes = (size_t)(nn * nn) * 8 / (size_t)h;
    b.sbuf = malloc(b.bytes);
    b.rbuf = malloc(b.bytes);
    memset(b.sbuf, 1, b.bytes);
    memset(b.rbuf, 0, b.bytes);
    b.kind = rank < h ? 0 : 1;
    b.peer = rank < h ? rank + h : rank - h;
    emit("cross:S0(first half)->S0(second half)", nn, nn, lm, "MPI_Send/MPI_Recv", timeit(b_p2p, &b), sent, rs_ms, NULL);
    free(b.sbuf);
    free(b.rbuf);
    OK(lm_mesh_destroy(&ma));
    OK(lm_mesh_destroy(&mb));
  }
  OK(lm_mesh_destroy(&m1));
  MPI_Finalize();
  return 0;
}
