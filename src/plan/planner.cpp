// SPDX-License-Identifier: BSD-3-Clause
// The reshard planner: a pure function from (source layout, target layout, dtype, this rank) to
// this rank's schedule (plan/schedule.hpp). No MPI call, no CUDA, no buffer whose size depends on the
// tensor: O(peers) time and memory.
#include "plan/planner.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "layout/boxcopy.hpp"
#include "layout/reduce.hpp"
#include "plan/internal.hpp"

namespace lm {

namespace {

constexpr int kTagBase = 0x4c4d;
constexpr int64_t kKeyMod = int64_t(1) << 31;

int64_t send_key(int me, int peer) { return ((int64_t)peer - me + kKeyMod) % kKeyMod; }
int64_t recv_key(int me, int peer) { return ((int64_t)me - peer + kKeyMod) % kKeyMod; }

Shape rel(const Box &box, const Box &local) {
  Shape o(box.off.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = box.off[i] - local.off[i];
  return o;
}

Msg make_msg(int peer, const Box &b, const Box &local, size_t esize, int64_t key) {
  Msg m;
  m.peer = peer;
  m.box = b;
  m.rel = rel(b, local);
  m.bytes = (size_t)b.numel() * esize;
  m.contiguous = box_is_contiguous_in(local, b, esize, &m.off);
  m.key = key;
  return m;
}




// The messages of a run of coordinates (enumerate_intersecting's CoordRun) on grid g, `me` cut
// out: pieces of two or more peers on one side of `me` become MsgRuns (keys stay linear there),
// the rest go one by one through `one`, as the coordinate-at-a-time enumeration would. A grid
// with an explicit rank list has no rank stride: its runs go one by one.
struct RunSplitter {
  const Grid &g;
  int me;
  const Box &local;  // the local buffer's box the messages' offsets are relative to
  size_t esize;
  bool send;
  std::vector<MsgRun> &runs;
  const std::function<void(const int64_t *, const Box &)> &one;

  void operator()(const CoordRun &r) const {
    if (!g.affine()) return each(r, 0, r.count);
    const int64_t p0 = g.rank_at_index(g.index_at(r.coord)), ps = g.index_stride(r.m);
    if (me < p0 || me > p0 + (r.count - 1) * ps) return piece(r, 0, r.count, p0, ps);
    const int64_t i = (me - p0) / ps;  // the last index whose peer is <= me
    if ((me - p0) % ps == 0) {         // me's own coordinate: a local copy or nothing to send
      piece(r, 0, i, p0, ps);
      each(r, i, i + 1);
      piece(r, i + 1, r.count, p0, ps);
      return;
    }
    piece(r, 0, i + 1, p0, ps);
    piece(r, i + 1, r.count, p0, ps);
  }
  Box shifted(const CoordRun &r, int64_t i) const {
    Box b = *r.box;
    if (r.d >= 0) b.off[(size_t)r.d] += i * r.step;
    return b;
  }
  void each(const CoordRun &r, int64_t lo, int64_t hi) const {
    std::vector<int64_t> c(r.coord, r.coord + g.ndim());
    for (int64_t i = lo; i < hi; ++i) {
      c[(size_t)r.m] = r.coord[r.m] + i;
      one(c.data(), shifted(r, i));
    }
  }
  void piece(const CoordRun &r, int64_t lo, int64_t hi, int64_t p0, int64_t ps) const {
    if (hi - lo < 2) return each(r, lo, hi);
    const int peer = (int)(p0 + lo * ps);
    MsgRun run;
    run.first = make_msg(peer, shifted(r, lo), local, esize,
                         send ? send_key(me, peer) : recv_key(me, peer));
    run.count = hi - lo;
    run.peer_step = ps;
    run.key_step = send ? ps : -ps;
    run.dim = r.d;
    run.box_step = r.step;
    if (r.d >= 0) {
      int64_t inner = 1;
      for (size_t i = (size_t)r.d + 1; i < local.len.size(); ++i) inner *= local.len[i];
      run.off_step = r.step * inner * (int64_t)esize;
    }
    runs.push_back(std::move(run));
  }
};

// with_runs: regular runs of peers become MsgRuns (the compressed form); else one Msg per peer.
std::unique_ptr<SchedStep> exchange_step(const Layout &in, const Layout &out, bool same_mesh,
                                         int me, size_t esize, int tag, bool with_runs) {
  auto st = std::make_unique<SchedStep>();
  st->kind = StepKind::kExchange;
  st->in_layout = in;
  st->out_layout = out;
  st->tag = tag;
  st->esize = esize;
  SourceChooser chooser(in, out, same_mesh);
  int64_t in_idx = in.grid->index_of(me), out_idx = out.grid->index_of(me);
  Shape cs(in.mesh_ndim()), cd(out.mesh_ndim());
  if (in_idx >= 0) {
    in.grid->coord_of(in_idx, cs.data());
    st->inbox = in.box_at(cs.data());
  } else {
    st->inbox = empty_box(in.gshape.size());
  }
  if (out_idx >= 0) {
    out.grid->coord_of(out_idx, cd.data());
    st->outbox = out.box_at(cd.data());
  } else {
    st->outbox = empty_box(out.gshape.size());
  }
  const Box &inbox = st->inbox, &outbox = st->outbox;
  // Receives: who holds each part of my target box.
  if (out_idx >= 0 && !outbox.empty()) {
    Shape fixed(in.mesh_ndim(), -1);
    chooser.choose(cd.data(), me, fixed);
    for (int m = 0; m < in.mesh_ndim(); ++m)
      if (in.pl[m].kind == LM_PARTIAL) fixed[m] = cd[m];  // kept Partial: same coordinate
    const std::function<void(const int64_t *, const Box &)> one = [&](const int64_t *c,
                                                                      const Box &b) {
      int peer = in.grid->rank_at_index(in.grid->index_at(c));
      if (peer == me) {
        st->selfs.push_back(LocalCopy{b, rel(b, inbox), rel(b, outbox)});
        return;
      }
      st->recvs.push_back(make_msg(peer, b, outbox, esize, recv_key(me, peer)));
    };
    if (with_runs)
      enumerate_intersecting(in, fixed, outbox, one,
                             RunSplitter{*in.grid, me, outbox, esize, false, st->recv_runs, one});
    else
      enumerate_intersecting(in, fixed, outbox, one);
  }
  // Sends: who needs parts of my source box and takes them from me.
  if (in_idx >= 0 && !inbox.empty()) {
    Shape fixed(out.mesh_ndim(), -1);
    if (same_mesh)
      for (int m = 0; m < in.mesh_ndim(); ++m)
        if (!splits(in.pl[m])) fixed[m] = cs[m];
    Shape choice(in.mesh_ndim(), -1);
    const std::function<void(const int64_t *, const Box &)> one = [&](const int64_t *c,
                                                                      const Box &b) {
      int peer = out.grid->rank_at_index(out.grid->index_at(c));
      if (peer == me) return;  // counted as a local copy on the receive side
      if (!same_mesh) {
        chooser.choose(c, peer, choice);
        for (int m : chooser.rep)
          if (choice[m] != cs[m]) return;  // the receiver takes it from another replica
      }
      st->sends.push_back(make_msg(peer, b, inbox, esize, send_key(me, peer)));
    };
    // Across meshes a receiver may take its part from another replica: one by one.
    if (with_runs && same_mesh)
      enumerate_intersecting(out, fixed, inbox, one,
                             RunSplitter{*out.grid, me, inbox, esize, true, st->send_runs, one});
    else
      enumerate_intersecting(out, fixed, inbox, one);
  }
  for (const Msg &m : st->sends) st->bytes_sent += (int64_t)m.bytes;
  for (const MsgRun &r : st->send_runs) st->bytes_sent += (int64_t)r.first.bytes * r.count;
  auto by_key = [](const Msg &a, const Msg &b) { return a.key < b.key; };
  std::stable_sort(st->sends.begin(), st->sends.end(), by_key);
  std::stable_sort(st->recvs.begin(), st->recvs.end(), by_key);
  return st;
}

// A reduce-scatter member's rank: from the list, or (affine grid) from the stride.
int rs_peer(const SchedStep &st, int64_t j) {
  return st.peers.empty() ? (int)(st.peer0 + j * st.peer_step) : st.peers[(size_t)j];
}

// Member j's part of the reduce-scatter's input box along d (relative to the box).
Range rs_range(const SchedStep &st, int64_t j) {
  return st.rag ? Range{st.rag->off[(size_t)j], st.rag->len(j)}
                : chunk(st.inbox.len[(size_t)st.d], st.k, j);
}

// Chunk j of a reduce-scatter's input box (global coordinates): what member j reduces.
Box rs_chunk(const SchedStep &st, int64_t j) {
  Box b = st.inbox;
  Range r = rs_range(st, j);
  b.off[(size_t)st.d] += r.off;
  b.len[(size_t)st.d] = r.len;
  return b;
}

// The reduce-scatter's per-member vectors (peers, chunks, chunk_rel, order, chunks_contiguous)
// of a step built with lazy members.
void fill_members(SchedStep &st, int me) {
  if (!st.lazy_members) return;
  st.lazy_members = false;
  if (st.peers.empty()) {  // affine grid: listed from the stride (rs_peer reads the list once filled)
    st.peers.resize((size_t)st.k);
    for (int64_t j = 0; j < st.k; ++j) st.peers[(size_t)j] = (int)(st.peer0 + j * st.peer_step);
  }
  st.chunks_contiguous = true;
  for (int64_t j = 0; j < st.k; ++j) {
    Box b = rs_chunk(st, j);
    size_t off;
    if (!box_is_contiguous_in(st.inbox, b, st.esize, &off)) st.chunks_contiguous = false;
    st.chunk_rel.push_back(rel(b, st.inbox));
    st.chunks.push_back(std::move(b));
  }
  for (int64_t j = 0; j < st.k; ++j)
    if (j != st.mine) st.order.push_back(j);
  std::stable_sort(st.order.begin(), st.order.end(), [&](int64_t a, int64_t b) {
    return send_key(me, st.peers[(size_t)a]) < send_key(me, st.peers[(size_t)b]);
  });
}

// lazy: the per-member vectors are left to fill_members (the compressed form).
std::unique_ptr<SchedStep> reduce_scatter_step(const Layout &in, const Layout &out, int m, int d,
                                               int op, int64_t divide_by, DType dt, int me,
                                               int tag, bool lazy) {
  auto st = std::make_unique<SchedStep>();
  st->kind = StepKind::kReduceScatter;
  st->in_layout = in;
  st->out_layout = out;
  st->tag = tag;
  st->esize = dtype_size(dt);
  st->m = m;
  st->d = d;
  st->op = op;
  st->divide_by = divide_by;
  st->wide = divide_by > 1 && dtype_is_integer(dt);
  int64_t idx = in.grid->index_of(me);
  if (idx < 0) {
    st->inbox = empty_box(in.gshape.size());
    st->outbox = st->inbox;
    return st;
  }
  Shape c(in.mesh_ndim());
  in.grid->coord_of(idx, c.data());
  st->inbox = in.box_at(c.data());
  st->member = true;
  st->k = in.grid->shape()[m];
  st->mine = c[m];
  st->rag = out.rag[(size_t)m];
  c[m] = 0;
  if (in.grid->affine()) {
    st->peer0 = in.grid->rank_at_index(in.grid->index_at(c.data()));
    st->peer_step = in.grid->index_stride(m);
  } else {
    for (int64_t j = 0; j < st->k; ++j) {
      c[m] = j;
      st->peers.push_back(in.grid->rank_at_index(in.grid->index_at(c.data())));
    }
  }
  st->outbox = rs_chunk(*st, st->mine);
  st->bytes_sent = (st->inbox.numel() - st->outbox.numel()) * (int64_t)st->esize;
  st->lazy_members = true;
  if (!lazy) fill_members(*st, me);
  return st;
}


int max_order(const Layout &L, int d) {
  int mx = -1;
  for (int m = 0; m < L.mesh_ndim(); ++m)
    if (splits(L.pl[m]) && L.pl[m].dim == d) mx = std::max(mx, (int)L.pl[m].order);
  return mx;
}

// Makes mesh dim m shard tensor dim d innermost (after every mesh dim already sharding d).
void shard_innermost(Layout &L, int m, int d) {
  int mx = max_order(L, d);  // m itself does not shard anything yet
  L.pl[m] = lm_placement_t{LM_SHARD, d, mx >= 0 ? mx + 1 : 0, 0, 0, 0, 0, 0};
  L.derive();
}

int largest_dim(const Shape &g) {
  int best = 0;
  for (int d = 1; d < (int)g.size(); ++d)
    if (g[d] > g[best]) best = d;
  return best;
}

}  // namespace

bool box_is_contiguous_in(const Box &local, const Box &box, size_t esize, size_t *byte_off) {
  return box_is_contiguous_at(local, local.len, box, esize, byte_off);
}

bool box_is_contiguous_at(const Box &local, const Shape &ext, const Box &box, size_t esize,
                          size_t *byte_off) {
  int n = (int)local.len.size();
  int64_t off[kMaxDims], eoff = 0;
  for (int i = 0; i < n; ++i) off[i] = box.off[i] - local.off[i];
  if (!box_contiguous(n, ext.data(), off, box.len.data(), &eoff)) return false;
  *byte_off = (size_t)eoff * esize;
  return true;
}

std::unique_ptr<SchedStep> partial_init_step(const Layout &in, const Layout &out, DType dt,
                                             int me) {
  auto st = std::make_unique<SchedStep>();
  st->kind = StepKind::kPartialInit;
  st->in_layout = in;
  st->out_layout = out;
  st->esize = dtype_size(dt);
  int64_t idx = out.grid->index_of(me);
  if (idx < 0) return st;
  Shape c(out.mesh_ndim());
  out.grid->coord_of(idx, c.data());
  st->outbox = out.box_at(c.data());  // (where a padded output's fill finds its rows)
  st->fill_n = st->outbox.numel();
  for (int m = 0; m < out.mesh_ndim(); ++m)
    if (out.pl[m].kind == LM_PARTIAL && in.pl[m].kind != LM_PARTIAL) {
      st->op = out.pl[m].reduce_op;
      if (c[m] != 0 && (st->op == LM_REDUCE_SUM || st->op == LM_REDUCE_PROD)) st->fill = true;
    }
  return st;
}

Box empty_box(size_t n) {
  Box b;
  b.off.assign(n, 0);
  b.len.assign(n, 0);
  return b;
}

Msg MsgRun::at(int64_t i) const {
  Msg m = first;
  m.peer = (int)(first.peer + i * peer_step);
  m.key = first.key + i * key_step;
  if (dim >= 0) {
    m.box.off[(size_t)dim] += i * box_step;
    m.rel[(size_t)dim] += i * box_step;
  }
  if (m.contiguous) m.off = first.off + (size_t)(i * off_step);
  return m;
}

int64_t SchedStep::send_count() const {
  int64_t n = (int64_t)sends.size();
  for (const MsgRun &r : send_runs) n += r.count;
  return n;
}

int64_t SchedStep::recv_count() const {
  int64_t n = (int64_t)recvs.size();
  for (const MsgRun &r : recv_runs) n += r.count;
  return n;
}

void SchedStep::out_runs(uint64_t base, const int64_t *off, const int64_t *len,
                         std::vector<Run> *runs) const {
  runs->clear();
  const int n = (int)outbox.len.size();
  if (!out_pad.empty()) return box_runs(base, n, out_pad.data(), off, len, esize, runs);
  int64_t lin = 0, numel = 1;
  for (int i = 0; i < n; ++i) {
    lin = lin * outbox.len[(size_t)i] + off[i];
    numel *= len[i];
  }
  if (numel) runs->push_back(Run{base + (uint64_t)lin * esize, (uint64_t)numel * esize});
}

bool SchedStep::alias_offset(size_t *byte_off) const {
  if (kind != StepKind::kExchange) return false;
  if (send_count() || recv_count() || selfs.size() != 1) return false;
  const Box &b = selfs[0].box;
  if (b.off != outbox.off || b.len != outbox.len) return false;
  return box_is_contiguous_in(inbox, b, esize, byte_off);
}

bool SchedStep::input_lands_contiguously(size_t *byte_off) const {
  if (kind != StepKind::kExchange) return false;
  if (selfs.size() != 1 || inbox.empty()) return false;
  const Box &b = selfs[0].box;
  if (b.off != inbox.off || b.len != inbox.len) return false;
  return box_is_contiguous_in(outbox, b, esize, byte_off);
}

std::string SchedStep::describe() const {
  switch (kind) {
    case StepKind::kExchange:
      return strfmt("exchange %s->%s (%lld sends, %lld recvs, %zu local%s)",
                    in_layout.str().c_str(), out_layout.str().c_str(), (long long)send_count(),
                    (long long)recv_count(), selfs.size(), skip_self ? ", fused" : "");
    case StepKind::kReduceScatter:
      return strfmt("reduce-scatter %s->%s over mesh dim %d (%lld ranks)", in_layout.str().c_str(),
                    out_layout.str().c_str(), m, (long long)in_layout.grid->shape()[m]);
    case StepKind::kPartialInit:
      return strfmt("partial-init ->%s (local)", out_layout.str().c_str());
    case StepKind::kPieces: {
      int64_t pieces = 0;
      for (const PieceMsg &m : psends) pieces += m.pieces();
      return strfmt("pieces %s->%s (%zu sends, %zu recvs, %zu local, %lld pieces sent)",
                    in_layout.str().c_str(), out_layout.str().c_str(), psends.size(),
                    precvs.size(), pselfs.size(), (long long)pieces);
    }
  }
  return "";
}

void check_reshard(const Layout &src, const Layout &dst, DType dt) {
  const char *fn = "reshard";
  LM_CHECK_ARG(src.gshape == dst.gshape, "%s: source and target global shapes differ", fn);
  int src_op = -1, dst_op = -1;
  for (auto &p : src.pl)
    if (p.kind == LM_PARTIAL) src_op = p.reduce_op;
  for (auto &p : dst.pl)
    if (p.kind == LM_PARTIAL) dst_op = p.reduce_op;
  if (src_op >= 0) check_reduce(dt, src_op, "reshard: source placements");
  if (dst_op >= 0) check_reduce(dt, dst_op, "reshard: target placements");
  if (src_op >= 0 && dst_op >= 0 && src_op != dst_op)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: Partial -> Partial with another reduce op (%s -> %s) is not a reshard; reduce to "
         "Replicate or Shard first",
         fn, src.str().c_str(), dst.str().c_str());

}

// ---------------------------------------------------------------------------------------------
namespace {

// 1. ReduceScatter for each source Partial mesh dim the target does not keep (a target keeps it
// only when it is on the same mesh and Partial on it too). Avg reduces as a sum and divides
// once: floats by all reduced extents on the last reduction (one rounding); integers dim by dim
// in a 128-bit accumulator (no overflow, exact whenever each partial mean is). Returns the layout
// the reductions leave.
Layout reduce_partials(Schedule &p, const Layout &src, const Layout &dst, bool same_mesh,
                       int *tag, bool runs) {
  int last_reduced = -1;
  int64_t reduced_extent = 1;
  for (int m = 0; m < src.mesh_ndim(); ++m)
    if (src.pl[m].kind == LM_PARTIAL && !(same_mesh && dst.pl[m].kind == LM_PARTIAL)) {
      last_reduced = m;
      reduced_extent *= src.grid->shape()[m];
    }
  Layout cur = src;
  for (int m = 0; m < src.mesh_ndim(); ++m) {
    if (src.pl[m].kind != LM_PARTIAL) continue;
    if (same_mesh && dst.pl[m].kind == LM_PARTIAL) continue;  // kept (same op checked before)
    int d = (same_mesh && splits(dst.pl[m])) ? dst.pl[m].dim : largest_dim(src.gshape);
    Layout next = cur;
    if (same_mesh && dst.pl[m].kind == LM_RAGGED && cur.order[(size_t)d].empty()) {
      next.pl[m] = dst.pl[m];  // reduce straight into the target's ragged blocks
      next.rag[(size_t)m] = dst.rag[(size_t)m];
      next.derive();
    } else {
      shard_innermost(next, m, d);
    }
    const bool avg = src.pl[m].reduce_op == LM_REDUCE_AVG;
    int64_t divide_by = 0;
    if (avg) divide_by = dtype_is_integer(p.dt) ? src.grid->shape()[m]
                         : m == last_reduced    ? reduced_extent
                                                : 0;
    p.steps.push_back(reduce_scatter_step(cur, next, m, d, avg ? LM_REDUCE_SUM : src.pl[m].reduce_op,
                                          divide_by, p.dt, p.me, (*tag)++, runs));
    cur = next;
  }
  return cur;
}

// 2. Exchanges from `cur` to the target without its new Partial dims (they start as Replicate;
// returned). Cross-mesh: every byte crosses once, to a layout where the target's Replicate dims
// shard the largest dim, then an allgather inside the target mesh.
Layout exchange_to(Schedule &p, const Layout &cur, const Layout &dst, bool same_mesh, int *tag,
                   bool runs) {
  Layout d0 = dst;
  for (int m = 0; m < dst.mesh_ndim(); ++m)
    if (dst.pl[m].kind == LM_PARTIAL && !(same_mesh && cur.pl[m].kind == LM_PARTIAL))
      d0.pl[m] = LM_PLACEMENT_REPLICATE;
  d0.derive();
  if (same_mesh) {
    if (!cur.equals(d0) || p.steps.empty())
      p.steps.push_back(exchange_step(cur, d0, true, p.me, p.esize, (*tag)++, runs));
    return d0;
  }
  Layout d1 = d0;
  bool changed = false;
  if (!d1.gshape.empty()) {
    int ds = largest_dim(d1.gshape);
    for (int m = 0; m < d1.mesh_ndim(); ++m)
      if (d1.pl[m].kind == LM_REPLICATE && d1.grid->shape()[m] > 1) {
        shard_innermost(d1, m, ds);
        changed = true;
      }
  }
  p.steps.push_back(exchange_step(cur, d1, false, p.me, p.esize, (*tag)++, runs));
  if (changed) p.steps.push_back(exchange_step(d1, d0, true, p.me, p.esize, (*tag)++, runs));
  return d0;
}

// The buffers: which step is the last that moves data, which steps write straight into the next
// one's output (the reduce-scatter before an allgather: fused), the intermediate outputs' sizes.
void plan_buffers(Schedule &p) {
  p.last_moving = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    p.bytes_sent += p.steps[i]->bytes_sent;
    if (!p.steps[i]->in_place()) p.last_moving = i;
  }
  p.fused.assign(p.steps.size(), -1);
  for (size_t i = 0; i + 1 <= p.last_moving; ++i) {
    size_t off = 0;
    if (!p.steps[i]->in_place() && !p.steps[i + 1]->in_place() &&
        p.steps[i + 1]->input_lands_contiguously(&off)) {
      p.fused[i] = (int64_t)off;
      p.steps[i + 1]->skip_self = true;
    }
  }
  p.work_bytes.assign(p.steps.size(), 0);  // sizes only: taken from the pool at execution
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i]->in_place() || i == p.last_moving || p.fused[i] >= 0) continue;
    p.work_bytes[i] = (size_t)p.steps[i]->outbox.numel() * p.esize;
  }
}

