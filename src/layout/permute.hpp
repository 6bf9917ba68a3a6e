// SPDX-License-Identifier: BSD-3-Clause
// Permuting copies on the host: an array written compact in an order of its dims other than the
// one it is read in (lm_dist_tensor_transpose's local pass). Pure arithmetic on host memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lm {

// Outputs at least this large are written with streaming (non-temporal) stores where the kernel
// has them: the output is not read back soon, and a write that skips the cache saves reading
// each line before it is written (2896 x 2896 f64 here: 12.1 -> 7.6 ms; memcpy 5.2).
constexpr size_t kPermuteStreamBytes = size_t(4) << 20;
constexpr int kPermuteMaxDims = 64;  // a strided run of a block-cyclic piece takes two dims

// The copy of an array of extents len[0 .. n) between two strided layouts: element i (one index
// per dim) from src[sum_d i[d] * sstr[d]] to dst[sum_d i[d] * dstr[d]] (element strides, >= 0,
// any order; the destination's elements distinct). The dim of the smallest destination stride
// and a dim contiguous in the source are walked in tiles, as permute_copy does; stream: write
// with streaming stores where the kernel can. false (nothing written) for an esize other than
// 1, 2, 4, 8 or 16 or more than kPermuteMaxDims dims.
bool strided_copy(void *dst, const int64_t *dstr, const void *src, const int64_t *sstr,
                  const int64_t *len, int n, size_t esize, bool stream);

// out (compact row-major, extents len[0 .. n)) from `in`, whose element at out index i lies at
// sum_d i[d] * istr[d] (element strides, one per out dim). The out dim contiguous in `in` and the
// innermost out dim are walked in square tiles, through register transposes (SSE2/AVX2) for
// elements of 2, 4 and 8 bytes; stream_min: the output bytes from which stores stream
// (kPermuteStreamBytes; tests pass 0 to take that path on small arrays). esize is 1, 2, 4, 8 or
// 16; other sizes return false (nothing written).
bool permute_copy(void *out, const void *in, int n, const int64_t *len, const int64_t *istr,
                  size_t esize, size_t stream_min = kPermuteStreamBytes);

}  // namespace lm
