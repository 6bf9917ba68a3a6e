/* SPDX-License-Identifier: BSD-3-Clause */
/* Device reshard benchmark (CUDA builds): localmap device reshards (persistent plans, float32,
 * 1-D mesh of all ranks) against the NCCL collective that moves the same bytes, run in the same
 * job on the same stream. Median of REPS after WARMUP, each the max over ranks, timed from a
 * barrier to cudaStreamSynchronize of the stream (the library itself never synchronizes).
 * Columns follow nccl-tests: algbw = bytes / time, busbw = algbw * factor (allgather and
 * reduce-scatter (n-1)/n, allreduce 2(n-1)/n, all-to-all (n-1)/n), in GB/s, where bytes is what
 * nccl-tests calls the size: the whole tensor for all-gather (the receive buffer), reduce-scatter
 * (the send buffer) and all-reduce, one rank's buffer (the tensor / n) for all-to-all.
 * The all-to-all baseline is ncclAlltoAll where nccl.h has it (NCCL 2.28 on), else grouped
 * ncclSend/ncclRecv. localmap issues one collective per even step (LM_NCCL_COLLECTIVES=1, the
 * default; "lm_collectives" says which setting ran: 0 gives its grouped ncclSend/ncclRecv).
 * Rank 0 prints one JSON object per line, like bench_reshard:
 *   {"case","np","bytes","dtype","lm_ms","baseline","baseline_ms","ratio","lm_algbw_GBps",
 *    "lm_busbw_GBps","baseline_algbw_GBps","baseline_busbw_GBps","copy_GBps","transport",
 *    "lm_collectives","reps"}
 * copy_GBps: a device-to-device cudaMemcpyAsync of the same bytes on one GPU (bytes / time), the
 * ceiling any reshard step is measured against. The NCCL baseline needs one GPU per rank as NCCL
 * sees it (or NCCL_HOSTID per rank, see tests/gpu/split-hosts.sh); LM_BENCH_NCCL=0 leaves it out
 * ("baseline": "none").
 * Usage: mpirun -np N bench_device [--mib 1,16,128] [--reps 10]
 * Whether there is a GPU is the runtime's answer (cudaGetDeviceCount), or LM_EXPECT_GPU=0|1:
 * without one it prints one line saying so and exits 0, unless LM_EXPECT_GPU=1 (exit 1);
 * lm_device_supported(kDLCUDA) must agree with it. */
#include <cuda_runtime.h>
#include <localmap.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_util.h"

static int rank, np, REPS = 10, WARMUP = 3;
static cudaStream_t stream;
static ncclComm_t nccl = NULL;

#define CU(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, cudaGetErrorString(e_));      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)
#define NC(x)                                                                              \
  do {                                                                                     \
    ncclResult_t r_ = (x);                                                                 \
    if (r_ != ncclSuccess) {                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, ncclGetErrorString(r_));      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

typedef void (*op_fn)(void *);
static double timeit(op_fn fn, void *arg) {
  double t[64];
  for (int i = 0; i < WARMUP; ++i) fn(arg);
  CU(cudaStreamSynchronize(stream));
  for (int i = 0; i < REPS; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fn(arg);
    CU(cudaStreamSynchronize(stream));
    t[i] = (MPI_Wtime() - t0) * 1e3;
  }
  MPI_Allreduce(MPI_IN_PLACE, t, REPS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(t, (size_t)REPS, sizeof(double), bench_cmp);
  return REPS % 2 ? t[REPS / 2] : 0.5 * (t[REPS / 2 - 1] + t[REPS / 2]);
}

typedef struct {
  lm_reshard_plan_t plan;
  lm_dist_tensor_t src, dst;
} lm_case;
static void lm_run(void *a) {
  lm_case *c = (lm_case *)a;
  OK(lm_reshard_plan_execute(c->plan, c->src, c->dst));
}

typedef struct {
  int kind; /* 0 allgather, 1 reduce-scatter, 2 allreduce, 3 all-to-all */
  void *sbuf, *rbuf;
  size_t count; /* float elements of the full tensor */
} nccl_case;
static void nccl_run(void *a) {
  nccl_case *b = (nccl_case *)a;
  size_t per = b->count / (size_t)np;
  switch (b->kind) {
    case 0: NC(ncclAllGather(b->sbuf, b->rbuf, per, ncclFloat, nccl, stream)); break;
    case 1: NC(ncclReduceScatter(b->sbuf, b->rbuf, per, ncclFloat, ncclSum, nccl, stream)); break;
    case 2: NC(ncclAllReduce(b->sbuf, b->rbuf, b->count, ncclFloat, ncclSum, nccl, stream)); break;
    default: {
      size_t blk = per / (size_t)np;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22800
      NC(ncclAlltoAll(b->sbuf, b->rbuf, blk, ncclFloat, nccl, stream));
      break;
#endif
      NC(ncclGroupStart());
      for (int p = 0; p < np; ++p) {
        NC(ncclSend((char *)b->sbuf + (size_t)p * blk * 4, blk, ncclFloat, p, nccl, stream));
        NC(ncclRecv((char *)b->rbuf + (size_t)p * blk * 4, blk, ncclFloat, p, nccl, stream));
      }
      NC(ncclGroupEnd());
    }
  }
}

typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
} copy_case;
static void copy_run(void *a) {
  copy_case *c = (copy_case *)a;
  CU(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, stream));
}

