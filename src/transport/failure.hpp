// SPDX-License-Identifier: BSD-3-Clause
// Failure handling shared by every transport (docs/DESIGN.md, "Failure model"):
//   - abort notices: a rank whose transfer fails tells every other rank of the plan's
//     communicator (one small message with the abort tag) before it throws, so that none waits
//     for it; waits poll for such a notice (AbortNotices);
//   - the deadline of the blocking waits of the collective call running on this thread
//     (LM_TIMEOUT or the mesh config), set by the entry point (TimeoutScope), read by transports;
//   - fault injection: LM_FAULT's transport faults fire at fault_point(), in any transport.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace lm {

// The tag of abort notices: above every plan step's tag and its node-local acks.
constexpr int kAbortTag = 0x7fff;
// What a notice carries: "<epoch>|<status>|<message>", the epoch of its communicator first
// (common/mpi.hpp, comm_epoch), so that a notice nobody received, still queued under a context
// id a later communicator reuses, is not taken for that communicator's failure.
std::string abort_payload(uint64_t epoch, lm_status_t st, const std::string &msg);

class AbortNotices {
 public:
  explicit AbortNotices(MPI_Comm comm) : comm_(comm) {}
  // Tells every other rank of the communicator that this one failed with (st, msg). Best effort:
  // never throws (the caller is already failing).
  void notify(lm_status_t st, const std::string &msg);
  // True when another rank's notice arrived: *out is then LM_ERR_REMOTE "rank R failed during
  // the transfer: <its status>: <its message>; this rank M did not". Notices of another epoch
  // (or unreadable) are received and dropped.
  bool received(Error *out);

 private:
  MPI_Comm comm_;
};

// The deadline of this thread's collective call (0: none).
double transfer_timeout();
class TimeoutScope {
 public:
  explicit TimeoutScope(double seconds);
  ~TimeoutScope();
  TimeoutScope(const TimeoutScope &) = delete;
  TimeoutScope &operator=(const TimeoutScope &) = delete;

 private:
  double saved_;
};

// A wait's deadline: started when made, from transfer_timeout().
class Deadline {
 public:
  Deadline() : seconds_(transfer_timeout()) {
    if (seconds_ > 0) t0_ = std::chrono::steady_clock::now();
  }
  double seconds() const { return seconds_; }
  bool passed() const {
    return seconds_ > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count() > seconds_;
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point t0_;
};

// True when LM_FAULT's transport fault fires at this call (counted per process).
bool transport_fault_here();
// The message of an injected fault: "reshard: <call> failed on rank R: injected by LM_FAULT".
std::string injected_fault_message(const char *call);

}  // namespace lm
