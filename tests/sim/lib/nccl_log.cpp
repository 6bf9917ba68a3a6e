// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL: the record of the calls a process made (cudasim.h, cudasimNcclCalls), so that a
// test can tell which collectives a library issued and how many bytes it moved, and the optional
// log of them (CUDASIM_NCCL_LOG).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cudasim.h"
#include "nccl_sim.hpp"

namespace cudasim {
namespace nccl {

namespace {
std::mutex g_mu;
std::map<std::string, cudasimNcclCount> &counts() {
  static auto *m = new std::map<std::string, cudasimNcclCount>();  // outlives static destructors
  return *m;
}
}  // namespace

void record_call(const char *call, const CommState &c, size_t count, int type, int op, int peer,
                 size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  cudasimNcclCount &n = counts()[call];
  ++n.calls;
  n.bytes += bytes;
  const std::string &log = settings().nccl_log;
  if (log.empty()) return;
  if (FILE *f = std::fopen(log.c_str(), "a")) {
    std::fprintf(f, "cudasim-nccl pid=%d rank=%d nranks=%d call=%s count=%zu type=%s op=%d "
                 "peer=%d bytes=%zu\n", (int)getpid(), c.rank, c.nranks, call, count,
                 type_name(type), op, peer, bytes);
    std::fclose(f);
  }
}

}  // namespace nccl
}  // namespace cudasim

extern "C" cudasimNcclCount cudasimNcclCalls(const char *call) {
  using namespace cudasim::nccl;
  std::lock_guard<std::mutex> lk(g_mu);
  cudasimNcclCount sum{0, 0};
  for (const auto &kv : counts())
    if (!call || kv.first == call) sum.calls += kv.second.calls, sum.bytes += kv.second.bytes;
  return sum;
}

extern "C" void cudasimNcclCallsReset(void) {
  using namespace cudasim::nccl;
  std::lock_guard<std::mutex> lk(g_mu);
  counts().clear();
}