// `L` without Partial dims (they become Replicate).
Layout without_partial(const Layout &L) {
  Layout r = L;
  for (auto &pl : r.pl)
    if (pl.kind == LM_PARTIAL) pl = LM_PLACEMENT_REPLICATE;
  r.derive();
  return r;
}

// `L` with each block-cyclic dim as a ragged one of the same local extents (NUMROC per
// coordinate): the same local buffers, for steps that only combine buffers of ranks with equal
// coordinates along those dims (a reduction over the other mesh dims). The extents are the
// layout's own (an id no registry holds).
Layout cyclic_as_ragged(const Layout &L) {
  Layout r = L;
  for (int m = 0; m < r.mesh_ndim(); ++m) {
    lm_placement_t &pl = r.pl[(size_t)m];
    if (pl.kind != LM_BLOCK_CYCLIC) continue;
    const int64_t n = r.gshape[(size_t)pl.dim], P = r.grid->shape()[m];
    auto e = std::make_shared<Extents>();
    e->id = INT32_MIN + 1 + m;
    e->off.assign(1, 0);
    for (int64_t c = 0; c < P; ++c) e->off.push_back(e->off.back() + cyclic_extent(n, pl.block, c, pl.source, P));
    pl = lm_placement_t{LM_RAGGED, pl.dim, 0, 0, e->id, 0, 0, 0};
    r.rag[(size_t)m] = std::move(e);
  }
  r.derive();
  return r;
}

