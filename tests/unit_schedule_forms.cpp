// SPDX-License-Identifier: BSD-3-Clause
// unit_schedule_forms: the planner's compressed schedules (plan/planner.hpp, ScheduleForm) against
// the one-coordinate-at-a-time enumeration. For random layouts (1-3-D meshes up to 9 per dim,
// affine and permuted rank lists, same mesh and across meshes, co-shards, uneven and empty
// chunks, Partial sources and targets), every rank's schedule is built three ways:
//   kReference   one Msg per peer, reduce-scatter vectors filled (no runs);
//   kExpanded    built compressed, then expanded (what plans execute);
//   kCompressed  runs kept.
// Expanded must equal Reference field by field (every message, local copy, reduce-scatter
// member, buffer decision); Compressed must report the same traffic (flows as a multiset, bytes
// copied and reduced, staging), bytes sent and description, and must really be compressed on
// the regular cases (a rank of a 4096-rank mesh holds a handful of runs, not 4095 messages).
// enumerate_intersecting's run form must visit exactly the coordinates and boxes of the plain
// form. No MPI call.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "layout/layout.hpp"
#include "plan/planner.hpp"
#include "unit_check.hpp"

namespace {

using lm::Box;
using lm::Grid;
using lm::Layout;
using lm::Msg;
using lm::Schedule;
using lm::ScheduleForm;
using lm::SchedStep;
using lm::Shape;

lm_placement_t R() { return LM_PLACEMENT_REPLICATE; }
lm_placement_t S(int d, int order = 0) { return lm_placement_t{LM_SHARD, d, order, 0, 0, 0, 0, 0}; }
lm_placement_t P() { return LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM); }

const DLDataType kF32{kDLFloat, 32, 1};

bool same_box(const Box &a, const Box &b) { return a.off == b.off && a.len == b.len; }

bool same_msgs(const std::vector<Msg> &a, const std::vector<Msg> &b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Msg &x = a[i], &y = b[i];
    if (x.peer != y.peer || !same_box(x.box, y.box) || x.rel != y.rel || x.bytes != y.bytes ||
        x.contiguous != y.contiguous || x.key != y.key || (x.contiguous && x.off != y.off))
      return false;
  }
  return true;
}

// Field by field; returns the first difference ("" when none).
std::string compare_steps(const SchedStep &a, const SchedStep &b) {
  if (a.kind != b.kind || a.tag != b.tag || a.bytes_sent != b.bytes_sent) return "kind/tag/bytes";
  if (!same_box(a.inbox, b.inbox) || !same_box(a.outbox, b.outbox)) return "boxes";
  if (!same_msgs(a.sends, b.sends)) return "sends";
  if (!same_msgs(a.recvs, b.recvs)) return "recvs";
  if (!a.send_runs.empty() || !a.recv_runs.empty() || !b.send_runs.empty()) return "runs left";
  if (a.selfs.size() != b.selfs.size() || a.skip_self != b.skip_self) return "selfs";
  for (size_t i = 0; i < a.selfs.size(); ++i)
    if (!same_box(a.selfs[i].box, b.selfs[i].box) || a.selfs[i].in_rel != b.selfs[i].in_rel ||
        a.selfs[i].out_rel != b.selfs[i].out_rel)
      return "self copy";
  if (a.member != b.member || a.k != b.k || a.mine != b.mine || a.peers != b.peers ||
      a.order != b.order || a.chunk_rel != b.chunk_rel || a.lazy_members || b.lazy_members)
    return "reduce-scatter members";
  if (a.member && a.chunks_contiguous != b.chunks_contiguous) return "chunks_contiguous";
  if (a.chunks.size() != b.chunks.size()) return "chunks";
  for (size_t i = 0; i < a.chunks.size(); ++i)
    if (!same_box(a.chunks[i], b.chunks[i])) return "chunk box";
  if (a.fill != b.fill || a.fill_n != b.fill_n || a.op != b.op) return "partial init";
  return "";
}

using FlowKey = std::tuple<int, int, bool, uint64_t>;
std::multiset<FlowKey> flows_of(const lm::Traffic &t) {
  std::multiset<FlowKey> s;
  for (const lm::Flow &f : t.flows) s.insert(FlowKey{f.step, f.peer, f.send, f.bytes});
  return s;
}

struct Counts {
  int cases = 0, schedules = 0, with_runs = 0, mismatches = 0;
};