/* GB/s of a device-to-device copy of `bytes` on this rank's GPU (the max time over ranks). */
static double copy_rate(size_t bytes) {
  copy_case c = {NULL, NULL, bytes};
  CU(cudaMalloc(&c.dst, bytes));
  CU(cudaMalloc((void **)&c.src, bytes));
  double ms = timeit(copy_run, &c);
  CU(cudaStreamSynchronize(stream));
  CU(cudaFree(c.dst));
  CU(cudaFree((void *)c.src));
  return ms > 0 ? (double)bytes / (ms * 1e6) : 0;
}

/* LM_NCCL_COLLECTIVES as the library reads it: 0 only for "0", false, no, off. */
static int collectives_on(void) {
  const char *e = getenv("LM_NCCL_COLLECTIVES");
  return !(e && (!strcmp(e, "0") || !strcasecmp(e, "false") || !strcasecmp(e, "no") ||
                 !strcasecmp(e, "off")));
}

static void emit(const char *name, double bytes, double lm_ms, const char *bname, double b_ms,
                 double factor, double copy_gbps, const char *transport) {
  if (rank) return;
  double lm_alg = lm_ms > 0 ? bytes / (lm_ms * 1e6) : 0, b_alg = b_ms > 0 ? bytes / (b_ms * 1e6) : 0;
  printf("{\"case\": \"%s\", \"np\": %d, \"bytes\": %.0f, \"dtype\": \"float32\", \"device\": \"cuda\", "
         "\"lm_ms\": %.4f, \"baseline\": \"%s\", \"baseline_ms\": %.4f, \"ratio\": %.3f, "
         "\"lm_algbw_GBps\": %.3f, \"lm_busbw_GBps\": %.3f, \"baseline_algbw_GBps\": %.3f, "
         "\"baseline_busbw_GBps\": %.3f, \"copy_GBps\": %.3f, \"transport\": \"%s\", "
         "\"lm_collectives\": %d, \"reps\": %d}\n",
         name, np, bytes, lm_ms, bname, b_ms, b_ms > 0 ? lm_ms / b_ms : 0.0, lm_alg, lm_alg * factor,
         b_alg, b_alg * factor, copy_gbps, transport, collectives_on(), REPS);
  fflush(stdout);
}

/* 1: a GPU to measure on every rank; 0: none expected anywhere (nothing measured); exits 1 when
 * one was expected (LM_EXPECT_GPU=1) but is missing, or the library disagrees with the runtime. */
