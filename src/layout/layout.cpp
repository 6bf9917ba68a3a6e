// SPDX-License-Identifier: BSD-3-Clause
#include "layout/layout.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/error.hpp"

namespace lm {

bool chunk_span(int64_t n, int64_t parts, int64_t lo, int64_t hi, int64_t *first, int64_t *last) {
  if (hi <= lo || n <= 0 || parts <= 0) return false;
  int64_t b = n / parts + (n % parts != 0);  // ceil without overflow
  int64_t f = lo / b, l = (hi - 1) / b;
  if (l > parts - 1) l = parts - 1;
  if (f > l) return false;
  *first = f;
  *last = l;
  return true;
}

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t l : len) n *= l;
  return n;
}

bool Box::empty() const {
  for (int64_t l : len)
    if (l <= 0) return true;
  return false;
}

Box intersect(const Box &a, const Box &b) {
  Box r;
  size_t n = a.off.size();
  r.off.resize(n);
  r.len.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t lo = std::max(a.off[i], b.off[i]);
    int64_t hi = std::min(a.off[i] + a.len[i], b.off[i] + b.len[i]);
    r.off[i] = lo;
    r.len[i] = hi > lo ? hi - lo : 0;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
Grid::Grid(Shape shape, std::vector<int> ranks) : shape_(std::move(shape)) {
  size_ = 1;
  for (int64_t s : shape_) size_ *= s;
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i)
    if (ranks[i] != ranks[0] + static_cast<int>(i)) contiguous = false;
  if (ranks.empty() || contiguous) {
    base_ = ranks.empty() ? 0 : ranks[0];
  } else {
    ranks_ = std::move(ranks);
    index_.reserve(ranks_.size());
    for (size_t i = 0; i < ranks_.size(); ++i) index_.emplace(ranks_[i], static_cast<int64_t>(i));
  }
}

int64_t Grid::index_of(int parent_rank) const {
  if (ranks_.empty()) {
    int64_t i = parent_rank - base_;
    return (i >= 0 && i < size_) ? i : -1;
  }
  auto it = index_.find(parent_rank);
  return it == index_.end() ? -1 : it->second;
}

void Grid::coord_of(int64_t index, int64_t *coord) const {
  for (int m = ndim() - 1; m >= 0; --m) {
    coord[m] = index % shape_[m];
    index /= shape_[m];
  }
}

int64_t Grid::index_stride(int m) const {
  int64_t s = 1;
  for (int i = m + 1; i < ndim(); ++i) s *= shape_[i];
  return s;
}

int64_t Grid::index_at(const int64_t *coord) const {
  int64_t idx = 0;
  for (int m = 0; m < ndim(); ++m) idx = idx * shape_[m] + coord[m];
  return idx;
}

bool Grid::same_as(const Grid &o) const {
  if (this == &o) return true;
  if (shape_ != o.shape_ || size_ != o.size_) return false;
  for (int64_t i = 0; i < size_; ++i)
    if (rank_at_index(i) != o.rank_at_index(i)) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
static const char *op_name(int32_t op) {
  switch (op) {
    case LM_REDUCE_SUM: return "sum";
    case LM_REDUCE_AVG: return "avg";
    case LM_REDUCE_MAX: return "max";
    case LM_REDUCE_MIN: return "min";
    case LM_REDUCE_PROD: return "prod";
  }
  return "?";
}

std::string format_placements(const lm_placement_t *pl, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    switch (pl[i].kind) {
      case LM_REPLICATE: s += "R"; break;
      case LM_SHARD:
        s += strfmt("S(%d)", pl[i].dim);
        if (pl[i].order) s += strfmt("@%d", pl[i].order);
        break;
      case LM_PARTIAL: s += strfmt("P(%s)", op_name(pl[i].reduce_op)); break;
      case LM_RAGGED:
        s += strfmt(pl[i].extents ? "RS(%d)" : "RS(%d, agreed)", pl[i].dim);
        if (pl[i].order) s += strfmt("@%d", pl[i].order);
        break;
      case LM_BLOCK_CYCLIC:
        s += strfmt(pl[i].source ? "BC(%d, %d, %d)" : "BC(%d, %d)", pl[i].dim, pl[i].block,
                    pl[i].source);
        break;
      default: s += strfmt("?(kind=%d)", pl[i].kind); break;
    }
  }
  return s + "]";
}

