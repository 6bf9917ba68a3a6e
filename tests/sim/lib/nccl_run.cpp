// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL: a group running on its stream's worker, like a NCCL kernel occupying the stream.
// Stricter than NCCL, on purpose:
//   - groups of one communicator run one after the other, in the order they were ended;
//   - a send moves no byte before its receive is posted (rendezvous: the peer's group holding the
//     matching receive is running), whatever its size, so an order that deadlocks NCCL for large
//     messages deadlocks here for every size;
//   - the operations of one group progress together;
//   - a receive checks the size of its send (a mismatch is fatal and reported);
//   - data of an aborted sender is never delivered (NCCL's abort drops data in flight);
//   - a group that makes no progress for CUDASIM_NCCL_TIMEOUT seconds is a hang: the watchdog
//     prints every rank's pending operations and fails the communicator (and, by default, aborts
//     the process: CUDASIM_NCCL_ON_ERROR=abort).
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "nccl_sim.hpp"

namespace cudasim {
namespace nccl {

namespace {

void ring_copy_in(char *ring, size_t cap, uint64_t pos, const char *src, size_t n) {
  size_t at = (size_t)(pos % cap), first = std::min(n, cap - at);
  std::memcpy(ring + at, src, first);
  std::memcpy(ring, src + first, n - first);
}

void ring_copy_out(const char *ring, size_t cap, uint64_t pos, char *dst, size_t n) {
  size_t at = (size_t)(pos % cap), first = std::min(n, cap - at);
  std::memcpy(dst, ring + at, first);
  std::memcpy(dst + first, ring, n - first);
}

// Sleeps until the bell rings, at most 20 ms or until `due` (a message becomes visible).
void wait_bell(RankInfo &me, uint32_t seen, double due) {
  double left = std::min(0.02, std::max(due - now_seconds(), 0.0));
  timespec ts{0, (long)(left * 1e9) + 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&me.bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

const char *state_name(int s) {
  switch (s) {
    case kJoined: return "";
    case kFinalized: return ", finalized";
    case kAborted: return ", ABORTED";
    case kDestroyed: return ", destroyed";
    default: return ", not joined";
  }
}

// Why op (of rank r) waits, from the shared state.
std::string pending_reason(CommState &c, int r, const OpInfo &o) {
  char buf[256];
  int p = o.peer;
  if (o.send) {
    Chan &ch = c.chan(r, p);
    uint64_t posted = ch.recvs_posted.load();
    if (o.phase.load() == kWaitPeer && posted <= o.seq)
      std::snprintf(buf, sizeof buf, "waits for rank %d to post its receive #%llu from rank %d "
                    "(it posted %llu)", p, (unsigned long long)o.seq, r, (unsigned long long)posted);
    else
      std::snprintf(buf, sizeof buf, "%llu bytes in flight, not yet received by rank %d",
                    (unsigned long long)(ch.head.load() - ch.tail.load()), p);
  } else if (c.ranks[p].state.load() == kAborted) {
    Chan &ch = c.chan(p, r);
    std::snprintf(buf, sizeof buf, "rank %d ABORTED its communicator with %llu bytes for rank %d "
                  "still in flight (NCCL's abort drops them: finalize first)", p,
                  (unsigned long long)(ch.head.load() - ch.tail.load()), r);
  } else {
    std::snprintf(buf, sizeof buf, "waits for rank %d's send #%llu to rank %d", p,
                  (unsigned long long)o.seq, r);
  }
  return buf;
}

// Every rank's state and pending operations, one report (the first rank to see the hang writes
// it; the lines of one rank are one write each).
void report_ranks(CommState &c, double stuck) {
  report("NCCL watchdog: communicator %s (%d ranks) made no progress for %.1f s "
         "(CUDASIM_NCCL_TIMEOUT); pending operations by rank:", c.name.c_str(), c.nranks, stuck);
  for (int r = 0; r < c.nranks; ++r) {
    RankInfo &ri = c.ranks[r];
    int pid = ri.pid.load();
    uint64_t g = ri.group.load();
    std::string line = "  rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                       (alive(pid) ? "" : ", process gone") + ", device " +
                       std::to_string(ri.device) + state_name(ri.state.load()) + "): ";
    if (!g) {
      line += "not in a group (" + std::to_string(ri.groups_done.load()) + " groups done)";
    } else {
      uint32_t n = ri.nops.load();
      line += "in group #" + std::to_string(g - 1) + " of " + std::to_string(n) + " transfers:";
      for (uint32_t i = 0; i < n && i < (uint32_t)kOpsShown; ++i) {
        const OpInfo &o = ri.ops[i];
        if (o.phase.load() == kDone) continue;
        std::string coll = o.coll;
        coll = coll == "send" || coll == "recv" ? "" : coll + ": ";
        line += "\n    " + coll + (o.send ? "send #" : "recv #") +
                std::to_string(o.seq) + (o.send ? " to rank " : " from rank ") +
                std::to_string(o.peer) + ", " + std::to_string(o.bytes) + " bytes: " +
                pending_reason(c, r, o);
      }
      if (n > (uint32_t)kOpsShown) line += "\n    (" + std::to_string(n - kOpsShown) + " more)";
    }
    report("%s", line.c_str());
  }
  report("a send completes only once its receive is posted: a receive whose send the peer issues "
         "in a later group than this one deadlocks on NCCL too (groups of one communicator run "
         "in order)");
}

// A fatal error seen by this rank: the first one of the communicator is recorded and reported;
// every rank's running group stops. CUDASIM_NCCL_ON_ERROR=abort ends the process.
void fatal(CommState &c, ncclResult_t code, const std::string &why, double stuck) {
  int32_t none = 0;
  bool first = c.hdr->error.compare_exchange_strong(none, (int32_t)code);
  if (first) {
    std::snprintf(c.hdr->why, sizeof c.hdr->why, "%s", why.c_str());
    c.hdr->reporter.store(c.rank + 1);
    report("NCCL rank %d: %s: %s", c.rank, ncclGetErrorString(code), why.c_str());
    if (stuck > 0) report_ranks(c, stuck);
  }
  ring_all(c);
  set_error(c, first ? code : ncclRemoteError, why);
  if (settings().nccl_abort) {
    report("NCCL rank %d: aborting the process (CUDASIM_NCCL_ON_ERROR=abort)", c.rank);
    std::abort();
  }
}

// Another rank recorded a fatal error: this rank's group stops too.
void peer_failed(CommState &c) {
  int rep = c.hdr->reporter.load() - 1;
  std::string why = "rank " + std::to_string(rep) + ": " + c.hdr->why;
  set_error(c, rep == c.rank ? (ncclResult_t)c.hdr->error.load() : ncclRemoteError, why);
  if (settings().nccl_abort) {
    report("NCCL rank %d: communicator failed (%s); aborting the process "
           "(CUDASIM_NCCL_ON_ERROR=abort)", c.rank, why.c_str());
    std::abort();
  }
}

// One step of a send; true if it moved something.
bool step_send(CommState &c, P2p &o, int group) {
  Chan &ch = c.chan(c.rank, o.peer);
  char *ring = c.ring(c.rank, o.peer);
  const size_t cap = c.ring_bytes;
  uint64_t head = ch.head.load(std::memory_order_relaxed), tail = ch.tail.load(std::memory_order_acquire);
  bool moved = false;
  if (o.phase == kWaitPeer) {
    if (c.sends_done[(size_t)o.peer] != o.seq) return false;           // earlier sends on the pair first
    if (ch.recvs_posted.load(std::memory_order_acquire) <= o.seq) return false;  // rendezvous
    if (cap - (head - tail) < sizeof(MsgHeader)) return false;
    MsgHeader h{kMsgMagic, o.seq, o.bytes, o.type, group,
                now_seconds() + settings().latency_us * 1e-6};
    ring_copy_in(ring, cap, head, reinterpret_cast<const char *>(&h), sizeof h);
    head += sizeof h;
    o.phase = kMoving;
    moved = true;
  }
  size_t n = std::min((size_t)(cap - (head - tail)), o.bytes - o.moved);
  ring_copy_in(ring, cap, head, o.buf + o.moved, n);
  o.moved += n;
  ch.head.store(head + n, std::memory_order_release);
  if (o.moved == o.bytes) {
    o.phase = kDone;
    ++c.sends_done[(size_t)o.peer];
  }
  moved |= n > 0;
  if (moved) ring_bell(c, o.peer);
  return moved;
}

// One step of a receive; true if it moved something. A size mismatch is fatal. A message is
// taken only from its `visible` time on (*due: the earliest such time still ahead), so a
// completed send stays in flight for a while, and an abort meanwhile drops it, as NCCL's can.
bool step_recv(CommState &c, P2p &o, double *due) {
  Chan &ch = c.chan(o.peer, c.rank);
  const char *ring = c.ring(o.peer, c.rank);
  const size_t cap = c.ring_bytes;
  if (c.recvs_done[(size_t)o.peer] != o.seq) return false;
  if (c.ranks[o.peer].state.load() == kAborted) return false;  // dropped: never delivered
  uint64_t head = ch.head.load(std::memory_order_acquire), tail = ch.tail.load(std::memory_order_relaxed);
  bool moved = false;
  if (o.phase == kWaitPeer) {
    if (head - tail < sizeof(MsgHeader)) return false;
    MsgHeader h;
    ring_copy_out(ring, cap, tail, reinterpret_cast<char *>(&h), sizeof h);
    if (h.magic == kMsgMagic && now_seconds() < h.visible) {
      *due = std::min(*due, h.visible);
      return false;
    }
    if (h.magic != kMsgMagic || h.seq != o.seq || h.bytes != o.bytes) {
      char why[512];
      std::snprintf(why, sizeof why, "size mismatch: rank %d's send #%llu to rank %d (group #%d) "
                    "is %llu bytes (%s), rank %d's receive #%llu (%s) from rank %d expects %zu bytes "
                    "(%s)", o.peer, (unsigned long long)h.seq, c.rank, h.group,
                    (unsigned long long)h.bytes, type_name(h.type), c.rank,
                    (unsigned long long)o.seq, o.coll, o.peer, o.bytes, type_name(o.type));
      fatal(c, ncclInvalidUsage, why, 0);
      return false;
    }
    tail += sizeof h;
    o.phase = kMoving;
    moved = true;
  }
  size_t n = std::min((size_t)(head - tail), o.bytes - o.moved);
  ring_copy_out(ring, cap, tail, o.buf + o.moved, n);
  o.moved += n;
  ch.tail.store(tail + n, std::memory_order_release);
  if (o.moved == o.bytes) {
    o.phase = kDone;
    ++c.recvs_done[(size_t)o.peer];
  }
  moved |= n > 0;
  if (moved) ring_bell(c, o.peer);
  return moved;
}

// Publishes the group for the watchdog and posts its receives (senders may start).
void start(CommState &c, Group &g) {
  RankInfo &me = c.ranks[c.rank];
  uint32_t n = (uint32_t)g.ops.size();
  for (uint32_t i = 0; i < n && i < (uint32_t)kOpsShown; ++i) {
    const P2p &o = g.ops[i];
    OpInfo &x = me.ops[i];
    x.peer = o.peer;
    x.send = o.send;
    x.bytes = o.bytes;
    x.seq = o.seq;
    x.phase.store(kWaitPeer);
    std::snprintf(x.coll, sizeof x.coll, "%s", o.coll);
  }
  me.nops.store(n);
  me.group.store(g.seq + 1);
  for (const P2p &o : g.ops) {
    if (o.send) continue;
    Chan &ch = c.chan(o.peer, c.rank);
    if (ch.recvs_posted.load() < o.seq + 1) ch.recvs_posted.store(o.seq + 1, std::memory_order_release);
    ring_bell(c, o.peer);
  }
}

// Moves the group's data until every transfer is done (true), or the communicator failed or was
// aborted, or the watchdog fired (false).
bool progress(CommState &c, Group &g) {
  RankInfo &me = c.ranks[c.rank];
  double last = now_seconds();
  for (;;) {
    uint32_t seen = me.bell.load(std::memory_order_acquire);
    bool all = true, moved = false;
    double due = 1e300;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      P2p &o = g.ops[i];
      if (o.phase == kDone) continue;
      moved |= o.send ? step_send(c, o, (int)g.seq) : step_recv(c, o, &due);
      if (i < (size_t)kOpsShown) me.ops[i].phase.store(o.phase);
      all &= o.phase == kDone;
    }
    if (all) return true;
    if (c.aborted.load()) return false;
    if (c.hdr->error.load()) {
      peer_failed(c);
      return false;
    }
    double t = now_seconds();
    if (moved) {
      last = t;
    } else if (t - last > settings().nccl_seconds) {
      char why[128];
      std::snprintf(why, sizeof why, "no progress in group #%llu for %.1f s (a hang)",
                    (unsigned long long)g.seq, t - last);
      fatal(c, ncclSystemError, why, t - last);
      return false;
    } else {
      wait_bell(me, seen, due);
    }
  }
}

// Waits until the communicator's earlier groups ran (they may sit on another stream); false when
// the communicator failed or was aborted meanwhile.
bool wait_turn(CommState &c, Group &g) {
  std::unique_lock<std::mutex> lk(c.mu);
  const double t0 = now_seconds();
  while (c.groups_done != g.seq) {
    if (c.aborted.load() || c.async != ncclSuccess) return false;
    c.cv.wait_for(lk, std::chrono::milliseconds(20));
    if (now_seconds() - t0 > settings().nccl_seconds && c.groups_done != g.seq) {
      lk.unlock();
      fatal(c, ncclSystemError, "group #" + std::to_string(g.seq) + " waited " +
            std::to_string((int)settings().nccl_seconds) + " s for group #" +
            std::to_string(c.groups_done) + " of the same communicator (on another stream?)", 0);
      return false;
    }
  }
  if (c.aborted.load() || c.async != ncclSuccess || c.hdr->error.load()) return false;
  c.executing = true;
  return true;
}

void finish(CommState &c) {
  RankInfo &me = c.ranks[c.rank];
  me.group.store(0);
  me.groups_done.fetch_add(1);
  std::lock_guard<std::mutex> lk(c.mu);
  ++c.groups_done;
  c.executing = false;
  c.cv.notify_all();
}

}  // namespace

void execute_group(Group &g) {
  CommState &c = *g.comm;
  if (!wait_turn(c, g)) {
    std::lock_guard<std::mutex> lk(c.mu);
    ++c.groups_done;  // skipped: the communicator failed or was aborted
    c.cv.notify_all();
    return;
  }
  start(c, g);
  if (progress(c, g))
    for (auto &f : g.post) f();
  finish(c);
}

}  // namespace nccl
}  // namespace cudasim
