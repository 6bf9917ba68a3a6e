// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL internals. A communicator is one POSIX shared-memory segment named in its unique
// id, mapped by every rank (processes of one machine):
//   Header | RankInfo[n] | Chan[n * n] | ring[n * n][ring_bytes]
// Chan (a, b) carries a's sends to b through ring (a, b): a byte ring with cumulative head
// (written by a) and tail (read by b); each message starts with a MsgHeader naming its pair
// sequence number and size, which the receiver checks against its receive. A rank waiting for
// anything sleeps on its RankInfo::bell (a futex), which whoever changes what it waits for bumps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "sim.hpp"

namespace cudasim {
namespace nccl {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics in shared memory");

constexpr int kOpsShown = 16;  // per rank, in watchdog reports

enum RankState : int32_t { kAbsent = 0, kJoined, kFinalized, kAborted, kDestroyed };
enum Phase : int32_t { kWaitPeer = 0, kMoving = 1, kDone = 2 };

// One operation of the group a rank executes, as the others see it (watchdog reports).
struct OpInfo {
  int32_t peer;
  int32_t send;  // 1 send, 0 recv
  uint64_t bytes;
  uint64_t seq;  // sequence number on the pair (the k-th send from a to b matches b's k-th recv)
  std::atomic<int32_t> phase;
  char coll[16];  // "send", "recv", "allreduce", ...
};

struct RankInfo {
  std::atomic<int32_t> pid;    // 0: not joined yet
  std::atomic<int32_t> state;  // RankState
  int32_t device;
  char bus[32];
  char host[64];
  std::atomic<uint32_t> bell;   // futex word: bumped when something this rank may wait for changed
  std::atomic<uint64_t> group;  // the group it executes + 1; 0: none
  std::atomic<uint64_t> groups_done;
  std::atomic<uint32_t> nops;   // ops of that group (the first kOpsShown are in ops[])
  OpInfo ops[kOpsShown];
};

struct Chan {
  std::atomic<uint64_t> recvs_posted;  // receives b posted for a (b's k-th receive: >= k + 1)
  std::atomic<uint64_t> head;          // bytes a wrote into the ring, ever
  std::atomic<uint64_t> tail;          // bytes b read, ever
};

struct Header {
  std::atomic<int32_t> nranks;  // 0 until the first rank sets it; the others check it
  std::atomic<uint32_t> ring_bytes;
  std::atomic<int32_t> joined;
  std::atomic<int32_t> error;     // first fatal error (ncclResult_t) of the communicator
  std::atomic<int32_t> reporter;  // rank + 1 that reported it
  char why[1024];
};

struct MsgHeader {
  uint64_t magic;
  uint64_t seq;
  uint64_t bytes;
  int32_t type;  // ncclDataType_t of the sender (for messages)
  int32_t group;
  double visible;  // steady-clock time from which the receiver may take it (delivery latency)
};
constexpr uint64_t kMsgMagic = 0x6d73672d63756461ull;

// One point-to-point transfer of a group (collectives expand into these).
struct P2p {
  bool send;
  int peer;
  char *buf;
  size_t bytes;
  int type;
  uint64_t seq = 0;  // on the pair, assigned at ncclGroupEnd
  const char *coll;  // "send", "recv", "allgather", ...
  int phase = kWaitPeer;
  size_t moved = 0;
};

struct CommState;

// What ncclGroupEnd hands to a stream: transfers, then local steps (reductions).
struct Group {
  std::shared_ptr<CommState> comm;
  std::vector<P2p> ops;
  std::vector<std::function<void()>> post;
  std::vector<std::unique_ptr<char[]>> tmp;  // receive buffers of reductions (host memory)
  std::vector<Touch> touches;
  StreamRef stream;
  uint64_t seq = 0;  // the communicator's group number
};

// A rank's view of a communicator. The handle (ncclComm_t) points to a small object holding it,
// so that work still queued on streams keeps it alive after ncclCommAbort/Destroy.
struct CommState {
  int rank = 0, nranks = 0, device = 0;
  bool blocking = true;
  std::string name;  // of the shared-memory segment
  Header *hdr = nullptr;
  size_t map_len = 0;
  size_t ring_bytes = 0;
  RankInfo *ranks = nullptr;
  Chan *chans = nullptr;
  char *rings = nullptr;

  std::atomic<int> init{ncclInProgress};  // outcome of the join
  std::thread init_thread;
  std::atomic<bool> aborted{false};

  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  ncclResult_t async = ncclSuccess;
  std::string last_error;
  std::vector<uint64_t> sends_issued, recvs_issued;  // per peer, at ncclGroupEnd
  uint64_t groups_issued = 0;
  uint64_t groups_done = 0;
  bool executing = false;
  std::vector<std::unique_ptr<Group>> deferred;  // non-blocking: ended, not enqueued yet
  double deferred_ready = 0;
  bool finalizing = false;
  // Per peer, progress of the executing rank (the worker only).
  std::vector<uint64_t> sends_done, recvs_done;

  Chan &chan(int from, int to) { return chans[(size_t)from * (size_t)nranks + (size_t)to]; }
  char *ring(int from, int to) { return rings + ((size_t)from * (size_t)nranks + (size_t)to) * ring_bytes; }
  ~CommState();
};

// comm.cpp
bool comm_valid(ncclComm_t c);
std::shared_ptr<CommState> state_of(ncclComm_t c);
void set_error(CommState &c, ncclResult_t r, const std::string &msg);
ncclResult_t api_error(CommState *c, ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void flush_deferred(CommState &c, bool force);
void enqueue_group(std::unique_ptr<Group> g);  // on its stream, as one operation
void ring_bell(CommState &c, int rank);
void ring_all(CommState &c);
const char *type_name(int t);
size_t type_size(int t);  // 0: not simulated

// log.cpp: one accepted call (cudasimNcclCalls, CUDASIM_NCCL_LOG); bytes: this rank's side.
void record_call(const char *call, const CommState &c, size_t count, int type, int op, int peer,
                 size_t bytes);

// run.cpp: the group as a stream operation.
void execute_group(Group &g);
void reduce_into(int type, int op, char *dst, const char *tmp, size_t count, int nranks);

}  // namespace nccl
}  // namespace cudasim