namespace {
// A ragged placement's lengths, compact: "[3,5,2]"; past ~24 characters the first lengths, "..."
// and the last ("[3,5,2,4,1,...,7]"), so that two ranks' different extents read differently in a
// mismatch message (a field's description is cut at 72 characters).
std::string extents_text(const Extents &e) {
  const int64_t n = e.count();
  std::string all = "[";
  for (int64_t i = 0; i < n; ++i) all += strfmt(i ? ",%lld" : "%lld", (long long)e.len(i));
  if (all.size() <= 24) return all + "]";
  std::string head = "[";
  for (int64_t i = 0; i < n - 1; ++i) {
    std::string one = strfmt(i ? ",%lld" : "%lld", (long long)e.len(i));
    if (head.size() + one.size() > 16) break;
    head += one;
  }
  return head + strfmt(",...,%lld]", (long long)e.len(n - 1));
}

// format_placements with each ragged placement's extents after it (rag[m], else looked up by id).
std::string placements_desc_with(const lm_placement_t *pl, int n,
                                 const std::vector<std::shared_ptr<const Extents>> *rag) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    std::string one = format_placements(pl + i, 1);
    s += (i ? ", " : "") + one.substr(1, one.size() - 2);
    if (pl[i].kind != LM_RAGGED) continue;
    std::shared_ptr<const Extents> e = rag && (size_t)i < rag->size() ? (*rag)[(size_t)i] : nullptr;
    if (!e && pl[i].extents) e = extents_find(pl[i].extents);
    if (e && e->count() > 0) s += extents_text(*e);
  }
  return s + "]";
}
}  // namespace

std::string placements_desc(const lm_placement_t *pl, int n) {
  return pl ? placements_desc_with(pl, n, nullptr) : std::string("NULL");
}

std::vector<lm_placement_t> placements_adjoint(const lm_placement_t *pl, int n, const char *what) {
  validate_placements(pl, n, INT32_MAX, what);
  std::vector<lm_placement_t> out(pl, pl + n);
  for (int i = 0; i < n; ++i) {
    if (pl[i].kind != LM_PARTIAL) continue;
    if (pl[i].reduce_op == LM_REDUCE_AVG)
      fail(LM_ERR_NOT_SUPPORTED, "%s[%d]: Partial(avg) has no adjoint placement: the gradient of "
           "each rank's partial is the gradient divided by the mesh dim's extent, a scaling no "
           "placement expresses (scale it yourself, then use Partial(sum))", what, i);
    if (pl[i].reduce_op != LM_REDUCE_SUM)
      fail(LM_ERR_NOT_SUPPORTED, "%s[%d]: Partial(%s) has no linear adjoint (only Partial(sum) "
           "and Partial(avg) are linear in their partials)", what, i, op_name(pl[i].reduce_op));
    out[(size_t)i] = lm_placement_t{};
  }
  return out;
}

