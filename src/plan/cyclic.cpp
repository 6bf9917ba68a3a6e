// SPDX-License-Identifier: BSD-3-Clause
// Pieces steps: reshards to and from block-cyclic layouts (StepKind::kPieces, plan/schedule.hpp).
// A coordinate of a layout holds, per tensor dim, a sorted list of runs of global indices (one
// run for Shard, ragged and replicated dims; one per block for a block-cyclic dim: O(n / (b P))).
// What a pair of coordinates shares is, per dim, the intersection of their lists (a merge), and
// the message between them the row-major product of those intersections: both ranks compute the
// same lists and pack or unpack the pieces in the same order.
#include <algorithm>

#include "plan/internal.hpp"

namespace lm {

int64_t PieceMsg::pieces() const {
  int64_t n = 1;
  for (const auto &d : dims) n *= (int64_t)d.size();
  return n;
}

namespace {

// The runs x and y share, `a` from x's local offsets, `b` from y's. Runs that continue in both
// buffers merge (a block-cyclic dim met with the same block-cyclic dim is one run per peer).
std::vector<PieceRun> meet(const std::vector<Seg> &x, const std::vector<Seg> &y) {
  std::vector<PieceRun> out;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t lo = std::max(x[i].g, y[j].g);
    const int64_t hi = std::min(x[i].g + x[i].len, y[j].g + y[j].len);
    if (hi > lo) {
      const int64_t a = x[i].l + (lo - x[i].g), b = y[j].l + (lo - y[j].g);
      PieceRun *last = out.empty() ? nullptr : &out.back();
      if (last && last->a + last->len == a && last->b + last->len == b)
        last->len += hi - lo;
      else
        out.push_back(PieceRun{hi - lo, a, b});
    }
    if (x[i].g + x[i].len <= y[j].g + y[j].len)
      ++i;
    else
      ++j;
  }
  return out;
}

// One coordinate's runs per tensor dim (empty: the coordinate holds nothing).
std::vector<std::vector<Seg>> holdings(const Layout &L, const int64_t *coord) {
  std::vector<std::vector<Seg>> h((size_t)L.ndim());
  for (int d = 0; d < L.ndim(); ++d) {
    h[(size_t)d] = L.dim_segments(coord, d);
    if (h[(size_t)d].empty()) return {};
  }
  return h;
}

// The pieces a source holding s and a target holding t share; false when none.
bool shared(const std::vector<std::vector<Seg>> &s, const std::vector<std::vector<Seg>> &t,
            size_t esize, PieceMsg &m) {
  if (s.empty() || t.empty()) return false;
  m.dims.resize(s.size());
  m.bytes = esize;
  for (size_t d = 0; d < s.size(); ++d) {
    m.dims[d] = meet(s[d], t[d]);
    int64_t n = 0;
    for (const PieceRun &r : m.dims[d]) n += r.len;
    if (n == 0) return false;
    m.bytes *= (size_t)n;
  }
  return true;
}

// Whether coordinate c of the source is the one `fixed` picks along the replicated dims.
bool chosen(const Shape &fixed, const Shape &c) {
  for (size_t m = 0; m < c.size(); ++m)
    if (fixed[m] >= 0 && fixed[m] != c[m]) return false;
  return true;
}

}  // namespace

std::unique_ptr<SchedStep> pieces_step(const Layout &in, const Layout &out, bool same_mesh, int me,
                                       size_t esize, int tag) {
  auto st = std::make_unique<SchedStep>();
  st->kind = StepKind::kPieces;
  st->in_layout = in;
  st->out_layout = out;
  st->tag = tag;
  st->esize = esize;
  const size_t n = (size_t)in.ndim();
  st->inbox = st->outbox = empty_box(n);
  SourceChooser ch(in, out, same_mesh);
  Shape cs((size_t)in.mesh_ndim()), cd((size_t)out.mesh_ndim()), c, fixed;
  const int64_t si = in.grid->index_of(me), di = out.grid->index_of(me);
  if (si >= 0) {  // sends (and the local copy): to every target coordinate I serve
    in.grid->coord_of(si, cs.data());
    st->inbox = in.box_at(cs.data());
    const auto mine = holdings(in, cs.data());
    c.resize(cd.size());
    for (int64_t t = 0; !mine.empty() && t < out.grid->size(); ++t) {
      out.grid->coord_of(t, c.data());
      const int peer = out.grid->rank_at_index(t);
      fixed.assign(cs.size(), -1);
      ch.choose(c.data(), peer, fixed);
      PieceMsg m;
      if (!chosen(fixed, cs) || !shared(mine, holdings(out, c.data()), esize, m)) continue;
      m.peer = peer;
      st->bytes_sent += peer == me ? 0 : (int64_t)m.bytes;
      (peer == me ? st->pselfs : st->psends).push_back(std::move(m));
    }
  }
  if (di >= 0) {  // receives: from every source coordinate chosen for me
    out.grid->coord_of(di, cd.data());
    st->outbox = out.box_at(cd.data());
    const auto mine = holdings(out, cd.data());
    fixed.assign(cs.size(), -1);
    ch.choose(cd.data(), me, fixed);
    c.resize(cs.size());
    for (int64_t s = 0; !mine.empty() && s < in.grid->size(); ++s) {
      in.grid->coord_of(s, c.data());
      const int peer = in.grid->rank_at_index(s);
      PieceMsg m;
      if (peer == me || !chosen(fixed, c) || !shared(holdings(in, c.data()), mine, esize, m))
        continue;
      m.peer = peer;
      st->precvs.push_back(std::move(m));
    }
  }
  return st;
}

}  // namespace lm
