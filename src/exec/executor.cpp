// SPDX-License-Identifier: BSD-3-Clause
// The reshard executor: walks a plan's schedule (schedule.hpp) through a Transport
// (transport/transport.hpp) without knowing which one it is.
//
// Messages. Every message (one box per ordered pair of ranks and step) is cut into sub-boxes of
// at most `seg` bytes (boxcopy.hpp's split); sender and receiver derive `seg` from the same global
// quantities (LM_STAGING_BYTES, the group size, the dtype), so both post the same sequence of
// messages. A message is moved in place (contiguous in its local buffer, or a box the transport
// moves directly) or staged; one message is never mixed, so its pieces stay in order.
//
// Staging and memory. Staged pieces go through one staging buffer per step, taken from the
// transport at the step's start and given back when it completes, never zero-filled, of at most
// staging_bytes() (when everything fits, exactly what is needed). When it does not fit, pieces
// are pipelined through a ring: posted in key order (schedule.hpp), the oldest freed first, so
// the globally smallest pending piece is always posted on both sides and the exchange cannot
// deadlock. Reduce-scatters receive segment by segment into two segment buffers (the next
// segment's messages arrive while this one is reduced, in group order).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "common/error.hpp"
#include "common/settings.hpp"
#include "exec/plan.hpp"
#include "layout/permute.hpp"