// Block-cyclic layouts: one pieces step between layouts without Partial dims. A source's Partial
// dims are reduced first by the ordinary steps: where the source has block-cyclic dims, in place
// over the other mesh dims (cyclic_as_ragged: the reduction only combines equal buffers); else
// into the target with its block-cyclic dims as Shard of the same tensor dims (on the target's
// mesh). A target's Partial dims start as Replicate and are filled after the pieces (a Partial ->
// Partial change reduces and fills again: correct, not the fewest bytes).
void cyclic_steps(Schedule &p, const Layout &src, const Layout &dst, bool same_mesh, int *tag) {
  Layout cur = src;
  if (src.has_partial()) {
    Layout from = src, mid = without_partial(dst);
    if (src.has_block_cyclic()) {
      from = cyclic_as_ragged(src);
      mid = without_partial(from);
      cur = without_partial(src);
    } else {
      for (auto &pl : mid.pl)
        if (pl.kind == LM_BLOCK_CYCLIC) pl = LM_PLACEMENT_SHARD(pl.dim);
      mid.derive();
      cur = mid;
      same_mesh = true;
    }
    Schedule pre;
    build_schedule(pre, from, mid, p.dtype, p.me, ScheduleForm::kExpanded);
    *tag += (int)pre.steps.size();  // pre's tags start at kTagBase too: one per step at most
    for (auto &st : pre.steps) p.steps.push_back(std::move(st));
  }
  const Layout d0 = without_partial(dst);
  p.steps.push_back(pieces_step(cur, d0, same_mesh, p.me, p.esize, (*tag)++));
  if (!d0.equals(dst)) p.steps.push_back(partial_init_step(d0, dst, p.dt, p.me));
}

}  // namespace

