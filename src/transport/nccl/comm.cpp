// SPDX-License-Identifier: BSD-3-Clause
// Builds without CUDA never create a communicator: only release() exists there.
#include "transport/nccl/comm.hpp"

#ifndef LM_WITH_CUDA
#include "common/error.hpp"

namespace lm {
void NcclComm::release() { comm = nullptr; }
void NcclComm::used_on(void *) {}
void nccl_retire_progress(bool) {}
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
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "mem/cuda.hpp"
#include "transport/failure.hpp"

namespace lm {

namespace {

double nccl_timeout_seconds() { return setting_seconds(Setting::NcclTimeout); }

// The bound of one NCCL wait of a collective call (a communicator's init, a group's enqueuing),
// started when made: LM_NCCL_TIMEOUT, or the call's own deadline (LM_TIMEOUT or the mesh's
// config->timeout: transport/failure.hpp, Deadline, the one the MPI transport's waits honour)
// when that is earlier. The teardown of a released communicator is no call's: LM_NCCL_TIMEOUT.
class NcclWait {
 public:
  NcclWait() : nccl_(nccl_timeout_seconds()), t0_(std::chrono::steady_clock::now()) {}
  bool passed() const {
    return call_.passed() ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count() >= nccl_;
  }
  // "LM_TIMEOUT = 5 s" or "LM_NCCL_TIMEOUT = 300 s": the earlier of the two (for messages).
  std::string bound() const {
    const bool call = call_.seconds() > 0 && call_.seconds() < nccl_;
    return strfmt("%s = %g s", call ? "LM_TIMEOUT" : "LM_NCCL_TIMEOUT",
                  call ? call_.seconds() : nccl_);
  }

