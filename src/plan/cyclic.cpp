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

// The runs x and y share, `a` from x's local offsets, `b` from y's, in increasing global order;
// runs that continue in both buffers merge.
std::vector<PieceRun> intersect(const std::vector<Seg> &x, const std::vector<Seg> &y) {
  std::vector<PieceRun> out;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t lo = std::max(x[i].g, y[j].g);
    const int64_t hi = std::min(x[i].g + x[i].len, y[j].g + y[j].len);
    if (hi > lo) {
      const int64_t a = x[i].l + (lo - x[i].g), b = y[j].l + (lo - y[j].g), len = hi - lo;
      PieceRun *last = out.empty() ? nullptr : &out.back();
      if (last && last->a + last->len == a && last->b + last->len == b)
        last->len += len;  // continues in both buffers
      else
        out.push_back(PieceRun{len, a, b, 1, 0, 0});
    }
    if (x[i].g + x[i].len <= y[j].g + y[j].len)
      ++i;
    else
      ++j;
  }
  return out;
}

// Equal runs at constant strides in both buffers as one strided run each (whole blocks met alike).
std::vector<PieceRun> merge_strided(const std::vector<PieceRun> &plain) {
  std::vector<PieceRun> out;
  for (const PieceRun &r : plain) {
    PieceRun *last = out.empty() ? nullptr : &out.back();
    if (last && last->count == 1 && last->len == r.len)
      *last = PieceRun{r.len, last->a, last->b, 2, r.a - last->a, r.b - last->b};  // strided
    else if (last && last->count > 1 && last->len == r.len &&
             r.a == last->a + last->count * last->as && r.b == last->b + last->count * last->bs)
      ++last->count;  // the next repetition
    else
      out.push_back(r);
  }
  return out;
}

// Two block-cyclic dims of different blocks (or grids) meet in a pattern of runs that repeats
// every lcm of their cycles (blocks of 8 and 6 on 2 processes: 6, 2, 4, 4, 2, 6, ... of period 48),
// with the same offsets added in each buffer per period. Such a list of m >= 2 whole periods of p
// runs (and a last partial one) becomes p strided runs of m repetitions, one per phase, then the
// rest: a piece per phase, not one per run. The order of the runs in a message changes; both
// ranks compute the same list. false: no period of at most kMaxPeriod runs covers it.
constexpr size_t kMaxPeriod = 64;
bool merge_periodic(const std::vector<PieceRun> &plain, std::vector<PieceRun> *out) {
  const size_t n = plain.size();
  for (size_t p = 2; p <= kMaxPeriod && 2 * p <= n; ++p) {
    const int64_t da = plain[p].a - plain[0].a, db = plain[p].b - plain[0].b;
    size_t i = p;
    while (i < n && plain[i].len == plain[i - p].len && plain[i].a - plain[i - p].a == da &&
           plain[i].b - plain[i - p].b == db)
      ++i;
    if (i + p < n) continue;  // more than a last partial period left over: not this p
    const size_t m = i / p;   // whole periods
    out->clear();
    for (size_t q = 0; q < p; ++q)
      out->push_back(PieceRun{plain[q].len, plain[q].a, plain[q].b, (int64_t)m, da, db});
    out->insert(out->end(), plain.begin() + (std::ptrdiff_t)(m * p), plain.end());
    return true;
  }
  return false;
}

std::vector<PieceRun> meet(const std::vector<Seg> &x, const std::vector<Seg> &y) {
  std::vector<PieceRun> plain = intersect(x, y), out;
  std::vector<PieceRun> strided = merge_strided(plain);
  if (strided.size() > 2 && merge_periodic(plain, &out) && out.size() < strided.size()) return out;
  return strided;
}

// A piece's box copy has one dim per tensor dim and one more per strided run: past kBoxMaxDims
// (tensors of more than 16 dims), the last dims' strided runs are cut back into plain runs.
void limit_strided(PieceMsg &m) {
  size_t dims = m.dims.size();
  for (const auto &d : m.dims)
    for (const PieceRun &r : d)
      if (r.count > 1) {
        ++dims;
        break;
      }
  for (size_t d = m.dims.size(); d-- > 0 && dims > (size_t)kBoxMaxDims;) {
    std::vector<PieceRun> plain;
    bool had = false;
    for (const PieceRun &r : m.dims[d])
      for (int64_t k = 0; k < r.count; ++k) {
        plain.push_back(PieceRun{r.len, r.a + k * r.as, r.b + k * r.bs, 1, 0, 0});
        had = had || r.count > 1;
      }
    m.dims[d] = std::move(plain);
    dims -= had ? 1 : 0;
  }
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
    for (const PieceRun &r : m.dims[d]) n += r.total();
    if (n == 0) return false;
    m.bytes *= (size_t)n;
  }
  limit_strided(m);
  return true;
}

// Whether coordinate c of the source is the one `fixed` picks along the replicated dims.
bool chosen(const Shape &fixed, const Shape &c) {
  for (size_t m = 0; m < c.size(); ++m)
    if (fixed[m] >= 0 && fixed[m] != c[m]) return false;
  return true;
}

}  // namespace

void piece_boxcopy(BoxCopy &c, const PieceMsg &m, const int64_t *idx, const int64_t *src_shape,
                   bool src_a, const int64_t *dst_shape, bool dst_a, int64_t esize) {
  const int n = (int)m.dims.size();
  int64_t bs[kBoxMaxDims], bd[kBoxMaxDims];  // element strides of the tensor dims in each buffer
  int64_t ss = 1, ds = 1;
  for (int i = n - 1; i >= 0; --i) {
    bs[i] = ss;
    bd[i] = ds;
    if (src_shape) ss *= src_shape[i];
    if (dst_shape) ds *= dst_shape[i];
  }
  // The piece's dims, a strided run as two: (repetition, index).
  int64_t len[kBoxMaxDims], sst[kBoxMaxDims], dst[kBoxMaxDims];
  int k = 0;
  c.esize = esize;
  c.sbase = c.dbase = 0;
  c.numel = 1;
  for (int i = 0; i < n; ++i) {
    const PieceRun &r = m.dims[(size_t)i][(size_t)idx[i]];
    if (src_shape) c.sbase += (src_a ? r.a : r.b) * bs[i];
    if (dst_shape) c.dbase += (dst_a ? r.a : r.b) * bd[i];
    if (r.count > 1) {
      len[k] = r.count;
      sst[k] = (src_a ? r.as : r.bs) * bs[i];
      dst[k] = (dst_a ? r.as : r.bs) * bd[i];
      ++k;
    }
    len[k] = r.len;
    sst[k] = bs[i];
    dst[k] = bd[i];
    ++k;
    c.numel *= r.total();
  }
  if (k == 0) {  // (pieces steps never see a 0-d tensor: one element all the same)
    len[0] = 1;
    k = 1;
  }
  int64_t cs = 1;  // a staging side: compact, in message order
  for (int i = k - 1; i >= 0; --i) {
    if (!src_shape) sst[i] = cs;
    if (!dst_shape) dst[i] = cs;
    cs *= len[i];
  }
  // Merge trailing dims where both sides continue (the innermost dim has stride 1 on both).
  int top = k - 1;
  int64_t run = len[top];
  while (top > 0 && sst[top - 1] == run && dst[top - 1] == run) {
    --top;
    run *= len[top];
  }
  c.n = top + 1;
  for (int i = 0; i < top; ++i) {
    c.len[i] = len[i];
    c.sstr[i] = sst[i];
    c.dstr[i] = dst[i];
  }
  c.len[top] = run;
  c.sstr[top] = 1;
  c.dstr[top] = 1;
}

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