void build_schedule(Schedule &out, const Layout &src, const Layout &dst, DLDataType dtype,
                    int me, ScheduleForm form) {
  // A 0-d tensor holds one element on every member, as a [1] tensor with no Shard does: plan it
  // as that (the steps never see a 0-d layout); the plan still reports the caller's layouts.
  if (src.gshape.empty() && dst.gshape.empty()) {
    build_schedule(out, as_one_element(src), as_one_element(dst), dtype, me, form);
    out.src = src;
    out.dst = dst;
    return;
  }
  out.me = me;
  out.src = src;
  out.dst = dst;
  out.dtype = dtype;
  out.dt = dtype_from_dl(dtype, "reshard: dtype");
  out.esize = dtype_size(out.dt);
  out.involved = src.grid->index_of(me) >= 0 || dst.grid->index_of(me) >= 0;
  check_reshard(src, dst, out.dt);
  const bool same_mesh = src.grid->same_as(*dst.grid);
  int tag = kTagBase;
  const bool runs = form != ScheduleForm::kReference;
  if (src.has_block_cyclic() || dst.has_block_cyclic()) {
    cyclic_steps(out, src, dst, same_mesh, &tag);
    plan_buffers(out);
    out.compressed = false;  // pieces steps have no compressed form
    return;
  }
  Layout cur = reduce_partials(out, src, dst, same_mesh, &tag, runs);  // 1. reductions
  Layout d0 = exchange_to(out, cur, dst, same_mesh, &tag, runs);        // 2. exchanges
  if (!d0.equals(dst))                                                    // 3. new Partial dims
    out.steps.push_back(partial_init_step(d0, dst, out.dt, me));
  plan_buffers(out);
  out.compressed = runs;
  if (form == ScheduleForm::kExpanded) expand_schedule(out);
}

