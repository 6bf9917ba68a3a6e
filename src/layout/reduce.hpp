// SPDX-License-Identifier: BSD-3-Clause
// Elementwise reductions for Partial placements, every supported dtype.
#pragma once

#include <cstdint>

#include "common/dtype.hpp"

namespace lm {

// Throws LM_ERR_NOT_SUPPORTED for combinations without a meaning (max/min of complex,
// avg of bool), naming `what`.
void check_reduce(DType t, int op, const char *what);
// acc[i] = op(acc[i], in[i]) for n elements (avg accumulates a sum).
void reduce_into(DType t, int op, void *acc, const void *in, int64_t n);
// out[i] = op(a[i], in[i]) for n elements: reduce_into with `a` as the accumulator, written to
// out (a buffer apart from both; out == a is allowed), in one pass for sums of f32, f64 and bf16.
void reduce_pair_into(DType t, int op, void *out, const void *a, const void *in, int64_t n);
// acc[i] /= k (the last step of avg); integers truncate toward zero.
void scale_avg(DType t, void *acc, int64_t n, int64_t k);
// Fills n elements with the identity of op (sum: 0, prod: 1).
void fill_identity(DType t, int op, void *buf, int64_t n);

bool dtype_is_integer(DType t);  // int8..int64, uint8 (not bool)
// Integer avg without overflow: acc[i] (=|+=) in[i] widened to 128 bits, then
// out[i] = acc[i] / k (truncated toward zero) narrowed back.
void wide_accumulate(DType t, __int128 *acc, const void *in, int64_t n, bool assign);
void wide_finish_avg(DType t, void *out, const __int128 *acc, int64_t n, int64_t k);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);

}  // namespace lm