namespace lm {

namespace {
// The staging budget of a step on transport tp: LM_STAGING_BYTES, or, where the transport needs
// each step posted in one batch (bounded_staging() false), large enough that nothing is pipelined.
size_t step_staging(const Transport &tp) {
  return tp.bounded_staging() ? staging_bytes() : size_t(1) << 60;
}
}  // namespace

size_t staging_bytes() { return (size_t)setting_u(Setting::StagingBytes); }

namespace {

using Ticket = Transport::Ticket;

// A FIFO ring over one region of the staging buffer: pieces are allocated in order and freed
// oldest first. Every piece is at most the region's size, so an empty ring always has room.
struct Ring {
  char *base = nullptr;
  size_t size = 0;
  struct Entry {
    size_t off, bytes;
    Ticket t;
    size_t msg;
    int64_t sub;
  };
  // The pieces in flight, oldest first: a vector used as a FIFO (entries before `head` are
  // retired), so that a step reuses its storage from one execution to the next instead of
  // allocating (a std::deque allocates its blocks afresh).
  struct Fifo {
    std::vector<Entry> v;
    size_t head = 0;
    bool empty() const { return head == v.size(); }
    const Entry &front() const { return v[head]; }
    const Entry &back() const { return v.back(); }
    void push_back(const Entry &e) { v.push_back(e); }
    void pop_front() {
      if (++head == v.size()) clear();
    }
    void clear() {
      v.clear();
      head = 0;
    }
  } fifo;
  void reset(char *b, size_t n) {
    base = b;
    size = n;
    fifo.clear();
  }
  bool alloc(size_t bytes, size_t *off) {
    if (fifo.empty()) {
      *off = 0;
      return bytes <= size;
    }
    size_t head = fifo.front().off, tail = fifo.back().off + fifo.back().bytes;
    if (tail > head) {  // not wrapped (tail == head: full)
      if (tail + bytes <= size) {
        *off = tail;
        return true;
      }
      if (bytes <= head) {
        *off = 0;
        return true;
      }
      return false;
    }
    if (tail + bytes <= head) {
      *off = tail;
      return true;
    }
    return false;
  }
};

// The sub-box `sub` of message box `len` under split sp, in the local buffer (rel + offset).
struct SubBox {
  int n = 0;
  int64_t off[kBoxMaxDims], len[kBoxMaxDims];
  int64_t e0 = 0, e1 = 0;
  size_t bytes = 0;
};

void sub_box(const BoxSplit &sp, const Shape &len, const Shape &rel, int64_t sub, size_t esize,
             SubBox &o) {
  o.n = (int)len.size();
  int64_t so[kBoxMaxDims];
  boxsplit_get(sp, o.n, len.data(), sub, so, o.len, &o.e0, &o.e1);
  for (int i = 0; i < o.n; ++i) o.off[i] = rel[i] + so[i];
  o.bytes = (size_t)(o.e1 - o.e0) * esize;
}

BoxRef box_ref(const Shape &shape, const SubBox &s, size_t esize, int64_t id) {
  BoxRef r;
  r.ndim = s.n;
  r.shape = shape.data();
  r.off = s.off;
  r.len = s.len;
  r.esize = esize;
  r.id = id;
  return r;
}

// Copy between a local buffer (shape, sub-box at s.off) and a compact buffer of the sub-box.
BoxCopy pack_copy(const Shape &shape, const SubBox &s, size_t esize) {
  int64_t zero[kBoxMaxDims] = {0};
  BoxCopy c;
  boxcopy_init(c, s.n, s.len, shape.data(), s.off, s.len, zero, (int64_t)esize);
  return c;
}
BoxCopy unpack_copy(const Shape &shape, const SubBox &s, size_t esize) {
  int64_t zero[kBoxMaxDims] = {0};
  BoxCopy c;
  boxcopy_init(c, s.n, s.len, s.len, zero, shape.data(), s.off, (int64_t)esize);
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The staging buffer of a plan's execution: one, shared by its steps (they run one after the
// other), so that a plan never holds more than one staging buffer, also when it keeps it from one
// execution to the next (LM_PLAN_KEEP_BUFFERS).
struct Staging {
  char *p = nullptr;
  size_t cap = 0, bytes = 0;
};

// One step's execution state.
class StepRun {
 public:
  StepRun(const SchedStep &st, size_t index, Transport &tp, MemOps &mem, DType dt, Staging &stage)
      : st_(st), index_(index), tp_(tp), mem_(mem), dt_(dt), esize_(st.esize), stage_(stage) {}
  virtual ~StepRun() = default;
  virtual void start(const void *in, void *out) = 0;
  // true when complete; block: wait instead of test.
  virtual bool progress(bool block) = 0;
  // Gives staging back (also on failure) unless the plan keeps it.
  void release() {
    if (stage_.p && !keep_) {
      mem_.staging_give(stage_.p, stage_.cap, stage_.bytes);
      stage_ = Staging{};
    }
  }
  void drop_kept() {
    keep_ = false;
    release();
  }
  bool keep_ = false;

 protected:
  char *take_stage(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (stage_.p && stage_.bytes >= bytes) return stage_.p;  // kept, or an earlier step's
    if (stage_.p) {  // too small: given back before the larger one is taken
      mem_.staging_give(stage_.p, stage_.cap, stage_.bytes);
      stage_ = Staging{};
    }
    stage_.p = static_cast<char *>(mem_.staging_take(bytes, &stage_.cap));
    stage_.bytes = bytes;
    return stage_.p;
  }
  // With a strided output (st_.out_str): the box of extents len, from `src` (row-major, extents
  // src_shape, the box at src_off) to its place out_off in the output.
  void copy_to_strided(char *out, int n, const int64_t *len, const int64_t *out_off,
                       const char *src, const int64_t *src_shape, const int64_t *src_off) const {
    int64_t sstr[kBoxMaxDims], s = 1, sb = 0, db = 0;
    for (int i = n - 1; i >= 0; --i) {
      sstr[i] = s;
      sb += src_off[i] * s;
      s *= src_shape[i];
      db += out_off[i] * st_.out_str[(size_t)i];
    }
    strided_out(out + db * (int64_t)esize_, st_.out_str.data(), src + sb * (int64_t)esize_, sstr, len, n);
  }
  void strided_out(char *dst, const int64_t *dstr, const char *src, const int64_t *sstr,
                   const int64_t *len, int n) const {
    const bool stream = (size_t)st_.outbox.numel() * esize_ >= kPermuteStreamBytes;
    if (!strided_copy(dst, dstr, src, sstr, len, n, esize_, stream))
      fail(LM_ERR_INTERNAL, "no strided copy of %zu-byte elements in %d dims", esize_, n);
  }
  const SchedStep &st_;
  size_t index_;
  Transport &tp_;  // the wire
  MemOps &mem_;    // copies, reductions, staging
  DType dt_;
  size_t esize_;
  Staging &stage_;
};

// ---------------------------------------------------------------------------------------------
class ExchangeRun : public StepRun {
 public:
  using StepRun::StepRun;

  void start(const void *in, void *out) override {
    in_ = static_cast<const char *>(in);
    out_ = static_cast<char *>(out);
    const size_t S = step_staging(tp_);
    direct_.clear();
    dcur_ = 0;
    if (!prepared_) {  // the same at every execution: the plan, the settings and the transport
      seg_ = std::max(S / 2 / esize_, size_t(1)) * esize_;
      prepare(st_.sends, st_.in_ext(), sinfo_, &ts_, false, true);
      prepare(st_.recvs, st_.out_ext(), rinfo_, &tr_, !st_.out_str.empty(), false);
      prepared_ = true;
    }
    fit_ = ts_ + tr_ <= S;
    if (fit_) return start_fit();
    // Staging: S split between the two directions (each region holds at least one piece,
    // <= seg_ <= S / 2), pieces pipelined through two rings.
    const size_t rs = std::min(ts_, std::max(tr_ ? S / 2 : S, seg_));
    const size_t rr = std::min(tr_, std::max(ts_ ? S - S / 2 : S, seg_));
    char *stage = take_stage(rs + rr);
    sring_.reset(stage, rs);
    rring_.reset(stage ? stage + rs : nullptr, rr);
    sq_ = rq_ = Cursor{};
    // Receives first, then sends, then the local copies; everything that fits is posted before
    // the one flush() (a transport that batches, NCCL, gets the step's posts as one batch).
    post_direct(st_.recvs, st_.out_ext(), rinfo_, false, out_);
    pump(true);
    post_direct(st_.sends, st_.in_ext(), sinfo_, true, const_cast<char *>(in_));
    pump(true);
    tp_.flush();
    copy_selfs();
  }

  bool progress(bool block) override {
    if (fit_) return progress_fit(block);
    for (;;) {
      bool staged_left = !(sq_.done(sinfo_) && rq_.done(rinfo_) && sring_.fifo.empty() &&
                           rring_.fifo.empty());
      if (staged_left) {
        pump();
        staged_left = !(sq_.done(sinfo_) && rq_.done(rinfo_) && sring_.fifo.empty() &&
                        rring_.fifo.empty());
      }
      if (!staged_left) {
        while (dcur_ < direct_.size()) {
          if (!tp_.done(direct_[dcur_], block)) return false;
          ++dcur_;
        }
        tp_.reset();
        release();
        return true;
      }
      if (!block) return false;
    }
  }

 private:
  struct Info {
    bool staged = false;
    BoxSplit split;
  };

  void copy_selfs() {
    if (st_.skip_self) return;
    int64_t n = (int64_t)st_.inbox.len.size();
    for (auto &b : st_.selfs) {
      if (!st_.out_str.empty()) {
        copy_to_strided(out_, (int)n, b.box.len.data(), b.out_rel.data(), in_, st_.in_ext().data(),
                        b.in_rel.data());
        continue;
      }
      BoxCopy c;
      boxcopy_init(c, (int)n, b.box.len.data(), st_.in_ext().data(), b.in_rel.data(),
                   st_.out_ext().data(), b.out_rel.data(), (int64_t)esize_);
      mem_.copy(c, out_, in_, 0, c.numel);
    }
  }

  // Everything fits in the step's staging (the common case below LM_STAGING_BYTES): one staging
  // buffer, sends' pieces then receives', each at a fixed offset; every message posted at the
  // start (receives first) and no ring bookkeeping. Completion is tested or waited for all at
  // once (Transport::done_from), then the staged receives are unpacked.
  void start_fit() {
    char *stage = take_stage(ts_ + tr_);
    unpack_.clear();
    // A peer's message is all direct or all staged (one message per peer and step), so posting
    // the direct ones first keeps every pair's order.
    post_direct(st_.recvs, st_.out_ext(), rinfo_, false, out_);
    post_staged_fit(false, st_.recvs, st_.out_ext(), rinfo_, out_, stage + ts_);
    post_direct(st_.sends, st_.in_ext(), sinfo_, true, const_cast<char *>(in_));
    post_staged_fit(true, st_.sends, st_.in_ext(), sinfo_, const_cast<char *>(in_), stage);
    tp_.flush();
    copy_selfs();
  }
  // The staged pieces, each in its own slot of `region` (sends: packed before posting).
  void post_staged_fit(bool send, const std::vector<Msg> &msgs, const Shape &local,
                       const std::vector<Info> &info, char *buf, char *region) {
    SubBox s;
    size_t off = 0;
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (!info[i].staged) continue;
      const Msg &m = msgs[i];
      for (int64_t k = 0; k < info[i].split.count; ++k, off += s.bytes) {
        sub_box(info[i].split, m.box.len, m.rel, k, esize_, s);
        char *slot = region + off;
        if (send) {
          BoxCopy c = pack_copy(local, s, esize_);
          mem_.copy(c, slot, buf, 0, c.numel);
          direct_.push_back(tp_.post_send(slot, s.bytes, m.peer, st_.tag));
        } else {
          direct_.push_back(tp_.post_recv(slot, s.bytes, m.peer, st_.tag));
          unpack_.push_back(Unpack{i, k, slot});
        }
      }
    }
  }
  bool progress_fit(bool block) {
    // Every ticket of this step was posted at its start, from direct_[0] on (all in direct_).
    if (!direct_.empty() && !tp_.done_from(direct_[0], block)) return false;
    for (const Unpack &x : unpack_) {
      const Msg &m = st_.recvs[x.msg];
      SubBox s;
      sub_box(rinfo_[x.msg].split, m.box.len, m.rel, x.sub, esize_, s);
      unpack(s, x.slot);
    }
    tp_.reset();
    release();
    return true;
  }
  // A received sub-box from its staging slot into the output.
  void unpack(const SubBox &s, const char *slot) {
    if (!st_.out_str.empty()) {
      const int64_t zero[kBoxMaxDims] = {0};
      return copy_to_strided(out_, s.n, s.len, s.off, slot, s.len, zero);
    }
    BoxCopy c = unpack_copy(st_.out_ext(), s, esize_);
    mem_.copy(c, out_, slot, 0, c.numel);
  }
  struct Cursor {
    size_t msg = 0;
    int64_t sub = 0;
    bool done(const std::vector<Info> &info) const { return msg >= info.size(); }
  };

  // all_staged: every message through staging (a strided output: nothing lands in place).
  void prepare(const std::vector<Msg> &msgs, const Shape &local, std::vector<Info> &info,
               size_t *staged_bytes, bool all_staged, bool send) {
    info.resize(msgs.size());
    *staged_bytes = 0;
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Msg &m = msgs[i];
      Info &f = info[i];
      boxsplit_init(f.split, (int)m.box.len.size(), m.box.len.data(), (int64_t)esize_,
                    (int64_t)seg_);
      f.staged = false;
      if (f.split.count == 0) continue;
      if (all_staged) {
        f.staged = true;
        *staged_bytes += m.bytes;
        continue;
      }
      if (m.contiguous) continue;
      SubBox s;
      sub_box(f.split, m.box.len, m.rel, 0, esize_, s);
      f.staged = !tp_.box_direct(box_ref(local, s, esize_, -1), send);
      if (f.staged) *staged_bytes += m.bytes;
    }
  }