namespace {
// The fields of a placement that its kind does not use must be 0: names the first that is not.
void check_unused_fields(const lm_placement_t &p, const char *what, int i, const char *kind) {
  const bool uses_dim = p.kind == LM_SHARD || p.kind == LM_RAGGED || p.kind == LM_BLOCK_CYCLIC;
  const struct { const char *name; int32_t value; bool used; } f[] = {
      {"dim", p.dim, uses_dim},
      {"order", p.order, p.kind == LM_SHARD || p.kind == LM_RAGGED},
      {"reduce_op", p.reduce_op, p.kind == LM_PARTIAL},
      {"extents", p.extents, p.kind == LM_RAGGED},
      {"block", p.block, p.kind == LM_BLOCK_CYCLIC},
      {"source", p.source, p.kind == LM_BLOCK_CYCLIC},
      {"reserved", p.reserved, false}};
  for (const auto &x : f)
    LM_CHECK_ARG(x.used || x.value == 0, "%s[%d]: %s must have %s 0 (got %d): the field does "
                 "not apply to it", what, i, kind, x.name, x.value);
}

void check_tensor_dim(const lm_placement_t &p, int tensor_ndim, const char *what, int i,
                      const char *kind) {
  LM_CHECK_ARG(p.dim >= 0 && p.dim < tensor_ndim, "%s[%d]: %s dim %d out of range for a %d-d "
               "tensor", what, i, kind, p.dim, tensor_ndim);
}

void validate_one(const lm_placement_t &p, int tensor_ndim, const char *what, int i,
                  bool agreed_ragged) {
  switch (p.kind) {
    case LM_REPLICATE: check_unused_fields(p, what, i, "Replicate"); break;
    case LM_SHARD:
      check_unused_fields(p, what, i, "Shard");
      check_tensor_dim(p, tensor_ndim, what, i, "Shard");
      LM_CHECK_ARG(p.order >= 0, "%s[%d]: Shard order %d must be >= 0", what, i, p.order);
      break;
    case LM_PARTIAL:
      check_unused_fields(p, what, i, "Partial");
      LM_CHECK_ARG(p.reduce_op >= LM_REDUCE_SUM && p.reduce_op <= LM_REDUCE_PROD,
                   "%s[%d]: Partial reduce_op %d is not an lm_reduce_op_t", what, i, p.reduce_op);
      break;
    case LM_RAGGED:
      check_unused_fields(p, what, i, "Ragged shard");
      check_tensor_dim(p, tensor_ndim, what, i, "Ragged shard");
      LM_CHECK_ARG(p.order >= 0, "%s[%d]: Ragged shard order %d must be >= 0", what, i, p.order);
      LM_CHECK_ARG(p.extents != 0 || agreed_ragged,
                   "%s[%d]: Ragged shard extents 0 (LM_EXTENTS_AGREED: agreed from the local "
                   "shapes) needs the ranks' local shapes: lm_dist_tensor_from_local with "
                   "LM_SHAPE_ALLGATHER, or an lm_local_map output without out_shapes and "
                   "LM_LOCAL_MAP_SHAPES_EVEN", what, i);
      LM_CHECK_ARG(p.extents == 0 || extents_find(p.extents) != nullptr,
                   "%s[%d]: Ragged shard extents id %d is not registered (lm_extents_create; "
                   "destroyed ids are refused)", what, i, p.extents);
      break;
    case LM_BLOCK_CYCLIC:
      check_unused_fields(p, what, i, "BlockCyclic");
      check_tensor_dim(p, tensor_ndim, what, i, "BlockCyclic");
      LM_CHECK_ARG(p.block >= 1, "%s[%d]: BlockCyclic block %d must be >= 1 (the block size)", what, i,
                   p.block);
      LM_CHECK_ARG(p.source >= 0, "%s[%d]: BlockCyclic source %d must be >= 0 (the source coordinate)", what, i,
                   p.source);
      break;
    default:
      fail(LM_ERR_INVALID_ARGUMENT, "%s[%d]: kind %d is not an lm_placement_kind_t", what, i,
           p.kind);
  }
}
}  // namespace

