// SPDX-License-Identifier: BSD-3-Clause
// Argument agreement of collective calls (docs/DESIGN.md, "Failure model").
//
// Every collective entry point builds a Fingerprint of what it was asked (operation, meshes, layouts,
// root, flags ...) and calls agree() before any data moves. agree() is one small allreduce (MAX of
// a few 64-bit words: the lowest failing rank, the min and max of the fingerprint hash, and any
// values the caller wants maximised). Only when a rank failed or the hashes differ, a second round
// (one allgather of a fixed record per rank) finds the failing rank's status and message, or which
// field differs on which ranks, so that every rank throws the same kind of error:
//   the failing ranks their own error, the others LM_ERR_REMOTE "rank R (mesh rank M) failed: ..."
//   or, all of them, LM_ERR_MISMATCH "fn: ranks disagree on <field>: rank 0 [S(0)], rank 1 [S(1)]".
//
// Agreements run on an *agreement communicator* shared by every mesh over the same set of
// processes (MPI_Comm_create_group over MPI_COMM_WORLD, cached for the life of the process), so
// that ranks which passed different meshes over the same processes still meet in one collective
// and learn that they disagree, instead of each waiting in its own mesh's communicator.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "localmap.h"

namespace lm {

constexpr int kMaxFields = 14;
// The most values an agreement maximises besides its own three words (AgreeArgs::nmax).
constexpr int kMaxAgreeMaxes = 4;

// A communicator for agreements over one set of processes. Shared, never freed before
// MPI_Finalize (a local free on one rank could leave the ranks with different caches).
struct AgreeComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = -1, size = 0;
  uint64_t seq = 0;  // agreements so far: every rank of the set takes part in each
  bool broken = false;
  std::string broken_why;
  // Ranks of comm on this node whose memory this process reads directly (comm/node.hpp):
  // found once, when the set is first seen; empty = the node-local path is not used. What they
  // can do: kernel copies, mapping each other's arenas (agreed per node).
  std::vector<int> node_peers;
  bool node_kernel = false, node_mapped = false;
  // No rank of the set has node peers (agreed: the same on every rank): the host transfers are
  // all MPI messages, and even steps may run as MPI collectives (LM_MPI_COLLECTIVES=auto).
  bool node_nowhere = false;
  // Agreements by messages (agree.cpp, msg_max): a set of 2 to LM_AGREE_MESSAGES ranks without a
  // board agrees by one message from each rank to every other instead of an allreduce, and small
  // plan executions send their data in those messages (transport/mpi/message_exchange.hpp).
  // Decided once the set's settings are agreed and its board is known: the same on every rank.
  bool by_messages = false;
  // With by_messages and LM_MESSAGE_EXCHANGE_BYTES > 0: small plans' data rides the messages.
  bool ride = false;
  // With ride, where every rank of the set shares one node: a block that is one run of its
  // sender's input goes as a message of its own (Ride::apart), which shared-memory MPI copies
  // once, instead of being copied after the words (over TCP a second message costs more).
  bool ride_apart = false;
  // The agreement board (comm/board.hpp, board_max): shared memory that every rank of the
  // set maps, when they all share one node; NULL = agreements are MPI allreduces. The same on
  // every rank of the set.
  void *board = nullptr;
  // Collective requests of agreements this rank gave up at its deadline, with the buffers MPI may
  // still read or write: kept until they complete, so no request outlives its buffers. While one
  // is pending the communicator is not freed (not even at MPI_Finalize).
  struct Abandoned {
    MPI_Request req;
    std::shared_ptr<void> keep;
  };
  std::vector<Abandoned> abandoned;
  // With the board, each rank's outbox (comm/board.hpp; the board exchange of transport/node/): per rank of the set,
  // where its two banks of outbox_bank bytes are mapped here; empty = no board exchange.
  std::vector<char *> outbox;
  size_t outbox_bank = 0;
};

// The agreement communicator of the processes of `group` (a group of `base`). Collective over
// those processes the first time that set is seen: the communicator is created, the set agrees
// on its must-agree settings (settings_agree), then finds its node peers and board
// (comm/node.hpp). A cache lookup afterwards. fn and timeout: for messages and the deadline of
// the first agreement.
AgreeComm *agree_comm_for(MPI_Comm base, MPI_Group group, const char *fn, double timeout);