  int64_t box_id(bool send, size_t msg) const {
    return ((int64_t)index_ << 40) | ((int64_t)send << 39) | (int64_t)msg;
  }

  void post_direct(const std::vector<Msg> &msgs, const Shape &local, std::vector<Info> &info,
                   bool send, char *buf) {
    SubBox s;
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Msg &m = msgs[i];
      const Info &f = info[i];
      if (f.staged) continue;
      for (int64_t k = 0; k < f.split.count; ++k) {
        sub_box(f.split, m.box.len, m.rel, k, esize_, s);
        Ticket t;
        if (m.contiguous) {
          char *p = buf + m.off + (size_t)s.e0 * esize_;
          t = send ? tp_.post_send(p, s.bytes, m.peer, st_.tag)
                   : tp_.post_recv(p, s.bytes, m.peer, st_.tag);
        } else {
          BoxRef r = box_ref(local, s, esize_, f.split.count == 1 ? box_id(send, i) : -1);
          t = send ? tp_.post_send_box(buf, r, m.peer, st_.tag)
                   : tp_.post_recv_box(buf, r, m.peer, st_.tag);
        }
        direct_.push_back(t);
      }
    }
  }

  // Retires completed staged pieces (oldest first) and posts queued ones while there is room.
  // posting_only (the step's start): posts what fits, retires nothing and does not flush, so
  // that the start's posts reach the transport as one batch.
  void pump(bool posting_only = false) {
    SubBox s;
    bool moved = true;
    while (moved) {
      moved = false;
      // Post only, at the start.
      if (posting_only) {
        if (post_next(false, st_.recvs, rinfo_, rq_, rring_)) moved = true;
        if (post_next(true, st_.sends, sinfo_, sq_, sring_)) moved = true;
        continue;
      }
      // Retire.
      while (!rring_.fifo.empty() && tp_.done(rring_.fifo.front().t, false)) {
        auto e = rring_.fifo.front();
        const Msg &m = st_.recvs[e.msg];
        sub_box(rinfo_[e.msg].split, m.box.len, m.rel, e.sub, esize_, s);
        unpack(s, rring_.base + e.off);
        rring_.fifo.pop_front();
        moved = true;
      }
      while (!sring_.fifo.empty() && tp_.done(sring_.fifo.front().t, false)) {
        sring_.fifo.pop_front();
        moved = true;
      }
      // Post.
      if (post_next(false, st_.recvs, rinfo_, rq_, rring_)) moved = true;
      if (post_next(true, st_.sends, sinfo_, sq_, sring_)) moved = true;
      if (moved) tp_.flush();
    }
  }

  bool post_next(bool send, const std::vector<Msg> &msgs, const std::vector<Info> &info,
                 Cursor &q, Ring &ring) {
    bool posted = false;
    SubBox s;
    for (;;) {
      while (q.msg < msgs.size() && (!info[q.msg].staged || q.sub >= info[q.msg].split.count)) {
        ++q.msg;
        q.sub = 0;
      }
      if (q.msg >= msgs.size()) return posted;
      const Msg &m = msgs[q.msg];
      sub_box(info[q.msg].split, m.box.len, m.rel, q.sub, esize_, s);
      size_t off;
      if (!ring.alloc(s.bytes, &off)) return posted;
      char *slot = ring.base + off;
      Ticket t;
      if (send) {
        BoxCopy c = pack_copy(st_.in_ext(), s, esize_);
        mem_.copy(c, slot, in_, 0, c.numel);
        t = tp_.post_send(slot, s.bytes, m.peer, st_.tag);
      } else {
        t = tp_.post_recv(slot, s.bytes, m.peer, st_.tag);
      }
      ring.fifo.push_back(Ring::Entry{off, s.bytes, t, q.msg, q.sub});
      ++q.sub;
      posted = true;
    }
  }

  const char *in_ = nullptr;
  char *out_ = nullptr;
  size_t seg_ = 0, ts_ = 0, tr_ = 0;
  std::vector<Info> sinfo_, rinfo_;
  std::vector<Ticket> direct_;
  size_t dcur_ = 0;
  bool prepared_ = false, fit_ = false;
  struct Unpack {  // a staged receive of the fitting path
    size_t msg;
    int64_t sub;
    const char *slot;  // where it lands in the staging buffer
  };
  std::vector<Unpack> unpack_;
  Ring sring_, rring_;
  Cursor sq_, rq_;
};

// ---------------------------------------------------------------------------------------------
// Pairwise reduce-scatter with the reduction fused as segments arrive, in group order. A
// segment is a contiguous range of the compact output, or, padded (out_pad), the rows it covers
// there: every reduction runs row by row of it (runs_), the padding between rows never touched.
class ReduceScatterRun : public StepRun {
 public:
  using StepRun::StepRun;

  void start(const void *in, void *out) override {
    in_ = static_cast<const char *>(in);
    out_ = static_cast<char *>(out);
    finished_ = !st_.member;
    if (finished_) return;
    pad_ = !st_.out_pad.empty();
    const size_t S = step_staging(tp_);
    const size_t budget = st_.chunks_contiguous ? S : S / 2;
    size_t recv_part = size_segments(budget);
    size_t rs = std::min(find_staged_sends(), std::max(S - std::min(S, budget), seg_bytes_));
    char *stage = take_stage(recv_part + rs);
    acc_ = stage;  // first: the staging buffer is 64-byte aligned, as __int128 lanes need
    bufs_ = stage ? stage + acc_bytes_ : nullptr;
    sring_.reset(stage ? stage + recv_part : nullptr, rs);
    sq_ = 0;
    sqs_ = 0;
    // Receives of the first segments, then the direct sends, then staged sends as they fit.
    rt_.assign((size_t)(2 * st_.k), -1);
    for (int64_t s = 0; s < nbufs_; ++s) post_segment(s);
    post_direct_sends();
    pump_sends();
    tp_.flush();
    seg_ = 0;
    jj_ = 0;
  }

  bool progress(bool block) override {
    if (finished_) return true;
    for (;;) {
      bool staged_left = sends_staged_left();
      if (staged_left) pump_sends();
      bool reduced = advance(block && !sends_staged_left());
      if (reduced && !sends_staged_left()) break;  // staged sends may still be queued
      if (!block) return false;
    }
    while (scur_ < send_t_.size()) {
      if (!tp_.done(send_t_[scur_], block)) return false;
      ++scur_;
    }
    tp_.reset();
    release();
    finished_ = true;
    return true;
  }