static int have_gpu(void) {
  int n = 0, sup = 0, bad = 0, all = 0;
  const char *e = getenv("LM_EXPECT_GPU");
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (lm_device_supported(kDLCUDA, &sup) != LM_SUCCESS) sup = -1;
  if ((e && !strcmp(e, "1") && n < 1) || sup != (n > 0)) {
    fprintf(stderr, "rank %d: bench_device: %d CUDA devices, lm_device_supported(kDLCUDA) = %d, "
            "LM_EXPECT_GPU=%s\n", rank, n, sup, e ? e : "(unset)");
    bad = 1;
  }
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (all) {
    MPI_Finalize();
    exit(1);
  }
  MPI_Allreduce(&n, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all > 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  const char *mib_list = "1,16,128";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mib")) mib_list = argv[i + 1];
    else if (!strcmp(argv[i], "--reps")) REPS = atoi(argv[i + 1]);
  }
  if (REPS < 1 || REPS > 64) REPS = 10;
  if (!have_gpu()) {
    if (!rank) printf("bench_device: no CUDA device on some rank: nothing measured\n");
    MPI_Finalize();
    return 0;
  }
  MPI_Comm local;
  int lr = 0, ndev = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &lr);
  MPI_Comm_free(&local);
  CU(cudaGetDeviceCount(&ndev));
  int dev = lr % ndev;
  CU(cudaSetDevice(dev));
  CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const char *want = getenv("LM_BENCH_NCCL");
  if (!want || strcmp(want, "0") != 0) {
    ncclUniqueId id;
    if (!rank) NC(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclResult_t r = ncclCommInitRank(&nccl, np, id, rank);
    int ok = r == ncclSuccess, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all_ok) {
      if (!rank) fprintf(stderr, "bench_device: NCCL baseline unavailable (%s); localmap only\n",
                         ncclGetErrorString(r));
      if (nccl) ncclCommAbort(nccl);
      nccl = NULL;
    }
  }

  int64_t shape[1] = {np};
  lm_mesh_t m = NULL;
  OK(lm_mesh_create(&m, (int)MPI_Comm_c2f(MPI_COMM_WORLD), 1, shape, NULL));
  lm_device_config_t dc = LM_DEVICE_CONFIG_INIT;
  dc.stream = stream;
  OK(lm_mesh_set_device_config(m, &dc));
  DLDevice d = {kDLCUDA, dev};
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE, P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  struct {
    const char *name;
    lm_placement_t from, to;
    int kind;
    const char *bname;
    double factor;
  } cases[] = {
      {"1d:S0->R", S0, R, 0, "ncclAllGather", (double)(np - 1) / np},
      {"1d:P->S0", P, S0, 1, "ncclReduceScatter", (double)(np - 1) / np},
      {"1d:P->R", P, R, 2, "ncclAllReduce", 2.0 * (np - 1) / np},
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22800
      {"1d:S0->S1", S0, S1, 3, "ncclAlltoAll", (double)(np - 1) / np},
#else
      {"1d:S0->S1", S0, S1, 3, "ncclSend/ncclRecv", (double)(np - 1) / np},
#endif
  };
  char list[256];
  snprintf(list, sizeof list, "%s", mib_list);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    size_t mib = (size_t)atol(tok);
    /* A 2-D tensor [rows, cols] of float32 with rows and cols divisible by np*np. */
    int64_t cols = 1024 * np, rows = (int64_t)(mib << 20) / 4 / cols;
    rows -= rows % ((int64_t)np * np);
    if (rows < np * np) rows = (int64_t)np * np;
    int64_t g[2] = {rows, cols};
    size_t count = (size_t)(rows * cols);
    double bytes = (double)count * 4, copy_gbps = copy_rate(count * 4);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
      lm_case c = {0};
      OK(lm_reshard_plan_create(&c.plan, m, &cases[k].from, NULL, &cases[k].to, 2, g, LM_FLOAT32));
      lm_reshard_plan_t sp = NULL;
      OK(lm_reshard_plan_create(&sp, m, &cases[k].from, NULL, &cases[k].from, 2, g, LM_FLOAT32));
      OK(lm_reshard_plan_alloc_target(&c.src, sp, d));
      OK(lm_reshard_plan_destroy(&sp));
      OK(lm_reshard_plan_alloc_target(&c.dst, c.plan, d));
      double lm_ms = timeit(lm_run, &c);
      int tr = 0;
      OK(lm_mesh_transport(m, kDLCUDA, &tr));
      const char *tname = tr == LM_TRANSPORT_NCCL ? "nccl" : tr == LM_TRANSPORT_MPI_STAGED ? "mpi_staged" : "?";
      double b_ms = 0;
      if (nccl) {
        nccl_case b = {cases[k].kind, NULL, NULL, count};
        CU(cudaMalloc(&b.sbuf, count * 4));
        CU(cudaMalloc(&b.rbuf, count * 4));
        CU(cudaMemsetAsync(b.sbuf, 0, count * 4, stream));
        b_ms = timeit(nccl_run, &b);
        CU(cudaFree(b.sbuf));
        CU(cudaFree(b.rbuf));
      }
      /* nccl-tests' size: an all-to-all's is one rank's buffer */
      emit(cases[k].name, cases[k].kind == 3 ? bytes / np : bytes, lm_ms,
           nccl ? cases[k].bname : "none", b_ms, cases[k].factor, copy_gbps, tname);
      OK(lm_dist_tensor_destroy(&c.src));
      OK(lm_dist_tensor_destroy(&c.dst));
      OK(lm_reshard_plan_destroy(&c.plan));
    }
  }
  OK(lm_mesh_destroy(&m));
  CU(cudaStreamSynchronize(stream));
  if (nccl) ncclCommDestroy(nccl);
  MPI_Finalize();
  return 0;
}
