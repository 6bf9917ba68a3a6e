// SPDX-License-Identifier: BSD-3-Clause
// What the fused exchanges (transport/node/board_exchange.cpp, transport/mpi/message_exchange.cpp)
// share for a reduce-scatter step that moves inside the agreement round: a chunk of the input made
// compact, and the k contributions of a group reduced in group order, as ReduceScatterRun does
// (exec/executor.cpp), so that the result has the transport's bits.
#pragma once

#include <cstring>
#include <vector>

#include "layout/boxcopy.hpp"
#include "layout/reduce.hpp"
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

}  // namespace lm