 private:
  // Segments: the same size on every member (staging, k, dtype, contiguity are the same for
  // all), the splits of every chunk, the slots of the two segment buffers. Returns the bytes of
  // the receiving part of the staging (segment buffers and the integer-avg accumulator).
  size_t size_segments(size_t budget) {
    const int64_t k = st_.k, mine = st_.mine;
    zero_.assign(st_.outbox.len.size(), 0);
    size_t per_el = (size_t)(k - 1) * esize_ * 2 + (st_.wide ? 16 : 0);
    size_t E = std::max(budget / std::max(per_el, size_t(1)), size_t(1));
    seg_bytes_ = E * esize_;
    splits_.resize((size_t)k);
    for (int64_t j = 0; j < k; ++j)
      boxsplit_init(splits_[j], (int)st_.chunks[j].len.size(), st_.chunks[j].len.data(),
                    (int64_t)esize_, (int64_t)seg_bytes_);
    const BoxSplit &my = splits_[mine];
    nseg_ = my.count;
    // Slots per segment buffer: one per contribution that does not land in the output directly.
    // Into a padded output, contribution 0 lands there only where the transport receives each
    // segment's box in place (the compact case receives its range); else it shares the own
    // chunk's slot where there is one (copied into the output at j = 0 before the own chunk is
    // packed there at j = mine), so that no more than k - 1 slots are taken, as per_el assumed.
    slot_of_.assign((size_t)k, -1);
    direct0_ = mine != 0 && (!pad_ || segments_direct(my));
    const bool own_slot = mine != 0 && !st_.chunks_in_one_run();
    int64_t ns = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (j == mine ? own_slot : j != 0 || (!direct0_ && !own_slot)) slot_of_[j] = ns++;
    }
    if (mine != 0 && !direct0_ && own_slot) slot_of_[0] = slot_of_[mine];
    nbufs_ = std::min<int64_t>(2, nseg_);
    // A slot holds one piece of my chunk: the first (largest) sub-box, at most seg_bytes_.
    const size_t piece = my.count ? (size_t)(my.step * my.inner) : 0;
    slot_bytes_ = piece * esize_;
    segbuf_ = (size_t)ns * slot_bytes_;
    acc_bytes_ = st_.wide ? piece * 16 : 0;
    return (size_t)nbufs_ * segbuf_ + acc_bytes_;
  }

  // The id of my chunk's box in the padded output (one segment: every contribution's receive of
  // it, at every execution), beside the sends' ids (index_ << 40 | j).
  int64_t recv_box_id() const { return ((int64_t)index_ << 40) | ((int64_t)1 << 39); }

  // Whether the transport receives every segment of my chunk in place in the padded output: the
  // first and the last sub-box of a row of segments (the split's two shapes).
  bool segments_direct(const BoxSplit &my) const {
    if (my.count == 0) return true;
    for (int64_t q : {int64_t(0), my.per - 1}) {
      SubBox sb;
      sub_box(my, st_.outbox.len, zero_, q, esize_, sb);
      if (!tp_.box_direct(box_ref(st_.out_pad, sb, esize_, -1), false)) return false;
    }
    return true;
  }

  // Staged sends: non-contiguous chunks the transport cannot move in place. Returns their bytes.
  size_t find_staged_sends() {
    staged_.assign((size_t)st_.k, false);
    max_count_ = 0;
    size_t ts = 0;
    if (st_.chunks_in_one_run()) return 0;
    for (int64_t j : st_.order) {
      if (splits_[j].count == 0) continue;
      SubBox s;
      sub_box(splits_[j], st_.chunks[j].len, st_.chunk_rel[j], 0, esize_, s);
      staged_[j] = !tp_.box_direct(box_ref(st_.in_ext(), s, esize_, -1), true);
      if (staged_[j]) {
        ts += (size_t)st_.chunks[j].numel() * esize_;
        max_count_ = std::max(max_count_, splits_[j].count);
      }
    }
    return ts;
  }

  // The sends that move in place: contiguous chunks, or boxes the transport moves directly.
  void post_direct_sends() {
    send_t_.clear();
    scur_ = 0;
    SubBox sb;
    for (int64_t j : st_.order) {
      if (staged_[j]) continue;
      const Box &c = st_.chunks[j];
      size_t coff = 0;
      bool contig = box_is_contiguous_at(st_.inbox, st_.in_ext(), c, esize_, &coff);
      for (int64_t q = 0; q < splits_[j].count; ++q) {
        sub_box(splits_[j], c.len, st_.chunk_rel[j], q, esize_, sb);
        if (contig) {
          send_t_.push_back(tp_.post_send(in_ + coff + (size_t)sb.e0 * esize_, sb.bytes,
                                          st_.peers[j], st_.tag));
        } else {
          BoxRef r = box_ref(st_.in_ext(), sb, esize_,
                             splits_[j].count == 1 ? ((int64_t)index_ << 40 | j) : -1);
          send_t_.push_back(tp_.post_send_box(in_, r, st_.peers[j], st_.tag));
        }
      }
    }
  }

  bool sends_staged_left() {
    int64_t j;
    return sring_.size && (!sring_.fifo.empty() || next_staged(&j));
  }

  char *slot(int64_t s, int64_t j) const {
    return bufs_ + (size_t)(s % 2) * segbuf_ + (size_t)slot_of_[j] * slot_bytes_;
  }

  void post_segment(int64_t s) {
    const int64_t k = st_.k, mine = st_.mine;
    SubBox sb;
    sub_box(splits_[mine], st_.outbox.len, zero_, s, esize_, sb);
    for (int64_t j = 0; j < k; ++j) {
      if (j == mine) continue;
      Ticket &t = rt_[(size_t)((s % 2) * k + j)];
      if (slot_of_[j] >= 0)
        t = tp_.post_recv(slot(s, j), sb.bytes, st_.peers[j], st_.tag);
      else if (!pad_)
        t = tp_.post_recv(out_ + (size_t)sb.e0 * esize_, sb.bytes, st_.peers[j], st_.tag);
      else  // (one segment: the same box at every execution, its datatype kept)
        t = tp_.post_recv_box(out_, box_ref(st_.out_pad, sb, esize_, nseg_ == 1 ? recv_box_id() : -1),
                              st_.peers[j], st_.tag);
    }
  }

  // Contribution j of the segment into its output runs: src compact (element c of the segment
  // at src + c), or NULL where it already lies in the output.
  void combine(int64_t j, const char *src) {
    size_t c = 0;
    for (const Run &r : runs_) {
      char *o = reinterpret_cast<char *>((uintptr_t)r.addr);
      const int64_t n = (int64_t)(r.bytes / esize_);
      const char *x = src ? src + c * esize_ : o;
      if (st_.wide)
        mem_.wide_accumulate(dt_, static_cast<char *>(acc_) + c * 16, x, n, j == 0);
      else if (j == 0 && src)
        mem_.copy_1d(o, x, n, esize_);
      else if (j != 0)
        mem_.reduce(dt_, st_.op, o, x, n);
      c += (size_t)n;
    }
  }
  // The segment's last pass: the average's division (from the 128-bit sums when wide).
  void finish_segment() {
    if (!st_.wide && st_.divide_by <= 1) return;
    size_t c = 0;
    for (const Run &r : runs_) {
      char *o = reinterpret_cast<char *>((uintptr_t)r.addr);
      const int64_t n = (int64_t)(r.bytes / esize_);
      if (st_.wide)
        mem_.wide_finish_avg(dt_, o, static_cast<const char *>(acc_) + c * 16, n, st_.divide_by);
      else
        mem_.scale_avg(dt_, o, n, st_.divide_by);
      c += (size_t)n;
    }
  }

  // Reduces segments in order as their contributions arrive; true when all are reduced.
  bool advance(bool block) {
    const int64_t k = st_.k, mine = st_.mine;
    SubBox sb;
    while (seg_ < nseg_) {
      sub_box(splits_[mine], st_.outbox.len, zero_, seg_, esize_, sb);
      if (jj_ == 0) st_.out_runs((uint64_t)(uintptr_t)out_, sb.off, sb.len, &runs_);
      while (jj_ < k) {
        const int64_t j = jj_;
        const char *src;
        if (j != mine) {
          if (!tp_.done(rt_[(size_t)((seg_ % 2) * k + j)], block)) return false;
          src = slot_of_[j] < 0 ? nullptr : slot(seg_, j);
        } else {
          // My own contribution: straight from the input when contiguous, else through a slot
          // (or into the output when it comes first).
          SubBox ob;
          sub_box(splits_[mine], st_.chunks[mine].len, st_.chunk_rel[mine], seg_, esize_, ob);
          if (j == 0) {
            BoxCopy c;
            boxcopy_init(c, ob.n, ob.len, st_.in_ext().data(), ob.off, st_.out_ext().data(),
                         sb.off, (int64_t)esize_);
            mem_.copy(c, out_, in_, 0, c.numel);
            src = nullptr;
          } else if (slot_of_[j] >= 0) {
            BoxCopy c = pack_copy(st_.in_ext(), ob, esize_);
            mem_.copy(c, slot(seg_, j), in_, 0, c.numel);
            src = slot(seg_, j);
          } else {
            size_t coff = 0;
            box_is_contiguous_at(st_.inbox, st_.in_ext(), st_.chunks[mine], esize_, &coff);
            src = in_ + coff + (size_t)sb.e0 * esize_;
          }
        }
        combine(j, src);
        ++jj_;
      }
      finish_segment();
      if (seg_ + 2 < nseg_) {
        post_segment(seg_ + 2);
        tp_.flush();
      }
      ++seg_;
      jj_ = 0;
    }
    return true;
  }

  // The next staged send in (segment, key) order, or false when none is left.
  bool next_staged(int64_t *j) {
    while (sqs_ < max_count_) {
      while (sq_ < (int64_t)st_.order.size()) {
        *j = st_.order[(size_t)sq_];
        if (staged_[*j] && sqs_ < splits_[*j].count) return true;
        ++sq_;
      }
      sq_ = 0;
      ++sqs_;
    }
    return false;
  }

  // Staged sends in (segment, key) order through the send ring.
  void pump_sends() {
    if (!sring_.size) return;
    SubBox sb;
    bool moved = true;
    while (moved) {
      moved = false;
      while (!sring_.fifo.empty() && tp_.done(sring_.fifo.front().t, false)) {
        sring_.fifo.pop_front();
        moved = true;
      }
      int64_t j;
      while (next_staged(&j)) {
        sub_box(splits_[j], st_.chunks[j].len, st_.chunk_rel[j], sqs_, esize_, sb);
        size_t off;
        if (!sring_.alloc(sb.bytes, &off)) break;
        BoxCopy c = pack_copy(st_.in_ext(), sb, esize_);
        mem_.copy(c, sring_.base + off, in_, 0, c.numel);
        Ticket t = tp_.post_send(sring_.base + off, sb.bytes, st_.peers[j], st_.tag);
        sring_.fifo.push_back(Ring::Entry{off, sb.bytes, t, (size_t)j, sqs_});
        ++sq_;
        moved = true;
      }
      if (moved) tp_.flush();
    }
  }

  const char *in_ = nullptr;
  char *out_ = nullptr;
  bool finished_ = true;
  bool pad_ = false;      // the output is padded (out_pad): reduced row by row
  bool direct0_ = false;  // contribution 0 is received straight into the output
  std::vector<Run> runs_;  // the output's runs of the segment being reduced
  size_t seg_bytes_ = 0, slot_bytes_ = 0, segbuf_ = 0, acc_bytes_ = 0;
  std::vector<BoxSplit> splits_;
  std::vector<int64_t> slot_of_;
  std::vector<bool> staged_;
  int64_t nseg_ = 0, nbufs_ = 0, seg_ = 0, jj_ = 0;
  char *bufs_ = nullptr;
  void *acc_ = nullptr;
  std::vector<Ticket> rt_, send_t_;
  size_t scur_ = 0;
  Ring sring_;
  int64_t sq_ = 0, sqs_ = 0, max_count_ = 0;
  Shape zero_;
};