 private:
  const Deadline call_;
  double nccl_;
  std::chrono::steady_clock::time_point t0_;
};

// Test hook (fault injection): LM_NCCL_FAULT_INIT_RANK=r makes rank r of the communicator (the
// mesh index, or the rank in a pair's union) report a failed communicator init, so the agreement,
// abort and broken-mesh path is testable on one GPU.
bool nccl_fault_here(int64_t rank) { return setting_int(Setting::NcclFaultInitRank) == rank; }

[[noreturn]] void fail_nccl(const std::string &msg) { fail(LM_ERR_NCCL, "%s", msg.c_str()); }

}  // namespace

void NcclComm::used_on(void *stream) {
  for (void *s : streams)
    if (s == stream) return;
  streams.push_back(stream);
}

// ------------------------------------------------------------------------------ retirement
// Why a released communicator is finalized, not aborted: after its streams drained, this rank's
// sends are complete but their data may still be in flight (over sockets, a network); an abort
// drops it and the peer waits forever. ncclCommFinalize flushes it and returns (its async state
// becomes ncclSuccess) once the communicator is quiescent with its peers: that is the agreement,
// NCCL's own. The library adds no MPI agreement, because destroy is local (a rank may destroy a
// mesh long before, or after, the others: Python's __del__, Rust's Drop): release() only queues
// the communicator, and the retirement advances without blocking at later NCCL calls of the
// library, and, bounded, at MPI_Finalize. An error, or no quiescence within LM_NCCL_TIMEOUT
// after the release, aborts it (saying so on stderr).
namespace {

struct Retiring {
  ncclComm_t comm = nullptr;
  int device = -1;
  std::vector<cudaEvent_t> drained;  // recorded at release on every stream the comm used
  bool finalizing = false;
  std::chrono::steady_clock::time_point deadline;
};

std::mutex g_retire_mutex;
// Never destroyed: communicators may be released from static destructors and atexit handlers.
std::vector<Retiring> &retiring() {
  static auto *v = new std::vector<Retiring>();
  return *v;
}
int g_retire_keyval = MPI_KEYVAL_INVALID;

// The device of a communicator current for a scope; never throws (destructors call it).
class DeviceScope {
 public:
  explicit DeviceScope(int dev) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (dev >= 0 && prev_ != dev) cudaSetDevice(dev);
  }
  ~DeviceScope() {
    int cur = -1;
    if (prev_ >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

void retire_abort(Retiring &r, const char *why) {
  std::fprintf(stderr, "localmap: rank %d: a released NCCL communicator %s: aborted (a peer "
               "may have missed data it sent)\n", world_rank_or_minus1(), why);
  for (cudaEvent_t ev : r.drained) cudaEventDestroy(ev);
  r.drained.clear();
  ncclCommAbort(r.comm);
  cudaGetLastError();
}

// One step of r's retirement; true when it is over (destroyed or aborted).
bool retire_step(Retiring &r, bool late) {
  DeviceScope on(r.device);
  if (!r.finalizing) {  // 1. drain: the work enqueued before the release is done
    for (cudaEvent_t ev : r.drained) {
      cudaError_t q = cudaEventQuery(ev);
      if (q == cudaErrorNotReady && !late) return false;
      if (q != cudaSuccess) {
        retire_abort(r, q == cudaErrorNotReady ? "did not drain within LM_NCCL_TIMEOUT"
                                               : "failed while draining");
        return true;
      }
    }
    for (cudaEvent_t ev : r.drained) cudaEventDestroy(ev);
    r.drained.clear();
    ncclResult_t rc = ncclCommFinalize(r.comm);  // 2. finalize (non-blocking: polled)
    if (rc != ncclSuccess && rc != ncclInProgress) {
      retire_abort(r, "failed to finalize");
      return true;
    }
    r.finalizing = true;
  }
  ncclResult_t st = ncclInternalError;
  if (ncclCommGetAsyncError(r.comm, &st) != ncclSuccess) st = ncclInternalError;
  if (st == ncclInProgress) {
    if (!late) return false;
    retire_abort(r, "was not quiescent within LM_NCCL_TIMEOUT");
    return true;
  }
  if (st != ncclSuccess) {
    retire_abort(r, "reported an error while finalizing");
    return true;
  }
  ncclCommDestroy(r.comm);  // 3. local once finalized
  return true;
}

// At MPI_Finalize (MPI_COMM_SELF's attributes are deleted first): the rest, bounded.
int retire_at_finalize(MPI_Comm, int, void *, void *) {
  nccl_retire_progress(true);
  return MPI_SUCCESS;
}

}  // namespace

void nccl_retire_progress(bool wait) {
  std::lock_guard<std::mutex> lk(g_retire_mutex);
  std::vector<Retiring> &v = retiring();
  while (!v.empty()) {
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < v.size();) {
      if (retire_step(v[i], now >= v[i].deadline)) {
        v[i] = v.back();
        v.pop_back();
      } else {
        ++i;
      }
    }
    if (!wait || v.empty()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclComm::release() {
  if (!comm) return;
  Retiring r;
  r.comm = static_cast<ncclComm_t>(comm);
  r.device = device;
  r.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(nccl_timeout_seconds()));
  {
    DeviceScope on(device);
    for (void *s : streams) {
      cudaEvent_t ev = nullptr;
      if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) break;
      if (cudaEventRecord(ev, static_cast<cudaStream_t>(s)) != cudaSuccess) {
        cudaEventDestroy(ev);  // e.g. the user's stream is gone: nothing of ours is left on it
        continue;
      }
      r.drained.push_back(ev);
    }
    cudaGetLastError();
  }
  comm = nullptr;
  streams.clear();
  {
    std::lock_guard<std::mutex> lk(g_retire_mutex);
    retiring().push_back(std::move(r));
    if (g_retire_keyval == MPI_KEYVAL_INVALID && mpi_alive() &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, retire_at_finalize, &g_retire_keyval,
                               nullptr) == MPI_SUCCESS)
      MPI_Comm_set_attr(MPI_COMM_SELF, g_retire_keyval, nullptr);
  }
  nccl_retire_progress(!mpi_alive());  // after MPI_Finalize no hook is left to wait for it
}

void nccl_init(NcclComm &out, MPI_Comm c, int n, int rank, int device_id) {
  nccl_retire_progress(false);
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
    const NcclWait wait;
    ncclResult_t st = rc;
    while (comm && (st == ncclSuccess || st == ncclInProgress)) {
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
      if (st != ncclInProgress) break;
      if (wait.passed()) {
        err = strfmt("ncclCommInitRankConfig did not finish within %s", wait.bound().c_str());
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
  const NcclWait wait;
  for (;;) {  // a non-blocking comm may still be enqueuing (ncclInProgress)
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess || st != ncclInProgress) break;
    if (wait.passed()) {
      st = ncclInProgress;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (st == ncclSuccess) return;
  std::string msg = st == ncclInProgress
                        ? strfmt("%s: NCCL did not finish enqueuing within %s", what,
                                 wait.bound().c_str())
                        : strfmt("%s: NCCL reported %s: %s", what, ncclGetErrorString(st),
                                 ncclGetLastError(c));
  ncclCommAbort(c);
  nc.comm = nullptr;
  fail(LM_ERR_NCCL, "%s", msg.c_str());
}

}  // namespace lm

#endif  // LM_WITH_CUDA
