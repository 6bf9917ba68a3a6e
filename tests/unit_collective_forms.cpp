// SPDX-License-Identifier: BSD-3-Clause
// unit_collective_forms: which steps of a schedule run as one collective of the communicator
// (plan/collective.hpp), without MPI or a device.
//   - directed cases on a 1-D mesh of 4 (the communicator's ranks in mesh order): all-gather
//     straight into the output or through staging (Shard(1) -> Replicate), reduce-scatter straight
//     or packed, all-reduce for Partial -> Replicate even when uneven or scattered along dim 1
//     (and over both steps), all-to-
//     all; and none for uneven shards, ragged and block-cyclic ones, integer avg, an op the
//     communicator does not reduce, a communicator without all-to-all, one of another size or rank
//     order, a cross-mesh plan, a 2-D mesh whose reduce-scatter groups are not the communicator;
//   - the property the executor relies on: for random layouts (1-D and 2-D meshes, Shard /
//     Replicate / Partial / ragged / block-cyclic, even and uneven shapes), every rank of the mesh
//     finds the same kind, block size and number of steps for every step (a rank that issued a
//     collective where a peer posted messages would hang), and a form's blocks are what the
//     schedule moves: an all-gather's n blocks hold the tensor, a reduce-scatter's the input.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "layout/layout.hpp"
#include "plan/collective.hpp"
#include "plan/planner.hpp"
#include "unit_check.hpp"

