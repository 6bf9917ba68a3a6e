// SPDX-License-Identifier: BSD-3-Clause
#include "common/fault.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/settings.hpp"

namespace lm {

namespace {

struct Fault {
  FaultKind kind;
  int rank;
  long long nth;
};

struct Faults {
  std::vector<Fault> list;
  std::atomic<long long> count[2] = {{0}, {0}};
  bool any = false;
};

Faults &faults() {
  static Faults *f = [] {
    auto *x = new Faults();
    std::string all = setting(Setting::Fault).text;
    if (all.empty()) return x;
    size_t pos = 0;
    while (pos <= all.size()) {
      size_t end = all.find(',', pos);
      if (end == std::string::npos) end = all.size();
      std::string one = all.substr(pos, end - pos);
      pos = end + 1;
      if (one.empty()) continue;
      Fault f{FaultKind::Alloc, -1, 1};
      char kind[32] = {0};
      int rank = -1;
      long long nth = 1;
      if (std::sscanf(one.c_str(), "%31[a-z]:rank=%d:nth=%lld", kind, &rank, &nth) < 1) continue;
      if (!std::strcmp(kind, "alloc"))
        f.kind = FaultKind::Alloc;
      else if (!std::strcmp(kind, "transport"))
        f.kind = FaultKind::Transport;
      else
        continue;
      f.rank = rank;
      f.nth = nth;
      x->list.push_back(f);
      x->any = true;
    }
    return x;
  }();
  return *f;
}

}  // namespace

bool fault_hit(FaultKind kind) {
  Faults &f = faults();
  if (!f.any) return false;
  long long n = ++f.count[(int)kind];
  int me = world_rank_or_minus1();
  for (const Fault &x : f.list)
    if (x.kind == kind && (x.rank < 0 || x.rank == me) && x.nth == n) return true;
  return false;
}

}  // namespace lm
