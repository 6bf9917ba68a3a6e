// SPDX-License-Identifier: BSD-3-Clause
#include "plan/collective.hpp"

#include "plan/planner.hpp"

namespace lm {

const char *coll_name(CollKind k) {
  switch (k) {
    case CollKind::kAllGather: return "all-gather";
    case CollKind::kReduceScatter: return "reduce-scatter";
    case CollKind::kAllReduce: return "all-reduce";
    case CollKind::kAllToAll: return "all-to-all";
    default: return "none";
  }
}

namespace {

int64_t numel_of(const Shape &s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

bool same_box(const Box &a, const Box &b) { return a.off == b.off && a.len == b.len; }

Box box_of(const Layout &L, int64_t index) {
  int64_t c[kMaxDims];
  L.grid->coord_of(index, c);
  return L.box_at(c);
}

bool same_grid(const Layout &a, const Layout &b) {
  return a.grid == b.grid || a.grid->same_as(*b.grid);
}

// The layout's mesh holds the communicator's ranks in its index order: index i is rank i.
bool in_rank_order(const Layout &L, const CollComm &cc) {
  const Grid &g = *L.grid;
  if (cc.size < 2 || g.size() != cc.size || !cc.rank_of) return false;
  for (int64_t i = 0; i < g.size(); ++i)
    if (cc.rank_of(g.rank_at_index(i)) != (int)i) return false;
  return true;
}

bool all_kind(const Layout &L, int kind) {
  for (const lm_placement_t &p : L.pl)
    if (p.kind != kind) return false;
  return !L.pl.empty();
}

// One block: the whole of a compact buffer of extents len.
std::vector<CollBlock> whole_block(const Shape &len) {
  return {CollBlock{Shape(len.size(), 0), len}};
}

// A padded input (first.in_pad) or a padded or strided output (last.out_pad, out_str) goes
// through staging. Whether a rank's buffers are padded is its own affair (a padded borrow runs a
// variant of the plan there, the compact plan elsewhere), so the form is decided on what every
// rank shares, the plain schedule, and only how this rank fills and empties it differs.
void through_staging(CollForm &f, const SchedStep &first, const SchedStep &last,
                     std::vector<CollBlock> in_blocks, std::vector<CollBlock> out_blocks) {
  if (!first.in_pad.empty() && !f.pack) {
    f.pack = true;
    f.in_blocks = std::move(in_blocks);
  }
  if ((!last.out_pad.empty() || !last.out_str.empty()) && !f.unpack) {
    f.unpack = true;
    f.out_blocks = std::move(out_blocks);
  }
}

// Whether boxes[r] lie in local's compact buffer one after the other, in order from its start
// (an empty box takes no room: torch.chunk's empty trailing chunks).
bool slices_in_order(const Box &local, const std::vector<Box> &boxes, size_t esize) {
  size_t at = 0;
  for (const Box &b : boxes) {
    size_t off = 0;
    if (b.numel() == 0) continue;
    if (b.numel() < 0 || !box_is_contiguous_in(local, b, esize, &off) || off != at) return false;
    at += (size_t)b.numel() * esize;
  }
  return true;
}

std::vector<CollBlock> blocks_in(const Box &local, const std::vector<Box> &boxes) {
  std::vector<CollBlock> v(boxes.size());
  for (size_t r = 0; r < boxes.size(); ++r) {
    v[r].len = boxes[r].len;
    v[r].off.resize(boxes[r].off.size());
    for (size_t d = 0; d < boxes[r].off.size(); ++d) v[r].off[d] = boxes[r].off[d] - local.off[d];
  }
  return v;
}

// The reduce-scatter's group is the whole communicator, group index j its rank j.
bool group_is_comm(const SchedStep &st, const CollComm &cc) {
  if (!st.member || st.lazy_members || st.k != cc.size || cc.size < 2 ||
      (int64_t)st.peers.size() != st.k || (int64_t)st.chunks.size() != st.k || !cc.rank_of)
    return false;
  for (int64_t j = 0; j < st.k; ++j)
    if (cc.rank_of(st.peers[(size_t)j]) != (int)j) return false;
  return true;
}

// Exchange to Replicate from equal blocks that tile the tensor.
CollForm all_gather(const SchedStep &st, const CollComm &cc) {
  CollForm f;
  const Layout &in = st.in_layout, &out = st.out_layout;
  if (!same_grid(in, out) || !in_rank_order(in, cc) ||
      !all_kind(out, LM_REPLICATE) || !all_kind(in, LM_SHARD) ||
      !cc.offers(CollKind::kAllGather, 0))
    return f;
  const int n = cc.size;
  const int64_t total = numel_of(in.gshape);
  if (total <= 0 || total % n) return f;
  std::vector<Box> boxes((size_t)n);
  for (int r = 0; r < n; ++r) {
    boxes[(size_t)r] = box_of(in, r);
    if (boxes[(size_t)r].numel() != total / n) return f;
  }
  f.kind = CollKind::kAllGather;
  f.n = n;
  f.count = total / n;
  const Box whole{Shape(in.gshape.size(), 0), in.gshape};
  if (!slices_in_order(whole, boxes, st.esize)) {
    f.unpack = true;
    f.out_blocks = blocks_in(whole, boxes);
  }
  through_staging(f, st, st, whole_block(st.inbox.len), blocks_in(whole, boxes));
  return f;
}

// A reduce-scatter over the whole communicator with chunks of equal size.
CollForm reduce_scatter(const SchedStep &st, const CollComm &cc) {
  CollForm f;
  if (st.wide || !group_is_comm(st, cc) ||
      !cc.offers(CollKind::kReduceScatter, st.op))
    return f;
  const int64_t c = st.chunks[0].numel();
  for (const Box &b : st.chunks)
    if (b.numel() != c) return f;
  if (c <= 0) return f;
  f.kind = CollKind::kReduceScatter;
  f.n = cc.size;
  f.count = c;
  f.op = st.op;
  f.divide_by = st.divide_by;
  if (!st.chunks_contiguous || !slices_in_order(st.inbox, st.chunks, st.esize)) {
    f.pack = true;
    f.in_blocks = blocks_in(st.inbox, st.chunks);
  }
  through_staging(f, st, st, blocks_in(st.inbox, st.chunks), whole_block(st.outbox.len));
  return f;
}

// Step i a reduce-scatter over the communicator, step i + 1 the all-gather of its chunks (rank
// r's from rank r) into the box it reduced: elementwise, the reduction of every rank's whole
// input in place, one all-reduce of the whole buffer, whatever the chunks (even or not, along
// any dim: they tile the box).
CollForm all_reduce(const Schedule &s, size_t i, const CollComm &cc) {
  CollForm f;
  if (i + 1 >= s.steps.size()) return f;
  const SchedStep &rs = *s.steps[i], &ag = *s.steps[i + 1];
  if (ag.kind != StepKind::kExchange || rs.wide ||
      !group_is_comm(rs, cc) || !cc.offers(CollKind::kAllReduce, rs.op))
    return f;
  int64_t covered = 0;
  for (const Box &b : rs.chunks) covered += b.numel();
  if (covered != rs.inbox.numel() || covered <= 0) return f;
  const Layout &in = ag.in_layout, &out = ag.out_layout;
  if (!same_grid(in, out) || !in_rank_order(in, cc) || !all_kind(out, LM_REPLICATE) ||
      !same_box(ag.outbox, rs.inbox))
    return f;
  for (int r = 0; r < cc.size; ++r)
    if (!same_box(box_of(in, r), rs.chunks[(size_t)r])) return f;
  f.kind = CollKind::kAllReduce;
  f.n = cc.size;
  f.count = covered;
  f.steps = 2;
  f.op = rs.op;
  f.divide_by = rs.divide_by;
  through_staging(f, rs, ag, whole_block(rs.inbox.len), whole_block(ag.outbox.len));
  return f;
}

// Shard(a) -> Shard(b) on a 1-D mesh, both dims divisible by its size: equal blocks per pair.
CollForm all_to_all(const Schedule &s, const SchedStep &st, const CollComm &cc) {
  CollForm f;
  const Layout &in = st.in_layout, &out = st.out_layout;
  if (!same_grid(in, out) || in.mesh_ndim() != 1 || !in_rank_order(in, cc) ||
      !all_kind(in, LM_SHARD) || !all_kind(out, LM_SHARD) || in.pl[0].dim == out.pl[0].dim ||
      !cc.offers(CollKind::kAllToAll, 0))
    return f;
  const int n = cc.size;
  const int64_t total = numel_of(in.gshape), me = in.grid->index_of(s.me);
  if (total <= 0 || me < 0 || in.gshape[(size_t)in.pl[0].dim] % n ||
      in.gshape[(size_t)out.pl[0].dim] % n)
    return f;
  const Box mine_in = box_of(in, me), mine_out = box_of(out, me);
  std::vector<Box> sends((size_t)n), recvs((size_t)n);
  for (int r = 0; r < n; ++r) {
    sends[(size_t)r] = intersect(mine_in, box_of(out, r));
    recvs[(size_t)r] = intersect(box_of(in, r), mine_out);
  }
  f.kind = CollKind::kAllToAll;
  f.n = n;
  f.count = total / n / n;
  if (!slices_in_order(mine_in, sends, st.esize)) {
    f.pack = true;
    f.in_blocks = blocks_in(mine_in, sends);
  }
  if (!slices_in_order(mine_out, recvs, st.esize)) {
    f.unpack = true;
    f.out_blocks = blocks_in(mine_out, recvs);
  }
  through_staging(f, st, st, blocks_in(mine_in, sends), blocks_in(mine_out, recvs));
  return f;
}

}  // namespace

CollForm collective_form(const Schedule &s, size_t i, const CollComm &cc) {
  if (cc.size < 2 || !cc.offers || i >= s.steps.size() || s.compressed) return CollForm{};
  const SchedStep &st = *s.steps[i];
  if (st.kind == StepKind::kReduceScatter) {
    CollForm f = all_reduce(s, i, cc);
    return f.kind != CollKind::kNone ? f : reduce_scatter(st, cc);
  }
  if (st.kind != StepKind::kExchange) return CollForm{};
  CollForm f = all_gather(st, cc);
  return f.kind != CollKind::kNone ? f : all_to_all(s, st, cc);
}

}  // namespace lm
