// SPDX-License-Identifier: BSD-3-Clause
// Byte runs: the contiguous stretches of memory a box of a compact row-major buffer covers. The
// node-local provider moves regions as runs (transport/node/), and grouped rounds precompute
// their parts' runs once, relative to each buffer (exec/group.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lm {

// One contiguous run of bytes.
struct Run {
  uint64_t addr;
  uint64_t bytes;
};
// The runs, in row-major element order, of the box (off, len) of a compact row-major buffer of
// extents `shape` at address base, elements of esize bytes (ndim 0: one element). Adjacent rows
// that are contiguous merge into one run.
void box_runs(uint64_t base, int ndim, const int64_t *shape, const int64_t *off, const int64_t *len,
              size_t esize, std::vector<Run> *out);
// Appends the run (addr, bytes) to v, merged into the last one where it continues it.
void append_run(std::vector<Run> &v, uint64_t addr, uint64_t bytes);

}  // namespace lm
