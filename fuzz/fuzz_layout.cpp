// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: layout math (no MPI). torch.chunk against a 128-bit reference, chunk_span
// against brute force, placement validation on arbitrary ints, box_at tiling the global shape,
// enumerate_intersecting against brute force, layout_from_extents recovering the shape (and
// the extents of an agreed ragged dim standing in for the Shard dim that splits first).
#include <map>

#include "fuzz_common.hpp"

using namespace lm;

static void check_chunk(fz::Bytes &b) {
  int64_t n = b.i64(), parts = b.i64(), i = b.i64();
  switch (b.u8() % 4) {  // mostly extremes, sometimes small
    case 0: n &= 63; parts = (parts & 7) + 1; break;
    case 1: n = INT64_MAX - (n & 7); break;
    case 2: parts = INT64_MAX - (parts & 7); break;
    default: break;
  }
  if (n < 0) n = ~n;
  if (parts <= 0) parts = parts == INT64_MIN ? 1 : -parts;
  if (parts <= 0) parts = 1;
  if (i < 0) i = ~i;
  i %= parts;
  Range r = chunk(n, parts, i);
  __int128 B = ((__int128)n + parts - 1) / parts, o = B * i < n ? B * i : n,
           e = o + B < n ? o + B : n;
  FZ_CHECK(r.off == (int64_t)o && r.len == (int64_t)(e - o));
  int64_t off = -1, len = -1;
  FZ_CHECK(lm_layout_chunk(n, parts, i, &off, &len) == LM_SUCCESS && off == r.off && len == r.len);
  if (n <= 64 && parts <= 8) {  // chunk_span against brute force
    int64_t lo = b.range(0, 64) % (n + 1), hi = lo + b.range(0, 64) % (n - lo + 1), f, l;
    bool any = chunk_span(n, parts, lo, hi, &f, &l);
    int64_t bf = -1, bl = -1;
    for (int64_t k = 0; k < parts; ++k) {
      Range c = chunk(n, parts, k);
      if (c.len && c.off < hi && lo < c.off + c.len) {
        if (bf < 0) bf = k;
        bl = k;
      }
    }
    // chunk_span may include empty chunks at its ends; it must cover every intersecting one.
    if (bf < 0 || hi <= lo) {
      FZ_CHECK(hi > lo || !any);
    } else {
      FZ_CHECK(any && f <= bf && l >= bl);
    }
  }
}

static void for_each_coord(const Grid &g, const Shape &fixed,
                           const std::function<void(const int64_t *)> &fn) {
  Shape c(static_cast<size_t>(g.ndim()), 0);
  for (int m = 0; m < g.ndim(); ++m)
    if (fixed[m] >= 0) c[m] = fixed[m];
  for (;;) {
    fn(c.data());
    int m = g.ndim() - 1;
    for (; m >= 0; --m) {
      if (fixed[m] >= 0) continue;
      if (++c[m] < g.shape()[m]) break;
      c[m] = 0;
    }
    if (m < 0) break;
  }
}

// A block-cyclic layout that passes its rules: along each block-cyclic dim the coordinates' runs
// are disjoint and cover the tensor dim, each coordinate's runs sit at consecutive local offsets
// and add up to its local extent (box_at's, NUMROC), which starts at its first run.
static void check_block_cyclic(const Layout &L) {
  try {
    check_ragged(L, "fuzz");
  } catch (const Error &e) {
    FZ_CHECK(e.status() == LM_ERR_INVALID_ARGUMENT);
    return;
  }
  Shape c(static_cast<size_t>(L.mesh_ndim()), 0);
  for (int m = 0; m < L.mesh_ndim(); ++m) {
    if (L.pl[m].kind != LM_BLOCK_CYCLIC) continue;
    const int d = L.pl[m].dim;
    const int64_t n = L.gshape[(size_t)d];
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < L.grid->shape()[m]; ++i) {
      c[m] = i;
      std::vector<Seg> runs;
      try {
        runs = L.dim_segments(c.data(), d);
      } catch (const Error &e) {
        FZ_CHECK(e.status() == LM_ERR_NOT_SUPPORTED);
        return;
      }
      const Box x = L.box_at(c.data());
      int64_t l = 0;
      for (const Seg &r : runs) {
        FZ_CHECK(r.l == l && r.len > 0 && r.g >= 0 && r.g + r.len <= n);
        for (int64_t k = r.g; k < r.g + r.len; ++k) FZ_CHECK(!seen[(size_t)k]++);
        l += r.len;
      }
      FZ_CHECK(l == x.len[(size_t)d] && (runs.empty() || runs[0].g == x.off[(size_t)d]));
    }
    for (char v : seen) FZ_CHECK(v == 1);
    c[m] = 0;
  }
}