// Agreement channels. With MPI_THREAD_MULTIPLE, threads may use distinct meshes at once, so
// every mesh (and every pair of meshes of a cross-mesh call) agrees on channels of its own:
// private_agree_comm. Otherwise meshes over one process set share that set's channel
// (agree_comm_for), so that ranks which passed different meshes or parents over the same
// processes meet in one collective and learn that they disagree (with private channels such a
// mistake waits, until LM_TIMEOUT).
bool private_channels();
// A new agreement communicator over the processes of `comm` (a duplicate; collective over comm):
// the settings agreed first when `settings`, then the node probe and board. The caller owns it
// (free_agree_comm).
AgreeComm *private_agree_comm(MPI_Comm comm, const char *fn, double timeout, bool settings);
// The same over the processes of `group` of `base` (MPI_Comm_create_group: collective over the
// group's processes only).
AgreeComm *private_agree_comm_of(MPI_Comm base, MPI_Group group, const char *fn, double timeout);
// Local. One whose abandoned requests may still use it is kept (freed at MPI_Finalize).
void free_agree_comm(AgreeComm *ac);

// Collective over ac->comm: returns when every rank has the same must-agree settings
// (common/settings.hpp); otherwise throws LM_ERR_MISMATCH on every rank, naming the first
// variable that differs and each rank's value (world ranks). timeout > 0: LM_ERR_TIMEOUT when some
// rank does not arrive.
void settings_agree(AgreeComm *ac, const char *fn, double timeout);

// FNV-1a style mixing.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void *p, size_t n) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 1099511628211ull;
    }
  }
  void u64(uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 1099511628211ull;
  }
};

uint64_t hash_placements(const lm_placement_t *pl, int n);  // NULL: a fixed value
uint64_t hash_shape(const int64_t *s, int n);               // NULL: a fixed value
uint64_t hash_dtype(DLDataType d);

// What a collective call was asked: up to kMaxFields named 64-bit hashes. Field 0 is the
// operation. describe(i) (given to agree()) turns field i into text on the error path only.
class Fingerprint {
 public:
  explicit Fingerprint(const char *op);
  void add(const char *name, uint64_t hash) {
    if (n_ < kMaxFields) {
      names_[n_] = name;
      hashes_[n_++] = hash;
    }
  }
  int size() const { return n_; }
  const char *name(int i) const { return names_[i]; }
  uint64_t hash(int i) const { return hashes_[i]; }
  uint64_t total() const;

 private:
  int n_ = 0;
  const char *names_[kMaxFields];
  uint64_t hashes_[kMaxFields];
};

// Text of field i on this rank (error path only). Field 0 (operation) and the sequence number
// are described by agree() itself.
using DescribeFn = std::string (*)(const void *ctx, int field);

// How many MPI rounds an agreement's maximum takes (mpi_max).
enum class Rounds { kByDeadline, kAlwaysTwo };

// The tag of agreement messages on AgreeComm::comm (the only point-to-point messages there).
constexpr int kAgreeMsgTag = 0x7f4c;  // above the transport's step, ack and done tags
// Bytes before each block of an agreement message: the agreement's words.
constexpr size_t kRideHeader = 64;

// Data that rides an agreement by messages (a FusedExchange over MPI: transport/mpi/
// message_exchange.hpp). Per agreement rank: this rank's message to it (send[r]: kRideHeader bytes
// for the words, then send_bytes[r] bytes of block) and the room for the message from it (recv[r],
// the same layout, recv_bytes[r]). A message of another size is received into a buffer of its own
// and its block dropped; landed says whether every block this rank expects arrived in its room. A
// block may instead go as a message of its own right after the words, straight out of the sender's
// memory (apart[r], set per call; NULL: after the words in send[r]); the words say so, and the
// receiver takes that message too, into the same room.
struct Ride {
  std::vector<char *> send, recv;
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<const char *> apart;
  mutable bool landed = false;
};

