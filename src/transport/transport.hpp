// SPDX-License-Identifier: BSD-3-Clause
// The transport seam: the wire. The reshard executor (exec/executor.cpp) walks a transport-free
// schedule (plan/schedule.hpp) and posts its messages through these few operations without
// knowing which transport moves the bytes: MPI (transport/mpi/, with the node-local provider of
// transport/node/ for peers on this node) or NCCL (transport/nccl/) for device memory. Which one
// runs a plan is decided in one place, transport/select.hpp, which also hands the executor the
// MemOps (mem/ops.hpp) of the same memory: copies, reductions and staging are not the wire's.
//
// Ownership. The caller (executor) owns every buffer it passes. A transport owns only its own
// bookkeeping (requests, cached datatypes, descriptors).
//
// Messages. The executor posts point-to-point messages: contiguous byte ranges (post_send /
// post_recv) or, when box_direct() says the transport can move a non-contiguous box in place
// (MPI subarray datatypes, node-local copies), a box of a local buffer (post_send_box /
// post_recv_box); block-cyclic pieces (post_*_pieces) and, for grouped rounds, messages whose
// parts lie in several buffers (post_*_parts) where pieces_mode / parts_direct allow. Each post
// returns a ticket; done(ticket, block) is the one place where completion is tested or waited
// for. Messages between a pair of ranks with one tag match in posting order on both sides. flush() ends a batch of posts (NCCL: ncclGroupEnd).
//
// Failure. A transport throws lm::Error on failure: it first tells its peers (the abort notices
// of transport/failure.hpp), waits poll for their notices and for the call's deadline, and
// LM_FAULT's transport faults fire at its posts. check_errors() reports failures a transport
// learns of late (NCCL's asynchronous errors). The caller marks its meshes broken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "layout/boxcopy.hpp"
#include "layout/runs.hpp"
#include "plan/collective.hpp"
#include "plan/schedule.hpp"

namespace lm {

struct Ride;
struct Traffic;

// A box inside a compact local buffer, in the buffer's own coordinates.
struct BoxRef {
  int ndim = 0;
  const int64_t *shape = nullptr;  // the buffer's extents
  const int64_t *off = nullptr;    // the box's offset in it
  const int64_t *len = nullptr;    // the box's extents
  size_t esize = 0;
  // >= 0: names this box within the plan (the same box at every execution), so a transport may
  // keep per-box state (MPI: the committed datatype) until it is destroyed; -1: no reuse.
  int64_t id = -1;
};

// A pieces step's message (plan/schedule.hpp, PieceMsg) in this side's compact local buffer: the
// row-major product of per-dim runs at offsets `a` (the sender's input) and `b` (the receiver's
// output); both ranks hold the same list.
struct PiecesRef {
  const PieceMsg *msg = nullptr;
  const int64_t *shape = nullptr;  // this side's buffer extents (msg->dims.size() of them)
  size_t esize = 0;
};

// A message made of several buffers (post_send_parts / post_recv_parts: a grouped round's boxes
// of many entries for one peer) as this side's byte runs, in message order. bytes: their sum.
struct PartsRef {
  const Run *runs = nullptr;
  size_t n = 0;
  size_t bytes = 0;
};
// Room a sender offers beyond the message's bytes in post_send_parts' spill buffer, per run (and
// once more; at most an eighth of the bytes more): where a transport may align spilled runs and
// keep its own list of the runs.
constexpr size_t kPartsSpillPerRun = 48;

// One collective over every rank of a transport's communicator (post_collective): a step the
// executor runs whole where plan/collective.hpp found its form. in and out are this rank's
// buffers (or staging), blocks in communicator rank order.
struct CollOp {
  CollKind kind = CollKind::kNone;
  const void *in = nullptr;
  void *out = nullptr;
  size_t bytes = 0;  // all-gather, all-to-all: bytes per block
  size_t count = 0;  // reduce-scatter: elements per block; all-reduce: elements in all
  DType dt = DType::F32;
  int op = 0;        // reductions: the op (avg adds; the caller divides)
};

class Transport {
 public:
  using Ticket = int64_t;
  virtual ~Transport() = default;
  virtual const char *name() const = 0;

