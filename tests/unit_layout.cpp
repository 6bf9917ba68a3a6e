// SPDX-License-Identifier: BSD-3-Clause
// unit_layout: pure C++ unit tests of localmap's internals (layout math, grids, the planner, the
// half/bfloat16 conversions). No MPI call at run time: plans are built with MPI_COMM_NULL.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "layout/extents.hpp"
#include "layout/layout.hpp"
#include "layout/permute.hpp"
#include "exec/plan.hpp"
#include "layout/reduce.hpp"
#include "unit_check.hpp"

namespace {


#define CHECK_EQ(a, b)                                                                       \
  do {                                                                                       \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                    \
    if (va_ == vb_) {                                                                        \
      ++g_passed;                                                                            \
    } else {                                                                                 \
      ++g_failed;                                                                            \
      std::fprintf(stderr, "FAIL [%s] %s:%d: %s == %s (%lld != %lld)\n", g_test, __FILE__,  \
                   __LINE__, #a, #b, va_, vb_);                                              \
    }                                                                                        \
  } while (0)

using lm::Box;
using lm::Grid;
using lm::Layout;
using lm::Shape;

lm_placement_t R() { return LM_PLACEMENT_REPLICATE; }
lm_placement_t S(int d, int order = 0) { return lm_placement_t{LM_SHARD, d, order, 0, 0, 0, 0, 0}; }
lm_placement_t P(int op = LM_REDUCE_SUM) { return LM_PLACEMENT_PARTIAL(op); }

const DLDataType kF64{kDLFloat, 64, 1};

std::vector<int64_t> chunk_lens(int64_t n, int64_t parts) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < parts; ++i) v.push_back(lm::chunk(n, parts, i).len);
  return v;
}

// ---------------------------------------------------------------------------------------------
void test_chunk_matches_torch() {
  g_test = "chunk_matches_torch";
  CHECK((chunk_lens(5, 4) == std::vector<int64_t>{2, 2, 1, 0}));
  CHECK((chunk_lens(1, 4) == std::vector<int64_t>{1, 0, 0, 0}));
  CHECK((chunk_lens(17, 8) == std::vector<int64_t>{3, 3, 3, 3, 3, 2, 0, 0}));
  CHECK((chunk_lens(13, 4) == std::vector<int64_t>{4, 4, 4, 1}));
  CHECK((chunk_lens(14, 4) == std::vector<int64_t>{4, 4, 4, 2}));
  CHECK((chunk_lens(0, 4) == std::vector<int64_t>{0, 0, 0, 0}));
  CHECK((chunk_lens(8, 4) == std::vector<int64_t>{2, 2, 2, 2}));
  CHECK((chunk_lens(7, 1) == std::vector<int64_t>{7}));
  // Offsets: contiguous, starting at 0, clamped at n; lengths sum to n.
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t parts = 1; parts <= 12; ++parts) {
      int64_t b = (n + parts - 1) / parts, expect_off = 0, sum = 0;
      bool ok = true;
      for (int64_t i = 0; i < parts; ++i) {
        lm::Range r = lm::chunk(n, parts, i);
        int64_t want_len = std::max<int64_t>(0, std::min(b, n - i * b));
        if (r.off != expect_off || r.len != want_len || r.off > n) ok = false;
        expect_off += r.len;
        sum += r.len;
      }
      CHECK(ok && sum == n);
    }
  }
  // 17 on 8: offsets
  CHECK_EQ(lm::chunk(17, 8, 5).off, 15);
  CHECK_EQ(lm::chunk(17, 8, 6).off, 17);
  CHECK_EQ(lm::chunk(17, 8, 7).off, 17);
}

void test_chunk_span() {
  g_test = "chunk_span";
  int64_t f = -1, l = -1;
  CHECK(lm::chunk_span(17, 8, 0, 17, &f, &l));
  CHECK_EQ(f, 0);
  CHECK_EQ(l, 5);  // parts 6 and 7 are empty
  CHECK(lm::chunk_span(17, 8, 4, 7, &f, &l));
  CHECK_EQ(f, 1);
  CHECK_EQ(l, 2);
  CHECK(!lm::chunk_span(17, 8, 5, 5, &f, &l));  // empty range
  CHECK(!lm::chunk_span(0, 4, 0, 1, &f, &l));   // empty extent
  // Brute force: [first, last] are exactly the non-empty chunks intersecting [lo, hi).
  for (int64_t n = 1; n <= 20; ++n)
    for (int64_t parts = 1; parts <= 9; ++parts)
      for (int64_t lo = 0; lo < n; ++lo)
        for (int64_t hi = lo + 1; hi <= n; ++hi) {
          int64_t bf = -1, bl = -1;
          for (int64_t i = 0; i < parts; ++i) {
            lm::Range r = lm::chunk(n, parts, i);
            if (r.len > 0 && r.off < hi && r.off + r.len > lo) {
              if (bf < 0) bf = i;
              bl = i;
            }
          }
          int64_t cf = -1, cl = -1;
          bool got = lm::chunk_span(n, parts, lo, hi, &cf, &cl);
          if (bf < 0) {
            CHECK(!got);
          } else if (!(got && cf == bf && cl == bl)) {
            CHECK(got && cf == bf && cl == bl);
            std::fprintf(stderr, "  n=%lld parts=%lld [%lld,%lld): got %d [%lld,%lld] want [%lld,%lld]\n",
                         (long long)n, (long long)parts, (long long)lo, (long long)hi, got,
                         (long long)cf, (long long)cl, (long long)bf, (long long)bl);
          } else {
            ++g_passed;
          }
        }
}

