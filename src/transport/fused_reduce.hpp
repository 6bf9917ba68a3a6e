// SPDX-License-Identifier: BSD-3-Clause
// What the fused exchanges (transport/node/board_exchange.cpp, transport/mpi/message_exchange.cpp)
// share for a reduce-scatter step that moves inside the agreement round: a chunk of the input made
// compact, and the k contributions of a group reduced in group order, as ReduceScatterRun does
// (exec/executor.cpp), so that the result has the transport's bits; and for P -> R in one round
// (each member's whole input to every other member, each reducing the k inputs in group order):
// which plans qualify, and the messages it moves instead of the plan's steps.
#pragma once

#include <cstring>
#include <vector>

#include "layout/boxcopy.hpp"
#include "layout/reduce.hpp"
#include "plan/planner.hpp"
#include "plan/schedule.hpp"

namespace lm {

// Chunk j of a reduce-scatter step's input `in` (expanded form), compact at dst.
inline void copy_rs_chunk(const SchedStep &st, int64_t j, const void *in, char *dst) {
  const Box &c = st.chunks[(size_t)j];
  const int64_t zero[kBoxMaxDims] = {0};
  BoxCopy bc;
  boxcopy_init(bc, (int)c.len.size(), c.len.data(), st.in_ext().data(),
               st.chunk_rel[(size_t)j].data(), c.len.data(), zero, (int64_t)st.esize);
  boxcopy_range(bc, dst, in, 0, bc.numel);
}

// This rank's own contribution to its chunk, compact: in place where it is one run of the input,
// else copied into scratch.
inline const char *own_rs_chunk(const SchedStep &st, const void *in, std::vector<char> &scratch) {
  size_t off = 0;
  const Box &mine = st.chunks[(size_t)st.mine];
  if (box_is_contiguous_at(st.inbox, st.in_ext(), mine, st.esize, &off))
    return static_cast<const char *>(in) + off;
  scratch.resize((size_t)mine.numel() * st.esize);
  copy_rs_chunk(st, st.mine, in, scratch.data());
  return scratch.data();
}

// out = the k contributions of the step's group (n elements each: this rank's own, the others'
// from(j)) reduced in group order; acc holds the 128-bit sums of an integer avg.
template <class From>
void reduce_in_group_order(const SchedStep &st, DType dt, const char *own, void *out, int64_t n,
                           std::vector<__int128> &acc, From from) {
  if (st.wide) acc.resize((size_t)n);
  for (int64_t j = 0; j < st.k; ++j) {
    const char *x = j == st.mine ? own : from(j);
    if (st.wide)
      wide_accumulate(dt, acc.data(), x, n, j == 0);
    else if (j == 0)
      std::memcpy(out, x, (size_t)n * st.esize);
    else
      reduce_into(dt, st.op, out, x, n);
  }
  if (st.wide)
    wide_finish_avg(dt, out, acc.data(), n, st.divide_by);
  else if (st.divide_by > 1)
    scale_avg(dt, out, n, st.divide_by);
}

// Group member j of a reduce-scatter step (either form: plan/schedule.hpp, lazy_members).
inline int64_t member_rank(const SchedStep &st, int64_t j) {
  return st.peers.empty() ? st.peer0 + j * st.peer_step : st.peers[(size_t)j];
}

inline uint64_t tensor_bytes(const Schedule &s) {
  uint64_t bytes = s.esize;
  for (int64_t e : s.src.gshape) bytes *= (uint64_t)e;
  return bytes;
}

// Whether the plan is P -> R along one mesh dim of one grid, every other placement the same, run
// as a reduce-scatter step and the exchange that gathers its chunks back: then every rank's input
// box is its output box, and one round can replace the two steps. Decided from the layouts (on
// other plans some ranks' boxes may match by chance), so every rank of the plan decides alike.
inline bool one_round_all_reduce(const Schedule &s) {
  const Layout &a = s.src, &b = s.dst;
  if (s.steps.size() != 2 || !a.grid || !b.grid || !a.grid->same_as(*b.grid) ||
      a.pl.size() != b.pl.size())
    return false;
  int reduced = 0;
  for (size_t m = 0; m < a.pl.size(); ++m) {
    if (a.pl[m].kind == LM_PARTIAL && b.pl[m].kind == LM_REPLICATE)
      ++reduced;
    else if (std::memcmp(&a.pl[m], &b.pl[m], sizeof a.pl[m]) != 0)
      return false;
  }
  const SchedStep &rs = *s.steps[0], &ag = *s.steps[1];
  // (Either form: the members of a compressed schedule's step are computed, not listed.)
  return reduced == 1 && rs.kind == StepKind::kReduceScatter && rs.member &&
         rs.in_pad.empty() && rs.out_pad.empty() && rs.out_str.empty() &&
         ag.kind == StepKind::kExchange && ag.out_pad.empty() && ag.out_str.empty() &&
         rs.inbox.off == ag.outbox.off && rs.inbox.len == ag.outbox.len;
}

// The messages of a one-round all-reduce of reduce-scatter step st (box: this rank's input bytes):
// the box to and from each other member of the group, reduced k - 1 times.
inline void all_reduce_traffic(const SchedStep &st, size_t box, Traffic *t) {
  t->flows.clear();
  for (bool send : {true, false})
    for (int64_t j = 0; j < st.k; ++j)
      if (j != st.mine && box) t->flows.push_back(Flow{0, (int)member_rank(st, j), send, box});
  t->bytes_reduced = box * (uint64_t)(st.k - 1);
  t->work_bytes = 0;
  t->staging_need = 0;
}

}  // namespace lm
