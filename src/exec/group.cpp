// SPDX-License-Identifier: BSD-3-Clause
// Grouped executions: buckets of entries, one message per peer and round (exec/group.hpp).
#include "exec/group.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>

#include "common/error.hpp"
#include "layout/runs.hpp"

namespace lm {

namespace {
// Tags of the coalesced rounds: above the planner's step tags (0x4c4d + step, a handful).
constexpr int kGroupTagBase = 0x4c4d + 0x200;
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// Where a buffer of an execution lies, found from the plans alone (GroupExec::at resolves it):
// an entry's input or output, one of its intermediate outputs, or the bucket's staging; plus a
// byte offset into it.
struct GroupWhere {
  enum Kind : uint8_t { kIn, kOut, kWork, kStage };
  Kind kind = kIn;
  size_t e = 0, k = 0;  // entry; kWork: its step
  size_t off = 0;
};

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
  size_t room = 0;               // its room there (a send's: spill room too)
  std::vector<GroupPart> parts;
  // For Transport::parts_direct: the parts' bytes, box rows and runs (measure).
  size_t payload = 0, rows = 0, runs = 0;
  // For a message moved in place, found at its first such execution (flatten): each part's
  // buffer (where), its runs relative to it (rel[rel_end[i-1] .. rel_end[i])) and its place among
  // the message's bytes (pos, no padding).
  std::vector<GroupWhere> where;
  std::vector<Run> rel;
  std::vector<size_t> rel_end;
  std::vector<size_t> pos;
  bool chunks_only = false;      // a receive of reduce-scatter chunks only: it may be held
};
// A local copy of an exchange step: a contiguous range (n elements of esize bytes from in to
// out), or (n < 0) the step's own boxes (copy_selfs).
struct GroupSelf {
  size_t e = 0;
  GroupWhere in, out;
  int64_t n = -1;
  size_t esize = 0;
};
// An identity fill of a Partial target (fill_partial: its step's output box).
struct GroupFill {
  GroupWhere out;
  DType dt{};
  const SchedStep *st = nullptr;
};
// A reduce-scatter step of one entry: where each group index's contribution lands.
struct GroupRs {
  size_t e = 0;
  const SchedStep *st = nullptr;
  GroupWhere in, out;            // the step's input and output
  int64_t n = 0;                 // elements of this rank's chunk
  size_t own_off = SIZE_MAX;     // its byte offset in the input where contiguous there
  // Per group index: (receive, part) bringing its contribution (at the part's offset in the
  // receive region, or where a held receive lies).
  std::vector<std::pair<size_t, size_t>> from;
};
struct GroupRound {
  std::vector<GroupPeerMsg> sends, recvs;
  std::vector<GroupRs> rs;
  std::vector<GroupFill> fills;  // before anything moves (nothing else of the round reads them)
  std::vector<GroupSelf> selfs;  // after the sends are posted
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

// Lays the peers' messages out one after the other; returns the region's bytes. A send's room
// has the spill room Transport::post_send_parts may use beyond its bytes: kPartsSpillPerRun per
// run and once more, at most an eighth of its bytes more (a message of many short runs, which
// would not move in place anyway, takes little more staging; a transport that finds no room
// for its run list there reads it another way).
size_t lay_out(std::vector<GroupPeerMsg> &v, bool send) {
  size_t off = 0;
  for (auto &m : v) {
    m.off = off;
    const size_t spill =
        std::min(kPartsSpillPerRun * (m.runs + 1), m.bytes / 8 + kPartsSpillPerRun);
    m.room = align_up(m.bytes + (send ? spill : 0));
    off += m.room;
  }
  return off;
}

// Step i's output and input buffers of entry e (GroupExec::at places them): the entry's target
// for an in-place step and the last moving one, a step fused into the next one's output at its
// offset, else the step's intermediate buffer; a step reads the previous one's output.
GroupWhere where_out(const Plan &p, size_t e, size_t i) {
  if (p.steps[i]->in_place() || i == p.last_moving) return GroupWhere{GroupWhere::kOut, e, 0, 0};
  if (p.fused[i] >= 0) {
    GroupWhere w = where_out(p, e, i + 1);
    w.off += (size_t)p.fused[i];
    return w;
  }
  return GroupWhere{GroupWhere::kWork, e, i, 0};
}
GroupWhere where_in(const Plan &p, size_t e, size_t i) {
  if (p.steps[i]->in_place()) return GroupWhere{GroupWhere::kOut, e, 0, 0};
  return i == 0 ? GroupWhere{GroupWhere::kIn, e, 0, 0} : where_out(p, e, i - 1);
}

// Part q of a round-r message: its buffer and its box there. The sender's input (an exchange box
// or a reduce-scatter chunk), the receiver's output (an exchange box) or, for a received chunk,
// the receive region, packed (kStage at the part's offset in its message; the caller adds the
// message's place).
struct GroupPartBox {
  GroupWhere at;
  BoxRef box;
};
GroupPartBox part_box(const Plan &p, size_t r, const GroupPart &q, bool send) {
  const SchedStep &st = *q.st;
  GroupPartBox b;
  b.box.ndim = (int)st.inbox.len.size();
  b.box.esize = st.esize;
  if (q.msg) {
    b.at = send ? where_in(p, q.e, r) : where_out(p, q.e, r);
    b.box.shape = send ? st.in_ext().data() : st.out_ext().data();
    b.box.off = q.msg->rel.data();
    b.box.len = q.msg->box.len.data();
  } else if (send) {
    b.at = where_in(p, q.e, r);
    b.box.shape = st.in_ext().data();
    b.box.off = st.chunk_rel[(size_t)q.j].data();
    b.box.len = st.chunks[(size_t)q.j].len.data();
  } else {
    static const int64_t zero[kBoxMaxDims] = {0};
    const Box &mine = st.chunks[(size_t)st.mine];
    b.at = GroupWhere{GroupWhere::kStage, 0, 0, q.off};
    b.box.shape = mine.len.data();
    b.box.off = zero;
    b.box.len = mine.len.data();
  }
  return b;
}

// Rows of a box (its elements over its innermost extent; 1 for 0-d, 0 when empty): a bound on
// its runs that both sides of a message compute alike.
size_t box_rows(const BoxRef &b) {
  size_t numel = 1;
  for (int d = 0; d < b.ndim; ++d) numel *= (size_t)b.len[d];
  if (numel == 0) return 0;
  return b.ndim ? numel / (size_t)b.len[b.ndim - 1] : 1;
}

// m's bytes, box rows and runs (GroupPeerMsg).
void measure(const std::vector<Plan *> &plans, size_t r, GroupPeerMsg &m, bool send) {
  std::vector<Run> one;
  for (const GroupPart &q : m.parts) {
    const GroupPartBox b = part_box(*plans[q.e], r, q, send);
    box_runs(0, b.box.ndim, b.box.shape, b.box.off, b.box.len, b.box.esize, &one);
    m.payload += q.bytes;
    m.rows += box_rows(b.box);
    m.runs += one.size();
  }
}

// Fills m's runs relative to their buffers (GroupPeerMsg); region: the receive region's place
// in the staging.
void flatten(const std::vector<Plan *> &plans, size_t r, GroupPeerMsg &m, bool send,
             size_t region) {
  std::vector<Run> one;
  size_t pos = 0;
  for (const GroupPart &q : m.parts) {
    GroupPartBox b = part_box(*plans[q.e], r, q, send);
    if (b.at.kind == GroupWhere::kStage) b.at.off += region + m.off;
    m.where.push_back(b.at);
    box_runs(0, b.box.ndim, b.box.shape, b.box.off, b.box.len, b.box.esize, &one);
    m.rel.insert(m.rel.end(), one.begin(), one.end());
    m.rel_end.push_back(m.rel.size());
    m.pos.push_back(pos);
    pos += q.bytes;
  }
}

// The round's identity fills and local copies, in entry order.
void add_local_work(GroupRound &R, const Plan &p, size_t e, size_t r) {
  const SchedStep &st = *p.steps[r];
  if (st.kind == StepKind::kPartialInit && st.fill) {
    R.fills.push_back(GroupFill{where_out(p, e, r), p.dt, &st});
    return;
  }
  if (st.kind != StepKind::kExchange || st.skip_self) return;
  const GroupWhere in = where_in(p, e, r), out = where_out(p, e, r);
  std::vector<GroupSelf> v;
  for (const auto &b : st.selfs) {  // as copy_selfs would copy them
    BoxCopy c;
    boxcopy_init(c, (int)st.inbox.len.size(), b.box.len.data(), st.in_ext().data(),
                 b.in_rel.data(), st.out_ext().data(), b.out_rel.data(), (int64_t)st.esize);
    if (c.numel == 0) continue;
    if (c.n != 1) {  // not one run on both sides: the step's boxes, by copy_selfs
      R.selfs.push_back(GroupSelf{e, in, out, -1, st.esize});
      return;
    }
    GroupSelf x{e, in, out, c.numel, st.esize};
    x.in.off += (size_t)c.sbase * st.esize;
    x.out.off += (size_t)c.dbase * st.esize;
    v.push_back(x);
  }
  R.selfs.insert(R.selfs.end(), v.begin(), v.end());
}

void add_reduce_scatter(GroupRound &R, std::map<int, size_t> &si, std::map<int, size_t> &ri,
                        const Plan &p, size_t e, size_t r) {
  const SchedStep &st = *p.steps[r];
  const Box &mine = st.chunks[(size_t)st.mine];
  const size_t mine_bytes = (size_t)mine.numel() * st.esize;
  GroupRs q{e, &st, where_in(p, e, r), where_out(p, e, r), mine.numel(), SIZE_MAX,
            std::vector<std::pair<size_t, size_t>>((size_t)st.k)};
  size_t coff = 0;
  if (box_is_contiguous_at(st.inbox, st.in_ext(), mine, st.esize, &coff)) q.own_off = coff;
  R.rs.push_back(std::move(q));
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
    add_local_work(R, p, e, r);
    if (st.kind == StepKind::kExchange) {
      for (const Msg &m : st.sends)
        if (m.bytes) add_part(R.sends, si, m.peer, GroupPart{e, &st, &m, -1, 0, 0, m.bytes});
      for (const Msg &m : st.recvs)
        if (m.bytes) add_part(R.recvs, ri, m.peer, GroupPart{e, &st, &m, -1, 0, 0, m.bytes});
    } else if (st.kind == StepKind::kReduceScatter && st.member) {
      add_reduce_scatter(R, si, ri, p, e, r);
    }
  }
  for (auto &m : R.sends) measure(plans, r, m, true);
  for (auto &m : R.recvs) measure(plans, r, m, false);
  R.send_bytes = lay_out(R.sends, true);
  R.recv_bytes = lay_out(R.recvs, false);
  for (size_t k = 0; k < R.recvs.size(); ++k) {
    GroupPeerMsg &m = R.recvs[k];
    m.chunks_only = true;
    for (size_t i = 0; i < m.parts.size(); ++i) {
      const GroupPart &p = m.parts[i];
      m.chunks_only = m.chunks_only && !p.msg;
      if (p.msg) continue;
      R.rs[p.rs].from[(size_t)p.j] = {k, i};
    }
  }
  return R;
}

// Entries' global sizes, the same on every rank.
size_t global_bytes(const Plan &p) {
  size_t n = p.esize;
  for (int64_t x : p.src.gshape) n *= (size_t)x;
  return n;
}

// One run of an entry's reduce-scatter output (n elements from element c of its chunk): the
// contributions in group order, contribution 0 reduced with 1 in one pass (acc: the 128-bit sums
// of an integer avg, of this run alone: each run is finished before the next).
void reduce_run(MemOps &mem, DType dt, const SchedStep &st, const char *const *src_of, size_t c,
                char *out, int64_t n, char *acc) {
  const size_t esize = st.esize;
  const char *first = nullptr;
  for (int64_t j = 0; j < st.k; ++j) {
    const char *src = src_of[j] + c * esize;
    if (st.wide)
      mem.wide_accumulate(dt, acc, src, n, j == 0);
    else if (j == 0 && st.k > 1)
      first = src;
    else if (j == 0)
      mem.copy_1d(out, src, n, esize);
    else if (j == 1)
      mem.reduce_pair(dt, st.op, out, first, src, n, esize);
    else
      mem.reduce(dt, st.op, out, src, n);
  }
  if (st.wide)
    mem.wide_finish_avg(dt, out, acc, n, st.divide_by);
  else if (st.divide_by > 1)
    mem.scale_avg(dt, out, n, st.divide_by);
}

// Reduces one entry's reduce-scatter contributions into its output, run by run of it (one run
// where it is compact, its rows where it is padded). src_of[j]: group index j's contribution,
// packed; the own one's is set here (in place in the input, or packed into scratch).
void reduce_chunk(MemOps &mem, const Plan &p, const GroupRs &q, const char *in, char *out,
                  const char **src_of, char *scratch, std::vector<Run> &runs) {
  const SchedStep &st = *q.st;
  const int64_t n = q.n;
  if (n == 0) return;
  const size_t esize = st.esize;
  char *acc = scratch;
  char *own = scratch + align_up(st.wide ? (size_t)n * 16 : 0);
  const Box &mine = st.chunks[(size_t)st.mine];
  const int64_t zero[kBoxMaxDims] = {0};
  if (q.own_off != SIZE_MAX) {
    src_of[st.mine] = in + q.own_off;
  } else {
    BoxCopy c;
    boxcopy_init(c, (int)mine.len.size(), mine.len.data(), st.in_ext().data(),
                 st.chunk_rel[(size_t)st.mine].data(), mine.len.data(), zero, (int64_t)esize);
    mem.copy(c, own, in, 0, c.numel);
    src_of[st.mine] = own;
  }
  st.out_runs((uint64_t)(uintptr_t)out, zero, st.outbox.len.data(), &runs);
  size_t c = 0;
  for (const Run &r : runs) {
    const int64_t len = (int64_t)(r.bytes / esize);
    reduce_run(mem, p.dt, st, src_of, c, reinterpret_cast<char *>((uintptr_t)r.addr), len, acc);
    c += (size_t)len;
  }
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

char *GroupExec::at(const GroupWhere &w) const {
  const void *b = nullptr;
  switch (w.kind) {
    case GroupWhere::kIn: b = in_[w.e]; break;
    case GroupWhere::kOut: b = out_[w.e]; break;
    case GroupWhere::kWork: b = work_[w.e][w.k]; break;
    case GroupWhere::kStage: b = stage_; break;
  }
  return b ? const_cast<char *>(static_cast<const char *>(b)) + w.off : nullptr;
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

// Whether peer message m moves straight between the entries' buffers (Transport::parts_direct;
// the same answer on both sides) and, if so, its runs in runs_: the precomputed ones placed at
// this execution's buffers.
bool GroupExec::direct_parts(GroupPeerMsg &m, bool send) {
  if (!route_.wire->parts_direct(m.payload, m.rows, m.peer)) return false;
  if (m.where.empty()) {  // the first time: the runs relative to their buffers
    const GroupRound &R = buckets_[b_]->rounds[r_];
    flatten(plans_, r_, m, send, R.scratch + R.send_bytes);
  }
  runs_.clear();
  size_t k = 0;
  for (size_t i = 0; i < m.where.size(); ++i) {
    const uint64_t base = (uint64_t)(uintptr_t)at(m.where[i]);
    for (; k < m.rel_end[i]; ++k) append_run(runs_, base + m.rel[k].addr, m.rel[k].bytes);
  }
  return true;
}

void GroupExec::start_round() {
  GroupRound &R = buckets_[b_]->rounds[r_];
  Transport &tp = *route_.wire;
  MemOps &mem = *route_.mem;
  char *sreg = stage_ + R.scratch, *rreg = sreg + R.send_bytes;
  for (const GroupFill &f : R.fills) fill_partial(mem, *f.st, f.dt, at(f.out), out_runs_);
  const int tag = kGroupTagBase + (int)r_;
  direct_.assign(R.recvs.size(), 0);
  recv_t_.assign(R.recvs.size(), 0);
  reduced_ = R.rs.empty();
  for (size_t k = 0; k < R.recvs.size(); ++k) {
    GroupPeerMsg &m = R.recvs[k];
    if (!direct_parts(m, false)) {
      recv_t_[k] = tp.post_recv(rreg + m.off, m.bytes, m.peer, tag);
      continue;
    }
    const PartsRef pr{runs_.data(), runs_.size(), m.payload};
    // Reduce-scatter chunks are only read: held, the reduction reads them where the sender keeps
    // them (no copy into the receive region first).
    direct_[k] = m.chunks_only && tp.parts_holds() ? 2 : 1;
    recv_t_[k] = direct_[k] == 2 ? tp.post_recv_parts_held(pr, m.peer, tag)
                                 : tp.post_recv_parts(pr, m.peer, tag);
  }
  int64_t zero[kBoxMaxDims] = {0};
  for (auto &m : R.sends) {
    if (direct_parts(m, true)) {
      tp.post_send_parts(PartsRef{runs_.data(), runs_.size(), m.payload}, m.peer, tag,
                         sreg + m.off, m.room);
      continue;
    }
    for (const auto &q : m.parts) {
      const GroupPartBox p = part_box(*plans_[q.e], r_, q, true);
      BoxCopy c;
      boxcopy_init(c, p.box.ndim, p.box.len, p.box.shape, p.box.off, p.box.len, zero,
                   (int64_t)p.box.esize);
      mem.copy(c, sreg + m.off + q.off, at(p.at), 0, c.numel);
    }
    tp.post_send(sreg + m.off, m.bytes, m.peer, tag);
  }
  tp.flush();
  for (const GroupSelf &c : R.selfs) {
    if (c.n >= 0)
      mem.copy_1d(at(c.out), at(c.in), c.n, c.esize);
    else
      copy_selfs(mem, *plans_[c.e]->steps[r_], at(c.in), at(c.out));
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
      const GroupPartBox p = part_box(*plans_[q.e], r_, q, false);
      BoxCopy c;
      boxcopy_init(c, p.box.ndim, p.box.len, p.box.len, zero, p.box.shape, p.box.off,
                   (int64_t)p.box.esize);
      mem.copy(c, at(p.at), rreg + m.off + q.off, 0, c.numel);
    }
  }
  route_.wire->reset();
}

// Whether every receive of the round can be read (held ones not yet released): the reductions
// need no more. Never waits on this rank's sends (a peer may hold them until it has reduced).
bool GroupExec::receives_readable(bool block) {
  Transport &tp = *route_.wire;
  for (size_t k = 0; k < recv_t_.size(); ++k)
    if (!(direct_[k] == 2 ? tp.parts_readable(recv_t_[k], block) : tp.done(recv_t_[k], block)))
      return false;
  return true;
}

// Where held receive k's parts can be read: inside one run of its view, or (spanning runs)
// gathered into the receive region.
void GroupExec::held_sources(const GroupPeerMsg &m, size_t k, char *rreg) {
  const std::vector<Run> &v = route_.wire->parts_view(recv_t_[k]);
  std::vector<const char *> &src = held_src_[k];
  src.assign(m.parts.size(), nullptr);
  size_t vi = 0;
  uint64_t vo = 0;  // where v[vi] starts among the message's bytes
  for (size_t i = 0; i < m.parts.size(); ++i) {
    const uint64_t o = m.pos[i], b = m.parts[i].bytes;
    while (vi < v.size() && vo + v[vi].bytes <= o) vo += v[vi++].bytes;
    if (vi < v.size() && o + b <= vo + v[vi].bytes) {
      src[i] = (const char *)(uintptr_t)v[vi].addr + (o - vo);
      continue;
    }
    char *to = rreg + m.off + m.parts[i].off;
    src[i] = to;
    for (uint64_t got = 0, j = vi, jo = vo; got < b; ++j) {  // the runs it spans, in order
      const uint64_t from = o + got - jo, k2 = std::min(v[j].bytes - from, b - got);
      std::memcpy(to + got, (const char *)(uintptr_t)v[j].addr + from, (size_t)k2);
      got += k2;
      jo += v[j].bytes;
    }
  }
}

// The round's reductions, from the receive region or where held receives lie, then the held
// receives released (their senders may go on).
void GroupExec::reduce_round() {
  const GroupRound &R = buckets_[b_]->rounds[r_];
  char *rreg = stage_ + R.scratch + R.send_bytes;
  held_src_.resize(R.recvs.size());
  for (size_t k = 0; k < R.recvs.size(); ++k)
    if (direct_[k] == 2) held_sources(R.recvs[k], k, rreg);
  for (const auto &q : R.rs) {
    if (q.n == 0) continue;  // (nothing received for it either)
    src_.assign(q.from.size(), nullptr);
    for (size_t j = 0; j < q.from.size(); ++j) {
      if ((int64_t)j == q.st->mine) continue;
      const size_t k = q.from[j].first, i = q.from[j].second;
      src_[j] = direct_[k] == 2 ? held_src_[k][i] : rreg + R.recvs[k].off + R.recvs[k].parts[i].off;
    }
    reduce_chunk(*route_.mem, *plans_[q.e], q, at(q.in), at(q.out), src_.data(), stage_,
                 out_runs_);
  }
  for (size_t k = 0; k < R.recvs.size(); ++k)
    if (direct_[k] == 2) route_.wire->parts_release(recv_t_[k]);
}

bool GroupExec::bucket_progress(bool block) {
  GroupBucket &b = *buckets_[b_];
  if (b.alone) return plans_[b.first]->progress(block);
  while (r_ < b.rounds.size()) {
    if (!reduced_) {
      if (!receives_readable(block)) return false;
      reduce_round();
      reduced_ = true;
    }
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
