// SPDX-License-Identifier: BSD-3-Clause
// Planning at scale: the time and memory to plan one rank's part of a reshard on a 2^20-rank
// mesh (1-D 1048576, 2-D 1024 x 1024, 3-D 64 x 128 x 128), for every kind of transition (block-
// cyclic ones included: their pieces schedules have no compressed form), with the
// pure planner the library runs (plan/planner.hpp: no MPI, no buffer sized by the tensor).
// For each case and a few ranks (first, middle, last): the median of repeated plannings (--reps,
// default 9) in the planner's compressed form (regular peers as runs), the heap it holds (glibc
// mallinfo2: bytes in use with the schedule alive minus before), its runs and single messages,
// the peers and flows it describes; then, once, the time and heap of expanding it into one
// message per peer (what a plan's executor walks: O(peers) by necessity for a rank that talks to
// every other). Prints one JSON object per line; make bench writes them to
// bench/results/plan.jsonl. The issue's target: under 1 ms and O(peers) memory per rank.
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

lm_placement_t S(int d) { return LM_PLACEMENT_SHARD(d); }
lm_placement_t R() { return LM_PLACEMENT_REPLICATE; }
lm_placement_t P() { return LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM); }
lm_placement_t BC(int d, int b) { return LM_PLACEMENT_BLOCK_CYCLIC(d, b, 0); }

struct Case {
  const char *name;
  std::vector<lm_placement_t> src, dst;
};

std::string fmt(const std::vector<lm_placement_t> &p) {
  std::string s = "[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += ",";
    s += p[i].kind == LM_SHARD ? "S(" + std::to_string(p[i].dim) + ")"
         : p[i].kind == LM_BLOCK_CYCLIC
             ? "BC(" + std::to_string(p[i].dim) + "," + std::to_string(p[i].block) + ")"
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
  using clock = std::chrono::steady_clock;
  auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (int64_t me : {int64_t(0), n / 2 + 3, n - 1}) {
    std::vector<double> t;
    size_t flows = 0, steps = 0, heap = 0, heap_expanded = 0, runs = 0, msgs = 0;
    double expand_us = 0, traffic_us = 0;
    std::vector<int> peers;
    for (int r = 0; r < reps; ++r) {
      const size_t h0 = heap_in_use();
      const auto t0 = clock::now();
      lm::Schedule s;  // the planner's own form: runs of regular peers (ScheduleForm)
      lm::build_schedule(s, src, dst, f32, (int)me, lm::ScheduleForm::kCompressed);
      t.push_back(us(t0, clock::now()));
      if (r) continue;
      heap = heap_in_use() - h0;
      for (auto &st : s.steps) {
        runs += st->send_runs.size() + st->recv_runs.size();
        msgs += st->sends.size() + st->recvs.size();
      }
      const auto tt = clock::now();  // lm_reshard_estimate's model, on the compressed form
      const lm::Traffic tr = lm::schedule_traffic(s);
      traffic_us = us(tt, clock::now());
      flows = tr.flows.size();
      steps = s.steps.size();
      for (const lm::Flow &f : tr.flows) peers.push_back(f.peer);
      const size_t h1 = heap_in_use();
      const auto t1 = clock::now();  // what a plan does before its first execution: expand
      lm::expand_schedule(s);
      expand_us = us(t1, clock::now());
      heap_expanded = heap + (heap_in_use() - h1);
    }
    std::sort(t.begin(), t.end());
    std::sort(peers.begin(), peers.end());
    const size_t np = (size_t)(std::unique(peers.begin(), peers.end()) - peers.begin());
    const double med = t[t.size() / 2];
    std::printf("{\"bench\": \"plan\", \"mesh\": \"%s\", \"ranks\": %lld, \"case\": \"%s\", "
                "\"src\": \"%s\", \"dst\": \"%s\", \"rank\": %lld, \"steps\": %zu, "
                "\"peers\": %zu, \"flows\": %zu, \"runs\": %zu, \"single_msgs\": %zu, "
                "\"median_us\": %.2f, \"min_us\": %.2f, \"heap_bytes\": %zu, "
                "\"traffic_us\": %.1f, \"expand_us\": %.1f, \"expanded_heap_bytes\": %zu, "
                "\"expanded_heap_per_flow\": %.1f, \"reps\": %d}\n",
                mesh_name, (long long)n, c.name, fmt(c.src).c_str(), fmt(c.dst).c_str(),
                (long long)me, steps, np, flows, runs, msgs, med, t[0], heap, traffic_us, expand_us,
                heap_expanded, flows ? (double)heap_expanded / (double)flows : 0.0,
                (int)t.size());
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
    // Block-cyclic (issue 21): a [2^23, 64] tensor, blocks of 4 rows (2 per rank) to and from
    // row shards, and to blocks of 3.
    const std::vector<Case> cyc = {
        {"block-cyclic to shard", {BC(0, 4)}, {S(0)}},
        {"shard to block-cyclic", {S(0)}, {BC(0, 4)}},
        {"block size change", {BC(0, 4)}, {BC(0, 3)}},
    };
    for (const Case &c : cyc) bench("1-D", Shape{N}, Shape{N * 8, 64}, c, reps);
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
    // ScaLAPACK's 2-D block-cyclic layout of a [65536, 65536] matrix, blocks of 32 (2 per rank
    // and dim), to and from [S(0), S(1)] and to blocks of 24.
    const std::vector<Case> cyc2 = {
        {"block-cyclic to shard", {BC(0, 32), BC(1, 32)}, {S(0), S(1)}},
        {"shard to block-cyclic", {S(0), S(1)}, {BC(0, 32), BC(1, 32)}},
        {"block size change", {BC(0, 32), BC(1, 32)}, {BC(0, 24), BC(1, 24)}},
    };
    for (const Case &c : cyc2) bench("2-D", Shape{1024, 1024}, Shape{65536, 65536}, c, reps);
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
