// SPDX-License-Identifier: BSD-3-Clause
// Pure layout math (no MPI): torch.chunk sizing, nested (co-)sharding, which global box a mesh
// coordinate holds, and which coordinates of a layout hold data intersecting a box.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "layout/extents.hpp"
#include "localmap.h"

namespace lm {

using Shape = std::vector<int64_t>;

constexpr int kMaxDims = 32;  // tensor and mesh ndim limit (sanity bound for inputs)

struct Range {
  int64_t off, len;
};

// torch.chunk: block b = ceil(n / parts); block i covers [min(n, i*b), min(n, (i+1)*b)).
// Exact for every n >= 0, parts >= 1, 0 <= i < parts: nothing overflows, even near INT64_MAX
// (b * i is formed only when it is at most n; found by the fuzzer and UBSan, issue 8).
inline Range chunk(int64_t n, int64_t parts, int64_t i) {
  int64_t b = n / parts + (n % parts != 0);
  if (b == 0) return {0, 0};
  int64_t o = i > n / b ? n : b * i;
  int64_t e = b < n - o ? o + b : n;
  return {o, e - o};
}

// Indices i in [0, parts) whose chunk of n intersects [lo, hi) (hi > lo): [first, last].
// Returns false when none does.
bool chunk_span(int64_t n, int64_t parts, int64_t lo, int64_t hi, int64_t *first, int64_t *last);

struct Box {
  Shape off, len;
  int64_t numel() const;
  bool empty() const;
};

// Intersection of two boxes of the same rank; empty len when disjoint.
Box intersect(const Box &a, const Box &b);

// The ranks of a mesh: row-major list of parent-communicator ranks.
class Grid {
 public:
  Grid() = default;
  Grid(Shape shape, std::vector<int> ranks);  // ranks empty: 0..size-1
  const Shape &shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return size_; }
  int rank_at_index(int64_t index) const {
    return ranks_.empty() ? static_cast<int>(base_ + index) : ranks_[static_cast<size_t>(index)];
  }
  // -1 when the parent rank is not in the grid.
  int64_t index_of(int parent_rank) const;
  void coord_of(int64_t index, int64_t *coord) const;
  int64_t index_at(const int64_t *coord) const;
  bool same_as(const Grid &o) const;
  const std::vector<int> &explicit_ranks() const { return ranks_; }
  // Ranks are base + index (no explicit list): a rank moves by the index stride of a mesh dim.
  bool affine() const { return ranks_.empty(); }
  // Index distance between neighbours along mesh dim m (product of the later dims' extents).
  int64_t index_stride(int m) const;

 private:
  Shape shape_;
  int64_t size_ = 0;
  int64_t base_ = 0;        // contiguous ranks: base_ + index
  std::vector<int> ranks_;  // non-contiguous ranks
  std::unordered_map<int, int64_t> index_;
};

// Shard, ragged shard or block-cyclic: the placement splits tensor dim p.dim.
inline bool splits(const lm_placement_t &p) {
  return p.kind == LM_SHARD || p.kind == LM_RAGGED || p.kind == LM_BLOCK_CYCLIC;
}

// Block-cyclic math (ScaLAPACK's): n elements in blocks of b dealt over p coordinates from s.
// Coordinate c's place in the deal: block k goes to c when k mod p is this.
inline int64_t cyclic_place(int64_t c, int64_t s, int64_t p) { return (c - s % p + p) % p; }
// The local extent of coordinate c (NUMROC).
inline int64_t cyclic_extent(int64_t n, int64_t b, int64_t c, int64_t s, int64_t p) {
  const int64_t dist = cyclic_place(c, s, p);
  const int64_t blocks = n / b;
  int64_t e = (blocks / p) * b;
  if (dist < blocks % p) e += b;
  else if (dist == blocks % p) e += n % b;
  return e;
}
// A run of one coordinate's elements along a dim: global offset g, local offset l, length len.
struct Seg {
  int64_t g, l, len;
};
// The blocks coordinate c owns, in increasing order (one Seg per block): O(n / (b p)).
std::vector<Seg> cyclic_segments(int64_t n, int64_t b, int64_t c, int64_t s, int64_t p);
// The most blocks of one block-cyclic dim a coordinate may hold where positions are needed
// (reshards): more is LM_ERR_NOT_SUPPORTED, never a plan of gigabytes.
constexpr int64_t kMaxCyclicBlocks = int64_t(1) << 20;