// Builds rank me's schedule the three ways and compares them; counts mismatches.
void compare_rank(const Layout &src, const Layout &dst, int me, Counts &n) {
  Schedule ref, exp, cmp;
  lm::build_schedule(ref, src, dst, kF32, me, ScheduleForm::kReference);
  lm::build_schedule(exp, src, dst, kF32, me, ScheduleForm::kExpanded);
  lm::build_schedule(cmp, src, dst, kF32, me, ScheduleForm::kCompressed);
  ++n.schedules;
  std::string why;
  if (ref.steps.size() != exp.steps.size() || ref.fused != exp.fused ||
      ref.work_bytes != exp.work_bytes || ref.last_moving != exp.last_moving || exp.compressed)
    why = "buffers";
  for (size_t i = 0; why.empty() && i < ref.steps.size(); ++i)
    why = compare_steps(*exp.steps[i], *ref.steps[i]);
  const lm::Traffic tr = lm::schedule_traffic(ref), tc = lm::schedule_traffic(cmp);
  if (why.empty() && (flows_of(tr) != flows_of(tc) || tr.bytes_copied != tc.bytes_copied ||
                      tr.bytes_reduced != tc.bytes_reduced || tr.work_bytes != tc.work_bytes ||
                      tr.staging_need != tc.staging_need))
    why = "compressed traffic";
  if (why.empty() && (cmp.bytes_sent != ref.bytes_sent || cmp.describe() != ref.describe()))
    why = "compressed bytes/describe";
  for (auto &st : cmp.steps)
    if (!st->send_runs.empty() || !st->recv_runs.empty()) {
      ++n.with_runs;
      break;
    }
  if (why.empty()) {
    lm::expand_schedule(cmp);  // expanding the compressed form gives the expanded one
    for (size_t i = 0; why.empty() && i < ref.steps.size(); ++i)
      why = compare_steps(*cmp.steps[i], *ref.steps[i]);
    if (!why.empty()) why = "expand_schedule: " + why;
  }
  if (!why.empty() && ++n.mismatches <= 5)
    std::fprintf(stderr, "  mismatch (%s): rank %d, %s -> %s, shape ndim %d\n", why.c_str(), me,
                 src.str().c_str(), dst.str().c_str(), src.ndim());
}

