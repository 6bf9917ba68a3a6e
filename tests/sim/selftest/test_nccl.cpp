// SPDX-License-Identifier: BSD-3-Clause
// cudasim self-test, NCCL, under MPI (tools/lm-mpirun N test_nccl SCENARIO): each run is one
// scenario, so every scenario starts with fresh processes. The unique id travels by MPI_Bcast.
// Exit status 0 when every rank passed; run-sim-tests.sh also runs scenarios that must FAIL
// (the default CUDASIM_NCCL_ON_ERROR=abort kills the job) and checks their output.
#include <mpi.h>
#include <nccl.h>

#include "cudasim.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_rank, g_size, g_failed;
cudaStream_t g_stream;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond); \
      ++g_failed;                                                                          \
    }                                                                                      \
  } while (0)
#define CU(x) CHECK((x) == cudaSuccess)
#define NC(x) CHECK((x) == ncclSuccess)

double now() { return MPI_Wtime(); }

// A communicator of all ranks (blocking unless nonblocking; then polled until ready).
ncclComm_t make_comm(bool nonblocking = false, ncclResult_t *init_result = nullptr) {
  ncclUniqueId id;
  if (g_rank == 0) NC(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t c = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = nonblocking ? 0 : 1;
  ncclResult_t r = ncclCommInitRankConfig(&c, g_size, id, g_rank, &cfg);
  if (nonblocking) {
    CHECK(r == ncclInProgress);
    while (r == ncclInProgress) ncclCommGetAsyncError(c, &r);
  }
  if (init_result) *init_result = r;
  else NC(r);
  return c;
}

// The async state once non-blocking enqueueing finished.
ncclResult_t settle(ncclComm_t c) {
  ncclResult_t st = ncclInProgress;
  while (st == ncclInProgress) NC(ncclCommGetAsyncError(c, &st));
  return st;
}

float *dev_floats(size_t n, float fill_base) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = fill_base + (float)i;
  void *d = nullptr;
  CU(cudaMalloc(&d, n * sizeof(float)));
  // In g_stream's order (a cudaMemcpy from pageable memory is not ordered with g_stream).
  CU(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, g_stream));
  CU(cudaStreamSynchronize(g_stream));
  return static_cast<float *>(d);
}