// ---------------------------------------------------------------------------------------------
void test_box_at_1d() {
  g_test = "box_at_1d";
  auto grid = std::make_shared<Grid>(Shape{4}, std::vector<int>{});
  Layout L(grid, {S(0)}, Shape{5, 3});
  const int64_t want_off[4] = {0, 2, 4, 5}, want_len[4] = {2, 2, 1, 0};
  for (int64_t c = 0; c < 4; ++c) {
    Box b = L.box_at(&c);
    CHECK_EQ(b.off[0], want_off[c]);
    CHECK_EQ(b.len[0], want_len[c]);
    CHECK_EQ(b.off[1], 0);
    CHECK_EQ(b.len[1], 3);
  }
  Layout L1(grid, {S(1)}, Shape{5, 3});  // 3 columns on 4 ranks: 1,1,1,0
  for (int64_t c = 0; c < 4; ++c) {
    Box b = L1.box_at(&c);
    CHECK_EQ(b.len[0], 5);
    CHECK_EQ(b.len[1], c < 3 ? 1 : 0);
    CHECK_EQ(b.off[1], c < 3 ? c : 3);
  }
  Layout LR(grid, {R()}, Shape{5, 3});
  Layout LP(grid, {P()}, Shape{5, 3});
  for (int64_t c = 0; c < 4; ++c) {
    CHECK((LR.box_at(&c).len == Shape{5, 3}));
    CHECK((LP.box_at(&c).len == Shape{5, 3}));
    CHECK((LP.box_at(&c).off == Shape{0, 0}));
  }
  CHECK(LP.has_partial());
  CHECK(!LR.has_partial());
  CHECK(L.str() == "[S(0)]");
}

// Reference: split [0, n) by the mesh dims in `seq` (outermost first).
lm::Range nested_ref(int64_t n, const Shape &mshape, const std::vector<int> &seq,
                     const int64_t *coord) {
  int64_t off = 0, len = n;
  for (int m : seq) {
    lm::Range r = lm::chunk(len, mshape[(size_t)m], coord[m]);
    off += r.off;
    len = r.len;
  }
  return {off, len};
}

void test_box_at_nested() {
  g_test = "box_at_nested";
  auto grid = std::make_shared<Grid>(Shape{2, 3}, std::vector<int>{});
  // Both mesh dims shard tensor dim 0 of [10]; default order: mesh dim 0 first.
  Layout A(grid, {S(0), S(0)}, Shape{10});
  CHECK((A.order[0] == std::vector<int>{0, 1}));
  // dim0: [0,5) [5,10); each by 3 (block 2): [0,2) [2,4) [4,5)
  const int64_t a_off[2][3] = {{0, 2, 4}, {5, 7, 9}}, a_len[2][3] = {{2, 2, 1}, {2, 2, 1}};
  // order: mesh dim 1 first (order 0), then mesh dim 0 (order 1).
  Layout B(grid, {S(0, 1), S(0, 0)}, Shape{10});
  CHECK((B.order[0] == std::vector<int>{1, 0}));
  // dim1 first: block 4: [0,4) [4,8) [8,10); then by 2: [0,2)[2,4) / [4,6)[6,8) / [8,9)[9,10)
  const int64_t b_off[2][3] = {{0, 4, 8}, {2, 6, 9}}, b_len[2][3] = {{2, 2, 1}, {2, 2, 1}};
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      int64_t c[2] = {i, j};
      Box a = A.box_at(c), b = B.box_at(c);
      CHECK_EQ(a.off[0], a_off[i][j]);
      CHECK_EQ(a.len[0], a_len[i][j]);
      CHECK_EQ(b.off[0], b_off[i][j]);
      CHECK_EQ(b.len[0], b_len[i][j]);
    }
  // Explicit orders equal to the default give the same layout; reversed ones differ.
  Layout A2(grid, {S(0, 0), S(0, 5)}, Shape{10});
  CHECK(A.equals(A2));
  CHECK(!A.equals(B));
  // The boxes of a nested layout tile the tensor exactly (each element once), for many extents.
  for (int64_t n = 0; n <= 30; ++n) {
    for (int ord = 0; ord < 2; ++ord) {
      Layout L(grid, {S(0, ord), S(0, 1 - ord)}, Shape{n, 2});
      std::vector<int> seen((size_t)n, 0);
      std::vector<int> seq = ord == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0};
      bool ok = true;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          int64_t c[2] = {i, j};
          Box b = L.box_at(c);
          lm::Range r = nested_ref(n, grid->shape(), seq, c);
          if (b.off[0] != r.off || b.len[0] != r.len || b.len[1] != 2) ok = false;
          for (int64_t k = b.off[0]; k < b.off[0] + b.len[0]; ++k) seen[(size_t)k]++;
        }
      for (int s : seen)
        if (s != 1) ok = false;
      CHECK(ok);
    }
  }
  // Three mesh dims, two of which co-shard dim 1, one shards dim 0.
  auto g3 = std::make_shared<Grid>(Shape{2, 2, 3}, std::vector<int>{});
  Layout C(g3, {S(1, 2), S(0), S(1, 1)}, Shape{7, 11});
  CHECK((C.order[1] == std::vector<int>{2, 0}));
  CHECK((C.order[0] == std::vector<int>{1}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) {
        int64_t c[3] = {i, j, k};
        Box b = C.box_at(c);
        lm::Range r1 = nested_ref(11, g3->shape(), {2, 0}, c);
        lm::Range r0 = nested_ref(7, g3->shape(), {1}, c);
        CHECK(b.off[1] == r1.off && b.len[1] == r1.len && b.off[0] == r0.off && b.len[0] == r0.len);
      }
}

