// SPDX-License-Identifier: BSD-3-Clause
// The transport seam. The reshard executor (reshard/plan.cpp) walks a transport-free schedule
// (reshard/schedule.hpp) and calls these few operations without knowing which transport moves
// the bytes: MPI today (transport/mpi.cpp), NCCL or a host-staged path for device memory next.
//
// Ownership. The caller (executor) owns every buffer it passes: the source and target shards,
// intermediate step outputs and staging. Staging memory is obtained from the transport
// (staging_take / staging_give) at execution and given back when the step completes, so a
// transport decides where staging lives (host pool, pinned host, device pool). A transport owns
// only its own bookkeeping (requests, cached datatypes, streams).
//
// Messages. The executor posts point-to-point messages: contiguous byte ranges (post_send /
// post_recv) or, when box_direct() says the transport can move a non-contiguous box in place
// (MPI subarray datatypes), a box of a local buffer (post_send_box / post_recv_box). Each post
// returns a ticket; done(ticket, block) is the one place where completion is tested or waited for
// (for MPI: MpiTransport::complete). Messages between a pair of ranks with one tag match in
// posting order on both sides. flush() ends a batch of posts (NCCL: ncclGroupEnd).
//
// Local work. copy (box copies between local buffers, restricted to a range of box element
// numbers: reshard/boxcopy.hpp), reduce, identity fill and the avg helpers run where the
// transport's memory is (host loops for MPI; kernels on a stream for NCCL).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "reshard/boxcopy.hpp"

namespace lm {

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
  virtual bool box_direct(const BoxRef &b) const {
    (void)b;
    return false;
  }
  virtual Ticket post_send_box(const void *buf, const BoxRef &b, int peer, int tag) = 0;
  virtual Ticket post_recv_box(void *buf, const BoxRef &b, int peer, int tag) = 0;
  virtual void flush() {}
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

  // ---- Local work (buffers in the transport's memory space)
  // Copies box elements [e0, e1) of c (boxcopy.hpp) from src to dst.
  virtual void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) = 0;
  // acc[i] = op(acc[i], in[i]) for n elements (avg accumulates a sum).
  virtual void reduce(DType t, int op, void *acc, const void *in, int64_t n) = 0;
  virtual void scale_avg(DType t, void *acc, int64_t n, int64_t k) = 0;
  virtual void fill_identity(DType t, int op, void *buf, int64_t n) = 0;
  // Integer avg through a 128-bit accumulator (16 bytes per element).
  virtual void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) = 0;
  virtual void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) = 0;

  // ---- Staging (never zero-filled; contents undefined)
  virtual void *staging_take(size_t bytes, size_t *cap) = 0;
  // Gives back a buffer of capacity cap taken for `bytes`.
  virtual void staging_give(void *p, size_t cap, size_t bytes) = 0;
};

}  // namespace lm
