// SPDX-License-Identifier: BSD-3-Clause
// Agreements by messages (AgreeComm::by_messages): one round is one message from every rank of
// the set to every other, on the set's agreement communicator, tag kAgreeMsgTag. Each message
// starts with the sender's words (kRideHeader bytes); with a Ride it may carry the sender's block
// for the receiver after them. Every rank receives every message of the round whatever its size
// (probe, then receive into the room the receiver has for it or into a buffer of its own), so a
// round never waits for a message that is not coming and leaves none behind: ranks that ran
// different calls still meet, learn it from the words (the fingerprints differ) and go to the
// second round together. The words of every rank reach every rank, so the MAX each rank takes is
// the allreduce's. A block sent apart (Ride::apart) follows its words as a message of its own
// (the words' last word says so; MPI keeps one sender's messages of one tag in order), and the
// receiver takes it in the same round.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/agree.hpp"
#include "common/mpi.hpp"

namespace lm {

namespace {

constexpr int kWords = (int)(kRideHeader / sizeof(long long));  // 8: up to 7 values, and nv
constexpr long long kApart = 1LL << 40;  // in the last word: the sender's block follows apart

using Clock = std::chrono::steady_clock;

// Throws LM_ERR_MPI for a failed MPI call; the message is made only then ("<what>: <call>").
inline void check(int rc, const char *what, const char *call, int peer = -1) {
  if (rc == MPI_SUCCESS) return;
  std::string w = peer < 0 ? strfmt("%s: agreement: %s", what, call)
                           : strfmt("%s: agreement: %s (message of rank %d)", what, call, peer);
  mpi_check(rc, w.c_str());
}

[[noreturn]] void no_answer(const char *what, double timeout, const char *who) {
  fail(LM_ERR_TIMEOUT, "%s: agreement: no answer within LM_TIMEOUT = %g s%s", what, timeout, who);
}

bool expired(Clock::time_point t0, double timeout) {
  return timeout > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout;
}

// One round's sends: the words (and blocks when packed) to every other rank. The heap block
// `words` is what a header-only send reads, kept alive with the requests when abandoned.
struct Sends {
  std::vector<MPI_Request> req;
  std::shared_ptr<std::vector<long long>> words;
};

void post_sends(AgreeComm *ac, const long long *w, const Ride *ride, bool packed, Sends &s,
                const char *what) {
  s.words = std::make_shared<std::vector<long long>>(w, w + kWords);
  for (int k = 1; k < ac->size; ++k) {  // rank + 1 first: the peers' receives spread out
    const int p = (ac->rank + k) % ac->size;
    const char *buf = reinterpret_cast<const char *>(s.words->data());
    size_t bytes = kRideHeader;
    const char *apart = nullptr;
    if (packed) {
      apart = ride->apart[(size_t)p];  // (Rooms sizes it; set only for a block of 4 KiB or more)
      std::memcpy(ride->send[(size_t)p], w, kRideHeader);
      buf = ride->send[(size_t)p];
      if (apart) {
        const long long last = w[kWords - 1] | kApart;
        std::memcpy(ride->send[(size_t)p] + (kWords - 1) * sizeof(long long), &last, sizeof last);
      } else {
        bytes += ride->send_bytes[(size_t)p];
      }
    }
    MPI_Request r;
    check(MPI_Isend(buf, (int)bytes, MPI_BYTE, p, kAgreeMsgTag, ac->comm, &r), what, "MPI_Isend",
          p);
    s.req.push_back(r);
    if (!apart) continue;
    check(MPI_Isend(apart, (int)ride->send_bytes[(size_t)p], MPI_BYTE, p, kAgreeMsgTag, ac->comm,
                    &r), what, "MPI_Isend", p);
    s.req.push_back(r);
  }
}

// Receives the message of peer p matched by `msg` (count bytes) and folds its words into v.
// Returns whether its block landed in this rank's room for it; *apart: whether the block follows
// as a message of its own.
bool receive_one(int p, MPI_Message *msg, int count, long long *v, int nv,
                 const Ride *ride, const char *what, bool *apart) {
  if (count < (int)kRideHeader)
    fail(LM_ERR_INTERNAL, "%s: an agreement message of %d bytes from rank %d (at least %zu)",
         what, count, p, kRideHeader);
  char *dst = nullptr;
  std::vector<char> own;
  const bool fits = ride && (size_t)count == kRideHeader + ride->recv_bytes[(size_t)p];
  if (fits) {
    dst = ride->recv[(size_t)p];
  } else {
    own.resize((size_t)count);
    dst = own.data();
  }
  check(MPI_Mrecv(dst, count, MPI_BYTE, msg, MPI_STATUS_IGNORE), what, "MPI_Mrecv", p);
  long long w[kWords];
  std::memcpy(w, dst, kRideHeader);
  for (int i = 0; i < nv; ++i) v[i] = std::max(v[i], w[i]);
  *apart = (w[kWords - 1] & kApart) != 0;
  return fits && !*apart && ride->recv_bytes[(size_t)p] > 0;
}

// The block that peer p sent apart after its words (already on its way: waited for, with the
// deadline): into this rank's room for it where its size is the one expected, else dropped.
// Returns whether it landed.
bool receive_apart(AgreeComm *ac, int p, const Ride *ride, Clock::time_point t0, double timeout,
                   const char *what, const char *who) {
  int flag = 0;
  MPI_Message msg;
  MPI_Status st;
  for (unsigned spins = 1; !flag; ++spins) {
    check(MPI_Improbe(p, kAgreeMsgTag, ac->comm, &flag, &msg, &st), what, "MPI_Improbe", p);
    if (!flag && (spins & 63) == 0 && expired(t0, timeout))
      no_answer(what, timeout, who);
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  const bool fits = ride && count > 0 && (size_t)count == ride->recv_bytes[(size_t)p];
  std::vector<char> dropped;
  if (!fits) dropped.resize((size_t)count + 1);
  char *dst = fits ? ride->recv[(size_t)p] + kRideHeader : dropped.data();
  check(MPI_Mrecv(dst, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), what, "MPI_Mrecv", p);
  return fits;
}

// Receives one message from every other rank, in the order they come. Throws LM_ERR_TIMEOUT at
// the deadline (what is not received stays queued: the caller breaks the set).
void receive_all(AgreeComm *ac, long long *v, int nv, const Ride *ride, double timeout,
                 const char *what, const char *who) {
  std::vector<int> pending;
  for (int k = 1; k < ac->size; ++k) pending.push_back((ac->rank + ac->size - k) % ac->size);
  bool landed = true;
  size_t expected = 0;  // peers whose block this rank expects
  if (ride)
    for (int p : pending) expected += ride->recv_bytes[(size_t)p] > 0;
  size_t arrived = 0;
  const Clock::time_point t0 = Clock::now();
  unsigned spins = 0;
  while (!pending.empty()) {
    for (size_t i = 0; i < pending.size();) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      check(MPI_Improbe(pending[i], kAgreeMsgTag, ac->comm, &flag, &msg, &st), what,
            "MPI_Improbe", pending[i]);
      if (!flag) {
        ++i;
        continue;
      }
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      bool apart = false;
      arrived += receive_one(pending[i], &msg, count, v, nv, ride, what, &apart);
      if (apart) arrived += receive_apart(ac, pending[i], ride, t0, timeout, what, who);
      pending.erase(pending.begin() + (long)i);
    }
    if (!pending.empty() && (++spins & 63) == 0 && expired(t0, timeout))
      no_answer(what, timeout, who);
  }
  landed = arrived == expected;
  if (ride) ride->landed = landed;
}

// Completes the sends; at the deadline they are given up (kept in ac->abandoned with their words).
void finish_sends(AgreeComm *ac, Sends &s, double timeout, const char *what, const char *who) {
  if (timeout <= 0) {
    check(MPI_Waitall((int)s.req.size(), s.req.data(), MPI_STATUSES_IGNORE), what, "MPI_Waitall");
    return;
  }
  const Clock::time_point t0 = Clock::now();
  for (unsigned spins = 1;; ++spins) {
    int flag = 0;
    check(MPI_Testall((int)s.req.size(), s.req.data(), &flag, MPI_STATUSES_IGNORE), what,
          "MPI_Testall");
    if (flag) return;
    if ((spins & 63) == 0 && expired(t0, timeout)) {
      for (MPI_Request r : s.req)
        if (r != MPI_REQUEST_NULL) ac->abandoned.push_back({r, s.words});
      no_answer(what, timeout, who);
    }
  }
}

// One round: v[0..nv) becomes the MAX over the set. packed: this rank's blocks are in ride's
// send buffers and go with the words.
void msg_round(AgreeComm *ac, long long *v, int nv, double timeout, const char *what,
               const char *who, const Ride *ride, bool packed) {
  long long w[kWords];
  std::fill(w, w + kWords, LLONG_MIN);
  std::copy(v, v + nv, w);
  w[kWords - 1] = nv;
  Sends s;
  post_sends(ac, w, ride, packed, s, what);
  try {
    receive_all(ac, v, nv, ride, timeout, what, who);
  } catch (const Error &) {
    for (MPI_Request r : s.req)
      if (r != MPI_REQUEST_NULL) ac->abandoned.push_back({r, s.words});
    throw;
  }
  finish_sends(ac, s, timeout, what, who);
}

// A rank that gave up at its deadline says so to every other rank (never waiting): a rank that
// arrives later fails in its second round instead of going on alone.
void say_gave_up(AgreeComm *ac) {
  long long w[kWords];
  std::fill(w, w + kWords, LLONG_MIN);
  w[0] = 1;
  w[kWords - 1] = 1;
  auto words = std::make_shared<std::vector<long long>>(w, w + kWords);
  for (int p = 0; p < ac->size; ++p) {
    if (p == ac->rank) continue;
    MPI_Request r;
    if (MPI_Isend(words->data(), (int)kRideHeader, MPI_BYTE, p, kAgreeMsgTag, ac->comm, &r) ==
        MPI_SUCCESS)
      ac->abandoned.push_back({r, words});
  }
}

}  // namespace

void msg_max(AgreeComm *ac, long long *v, int nv, double timeout, const char *what,
             const char *who, Rounds rounds, const Ride *ride, bool packed) {
  if (nv > kWords - 1)
    fail(LM_ERR_INTERNAL, "%s: %d agreement words (at most %d)", what, nv, kWords - 1);
  if (ride) ride->landed = false;
  const bool two = timeout > 0 || rounds == Rounds::kAlwaysTwo;
  try {
    msg_round(ac, v, nv, timeout, what, who, ride, packed && !two);
  } catch (const Error &e) {
    if (e.status() == LM_ERR_TIMEOUT) say_gave_up(ac);
    throw;
  }
  if (!two) return;
  long long gave_up = 0;
  msg_round(ac, &gave_up, 1, timeout, what, who, nullptr, false);
  if (gave_up && timeout > 0)
    fail(LM_ERR_TIMEOUT, "%s: agreement: the other ranks gave up waiting before this rank arrived "
         "(LM_TIMEOUT = %g s); the mesh is unusable now", what, timeout);
  if (gave_up)
    fail(LM_ERR_TIMEOUT, "%s: agreement: some rank gave up waiting at its own deadline (LM_TIMEOUT or "
         "config->timeout; this rank has none) before this rank arrived", what);
}

}  // namespace lm
