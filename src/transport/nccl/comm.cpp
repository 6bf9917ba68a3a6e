// SPDX-License-Identifier: BSD-3-Clause
// Builds without CUDA never create a communicator: only release() exists there.
#include "transport/nccl/comm.hpp"

#ifndef LM_WITH_CUDA
#include "common/error.hpp"

namespace lm {
void NcclComm::release() { comm = nullptr; }
[[noreturn]] static void no_nccl() {
  fail(LM_ERR_NOT_SUPPORTED, "NCCL: this build has no CUDA/NCCL backend (CUDA=0)");
}
void nccl_init(NcclComm &, MPI_Comm, int, int, int) { no_nccl(); }
void nccl_check_async(NcclComm &, const char *) {}
void nccl_check_device(const NcclComm &, int, const char *) { no_nccl(); }
}  // namespace lm
#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "mem/cuda.hpp"

namespace lm {

namespace {

double nccl_timeout_seconds() { return setting_seconds(Setting::NcclTimeout); }

// Test hook (fault injection): LM_NCCL_FAULT_INIT_RANK=r makes rank r of the communicator (the
// mesh index, or the rank in a pair's union) report a failed communicator init, so the agreement,
// abort and broken-mesh path is testable on one GPU.
bool nccl_fault_here(int64_t rank) { return setting_int(Setting::NcclFaultInitRank) == rank; }

[[noreturn]] void fail_nccl(const std::string &msg) { fail(LM_ERR_NCCL, "%s", msg.c_str()); }

}  // namespace

void NcclComm::release() {
  if (!comm) return;
  // Let enqueued NCCL work finish (peers may be waiting for it), at most LM_NCCL_TIMEOUT, then
  // abort: local, never waits for peers (ncclCommFinalize/Destroy could).
  if (used) {
    const double limit = nccl_timeout_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(static_cast<cudaStream_t>(stream)) == cudaErrorNotReady &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < limit)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ncclCommAbort(static_cast<ncclComm_t>(comm));
  comm = nullptr;
}

void nccl_init(NcclComm &out, MPI_Comm c, int n, int rank, int device_id) {
  const int world_rank = world_rank_or_minus1();
  // 1. The unique id from rank 0, with its status, to every member.
  struct {
    ncclUniqueId id;
    int rc;
  } boot{};
  if (rank == 0) boot.rc = (int)ncclGetUniqueId(&boot.id);
  mpi_check(MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c),
            "NCCL bootstrap: MPI_Bcast of the unique id");
  if (boot.rc != ncclSuccess)
    fail_nccl(strfmt("NCCL bootstrap: ncclGetUniqueId failed on rank 0 of the communicator: %s",
                     ncclGetErrorString((ncclResult_t)boot.rc)));
  // 2. Non-blocking init, polled with a deadline.
  std::string err;
  ncclComm_t comm = nullptr;
  {
    CurrentDevice g(device_id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, n, boot.id, rank, &cfg);
    const double limit = nccl_timeout_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t st = rc;
    while (comm && (st == ncclSuccess || st == ncclInProgress)) {
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
      if (st != ncclInProgress) break;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited >= limit) {
        err = strfmt("ncclCommInitRankConfig did not finish within LM_NCCL_TIMEOUT = %g s", limit);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (err.empty() && st != ncclSuccess)
      err = strfmt("ncclCommInitRankConfig failed: %s%s%s", ncclGetErrorString(st),
                   comm ? ": " : "", comm ? ncclGetLastError(comm) : "");
    if (err.empty() && nccl_fault_here(rank)) err = "injected failure (LM_NCCL_FAULT_INIT_RANK)";
    if (!err.empty() && comm) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }
  // 3. Agree: any failure fails every rank with LM_ERR_NCCL (the caller breaks its meshes).
  int mine = err.empty() ? -1 : rank, first = -1;
  try {
    mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MAX, c),
              "NCCL bootstrap: MPI_Allreduce of the init outcome");
  } catch (...) {
    if (comm) ncclCommAbort(comm);
    throw;
  }
  if (first >= 0) {
    if (comm) ncclCommAbort(comm);
    fail_nccl(err.empty()
                  ? strfmt("NCCL communicator init failed on rank %d of the communicator (this "
                           "rank %d succeeded and aborted its communicator)", first, world_rank)
                  : strfmt("NCCL communicator init on rank %d: %s", world_rank, err.c_str()));
  }
  out.comm = comm;
  out.device = device_id;
}

void nccl_check_device(const NcclComm &c, int device_id, const char *whose) {
  if (c.device != device_id)
    fail(LM_ERR_INVALID_ARGUMENT, "NCCL: %s communicator lives on device %d, this tensor on "
         "device %d (one device per rank and mesh)", whose, c.device, device_id);
}

void nccl_check_async(NcclComm &nc, const char *what) {
  if (!nc.comm) return;
  ncclComm_t c = static_cast<ncclComm_t>(nc.comm);
  ncclResult_t st = ncclSuccess;
  const double limit = nccl_timeout_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {  // a non-blocking comm may still be enqueuing (ncclInProgress)
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess || st != ncclInProgress) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= limit) {
      st = ncclInProgress;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (st == ncclSuccess) return;
  std::string msg = st == ncclInProgress
                        ? strfmt("%s: NCCL did not finish enqueuing within LM_NCCL_TIMEOUT = %g s",
                                 what, limit)
                        : strfmt("%s: NCCL reported %s: %s", what, ncclGetErrorString(st),
                                 ncclGetLastError(c));
  ncclCommAbort(c);
  nc.comm = nullptr;
  fail(LM_ERR_NCCL, "%s", msg.c_str());
}

}  // namespace lm

#endif  // LM_WITH_CUDA