struct Rng {
  std::mt19937 g;
  int operator()(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
};

std::shared_ptr<const Grid> random_grid(Rng &U) {
  Shape s;
  int64_t size = 1;
  const int nd = U(1, 3);
  for (int i = 0; i < nd; ++i) {
    s.push_back(U(1, nd == 1 ? 9 : 5));
    size *= s.back();
  }
  std::vector<int> ranks;
  const int kind = U(0, 3);
  if (kind == 1) {  // offset, in order (affine)
    for (int64_t i = 0; i < size; ++i) ranks.push_back((int)i + 2);
  } else if (kind == 2) {  // a permutation (no rank stride)
    for (int64_t i = 0; i < size; ++i) ranks.push_back((int)i);
    std::shuffle(ranks.begin(), ranks.end(), U.g);
  }
  return std::make_shared<Grid>(s, ranks);
}

std::vector<lm_placement_t> random_placements(Rng &U, int mnd, int tnd, bool partial) {
  std::vector<lm_placement_t> pl;
  for (int m = 0; m < mnd; ++m) {
    int k = U(0, 5);
    if (k <= 1 || tnd == 0) pl.push_back(k == 0 && partial ? P() : R());
    else pl.push_back(S(U(0, tnd - 1), U(0, 2)));
  }
  return pl;
}

void test_random_forms() {
  g_test = "random_forms";
  Rng U{std::mt19937(20261204)};
  Counts n;
  for (int it = 0; it < 1500; ++it) {
    auto gs = random_grid(U);
    auto gd = U(0, 3) ? gs : random_grid(U);
    const int tnd = U(1, 3);
    Shape g;
    for (int d = 0; d < tnd; ++d) g.push_back(U(0, 3) ? U(0, 40) : U(0, 3));
    Layout src(gs, random_placements(U, gs->ndim(), tnd, true), g);
    Layout dst(gd, random_placements(U, gd->ndim(), tnd, gs == gd), g);
    try {
      lm::check_reshard(src, dst, lm::dtype_from_dl(kF32, "test"));
    } catch (const lm::Error &) {
      continue;
    }
    ++n.cases;
    int parent = 0;
    for (auto *gr : {gs.get(), gd.get()})
      for (int64_t i = 0; i < gr->size(); ++i) parent = std::max(parent, gr->rank_at_index(i) + 1);
    for (int me = 0; me <= parent; ++me) compare_rank(src, dst, me, n);
  }
  std::printf("  %d cases, %d schedules, %d with runs\n", n.cases, n.schedules, n.with_runs);
  CHECK(n.cases > 1000);
  CHECK(n.with_runs > n.schedules / 10);  // the runs are really exercised
  CHECK(n.mismatches == 0);
}

// Large regular cases: the same comparison, and the compressed form really is small.
void test_large_meshes() {
  g_test = "large_meshes";
  Counts n;
  auto one = std::make_shared<const Grid>(Shape{4096}, std::vector<int>{});
  auto two = std::make_shared<const Grid>(Shape{64, 64}, std::vector<int>{});
  const Shape g1{4096 * 3 + 5, 7}, g2{300, 301};
  const std::vector<std::pair<std::vector<lm_placement_t>, std::vector<lm_placement_t>>> c1 = {
      {{S(0)}, {R()}}, {{S(0)}, {S(1)}}, {{S(1)}, {S(0)}}, {{P()}, {S(0)}}, {{P()}, {R()}},
      {{R()}, {S(0)}}};
  const std::vector<std::pair<std::vector<lm_placement_t>, std::vector<lm_placement_t>>> c2 = {
      {{S(0), S(1)}, {R(), R()}}, {{S(0), S(1)}, {S(1), S(0)}}, {{S(0), P()}, {S(0), R()}},
      {{S(0), S(1)}, {S(0), S(0, 1)}}, {{P(), S(1)}, {S(0), S(1)}}, {{R(), S(0)}, {S(0), R()}}};
  size_t most_runs = 0;
  for (auto &c : c1)
    for (int me : {0, 1, 2047, 4094, 4095}) {
      compare_rank(Layout(one, c.first, g1), Layout(one, c.second, g1), me, n);
      Schedule s;
      lm::build_schedule(s, Layout(one, c.first, g1), Layout(one, c.second, g1), kF32, me,
                         ScheduleForm::kCompressed);
      for (auto &st : s.steps) {
        CHECK(st->sends.size() + st->recvs.size() <= 8);  // the regular peers are in runs
        CHECK(st->chunks.empty());                         // reduce-scatter members not built
        most_runs = std::max(most_runs, st->send_runs.size() + st->recv_runs.size());
      }
    }
  for (auto &c : c2)
    for (int me : {0, 65, 2080, 4095})
      compare_rank(Layout(two, c.first, g2), Layout(two, c.second, g2), me, n);
  CHECK(most_runs >= 1 && most_runs <= 4);
  CHECK(n.mismatches == 0);
}

// enumerate_intersecting: runs + single visits = the plain visits, exactly once each.
void test_enumerate_runs() {
  g_test = "enumerate_runs";
  Rng U{std::mt19937(777)};
  int mismatches = 0, runs = 0;
  using Hit = std::pair<std::vector<int64_t>, std::pair<Shape, Shape>>;
  for (int it = 0; it < 3000; ++it) {
    auto grid = random_grid(U);
    const int tnd = U(1, 3);
    Shape g;
    for (int d = 0; d < tnd; ++d) g.push_back(U(0, 30));
    Layout L(grid, random_placements(U, grid->ndim(), tnd, true), g);
    Box region;
    for (int d = 0; d < tnd; ++d) {
      int64_t lo = g[(size_t)d] ? U(0, (int)g[(size_t)d] - 1) : 0;
      int64_t hi = g[(size_t)d] ? U((int)lo + 1, (int)g[(size_t)d]) : 0;
      region.off.push_back(lo);
      region.len.push_back(hi - lo);
    }
    Shape fixed;
    for (int m = 0; m < grid->ndim(); ++m)
      fixed.push_back(U(0, 3) == 0 ? U(0, (int)grid->shape()[(size_t)m] - 1) : -1);
    std::multiset<Hit> plain, got;
    lm::enumerate_intersecting(L, fixed, region, [&](const int64_t *c, const Box &b) {
      plain.insert(Hit{std::vector<int64_t>(c, c + grid->ndim()), {b.off, b.len}});
    });
    lm::enumerate_intersecting(
        L, fixed, region,
        [&](const int64_t *c, const Box &b) {
          got.insert(Hit{std::vector<int64_t>(c, c + grid->ndim()), {b.off, b.len}});
        },
        [&](const lm::CoordRun &r) {
          ++runs;
          if (r.count < 2) ++mismatches;
          std::vector<int64_t> c(r.coord, r.coord + grid->ndim());
          for (int64_t i = 0; i < r.count; ++i) {
            Box b = *r.box;
            if (r.d >= 0) b.off[(size_t)r.d] += i * r.step;
            c[(size_t)r.m] = r.coord[r.m] + i;
            got.insert(Hit{c, {b.off, b.len}});
          }
        });
    if (got != plain && ++mismatches <= 5)
      std::fprintf(stderr, "  mismatch: %s, %zu visits, want %zu\n", L.str().c_str(), got.size(),
                   plain.size());
  }
  CHECK(runs > 500);
  CHECK(mismatches == 0);
}

}  // namespace

int main() {
  try {
    test_enumerate_runs();
    test_random_forms();
    test_large_meshes();
  } catch (const lm::Error &e) {
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    ++g_failed;
  }
  return unit_check_report("unit_schedule_forms");
}