static void check_layout(fz::Bytes &b) {
  auto grid = fz::random_grid(b);
  int ndim = b.range(0, 3);
  bool raw = (b.u8() % 8) == 0;
  auto pl = fz::random_placements(b, grid->ndim(), ndim, raw, b.range(0, 4));
  Shape g = fz::random_shape(b, ndim);
  try {
    validate_placements(pl.data(), grid->ndim(), ndim, "fuzz");
  } catch (const Error &e) {
    FZ_CHECK(e.status() == LM_ERR_INVALID_ARGUMENT || e.status() == LM_ERR_NOT_SUPPORTED);
    return;
  }
  Layout L(grid, pl, g);
  if (L.has_block_cyclic()) return check_block_cyclic(L);
  std::vector<int> shards(static_cast<size_t>(grid->ndim()), 0);
  for (int m = 0; m < grid->ndim(); ++m) shards[m] = pl[m].kind == LM_SHARD;
  // Pin the mesh dims that shard nothing: the boxes of the others tile the global shape.
  Shape pin(static_cast<size_t>(grid->ndim()), -1);
  for (int m = 0; m < grid->ndim(); ++m)
    if (!shards[m]) pin[m] = b.range(0, 3) % grid->shape()[m];
  int64_t numel = 1;
  for (int64_t e : g) numel *= e;
  std::vector<Box> boxes;
  int64_t total = 0;
  for_each_coord(*grid, pin, [&](const int64_t *c) {
    Box x = L.box_at(c);
    for (int d = 0; d < ndim; ++d) FZ_CHECK(x.off[d] >= 0 && x.len[d] >= 0 && x.off[d] + x.len[d] <= g[d]);
    if (fz::volume(x)) boxes.push_back(x);
    total += fz::volume(x);
  });
  FZ_CHECK(total == numel);
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size() && j < 64; ++j)
      FZ_CHECK(intersect(boxes[i], boxes[j]).empty() || fz::volume(intersect(boxes[i], boxes[j])) == 0);
  // enumerate_intersecting against brute force over a random region.
  Box region;
  for (int d = 0; d < ndim; ++d) {
    int64_t lo = g[d] ? b.range(0, 13) % (g[d] + 1) : 0;
    int64_t hi = lo + (g[d] - lo ? b.range(0, 13) % (g[d] - lo + 1) : 0);
    region.off.push_back(lo);
    region.len.push_back(hi - lo);
  }
  Shape fixed = pin;
  for (int m = 0; m < grid->ndim(); ++m)
    if (shards[m] && (b.u8() % 4) == 0) fixed[m] = b.range(0, 3) % grid->shape()[m];
  std::map<int64_t, Box> got;
  enumerate_intersecting(L, fixed, region, [&](const int64_t *c, const Box &x) {
    int64_t idx = grid->index_at(c);
    FZ_CHECK(got.find(idx) == got.end());  // each coordinate once
    for (int m = 0; m < grid->ndim(); ++m) FZ_CHECK(fixed[m] < 0 || c[m] == fixed[m]);
    got[idx] = x;
  });
  size_t expect = 0;
  for_each_coord(*grid, fixed, [&](const int64_t *c) {
    Box x = intersect(L.box_at(c), region);
    if (x.len.empty() && ndim > 0) return;
    if (fz::volume(x) == 0 && ndim > 0) return;
    int64_t idx = grid->index_at(c);
    auto it = got.find(idx);
    FZ_CHECK(it != got.end());
    FZ_CHECK(it->second.off == x.off && it->second.len == x.len);
    ++expect;
  });
  size_t nonempty = 0;
  for (auto &kv : got)
    if (fz::volume(kv.second) > 0 || ndim == 0) ++nonempty;
  FZ_CHECK(nonempty == expect);
  // layout_from_extents recovers g from every rank's true extents.
  if (ndim > 0) {
    std::vector<Shape> ext(static_cast<size_t>(grid->size()));
    Shape c(static_cast<size_t>(grid->ndim()));
    for (int64_t r = 0; r < grid->size(); ++r) {
      grid->coord_of(r, c.data());
      ext[r] = L.box_at(c.data()).len;
    }
    Layout back = layout_from_extents(grid, pl.data(), ndim, ext[0].data(),
                                      [&](int64_t r, int d) { return ext[r][d]; }, "fuzz");
    FZ_CHECK(back.gshape == g);
    // The Shard dim that splits some tensor dim first, as a ragged dim agreed from the extents:
    // the same boxes everywhere (torch.chunk's lengths are extents like any others).
    std::vector<lm_placement_t> agreed = pl;
    for (size_t d = 0; d < L.order.size(); ++d)
      if (!L.order[d].empty() && pl[L.order[d].front()].kind == LM_SHARD) {
        lm_placement_t &p = agreed[L.order[d].front()];
        p = lm_placement_t{LM_RAGGED, p.dim, p.order, 0, LM_EXTENTS_AGREED, 0, 0, 0};
        break;
      }
    // Every extent it accepts is one the layout gives (a perturbed one: a clean refusal, or a
    // ragged dim that absorbs it).
    auto agreed_boxes = [&](bool same_offsets) {
      Layout R = layout_from_extents(grid, agreed.data(), ndim, ext[0].data(),
                                     [&](int64_t r, int d) { return ext[r][d]; }, "fuzz");
      for (int64_t r = 0; r < grid->size(); ++r) {
        grid->coord_of(r, c.data());
        FZ_CHECK(R.box_at(c.data()).len == ext[r]);
        FZ_CHECK(!same_offsets || R.box_at(c.data()).off == L.box_at(c.data()).off);
      }
    };
    agreed_boxes(true);
    int64_t r = b.u8() % grid->size();
    int d = b.u8() % ndim;
    ext[r][d] += b.range(1, 3);  // perturbed: a clean verdict either way
    for (const auto *p : {&pl, &agreed}) {
      try {
        if (p == &agreed) agreed_boxes(false);
        else layout_from_extents(grid, p->data(), ndim, ext[0].data(),
                                 [&](int64_t q, int e) { return ext[q][e]; }, "fuzz");
      } catch (const Error &e) {
        FZ_CHECK(e.status() == LM_ERR_INVALID_ARGUMENT);
      }
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz::Bytes b{data, size};
  check_chunk(b);
  check_layout(b);
  return 0;
}