void fill_partial(MemOps &mem, const SchedStep &st, DType dt, void *out, std::vector<Run> &runs) {
  if (st.out_pad.empty()) return mem.fill_identity(dt, st.op, out, st.fill_n);
  const Shape zero(st.outbox.len.size(), 0);
  st.out_runs((uint64_t)(uintptr_t)out, zero.data(), st.outbox.len.data(), &runs);
  for (const Run &r : runs)
    mem.fill_identity(dt, st.op, reinterpret_cast<void *>((uintptr_t)r.addr),
                      (int64_t)(r.bytes / st.esize));
}

// ---------------------------------------------------------------------------------------------
class PartialInitRun : public StepRun {
 public:
  using StepRun::StepRun;
  void start(const void *, void *out) override {
    if (st_.fill) fill_partial(mem_, st_, dt_, out, runs_);
  }
  bool progress(bool) override { return true; }

 private:
  std::vector<Run> runs_;
};

// ---------------------------------------------------------------------------------------------
// A pieces step (block-cyclic layouts): every message packed into staging at once (not bounded by
// LM_STAGING_BYTES: p?gemr2d stages the same), receives posted first, local pieces copied while
// the messages travel, received ones unpacked at the end. A message the transport moves straight
// between the two buffers (kPiecesDirect: one copy between processes of a node) is neither packed
// nor unpacked; one it places (kPiecesPlaced) is packed by the sender only.
class PiecesRun : public StepRun {
 public:
  using StepRun::StepRun;