// ---------------------------------------------------------------------------------------------
void test_grid() {
  g_test = "grid";
  // Non-contiguous explicit ranks.
  std::vector<int> ranks = {5, 3, 1, 0, 2, 4};
  Grid g(Shape{2, 3}, ranks);
  CHECK_EQ(g.size(), 6);
  CHECK_EQ(g.ndim(), 2);
  for (int64_t i = 0; i < 6; ++i) {
    CHECK_EQ(g.rank_at_index(i), ranks[(size_t)i]);
    CHECK_EQ(g.index_of(ranks[(size_t)i]), i);
    int64_t c[2];
    g.coord_of(i, c);
    CHECK_EQ(c[0], i / 3);
    CHECK_EQ(c[1], i % 3);
    CHECK_EQ(g.index_at(c), i);
  }
  CHECK_EQ(g.index_of(6), -1);
  CHECK_EQ(g.index_of(-1), -1);
  // A sparse, non-contiguous subset of a bigger parent.
  Grid sp(Shape{3}, std::vector<int>{7, 2, 11});
  CHECK_EQ(sp.index_of(2), 1);
  CHECK_EQ(sp.index_of(11), 2);
  CHECK_EQ(sp.index_of(3), -1);
  CHECK_EQ(sp.rank_at_index(0), 7);
  // Contiguous explicit ranks (stored as a base offset).
  Grid c4(Shape{2, 2}, std::vector<int>{4, 5, 6, 7});
  CHECK_EQ(c4.index_of(4), 0);
  CHECK_EQ(c4.index_of(7), 3);
  CHECK_EQ(c4.index_of(3), -1);
  CHECK_EQ(c4.index_of(8), -1);
  CHECK_EQ(c4.rank_at_index(2), 6);
  // Default ranks.
  Grid d(Shape{2, 2, 2}, {});
  for (int64_t i = 0; i < 8; ++i) {
    int64_t c[3];
    d.coord_of(i, c);
    CHECK_EQ(c[0] * 4 + c[1] * 2 + c[2], i);
    CHECK_EQ(d.index_at(c), i);
    CHECK_EQ(d.index_of((int)i), i);
  }
  CHECK_EQ(d.index_of(8), -1);
  // same_as
  Grid g2(Shape{2, 3}, ranks);
  Grid g3(Shape{3, 2}, ranks);
  Grid g4(Shape{2, 3}, std::vector<int>{5, 3, 1, 0, 4, 2});
  CHECK(g.same_as(g2));
  CHECK(!g.same_as(g3));
  CHECK(!g.same_as(g4));
  CHECK(d.same_as(Grid(Shape{2, 2, 2}, std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})));
}

// ---------------------------------------------------------------------------------------------
using Hit = std::pair<std::vector<int64_t>, std::pair<Shape, Shape>>;

void test_enumerate_intersecting_random() {
  g_test = "enumerate_intersecting_random";
  std::mt19937 rng(12345);
  auto U = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int cases = 0, mismatches = 0;
  for (int it = 0; it < 3000; ++it) {
    int mnd = U(1, 3), tnd = U(1, 3);
    Shape ms, gs;
    for (int m = 0; m < mnd; ++m) ms.push_back(U(1, 4));
    for (int d = 0; d < tnd; ++d) gs.push_back(U(0, 9));
    std::vector<lm_placement_t> pl;
    for (int m = 0; m < mnd; ++m) {
      int k = U(0, 5);
      if (k <= 1) pl.push_back(R());
      else if (k == 2) pl.push_back(P());
      else pl.push_back(S(U(0, tnd - 1), U(0, 2)));
    }
    auto grid = std::make_shared<Grid>(ms, std::vector<int>{});
    Layout L(grid, pl, gs);
    Box region;
    for (int d = 0; d < tnd; ++d) {
      int64_t lo = gs[(size_t)d] ? U(0, (int)gs[(size_t)d] - 1) : 0;
      int64_t hi = gs[(size_t)d] ? U((int)lo + 1, (int)gs[(size_t)d]) : 0;
      region.off.push_back(lo);
      region.len.push_back(hi - lo);
    }
    Shape fixed;
    for (int m = 0; m < mnd; ++m) fixed.push_back(U(0, 2) == 0 ? U(0, (int)ms[(size_t)m] - 1) : -1);

    std::set<Hit> got, want;
    int dup = 0;
    lm::enumerate_intersecting(L, fixed, region, [&](const int64_t *c, const Box &b) {
      Hit h{std::vector<int64_t>(c, c + mnd), {b.off, b.len}};
      if (!got.insert(h).second) ++dup;
    });
    int64_t size = grid->size();
    for (int64_t i = 0; i < size; ++i) {
      std::vector<int64_t> c((size_t)mnd);
      grid->coord_of(i, c.data());
      bool ok = true;
      for (int m = 0; m < mnd; ++m)
        if (fixed[(size_t)m] >= 0 && c[(size_t)m] != fixed[(size_t)m]) ok = false;
      if (!ok) continue;
      Box b = lm::intersect(L.box_at(c.data()), region);
      if (b.empty()) continue;
      want.insert(Hit{c, {b.off, b.len}});
    }
    ++cases;
    if (got != want || dup) {
      ++mismatches;
      if (mismatches <= 5)
        std::fprintf(stderr, "  mismatch: layout %s gshape ndim %d: got %zu hits (%d dup), want %zu\n",
                     L.str().c_str(), tnd, got.size(), dup, want.size());
    }
  }
  CHECK_EQ(mismatches, 0);
  CHECK(cases == 3000);
}

