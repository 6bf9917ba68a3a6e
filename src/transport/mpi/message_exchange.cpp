// SPDX-License-Identifier: BSD-3-Clause
#include "transport/mpi/message_exchange.hpp"

#include <cstring>
#include <vector>

#include "comm/agree.hpp"
#include "comm/node.hpp"
#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "plan/planner.hpp"
#include "transport/fused_reduce.hpp"

namespace lm {

namespace {

size_t rounded(size_t bytes) { return (bytes + 63) / 64 * 64; }

// On one node (AgreeComm::ride_apart), the smallest block that is one run of the input to go
// apart (Ride::apart): shared-memory MPI moves a message of 4 KiB or more with one copy (Open
// MPI's single-copy path), for less than copying it after the words.
constexpr size_t kApartMinBytes = 4096;

// The rooms of one round: per agreement rank, the room for the words of its message, then this
// rank's block for it (send) or its block for this rank (recv), each 64-byte aligned.
class Rooms : public FusedExchange {
 public:
  const Ride *ride() const override { return &ride_; }

 protected:
  explicit Rooms(const AgreeComm &ac) : apart_(ac.ride_apart) {
    const size_t n = (size_t)ac.size;
    ride_.send_bytes.assign(n, 0);
    ride_.recv_bytes.assign(n, 0);
    ride_.apart.assign(n, nullptr);
  }
  // After send_bytes and recv_bytes are set.
  void lay_out() {
    const size_t n = ride_.send_bytes.size();
    size_t ns = 0, nr = 0;
    for (size_t r = 0; r < n; ++r) {
      ns += kRideHeader + rounded(ride_.send_bytes[r]);
      nr += kRideHeader + rounded(ride_.recv_bytes[r]);
    }
    send_.resize(ns / 64 + 1);
    recv_.resize(nr / 64 + 1);
    char *s = reinterpret_cast<char *>(send_.data()), *q = reinterpret_cast<char *>(recv_.data());
    for (size_t r = 0; r < n; ++r) {
      ride_.send.push_back(s);
      ride_.recv.push_back(q);
      s += kRideHeader + rounded(ride_.send_bytes[r]);
      q += kRideHeader + rounded(ride_.recv_bytes[r]);
    }
  }
  char *send_block(int agree_rank) { return ride_.send[(size_t)agree_rank] + kRideHeader; }
  // This call's block for agreement rank a, where it is one run of the input at `from`: apart
  // when it is large enough (returns true), else the caller packs it.
  bool send_apart(int a, const char *from) {
    const bool big = apart_ && ride_.send_bytes[(size_t)a] >= kApartMinBytes;
    ride_.apart[(size_t)a] = big ? from : nullptr;
    return big;
  }
  const char *recv_block(int agree_rank) const { return ride_.recv[(size_t)agree_rank] + kRideHeader; }
  void expect_landed() const {
    if (!ride_.landed)
      fail(LM_ERR_MISMATCH, "reshard (message exchange): a rank sent a block of another size "
           "than this rank's plan expects: the ranks ran different reshards (with LM_CHECK=0 no "
           "agreement compares their arguments first)");
  }

  Ride ride_;

 private:
  bool apart_;  // AgreeComm::ride_apart
  struct alignas(64) Line {
    char b[64];
  };
  std::vector<Line> send_, recv_;
};

// One exchange step: each message is one block.
class MessageExchange final : public Rooms {
 public:
  MessageExchange(const SchedStep &st, const AgreeComm &ac, const std::vector<int> &ranks)
      : Rooms(ac), st_(st), ranks_(ranks) {
    for (const Msg &m : st.sends) ride_.send_bytes[(size_t)ranks[(size_t)m.peer]] = m.bytes;
    for (const Msg &m : st.recvs) ride_.recv_bytes[(size_t)ranks[(size_t)m.peer]] = m.bytes;
    lay_out();
  }

  // This rank's sends, each after the room for the words of its message.
  void pack(const void *in, char *) override {
    const int n = (int)st_.inbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.sends) {
      const int a = ranks_[(size_t)m.peer];
      const char *from = static_cast<const char *>(in) + m.off;
      if (m.contiguous && send_apart(a, from)) continue;
      char *dst = send_block(a);
      if (m.contiguous) {
        std::memcpy(dst, from, m.bytes);
        continue;
      }
      BoxCopy c;
      boxcopy_init(c, n, m.box.len.data(), st_.in_ext().data(), m.rel.data(), m.box.len.data(),
                   zero, (int64_t)st_.esize);
      boxcopy_range(c, dst, in, 0, c.numel);
    }
  }

