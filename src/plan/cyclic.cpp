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

// The coordinates of layout L whose holdings meet `runs` (one sorted list per tensor dim) in every
// tensor dim, with c[m] = fix[m] wherever fix[m] >= 0, in increasing grid index. Per tensor dim,
// the values of its splitting mesh dims that hold part of a run: blocks met (block-cyclic), or
// nested torch.chunk / ragged spans; then their product with the mesh dims that split nothing.
// O(runs + blocks met + coordinates returned), never the mesh size (unless every coordinate meets).
class CoordsMeeting {
 public:
  CoordsMeeting(const Layout &L, const std::vector<std::vector<Seg>> &runs, const Shape &fix)
      : L_(L), fix_(fix), vals_((size_t)L.mesh_ndim()) {
    const Shape &ext = L.grid->shape();
    std::vector<bool> splits_some((size_t)L.mesh_ndim(), false);
    tuples_.resize(runs.size());
    for (size_t d = 0; d < runs.size(); ++d) {
      for (int m : L.order[d]) splits_some[(size_t)m] = true;
      dim_tuples(d, runs[d]);
    }
    for (int m = 0; m < L.mesh_ndim(); ++m) {
      if (splits_some[(size_t)m]) continue;
      if (fix[(size_t)m] >= 0) {
        vals_[(size_t)m] = {fix[(size_t)m]};
      } else {
        for (int64_t i = 0; i < ext[(size_t)m]; ++i) vals_[(size_t)m].push_back(i);
      }
      free_.push_back(m);
    }
  }
  // Grid indices of the coordinates, sorted.
  std::vector<int64_t> indices() {
    coord_.assign((size_t)L_.mesh_ndim(), 0);
    out_.clear();
    product(0);
    std::sort(out_.begin(), out_.end());
    return out_;
  }

 private:
  // The tuples (c[m] for m in order[d], flattened) of the coordinates holding part of runs[d].
  void dim_tuples(size_t d, const std::vector<Seg> &runs) {
    const auto &ord = L_.order[d];
    std::vector<int64_t> &t = tuples_[d];
    if (ord.empty()) {
      t.push_back(0);  // one empty tuple
      return;
    }
    if (L_.pl[(size_t)ord[0]].kind == LM_BLOCK_CYCLIC && ord.size() == 1) {  // alone (check_ragged)
      const lm_placement_t &p = L_.pl[(size_t)ord[0]];
      const int64_t P = L_.grid->shape()[(size_t)ord[0]], b = p.block;
      for (const Seg &r : runs) {
        const int64_t j0 = r.g / b, j1 = (r.g + r.len - 1) / b;
        for (int64_t j = j0; j <= j1 && j < j0 + P; ++j) t.push_back((j % P + p.source % P) % P);
      }
    } else {
      std::vector<int64_t> cur(ord.size());
      for (const Seg &r : runs) spans(d, 0, 0, L_.gshape[d], r.g, r.g + r.len, cur);
    }
    // Sort and deduplicate whole tuples, dropping those that contradict fix.
    const size_t k = ord.size();
    if (k == 1) {
      const int64_t f = fix_[(size_t)ord[0]];
      if (f >= 0) t.erase(std::remove_if(t.begin(), t.end(), [f](int64_t v) { return v != f; }),
                          t.end());
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      return;
    }
    std::vector<std::vector<int64_t>> tup;
    for (size_t i = 0; i + k <= t.size(); i += k) {
      bool ok = true;
      for (size_t x = 0; x < k; ++x)
        ok = ok && (fix_[(size_t)ord[x]] < 0 || fix_[(size_t)ord[x]] == t[i + x]);
      if (ok) tup.emplace_back(t.begin() + (std::ptrdiff_t)i, t.begin() + (std::ptrdiff_t)(i + k));
    }
    std::sort(tup.begin(), tup.end());
    tup.erase(std::unique(tup.begin(), tup.end()), tup.end());
    t.clear();
    for (const auto &x : tup) t.insert(t.end(), x.begin(), x.end());
  }
  // Nested torch.chunk / ragged blocks of mesh dims order[d][lvl..] inside [off, off + len) that
  // meet the global range [lo, hi).
  void spans(size_t d, size_t lvl, int64_t off, int64_t len, int64_t lo, int64_t hi,
             std::vector<int64_t> &cur) {
    const auto &ord = L_.order[d];
    if (lvl == ord.size()) {
      tuples_[d].insert(tuples_[d].end(), cur.begin(), cur.end());
      return;
    }
    const int m = ord[lvl];
    const int64_t a = std::max<int64_t>(0, lo - off), z = std::min<int64_t>(len, hi - off);
    int64_t first = 0, last = -1;
    const Extents *rag = L_.rag[(size_t)m].get();
    if (z <= a || (rag ? !rag->span(a, z, &first, &last)
                       : !chunk_span(len, L_.grid->shape()[(size_t)m], a, z, &first, &last)))
      return;
    for (int64_t i = first; i <= last; ++i) {
      const Range r = L_.split(m, len, i);
      if (r.len == 0) continue;
      cur[lvl] = i;
      spans(d, lvl + 1, off + r.off, r.len, lo, hi, cur);
    }
  }
  // The product: tensor dims' tuples, then the free mesh dims' values.
  void product(size_t k) {
    const size_t nd = tuples_.size();
    if (k < nd) {
      const auto &ord = L_.order[k];
      const size_t w = std::max<size_t>(1, ord.size());
      for (size_t i = 0; i + w <= tuples_[k].size(); i += w) {
        for (size_t x = 0; x < ord.size(); ++x) coord_[(size_t)ord[x]] = tuples_[k][i + x];
        product(k + 1);
      }
      return;
    }
    if (k - nd < free_.size()) {
      for (int64_t v : vals_[(size_t)free_[k - nd]]) {
        coord_[(size_t)free_[k - nd]] = v;
        product(k + 1);
      }
      return;
    }
    out_.push_back(L_.grid->index_at(coord_.data()));
  }