// ---------------------------------------------------------------------------------------------
// Planning for one rank of a 2^20-rank 1-D mesh: must be O(peers), never O(mesh) per peer.
int64_t plan_bytes(const Layout &src, const Layout &dst, int me, size_t *nsteps) {
  auto plan = lm::plan_build(src, dst, kF64, MPI_COMM_NULL, me);
  if (nsteps) *nsteps = plan->steps.size();
  return plan->bytes_sent;
}

void test_plan_huge_mesh() {
  g_test = "plan_huge_mesh";
  const int64_t N = int64_t(1) << 20;
  auto grid = std::make_shared<const Grid>(Shape{N}, std::vector<int>{});
  const Shape gs{N, 8};
  Layout s0(grid, {S(0)}, gs), s1(grid, {S(1)}, gs), r(grid, {R()}, gs), p(grid, {P()}, gs);
  size_t ns = 0;
  try {
    // S(0) -> S(1): rank k holds row k (8 f64); columns 0..7 live on ranks 0..7 (one each), the
    // other ranks hold nothing. Rank k sends one element to each of ranks 0..7 except itself.
    CHECK_EQ(plan_bytes(s0, s1, 12345, &ns), 8 * 8);
    CHECK_EQ(plan_bytes(s0, s1, (int)(N - 1), &ns), 8 * 8);
    CHECK_EQ(plan_bytes(s0, s1, 3, &ns), 7 * 8);
    // S(0) -> R: my row goes to every other rank.
    CHECK_EQ(plan_bytes(s0, r, 777, &ns), (N - 1) * 8 * 8);
    // P(sum) -> S(0): reduce-scatter; I send every row but mine (8 f64 each).
    CHECK_EQ(plan_bytes(p, s0, 4242, &ns), (N - 1) * 8 * 8);
    CHECK_EQ(ns, 1u);
    // R -> S(0): purely local slicing.
    CHECK_EQ(plan_bytes(r, s0, 99999, &ns), 0);
    // S(0) -> S(0): nothing to send.
    CHECK_EQ(plan_bytes(s0, s0, 5, &ns), 0);
    // R -> P(sum): local identity fill, nothing sent.
    CHECK_EQ(plan_bytes(r, p, 17, &ns), 0);
  } catch (const lm::Error &e) {
    CHECK(!"plan_build threw");
    std::fprintf(stderr, "  %s\n", e.what());
  }
  // A rank outside the mesh plans nothing to send.
  auto sub = std::make_shared<const Grid>(Shape{4}, std::vector<int>{0, 1, 2, 3});
  Layout a(sub, {S(0)}, Shape{8}), b(sub, {R()}, Shape{8});
  auto plan = lm::plan_build(a, b, kF64, MPI_COMM_NULL, 9);
  CHECK(!plan->involved);
  CHECK_EQ(plan->bytes_sent, 0);
  // Mismatched global shapes are refused.
  bool threw = false;
  try {
    lm::plan_build(a, Layout(sub, {R()}, Shape{9}), kF64, MPI_COMM_NULL, 0);
  } catch (const lm::Error &e) {
    threw = e.status() == LM_ERR_INVALID_ARGUMENT && e.message().size() > 0;
  }
  CHECK(threw);
  // Partial(max) of complex has no meaning.
  threw = false;
  try {
    Layout pm(sub, {P(LM_REDUCE_MAX)}, Shape{8});
    lm::plan_build(pm, b, DLDataType{kDLComplex, 64, 1}, MPI_COMM_NULL, 0);
  } catch (const lm::Error &e) {
    threw = e.status() == LM_ERR_NOT_SUPPORTED;
  }
  CHECK(threw);
}

