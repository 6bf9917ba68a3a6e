// SPDX-License-Identifier: BSD-3-Clause
// Which steps of a schedule can run as one collective of a transport's communicator (NCCL's), and
// how: a pure function of the schedule's global layouts and the communicator's ranks, so that
// every rank of a plan decides alike without a word exchanged (a rank that issued a collective
// where a peer posted messages would wait for ever). The executor (exec/executor.cpp) asks it once
// per plan and route; steps it declines run as messages.
//   all-gather      an exchange to Replicate from a layout whose blocks (one per communicator rank,
//                   in rank order) are of equal size and tile the tensor: straight into the output
//                   where block r is its r-th contiguous slice, else into staging then copied out;
//   reduce-scatter  a reduce-scatter over all the communicator's ranks (group index = rank) whose
//                   chunks are of equal size: straight from the input where chunk j is its j-th
//                   contiguous slice, else packed into staging first;
//   all-reduce      a reduce-scatter followed by the all-gather of its chunks (Partial ->
//                   Replicate): both steps as one collective of the whole buffer, whatever the
//                   chunks (an all-reduce needs no even split, nor the split's dim);
//   all-to-all      an exchange Shard(a) -> Shard(b) on a 1-D mesh with both dims divisible by the
//                   mesh size (every pair's block the same size), where the communicator has one;
//                   blocks packed / unpacked through staging where they are not contiguous in
//                   rank order.
// A padded input or a padded or strided output (a rank's own variant of the plan) takes the form
// of the plain schedule, through staging: every rank decides on what they all share.
// Everything else (uneven, ragged, block-cyclic, cross-mesh plans, a
// group that is not the whole communicator, integer avg, dtypes or ops the communicator does not
// reduce) runs as the step's messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "layout/layout.hpp"

namespace lm {

struct Schedule;

enum class CollKind { kNone, kAllGather, kReduceScatter, kAllReduce, kAllToAll };
const char *coll_name(CollKind k);

// The communicator collectives would run over.
struct CollComm {
  int size = 0;                                  // its ranks (0: no collectives)
  std::function<int(int)> rank_of;               // plan rank -> its rank there (-1: none)
  std::function<bool(CollKind, int op)> offers;  // it has this collective (for the plan's dtype)
};

// A block of this rank's buffer: its offset in the buffer and extents.
struct CollBlock {
  Shape off, len;
};

struct CollForm {
  CollKind kind = CollKind::kNone;
  int n = 0;             // communicator ranks: blocks per buffer
  int64_t count = 0;     // elements per block (all-reduce: of the whole buffer)
  size_t steps = 1;      // schedule steps it runs (an all-reduce: the reduce-scatter and the next)
  bool pack = false;     // the input's blocks are copied into staging in rank order first
  bool unpack = false;   // the output's blocks arrive in staging in rank order, then copied out
  std::vector<CollBlock> in_blocks;   // with pack: block r in this rank's input buffer
  std::vector<CollBlock> out_blocks;  // with unpack: block r in this rank's output buffer
  int op = 0;            // reductions: the op (avg adds)
  int64_t divide_by = 0; // > 1: avg, divide the result by this
};

// The form of step i of s (expanded) over communicator cc; kind kNone where it has none.
CollForm collective_form(const Schedule &s, size_t i, const CollComm &cc);

}  // namespace lm
