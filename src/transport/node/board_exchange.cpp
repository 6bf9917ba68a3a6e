// SPDX-License-Identifier: BSD-3-Clause
#include "transport/node/board_exchange.hpp"

#include <cstring>
#include <vector>

#include "comm/agree.hpp"
#include "comm/board.hpp"
#include "comm/node.hpp"
#include "common/error.hpp"
#include "plan/planner.hpp"

namespace lm {

namespace {

size_t header_bytes(const AgreeComm &ac) { return ((size_t)ac.size * 16 + 63) / 64 * 64; }
size_t block_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

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
    const size_t bank = (size_t)(ac_.seq & 1) * ac_.outbox_bank;
    const int n = (int)st_.outbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.recvs) {
      const char *box = ac_.outbox[(size_t)ranks_[(size_t)m.peer]] + bank;
      const uint64_t *hdr = reinterpret_cast<const uint64_t *>(box);
      if (hdr[2 * ac_.rank + 1] != m.bytes)
        fail(LM_ERR_MISMATCH, "reshard (board exchange): rank %d sent %llu bytes where this "
             "rank's plan expects %zu: the ranks ran different reshards (with LM_CHECK=0 no "
             "agreement compares their arguments first)",
             m.peer, (unsigned long long)hdr[2 * ac_.rank + 1], m.bytes);
      BoxCopy c;
      boxcopy_init(c, n, m.box.len.data(), m.box.len.data(), zero, st_.out_ext().data(),
                   m.rel.data(), (int64_t)st_.esize);
      boxcopy_range(c, out, box + hdr[2 * ac_.rank], 0, c.numel);
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

}  // namespace

std::unique_ptr<FusedExchange> board_exchange_for(const Schedule &s, MPI_Comm comm,
                                                  const AgreeComm *ac) {
  if (!ac || ac->outbox.empty() || s.steps.size() != 1 || s.steps[0]->kind != StepKind::kExchange)
    return nullptr;
  uint64_t bytes = s.esize;
  for (int64_t e : s.src.gshape) bytes *= (uint64_t)e;
  if (bytes > (uint64_t)ac->size * board_exchange_bytes()) return nullptr;
  size_t need = header_bytes(*ac);  // what this rank sends must fit its bank
  for (const Msg &m : s.steps[0]->sends) need += block_bytes(m.bytes);
  for (const MsgRun &r : s.steps[0]->send_runs)  // a compressed schedule (lm_reshard_estimate)
    need += block_bytes(r.first.bytes) * (size_t)r.count;
  if (need > ac->outbox_bank) return nullptr;
  std::vector<int> ranks = all_ranks_in(comm, ac->comm);  // agreement rank of each plan rank
  if (ranks.empty()) return nullptr;
  return std::make_unique<BoardExchange>(*s.steps[0], *ac, std::move(ranks));
}

}  // namespace lm