void validate_placements(const lm_placement_t *pl, int mesh_ndim, int tensor_ndim,
                         const char *what, bool agreed_ragged) {
  LM_CHECK_ARG(pl != nullptr || mesh_ndim == 0, "%s: NULL (need %d placements, one per mesh dim)",
               what, mesh_ndim);
  for (int i = 0; i < mesh_ndim; ++i) validate_one(pl[i], tensor_ndim, what, i, agreed_ragged);
  // Partial dims of one tensor share one op: with mixed ops the value would depend on the order
  // of the reductions, which no peer library defines either.
  for (int i = 0; i < mesh_ndim; ++i)
    for (int j = i + 1; j < mesh_ndim; ++j)
      if (pl[i].kind == LM_PARTIAL && pl[j].kind == LM_PARTIAL && pl[i].reduce_op != pl[j].reduce_op)
        fail(LM_ERR_NOT_SUPPORTED, "%s: Partial dims %d and %d use different reduce ops (%s); "
             "one tensor's Partial dims must share one op", what, i, j,
             format_placements(pl, mesh_ndim).c_str());
}

// ---------------------------------------------------------------------------------------------
Layout::Layout(std::shared_ptr<const Grid> g, std::vector<lm_placement_t> p, Shape gs)
    : grid(std::move(g)), pl(std::move(p)), gshape(std::move(gs)) {
  derive();
}

void Layout::derive() {
  order.assign(gshape.size(), {});
  rag.resize(pl.size());
  for (int m = 0; m < mesh_ndim(); ++m) {
    if (splits(pl[m])) order[static_cast<size_t>(pl[m].dim)].push_back(m);
    auto &r = rag[(size_t)m];
    if (pl[m].kind != LM_RAGGED) {
      r.reset();
    } else if (!r || r->id != pl[m].extents) {
      r = extents_find(pl[m].extents);
      if (!r)
        fail(LM_ERR_INVALID_ARGUMENT, "placements[%d]: Ragged shard extents id %d is not "
             "registered (lm_extents_create)", m, pl[m].extents);
    }
  }
  for (auto &o : order)  // by co-shard order, stably: an insertion sort (a few mesh dims; no
    for (size_t i = 1; i < o.size(); ++i) {  // temporary buffer as std::stable_sort takes)
      const int v = o[i];
      size_t k = i;
      for (; k > 0 && pl[(size_t)o[k - 1]].order > pl[(size_t)v].order; --k) o[k] = o[k - 1];
      o[k] = v;
    }
}

Box Layout::box_at(const int64_t *coord) const {
  Box b;
  b.off.assign(gshape.size(), 0);
  b.len = gshape;
  for (size_t d = 0; d < gshape.size(); ++d) {
    for (int m : order[d]) {
      Range r = split(m, b.len[d], coord[m]);
      b.off[d] += r.off;
      b.len[d] = r.len;
    }
  }
  return b;
}

bool Layout::has_block_cyclic() const {
  for (const auto &p : pl)
    if (p.kind == LM_BLOCK_CYCLIC) return true;
  return false;
}

std::vector<Seg> cyclic_segments(int64_t n, int64_t b, int64_t c, int64_t s, int64_t p) {
  std::vector<Seg> v;
  const int64_t dist = cyclic_place(c, s, p);
  int64_t l = 0;
  for (int64_t k = dist; k <= (n - 1) / b && n > 0; k += p) {
    const int64_t g = k * b, len = std::min(b, n - g);
    v.push_back(Seg{g, l, len});
    l += len;
  }
  return v;
}

// The pieces steps read and write the local buffer at each segment's local offset: one that
// leaves [0, extent) (a slip in the block arithmetic) would corrupt the heap where the copy runs,
// far from here. One comparison per segment (per block, at planning time): LM_ERR_INTERNAL
// naming the segment instead.
static void check_cyclic_segments(const std::vector<Seg> &v, int64_t n, int64_t extent, int m,
                                  int d) {
  int64_t next = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const Seg &s = v[i];
    if (s.l != next || s.len <= 0 || s.l + s.len > extent || s.g < 0 || s.g + s.len > n)
      fail(LM_ERR_INTERNAL, "block-cyclic segment %zu of tensor dim %d (mesh dim %d): global "
           "[%lld, +%lld) at local offset %lld, expected at %lld within the local extent %lld "
           "(global extent %lld): a bug in localmap, please report it", i, d, m,
           (long long)s.g, (long long)s.len, (long long)s.l, (long long)next, (long long)extent,
           (long long)n);
    next = s.l + s.len;
  }
  if (next != extent)
    fail(LM_ERR_INTERNAL, "block-cyclic segments of tensor dim %d (mesh dim %d) cover %lld local "
         "elements, the local extent is %lld: a bug in localmap, please report it", d, m,
         (long long)next, (long long)extent);
}

