// SPDX-License-Identifier: BSD-3-Clause
#include "layout/runs.hpp"

namespace lm {

void box_runs(uint64_t base, int ndim, const int64_t *shape, const int64_t *off, const int64_t *len,
              size_t esize, std::vector<Run> *out) {
  out->clear();
  for (int i = 0; i < ndim; ++i)
    if (len[i] == 0) return;
  if (ndim == 0) {
    out->push_back({base, esize});
    return;
  }
  // Row-major strides in bytes.
  int64_t stride[64];
  stride[ndim - 1] = (int64_t)esize;
  for (int i = ndim - 2; i >= 0; --i) stride[i] = stride[i + 1] * shape[i + 1];
  // The innermost dims a run covers: d..ndim-1 (dims after d whole).
  int d = ndim - 1;
  while (d > 0 && len[d] == shape[d]) --d;
  const uint64_t run = (uint64_t)len[d] * (uint64_t)stride[d];
  int64_t idx[64] = {0};  // odometer over dims 0..d-1
  for (;;) {
    int64_t a = (int64_t)base + off[d] * stride[d];
    for (int i = 0; i < d; ++i) a += (off[i] + idx[i]) * stride[i];
    if (!out->empty() && out->back().addr + out->back().bytes == (uint64_t)a)
      out->back().bytes += run;
    else
      out->push_back({(uint64_t)a, run});
    int i = d - 1;
    for (; i >= 0; --i) {
      if (++idx[i] < len[i]) break;
      idx[i] = 0;
    }
    if (i < 0) break;
  }
}

void append_run(std::vector<Run> &v, uint64_t addr, uint64_t bytes) {
  if (!v.empty() && v.back().addr + v.back().bytes == addr)
    v.back().bytes += bytes;
  else
    v.push_back({addr, bytes});
}

}  // namespace lm
