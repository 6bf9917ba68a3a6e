// SPDX-License-Identifier: BSD-3-Clause
// A reshard *schedule*: what one rank does, step by step, to go from one layout to another,
// with no reference to a transport (no MPI, no CUDA). Built by the pure planner (plan.cpp) in
// O(peers) time and memory; walked by the executor (exec.cpp) through a Transport
// (transport/transport.hpp).
//
// Steps, each reading the previous step's output (the first reads the source shard):
//   Exchange       any layout without pending reductions -> any other: boxes sent to and received
//                  from peers, boxes copied locally (offsets relative to the local buffers).
//   ReduceScatter  Partial(op) on mesh dim m -> Shard(d) innermost on m: in a group of k ranks,
//                  group index j receives chunk j of everyone's input and reduces the k
//                  contributions in group order 0, 1, ..., k-1 (deterministic results).
//   PartialInit    Replicate -> Partial(op) in place (identity fill on non-zero coordinates).
//   Pieces         to or from a block-cyclic layout (no pending reductions on either side): per
//                  peer, the row-major product of per-dim runs (plan/cyclic.hpp), packed into
//                  one message; local runs copied.
// Local buffers are row-major arrays of this rank's box of the step's input or output: compact, or
// (the plan's first input and last output, schedule_pad) padded rows of a larger array; the last
// output may instead be strided (schedule_stride_out: a transposed array).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "layout/boxcopy.hpp"
#include "layout/layout.hpp"
#include "layout/runs.hpp"

namespace lm {

// One box exchanged with one peer (at most one per ordered pair of ranks and step).
struct Msg {
  int peer = -1;       // rank in the plan's communicator
  Box box;             // global coordinates
  Shape rel;           // the box's offset inside the local buffer
  size_t bytes = 0;
  bool contiguous = false;  // one run of the local buffer, starting at byte `off`
  size_t off = 0;
  // Posting order: messages are posted by increasing key, (peer - me) mod 2^31 for sends and
  // (me - peer) mod 2^31 for receives, so that pipelined staging always progresses (the
  // globally smallest pending key is posted on both sides).
  int64_t key = 0;
};

// Messages to `count` peers at a regular rank stride, as one entry (a compressed schedule,
// build_schedule's ScheduleForm::kCompressed): message i is `first` with its peer moved by
// i * peer_step, its key by i * key_step, and its box (and offsets) by i * box_step along tensor
// dim `dim` (dim < 0: the same box). Contiguity is the same for every message of a run.
struct MsgRun {
  Msg first;
  int64_t count = 0;
  int64_t peer_step = 0, key_step = 0;
  int dim = -1;
  int64_t box_step = 0;
  int64_t off_step = 0;  // bytes, when first.contiguous
  Msg at(int64_t i) const;
};

struct LocalCopy {
  Box box;              // global coordinates
  Shape in_rel, out_rel;  // offsets inside the input and output local buffers
};

// A Pieces step's message, or its local copy: per tensor dim, the runs of the intersection of two
// ranks' holdings in increasing global order (the same list on both ranks), with their offsets in
// this rank's input (`a`: sends, copies) and output (`b`: receives, copies) local buffers. A run
// may be strided: `count` repetitions of `len` indices, repetition r at a + r as and b + r bs
// (whole blocks met alike: one run, not one per block). The pieces are the row-major product of
// the runs, each piece's elements row-major over its dims with a strided run as two (repetition,
// index); a message packs them in that order.
struct PieceRun {
  int64_t len = 0, a = 0, b = 0;
  int64_t count = 1, as = 0, bs = 0;
  int64_t total() const { return len * count; }
};
struct PieceMsg {
  int peer = -1;  // rank in the plan's communicator (the copy: this rank)
  std::vector<std::vector<PieceRun>> dims;
  size_t bytes = 0;
  int64_t pieces() const;
};

// The box copy of piece `idx` (one run index per dim) of m, from one side to the other. A side is
// a compact local buffer of extents `shape` at the runs' offsets `a` (use_a) or `b`, or, with
// shape NULL, the piece's own compact staging (its elements in message order). Dims contiguous
// on both sides merge, as boxcopy_init merges them.
void piece_boxcopy(BoxCopy &c, const PieceMsg &m, const int64_t *idx, const int64_t *src_shape,
                   bool src_a, const int64_t *dst_shape, bool dst_a, int64_t esize);
// The dims of piece `idx` of m as piece_boxcopy walks them (a strided run as two; at most
// 2 * kBoxMaxDims): their extents and element strides in a buffer whose tensor dims have element
// strides str, the piece at the runs' offsets `a` (use_a) or `b` (*base: the element offset of
// its first element); str NULL: the piece's compact staging (*base 0). Returns the number of dims.
int piece_strides(const PieceMsg &m, const int64_t *idx, const int64_t *str, bool use_a,
                  int64_t *len, int64_t *stride, int64_t *base);

enum class StepKind { kExchange, kReduceScatter, kPartialInit, kPieces };

struct SchedStep {
  StepKind kind = StepKind::kExchange;
  Layout in_layout, out_layout;
  int tag = 0;             // distinguishes the steps' messages
  size_t esize = 0;        // element bytes
  int64_t bytes_sent = 0;  // by this rank
  Box inbox, outbox;       // this rank's boxes of input / output (zero extents when none)
  // Set by schedule_pad (planner.hpp) where the step's input or output is a padded shard (a
  // strided borrow, tensor/tensor.hpp): the extents of the row-major array it lies in, at offset
  // 0, >= the box's extents. Empty: the buffer is compact, of the box's own extents.
  Shape in_pad, out_pad;
  const Shape &in_ext() const { return in_pad.empty() ? inbox.len : in_pad; }
  const Shape &out_ext() const { return out_pad.empty() ? outbox.len : out_pad; }
  // Set by schedule_stride_out (planner.hpp) on the last moving step when the output is written
  // with its dims permuted (lm_dist_tensor_transpose): the element strides, per dim of the output
  // box, of the array it lies in. Every element then lands through a copy from this rank's input
  // or staging (no receive into place, no board). Empty: row-major (out_ext()).
  Shape out_str;

