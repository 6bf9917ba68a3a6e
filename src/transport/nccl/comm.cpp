// SPDX-License-Identifier: BSD-3-Clause
// Every NCCL and CUDA call goes through the device component's table (mem/component.hpp): a
// communicator exists only where the component was loaded.
#include "transport/nccl/comm.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "mem/component.hpp"
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

// The component's table: loaded wherever a communicator exists (never called before one was made).
const lm_device_api_t &api() { return *device_component().api; }

struct Retiring {
  void *comm = nullptr;  // ncclComm_t
  int device = -1;
  std::vector<void *> drained;  // cudaEvent_t recorded at release on every stream the comm used
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
    if (api().get_device(&prev_) != LMD_OK) prev_ = -1;
    if (dev >= 0 && prev_ != dev) api().set_device(dev);
  }
  ~DeviceScope() {
    int cur = -1;
    if (prev_ >= 0 && api().get_device(&cur) == LMD_OK && cur != prev_) api().set_device(prev_);
  }

 private:
  int prev_ = -1;
};

void retire_abort(Retiring &r, const char *why) {
  std::fprintf(stderr, "localmap: rank %d: a released NCCL communicator %s: aborted (a peer "
               "may have missed data it sent)\n", world_rank_or_minus1(), why);
  for (void *ev : r.drained) api().event_destroy(ev);
  r.drained.clear();
  api().nccl_abort(r.comm);
}

// One step of r's retirement; true when it is over (destroyed or aborted).
bool retire_step(Retiring &r, bool late) {
  DeviceScope on(r.device);
  if (!r.finalizing) {  // 1. drain: the work enqueued before the release is done
    for (void *ev : r.drained) {
      const int q = api().event_query(ev);
      if (q == LMD_NOT_READY && !late) return false;
      if (q != LMD_OK) {
        retire_abort(r, q == LMD_NOT_READY ? "did not drain within LM_NCCL_TIMEOUT"
                                           : "failed while draining");
        return true;
      }
    }
    for (void *ev : r.drained) api().event_destroy(ev);
    r.drained.clear();
    const int rc = api().nccl_finalize(r.comm);  // 2. finalize (non-blocking: polled)
    if (rc != LMD_OK && rc != LMD_NOT_READY) {
      retire_abort(r, "failed to finalize");
      return true;
    }
    r.finalizing = true;
  }
  const int st = api().nccl_async_error(r.comm);
  if (st == LMD_NOT_READY) {
    if (!late) return false;
    retire_abort(r, "was not quiescent within LM_NCCL_TIMEOUT");
    return true;
  }
  if (st != LMD_OK) {
    retire_abort(r, "reported an error while finalizing");
    return true;
  }
  api().nccl_destroy(r.comm);  // 3. local once finalized
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

// An event recorded now on each stream the communicator used (a stream that is gone has nothing
// of ours left on it).
static std::vector<void *> drain_events(int device, const std::vector<void *> &streams) {
  std::vector<void *> out;
  DeviceScope on(device);
  for (void *s : streams) {
    void *ev = nullptr;
    if (api().event_create(&ev) != LMD_OK) break;
    if (api().event_record(ev, s) != LMD_OK) {
      api().event_destroy(ev);
      continue;
    }
    out.push_back(ev);
  }
  return out;
}

void NcclComm::release() {
  if (!comm) return;
  Retiring r;
  r.comm = comm;
  r.device = device;
  r.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(nccl_timeout_seconds()));
  r.drained = drain_events(device, streams);
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

namespace {

// The unique id from rank 0 of c, with its status, to every member.
void bootstrap_id(const lm_device_api_t &a, MPI_Comm c, int rank, char (&id)[128]) {
  struct {
    char id[128];
    int rc;
    char err[256];
  } boot{};
  if (rank == 0) {
    boot.rc = a.nccl_unique_id(boot.id, sizeof boot.id);
    if (boot.rc != LMD_OK) std::snprintf(boot.err, sizeof boot.err, "%s", a.error());
  }
  mpi_check(MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c),
            "NCCL bootstrap: MPI_Bcast of the unique id");
  if (boot.rc != LMD_OK)
    fail_nccl(strfmt("NCCL bootstrap: ncclGetUniqueId failed on rank 0 of the communicator: %s",
                     boot.err));
  std::memcpy(id, boot.id, sizeof id);
}

// Non-blocking init, polled with a deadline: "" and *comm, or what went wrong (*comm aborted).
std::string init_polled(const lm_device_api_t &a, void **comm, int n, const char *id, int rank,
                        int device_id) {
  std::string err;
  CurrentDevice g(device_id);
  int st = a.nccl_init(comm, n, id, rank);
  const NcclWait wait;
  while (*comm && (st == LMD_OK || st == LMD_NOT_READY)) {
    st = a.nccl_async_error(*comm);
    if (st != LMD_NOT_READY) break;
    if (wait.passed()) {
      err = strfmt("ncclCommInitRankConfig did not finish within %s", wait.bound().c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (err.empty() && st != LMD_OK)
    err = strfmt("ncclCommInitRankConfig failed: %s", a.error());
  if (err.empty() && nccl_fault_here(rank)) err = "injected failure (LM_NCCL_FAULT_INIT_RANK)";
  if (!err.empty() && *comm) {
    a.nccl_abort(*comm);
    *comm = nullptr;
  }
  return err;
}

}  // namespace

void nccl_init(NcclComm &out, MPI_Comm c, int n, int rank, int device_id) {
  const lm_device_api_t &a = device_api("NCCL communicator");
  nccl_retire_progress(false);
  const int world_rank = world_rank_or_minus1();
  char id[128];
  bootstrap_id(a, c, rank, id);  // 1. the unique id from rank 0
  void *comm = nullptr;
  const std::string err = init_polled(a, &comm, n, id, rank, device_id);  // 2. init
  // 3. Agree: any failure fails every rank with LM_ERR_NCCL (the caller breaks its meshes).
  int mine = err.empty() ? -1 : rank, first = -1;
  try {
    mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MAX, c),
              "NCCL bootstrap: MPI_Allreduce of the init outcome");
  } catch (...) {
    if (comm) a.nccl_abort(comm);
    throw;
  }
  if (first >= 0) {
    if (comm) a.nccl_abort(comm);
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
  int st = LMD_OK;
  const NcclWait wait;
  for (;;) {  // a non-blocking comm may still be enqueuing (ncclInProgress)
    st = api().nccl_async_error(nc.comm);
    if (st != LMD_NOT_READY) break;
    if (wait.passed()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (st == LMD_OK) return;
  std::string msg = st == LMD_NOT_READY
                        ? strfmt("%s: NCCL did not finish enqueuing within %s", what,
                                 wait.bound().c_str())
                        : strfmt("%s: NCCL reported %s", what, api().error());
  api().nccl_abort(nc.comm);
  nc.comm = nullptr;
  fail(LM_ERR_NCCL, "%s", msg.c_str());
}

}  // namespace lm