  void start(const void *in, void *out) override {
    in_ = static_cast<const char *>(in);
    out_ = static_cast<char *>(out);
    const size_t nr = st_.precvs.size(), ns = st_.psends.size();
    const bool strided = !st_.out_str.empty();
    if (strided && twins_.empty()) make_twins();
    direct_.assign(nr + ns, false);
    twin_.assign(nr, false);
    size_t total = 0;
    for (size_t i = 0; i < nr + ns; ++i) {  // receives: placed or direct; sends: direct
      const PieceMsg &m = i < nr ? st_.precvs[i] : st_.psends[i - nr];
      const Transport::PiecesMode k = tp_.pieces_mode(ref(m, i < nr), m.peer);
      direct_[i] = k == Transport::kPiecesDirect || (i < nr && k == Transport::kPiecesPlaced);
      if (i < nr && strided && direct_[i]) {  // the same transfer, into staging (its twin)
        direct_[i] = false;
        twin_[i] = true;
      }
      if (!direct_[i]) total += m.bytes;
    }
    char *stage = take_stage(total);
    first_ = tp_.posted();
    size_t off = 0;
    for (size_t i = 0; i < nr; ++i) {
      const PieceMsg &m = st_.precvs[i];
      if (direct_[i]) {
        tp_.post_recv_pieces(out_, ref(m, true), m.peer, st_.tag);
        continue;
      }
      if (twin_[i]) {
        PiecesRef r{&twins_[i].msg, twins_[i].shape.data(), esize_};
        tp_.post_recv_pieces(stage + off, r, m.peer, st_.tag);
      } else {
        tp_.post_recv(stage + off, m.bytes, m.peer, st_.tag);
      }
      off += m.bytes;
    }
    const int64_t *in_shape = st_.in_ext().data(), *out_shape = st_.out_ext().data();
    for (size_t i = 0; i < ns; ++i) {
      const PieceMsg &m = st_.psends[i];
      if (direct_[nr + i]) {
        tp_.post_send_pieces(in_, ref(m, false), m.peer, st_.tag);
        continue;
      }
      each_piece(m, [&](const int64_t *idx) {  // pack
        off += copy(m, idx, in_, in_shape, true, stage + off, nullptr, false);
      });
      tp_.post_send(stage + off - m.bytes, m.bytes, m.peer, st_.tag);
    }
    tp_.flush();
    for (const PieceMsg &m : st_.pselfs)
      each_piece(m, [&](const int64_t *idx) { copy(m, idx, in_, in_shape, true, out_, out_shape, false); });
  }

  bool progress(bool block) override {
    if (!tp_.done_from(first_, block)) return false;
    size_t off = 0;
    const int64_t *out_shape = st_.out_ext().data();
    for (size_t i = 0; i < st_.precvs.size(); ++i) {
      if (direct_[i]) continue;
      const PieceMsg &m = st_.precvs[i];
      if (twin_[i]) {  // its pieces lie in staging as in its twin's buffer
        const Twin &t = twins_[i];
        each_piece(m, [&](const int64_t *idx) {
          copy_strided(t.msg, idx, stage_.p + off, t.shape.data(), false, m);
        });
        off += m.bytes;
        continue;
      }
      each_piece(m, [&](const int64_t *idx) {  // unpack
        off += copy(m, idx, stage_.p + off, nullptr, false, out_, out_shape, false);
      });
    }
    tp_.reset();
    release();
    return true;
  }

 private:
  // Calls fn(idx) for each piece of m (idx: one run index per dim) in row-major order of its runs.
  template <class Fn>
  void each_piece(const PieceMsg &m, Fn fn) const {
    const int n = (int)m.dims.size();
    int64_t idx[kBoxMaxDims] = {0};
    for (;;) {
      fn(idx);
      int d = n - 1;
      while (d >= 0 && ++idx[d] == (int64_t)m.dims[(size_t)d].size()) idx[d--] = 0;
      if (d < 0) return;
    }
  }
  // Piece idx of m from src to dst (a buffer of extents *_shape at the runs' `a` or `b` offsets, or
  // with shape NULL the piece's staging); returns its bytes.
  size_t copy(const PieceMsg &m, const int64_t *idx, const char *src, const int64_t *src_shape,
              bool src_a, char *dst, const int64_t *dst_shape, bool dst_a) {
    if (dst == out_ && !st_.out_str.empty()) return copy_strided(m, idx, src, src_shape, src_a, m);
    BoxCopy c;
    piece_boxcopy(c, m, idx, src_shape, src_a, dst_shape, dst_a, (int64_t)esize_);
    mem_.copy(c, dst, src, 0, c.numel);
    return (size_t)c.numel * esize_;
  }
  // Piece idx of sm in src (as copy()) into the strided output, at the `b` offsets of the runs
  // of dm (sm itself, or the message whose twin sm is: the same runs elsewhere).
  size_t copy_strided(const PieceMsg &sm, const int64_t *idx, const char *src,
                      const int64_t *src_shape, bool src_a, const PieceMsg &dm) {
    int64_t str[kBoxMaxDims], s = 1;
    for (int i = (int)sm.dims.size() - 1; src_shape && i >= 0; --i) {
      str[i] = s;
      s *= src_shape[i];
    }
    int64_t len[2 * kBoxMaxDims], ss[2 * kBoxMaxDims], ds[2 * kBoxMaxDims], sb, db, numel = 1;
    const int k = piece_strides(sm, idx, src_shape ? str : nullptr, src_a, len, ss, &sb);
    piece_strides(dm, idx, st_.out_str.data(), false, len, ds, &db);
    strided_out(out_ + db * (int64_t)esize_, ds, src + sb * (int64_t)esize_, ss, len, k);
    for (int i = 0; i < k; ++i) numel *= len[i];
    return (size_t)numel * esize_;
  }
  // Message m in this side's buffer: the output's for a receive, the input's for a send.
  PiecesRef ref(const PieceMsg &m, bool recv) const {
    PiecesRef r;
    r.msg = &m;
    r.shape = recv ? st_.out_ext().data() : st_.in_ext().data();
    r.esize = esize_;
    return r;
  }
  // A receive's twin (a strided output's receive that the transport would place or read
  // straight into the output, kPiecesPlaced / kPiecesDirect): the same runs, each dim's packed
  // one after the other (`b` offsets) in a compact buffer of extents `shape`, which is staging.
  // The sender cannot tell: the transfer is the one it agreed to, into other addresses.
  struct Twin {
    PieceMsg msg;
    Shape shape;
  };
  void make_twins() {
    twins_.resize(st_.precvs.size());
    for (size_t i = 0; i < st_.precvs.size(); ++i) {
      Twin &t = twins_[i];
      t.msg = st_.precvs[i];
      t.shape.assign(t.msg.dims.size(), 0);
      for (size_t d = 0; d < t.msg.dims.size(); ++d)
        for (PieceRun &r : t.msg.dims[d]) {
          r.b = t.shape[d];
          r.bs = r.len;
          t.shape[d] += r.total();
        }
    }
  }
  const char *in_ = nullptr;
  char *out_ = nullptr;
  Transport::Ticket first_ = 0;
  std::vector<bool> direct_;  // per message (receives, then sends): not staged on this side
  std::vector<bool> twin_;    // per receive: staged through its twin
  std::vector<Twin> twins_;   // per receive, when the output is strided
};

// ---------------------------------------------------------------------------------------------
// A step as one collective of the transport's communicator (plan/collective.hpp; an all-reduce
// runs two steps, this one and the all-gather after it): the input's blocks packed into staging
// in rank order where they are not its slices, the collective posted as the step's one batch,
// then at completion the output's blocks copied out of staging, and avg's division.
class CollectiveRun : public StepRun {
 public:
  // last: the last step it runs (an all-reduce's all-gather), whose output it writes.
  CollectiveRun(const SchedStep &st, const SchedStep &last, size_t index, Transport &tp,
                MemOps &mem, DType dt, Staging &stage, CollForm form)
      : StepRun(st, index, tp, mem, dt, stage), last_(last), f_(std::move(form)) {}