// Small-mesh plan bytes against a brute-force count (same mesh, no Partial): each element a rank
// holds is sent to every other rank that needs it and takes it from this rank.
void test_plan_bytes_small() {
  g_test = "plan_bytes_small";
  auto grid = std::make_shared<const Grid>(Shape{3}, std::vector<int>{});
  Shape gs{7, 5};
  // S(0) -> S(1) on 3 ranks: rows 3,3,1; cols 2,2,1. Rank 0 holds 3 rows x 5 cols, keeps its
  // 3x2 block, sends 3x2 to rank 1 and 3x1 to rank 2: 9 elements.
  Layout s0(grid, {S(0)}, gs), s1(grid, {S(1)}, gs), r(grid, {R()}, gs);
  CHECK_EQ(plan_bytes(s0, s1, 0, nullptr), 9 * 8);
  CHECK_EQ(plan_bytes(s0, s1, 2, nullptr), 4 * 8);  // 1 row: 2 + 2 elements out
  CHECK_EQ(plan_bytes(s0, r, 1, nullptr), 2 * 15 * 8);
  CHECK_EQ(plan_bytes(s0, r, 2, nullptr), 2 * 5 * 8);
  // P(sum) -> R: reduce-scatter over the largest dim (rows 3,3,1), then an allgather of my rows.
  Layout p(grid, {P()}, gs);
  CHECK_EQ(plan_bytes(p, r, 0, nullptr), (3 + 1) * 5 * 8 + 2 * 3 * 5 * 8);
  CHECK_EQ(plan_bytes(p, r, 2, nullptr), (3 + 3) * 5 * 8 + 2 * 1 * 5 * 8);
  CHECK_EQ(plan_bytes(r, p, 1, nullptr), 0);
}

// Blocks of 8 -> 6 over 2 processes meet in runs that repeat every 48 elements (6, 2, 4, 4, 2, 6,
// ...): the pieces step lists one strided run per phase of that period, not a run per meeting,
// and the runs still name exactly the elements the two ranks share (brute force, every element).
void test_pieces_periodic() {
  g_test = "pieces_periodic";
  auto grid = std::make_shared<const Grid>(Shape{2}, std::vector<int>{});
  const lm_placement_t b8 = LM_PLACEMENT_BLOCK_CYCLIC(0, 8, 0), b6 = LM_PLACEMENT_BLOCK_CYCLIC(0, 6, 1);
  for (int64_t n : {480, 485, 100, 47}) {
    Layout in(grid, {b8}, Shape{n}), out(grid, {b6}, Shape{n});
    auto plan = lm::plan_build(in, out, kF64, MPI_COMM_NULL, 0);
    const lm::SchedStep *st = nullptr;
    for (const auto &x : plan->steps)
      if (x->kind == lm::StepKind::kPieces) st = x.get();
    CHECK(st != nullptr);
    if (!st) continue;
    // Brute force: rank 0 holds blocks 0, 2, 4, ... of 8; the target's rank 1 (source offset 1
    // on the target) blocks 0, 2, 4, ... of 6. Pairs (local index at 0, local index at 1).
    std::set<std::pair<int64_t, int64_t>> want, got;
    for (int64_t g = 0; g < n; ++g)
      if ((g / 8) % 2 == 0 && (g / 6) % 2 == 0) want.insert({g / 16 * 8 + g % 8, g / 12 * 6 + g % 6});
    size_t runs = 0;
    for (const lm::PieceMsg &m : st->psends) {
      CHECK_EQ(m.peer, 1);
      CHECK_EQ(m.dims.size(), 1u);
      runs += m.dims[0].size();
      for (const lm::PieceRun &r : m.dims[0])
        for (int64_t k = 0; k < r.count; ++k)
          for (int64_t i = 0; i < r.len; ++i)
            CHECK(got.insert({r.a + k * r.as + i, r.b + k * r.bs + i}).second);  // once each
    }
    CHECK(got == want);
    // 6, 2, 4, 4, 2, 6 per 48 elements: 6 phases and a partial period; a run per meeting would be
    // n / 8 of them.
    if (n >= 480) CHECK(runs <= 12);
  }
}

// ---------------------------------------------------------------------------------------------
uint16_t half_next(uint16_t h) { return (uint16_t)(h + 1); }