  const Layout &L_;
  const Shape &fix_;
  std::vector<std::vector<int64_t>> tuples_;  // per tensor dim, flattened tuples
  std::vector<std::vector<int64_t>> vals_;    // per free mesh dim
  std::vector<int> free_;
  Shape coord_;
  std::vector<int64_t> out_;
};

}  // namespace

int piece_strides(const PieceMsg &m, const int64_t *idx, const int64_t *str, bool use_a,
                  int64_t *len, int64_t *stride, int64_t *base) {
  int k = 0;
  *base = 0;
  for (size_t i = 0; i < m.dims.size(); ++i) {
    const PieceRun &r = m.dims[i][(size_t)idx[i]];
    if (str) *base += (use_a ? r.a : r.b) * str[i];
    if (r.count > 1) {
      len[k] = r.count;
      stride[k++] = str ? (use_a ? r.as : r.bs) * str[i] : 0;
    }
    len[k] = r.len;
    stride[k++] = str ? str[i] : 0;
  }
  if (k == 0) {  // (pieces steps never see a 0-d tensor: one element all the same)
    len[0] = 1;
    stride[0] = 1;
    k = 1;
  }
  int64_t cs = 1;  // a staging side: compact, in message order
  for (int i = k - 1; !str && i >= 0; --i) {
    stride[i] = cs;
    cs *= len[i];
  }
  return k;
}

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
  int64_t len[2 * kBoxMaxDims], sst[2 * kBoxMaxDims], dst[2 * kBoxMaxDims];
  const int k = piece_strides(m, idx, src_shape ? bs : nullptr, src_a, len, sst, &c.sbase);
  piece_strides(m, idx, dst_shape ? bd : nullptr, dst_a, len, dst, &c.dbase);
  c.esize = esize;
  c.numel = 1;
  for (int i = 0; i < k; ++i) c.numel *= len[i];
  boxcopy_merge(c, k, len, sst, dst);
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
    // Same mesh: a replicated source dim serves the target coordinates equal to it along it.
    Shape fix(cd.size(), -1);
    if (same_mesh)
      for (int m : ch.rep) fix[(size_t)m] = cs[(size_t)m];
    c.resize(cd.size());
    std::vector<int64_t> targets;
    if (!mine.empty()) targets = CoordsMeeting(out, mine, fix).indices();
    for (int64_t t : targets) {
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
    std::vector<int64_t> sources;
    if (!mine.empty()) sources = CoordsMeeting(in, mine, fixed).indices();
    for (int64_t s : sources) {
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
