// SPDX-License-Identifier: BSD-3-Clause
#include "comm/board.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/settings.hpp"
#include "mem/arena.hpp"

namespace lm {

namespace {

// The agreement board (node.hpp): one cache line per rank and bank.
constexpr int kBoardValues = 3 + kMaxAgreeMaxes;
struct alignas(64) BoardSlot {
  uint64_t seq;
  long long v[kBoardValues];
};
static_assert(sizeof(BoardSlot) == 64, "one cache line per slot");


// Collective over ac->comm, right after the board: every rank's outbox, mapped by all.
void outbox_setup(AgreeComm *ac) {
  if (board_exchange_bytes() == 0) return;
  // A rank sends at most about the whole tensor (S->R: its shard to every peer; twice that
  // covers uneven chunks); a rank whose sends do not fit says so in the round.
  const size_t hdr = ((size_t)ac->size * 16 + 63) / 64 * 64;
  const size_t bank = hdr + 2 * (size_t)ac->size * board_exchange_bytes() + (size_t)ac->size * 64;
  struct Info {
    ArenaId id;
    uint64_t off;
    int32_t ok, pad;
  } me{};
  size_t cap = 0;
  void *mine = arena_alloc(2 * bank, &cap);
  if (mine) {
    me.id = arena_self();
    me.off = arena_offset(mine, 2 * bank);
    me.ok = me.id.fd >= 0 && me.off != UINT64_MAX;
  }
  std::vector<Info> all((size_t)ac->size);
  int ok = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE,
                         ac->comm) == MPI_SUCCESS;
  std::vector<char *> boxes((size_t)ac->size, nullptr);
  for (int r = 0; ok && r < ac->size; ++r) {
    const Info &x = all[(size_t)r];
    if (!x.ok) {
      ok = 0;
    } else if (r == ac->rank) {
      boxes[(size_t)r] = static_cast<char *>(mine);
    } else if (char *peer = arena_peer_pin(x.id, x.off, 2 * bank, false)) {  // read only
      boxes[(size_t)r] = peer;
    } else {
      ok = 0;
    }
  }
  int every = 0;
  if (MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, ac->comm) == MPI_SUCCESS && every) {
    ac->outbox = std::move(boxes);
    ac->outbox_bank = bank;
  } else if (mine) {
    arena_free(mine, cap);
  }
}

}  // namespace

// Every rank takes the same branches: the node peers are agreed per node, the settings per set,
// and here every rank of the set is on this one node.
void board_setup(AgreeComm *ac) {
  if (!setting_on(Setting::AgreeBoard) || ac->size < 2 || !ac->node_mapped ||
      (int)ac->node_peers.size() != ac->size - 1)
    return;
  struct Info {
    ArenaId id;
    uint64_t off;
    int32_t ok, pad;
  } info{};
  // Two banks of slots, then one state line per bank (board_max: arrivals and abandonment).
  const size_t bytes = sizeof(BoardSlot) * 2 * (size_t)ac->size + 2 * sizeof(BoardSlot);
  size_t cap = 0;
  void *mine = nullptr;
  if (ac->rank == 0 && (mine = arena_alloc(bytes, &cap)) != nullptr) {
    std::memset(mine, 0, bytes);
    info.id = arena_self();
    info.off = arena_offset(mine, bytes);
    info.ok = info.id.fd >= 0 && info.off != UINT64_MAX;
  }
  if (MPI_Bcast(&info, (int)sizeof info, MPI_BYTE, 0, ac->comm) != MPI_SUCCESS) info.ok = 0;
  char *base = nullptr;
  if (info.ok) {
    if (ac->rank == 0) {
      base = static_cast<char *>(mine);
    } else {  // every rank writes its slots: read-write
      base = arena_peer_pin(info.id, info.off, bytes, true);
    }
  }
  int ok = base != nullptr, all = 0;
  if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, ac->comm) == MPI_SUCCESS && all)
    ac->board = base;
  else if (mine)
    arena_free(mine, cap);
  if (ac->board) outbox_setup(ac);
}

size_t board_exchange_bytes() { return (size_t)setting_u(Setting::BoardExchangeBytes); }