void test_half() {
  g_test = "half";
  CHECK_EQ(lm::float_to_half(0.0f), 0x0000);
  CHECK_EQ(lm::float_to_half(-0.0f), 0x8000);
  CHECK_EQ(lm::float_to_half(1.0f), 0x3c00);
  CHECK_EQ(lm::float_to_half(-2.0f), 0xc000);
  CHECK_EQ(lm::float_to_half(0.5f), 0x3800);
  CHECK_EQ(lm::float_to_half(65504.0f), 0x7bff);
  CHECK_EQ(lm::float_to_half(1e6f), 0x7c00);
  CHECK_EQ(lm::float_to_half(-1e6f), 0xfc00);
  CHECK_EQ(lm::float_to_half(INFINITY), 0x7c00);
  CHECK_EQ(lm::float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  CHECK_EQ(lm::float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  CHECK_EQ(lm::float_to_half(std::ldexp(1.0f, -26)), 0x0000);  // underflow
  uint16_t hn = lm::float_to_half(NAN);
  CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
  CHECK(std::isnan(lm::half_to_float(0x7e00)));
  CHECK(lm::half_to_float(0x7c00) == INFINITY);
  CHECK(lm::half_to_float(0xfc00) == -INFINITY);
  CHECK(lm::half_to_float(0x3555) == 0x1.554p-2f);
  CHECK(lm::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(lm::half_to_float(0x03ff) == std::ldexp(1023.0f, -24));
  // Every finite half round-trips exactly; NaNs stay NaN.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = lm::half_to_float((uint16_t)h);
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan) {
      if (!std::isnan(f)) ++bad;
      uint16_t back = lm::float_to_half(f);
      if (!((back & 0x7c00) == 0x7c00 && (back & 0x3ff))) ++bad;
      continue;
    }
    if (lm::float_to_half(f) != h) ++bad;
  }
  CHECK_EQ(bad, 0);
  // Round to nearest, ties to even, at every midpoint between consecutive positive halves
  // (midpoints are exact in float), including the subnormal range and the overflow to inf.
  bad = 0;
  for (uint16_t h = 0; h < 0x7c00; ++h) {
    uint16_t n = half_next(h);
    float a = lm::half_to_float(h);
    float b = n == 0x7c00 ? 65536.0f : lm::half_to_float(n);
    float mid = (a + b) / 2;
    uint16_t even = (h & 1) ? n : h;
    if (lm::float_to_half(mid) != even) ++bad;
    if (lm::float_to_half(std::nextafter(mid, 0.0f)) != h) ++bad;
    if (lm::float_to_half(std::nextafter(mid, INFINITY)) != n) ++bad;
    if (lm::float_to_half(-mid) != (uint16_t)(even | 0x8000)) ++bad;
  }
  CHECK_EQ(bad, 0);
}

void test_bf16() {
  g_test = "bf16";
  CHECK_EQ(lm::float_to_bf16(1.0f), 0x3f80);
  CHECK_EQ(lm::float_to_bf16(-2.0f), 0xc000);
  CHECK_EQ(lm::float_to_bf16(0.0f), 0x0000);
  CHECK_EQ(lm::float_to_bf16(-0.0f), 0x8000);
  CHECK_EQ(lm::float_to_bf16(INFINITY), 0x7f80);
  CHECK(lm::bf16_to_float(0x3f80) == 1.0f);
  CHECK(lm::bf16_to_float(0x4049) == 3.140625f);
  CHECK(std::isnan(lm::bf16_to_float(lm::float_to_bf16(NAN))));
  // A NaN with payload only in the low 16 bits must stay NaN (not become inf).
  uint32_t snan_bits = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  CHECK(std::isnan(lm::bf16_to_float(lm::float_to_bf16(snan))));
  // Ties to even and nearest rounding.
  CHECK_EQ(lm::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);            // tie -> even
  CHECK_EQ(lm::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);        // tie -> even
  CHECK_EQ(lm::float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  CHECK_EQ(lm::float_to_bf16(3.4e38f), 0x7f80);  // rounds past the largest finite bf16 to inf
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = lm::bf16_to_float((uint16_t)h);
    uint16_t back = lm::float_to_bf16(f);
    if (std::isnan(f)) {
      if (!std::isnan(lm::bf16_to_float(back))) ++bad;
    } else if (back != h) {
      ++bad;
    }
  }
  CHECK_EQ(bad, 0);
}

// The vector sum loops of reduce_into and reduce_pair_into (f32, f64, bf16) against the scalar
// element rule, on random values whose sums round (bf16: ties and carries; NaN and inf lanes),
// every length up to past two AVX-512 vectors plus tails, at offsets that misalign both sides,
// and an accumulator that is its own input (the scalar path). Each element must be the bits of
// the scalar operation.
void test_reduce_sums() {
  g_test = "reduce_sums";
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uf(-1000.0f, 1000.0f);
  int bad = 0;
  for (int64_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 67, 1000, 4099}) {
    for (int shift = 0; shift < 2; ++shift) {
      std::vector<uint16_t> a16(n + 2), b16(n + 2), r16(n + 2);
      std::vector<float> a32(n + 1), b32(n + 1);
      std::vector<double> a64(n + 1), b64(n + 1);
      for (int64_t i = 0; i <= n; ++i) {
        a32[i] = uf(rng), b32[i] = uf(rng) * (i % 5 == 0 ? 1e-3f : 1.0f);
        a64[i] = (double)a32[i] / 3.0, b64[i] = (double)b32[i] / 7.0;
        a16[i] = (uint16_t)(rng() & 0xffff), b16[i] = (uint16_t)(rng() & 0xffff);
      }
      for (int64_t i = 0; i <= n; ++i)
        r16[i] = lm::float_to_bf16(lm::bf16_to_float(a16[i]) + lm::bf16_to_float(b16[i]));
      std::vector<float> r32(a32);
      std::vector<double> r64(a64);
      for (int64_t i = 0; i <= n; ++i) r32[i] += b32[i], r64[i] += b64[i];
      // The pair form first, into buffers of their own (out = a + b), then in place.
      std::vector<uint16_t> p16(n + 2);
      const uint16_t a16_after = a16[n + shift];  // guards: the element after the n is left alone
      std::vector<float> p32(n + 1);
      std::vector<double> p64(n + 1);
      lm::reduce_pair_into(lm::DType::BF16, LM_REDUCE_SUM, p16.data() + shift,
                           a16.data() + shift, b16.data() + shift, n);
      lm::reduce_pair_into(lm::DType::F32, LM_REDUCE_AVG, p32.data() + shift,
                           a32.data() + shift, b32.data() + shift, n);
      lm::reduce_pair_into(lm::DType::F64, LM_REDUCE_SUM, p64.data() + shift,
                           a64.data() + shift, b64.data() + shift, n);
      lm::reduce_into(lm::DType::BF16, LM_REDUCE_SUM, a16.data() + shift, b16.data() + shift, n);
      lm::reduce_into(lm::DType::F32, LM_REDUCE_AVG, a32.data() + shift, b32.data() + shift, n);
      lm::reduce_into(lm::DType::F64, LM_REDUCE_SUM, a64.data() + shift, b64.data() + shift, n);
      bad += a16[n + shift] != a16_after || p16[n + shift] != 0;
      for (int64_t i = shift; i < n + shift; ++i) {
        const bool nan = std::isnan(lm::bf16_to_float(r16[i]));
        bad += nan ? !std::isnan(lm::bf16_to_float(a16[i])) : a16[i] != r16[i];
        bad += nan ? !std::isnan(lm::bf16_to_float(p16[i])) : p16[i] != r16[i];
        bad += std::memcmp(&a32[i], &r32[i], 4) != 0;
        bad += std::memcmp(&a64[i], &r64[i], 8) != 0;
        bad += std::memcmp(&p32[i], &r32[i], 4) != 0;
        bad += std::memcmp(&p64[i], &r64[i], 8) != 0;
      }
    }
  }
  CHECK_EQ(bad, 0);
  // The pair form's other paths: a max (copy, then reduce in a-then-in order), and out == a.
  const float ma[3] = {1.0f, 5.0f, -2.0f}, mb[3] = {3.0f, 4.0f, -1.0f};
  float mo[3] = {0, 0, 0}, ms[3] = {1.0f, 2.0f, 3.0f};
  lm::reduce_pair_into(lm::DType::F32, LM_REDUCE_MAX, mo, ma, mb, 3);
  CHECK(mo[0] == 3.0f && mo[1] == 5.0f && mo[2] == -1.0f);
  lm::reduce_pair_into(lm::DType::F32, LM_REDUCE_SUM, ms, ms, mb, 3);
  CHECK(ms[0] == 4.0f && ms[1] == 6.0f && ms[2] == 2.0f);
  std::vector<uint16_t> self = {0x3f80, 0x4049, 0x7f80};  // acc == in: doubles each element
  lm::reduce_into(lm::DType::BF16, LM_REDUCE_SUM, self.data(), self.data(), 3);
  CHECK_EQ(self[0], 0x4000);
  CHECK_EQ(self[1], 0x40c9);
  CHECK_EQ(self[2], 0x7f80);
}