// Checks placements for a mesh of `mesh_ndim` dims and a tensor of `tensor_ndim` dims; throws
// LM_ERR_INVALID_ARGUMENT naming `what` (e.g. "lm_dist_tensor_zeros: placements"). A ragged
// placement's extents id must be registered (its count and sum are checked by check_ragged), or
// be 0 (agreed from the local shapes) where `agreed_ragged` says the caller gathers them.
void validate_placements(const lm_placement_t *pl, int mesh_ndim, int tensor_ndim,
                         const char *what, bool agreed_ragged = false);

std::string format_placements(const lm_placement_t *pl, int n);
// The same with each ragged placement's extents (registered ones) after it, compact and cut past
// ~24 characters: "[RS(0)[3,5,2], R]". For agreement mismatch messages, where ranks whose
// extents differ must read differently; NULL gives "NULL".
std::string placements_desc(const lm_placement_t *pl, int n);
// The placements of the gradient of a value placed as `pl` (lm_placements_adjoint), PyTorch
// DTensor's convention (its redistribute backward): gradients of replicated values are
// replicated, so Shard(d) -> Shard(d) (its order kept), Replicate -> Replicate, Partial(sum) ->
// Replicate (d(x_1 + ... + x_k)/dx_i is the whole gradient on every rank). Partial(avg) scales each
// rank's gradient by 1/k and max/min/prod have no linear adjoint: LM_ERR_NOT_SUPPORTED naming
// what[i]. Placements are validated first (their kinds and ops; tensor dims are not known here).
std::vector<lm_placement_t> placements_adjoint(const lm_placement_t *pl, int n, const char *what);

// Placements + global shape over a grid.
struct Layout {
  std::shared_ptr<const Grid> grid;
  std::vector<lm_placement_t> pl;  // one per mesh dim
  Shape gshape;                    // global tensor shape
  // Derived: per tensor dim, the mesh dims that shard it, outermost first.
  std::vector<std::vector<int>> order;
  // Derived: per mesh dim, the extents of a ragged placement (else null). Kept across copies and
  // edits of pl, so a layout outlives the id it was made from.
  std::vector<std::shared_ptr<const Extents>> rag;

  Layout() = default;
  Layout(std::shared_ptr<const Grid> g, std::vector<lm_placement_t> p, Shape gs);
  // Recomputes `order` and `rag` after editing pl (a ragged dim whose id changed is looked up:
  // LM_ERR_INVALID_ARGUMENT when the id is unknown).
  void derive();
  // Block i of a block of `len` elements split along mesh dim m (torch.chunk, or the extents). A
  // block-cyclic dim owns no single block: its first element's index and its local extent.
  Range split(int m, int64_t len, int64_t i) const {
    const lm_placement_t &p = pl[(size_t)m];
    if (p.kind == LM_BLOCK_CYCLIC) {
      const int64_t P = grid->shape()[m], first = cyclic_place(i, p.source, P) * (int64_t)p.block;
      return Range{first < len ? first : len, cyclic_extent(len, p.block, i, p.source, P)};
    }
    return rag[(size_t)m] ? Range{rag[(size_t)m]->off[(size_t)i], rag[(size_t)m]->len(i)}
                          : chunk(len, grid->shape()[m], i);
  }

