// SPDX-License-Identifier: BSD-3-Clause
// Planning at scale: the time and memory to plan one rank's part of a reshard on a 2^20-rank
// mesh (1-D 1048576, 2-D 1024 x 1024, 3-D 64 x 128 x 128), for every kind of transition, with the
// pure planner the library runs (plan/planner.hpp: no MPI, no buffer sized by the tensor).
// For each case and a few ranks (first, middle, last): the median of repeated plannings (--reps,
// default 9; 3 where one planning takes over 100 ms), the
// peers and flows of the schedule, and the heap the schedule holds (glibc mallinfo2: bytes in use
// with the schedule alive minus before). Prints one JSON object per line; make bench writes them
// to bench/results/plan.jsonl. The issue's target: under 1 ms and O(peers) memory per rank;
// transitions whose rank talks to ~2^20 peers (all-gather, reduce-scatter of a 1-D mesh) are
// O(peers) by necessity and are reported per peer as well.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "plan/planner.hpp"

namespace {

using lm::Grid;
using lm::Layout;
using lm::Shape;

lm_placement_t S(int d) { return lm_placement_t{LM_SHARD, d, 0, 0}; }
lm_placement_t R() { return lm_placement_t{LM_REPLICATE, 0, 0, 0}; }
lm_placement_t P() { return lm_placement_t{LM_PARTIAL, 0, LM_REDUCE_SUM, 0}; }

struct Case {
  const char *name;
  std::vector<lm_placement_t> src, dst;
};

std::string fmt(const std::vector<lm_placement_t> &p) {
  std::string s = "[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += ",";
    s += p[i].kind == LM_SHARD ? "S(" + std::to_string(p[i].dim) + ")"
         : p[i].kind == LM_REPLICATE ? "R" : "P";
  }
  return s + "]";
}

size_t heap_in_use() { return mallinfo2().uordblks; }

void bench(const char *mesh_name, const Shape &mshape, const Shape &gshape, const Case &c,
           int reps) {
  auto grid = std::make_shared<const Grid>(mshape, std::vector<int>{});
  const Layout src(grid, c.src, gshape), dst(grid, c.dst, gshape);
  const DLDataType f32{kDLFloat, 32, 1};
  const int64_t n = grid->size();
  for (int64_t me : {int64_t(0), n / 2 + 3, n - 1}) {
    std::vector<double> t;
    size_t flows = 0, steps = 0, heap = 0;
    std::vector<int> peers;
    int n_reps = reps;
    for (int r = 0; r < n_reps; ++r) {
      const size_t h0 = heap_in_use();
      const auto t0 = std::chrono::steady_clock::now();
      lm::Schedule s;
      lm::build_schedule(s, src, dst, f32, (int)me);
      const auto t1 = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (t.back() > 1e5) n_reps = std::min(n_reps, 3);  // ~2^20 peers: 3 are enough
      if (r == 0) {
        heap = heap_in_use() - h0;
        const lm::Traffic tr = lm::schedule_traffic(s);
        flows = tr.flows.size();
        steps = s.steps.size();
        for (const lm::Flow &f : tr.flows) peers.push_back(f.peer);
      }
    }
    std::sort(t.begin(), t.end());
    std::sort(peers.begin(), peers.end());
    const size_t np = (size_t)(std::unique(peers.begin(), peers.end()) - peers.begin());
    const double med = t[t.size() / 2];
    std::printf("{\"bench\": \"plan\", \"mesh\": \"%s\", \"ranks\": %lld, \"case\": \"%s\", "
                "\"src\": \"%s\", \"dst\": \"%s\", \"rank\": %lld, \"steps\": %zu, "
                "\"peers\": %zu, \"flows\": %zu, \"median_us\": %.2f, \"min_us\": %.2f, "
                "\"us_per_peer\": %.4f, \"heap_bytes\": %zu, \"heap_per_flow\": %.1f, "
                "\"reps\": %d}\n",
                mesh_name, (long long)n, c.name, fmt(c.src).c_str(), fmt(c.dst).c_str(),
                (long long)me, steps, np, flows, med, t[0], np ? med / (double)np : 0.0, heap,
                flows ? (double)heap / (double)flows : 0.0, (int)t.size());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char **argv) {
  int reps = 9;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  const int64_t N = int64_t(1) << 20;
  try {
    // 1-D: a [2^20, 64] f32 tensor (one row per rank, 64 columns: 64 column owners).
    const std::vector<Case> one = {
        {"shard to shard", {S(0)}, {S(1)}},     {"shard to replicate", {S(0)}, {R()}},
        {"replicate to shard", {R()}, {S(0)}},  {"partial to shard", {P()}, {S(0)}},
        {"partial to replicate", {P()}, {R()}}, {"replicate to partial", {R()}, {P()}},
        {"same layout", {S(0)}, {S(0)}},
    };
    for (const Case &c : one) bench("1-D", Shape{N}, Shape{N, 64}, c, reps);
    // 2-D 1024 x 1024: a [4096, 4096] tensor.
    const std::vector<Case> two = {
        {"transpose shards", {S(0), S(1)}, {S(1), S(0)}},
        {"gather one dim", {S(0), S(1)}, {S(0), R()}},
        {"shard to replicate", {S(0), S(1)}, {R(), R()}},
        {"replicate to shard", {R(), R()}, {S(0), S(1)}},
        {"partial to shard", {P(), S(1)}, {S(0), S(1)}},
        {"partial to replicate", {S(0), P()}, {S(0), R()}},
        {"co-shard", {S(0), S(1)}, {S(0), S(0)}},
    };
    for (const Case &c : two) bench("2-D", Shape{1024, 1024}, Shape{4096, 4096}, c, reps);
    // 3-D 64 x 128 x 128: a [1024, 1024, 64] tensor.
    const std::vector<Case> three = {
        {"rotate shards", {S(0), S(1), S(2)}, {S(1), S(2), S(0)}},
        {"gather one dim", {S(0), S(1), S(2)}, {S(0), S(1), R()}},
        {"partial to shard", {P(), S(1), S(2)}, {S(0), S(1), S(2)}},
        {"replicate to shard", {R(), R(), R()}, {S(0), S(1), S(2)}},
    };
    for (const Case &c : three) bench("3-D", Shape{64, 128, 128}, Shape{1024, 1024, 64}, c, reps);
  } catch (const lm::Error &e) {
    std::fprintf(stderr, "bench_plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