  // Exchange
  std::vector<Msg> sends, recvs;  // sorted by key
  // Compressed form only: runs of messages not in sends / recvs (expand_schedule moves them there).
  std::vector<MsgRun> send_runs, recv_runs;
  std::vector<LocalCopy> selfs;
  bool skip_self = false;  // the step before wrote the input in place inside the output (fused)

  // ReduceScatter (this rank is group index `mine` of k along mesh dim `m`)
  bool member = false;
  int m = -1, d = -1;
  int64_t k = 1, mine = 0;
  // Set when the target splits d into ragged blocks (nothing else splits d): chunk j is block j
  // of these extents, not torch.chunk's.
  std::shared_ptr<const Extents> rag;
  std::vector<int> peers;   // rank per group index
  std::vector<Box> chunks;  // per group index, global coordinates: chunk j is reduced on peers[j]
  std::vector<Shape> chunk_rel;        // per group index, offset inside the input box
  std::vector<int64_t> order;          // group indices != mine by send key (posting order)
  // Compressed form only (lazy_members): peers, chunks, chunk_rel, order and chunks_contiguous
  // are not filled; on an affine grid peers[j] = peer0 + j * peer_step (else peers is filled).
  bool lazy_members = false;
  int64_t peer0 = 0, peer_step = 0;
  bool chunks_contiguous = false;      // every chunk is one run of the input (same on all members)
  // With in_pad: every chunk is one run of this rank's padded input (chunks_contiguous stays what
  // the members agree on: it sizes the segments, which both sides of a message must share).
  bool chunks_contiguous_in_pad = false;
  bool chunks_in_one_run() const { return in_pad.empty() ? chunks_contiguous : chunks_contiguous_in_pad; }
  int op = 0;               // reduce op (avg is a sum; divide_by > 1 divides)
  int64_t divide_by = 0;    // > 1: avg, divide by this after the sum
  bool wide = false;        // integer avg: accumulate in 128 bits

  // PartialInit
  bool fill = false;  // fill the output with op's identity
  int64_t fill_n = 0;

  // Pieces (sends and receives by peer; at most one local copy)
  std::vector<PieceMsg> psends, precvs, pselfs;

  bool in_place() const { return kind == StepKind::kPartialInit; }
  // Messages of an exchange step in each direction, runs included.
  int64_t send_count() const;
  int64_t recv_count() const;
  // The runs of the box (off, len) of this step's output at address base: where the output is
  // compact, one run (the box must be a contiguous range of it: a split's sub-box, or the whole
  // output box); where it is padded (out_pad), the rows it covers there.
  void out_runs(uint64_t base, const int64_t *off, const int64_t *len, std::vector<Run> *runs) const;
  // True when, on this rank, the output is a contiguous slice of the input at *byte_off and the
  // step moves nothing (Replicate -> Shard): the caller may alias instead of copying.
  bool alias_offset(size_t *byte_off) const;
  // True when this rank's whole input is a local copy into one contiguous region of the output
  // at *byte_off: the step before may write straight there.
  bool input_lands_contiguously(size_t *byte_off) const;
  std::string describe() const;
};

// Whether `box` (global coordinates) is one contiguous run inside a compact local buffer of
// `local`; if so, sets *byte_off.
bool box_is_contiguous_in(const Box &local, const Box &box, size_t esize, size_t *byte_off);
// The same inside a buffer of extents `ext` (>= local.len) whose element 0 is local's origin.
bool box_is_contiguous_at(const Box &local, const Shape &ext, const Box &box, size_t esize,
                          size_t *byte_off);

}  // namespace lm
