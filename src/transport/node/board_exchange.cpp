// SPDX-License-Identifier: BSD-3-Clause
#include "transport/node/board_exchange.hpp"

#include <cstring>
#include <vector>

#include "comm/agree.hpp"
#include "comm/board.hpp"
#include "comm/node.hpp"
#include "common/error.hpp"
#include "plan/planner.hpp"
#include "transport/fused_reduce.hpp"

namespace lm {

namespace {

size_t header_bytes(const AgreeComm &ac) { return ((size_t)ac.size * 16 + 63) / 64 * 64; }
size_t block_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

// After the round (ac.seq is the round's): the block agreement rank `from` (plan rank `peer`) left
// for this rank in its bank, checked to hold `bytes`.
const char *board_block(const AgreeComm &ac, int from, long long peer, size_t bytes) {
  const char *box = ac.outbox[(size_t)from] + (size_t)(ac.seq & 1) * ac.outbox_bank;
  const uint64_t *hdr = reinterpret_cast<const uint64_t *>(box);
  if (hdr[2 * ac.rank + 1] != bytes)
    fail(LM_ERR_MISMATCH, "reshard (board exchange): rank %lld sent %llu bytes where this rank's "
         "plan expects %zu: the ranks ran different reshards (with LM_CHECK=0 no agreement "
         "compares their arguments first)",
         peer, (unsigned long long)hdr[2 * ac.rank + 1], bytes);
  return box + hdr[2 * ac.rank];
}

class BoardExchange final : public FusedExchange {
 public:
  BoardExchange(const SchedStep &st, const AgreeComm &ac, std::vector<int> ranks)
      : st_(st), ac_(ac), ranks_(std::move(ranks)) {}

  // This rank's sends, packed into its outbox bank of the round.
  void pack(const void *in, char *bank) override {
    uint64_t *hdr = reinterpret_cast<uint64_t *>(bank);
    std::memset(hdr, 0, (size_t)ac_.size * 16);
    size_t off = header_bytes(ac_);
    const int n = (int)st_.inbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.sends) {
      const int r = ranks_[(size_t)m.peer];
      hdr[2 * r] = off;
      hdr[2 * r + 1] = m.bytes;
      BoxCopy c;
      boxcopy_init(c, n, m.box.len.data(), st_.in_ext().data(), m.rel.data(), m.box.len.data(),
                   zero, (int64_t)st_.esize);
      boxcopy_range(c, bank + off, in, 0, c.numel);
      off += block_bytes(m.bytes);
    }
  }

  // After the round (ac.seq is the round's): this rank's blocks out of its peers' banks, then its
  // own part.
  void unpack(const void *in, void *out) override {
    const int n = (int)st_.outbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.recvs) {
      const char *block = board_block(ac_, ranks_[(size_t)m.peer], m.peer, m.bytes);
      BoxCopy c;
      boxcopy_init(c, n, m.box.len.data(), m.box.len.data(), zero, st_.out_ext().data(),
                   m.rel.data(), (int64_t)st_.esize);
      boxcopy_range(c, out, block, 0, c.numel);
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
  const AgreeComm &ac_;
  std::vector<int> ranks_;  // agreement rank of each rank of the plan's communicator
};

// One reduce-scatter step (a compact output): this rank packs chunk j for group member j; after the
// round it reduces its chunk's k contributions in group order, straight out of its peers' banks
// (transport/fused_reduce.hpp: the transport's bits).
class BoardReduceScatter final : public FusedExchange {
 public:
  BoardReduceScatter(const Schedule &s, const AgreeComm &ac, std::vector<int> ranks)
      : st_(*s.steps[0]), dt_(s.dt), ac_(ac), ranks_(std::move(ranks)) {}

  void pack(const void *in, char *bank) override {
    uint64_t *hdr = reinterpret_cast<uint64_t *>(bank);
    std::memset(hdr, 0, (size_t)ac_.size * 16);
    if (!st_.member) return;
    size_t off = header_bytes(ac_);
    for (int64_t j = 0; j < st_.k; ++j) {
      if (j == st_.mine) continue;
      const int r = ranks_[(size_t)st_.peers[(size_t)j]];
      const size_t bytes = (size_t)st_.chunks[(size_t)j].numel() * st_.esize;
      hdr[2 * r] = off;
      hdr[2 * r + 1] = bytes;
      copy_rs_chunk(st_, j, in, bank + off);
      off += block_bytes(bytes);
    }
  }

  void unpack(const void *in, void *out) override {
    if (!st_.member) return;
    const int64_t n = st_.chunks[(size_t)st_.mine].numel();
    const size_t bytes = (size_t)n * st_.esize;
    std::vector<const char *> from((size_t)st_.k, nullptr);
    for (int64_t j = 0; j < st_.k; ++j) {  // every block checked before any is reduced
      if (j == st_.mine) continue;
      const int peer = st_.peers[(size_t)j];
      from[(size_t)j] = board_block(ac_, ranks_[(size_t)peer], peer, bytes);
    }
    if (n == 0) return;
    const char *own = own_rs_chunk(st_, in, scratch_);
    reduce_in_group_order(st_, dt_, own, out, n, acc_,
                          [&](int64_t j) { return from[(size_t)j]; });
  }