std::vector<Seg> Layout::dim_segments(const int64_t *coord, int d) const {
  for (int m : order[(size_t)d]) {
    const lm_placement_t &p = pl[(size_t)m];
    if (p.kind != LM_BLOCK_CYCLIC) continue;  // the only mesh dim splitting d (check_ragged)
    const int64_t n = gshape[(size_t)d], P = grid->shape()[m];
    const int64_t per = (n / p.block + 1) / P + 1;  // blocks of one coordinate, at most
    if (per > kMaxCyclicBlocks)
      fail(LM_ERR_NOT_SUPPORTED, "placements[%d]: BlockCyclic(%d, %d) deals about %lld blocks of "
           "tensor dim %d (%lld elements) to each of %lld coordinates; at most %lld per "
           "coordinate are supported (use a larger block)", m, p.dim, p.block, (long long)per, d,
           (long long)n, (long long)P, (long long)kMaxCyclicBlocks);
    std::vector<Seg> v = cyclic_segments(n, p.block, coord[m], p.source, P);
    check_cyclic_segments(v, n, cyclic_extent(n, p.block, coord[m], p.source, P), m, d);
    return v;
  }
  int64_t off = 0, len = gshape[(size_t)d];
  for (int m : order[(size_t)d]) {
    Range r = split(m, len, coord[m]);
    off += r.off;
    len = r.len;
  }
  if (len <= 0) return {};
  return {Seg{off, 0, len}};
}

bool Layout::equals(const Layout &o) const {
  if (gshape != o.gshape || pl.size() != o.pl.size()) return false;
  if (grid != o.grid && !grid->same_as(*o.grid)) return false;
  for (size_t m = 0; m < pl.size(); ++m) {
    if (pl[m].kind != o.pl[m].kind) return false;
    if (splits(pl[m]) && pl[m].dim != o.pl[m].dim) return false;
    if (pl[m].kind == LM_PARTIAL && pl[m].reduce_op != o.pl[m].reduce_op) return false;
    if (pl[m].kind == LM_BLOCK_CYCLIC &&
        (pl[m].block != o.pl[m].block || pl[m].source != o.pl[m].source))
      return false;
    if (pl[m].kind == LM_RAGGED && rag[m] != o.rag[m] && rag[m]->off != o.rag[m]->off) return false;
  }
  return order == o.order;
}

bool Layout::has_partial() const {
  for (const auto &p : pl)
    if (p.kind == LM_PARTIAL) return true;
  return false;
}

// Binary (the raw values, each field's length first): built on every cached reshard, so no
// formatting. A ragged placement's id stands for its extents: ids are never reused.
std::string Layout::str() const { return format_placements(pl.data(), mesh_ndim()); }
std::string Layout::desc() const { return placements_desc_with(pl.data(), mesh_ndim(), &rag); }