namespace {

// The state word of a bank: the round (low 40 bits of seq), an "abandoned" bit, and how many
// ranks arrived. Arriving and abandoning are CASes on it, so they are ordered: either every rank
// arrived before a rank gave up waiting (then nobody can give up: the round completes), or the
// give-up came first (then every rank, late ones included, fails the round). A rank gives up only
// at its deadline; the round is then abandoned for good (the agreement communicator is broken).
constexpr int kSeqShift = 24;
constexpr uint64_t kAbandoned = uint64_t(1) << 23, kCountMask = kAbandoned - 1;
constexpr uint64_t kSeqMask = (uint64_t(1) << (64 - kSeqShift)) - 1;

uint64_t *bank_state(AgreeComm *ac, uint64_t seq) {
  BoardSlot *states = static_cast<BoardSlot *>(ac->board) + 2 * (size_t)ac->size;
  return reinterpret_cast<uint64_t *>(&states[seq & 1]);
}
uint64_t round_of(uint64_t s) { return s >> kSeqShift; }

// who: ", waiting for ..." (missing_ranks) when another rank gave up.
[[noreturn]] void round_abandoned(const char *what, double timeout, bool late,
                                  const std::string &who = std::string()) {
  fail(LM_ERR_TIMEOUT, "%s: agreement: %s%s (LM_TIMEOUT = %g s); the mesh is unusable now", what,
       late ? "the other ranks gave up waiting before this rank arrived"
            : "another rank gave up waiting for a rank that did not make this call",
       who.c_str(), timeout);
}

// This rank arrives at round seq (false: the round was abandoned before it came).
bool arrive(uint64_t *st, uint64_t seq) {
  const uint64_t r = seq & kSeqMask;
  uint64_t s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
  for (;;) {
    uint64_t next;
    if (round_of(s) == r) {
      if (s & kAbandoned) return false;
      next = s + 1;
    } else {  // the word holds a round two before this one: this rank is the first of the round
      next = r << kSeqShift | 1;
    }
    if (__atomic_compare_exchange_n(st, &s, next, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return true;
  }
}

// At the deadline: true when this rank may give up (not every rank arrived; the round is now
// abandoned, or another rank already abandoned it); false when every rank arrived (the round will
// complete: wait on).
bool give_up(uint64_t *st, uint64_t seq, int size) {
  const uint64_t r = seq & kSeqMask;
  uint64_t s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
  for (;;) {
    if (round_of(s) != r || (s & kAbandoned)) return true;
    if ((s & kCountMask) >= (uint64_t)size) return false;
    if (__atomic_compare_exchange_n(st, &s, s | kAbandoned, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return true;
  }
}

bool abandoned(const uint64_t *st, uint64_t seq) {
  uint64_t s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
  return round_of(s) == (seq & kSeqMask) && (s & kAbandoned);
}

}  // namespace

namespace {

// ", waiting for rank(s) R of MPI_COMM_WORLD": the ranks of the set that had not posted round
// seq when this rank gave up (at most 8 named; empty when they cannot be named).
std::string missing_ranks(const AgreeComm *ac, const BoardSlot *bank, uint64_t seq) {
  std::vector<int> late;
  for (int j = 0; j < ac->size; ++j)
    if (j != ac->rank && __atomic_load_n(&bank[j].seq, __ATOMIC_ACQUIRE) != seq) late.push_back(j);
  if (late.empty()) return std::string();
  std::vector<int> world(late.size(), MPI_UNDEFINED);
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  if (MPI_Comm_group(ac->comm, &g) == MPI_SUCCESS &&
      MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS)
    MPI_Group_translate_ranks(g, (int)late.size(), late.data(), wg, world.data());
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  std::string who;
  for (size_t i = 0; i < world.size() && i < 8; ++i) {
    if (world[i] == MPI_UNDEFINED) return std::string();
    who += strfmt("%s %d", i ? "," : "", world[i]);
  }
  if (world.size() > 8) who += ", ...";
  return strfmt(", waiting for rank%s%s of MPI_COMM_WORLD", late.size() > 1 ? "s" : "",
                who.c_str());
}

}  // namespace

void board_max(AgreeComm *ac, uint64_t seq, long long *v, int nv, double timeout,
               const char *what, void (*publish)(void *, char *), void *publish_ctx) {
  if (nv > kBoardValues) fail(LM_ERR_INTERNAL, "%s: %d agreement values (board: %d)", what, nv,
                              kBoardValues);
  BoardSlot *bank = static_cast<BoardSlot *>(ac->board) + (size_t)(seq & 1) * (size_t)ac->size;
  BoardSlot &me = bank[ac->rank];
  uint64_t *st = bank_state(ac, seq);
  if (!arrive(st, seq)) round_abandoned(what, timeout, true);
  if (publish && !ac->outbox.empty())
    publish(publish_ctx, ac->outbox[(size_t)ac->rank] + (size_t)(seq & 1) * ac->outbox_bank);
  for (int i = 0; i < nv; ++i) __atomic_store_n(&me.v[i], v[i], __ATOMIC_RELAXED);
  __atomic_store_n(&me.seq, seq, __ATOMIC_RELEASE);
  std::chrono::steady_clock::time_point t0;
  if (timeout > 0) t0 = std::chrono::steady_clock::now();
  bool deadline_on = timeout > 0;
  unsigned spins = 0;
  for (int j = 0; j < ac->size; ++j) {
    if (j == ac->rank) continue;
    while (__atomic_load_n(&bank[j].seq, __ATOMIC_ACQUIRE) != seq) {
      if (++spins < 8) continue;
      sched_yield();  // let the peers run (ranks may outnumber cores)
      if ((spins & 63) == 0) {  // keep MPI moving: a nonblocking plan may need this rank's sends
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, ac->comm, &flag, MPI_STATUS_IGNORE);
      }
      if (!deadline_on || (spins & 255) != 0) continue;
      if (abandoned(st, seq)) round_abandoned(what, timeout, false, missing_ranks(ac, bank, seq));
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
        if (give_up(st, seq, ac->size))
          fail(LM_ERR_TIMEOUT,
               "%s: agreement: no answer within LM_TIMEOUT = %g s%s (some rank of the mesh did "
               "not make this call)", what, timeout, missing_ranks(ac, bank, seq).c_str());
        deadline_on = false;  // every rank arrived: the round completes
      }
    }
    for (int i = 0; i < nv; ++i)
      v[i] = std::max(v[i], __atomic_load_n(&bank[j].v[i], __ATOMIC_RELAXED));
  }
}

}  // namespace lm