  void start(const void *in, void *out) override {
    out_ = static_cast<char *>(out);
    const size_t block = (size_t)f_.count * esize_;  // all-reduce: the whole buffer
    pack_bytes_ = f_.pack ? (size_t)f_.n * block : 0;
    char *stage = take_stage(pack_bytes_ + (f_.unpack ? (size_t)f_.n * block : 0));
    CollOp c;
    c.kind = f_.kind;
    c.in = in;
    c.out = f_.unpack ? stage + pack_bytes_ : out;
    c.bytes = block;
    c.count = (size_t)f_.count;
    c.dt = dt_;
    c.op = f_.op;
    if (f_.pack) {
      for (size_t r = 0; r < f_.in_blocks.size(); ++r) {
        BoxCopy b = block_copy(f_.in_blocks[r], st_.in_ext(), true);
        mem_.copy(b, stage + r * block, in, 0, b.numel);
      }
      c.in = stage;
    }
    first_ = tp_.post_collective(c);
    tp_.flush();
  }

  bool progress(bool block) override {
    if (!tp_.done_from(first_, block)) return false;
    const size_t bytes = (size_t)f_.count * esize_;
    char *got = f_.unpack ? stage_.p + pack_bytes_ : out_;  // the collective's output
    if (f_.divide_by > 1) mem_.scale_avg(dt_, got, f_.count, f_.divide_by);
    for (size_t r = 0; f_.unpack && r < f_.out_blocks.size(); ++r)
      unpack_block(f_.out_blocks[r], got + r * bytes);
    tp_.reset();
    release();
    return true;
  }

 private:
  // The copy of block b of a compact buffer of extents `shape` into its compact staging slot
  // (to_staging), or back.
  BoxCopy block_copy(const CollBlock &b, const Shape &shape, bool to_staging) const {
    const int64_t zero[kBoxMaxDims] = {0};
    const int n = (int)b.len.size();
    BoxCopy c;
    if (to_staging)
      boxcopy_init(c, n, b.len.data(), shape.data(), b.off.data(), b.len.data(), zero,
                   (int64_t)esize_);
    else
      boxcopy_init(c, n, b.len.data(), b.len.data(), zero, shape.data(), b.off.data(),
                   (int64_t)esize_);
    return c;
  }
  // Block b of the output from its compact staging slot: into the (padded) row-major output, or
  // the strided one (host only: strided outputs are host plans').
  void unpack_block(const CollBlock &b, const char *src) {
    if (last_.out_str.empty()) {
      BoxCopy c = block_copy(b, last_.out_ext(), false);
      mem_.copy(c, out_, src, 0, c.numel);
      return;
    }
    const int n = (int)b.len.size();
    int64_t sstr[kBoxMaxDims], s = 1, db = 0;
    for (int d = n - 1; d >= 0; --d) {
      sstr[d] = s;
      s *= b.len[(size_t)d];
      db += b.off[(size_t)d] * last_.out_str[(size_t)d];
    }
    if (!strided_copy(out_ + db * (int64_t)esize_, last_.out_str.data(), src, sstr, b.len.data(),
                      n, esize_, false))
      fail(LM_ERR_INTERNAL, "no strided copy of %zu-byte elements in %d dims", esize_, n);
  }
  const SchedStep &last_;
  const CollForm f_;
  char *out_ = nullptr;
  size_t pack_bytes_ = 0;
  Transport::Ticket first_ = 0;
};

// ---------------------------------------------------------------------------------------------
struct ExecState {
  const void *in0 = nullptr;
  void *out_final = nullptr;
  size_t cur = 0;
  Staging stage;  // shared by the steps (declared before them: they refer to it)
  std::vector<std::unique_ptr<StepRun>> runs;  // NULL for a step another step's run covers
  std::vector<size_t> span;  // steps run i covers (an all-reduce: 2), from i on
  std::vector<void *> work;
  std::vector<size_t> work_cap;
};

namespace {
// The communicator the route's collectives run over, for this plan's dtype.
CollComm coll_comm(const Transport &tp, DType dt) {
  CollComm cc;
  cc.size = tp.coll_size();
  if (!cc.size) return cc;
  cc.rank_of = [&tp](int peer) { return tp.coll_rank(peer); };
  cc.offers = [&tp, dt](CollKind k, int op) { return tp.coll_offers(k, dt, op); };
  return cc;
}

// The buffer step i writes into: the final output (in-place steps and the last moving one), an
// intermediate buffer, or, when fused, a slice of the next step's output.
void *out_of(const Plan &p, ExecState &x, size_t i) {
  if (p.steps[i]->in_place() || i == p.last_moving) return x.out_final;
  if (p.fused[i] >= 0) return static_cast<char *>(out_of(p, x, i + 1)) + p.fused[i];
  return x.work[i];
}
const void *in_of(const Plan &p, ExecState &x, size_t i) {
  if (p.steps[i]->in_place()) return x.out_final;
  return i == 0 ? x.in0 : out_of(p, x, i - 1);
}
// Starts run i: its input is step i's, its output the last step it covers.
void start_run(const Plan &p, ExecState &x, size_t i) {
  x.runs[i]->start(in_of(p, x, i), out_of(p, x, i + x.span[i] - 1));
}
}  // namespace

// The last padded variant of a plan, and the extents it was built for (ok false: the schedule
// cannot run on padded shards).
struct Plan::Padded {
  Shape in, out;
  bool has_in = false, has_out = false, ok = false;
  bool out_compact = false;  // the variant reads in padded, writes a compact target
  std::unique_ptr<Plan> plan;
  bool same(const Shape *i, const Shape *o) const {
    return has_in == (i != nullptr) && has_out == (o != nullptr) && (!i || *i == in) &&
           (!o || *o == out);
  }
};

namespace {
std::atomic<uint64_t> g_plan_serial{0};
}  // namespace

Plan::Plan() : serial(++g_plan_serial) {}

Plan *Plan::padded(const Shape *in_pad, const Shape *out_pad, bool *out_compact) {
  *out_compact = false;
  if (!in_pad && !out_pad) return this;
  if (padded_ && padded_->same(in_pad, out_pad)) {
    *out_compact = padded_->out_compact;
    return padded_->ok ? padded_->plan.get() : nullptr;
  }
  if (padded_ && padded_->plan && padded_->plan->active)
    fail(LM_ERR_INTERNAL, "Plan::padded during an execution of its variant");
  auto v = std::make_unique<Padded>();
  v->has_in = in_pad != nullptr;
  v->has_out = out_pad != nullptr;
  if (in_pad) v->in = *in_pad;
  if (out_pad) v->out = *out_pad;
  const size_t min_run = (size_t)setting_u(Setting::PadInPlaceMinRun);
  v->plan = variant([&](Schedule &s) { return schedule_pad(s, in_pad, out_pad, min_run); });
  if (!v->plan && in_pad && out_pad) {  // the source in place, the target through a stand-in
    v->plan = variant([&](Schedule &s) { return schedule_pad(s, in_pad, nullptr); });
    v->out_compact = v->plan != nullptr;
  }
  v->ok = v->plan != nullptr;
  padded_ = std::move(v);
  *out_compact = padded_->out_compact;
  return padded_->ok ? padded_->plan.get() : nullptr;
}