  int mesh_ndim() const { return static_cast<int>(pl.size()); }
  int ndim() const { return static_cast<int>(gshape.size()); }
  // The global box held at a mesh coordinate. Along a block-cyclic dim, the first held index and
  // the local extent: the shape of the local buffer is right, the positions are dim_segments'.
  Box box_at(const int64_t *coord) const;
  bool has_block_cyclic() const;
  // The runs of global indices along tensor dim d that coordinate `coord` holds, with their local
  // offsets, in increasing order: one run for every kind but block-cyclic (empty when the box is).
  // Throws LM_ERR_NOT_SUPPORTED past kMaxCyclicBlocks blocks.
  std::vector<Seg> dim_segments(const int64_t *coord, int d) const;
  // Semantic equality (same grid, same kinds/ops, same shard orders, same global shape).
  bool equals(const Layout &o) const;
  bool has_partial() const;
  std::string str() const;  // "[S(0), R]"
  std::string desc() const;  // "[RS(0)[3,5,2], R]": str() with the ragged extents (placements_desc)
};

// The rules of ragged placements that need the grid and the global shape: the extents' count is
// the mesh dim's extent, their sum the global extent, the ragged dim splits its tensor dim first
// (one ragged dim per tensor dim). And those of block-cyclic ones: the source coordinate lies on
// the mesh dim, nothing else splits the tensor dim. Throws LM_ERR_INVALID_ARGUMENT naming `what`.
void check_ragged(const Layout &L, const char *what);

// The global shape where every Shard dim is even (local extent times the mesh extents) and every
// ragged dim is its extents' sum (an unknown extents id throws LM_ERR_INVALID_ARGUMENT).
Shape even_global_shape(const Grid &grid, const lm_placement_t *pl, const Shape &local);

// A 0-d layout (no Shard: validate_placements refuses it) as the same layout of shape [1]: both
// hold one element on every member. Other layouts come back unchanged.
Layout as_one_element(const Layout &L);

// The layout implied by every mesh rank's local extents (extent(r, d): mesh rank r's extent along
// tensor dim d): along a sharded dim the global extent is the sum over the coordinates of the mesh
// dims that shard it, elsewhere local_shape[d]. A ragged placement with extents id 0 takes its
// extents from those sums (registered with extents_adopt: the layout holds them, its placements
// name their id). Then every rank's extents are checked against the layout (torch.chunk, ragged
// extents; throws LM_ERR_INVALID_ARGUMENT naming `what`), so that every rank, seeing the same
// extents, reaches the same verdict. Pure; O(mesh size * ndim).
Layout layout_from_extents(const std::shared_ptr<const Grid> &grid, const lm_placement_t *pl,
                           int ndim, const int64_t *local_shape,
                           const std::function<int64_t(int64_t, int)> &extent, const char *what);

// Calls fn(coord, intersection) for each coordinate c of layout L whose box intersects `region`,
// with c[m] restricted to fixed[m] where fixed[m] >= 0. Mesh dims that shard nothing (Replicate,
// Partial) and are not fixed are enumerated over their whole extent. Cost: the number of
// coordinates visited (O(peers)), never the mesh size.
void enumerate_intersecting(const Layout &L, const Shape &fixed, const Box &region,
                            const std::function<void(const int64_t *coord, const Box &)> &fn);

// A run of coordinates along mesh dim m: coord, coord + e_m, ..., coord + (count - 1) e_m, whose
// intersections with the region are `box` moved by i * step along tensor dim d (d < 0: the same
// box for all). count >= 2.
struct CoordRun {
  const int64_t *coord;
  int m;
  int64_t count;
  const Box *box;
  int d;
  int64_t step;
};
// As above, but the coordinates of the innermost enumerated mesh dim whose boxes are regular
// (whole chunks strictly inside the region, or the same box along a dim that shards nothing) come
// as runs, one call of run_fn each; the others (the clipped ends, short or empty trailing chunks)
// one by one through fn. Cost: O(runs + irregular coordinates), so a rank whose 2^20 peers hold
// torch.chunk blocks is enumerated in a few calls. Together the calls cover exactly the
// coordinates (and boxes) the form above visits.
void enumerate_intersecting(const Layout &L, const Shape &fixed, const Box &region,
                            const std::function<void(const int64_t *coord, const Box &)> &fn,
                            const std::function<void(const CoordRun &)> &run_fn);

}  // namespace lm