void check_ragged(const Layout &L, const char *what) {
  for (int m = 0; m < L.mesh_ndim(); ++m) {
    if (L.pl[m].kind == LM_BLOCK_CYCLIC) {
      const int d = L.pl[m].dim;
      LM_CHECK_ARG(L.pl[m].source < L.grid->shape()[m],
                   "%s[%d]: BlockCyclic source coordinate %d is not on the mesh dim (extent %lld)",
                   what, m, L.pl[m].source, (long long)L.grid->shape()[m]);
      LM_CHECK_ARG(L.order[(size_t)d].size() == 1,
                   "%s[%d]: a BlockCyclic dim must be the only mesh dim splitting tensor dim %d "
                   "(%s): co-sharding it is not defined", what, m, d, L.str().c_str());
    }
    const Extents *r = L.rag[(size_t)m].get();
    if (!r) continue;
    const int d = L.pl[m].dim;
    LM_CHECK_ARG(r->count() == L.grid->shape()[m],
                 "%s[%d]: Ragged shard extents id %d has %lld extents, the mesh dim %lld", what,
                 m, r->id, (long long)r->count(), (long long)L.grid->shape()[m]);
    LM_CHECK_ARG(L.order[(size_t)d].front() == m,
                 "%s[%d]: a Ragged shard must split tensor dim %d first (the lowest order among "
                 "the mesh dims sharding it; mesh dim %d splits it before)", what, m, d,
                 L.order[(size_t)d].front());
    LM_CHECK_ARG(r->total() == L.gshape[(size_t)d],
                 "%s[%d]: Ragged shard extents id %d add up to %lld, tensor dim %d has %lld", what,
                 m, r->id, (long long)r->total(), d, (long long)L.gshape[(size_t)d]);
  }
}

Shape even_global_shape(const Grid &grid, const lm_placement_t *pl, const Shape &local) {
  Shape g = local;
  std::vector<bool> ragged(g.size(), false);
  for (int m = 0; m < grid.ndim(); ++m) {
    if (pl[m].kind != LM_RAGGED || (size_t)pl[m].dim >= g.size()) continue;
    auto r = extents_find(pl[m].extents);
    LM_CHECK_ARG(r != nullptr, "placements[%d]: Ragged shard extents id %d is not registered", m,
                 pl[m].extents);
    g[(size_t)pl[m].dim] = r->total();
    ragged[(size_t)pl[m].dim] = true;
  }
  for (int m = 0; m < grid.ndim(); ++m)
    if ((pl[m].kind == LM_SHARD || pl[m].kind == LM_BLOCK_CYCLIC) &&
        (size_t)pl[m].dim < g.size() && !ragged[(size_t)pl[m].dim])
      g[(size_t)pl[m].dim] *= grid.shape()[m];
  return g;
}

Layout as_one_element(const Layout &L) {
  if (!L.gshape.empty()) return L;
  return Layout(L.grid, L.pl, Shape{1});
}

// ---------------------------------------------------------------------------------------------
namespace {
// Mesh rank r lies on the line of tensor dim d: its coordinates along the mesh dims that do not
// split d are 0 (the ranks whose extents along d add up to the global extent).
bool on_line(const Grid &grid, const lm_placement_t *pl, int d, const int64_t *c) {
  for (int m = 0; m < grid.ndim(); ++m)
    if (!(splits(pl[m]) && pl[m].dim == d) && c[m] != 0) return false;
  return true;
}
}  // namespace