void expand_schedule(Schedule &s) {
  auto by_key = [](const Msg &a, const Msg &b) { return a.key < b.key; };
  for (auto &st : s.steps) {
    fill_members(*st, s.me);
    auto expand = [&](std::vector<MsgRun> &runs, std::vector<Msg> &msgs) {
      if (runs.empty()) return;
      for (const MsgRun &r : runs)
        for (int64_t i = 0; i < r.count; ++i) msgs.push_back(r.at(i));
      std::vector<MsgRun>().swap(runs);
      std::stable_sort(msgs.begin(), msgs.end(), by_key);
    };
    expand(st->send_runs, st->sends);
    expand(st->recv_runs, st->recvs);
  }
  s.compressed = false;
}

namespace {
bool pad_fits(const Shape &pad, const Box &box) {
  if (pad.size() != box.len.size()) return false;
  for (size_t i = 0; i < pad.size(); ++i)
    if (pad[i] < box.len[i]) return false;
  return true;
}
}  // namespace

void copy_schedule(Schedule &out, const Schedule &s) {
  out.me = s.me;
  out.src = s.src;
  out.dst = s.dst;
  out.dtype = s.dtype;
  out.dt = s.dt;
  out.esize = s.esize;
  out.involved = s.involved;
  out.steps.clear();
  for (const auto &st : s.steps) out.steps.push_back(std::make_unique<SchedStep>(*st));
  out.work_bytes = s.work_bytes;
  out.last_moving = s.last_moving;
  out.fused = s.fused;
  out.bytes_sent = s.bytes_sent;
  out.compressed = s.compressed;
}