  // After a round in which every rank packed: this rank's blocks out of its rooms, then its own
  // part.
  void unpack(const void *in, void *out) override {
    expect_landed();
    const int n = (int)st_.outbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.recvs) {
      const char *src = recv_block(ranks_[(size_t)m.peer]);
      if (m.contiguous) {
        std::memcpy(static_cast<char *>(out) + m.off, src, m.bytes);
        continue;
      }
      BoxCopy c;
      boxcopy_init(c, n, m.box.len.data(), m.box.len.data(), zero, st_.out_ext().data(),
                   m.rel.data(), (int64_t)st_.esize);
      boxcopy_range(c, out, src, 0, c.numel);
    }
    for (const LocalCopy &b : st_.selfs) {
      BoxCopy c;
      boxcopy_init(c, n, b.box.len.data(), st_.in_ext().data(), b.in_rel.data(),
                   st_.out_ext().data(), b.out_rel.data(), (int64_t)st_.esize);
      boxcopy_range(c, out, in, 0, c.numel);
    }
  }

 private:
  const SchedStep &st_;
  std::vector<int> ranks_;  // agreement rank of each rank of the plan's communicator
};

// One reduce-scatter step (a compact output, every member named): chunk j of this rank's input
// rides to group member j; after the round this rank reduces its chunk's k contributions in
// group order, as ReduceScatterRun does (exec/executor.cpp), so the sums are the same bits.
class MessageReduceScatter final : public Rooms {
 public:
  MessageReduceScatter(const Schedule &s, const AgreeComm &ac, const std::vector<int> &ranks)
      : Rooms(ac), st_(*s.steps[0]), dt_(s.dt), esize_(s.esize), ranks_(ranks) {
    if (!st_.member) {
      lay_out();
      return;
    }
    const size_t mine_bytes = (size_t)st_.chunks[(size_t)st_.mine].numel() * esize_;
    for (int64_t j = 0; j < st_.k; ++j) {
      if (j == st_.mine) continue;
      const size_t a = (size_t)ranks[(size_t)st_.peers[(size_t)j]];
      ride_.send_bytes[a] = (size_t)st_.chunks[(size_t)j].numel() * esize_;
      ride_.recv_bytes[a] = mine_bytes;
    }
    lay_out();
  }

  void pack(const void *in, char *) override {
    if (!st_.member) return;
    for (int64_t j = 0; j < st_.k; ++j) {
      if (j == st_.mine) continue;
      const int a = ranks_[(size_t)st_.peers[(size_t)j]];
      size_t off = 0;
      if (box_is_contiguous_at(st_.inbox, st_.in_ext(), st_.chunks[(size_t)j], esize_, &off) &&
          send_apart(a, static_cast<const char *>(in) + off))
        continue;
      copy_rs_chunk(st_, j, in, send_block(a));
    }
  }

  void unpack(const void *in, void *out) override {
    expect_landed();
    const int64_t n = st_.member ? st_.chunks[(size_t)st_.mine].numel() : 0;
    if (n == 0) return;
    const char *own = own_rs_chunk(st_, in, scratch_);
    reduce_in_group_order(st_, dt_, own, out, n, acc_, [&](int64_t j) {
      return recv_block(ranks_[(size_t)st_.peers[(size_t)j]]);
    });
  }

 private:
  const SchedStep &st_;
  DType dt_;
  size_t esize_;
  std::vector<int> ranks_;
  std::vector<char> scratch_;
  std::vector<__int128> acc_;
};

// A reduce-scatter step and the exchange that gathers its chunks back (P -> R: this rank's output
// box is its input box): in one round, this rank's whole input rides to every other member of its
// group, and after the round each member reduces the k inputs in group order (the reduce-scatter's
// order, element by element: the bits of the two steps). k - 1 copies of the box per rank instead
// of two rounds: for small tensors, where a round costs more than the bytes. Other messages than
// the plan's steps (traffic()).
class MessageAllReduce final : public Rooms {
 public:
  MessageAllReduce(const Schedule &s, const AgreeComm &ac, const std::vector<int> &ranks)
      : Rooms(ac), st_(*s.steps[0]), dt_(s.dt),
        box_((size_t)st_.inbox.numel() * s.esize) {
    for (int64_t j = 0; j < st_.k; ++j) {
      const int a = ranks[(size_t)member_rank(st_, j)];
      agree_.push_back(a);
      if (j != st_.mine) ride_.send_bytes[(size_t)a] = ride_.recv_bytes[(size_t)a] = box_;
    }
    lay_out();
  }

