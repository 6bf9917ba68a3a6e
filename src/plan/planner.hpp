// SPDX-License-Identifier: BSD-3-Clause
// The reshard planner: a pure function from (source layout, target layout, dtype, this rank) to
// this rank's Schedule (plan/schedule.hpp) in O(peers) time and memory. No MPI, no CUDA (the
// layer test, tools/check-layers.py, holds it to that), no buffer whose size depends on the tensor:
// a unit test can plan for one rank of a million-rank mesh. Ranks are the ranks of the plan's
// communicator (the meshes' common parent); the executor (exec/plan.hpp) adds the communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "layout/layout.hpp"
#include "plan/schedule.hpp"

namespace lm {

struct Schedule {  // (copy_schedule copies each field: a new one goes there too)
  int me = -1;  // this process's rank among the layouts' grid ranks
  Layout src, dst;
  DLDataType dtype{};
  DType dt{};
  size_t esize = 0;
  bool involved = false;  // this rank holds data in the source or the target
  std::vector<std::unique_ptr<SchedStep>> steps;
  std::vector<size_t> work_bytes;  // > 0: step i's output is an intermediate buffer of this size
  size_t last_moving = 0;          // index of the last step that is not in place
  std::vector<int64_t> fused;      // >= 0: step i writes into step i+1's output here
  int64_t bytes_sent = 0;
  bool compressed = false;  // built as ScheduleForm::kCompressed and not expanded yet
  std::string describe() const;
};

// The form build_schedule leaves a schedule in.
//   kExpanded    what the executor walks: one Msg per peer and the reduce-scatter's per-member
//                vectors. Built as kCompressed, then expanded: O(peers).
//   kCompressed  the planner's own output: peers at a regular stride holding whole chunks as one
//                MsgRun, reduce-scatter members computed from the grid: O(runs) time and memory,
//                under a millisecond for a rank with 2^20 peers. schedule_traffic, describe and
//                bytes_sent take it as it is; expand_schedule makes it executable.
//   kReference   expanded without runs, one coordinate at a time (the enumeration the runs must
//                reproduce exactly: tests compare the two).
enum class ScheduleForm { kExpanded, kCompressed, kReference };

// What one rank's schedule moves (lm_reshard_plan_info): one flow per peer, step and direction,
// the bytes of that step's box or chunk. The executor may post a flow as several MPI messages
// (staged pieces under LM_STAGING_BYTES, 1 GiB pieces, reduce-scatter segments): the bytes and
// the (peer, step) pairs are what a transport sees, whatever the pieces.
struct Flow {
  int step = 0;
  int peer = -1;
  bool send = false;
  uint64_t bytes = 0;
};
struct Traffic {
  std::vector<Flow> flows;      // by step, sends before receives
  uint64_t bytes_copied = 0;    // this rank's boxes copied from its input to its output
  uint64_t bytes_reduced = 0;   // other ranks' contributions combined into this rank's chunks
  uint64_t work_bytes = 0;      // intermediate step outputs held during an execution
  // The most one step can stage: the bytes it sends and receives, plus a 128-bit accumulator per
  // element of an integer average (the executor stages no more, and at most LM_STAGING_BYTES).
  uint64_t staging_need = 0;
};
// Either form (a compressed schedule's runs give their flows one by one).
Traffic schedule_traffic(const Schedule &s);

// Throws when no reshard leads from src to dst (shapes, Partial ops, dtype vs op); every rank,
// involved or not, runs this check so that all agree.
void check_reshard(const Layout &src, const Layout &dst, DType dt);

// Fills `out` with this rank's schedule. Pure. Throws LM_ERR_INVALID_ARGUMENT /
// LM_ERR_NOT_SUPPORTED for impossible reshards.
void build_schedule(Schedule &out, const Layout &src, const Layout &dst, DLDataType dtype, int me,
                    ScheduleForm form = ScheduleForm::kExpanded);

// Turns a compressed schedule into the expanded form (the same as building it kExpanded).
void expand_schedule(Schedule &s);

// A deep copy of s into out (its steps copied, not shared).
void copy_schedule(Schedule &out, const Schedule &s);

// Makes an expanded schedule run on padded shards: in_pad / out_pad (NULL: compact) are the
// extents of the row-major arrays that the source and the target shard lie in (each >= the box's
// extents, as many dims). Sets the first step's in_pad and the last moving step's out_pad, works
// out again which of their messages (and a reduce-scatter's chunks) are contiguous there, and
// unfuses a step that would write into the padded output. A reduce-scatter or a Partial fill
// writing the padded output then writes its box's rows (SchedStep::out_runs); they take
// `min_run` bytes at least (shorter rows would cost a call each: a compact copy is cheaper).
// False, leaving s unusable, where their rows are shorter or a pad does not fit its box.
bool schedule_pad(Schedule &s, const Shape *in_pad, const Shape *out_pad, size_t min_run = 1);
// Makes an expanded schedule write its output through element strides out_str (one per tensor
// dim, a permutation of the row-major strides of this rank's output box: a transposed array):
// sets the last moving step's out_str (the executor then stages every receive of that step and
// copies it into place), and the step before it no longer writes into the output. Returns false, leaving s partly changed, where the output is
// written by a reduce-scatter or a Partial fill, or s is compressed.
bool schedule_stride_out(Schedule &s, const Shape &out_str);

}  // namespace lm