namespace {
// Step l's output is no longer the compact buffer the step before may have written straight
// into (a padded or strided output): that step writes its own work buffer again.
void unfuse_before(Schedule &s, size_t l) {
  if (l == 0 || s.fused[l - 1] < 0) return;
  s.fused[l - 1] = -1;
  s.steps[l]->skip_self = false;
  s.work_bytes[l - 1] = (size_t)s.steps[l - 1]->outbox.numel() * s.esize;
}
// The bytes of the rows a box (off 0, len) covers in a row-major array of extents pad.
size_t padded_run_bytes(const Shape &pad, const Shape &len, size_t esize) {
  size_t r = esize;
  for (size_t d = len.size(); d-- > 0;) {
    r *= (size_t)len[d];
    if (len[d] != pad[d]) break;
  }
  return r;
}
}  // namespace

bool schedule_pad(Schedule &s, const Shape *in_pad, const Shape *out_pad, size_t min_run) {
  if (s.compressed) return false;
  if (s.steps.empty()) return true;  // nothing touches either buffer
  // Each side decides how a message leaves or lands (the wire carries the same bytes either
  // way), so a padded input or output changes nothing for the peers; a reduce-scatter keeps its
  // agreed chunks_contiguous (it sizes the segments) and learns where its chunks lie here. A
  // reduce-scatter into a padded output reduces each segment row by row of it; a Partial fill
  // fills the output box's rows (the padding between them is never touched).
  if (in_pad) {
    SchedStep &f = *s.steps.front();
    if (!pad_fits(*in_pad, f.inbox)) return false;
    f.in_pad = *in_pad;
    for (Msg &m : f.sends) m.contiguous = box_is_contiguous_at(f.inbox, *in_pad, m.box, s.esize, &m.off);
    f.chunks_contiguous_in_pad = true;
    for (const Box &c : f.chunks) {
      size_t off;
      if (!box_is_contiguous_at(f.inbox, *in_pad, c, s.esize, &off)) f.chunks_contiguous_in_pad = false;
    }
  }
  if (out_pad) {
    const size_t l = s.last_moving;
    SchedStep &st = *s.steps[l];
    if (!pad_fits(*out_pad, st.outbox)) return false;
    st.out_pad = *out_pad;
    for (Msg &m : st.recvs) m.contiguous = box_is_contiguous_at(st.outbox, *out_pad, m.box, s.esize, &m.off);
    unfuse_before(s, l);
    // Reduce-scatters and Partial fills write the rows of the padded output one by one.
    bool by_rows = st.kind == StepKind::kReduceScatter;
    for (auto &p : s.steps)  // in place: they write the final output too
      if (p->in_place()) {
        if (!pad_fits(*out_pad, p->outbox)) return false;
        p->out_pad = *out_pad;
        by_rows = by_rows || p->fill;
      }
    if (by_rows && st.outbox.numel() > 0 &&
        padded_run_bytes(*out_pad, st.outbox.len, s.esize) < min_run)
      return false;
  }
  return true;
}

