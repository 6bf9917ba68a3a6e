// SPDX-License-Identifier: BSD-3-Clause
#include "transport/failure.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "comm/agree.hpp"
#include "common/fault.hpp"
#include "common/mpi.hpp"

namespace lm {

namespace {
char g_abort_payload[256];         // what a failing rank sends (static: the sends are freed)
thread_local double t_transfer_timeout = 0;
}  // namespace

std::string abort_payload(uint64_t epoch, lm_status_t st, const std::string &msg) {
  return strfmt("%llu|%d|%s", (unsigned long long)epoch, (int)st, msg.c_str());
}

void AbortNotices::notify(lm_status_t st, const std::string &msg) {
  int size = 0, me = -1;
  if (!mpi_alive() || MPI_Comm_size(comm_, &size) != MPI_SUCCESS ||
      MPI_Comm_rank(comm_, &me) != MPI_SUCCESS)
    return;
  std::string p = abort_payload(comm_epoch(comm_), st, msg);
  std::memset(g_abort_payload, 0, sizeof g_abort_payload);
  std::memcpy(g_abort_payload, p.data(), std::min(p.size(), sizeof g_abort_payload - 1));
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    MPI_Request q;
    if (MPI_Isend(g_abort_payload, (int)sizeof g_abort_payload, MPI_CHAR, r, kAbortTag, comm_,
                  &q) == MPI_SUCCESS)
      MPI_Request_free(&q);
  }
}

bool AbortNotices::received(Error *out) {
  const unsigned long long epoch = comm_epoch(comm_);
  for (;;) {
    int flag = 0;
    MPI_Status stt;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, comm_, &flag, &stt) != MPI_SUCCESS || !flag)
      return false;
    char buf[sizeof g_abort_payload + 1] = {0};
    MPI_Recv(buf, (int)sizeof g_abort_payload, MPI_CHAR, stt.MPI_SOURCE, kAbortTag, comm_,
             MPI_STATUS_IGNORE);
    unsigned long long from = 0;
    int st = 0, used = 0;
    if (std::sscanf(buf, "%llu|%d|%n", &from, &st, &used) < 2 || used == 0) continue;
    if (from != epoch) continue;  // stale: for an earlier communicator with this context id
    *out = Error(LM_ERR_REMOTE,
                 strfmt("rank %d failed during the transfer: %s: %s; this rank %d did not",
                        stt.MPI_SOURCE, status_name((lm_status_t)st).c_str(), buf + used,
                        world_rank_or_minus1()),
                 (lm_status_t)st);
    return true;
  }
}

double transfer_timeout() { return t_transfer_timeout; }
TimeoutScope::TimeoutScope(double seconds) : saved_(t_transfer_timeout) {
  t_transfer_timeout = seconds;
}
TimeoutScope::~TimeoutScope() { t_transfer_timeout = saved_; }

bool transport_fault_here() { return fault_hit(FaultKind::Transport); }

std::string injected_fault_message(const char *call) {
  return strfmt("reshard: %s failed on rank %d: injected by LM_FAULT", call,
                world_rank_or_minus1());
}

}  // namespace lm