 private:
  const SchedStep &st_;
  DType dt_;
  const AgreeComm &ac_;
  std::vector<int> ranks_;  // agreement rank of each rank of the plan's communicator
  std::vector<char> scratch_;
  std::vector<__int128> acc_;
};

// P -> R in one round (fused_reduce.hpp, one_round_all_reduce): this rank puts its whole input in
// its bank once, for every member of its group; after the round each member reduces the k inputs in
// group order straight out of their banks (the bits of the reduce-scatter and its gather). Other
// reads than the plan's steps (traffic()).
class BoardAllReduce final : public FusedExchange {
 public:
  BoardAllReduce(const Schedule &s, const AgreeComm &ac, const std::vector<int> &ranks)
      : st_(*s.steps[0]), dt_(s.dt), ac_(ac), box_((size_t)st_.inbox.numel() * s.esize) {
    for (int64_t j = 0; j < st_.k; ++j) agree_.push_back(ranks[(size_t)member_rank(st_, j)]);
  }

  void pack(const void *in, char *bank) override {
    uint64_t *hdr = reinterpret_cast<uint64_t *>(bank);
    std::memset(hdr, 0, (size_t)ac_.size * 16);
    const size_t off = header_bytes(ac_);
    for (int64_t j = 0; j < st_.k; ++j) {
      if (j == st_.mine) continue;
      hdr[2 * agree_[(size_t)j]] = off;
      hdr[2 * agree_[(size_t)j] + 1] = box_;
    }
    if (box_) std::memcpy(bank + off, in, box_);
  }

  void unpack(const void *in, void *out) override {
    std::vector<const char *> from((size_t)st_.k, nullptr);
    for (int64_t j = 0; j < st_.k; ++j)  // every block checked before any is reduced
      if (j != st_.mine)
        from[(size_t)j] = board_block(ac_, agree_[(size_t)j], member_rank(st_, j), box_);
    if (box_ == 0) return;
    reduce_in_group_order(st_, dt_, static_cast<const char *>(in), out, st_.inbox.numel(), acc_,
                          [&](int64_t j) { return from[(size_t)j]; });
  }

  bool traffic(Traffic *t) const override {
    if (t) all_reduce_traffic(st_, box_, t);
    return true;
  }

 private:
  const SchedStep &st_;
  DType dt_;
  const AgreeComm &ac_;
  size_t box_;              // this rank's input (and output) bytes
  std::vector<int> agree_;  // the agreement rank of each group member
  std::vector<__int128> acc_;
};

// P -> R on the board (BoardAllReduce), or NULL: the k - 1 inputs each rank reads within what the
// board exchange moves (every rank decides alike), this rank's box within its bank.
std::unique_ptr<FusedExchange> board_all_reduce_for(const Schedule &s, MPI_Comm comm,
                                                    const AgreeComm &ac) {
  if (!one_round_all_reduce(s)) return nullptr;
  const SchedStep &rs = *s.steps[0];
  if ((uint64_t)(rs.k - 1) * tensor_bytes(s) > (uint64_t)ac.size * board_exchange_bytes() ||
      header_bytes(ac) + (size_t)rs.inbox.numel() * s.esize > ac.outbox_bank)
    return nullptr;
  std::vector<int> ranks = all_ranks_in(comm, ac.comm);
  if (ranks.empty()) return nullptr;
  return std::make_unique<BoardAllReduce>(s, ac, ranks);
}

}  // namespace

std::unique_ptr<FusedExchange> board_exchange_for(const Schedule &s, MPI_Comm comm,
                                                  const AgreeComm *ac) {
  if (!ac || ac->outbox.empty()) return nullptr;
  if (s.steps.size() == 2) return board_all_reduce_for(s, comm, *ac);
  if (s.steps.size() != 1) return nullptr;
  const SchedStep &st = *s.steps[0];
  const bool rs = st.kind == StepKind::kReduceScatter;
  if (rs ? !st.in_pad.empty() || !st.out_pad.empty() || !st.out_str.empty()
         : st.kind != StepKind::kExchange)
    return nullptr;
  if (tensor_bytes(s) > (uint64_t)ac->size * board_exchange_bytes()) return nullptr;
  size_t need = header_bytes(*ac);  // what this rank sends must fit its bank
  if (rs) {  // (its chunks: at most its input, and a block's rounding each; either form)
    need += (size_t)st.inbox.numel() * s.esize + 64 * (size_t)st.k;
  } else {
    for (const Msg &m : st.sends) need += block_bytes(m.bytes);
    for (const MsgRun &r : st.send_runs)  // a compressed schedule (lm_reshard_estimate)
      need += block_bytes(r.first.bytes) * (size_t)r.count;
  }
  if (need > ac->outbox_bank) return nullptr;
  std::vector<int> ranks = all_ranks_in(comm, ac->comm);  // agreement rank of each plan rank
  if (ranks.empty()) return nullptr;
  if (rs) return std::make_unique<BoardReduceScatter>(s, *ac, std::move(ranks));
  return std::make_unique<BoardExchange>(st, *ac, std::move(ranks));
}

}  // namespace lm