// ---------------------------------------------------------------------------------------------
// permute_copy (lm_dist_tensor_transpose's local pass) against the definition, element by
// element: random 1-D to 4-D arrays and permutations, every element size, 2-D extents across the
// tiles' and register blocks' edges, outputs aligned and not, streaming stores forced on
// (stream_min 0) and off, and the bytes around the output untouched.
void test_permute_copy() {
  g_test = "permute_copy";
  std::mt19937_64 rng(11);
  int bad = 0, cases = 0;
  for (int it = 0; it < 3000; ++it) {
    const int n = 1 + (int)(rng() % 4);
    const size_t es = size_t(1) << (rng() % 5);  // 1, 2, 4, 8, 16
    int64_t ilen[4], istr_in[4], len[4], istr[4];
    const int64_t top = n == 2 ? 140 : n == 3 ? 24 : 9;
    for (int d = 0; d < n; ++d) ilen[d] = (int64_t)(rng() % (uint64_t)(top + 1));
    if (rng() % 8 == 0) ilen[rng() % (uint64_t)n] = 1;
    int perm[4] = {0, 1, 2, 3};
    std::shuffle(perm, perm + n, rng);
    int64_t total = 1;
    for (int d = n - 1; d >= 0; --d) {
      istr_in[d] = total;
      total *= ilen[d];
    }
    for (int d = 0; d < n; ++d) {
      len[d] = ilen[perm[d]];
      istr[d] = istr_in[perm[d]];
    }
    const size_t bytes = (size_t)total * es, guard = 64, shift = (it % 3 == 0) ? es : 0;
    std::vector<uint8_t> in(bytes), outbuf(bytes + 2 * guard + 64);
    for (uint8_t &b : in) b = (uint8_t)rng();
    for (uint8_t &b : outbuf) b = 0xa5;
    uint8_t *base = outbuf.data() + guard;
    base += (64 - (uintptr_t)base % 64) % 64;  // 64-byte aligned, then shifted or not
    uint8_t *out = base + shift;
    const size_t stream_min = (it % 2) ? 0 : lm::kPermuteStreamBytes;
    CHECK(lm::permute_copy(out, in.data(), n, len, istr, es, stream_min));
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < total; ++e) {  // out element e is idx, row-major over len
      int64_t src = 0;
      for (int d = 0; d < n; ++d) src += idx[d] * istr[d];
      bad += std::memcmp(out + (size_t)e * es, in.data() + (size_t)src * es, es) != 0;
      for (int d = n - 1; d >= 0 && ++idx[d] == len[d]; --d) idx[d] = 0;
    }
    for (uint8_t *p = outbuf.data(); p < outbuf.data() + outbuf.size(); ++p)
      if (p < out || p >= out + bytes) bad += *p != 0xa5;
    ++cases;
  }
  CHECK_EQ(bad, 0);
  // A 0-d copy, an element size without a copy, and one matrix past the streaming bound.
  const uint64_t one = 42;
  uint64_t got = 0;
  CHECK(lm::permute_copy(&got, &one, 0, nullptr, nullptr, 8));
  CHECK_EQ(got, 42);
  CHECK(!lm::permute_copy(&got, &one, 0, nullptr, nullptr, 3));
  const int64_t m = 1030, k = 1027;  // [k, m] f64 from [m, k]: 8.3 MiB
  std::vector<double> a((size_t)(m * k)), t((size_t)(m * k));
  for (size_t i = 0; i < a.size(); ++i) a[i] = (double)i;
  const int64_t tl[2] = {k, m}, ts[2] = {1, k};
  CHECK(lm::permute_copy(t.data(), a.data(), 2, tl, ts, 8));
  int64_t wrong = 0;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < m; ++j) wrong += t[(size_t)(i * m + j)] != a[(size_t)(j * k + i)];
  CHECK_EQ(wrong, 0);
  // Streamed rows whole cache lines apart (320 bytes) starting at every offset into a line: the
  // peel to the line boundary, for 8-, 4- and 2-byte elements; guards around the output.
  for (size_t es : {size_t(8), size_t(4), size_t(2)}) {
    const int64_t cols = 320 / (int64_t)es, rows = 24, tl2[2] = {rows, cols}, ts2[2] = {1, rows};
    std::vector<uint8_t> src((size_t)(rows * cols) * es), buf((size_t)(rows * cols) * es + 256);
    for (uint8_t &b : src) b = (uint8_t)rng();
    for (size_t shift = 0; shift < 64; shift += es) {
      for (uint8_t &b : buf) b = 0xa5;
      uint8_t *o = buf.data() + (64 - (uintptr_t)buf.data() % 64) % 64 + shift;
      CHECK(lm::permute_copy(o, src.data(), 2, tl2, ts2, es, 0));
      int64_t off = 0;
      for (int64_t i = 0; i < rows; ++i)  // o[i][j] = src[j][i]
        for (int64_t j = 0; j < cols; ++j)
          off += std::memcmp(o + (size_t)(i * cols + j) * es, src.data() + (size_t)(j * rows + i) * es,
                             es) != 0;
      for (uint8_t *q = buf.data(); q < buf.data() + buf.size(); ++q)
        if (q < o || q >= o + src.size()) off += *q != 0xa5;
      CHECK_EQ(off, 0);
    }
  }
  CHECK(cases == 3000);
}

