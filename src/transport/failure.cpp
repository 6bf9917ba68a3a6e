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
constexpr int kAbortTag = 0x7fff;  // above every plan step's tag and its node-local acks
char g_abort_payload[256];         // what a failing rank sends (static: the sends are freed)
thread_local double t_transfer_timeout = 0;
}  // namespace

void AbortNotices::notify(lm_status_t st, const std::string &msg) {
  int size = 0, me = -1;
  if (!mpi_alive() || MPI_Comm_size(comm_, &size) != MPI_SUCCESS ||
      MPI_Comm_rank(comm_, &me) != MPI_SUCCESS)
    return;
  std::string p = strfmt("%d|%s", (int)st, msg.c_str());
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
  int flag = 0;
  MPI_Status stt;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, comm_, &flag, &stt) != MPI_SUCCESS || !flag)
    return false;
  char buf[sizeof g_abort_payload + 1] = {0};
  MPI_Recv(buf, (int)sizeof g_abort_payload, MPI_CHAR, stt.MPI_SOURCE, kAbortTag, comm_,
           MPI_STATUS_IGNORE);
  int st = 0;
  const char *bar = std::strchr(buf, '|');
  std::sscanf(buf, "%d", &st);
  *out = Error(LM_ERR_REMOTE,
               strfmt("rank %d failed during the transfer: %s: %s; this rank %d did not",
                      stt.MPI_SOURCE, status_name((lm_status_t)st).c_str(), bar ? bar + 1 : buf,
                      world_rank_or_minus1()),
               (lm_status_t)st);
  return true;
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