  void pack(const void *in, char *) override {
    for (int64_t j = 0; j < st_.k; ++j) {
      const int a = agree_[(size_t)j];
      if (j != st_.mine && box_ && !send_apart(a, static_cast<const char *>(in)))
        std::memcpy(send_block(a), in, box_);
    }
  }

  void unpack(const void *in, void *out) override {
    expect_landed();
    const int64_t n = st_.inbox.numel();
    if (n == 0) return;
    reduce_in_group_order(st_, dt_, static_cast<const char *>(in), out, n, acc_,
                          [&](int64_t j) { return recv_block(agree_[(size_t)j]); });
  }

  bool traffic(Traffic *t) const override {
    if (t) all_reduce_traffic(st_, box_, t);
    return true;
  }

 private:
  const SchedStep &st_;
  DType dt_;
  size_t box_;                    // this rank's input (and output) bytes
  std::vector<int> agree_;        // the agreement rank of each group member
  std::vector<__int128> acc_;
};

// Whether no two messages of one direction go to one agreement rank.
bool one_per_peer(const std::vector<int64_t> &to, size_t n) {
  std::vector<char> seen(n, 0);
  for (int64_t a : to)
    if (seen[(size_t)a]++) return false;
  return true;
}

// A reduce-scatter step that can ride: every member named, compact buffers in row-major order.
bool plain_reduce_scatter(const SchedStep &st) {
  return st.kind == StepKind::kReduceScatter && !st.lazy_members && st.in_pad.empty() &&
         st.out_pad.empty() && st.out_str.empty();
}

// P -> R as one round (MessageAllReduce), or NULL.
std::unique_ptr<FusedExchange> all_reduce_for(const Schedule &s, MPI_Comm comm,
                                              const AgreeComm *ac) {
  if (!one_round_all_reduce(s)) return nullptr;
  const SchedStep &rs = *s.steps[0];
  const uint64_t room = (uint64_t)ac->size * setting_u(Setting::MessageExchangeBytes);
  if ((uint64_t)(rs.k - 1) * tensor_bytes(s) > room) return nullptr;  // (the same on every rank)
  std::vector<int> ranks = all_ranks_in(comm, ac->comm);
  if (ranks.empty()) return nullptr;
  return std::make_unique<MessageAllReduce>(s, *ac, ranks);  // (members: distinct ranks)
}

}  // namespace

std::unique_ptr<FusedExchange> message_exchange_for(const Schedule &s, MPI_Comm comm,
                                                    const AgreeComm *ac) {
  if (!ac || !ac->ride || !mpi_alive()) return nullptr;
  if (s.steps.size() == 2) return all_reduce_for(s, comm, ac);
  if (s.steps.size() != 1) return nullptr;
  const SchedStep &st = *s.steps[0];
  const bool rs = st.kind == StepKind::kReduceScatter;
  if (rs ? !plain_reduce_scatter(st)
         : st.kind != StepKind::kExchange || !st.send_runs.empty() || !st.recv_runs.empty())
    return nullptr;
  if (tensor_bytes(s) > (uint64_t)ac->size * setting_u(Setting::MessageExchangeBytes))
    return nullptr;
  std::vector<int> ranks = all_ranks_in(comm, ac->comm);  // agreement rank of each plan rank
  if (ranks.empty()) return nullptr;
  std::vector<int64_t> to, from;  // agreement rank of each message, by direction
  if (rs) {
    if (st.member && st.chunks[(size_t)st.mine].numel() != st.outbox.numel())
      return nullptr;  // (the output is my chunk, compact)
    if (st.member)
      for (int64_t j = 0; j < st.k; ++j)
        if (j != st.mine) to.push_back(ranks[(size_t)st.peers[(size_t)j]]);
    if (!one_per_peer(to, (size_t)ac->size)) return nullptr;
    return std::make_unique<MessageReduceScatter>(s, *ac, ranks);
  }
  for (const Msg &m : st.sends) to.push_back(ranks[(size_t)m.peer]);
  for (const Msg &m : st.recvs) from.push_back(ranks[(size_t)m.peer]);
  if (!one_per_peer(to, (size_t)ac->size) || !one_per_peer(from, (size_t)ac->size)) return nullptr;
  return std::make_unique<MessageExchange>(st, *ac, ranks);
}

}  // namespace lm
