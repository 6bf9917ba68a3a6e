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

namespace lm {

namespace {

size_t rounded(size_t bytes) { return (bytes + 63) / 64 * 64; }

class MessageExchange final : public FusedExchange {
 public:
  MessageExchange(const SchedStep &st, const AgreeComm &ac, const std::vector<int> &ranks)
      : st_(st), ranks_(ranks) {
    const size_t n = (size_t)ac.size;
    ride_.send_bytes.assign(n, 0);
    ride_.recv_bytes.assign(n, 0);
    for (const Msg &m : st.sends) ride_.send_bytes[(size_t)ranks[(size_t)m.peer]] = m.bytes;
    for (const Msg &m : st.recvs) ride_.recv_bytes[(size_t)ranks[(size_t)m.peer]] = m.bytes;
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

  // This rank's sends, each after the room for the words of its message.
  void pack(const void *in, char *) override {
    const int n = (int)st_.inbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.sends) {
      char *dst = ride_.send[(size_t)ranks_[(size_t)m.peer]] + kRideHeader;
      if (m.contiguous) {
        std::memcpy(dst, static_cast<const char *>(in) + m.off, m.bytes);
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
    if (!ride_.landed)
      fail(LM_ERR_MISMATCH, "reshard (message exchange): a rank sent a block of another size "
           "than this rank's plan expects: the ranks ran different reshards (with LM_CHECK=0 no "
           "agreement compares their arguments first)");
    const int n = (int)st_.outbox.len.size();
    const int64_t zero[kBoxMaxDims] = {0};
    for (const Msg &m : st_.recvs) {
      const char *src = ride_.recv[(size_t)ranks_[(size_t)m.peer]] + kRideHeader;
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

  const Ride *ride() const override { return &ride_; }

 private:
  struct alignas(64) Line {
    char b[64];
  };
  const SchedStep &st_;
  std::vector<int> ranks_;  // agreement rank of each rank of the plan's communicator
  std::vector<Line> send_, recv_;
  Ride ride_;
};

}  // namespace

std::unique_ptr<FusedExchange> message_exchange_for(const Schedule &s, MPI_Comm comm,
                                                    const AgreeComm *ac) {
  if (!ac || !ac->ride || !mpi_alive() || s.steps.size() != 1 ||
      s.steps[0]->kind != StepKind::kExchange || !s.steps[0]->send_runs.empty() ||
      !s.steps[0]->recv_runs.empty())
    return nullptr;
  uint64_t bytes = s.esize;
  for (int64_t e : s.src.gshape) bytes *= (uint64_t)e;
  if (bytes > (uint64_t)ac->size * setting_u(Setting::MessageExchangeBytes)) return nullptr;
  std::vector<int> ranks = all_ranks_in(comm, ac->comm);  // agreement rank of each plan rank
  if (ranks.empty()) return nullptr;
  const SchedStep &st = *s.steps[0];
  std::vector<int> seen((size_t)ac->size, 0);  // at most one message per peer and direction
  for (const Msg &m : st.sends)
    if (seen[(size_t)ranks[(size_t)m.peer]]++) return nullptr;
  std::fill(seen.begin(), seen.end(), 0);
  for (const Msg &m : st.recvs)
    if (seen[(size_t)ranks[(size_t)m.peer]]++) return nullptr;
  return std::make_unique<MessageExchange>(st, *ac, ranks);
}

}  // namespace lm
