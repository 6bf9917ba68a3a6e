// SPDX-License-Identifier: BSD-3-Clause
// CUDA kernels for the device work NCCL does not do (device/kernels.cu, part of the device
// component). Every launcher enqueues on `stream` (a cudaStream_t) and returns at once; none
// synchronizes. Each returns an LMD_* status (mem/device_api.hpp), a launch failure's text in
// device/status.hpp's last_error(). The arithmetic is layout/elementwise.hpp, shared with the
// host checks of tests/unit_device_ops.cpp.
#pragma once

#include <cstdint>

#include "common/dtype.hpp"

#include "layout/boxcopy.hpp"

namespace lm {
namespace cuda {

// Copies box elements [e0, e1) of c from src to dst (device buffers), one thread per element
// through the shared arithmetic of layout/boxcopy.hpp; one contiguous run is a cudaMemcpyAsync.
int box_copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1, void *stream);

// acc[i] = op(acc[i], in[i]), n elements of t (avg accumulates a sum), like reduce_into.
int reduce(DType t, int op, void *acc, const void *in, int64_t n, void *stream);
// acc[i] /= k (avg's last step for non-wide types), like scale_avg.
int scale_avg(DType t, void *acc, int64_t n, int64_t k, void *stream);
// n elements of op's identity (sum: 0, prod: 1), like fill_identity.
int fill_identity(DType t, int op, void *buf, int64_t n, void *stream);
// Integer avg: acc (16 bytes per element) = or += in widened; then out = acc / k narrowed.
int wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign, void *stream);
int wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k, void *stream);

}  // namespace cuda
}  // namespace lm