  // ---- Messages
  virtual Ticket post_send(const void *p, size_t bytes, int peer, int tag) = 0;
  virtual Ticket post_recv(void *p, size_t bytes, int peer, int tag) = 0;
  // Whether post_*_box can move this (non-contiguous) box in place, without staging. Must give the
  // same answer on every rank for the same box (the message boundaries depend on it only through
  // the schedule's split, never on the answer, but pipelining decisions do).
  // send: the box is sent (else received).
  virtual bool box_direct(const BoxRef &b, bool send) const {
    (void)b, (void)send;
    return false;
  }
  virtual Ticket post_send_box(const void *buf, const BoxRef &b, int peer, int tag) = 0;
  virtual Ticket post_recv_box(void *buf, const BoxRef &b, int peer, int tag) = 0;
  // How a pieces message travels: kPiecesPacked (the sender packs it into a contiguous buffer,
  // the receiver receives one and unpacks it), kPiecesPlaced (the sender packs; the receiver's
  // transport puts the bytes straight into its pieces: post_recv_pieces) or kPiecesDirect (neither
  // packs: post_send_pieces and post_recv_pieces, one copy between the two buffers). Must give the
  // same answer on both ranks of the message (the sender's side of its protocol depends on it).
  enum PiecesMode { kPiecesPacked = 0, kPiecesPlaced = 1, kPiecesDirect = 2 };
  virtual PiecesMode pieces_mode(const PiecesRef &p, int peer) {
    (void)p, (void)peer;
    return kPiecesPacked;
  }
  // Only where pieces_mode said so: the message from (kPiecesDirect) or into (kPiecesPlaced,
  // kPiecesDirect) this side's buffer at buf.
  virtual Ticket post_send_pieces(const void *buf, const PiecesRef &p, int peer, int tag) {
    (void)buf, (void)p, (void)peer, (void)tag;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport moves no pieces directly", name());
  }
  virtual Ticket post_recv_pieces(void *buf, const PiecesRef &p, int peer, int tag) {
    (void)buf, (void)p, (void)peer, (void)tag;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport moves no pieces directly", name());
  }
  // Messages of several buffers (a grouped round's boxes of many entries for one peer): whether
  // a message of `bytes` whose boxes have `rows` rows in all (elements over innermost extent: a
  // bound on its runs both sides compute alike from the boxes' extents) moves straight between
  // the two sides' buffers, neither packing (post_send_parts / post_recv_parts), or the caller
  // packs it into bytes. Must give the same answer on both ranks of the message: it may depend
  // on the peer, the rows and the bytes, not on where the parts lie.
  virtual bool parts_direct(size_t bytes, size_t rows, int peer) {
    (void)bytes, (void)rows, (void)peer;
    return false;
  }
  // Only where parts_direct said so: the runs, in order, as one message. spill: a buffer of
  // spill_bytes (at least the bytes; kPartsSpillPerRun) the sender's transport may copy runs
  // into, where the receiver reads them faster from there (node-local: small runs outside the
  // shared arena, and the list of the runs).
  virtual Ticket post_send_parts(const PartsRef &m, int peer, int tag, void *spill,
                                 size_t spill_bytes) {
    (void)m, (void)peer, (void)tag, (void)spill, (void)spill_bytes;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport moves no parts directly", name());
  }
  virtual Ticket post_recv_parts(const PartsRef &m, int peer, int tag) {
    (void)m, (void)peer, (void)tag;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport moves no parts directly", name());
  }
  // Held messages of several buffers (a grouped round's reduce-scatter chunks, which are only
  // read): where parts_holds(), post_recv_parts_held is post_recv_parts whose bytes may be read
  // where the sender keeps them. Once parts_readable(t) says so, parts_view(t) gives them in
  // message order as runs readable here (the sender's, mapped here, or m's own runs if they were
  // copied there); the message completes (the sender may go on) only at parts_release(t). A
  // readable test never waits on this rank's sends, so ranks holding each other's messages do
  // not deadlock: each reads, releases, then waits for its sends.
  virtual bool parts_holds() const { return false; }
  virtual Ticket post_recv_parts_held(const PartsRef &m, int peer, int tag) {
    return post_recv_parts(m, peer, tag);
  }
  virtual bool parts_readable(Ticket t, bool block) { return done(t, block); }
  virtual const std::vector<Run> &parts_view(Ticket t) {
    (void)t;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport holds no messages", name());
  }
  virtual void parts_release(Ticket t) { (void)t; }
  virtual void flush() {}
  // ---- Collectives (the NCCL transport's), where coll_size() > 0. Every answer must be the same
  // on every rank of the communicator: the executor decides from them without asking the peers.
  // The ranks of the communicator collectives run over (0: none).
  virtual int coll_size() const { return 0; }
  // The communicator rank of plan rank `peer` (-1: not in it).
  virtual int coll_rank(int peer) const {
    (void)peer;
    return -1;
  }
  // Whether it has collective k for dtype t and reduce op `op` (reductions only).
  virtual bool coll_offers(CollKind k, DType t, int op) const {
    (void)k, (void)t, (void)op;
    return false;
  }
  // Posts the collective in this batch (the next flush() issues it); its ticket completes as a
  // message's does.
  virtual Ticket post_collective(const CollOp &c) {
    (void)c;
    fail(LM_ERR_INTERNAL, "reshard: the %s transport has no collectives", name());
  }
  // Whether staging may be bounded (LM_STAGING_BYTES) and pipelined through rings, so that a
  // step's messages are posted in several batches. false: every message of a step must be posted
  // before the step's one flush() (NCCL: batches are groups, and the groups of one stream run in
  // order, so a receive in one group whose send the peer posts in a later group never completes);
  // then each step's staging holds all of its staged bytes at once. Same on every rank of a plan.
  virtual bool bounded_staging() const { return true; }
  // Called at the start of each execution: blocking (lm_reshard_plan_execute, reshard, gather ...)
  // or not (lm_reshard_plan_start). The MPI transport's node-local path runs in blocking ones only:
  // it completes a send only when the receiver's library copies it, which a nonblocking caller
  // may not give it until much later. Same on every rank of an execution (they agreed on the call).
  virtual void begin_execution(bool blocking) { (void)blocking; }
  // Tests (block = false) or waits for (block = true) one posted message; true when complete.
  virtual bool done(Ticket t, bool block) = 0;
  // Tests or waits for every ticket from `first` on (all posted since the last reset()); true
  // when all are complete. The default asks done() ticket by ticket.
  virtual bool done_from(Ticket first, bool block) {
    for (Ticket t = first; t < posted(); ++t)
      if (!done(t, block)) return false;
    return true;
  }
  // Tickets posted since the last reset() (tickets are numbered from 0 in posting order).
  virtual Ticket posted() const = 0;
  // Forgets every ticket (all complete): called when a step completes.
  virtual void reset() = 0;