bool schedule_stride_out(Schedule &s, const Shape &out_str) {
  if (s.compressed) return false;
  if (s.steps.empty()) return true;
  const size_t l = s.last_moving;
  SchedStep &st = *s.steps[l];
  if (st.kind == StepKind::kReduceScatter) return false;
  for (const auto &p : s.steps)
    if (p->kind == StepKind::kPartialInit) return false;
  if (out_str.size() != st.outbox.len.size()) return false;
  st.out_str = out_str;  // (the executor stages every receive of such a step)
  unfuse_before(s, l);
  return true;
}

namespace {
// A reduce-scatter's flows from the grid (lazy members): chunk j of my input to member j, my
// chunk from each other member; by group index rather than by posting order.
void rs_lazy_traffic(const SchedStep &st, int step, Traffic &t) {
  const size_t d = (size_t)st.d;
  uint64_t rest = st.esize;  // bytes per index of dim d
  for (size_t i = 0; i < st.inbox.len.size(); ++i)
    if (i != d) rest *= (uint64_t)st.inbox.len[i];
  const uint64_t mine = (uint64_t)st.outbox.numel() * st.esize;
  for (int64_t j = 0; j < st.k; ++j) {
    const uint64_t b = (uint64_t)rs_range(st, j).len * rest;
    if (j != st.mine && b) t.flows.push_back(Flow{step, rs_peer(st, j), true, b});
  }
  for (int64_t j = 0; mine && j < st.k; ++j)
    if (j != st.mine) t.flows.push_back(Flow{step, rs_peer(st, j), false, mine});
  t.bytes_reduced += mine * (uint64_t)(st.k - 1);
}
}  // namespace