std::vector<float> host_floats(const float *d, size_t n) {
  std::vector<float> h(n);
  CU(cudaStreamSynchronize(g_stream));
  CU(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// ------------------------------------------------------------------------------ scenarios
// A ring of sends in one group (1 MiB: several laps of the 256 KiB ring), a send to self, and
// two messages to the same peer in one group (matched in order).
void p2p() {
  ncclComm_t c = make_comm();
  const size_t n = 1 << 18;
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  float *s = dev_floats(n, 1000.f * g_rank), *r = dev_floats(n, -1), *self = dev_floats(16, -1);
  float *a = dev_floats(8, 10.f * g_rank), *b = dev_floats(8, 20.f * g_rank);
  float *ra = dev_floats(8, -1), *rb = dev_floats(8, -1);
  NC(ncclGroupStart());
  NC(ncclSend(s, n, ncclFloat, next, c, g_stream));
  NC(ncclRecv(r, n, ncclFloat, prev, c, g_stream));
  NC(ncclSend(s, 16, ncclFloat, g_rank, c, g_stream));
  NC(ncclRecv(self, 16, ncclFloat, g_rank, c, g_stream));
  NC(ncclSend(a, 8, ncclFloat, next, c, g_stream));
  NC(ncclSend(b, 8, ncclFloat, next, c, g_stream));
  NC(ncclRecv(ra, 8, ncclFloat, prev, c, g_stream));
  NC(ncclRecv(rb, 8, ncclFloat, prev, c, g_stream));
  NC(ncclGroupEnd());
  std::vector<float> h = host_floats(r, n), hs = host_floats(self, 16);
  std::vector<float> ha = host_floats(ra, 8), hb = host_floats(rb, 8);
  for (size_t i = 0; i < n; ++i) CHECK(h[i] == 1000.f * prev + (float)i);
  for (size_t i = 0; i < 16; ++i) CHECK(hs[i] == 1000.f * g_rank + (float)i);
  for (size_t i = 0; i < 8; ++i) CHECK(ha[i] == 10.f * prev + (float)i && hb[i] == 20.f * prev + (float)i);
  NC(ncclCommDestroy(c));
}

// What cudasimNcclCalls recorded for collectives(): one call of each, two all-reduces, the bytes
// of this rank's send buffers; nothing else.
void check_call_record(size_t per, size_t all) {
  const size_t f = sizeof(float);
  const struct {
    const char *call;
    unsigned long long calls, bytes;
  } want[] = {{"ncclAllGather", 1, per * f}, {"ncclReduceScatter", 1, all * f},
              {"ncclAllReduce", 2, 2 * all * f}, {"ncclBroadcast", 1, all * f},
              {"ncclAlltoAll", 1, all * f}, {"ncclSend", 0, 0}, {"ncclRecv", 0, 0}};
  unsigned long long calls = 0;
  for (const auto &w : want) {
    cudasimNcclCount n = cudasimNcclCalls(w.call);
    CHECK(n.calls == w.calls && n.bytes == w.bytes);
    calls += w.calls;
  }
  CHECK(cudasimNcclCalls(nullptr).calls == calls);
  cudasimNcclCallsReset();
  CHECK(cudasimNcclCalls(nullptr).calls == 0);
}

void collectives() {
  ncclComm_t c = make_comm();
  int n = 0, me = -1, dev = -1;
  NC(ncclCommCount(c, &n));
  NC(ncclCommUserRank(c, &me));
  NC(ncclCommCuDevice(c, &dev));
  CHECK(n == g_size && me == g_rank && dev == 0);
  const size_t per = 1000, all = per * (size_t)g_size;
  float *s = dev_floats(all, (float)g_rank), *r = dev_floats(all, -1);
  NC(ncclAllGather(s, r, per, ncclFloat, c, g_stream));  // rank p's first `per` values
  std::vector<float> h = host_floats(r, all);
  for (int p = 0; p < g_size; ++p)
    for (size_t i = 0; i < per; ++i) CHECK(h[(size_t)p * per + i] == (float)p + (float)i);
  NC(ncclReduceScatter(s, r, per, ncclFloat, ncclSum, c, g_stream));
  h = host_floats(r, per);
  float ranks_sum = (float)(g_size * (g_size - 1) / 2);
  for (size_t i = 0; i < per; ++i)
    CHECK(h[i] == ranks_sum + (float)g_size * (float)(g_rank * (int)per + (int)i));
  NC(ncclAllReduce(s, r, all, ncclFloat, ncclMax, c, g_stream));
  h = host_floats(r, all);
  for (size_t i = 0; i < all; ++i) CHECK(h[i] == (float)(g_size - 1) + (float)i);
  NC(ncclAllReduce(s, s, all, ncclFloat, ncclAvg, c, g_stream));  // in place
  h = host_floats(s, all);
  for (size_t i = 0; i < all; ++i) CHECK(std::fabs(h[i] - (ranks_sum / (float)g_size + (float)i)) < 1e-3f);
  NC(ncclBroadcast(r, r, all, ncclFloat, g_size - 1, c, g_stream));
  h = host_floats(r, all);
  for (size_t i = 0; i < all; ++i) CHECK(h[i] == (float)(g_size - 1) + (float)i);
  float *a = dev_floats(all, 1000.f * (float)g_rank);
  NC(ncclAlltoAll(a, s, per, ncclFloat, c, g_stream));  // block p of rank q -> block q of rank p
  h = host_floats(s, all);
  for (int p = 0; p < g_size; ++p)
    for (size_t i = 0; i < per; ++i)
      CHECK(h[(size_t)p * per + i] == 1000.f * (float)p + (float)(g_rank * (int)per + (int)i));
  check_call_record(per, all);
  NC(ncclCommFinalize(c));
  NC(ncclCommDestroy(c));
}

// Non-blocking communicator: init and ncclGroupEnd say ncclInProgress; work is enqueued once
// ncclCommGetAsyncError is polled (as NCCL requires before using the stream). Finalize likewise.
void nonblocking() {
  ncclComm_t c = make_comm(true);
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  float *s = dev_floats(64, 100.f * g_rank), *r = dev_floats(64, -1);
  NC(ncclGroupStart());
  NC(ncclSend(s, 64, ncclFloat, next, c, g_stream));
  NC(ncclRecv(r, 64, ncclFloat, prev, c, g_stream));
  CHECK(ncclGroupEnd() == ncclInProgress);
  CHECK(settle(c) == ncclSuccess);
  std::vector<float> h = host_floats(r, 64);
  for (size_t i = 0; i < 64; ++i) CHECK(h[i] == 100.f * prev + (float)i);
  CHECK(ncclCommFinalize(c) == ncclInProgress);
  CHECK(settle(c) == ncclSuccess);
  NC(ncclCommDestroy(c));
}

// Planted bug: stream work issued after a non-blocking ncclGroupEnd without polling
// ncclCommGetAsyncError first overtakes the transfer: the copy reads the receive buffer early.
void planted_missing_poll() {
  ncclComm_t c = make_comm(true);
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  float *s = dev_floats(64, 100.f * g_rank), *r = dev_floats(64, -1), *out = dev_floats(64, -2);
  NC(ncclGroupStart());
  NC(ncclSend(s, 64, ncclFloat, next, c, g_stream));
  NC(ncclRecv(r, 64, ncclFloat, prev, c, g_stream));
  CHECK(ncclGroupEnd() == ncclInProgress);
  /* BUG (planted): no ncclCommGetAsyncError loop before using the stream */
  CU(cudaMemcpyAsync(out, r, 64 * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
  CHECK(settle(c) == ncclSuccess);
  std::vector<float> h = host_floats(out, 64);
  int stale = 0;
  for (size_t i = 0; i < 64; ++i) stale += h[i] == -1.f + (float)i;
  CHECK(stale == 64);  // caught: the copy ran before the receive
  if (g_rank == 0) std::printf("planted missing poll caught: %d values copied before the receive\n", stale);
  NC(ncclCommDestroy(c));
}

// Planted bug (issue 18's deadlocks): each rank receives in one group and sends in the next:
// on NCCL both streams wait forever. The watchdog must report it and fail the communicator.
// Run with CUDASIM_NCCL_ON_ERROR=error (ranks check the error) or abort (the job must die).
void planted_wrong_group_order() {
  if (g_size < 2) return;
  ncclComm_t c = make_comm();
  int peer = g_rank ^ 1;
  float *s = dev_floats(256, 1), *r = dev_floats(256, -1);
  double t0 = now();
  if (peer < g_size) {
    NC(ncclRecv(r, 256, ncclFloat, peer, c, g_stream));  // group 1: the receive alone
    NC(ncclSend(s, 256, ncclFloat, peer, c, g_stream));  // group 2: the send (too late)
  }
  cudaStreamSynchronize(g_stream);
  ncclResult_t st = ncclSuccess;
  NC(ncclCommGetAsyncError(c, &st));
  double took = now() - t0;
  CHECK(peer >= g_size || (st == ncclSystemError || st == ncclRemoteError));
  CHECK(peer >= g_size || std::strstr(ncclGetLastError(c), "no progress") != nullptr ||
        std::strstr(ncclGetLastError(c), "rank") != nullptr);
  CHECK(took < 30);
  if (g_rank == 0)
    std::printf("planted wrong group order caught after %.1f s: %s\n", took, ncclGetErrorString(st));
  NC(ncclCommAbort(c));
  // The right order (one group) on a fresh communicator works.
  c = make_comm();
  if (peer < g_size) {
    NC(ncclGroupStart());
    NC(ncclRecv(r, 256, ncclFloat, peer, c, g_stream));
    NC(ncclSend(s, 256, ncclFloat, peer, c, g_stream));
    NC(ncclGroupEnd());
  }
  std::vector<float> h = host_floats(r, 256);
  CHECK(peer >= g_size || h[255] == 256.f);
  NC(ncclCommDestroy(c));
}

// A send and its receive of different sizes fail loudly on both ranks.
void size_mismatch() {
  if (g_size < 2) return;
  ncclComm_t c = make_comm();
  float *b = dev_floats(512, 0);
  if (g_rank == 0) NC(ncclSend(b, 256, ncclFloat, 1, c, g_stream));
  if (g_rank == 1) NC(ncclRecv(b, 512, ncclFloat, 0, c, g_stream));
  cudaStreamSynchronize(g_stream);
  MPI_Barrier(MPI_COMM_WORLD);
  ncclResult_t st = ncclSuccess;
  NC(ncclCommGetAsyncError(c, &st));
  if (g_rank == 1) CHECK(st == ncclInvalidUsage && std::strstr(ncclGetLastError(c), "size mismatch"));
  NC(ncclCommAbort(c));
}

// Two ranks on one GPU of one host: NCCL refuses them (what localmap's transport choice avoids).
// Run with CUDASIM_TOPOLOGY=shared: every rank picks device 0, the same GPU.
void duplicate_gpu() {
  CHECK(cudasimTopology() == 1);
  ncclResult_t r = ncclSuccess;
  ncclComm_t c = make_comm(true, &r);
  if (g_size > 1) {
    CHECK(r == ncclInvalidUsage && std::strstr(ncclGetLastError(c), "Duplicate GPU"));
    char host[32];
    std::snprintf(host, sizeof host, "simhost-%d", g_rank);
    setenv("NCCL_HOSTID", host, 1);  // NCCL's split-hosts view: then they may share it
    NC(ncclCommAbort(c));
    c = make_comm(true, &r);
  }
  CHECK(r == ncclSuccess);
  NC(ncclCommAbort(c));
}

// An aborted rank delivers nothing more: its peer's receive hangs (as on NCCL) and the watchdog
// names the aborted rank. (Run with CUDASIM_NCCL_ON_ERROR=error.)
void abort_leaves_peer_waiting() {
  if (g_size < 2) return;
  ncclComm_t c = make_comm();
  float *b = dev_floats(64, 0);
  if (g_rank == 0) {
    NC(ncclCommAbort(c));  // before sending what rank 1 expects
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 1) NC(ncclRecv(b, 64, ncclFloat, 0, c, g_stream));
    cudaStreamSynchronize(g_stream);
    ncclResult_t st = ncclSuccess;
    NC(ncclCommGetAsyncError(c, &st));
    if (g_rank == 1) CHECK(st == ncclSystemError);
    NC(ncclCommAbort(c));
  }
}

// Issue 18, 2.2: a rank whose stream finished its sends aborts at once; its last message may
// still be in flight (CUDASIM_NCCL_LATENCY_US), and NCCL's abort drops it: the receiver hangs and
// the watchdog says so (planted, run with CUDASIM_NCCL_ON_ERROR=error). Then the right way:
// ncclCommFinalize (waits until the peers received everything) before ncclCommDestroy.
void planted_abort_in_flight() {
  if (g_size < 2) return;
  float *b = dev_floats(256, 5);
  for (int round = 0; round < 2; ++round) {
    const bool finalize = round == 1;
    ncclComm_t c = make_comm();
    if (g_rank == 1) NC(ncclRecv(b, 256, ncclFloat, 0, c, g_stream));
    if (g_rank == 0) {
      NC(ncclSend(b, 256, ncclFloat, 1, c, g_stream));
      CU(cudaStreamSynchronize(g_stream));  // the send completed: its data is in flight
      if (finalize) {
        NC(ncclCommFinalize(c));
        NC(ncclCommDestroy(c));
      } else {
        NC(ncclCommAbort(c));  /* BUG (planted): abort drops what is in flight */
      }
    }
    if (g_rank != 0) {
      cudaStreamSynchronize(g_stream);
      ncclResult_t st = ncclSuccess;
      NC(ncclCommGetAsyncError(c, &st));
      if (g_rank == 1) {
        CHECK(finalize ? st == ncclSuccess : st == ncclSystemError);
        std::vector<float> h = host_floats(b, 256);
        if (finalize) CHECK(h[255] == 5.f + 255.f);
      }
      NC(finalize ? ncclCommDestroy(c) : ncclCommAbort(c));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (g_rank == 1) std::printf("planted abort with data in flight caught; finalize delivered it\n");
}

struct Scenario {
  const char *name;
  void (*fn)();
};
const Scenario kScenarios[] = {
    {"p2p", p2p},
    {"collectives", collectives},
    {"nonblocking", nonblocking},
    {"planted_missing_poll", planted_missing_poll},
    {"planted_wrong_group_order", planted_wrong_group_order},
    {"size_mismatch", size_mismatch},
    {"duplicate_gpu", duplicate_gpu},
    {"abort_leaves_peer_waiting", abort_leaves_peer_waiting},
    {"planted_abort_in_flight", planted_abort_in_flight},
};

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const Scenario *sc = nullptr;
  for (const Scenario &s : kScenarios)
    if (argc > 1 && !std::strcmp(argv[1], s.name)) sc = &s;
  if (!sc) {
    if (g_rank == 0) std::fprintf(stderr, "usage: test_nccl SCENARIO\n");
    MPI_Finalize();
    return 2;
  }
  CU(cudaSetDevice(0));
  CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  sc->fn();
  int failed = 0;
  MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%s %s np=%d\n", failed ? "FAIL" : "PASS", sc->name, g_size);
  MPI_Finalize();
  return failed ? 1 : 0;
}