  // Reports a failure the transport learned of after the fact (NCCL: asynchronous errors, once
  // the work is enqueued): throws; nothing otherwise.
  virtual void check_errors(const char *what) { (void)what; }
};

// An exchange whose data travels inside the agreement round that precedes it (the board exchange
// of transport/node/board_exchange.hpp): given by transport/select.hpp for a plan that can take
// it, else NULL. pack() runs with this rank's outbox bank right before the rank publishes its
// agreement words; after a round in which every rank packed, unpack() copies this rank's blocks
// out of its peers' banks and does the plan's local copies: the execution is then complete.
class FusedExchange {
 public:
  virtual ~FusedExchange() = default;
  virtual void pack(const void *in, char *bank) = 0;
  virtual void unpack(const void *in, void *out) = 0;
  // Over MPI (the message exchange): where the blocks ride in the agreement's messages, for the
  // agreement round (AgreeArgs::ride); NULL for the board exchange.
  virtual const Ride *ride() const { return nullptr; }
  // Where the round moves other messages than the plan's steps (the message exchange's one-round
  // all-reduce): true, and where t is not NULL, t's flows (step 0, plan-communicator ranks) and
  // reductions set to them (lm_reshard_plan_info reports what moves).
  virtual bool traffic(Traffic *t) const {
    (void)t;
    return false;
  }
};

}  // namespace lm