struct AgreeArgs {
  const char *fn = "";             // entry point, for messages
  AgreeComm *ac = nullptr;         // where to agree
  const Fingerprint *fp = nullptr; // NULL: only the failure is agreed (LM_CHECK=0)
  DescribeFn describe = nullptr;
  const void *ctx = nullptr;
  lm_status_t local = LM_SUCCESS;  // this rank's outcome so far
  const std::string *err = nullptr;
  int parent_rank = -1;            // for messages: this rank in the mesh's parent communicator
  long long mesh_rank = -1;        // and in the mesh (-1: none, e.g. cross-mesh)
  long long *maxes = nullptr;      // values to maximise over the ranks (in place)
  int nmax = 0;                    // at most kMaxAgreeMaxes
  double timeout = 0;              // seconds; 0: wait for ever
  // kAlwaysTwo while the ranks' deadlines are not agreed yet (mesh creation): see mpi_max.
  Rounds rounds = Rounds::kByDeadline;
  long long root = -1;             // mesh rank of the call's root, named so in messages
  // With the board (AgreeComm::outbox): called with this rank's outbox bank of the round right
  // before the rank publishes its words, so that every rank that sees the round completed may
  // read it (the board exchange of small reshards, transport/node/board_exchange.hpp).
  // By messages (AgreeComm::by_messages): publish(ctx, nullptr) packs this rank's blocks into
  // ride's send buffers right before the words go out with them (never with a deadline).
  void (*publish)(void *ctx, char *bank) = nullptr;
  void *publish_ctx = nullptr;
  const Ride *ride = nullptr;
};

// Collective over a.ac. Returns on success on every rank; otherwise throws on every rank:
// this rank's own error where it failed, LM_ERR_REMOTE (with the lowest failing rank's status
// name and the start of its message) on the others, or LM_ERR_MISMATCH everywhere. An MPI failure
// or a deadline (LM_ERR_MPI, LM_ERR_TIMEOUT) breaks a.ac for good and is rethrown: the caller
// breaks its meshes (mesh/collective.hpp).
void agree(const AgreeArgs &a);

// The status name without its description ("LM_ERR_USER").
std::string status_name(lm_status_t s);

// Waits for `req` (a collective request on ac->comm), polling with the deadline when timeout > 0.
// On expiry the request and `keep` (the buffers it uses) go to ac->abandoned, and it throws
// LM_ERR_TIMEOUT "<what>: no answer within T s<who>".
void wait_or_abandon(AgreeComm *ac, MPI_Request *req, std::shared_ptr<void> keep, double timeout,
                     const char *what, const char *who = "");
// A MAX over v[0..nv) across ac's ranks through MPI (nv <= 8). Without a deadline one
// MPI_Allreduce. With one (timeout > 0) two rounds, so that a rank arriving after the others gave
// up fails too: the values, then whether any rank gave up (a rank that gives up at its deadline
// still posts its second round, saying so, and never waits for it). Throws LM_ERR_TIMEOUT (and
// LM_ERR_MPI); the caller breaks ac.
// Rounds::kAlwaysTwo: two rounds whatever this rank's timeout (a rank without one waits for ever
// in each). For the collectives that run before the ranks have agreed their deadline (a new
// set's settings, mesh creation's own agreement): every rank then makes the same collectives
// whatever its own LM_TIMEOUT or config->timeout, so that one rank's deadline cannot leave it a
// round behind the others.
void mpi_max(AgreeComm *ac, long long *v, int nv, double timeout, const char *what,
             const char *who, Rounds rounds = Rounds::kByDeadline);

// The same MAX by messages (AgreeComm::by_messages; comm/agree_msg.cpp): one message from every
// rank to every other per round, the same rounds as mpi_max. With a ride, packed says that this
// rank's blocks are in ride->send (they go with its words, in the first round only, never with a
// deadline); ride->landed says afterwards whether every block it expects arrived in its room.
void msg_max(AgreeComm *ac, long long *v, int nv, double timeout, const char *what,
             const char *who, Rounds rounds, const Ride *ride, bool packed);

}  // namespace lm