Layout layout_from_extents(const std::shared_ptr<const Grid> &grid, const lm_placement_t *pl,
                           int ndim, const int64_t *local_shape,
                           const std::function<int64_t(int64_t, int)> &extent, const char *what) {
  const int k = grid->ndim();
  Shape g((size_t)ndim), c((size_t)k);
  std::vector<lm_placement_t> p(pl, pl + k);
  // Agreed ragged dims (extents id 0): the sum along the line per coordinate of that mesh dim.
  std::vector<std::vector<int64_t>> agreed((size_t)k);
  for (int m = 0; m < k; ++m)
    if (p[m].kind == LM_RAGGED && p[m].extents == 0) agreed[m].assign((size_t)grid->shape()[m], 0);
  for (int d = 0; d < ndim; ++d) {
    bool sharded = false;
    for (int m = 0; m < k; ++m) sharded = sharded || (splits(pl[m]) && pl[m].dim == d);
    if (!sharded) {
      g[d] = local_shape[d];
      continue;
    }
    int64_t total = 0;  // over the line: other mesh coordinates fixed at 0
    for (int64_t r = 0; r < grid->size(); ++r) {
      grid->coord_of(r, c.data());
      if (!on_line(*grid, pl, d, c.data())) continue;
      const int64_t e = extent(r, d);
      if (__builtin_add_overflow(total, e, &total))
        fail(LM_ERR_INVALID_ARGUMENT, "%s: the local extents along dim %d overflow int64", what, d);
      for (int m = 0; m < k; ++m)
        if (!agreed[m].empty() && pl[m].dim == d) agreed[m][(size_t)c[m]] += e;
    }
    g[d] = total;
  }
  std::vector<std::shared_ptr<const Extents>> held((size_t)k);  // alive until L holds them
  for (int m = 0; m < k; ++m)
    if (!agreed[m].empty()) {
      held[m] = extents_adopt(agreed[m]);
      p[m].extents = held[m]->id;
    }
  Layout L(grid, std::move(p), g);
  check_ragged(L, what);
  for (int64_t r = 0; r < grid->size(); ++r) {
    grid->coord_of(r, c.data());
    Box b = L.box_at(c.data());
    for (int d = 0; d < ndim; ++d)
      if (b.len[d] != extent(r, d))
        fail(LM_ERR_INVALID_ARGUMENT,
             "%s: local extents do not follow the layout (torch.chunk, ragged extents, block-cyclic): mesh "
             "rank %lld holds %lld along dim %d, but the global extent %lld with placements %s "
             "gives it %lld", what, (long long)r, (long long)extent(r, d), d, (long long)g[d],
             L.str().c_str(), (long long)b.len[d]);
  }
  return L;
}

// ---------------------------------------------------------------------------------------------
namespace {
struct Enumerator {
  const Layout &L;
  const Shape &fixed;
  const Box &region;
  const std::function<void(const int64_t *, const Box &)> &fn;
  const std::function<void(const CoordRun &)> *run_fn;  // null: one by one
  std::vector<int64_t> coord;
  Box cur;
  std::vector<int> free_dims;  // mesh dims that shard nothing
  int run_m = -1;              // the innermost enumerated mesh dim (runs are taken along it)
  // Capture mode (a run's first coordinate): the one visit is kept instead of reported.
  bool capturing = false;
  int captured = 0;
  std::vector<int64_t> cap_coord;
  Box cap_box;

  // The last mesh dim in enumeration order that is not fixed: every loop after it has one
  // iteration at most, so its iterations are the innermost visits.
  void find_run_dim() {
    for (size_t d = 0; d < L.gshape.size(); ++d)
      for (int m : L.order[d])
        if (fixed[m] < 0) run_m = m;
    for (int m : free_dims)
      if (fixed[m] < 0) run_m = m;
  }
  void visit() {
    if (!capturing) return fn(coord.data(), cur);
    ++captured;
    cap_coord = coord;
    cap_box = cur;
  }