std::unique_ptr<Plan> Plan::variant(const std::function<bool(Schedule &)> &change) const {
  auto p = std::make_unique<Plan>();
  copy_schedule(*p, *this);  // the same schedule, then changed
  if (!change(*p)) return nullptr;
  p->comm = comm;
  p->keep_buffers = keep_buffers;
  p->spec_ = spec_;
  return p;
}

struct Plan::Strided {
  Shape str;
  bool ok = false;
  std::unique_ptr<Plan> plan;
};

Plan *Plan::strided_out(const Shape &out_str) {
  if (strided_ && strided_->str == out_str) return strided_->ok ? strided_->plan.get() : nullptr;
  if (strided_ && strided_->plan && strided_->plan->active)
    fail(LM_ERR_INTERNAL, "Plan::strided_out during an execution of its variant");
  auto v = std::make_unique<Strided>();
  v->str = out_str;
  v->plan = variant([&](Schedule &s) { return schedule_stride_out(s, out_str); });
  v->ok = v->plan != nullptr;
  strided_ = std::move(v);
  return strided_->ok ? strided_->plan.get() : nullptr;
}

Plan::~Plan() {
  if (ex_) {
    keep_buffers = false;
    abandon();
    for (auto &r : ex_->runs)
      if (r) r->drop_kept();
  }
}

void Plan::start(const void *in, void *out, bool blocking) {
  if (!route_.wire) {
    if (spec_.comm == MPI_COMM_NULL) spec_ = host_spec();
    route_ = select_route(spec_);
  }
  Transport &tp = *route_.wire;
  MemOps &mem = *route_.mem;
  tp.begin_execution(blocking);
  if (!ex_) make_runs(tp, mem);
  ExecState &x = *ex_;
  x.in0 = in;
  x.out_final = out;
  x.cur = 0;
  for (auto &r : x.runs)
    if (r) r->keep_ = keep_buffers;
  // Intermediate outputs, from the pool (never zero-filled: every element is written); none for
  // a step whose run another covers (an all-reduce writes the next step's output).
  for (size_t i = 0; i < steps.size(); ++i)
    if (work_bytes[i] && !x.work[i] && x.runs[i] && x.span[i] == 1)
      x.work[i] = mem.staging_take(work_bytes[i], &x.work_cap[i]);
  active = !steps.empty();
  if (!active) return;
  start_run(*this, x, 0);
}

// One run per step, or one for a collective's steps (plan/collective.hpp): the forms depend on
// the plan and the route alone, so every rank builds the same runs.
void Plan::make_runs(Transport &tp, MemOps &mem) {
  ex_ = std::make_unique<ExecState>();
  const CollComm cc = coll_comm(tp, dt);
  for (size_t i = 0; i < steps.size(); ++i) {
    const SchedStep &st = *steps[i];
    std::unique_ptr<StepRun> r;
    CollForm f = cc.size ? collective_form(*this, i, cc) : CollForm{};
    const size_t span = f.kind == CollKind::kNone ? 1 : f.steps;
    if (f.kind != CollKind::kNone)
      r = std::make_unique<CollectiveRun>(st, *steps[i + span - 1], i, tp, mem, dt, ex_->stage,
                                          std::move(f));
    else if (st.kind == StepKind::kExchange)
      r = std::make_unique<ExchangeRun>(st, i, tp, mem, dt, ex_->stage);
    else if (st.kind == StepKind::kReduceScatter)
      r = std::make_unique<ReduceScatterRun>(st, i, tp, mem, dt, ex_->stage);
    else if (st.kind == StepKind::kPieces)
      r = std::make_unique<PiecesRun>(st, i, tp, mem, dt, ex_->stage);
    else
      r = std::make_unique<PartialInitRun>(st, i, tp, mem, dt, ex_->stage);
    ex_->runs.push_back(std::move(r));
    ex_->span.push_back(span);
    for (size_t k = 1; k < span; ++k, ++i) {  // the steps it covers have no run of their own
      ex_->runs.push_back(nullptr);
      ex_->span.push_back(0);
    }
  }
  ex_->work.assign(steps.size(), nullptr);
  ex_->work_cap.assign(steps.size(), 0);
}

bool Plan::progress(bool block) {
  if (!ex_) return true;
  ExecState &x = *ex_;
  while (active) {
    if (!x.runs[x.cur]->progress(block)) return false;
    x.cur += x.span[x.cur];
    if (x.cur >= steps.size()) {
      active = false;
      break;
    }
    start_run(*this, x, x.cur);
  }
  if (!keep_buffers)
    for (size_t i = 0; i < x.work.size(); ++i)
      if (x.work[i]) {
        route_.mem->staging_give(x.work[i], x.work_cap[i], work_bytes[i]);
        x.work[i] = nullptr;
      }
  return true;
}

void Plan::abandon() {
  active = false;
  if (!ex_) return;
  for (auto &r : ex_->runs)
    if (r) r->release();
  for (size_t i = 0; i < ex_->work.size(); ++i)
    if (ex_->work[i] && !keep_buffers) {
      route_.mem->staging_give(ex_->work[i], ex_->work_cap[i], work_bytes[i]);
      ex_->work[i] = nullptr;
    }
  // Requests of a failed execution may still be pending: drop the transport state with them.
  route_.wire->reset();
}

std::unique_ptr<Plan> plan_build(const Layout &src, const Layout &dst, DLDataType dtype,
                                 MPI_Comm comm, int me) {
  auto p = std::make_unique<Plan>();
  build_schedule(*p, src, dst, dtype, me);
  p->comm = comm;
  return p;
}

TransportSpec Plan::host_spec() const {
  TransportSpec h;
  h.comm = comm;
  return h;
}

void Plan::use(const TransportSpec &spec) {
  if (route_.wire && spec_.same(spec)) return;
  if (active) fail(LM_ERR_INTERNAL, "Plan::use during an execution");
  if (ex_) {  // the execution state belongs to the old route: its buffers go back to it
    const bool keep = keep_buffers;
    keep_buffers = false;
    abandon();
    for (auto &r : ex_->runs)
      if (r) r->drop_kept();
    ex_.reset();
    keep_buffers = keep;
  }
  route_ = Route{};
  spec_ = spec;
}

FusedExchange *Plan::fused_exchange(const AgreeComm *ac, bool across_meshes) {
  if (!steps.empty() && !steps[last_moving]->out_str.empty())
    return nullptr;  // a strided variant: its output is no row-major box to unpack into
  if (!fused_decided_) {  // (a plan runs between the same two meshes: across_meshes never changes)
    fused_decided_ = true;
    fused_ = select_fused_exchange(*this, comm, ac, across_meshes);
  }
  return fused_.get();
}

void Plan::check_errors(const char *what) {
  if (route_.wire) route_.wire->check_errors(what);
}

std::string Schedule::describe() const {
  std::string s;
  for (auto &st : steps) {
    if (!s.empty()) s += "; ";
    s += st->describe();
  }
  return s.empty() ? "nothing to do on this rank" : s;
}

}  // namespace lm