Traffic schedule_traffic(const Schedule &s) {
  Traffic t;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const SchedStep &st = *s.steps[i];
    const int step = (int)i;
    const uint64_t es = st.esize;
    const size_t first = t.flows.size();
    uint64_t acc = 0;  // the integer average's accumulator
    if (st.kind == StepKind::kExchange) {
      auto add = [&](const std::vector<Msg> &msgs, const std::vector<MsgRun> &runs, bool send) {
        for (const Msg &m : msgs)
          if (m.bytes) t.flows.push_back(Flow{step, m.peer, send, m.bytes});
        for (const MsgRun &r : runs)  // a run's messages all have the first one's bytes
          for (int64_t j = 0; r.first.bytes && j < r.count; ++j)
            t.flows.push_back(Flow{step, (int)(r.first.peer + j * r.peer_step), send, r.first.bytes});
      };
      add(st.sends, st.send_runs, true);
      add(st.recvs, st.recv_runs, false);
      if (!st.skip_self)
        for (const LocalCopy &c : st.selfs) t.bytes_copied += (uint64_t)c.box.numel() * es;
    } else if (st.kind == StepKind::kPieces) {
      for (const PieceMsg &m : st.psends) t.flows.push_back(Flow{step, m.peer, true, m.bytes});
      for (const PieceMsg &m : st.precvs) t.flows.push_back(Flow{step, m.peer, false, m.bytes});
      for (const PieceMsg &m : st.pselfs) t.bytes_copied += m.bytes;
    } else if (st.kind == StepKind::kReduceScatter && st.member && st.lazy_members) {
      rs_lazy_traffic(st, step, t);
      if (st.wide) acc = (uint64_t)st.outbox.numel() * 16;
    } else if (st.kind == StepKind::kReduceScatter && st.member) {
      const uint64_t mine = (uint64_t)st.chunks[(size_t)st.mine].numel() * es;
      for (int64_t j : st.order) {
        const uint64_t b = (uint64_t)st.chunks[(size_t)j].numel() * es;
        if (b) t.flows.push_back(Flow{step, st.peers[(size_t)j], true, b});
      }
      for (int64_t j : st.order)
        if (mine) t.flows.push_back(Flow{step, st.peers[(size_t)j], false, mine});
      t.bytes_reduced += mine * (uint64_t)(st.k - 1);
      if (st.wide) acc = (uint64_t)st.chunks[(size_t)st.mine].numel() * 16;
    }
    uint64_t moved = acc;
    for (size_t f = first; f < t.flows.size(); ++f) moved += t.flows[f].bytes;
    t.staging_need = std::max(t.staging_need, moved);
  }
  for (size_t w : s.work_bytes) t.work_bytes += w;
  return t;
}

}  // namespace lm