  // Level-by-level over tensor dims, then the free mesh dims.
  void tensor_dim(size_t d) {
    if (d == L.gshape.size()) {
      free_dim(0);
      return;
    }
    level(d, 0, 0, L.gshape[d]);
  }
  void one_chunk(size_t d, size_t lvl, int m, int64_t len, int64_t off, int64_t i) {
    Range r = L.split(m, len, i);
    if (r.len == 0) return;
    coord[m] = i;
    level(d, lvl + 1, off + r.off, r.len);
  }
  void level(size_t d, size_t lvl, int64_t off, int64_t len) {
    const auto &ord = L.order[d];
    if (lvl == ord.size()) {
      int64_t lo = std::max(off, region.off[d]);
      int64_t hi = std::min(off + len, region.off[d] + region.len[d]);
      if (hi <= lo) return;
      cur.off[d] = lo;
      cur.len[d] = hi - lo;
      tensor_dim(d + 1);
      return;
    }
    int m = ord[lvl];
    int64_t parts = L.grid->shape()[m];
    int64_t first, last;
    int64_t lo = std::max<int64_t>(0, region.off[d] - off);
    int64_t hi = std::min<int64_t>(len, region.off[d] + region.len[d] - off);
    const Extents *rag = L.rag[(size_t)m].get();
    if (rag ? !rag->span(lo, hi, &first, &last) : !chunk_span(len, parts, lo, hi, &first, &last))
      return;
    if (fixed[m] >= 0) {
      if (fixed[m] < first || fixed[m] > last) return;
      first = last = fixed[m];
    }
    if (rag) {  // ragged blocks: no runs
      for (int64_t i = first; i <= last; ++i) one_chunk(d, lvl, m, len, off, i);
      return;
    }
    // A run: whole chunks (blk elements, those before index len / blk) inside the region (all
    // strictly between the first and the last; those two when they are not clipped), their
    // boxes blk apart along d.
    const int64_t blk = len / parts + (len % parts != 0);
    int64_t a = first, b = std::min(last, len / blk - 1);
    if (a <= b && blk * a < lo) ++a;  // blk * (b + 1) <= len: no overflow
    if (a <= b && b == last && blk * (b + 1) > hi) --b;
    if (m != run_m || b - a + 1 < 2) {
      for (int64_t i = first; i <= last; ++i) one_chunk(d, lvl, m, len, off, i);
      return;
    }
    for (int64_t i = first; i < a; ++i) one_chunk(d, lvl, m, len, off, i);
    capturing = true;
    captured = 0;
    one_chunk(d, lvl, m, len, off, a);
    capturing = false;
    if (captured == 1) (*run_fn)(CoordRun{cap_coord.data(), m, b - a + 1, &cap_box, (int)d, blk});
    for (int64_t i = b + 1; i <= last; ++i) one_chunk(d, lvl, m, len, off, i);
  }
  void free_dim(size_t k) {
    if (k == free_dims.size()) {
      visit();
      return;
    }
    int m = free_dims[k];
    if (fixed[m] >= 0) {
      coord[m] = fixed[m];
      free_dim(k + 1);
      return;
    }
    const int64_t n = L.grid->shape()[m];
    if (m == run_m && n >= 2 && !capturing) {  // every later dim is fixed: one box, n coordinates
      coord[m] = 0;
      for (size_t j = k + 1; j < free_dims.size(); ++j) coord[free_dims[j]] = fixed[free_dims[j]];
      (*run_fn)(CoordRun{coord.data(), m, n, &cur, -1, 0});
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      coord[m] = i;
      free_dim(k + 1);
    }
  }
};

void enumerate(const Layout &L, const Shape &fixed, const Box &region,
               const std::function<void(const int64_t *, const Box &)> &fn,
               const std::function<void(const CoordRun &)> *run_fn) {
  if (region.empty()) return;
  Enumerator e{L, fixed, region, fn, run_fn, std::vector<int64_t>(L.pl.size(), 0), Box{}, {},
               -1, false, 0, {}, Box{}};
  e.cur.off.assign(L.gshape.size(), 0);
  e.cur.len.assign(L.gshape.size(), 0);
  for (int m = 0; m < L.mesh_ndim(); ++m)
    if (!splits(L.pl[m])) e.free_dims.push_back(m);
  if (run_fn) e.find_run_dim();
  e.tensor_dim(0);
}
}  // namespace

void enumerate_intersecting(const Layout &L, const Shape &fixed, const Box &region,
                            const std::function<void(const int64_t *, const Box &)> &fn) {
  enumerate(L, fixed, region, fn, nullptr);
}

void enumerate_intersecting(const Layout &L, const Shape &fixed, const Box &region,
                            const std::function<void(const int64_t *, const Box &)> &fn,
                            const std::function<void(const CoordRun &)> &run_fn) {
  enumerate(L, fixed, region, fn, &run_fn);
}

}  // namespace lm
