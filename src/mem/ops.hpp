// SPDX-License-Identifier: BSD-3-Clause
// Memory operations of a reshard execution, where its buffers live: box copies (a range of a
// layout/boxcopy.hpp copy), reductions and identity fills (layout/reduce.hpp arithmetic), and
// staging buffers. The executor (exec/executor.cpp) gets one MemOps with its Transport (the wire)
// from transport/select.hpp: HostOps for host memory, DeviceOps (kernels on the mesh's stream,
// stream-ordered staging) for device memory under NCCL. Buffers passed in are the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/dtype.hpp"
#include "layout/boxcopy.hpp"

namespace lm {

class MemOps {
 public:
  virtual ~MemOps() = default;
  // Copies box elements [e0, e1) of c (layout/boxcopy.hpp) from src to dst.
  virtual void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) = 0;
  // acc[i] = op(acc[i], in[i]) for n elements (avg accumulates a sum).
  virtual void reduce(DType t, int op, void *acc, const void *in, int64_t n) = 0;
  // out[i] = op(a[i], in[i]) (reduce with a as the accumulator) for n elements of esize bytes;
  // out is apart from a and in, or equal to a. By default a copy then reduce.
  virtual void reduce_pair(DType t, int op, void *out, const void *a, const void *in, int64_t n,
                           size_t esize) {
    if (out != a && n > 0) copy_1d(out, a, n, esize);
    reduce(t, op, out, in, n);
  }
  // Copies n contiguous elements of esize bytes (a one-dim copy).
  void copy_1d(void *dst, const void *src, int64_t n, size_t esize) {
    int64_t zero = 0;
    BoxCopy c;
    boxcopy_init(c, 1, &n, &n, &zero, &n, &zero, (int64_t)esize);
    copy(c, dst, src, 0, c.numel);
  }
  virtual void scale_avg(DType t, void *acc, int64_t n, int64_t k) = 0;
  virtual void fill_identity(DType t, int op, void *buf, int64_t n) = 0;
  // Integer avg through a 128-bit accumulator (16 bytes per element).
  virtual void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) = 0;
  virtual void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) = 0;
  // Staging (never zero-filled; contents undefined). Throws LM_ERR_OUT_OF_MEMORY.
  virtual void *staging_take(size_t bytes, size_t *cap) = 0;
  // Gives back a buffer of capacity cap taken for `bytes`.
  virtual void staging_give(void *p, size_t cap, size_t bytes) = 0;
};

// Host memory: loops of layout/, staging from the buffer pool (mem/pool.hpp).
std::unique_ptr<MemOps> host_ops();
// Device memory of CUDA device `device`: the device component's kernels and cudaMallocAsync
// staging, all enqueued on `stream` (a cudaStream_t). Without the component: LM_ERR_NOT_SUPPORTED.
std::unique_ptr<MemOps> device_ops(void *stream, int device);

}  // namespace lm
