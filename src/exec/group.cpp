// SPDX-License-Identifier: BSD-3-Clause
// Grouped executions: buckets of entries, one message per peer and round (exec/group.hpp).
#include "exec/group.hpp"

#include <algorithm>
#include <climits>
#include <map>

#include "common/error.hpp"

namespace lm {

namespace {
// Tags of the coalesced rounds: above the planner's step tags (0x4c4d + step, a handful).
constexpr int kGroupTagBase = 0x4c4d + 0x200;
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// One entry's box inside a peer's message of a round.
struct GroupPart {
  size_t e = 0;                  // entry
  const SchedStep *st = nullptr;
  const Msg *msg = nullptr;      // exchange: the box; NULL: a reduce-scatter chunk
  int64_t j = -1;                // reduce-scatter: the group index of the chunk
  size_t rs = 0;                 // reduce-scatter: index into GroupRound::rs
  size_t off = 0, bytes = 0;     // inside the peer's message
};
struct GroupPeerMsg {
  int peer = -1;
  size_t off = 0, bytes = 0;     // inside the round's send or receive region
  std::vector<GroupPart> parts;
};
// A reduce-scatter step of one entry: where each group index's contribution lands.
struct GroupRs {
  size_t e = 0;
  const SchedStep *st = nullptr;
  std::vector<size_t> recv_off;  // per group index, inside the receive region
};
struct GroupRound {
  std::vector<GroupPeerMsg> sends, recvs;
  std::vector<GroupRs> rs;
  std::vector<size_t> entries;   // entries with a step in this round
  size_t scratch = 0, send_bytes = 0, recv_bytes = 0;
  size_t need() const { return scratch + send_bytes + recv_bytes; }
};
struct GroupBucket {
  size_t first = 0, last = 0;    // entries [first, last)
  bool alone = false;            // one entry larger than the bound: its own plan runs it
  std::vector<GroupRound> rounds;
  size_t stage = 0;              // the most a round needs
};

namespace {

GroupPart &add_part(std::vector<GroupPeerMsg> &v, std::map<int, size_t> &idx, int peer,
                    const GroupPart &p) {
  auto it = idx.find(peer);
  if (it == idx.end()) {
    it = idx.emplace(peer, v.size()).first;
    v.emplace_back();
    v.back().peer = peer;
  }
  GroupPeerMsg &m = v[it->second];
  m.parts.push_back(p);
  // Every part at a 16-byte offset: reductions and device copies read it as its dtype (both
  // sides lay the message out alike, padding included).
  m.parts.back().off = (m.bytes + 15) / 16 * 16;
  m.bytes = m.parts.back().off + p.bytes;
  return m.parts.back();
}

// Lays the peers' messages out one after the other; returns the region's bytes.
size_t lay_out(std::vector<GroupPeerMsg> &v) {
  size_t off = 0;
  for (auto &m : v) {
    m.off = off;
    off += align_up(m.bytes);
  }
  return off;
}

void add_reduce_scatter(GroupRound &R, std::map<int, size_t> &si, std::map<int, size_t> &ri,
                        size_t e, const SchedStep &st) {
  const size_t mine_bytes = (size_t)st.chunks[(size_t)st.mine].numel() * st.esize;
  R.rs.push_back(GroupRs{e, &st, std::vector<size_t>((size_t)st.k, 0)});
  for (int64_t j = 0; j < st.k; ++j) {
    if (j == st.mine) continue;
    const size_t cb = (size_t)st.chunks[(size_t)j].numel() * st.esize;
    if (cb) add_part(R.sends, si, st.peers[(size_t)j], GroupPart{e, &st, nullptr, j, 0, 0, cb});
    if (mine_bytes)
      add_part(R.recvs, ri, st.peers[(size_t)j],
               GroupPart{e, &st, nullptr, j, R.rs.size() - 1, 0, mine_bytes});
  }
  // Scratch: a 128-bit accumulator (integer avg) and a packed copy of this rank's own chunk.
  R.scratch = std::max(R.scratch, align_up(st.wide ? mine_bytes / st.esize * 16 : 0) +
                                      align_up(mine_bytes));
}

GroupRound build_round(const std::vector<Plan *> &plans, size_t first, size_t last, size_t r) {
  GroupRound R;
  std::map<int, size_t> si, ri;
  for (size_t e = first; e < last; ++e) {
    const Plan &p = *plans[e];
    if (r >= p.steps.size()) continue;
    const SchedStep &st = *p.steps[r];
    R.entries.push_back(e);
    if (st.kind == StepKind::kExchange) {
      for (const Msg &m : st.sends)
        if (m.bytes) add_part(R.sends, si, m.peer, GroupPart{e, &st, &m, -1, 0, 0, m.bytes});
      for (const Msg &m : st.recvs)
        if (m.bytes) add_part(R.recvs, ri, m.peer, GroupPart{e, &st, &m, -1, 0, 0, m.bytes});
    } else if (st.kind == StepKind::kReduceScatter && st.member) {
      add_reduce_scatter(R, si, ri, e, st);
    }
  }
  R.send_bytes = lay_out(R.sends);
  R.recv_bytes = lay_out(R.recvs);
  for (auto &m : R.recvs)
    for (auto &p : m.parts)
      if (!p.msg) R.rs[p.rs].recv_off[(size_t)p.j] = m.off + p.off;
  return R;
}

// Entries' global sizes, the same on every rank.
size_t global_bytes(const Plan &p) {
  size_t n = p.esize;
  for (int64_t x : p.src.gshape) n *= (size_t)x;
  return n;
}

// Reduces one entry's reduce-scatter contributions into its output in group order.
void reduce_chunk(MemOps &mem, const Plan &p, const GroupRs &q, const char *in, char *out,
                  const char *rreg, char *scratch) {
  const SchedStep &st = *q.st;
  const Box &mine = st.chunks[(size_t)st.mine];
  const int64_t n = mine.numel();
  if (n == 0) return;
  const size_t esize = st.esize;
  char *acc = scratch;
  char *own = scratch + align_up(st.wide ? (size_t)n * 16 : 0);
  const char *first = nullptr;  // contribution 0, reduced with contribution 1 in one pass
  for (int64_t j = 0; j < st.k; ++j) {
    const char *src;
    if (j != st.mine) {
      src = rreg + q.recv_off[(size_t)j];
    } else {
      size_t coff = 0;
      if (box_is_contiguous_at(st.inbox, st.in_ext(), mine, esize, &coff)) {
        src = in + coff;
      } else {
        int64_t zero[kBoxMaxDims] = {0};
        BoxCopy c;
        boxcopy_init(c, (int)mine.len.size(), mine.len.data(), st.in_ext().data(),
                     st.chunk_rel[(size_t)j].data(), mine.len.data(), zero, (int64_t)esize);
        mem.copy(c, own, in, 0, c.numel);
        src = own;
      }
    }
    if (st.wide)
      mem.wide_accumulate(p.dt, acc, src, n, j == 0);
    else if (j == 0 && st.k > 1)
      first = src;
    else if (j == 0)
      mem.copy_1d(out, src, n, esize);
    else if (j == 1)
      mem.reduce_pair(p.dt, st.op, out, first, src, n, esize);
    else
      mem.reduce(p.dt, st.op, out, src, n);
  }
  if (st.wide)
    mem.wide_finish_avg(p.dt, out, acc, n, st.divide_by);
  else if (st.divide_by > 1)
    mem.scale_avg(p.dt, out, n, st.divide_by);
}

void copy_selfs(MemOps &mem, const SchedStep &st, const void *in, void *out) {
  if (st.skip_self) return;
  for (auto &b : st.selfs) {
    BoxCopy c;
    boxcopy_init(c, (int)st.inbox.len.size(), b.box.len.data(), st.in_ext().data(),
                 b.in_rel.data(), st.out_ext().data(), b.out_rel.data(), (int64_t)st.esize);
    mem.copy(c, out, in, 0, c.numel);
  }
}

}  // namespace

GroupExec::GroupExec(std::vector<Plan *> plans, MPI_Comm comm, size_t bucket_bytes,
                     size_t alone_bytes)
    : plans_(std::move(plans)), comm_(comm), spec_(host_spec()) {
  // Alone: larger than the bounds, or a block-cyclic entry (its pieces step is not coalesced
  // into rounds: the plan runs it, between the buckets before and after it). Plans are the same
  // on every rank, so the buckets are too.
  auto alone = [&](size_t i, size_t g) {
    if (g > bucket_bytes || g > alone_bytes) return true;
    for (const auto &st : plans_[i]->steps)
      if (st->kind == StepKind::kPieces) return true;
    return false;
  };
  size_t e = 0;
  while (e < plans_.size()) {
    auto b = std::make_unique<GroupBucket>();
    b->first = e;
    size_t sum = global_bytes(*plans_[e]);
    b->alone = alone(e, sum);
    for (++e; !b->alone && e < plans_.size(); ++e) {
      const size_t g = global_bytes(*plans_[e]);
      if (alone(e, g) || sum + g > bucket_bytes) break;
      sum += g;
    }
    b->last = e;
    if (!b->alone) {
      size_t nr = 0;
      for (size_t i = b->first; i < b->last; ++i) nr = std::max(nr, plans_[i]->steps.size());
      for (size_t r = 0; r < nr; ++r) {
        b->rounds.push_back(build_round(plans_, b->first, b->last, r));
        b->stage = std::max(b->stage, b->rounds.back().need());
      }
    }
    buckets_.push_back(std::move(b));
  }
  work_.resize(plans_.size());
  work_cap_.resize(plans_.size());
}

GroupExec::~GroupExec() { abandon(); }

TransportSpec GroupExec::host_spec() const {
  TransportSpec h;
  h.comm = comm_;
  return h;
}

void GroupExec::use(const TransportSpec &spec) {
  if (spec_.same(spec)) return;
  if (active_) fail(LM_ERR_INTERNAL, "GroupExec::use during an execution");
  route_ = Route{};
  spec_ = spec;
}

void GroupExec::check_errors(const char *what) {
  if (route_.wire) route_.wire->check_errors(what);
  for (const auto &b : buckets_)
    if (b->alone) plans_[b->first]->check_errors(what);
}

void *GroupExec::out_of(size_t e, size_t i) {
  const Plan &p = *plans_[e];
  if (p.steps[i]->in_place() || i == p.last_moving) return out_[e];
  if (p.fused[i] >= 0) return static_cast<char *>(out_of(e, i + 1)) + p.fused[i];
  return work_[e][i];
}
const void *GroupExec::in_of(size_t e, size_t i) {
  if (plans_[e]->steps[i]->in_place()) return out_[e];
  return i == 0 ? in_[e] : out_of(e, i - 1);
}

void GroupExec::start(std::vector<const void *> in, std::vector<void *> out, bool blocking) {
  if (active_) fail(LM_ERR_INTERNAL, "GroupExec::start during an execution");
  if (in.size() != plans_.size() || out.size() != plans_.size())
    fail(LM_ERR_INTERNAL, "GroupExec::start: %zu entries, %zu inputs, %zu outputs",
         plans_.size(), in.size(), out.size());
  in_ = std::move(in);
  out_ = std::move(out);
  blocking_ = blocking;
  b_ = 0;
  active_ = !buckets_.empty();
  if (active_) begin_bucket();
}

void GroupExec::begin_bucket() {
  GroupBucket &b = *buckets_[b_];
  if (b.alone) {
    Plan &p = *plans_[b.first];
    p.use(spec_.kind == TransportSpec::kHost ? p.host_spec() : spec_);
    p.start(in_[b.first], out_[b.first], blocking_);
    return;
  }
  if (!route_.wire) route_ = select_route(spec_);
  route_.wire->begin_execution(blocking_);
  MemOps &mem = *route_.mem;
  for (size_t e = b.first; e < b.last; ++e) {
    const Plan &p = *plans_[e];
    work_[e].assign(p.steps.size(), nullptr);
    work_cap_[e].assign(p.steps.size(), 0);
    for (size_t i = 0; i < p.steps.size(); ++i)
      if (p.work_bytes[i]) work_[e][i] = mem.staging_take(p.work_bytes[i], &work_cap_[e][i]);
  }
  stage_bytes_ = b.stage;
  if (b.stage) stage_ = static_cast<char *>(mem.staging_take(b.stage, &stage_cap_));
  r_ = 0;
  if (!b.rounds.empty()) start_round();
}

// Entry q.e's box of a round's message in its own buffer: the sender's input (exchange box or
// reduce-scatter chunk), the receiver's output (exchange) or its receive region (a chunk, packed).
PartRef GroupExec::part_of(const GroupPart &q, bool send, char *region) {
  const SchedStep &st = *q.st;
  PartRef p;
  p.box.ndim = (int)st.inbox.len.size();
  p.box.esize = st.esize;
  if (q.msg) {
    p.buf = send ? in_of(q.e, r_) : out_of(q.e, r_);
    p.box.shape = send ? st.in_ext().data() : st.out_ext().data();
    p.box.off = q.msg->rel.data();
    p.box.len = q.msg->box.len.data();
  } else if (send) {
    p.buf = in_of(q.e, r_);
    p.box.shape = st.in_ext().data();
    p.box.off = st.chunk_rel[(size_t)q.j].data();
    p.box.len = st.chunks[(size_t)q.j].len.data();
  } else {
    static const int64_t zero[kBoxMaxDims] = {0};
    const Box &mine = st.chunks[(size_t)st.mine];
    p.buf = region + q.off;
    p.box.shape = mine.len.data();
    p.box.off = zero;
    p.box.len = mine.len.data();
  }
  return p;
}

// Whether peer message m moves straight between the entries' buffers (Transport::parts_direct;
// the same answer on both sides) and, if so, its parts in parts_.
bool GroupExec::direct_parts(const GroupPeerMsg &m, bool send, char *region) {
  parts_.clear();
  for (const auto &q : m.parts) parts_.push_back(part_of(q, send, region));
  return route_.wire->parts_direct(parts_.data(), parts_.size(), m.peer);
}

void GroupExec::start_round() {
  const GroupRound &R = buckets_[b_]->rounds[r_];
  Transport &tp = *route_.wire;
  MemOps &mem = *route_.mem;
  char *sreg = stage_ + R.scratch, *rreg = sreg + R.send_bytes;
  for (size_t e : R.entries) {  // identity fills (in place: nothing else of the round reads them)
    const SchedStep &st = *plans_[e]->steps[r_];
    if (st.kind == StepKind::kPartialInit && st.fill)
      mem.fill_identity(plans_[e]->dt, st.op, out_of(e, r_), st.fill_n);
  }
  const int tag = kGroupTagBase + (int)r_;
  direct_.assign(R.recvs.size(), 0);
  for (size_t k = 0; k < R.recvs.size(); ++k) {
    const GroupPeerMsg &m = R.recvs[k];
    if ((direct_[k] = direct_parts(m, false, rreg + m.off)))
      tp.post_recv_parts(parts_.data(), parts_.size(), m.peer, tag);
    else
      tp.post_recv(rreg + m.off, m.bytes, m.peer, tag);
  }
  int64_t zero[kBoxMaxDims] = {0};
  for (const auto &m : R.sends) {
    if (direct_parts(m, true, nullptr)) {
      tp.post_send_parts(parts_.data(), parts_.size(), m.peer, tag, sreg + m.off, m.bytes);
      continue;
    }
    for (const auto &q : m.parts) {
      const PartRef p = part_of(q, true, nullptr);
      BoxCopy c;
      boxcopy_init(c, p.box.ndim, p.box.len, p.box.shape, p.box.off, p.box.len, zero,
                   (int64_t)p.box.esize);
      mem.copy(c, sreg + m.off + q.off, p.buf, 0, c.numel);
    }
    tp.post_send(sreg + m.off, m.bytes, m.peer, tag);
  }
  tp.flush();
  for (size_t e : R.entries) {
    const SchedStep &st = *plans_[e]->steps[r_];
    if (st.kind == StepKind::kExchange) copy_selfs(mem, st, in_of(e, r_), out_of(e, r_));
  }
}

void GroupExec::finish_round() {
  const GroupRound &R = buckets_[b_]->rounds[r_];
  MemOps &mem = *route_.mem;
  char *rreg = stage_ + R.scratch + R.send_bytes;
  int64_t zero[kBoxMaxDims] = {0};
  for (size_t k = 0; k < R.recvs.size(); ++k) {
    if (direct_[k]) continue;  // the exchange boxes are in place already
    const GroupPeerMsg &m = R.recvs[k];
    for (const auto &q : m.parts) {
      if (!q.msg) continue;
      const PartRef p = part_of(q, false, nullptr);
      BoxCopy c;
      boxcopy_init(c, p.box.ndim, p.box.len, p.box.len, zero, p.box.shape, p.box.off,
                   (int64_t)p.box.esize);
      mem.copy(c, const_cast<void *>(p.buf), rreg + m.off + q.off, 0, c.numel);
    }
  }
  for (const auto &q : R.rs)
    reduce_chunk(mem, *plans_[q.e], q, static_cast<const char *>(in_of(q.e, r_)),
                 static_cast<char *>(out_of(q.e, r_)), rreg, stage_);
  route_.wire->reset();
}

bool GroupExec::bucket_progress(bool block) {
  GroupBucket &b = *buckets_[b_];
  if (b.alone) return plans_[b.first]->progress(block);
  while (r_ < b.rounds.size()) {
    if (!route_.wire->done_from(0, block)) return false;
    finish_round();
    if (++r_ < b.rounds.size()) start_round();
  }
  return true;
}

void GroupExec::end_bucket() {
  GroupBucket &b = *buckets_[b_];
  if (b.alone || !route_.mem) return;
  MemOps &mem = *route_.mem;
  if (stage_) mem.staging_give(stage_, stage_cap_, stage_bytes_);
  stage_ = nullptr;
  for (size_t e = b.first; e < b.last; ++e)
    for (size_t i = 0; i < work_[e].size(); ++i)
      if (work_[e][i]) {
        mem.staging_give(work_[e][i], work_cap_[e][i], plans_[e]->work_bytes[i]);
        work_[e][i] = nullptr;
      }
}

bool GroupExec::progress(bool block) {
  while (active_) {
    if (!bucket_progress(block)) return false;
    end_bucket();
    if (++b_ == buckets_.size()) {
      active_ = false;
      break;
    }
    begin_bucket();
  }
  return true;
}

void GroupExec::abandon() {
  if (!active_) return;
  active_ = false;
  GroupBucket &b = *buckets_[b_];
  if (b.alone) {
    plans_[b.first]->abandon();
    return;
  }
  end_bucket();
  if (route_.wire) route_.wire->reset();
}

}  // namespace lm