namespace {

using lm::CollComm;
using lm::CollForm;
using lm::CollKind;
using lm::Grid;
using lm::Layout;
using lm::Schedule;
using lm::Shape;

lm_placement_t R() { return LM_PLACEMENT_REPLICATE; }
lm_placement_t S(int d) { return LM_PLACEMENT_SHARD(d); }
lm_placement_t P(int op = LM_REDUCE_SUM) { return LM_PLACEMENT_PARTIAL(op); }
lm_placement_t BC(int d, int b) { return LM_PLACEMENT_BLOCK_CYCLIC(d, b, 0); }

const DLDataType kF32{kDLFloat, 32, 1}, kI32{kDLInt, 32, 1};

// A communicator of `size` ranks where plan rank r is rank map[r] (identity when empty), with
// every collective, or all but all-to-all, reducing everything but `no_op`.
CollComm comm(int size, std::vector<int> map = {}, bool all_to_all = true, int no_op = -1) {
  CollComm cc;
  cc.size = size;
  cc.rank_of = [map](int r) { return map.empty() ? r : map[(size_t)r]; };
  cc.offers = [all_to_all, no_op](CollKind k, int op) {
    return (k != CollKind::kAllToAll || all_to_all) && op != no_op;
  };
  return cc;
}

std::shared_ptr<const Grid> grid(Shape s) { return std::make_shared<const Grid>(s, std::vector<int>{}); }

// The form of step i of rank me's schedule from a to b.
CollForm form(const Layout &a, const Layout &b, int me, size_t i, const CollComm &cc,
              DLDataType dt = kF32) {
  Schedule s;
  lm::build_schedule(s, a, b, dt, me);
  return i < s.steps.size() ? lm::collective_form(s, i, cc) : CollForm{};
}

void test_directed() {
  g_test = "directed";
  auto g = grid({4});
  const CollComm cc = comm(4);
  auto L = [&](lm_placement_t p, Shape s) { return Layout(g, {p}, s); };
  CollForm f = form(L(S(0), {8, 3}), L(R(), {8, 3}), 1, 0, cc);
  CHECK(f.kind == CollKind::kAllGather && f.count == 6 && f.n == 4 && !f.pack && !f.unpack);
  f = form(L(S(1), {3, 8}), L(R(), {3, 8}), 2, 0, cc);
  CHECK(f.kind == CollKind::kAllGather && f.count == 6 && f.unpack && f.out_blocks.size() == 4 &&
        f.out_blocks[3].off == Shape({0, 6}) && f.out_blocks[3].len == Shape({3, 2}));
  CHECK(form(L(S(0), {9, 3}), L(R(), {9, 3}), 0, 0, cc).kind == CollKind::kNone);  // uneven
  f = form(L(P(), {8, 5}), L(S(0), {8, 5}), 3, 0, cc);
  CHECK(f.kind == CollKind::kReduceScatter && f.count == 10 && !f.pack && f.op == LM_REDUCE_SUM);
  f = form(L(P(), {3, 8}), L(S(1), {3, 8}), 0, 0, cc);
  CHECK(f.kind == CollKind::kReduceScatter && f.pack && f.in_blocks[1].off == Shape({0, 2}));
  CHECK(form(L(P(), {9, 5}), L(S(0), {9, 5}), 0, 0, cc).kind == CollKind::kNone);  // uneven
  f = form(L(P(LM_REDUCE_AVG), {9, 3}), L(R(), {9, 3}), 2, 0, cc);  // uneven: still one
  CHECK(f.kind == CollKind::kAllReduce && f.steps == 2 && f.count == 27 && f.divide_by == 4);
  {  // scattered along dim 1 (the planner's choice here): chunks not slices, still one
    Schedule s;
    lm::build_schedule(s, L(P(), {4, 12}), L(R(), {4, 12}), kF32, 1);
    CHECK(s.steps.size() == 2 && s.steps[0]->d == 1 && !s.steps[0]->chunks_contiguous);
    f = lm::collective_form(s, 0, cc);
    CHECK(f.kind == CollKind::kAllReduce && f.count == 48 && !f.pack && !f.unpack);
  }
  f = form(L(P(LM_REDUCE_AVG), {8, 3}), L(R(), {8, 3}), 2, 0, cc, kI32);  // 128-bit avg
  CHECK(f.kind == CollKind::kNone);
  CHECK(form(L(P(LM_REDUCE_AVG), {8, 3}), L(R(), {8, 3}), 2, 1, cc, kI32).kind ==
        CollKind::kAllGather);  // its all-gather step still is one
  CHECK(form(L(P(LM_REDUCE_MAX), {8, 3}), L(R(), {8, 3}), 1, 0, comm(4, {}, true, LM_REDUCE_MAX))
            .kind == CollKind::kNone);  // an op the communicator does not reduce
  f = form(L(S(0), {8, 12}), L(S(1), {8, 12}), 1, 0, cc);
  CHECK(f.kind == CollKind::kAllToAll && f.count == 6 && f.pack && !f.unpack);
  CHECK(form(L(S(0), {8, 12}), L(S(1), {8, 12}), 1, 0, comm(4, {}, false)).kind == CollKind::kNone);
  CHECK(form(L(S(0), {8, 10}), L(S(1), {8, 10}), 1, 0, cc).kind == CollKind::kNone);  // 10 % 4
  CHECK(form(L(BC(0, 1), {8, 3}), L(R(), {8, 3}), 0, 0, cc).kind == CollKind::kNone);
  CHECK(form(L(S(0), {8, 3}), L(R(), {8, 3}), 0, 0, comm(5)).kind == CollKind::kNone);
  CHECK(form(L(S(0), {8, 3}), L(R(), {8, 3}), 0, 0, comm(4, {1, 0, 2, 3})).kind == CollKind::kNone);
  CHECK(form(L(S(0), {8, 3}), L(R(), {8, 3}), 0, 0, CollComm{}).kind == CollKind::kNone);
  // Across meshes (another grid of the same ranks, reversed): no collective.
  auto rev = std::make_shared<const Grid>(Shape{4}, std::vector<int>{3, 2, 1, 0});
  CHECK(form(L(S(0), {8, 3}), Layout(rev, {R()}, {8, 3}), 0, 0, cc).kind == CollKind::kNone);
  // A 2-D mesh: [S(0), S(1)] -> R is one all-gather (blocks not in rank order: through staging);
  // [P, R] -> R reduces over groups of 2, not the communicator of 4.
  auto g2 = grid({2, 2});
  f = form(Layout(g2, {S(0), S(1)}, {4, 4}), Layout(g2, {R(), R()}, {4, 4}), 3, 0, cc);
  CHECK(f.kind == CollKind::kAllGather && f.count == 4 && f.unpack);
  CHECK(form(Layout(g2, {P(), R()}, {4, 4}), Layout(g2, {R(), R()}, {4, 4}), 0, 0, cc).kind ==
        CollKind::kNone);
}

struct Rng {
  std::mt19937 g;
  int operator()(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
};

lm_placement_t random_placement(Rng &U, int ndim) {
  switch (U(0, 5)) {
    case 0: return R();
    case 1: return P(U(0, 1) ? LM_REDUCE_SUM : LM_REDUCE_AVG);
    case 2: return BC(U(0, ndim - 1), U(1, 3));
    default: return S(U(0, ndim - 1));
  }
}

// Every rank of the mesh finds the same forms; an all-gather's or reduce-scatter's blocks are
// the tensor's and the input's.
void test_ranks_agree() {
  g_test = "ranks_agree";
  Rng U{std::mt19937(20261214)};
  int cases = 0, collective = 0, disagree = 0;
  for (int c = 0; c < 3000; ++c) {
    const bool two = U(0, 2) == 0;
    auto g = two ? grid({U(1, 3), U(1, 3)}) : grid({U(1, 6)});
    const int n = (int)g->size(), nd = U(1, 2);
    Shape shape;
    for (int d = 0; d < nd; ++d) shape.push_back(U(0, 3) ? n * U(1, 3) : U(1, 9));
    std::vector<lm_placement_t> a, b;
    for (int m = 0; m < g->ndim(); ++m) a.push_back(random_placement(U, nd));
    for (int m = 0; m < g->ndim(); ++m) b.push_back(random_placement(U, nd));
    for (auto &p : b)
      if (p.kind == LM_PARTIAL) p = R();  // Partial targets: reshards that exist
    Layout src, dst;
    try {
      src = Layout(g, a, shape);
      dst = Layout(g, b, shape);
      lm::validate_placements(a.data(), (int)a.size(), nd, "a");
      lm::validate_placements(b.data(), (int)b.size(), nd, "b");
      lm::check_ragged(src, "a");
      lm::check_ragged(dst, "b");
      lm::check_reshard(src, dst, lm::DType::F32);
    } catch (const lm::Error &) {
      continue;  // not a valid reshard
    }
    ++cases;
    std::vector<Schedule> s((size_t)n);
    for (int me = 0; me < n; ++me) lm::build_schedule(s[(size_t)me], src, dst, kF32, me);
    const CollComm cc = comm(n);
    for (size_t i = 0; i < s[0].steps.size(); ++i) {
      const CollForm f0 = lm::collective_form(s[0], i, cc);
      collective += f0.kind != CollKind::kNone;
      for (int me = 1; me < n; ++me) {
        CHECK(s[(size_t)me].steps.size() == s[0].steps.size());
        if (s[(size_t)me].steps.size() != s[0].steps.size()) break;
        const CollForm f = lm::collective_form(s[(size_t)me], i, cc);
        const bool alike = f.kind == f0.kind && f.count == f0.count && f.steps == f0.steps && f.n == f0.n;
        CHECK(alike);
        disagree += !alike;
      }
      int64_t total = 1;
      for (int64_t e : shape) total *= e;
      const lm::SchedStep &st = *s[0].steps[i];
      if (f0.kind == CollKind::kAllGather) CHECK(f0.count * n == total);
      if (f0.kind == CollKind::kReduceScatter) CHECK(f0.count * n == st.inbox.numel());
      if (f0.kind == CollKind::kAllReduce) CHECK(f0.count == st.inbox.numel() && f0.steps == 2);
      if (f0.kind == CollKind::kAllToAll) CHECK(f0.count * n * n == total);
    }
  }
  std::printf("ranks_agree: %d valid reshards, %d steps as collectives, %d rank(s) deciding "
              "otherwise than rank 0\n", cases, collective, disagree);
  CHECK(collective > 100);  // the random layouts do meet the forms
}

}  // namespace

int main() {
  try {
    test_directed();
    test_ranks_agree();
  } catch (const lm::Error &e) {
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    ++g_failed;
  }
  return unit_check_report("unit_collective_forms");
}