// ---------------------------------------------------------------------------------------------
void test_validate_and_format() {
  g_test = "validate_and_format";
  lm_placement_t pl[3] = {S(1), R(), P(LM_REDUCE_MAX)};
  CHECK(lm::format_placements(pl, 3) == "[S(1), R, P(max)]");
  auto threw = [](const lm_placement_t *p, int mnd, int tnd) {
    try {
      lm::validate_placements(p, mnd, tnd, "what");
    } catch (const lm::Error &e) {
      return e.status() == LM_ERR_INVALID_ARGUMENT && e.message().find("what") != std::string::npos;
    }
    return false;
  };
  CHECK(!threw(pl, 3, 2));
  CHECK(threw(pl, 3, 1));  // S(1) on a 1-d tensor
  lm_placement_t bad_kind[1] = {{7, 0, 0, 0, 0, 0, 0, 0}};
  lm_placement_t bad_op[1] = {LM_PLACEMENT_PARTIAL(9)};
  lm_placement_t rep_dim[1] = {{LM_REPLICATE, 1, 0, 0, 0, 0, 0, 0}};
  lm_placement_t shard_op[1] = {{LM_SHARD, 0, 0, 1, 0, 0, 0, 0}};
  lm_placement_t neg_order[1] = {{LM_SHARD, 0, -1, 0, 0, 0, 0, 0}};
  lm_placement_t neg_dim[1] = {{LM_SHARD, -1, 0, 0, 0, 0, 0, 0}};
  CHECK(threw(bad_kind, 1, 2));
  CHECK(threw(bad_op, 1, 2));
  CHECK(threw(rep_dim, 1, 2));
  CHECK(threw(shard_op, 1, 2));
  CHECK(threw(neg_order, 1, 2));
  CHECK(threw(neg_dim, 1, 2));
  CHECK(threw(nullptr, 1, 2));
  // Mismatch descriptions carry a ragged placement's extents, compact, cut past ~24 characters
  // (first lengths, "...", the last one); str() and format_placements stay without them.
  const int64_t few[3] = {3, 5, 2}, many[12] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
  const int32_t a = lm::extents_register(few, 3, "few"), b = lm::extents_register(many, 12, "many");
  lm_placement_t rg[2] = {LM_PLACEMENT_RAGGED(0, a), R()};
  CHECK(lm::placements_desc(rg, 2) == "[RS(0)[3,5,2], R]");
  CHECK(lm::format_placements(rg, 2) == "[RS(0), R]");
  rg[0].extents = b;
  CHECK(lm::placements_desc(rg, 1) == "[RS(0)[10,11,12,13,14,...,21]]");
  CHECK(lm::placements_desc(nullptr, 1) == "NULL");
  CHECK(lm::extents_release(a) && lm::extents_release(b));
  rg[0].extents = a;  // released: the id alone
  CHECK(lm::placements_desc(rg, 1) == "[RS(0)]");
}

}  // namespace

int main() {
  test_chunk_matches_torch();
  test_chunk_span();
  test_box_at_1d();
  test_box_at_nested();
  test_grid();
  test_enumerate_intersecting_random();
  test_plan_huge_mesh();
  test_plan_bytes_small();
  test_pieces_periodic();
  test_half();
  test_bf16();
  test_reduce_sums();
  test_permute_copy();
  test_validate_and_format();
  return unit_check_report("unit_layout");
}
