// SPDX-License-Identifier: BSD-3-Clause
#include "layout/reduce.hpp"

#include <complex>
#include <cstring>
#include <type_traits>

#include "common/error.hpp"
#include "layout/elementwise.hpp"

namespace lm {

// The 16-bit float conversions are the ones the device kernels run (layout/elementwise.hpp, one
// source for host and device); tests/unit_layout.cpp checks them against the IEEE rules and
// tests/unit_device_ops.cpp against the compiler's own _Float16.
float half_to_float(uint16_t h) { return ew::half_to_float(h); }
uint16_t float_to_half(float f) { return ew::float_to_half(f); }
float bf16_to_float(uint16_t h) { return ew::bf16_to_float(h); }
uint16_t float_to_bf16(float f) { return ew::float_to_bf16(f); }

void check_reduce(DType t, int op, const char *what) {
  if ((t == DType::C64 || t == DType::C128) && (op == LM_REDUCE_MAX || op == LM_REDUCE_MIN))
    fail(LM_ERR_NOT_SUPPORTED, "%s: Partial(%s) has no meaning for %s", what,
         op == LM_REDUCE_MAX ? "max" : "min", dtype_name(t));
  if (t == DType::BOOL && op == LM_REDUCE_AVG)
    fail(LM_ERR_NOT_SUPPORTED, "%s: Partial(avg) has no meaning for bool", what);
}

namespace {
// Integers add and multiply in uint64_t: wraparound is defined (no signed-overflow UB) and the
// result is the two's-complement one.
template <class T>
inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return (T)((uint64_t)a + (uint64_t)b);
  else
    return a + b;
}
template <class T>
inline T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return (T)((uint64_t)a * (uint64_t)b);
  else
    return a * b;
}
template <class T>
void red(int op, T *a, const T *b, int64_t n) {
  switch (op) {
    case LM_REDUCE_SUM:
    case LM_REDUCE_AVG:
      for (int64_t i = 0; i < n; ++i) a[i] = add(a[i], b[i]);
      break;
    case LM_REDUCE_PROD:
      for (int64_t i = 0; i < n; ++i) a[i] = mul(a[i], b[i]);
      break;
    case LM_REDUCE_MAX:
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] > a[i] ? b[i] : a[i];
      break;
    case LM_REDUCE_MIN:
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] < a[i] ? b[i] : a[i];
      break;
  }
}
template <class T>
void red_complex(int op, T *a, const T *b, int64_t n) {
  if (op == LM_REDUCE_PROD)
    for (int64_t i = 0; i < n; ++i) a[i] *= b[i];
  else
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}
template <float (*TO)(uint16_t), uint16_t (*FROM)(float)>
void red16(int op, uint16_t *a, const uint16_t *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = TO(a[i]), y = TO(b[i]), r;
    switch (op) {
      case LM_REDUCE_PROD: r = x * y; break;
      case LM_REDUCE_MAX: r = y > x ? y : x; break;
      case LM_REDUCE_MIN: r = y < x ? y : x; break;
      default: r = x + y; break;
    }
    a[i] = FROM(r);
  }
}

// The sums every Partial(sum/avg) reduction runs, as vector loops: GCC's -O2 leaves loops of
// unknown trip count scalar, so these ask for vectorization and, on x86-64, AVX-512 (x86-64-v4)
// and AVX2 clones chosen at load time (ifunc) beside the baseline one. Each element is the same
// IEEE operation as the scalar loop (no reassociation, no contraction): the same bits. bf16 sums
// ran 7x faster with AVX2 (190K elements: 310 -> 45 us), which is most of a small Partial reshard
// of bf16 tensors, and 1.6x faster again with AVX-512 (0.25 -> 0.15 ns per element).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LM_VECTOR_LOOP \
  __attribute__((optimize("tree-vectorize"), target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define LM_VECTOR_LOOP __attribute__((optimize("tree-vectorize")))
#else
#define LM_VECTOR_LOOP  // clang vectorizes at -O2
#endif
LM_VECTOR_LOOP void sum_f32(float *__restrict a, const float *__restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}
LM_VECTOR_LOOP void sum_f64(double *__restrict a, const double *__restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}
// ew::float_to_bf16 of a float's bits x in the top 16 bits, written branch-free (a NaN keeps its
// sign and payload's top and is made quiet; others round to nearest even), which vectorizes into
// fewer instructions.
inline uint32_t bf16_round(uint32_t x) {
  return (x & 0x7fffffffu) > 0x7f800000u ? x | 0x400000u : x + 0x7fffu + ((x >> 16) & 1u);
}
inline uint16_t bf16_sum(uint16_t a, uint16_t b) {
  return (uint16_t)(bf16_round(ew::f2u(ew::bf16_to_float(a) + ew::bf16_to_float(b))) >> 16);
}
// Two bf16 sums in one 32-bit word of each operand (either byte order: each half is summed and
// put back where it was). The low halves shifted up and the high ones masked are the floats, so
// no lane widens or narrows: 1.2x the one-per-lane loop with AVX-512 (0.19 -> 0.155 ns/element).
inline uint32_t bf16_sum_pair(uint32_t x, uint32_t y) {
  const uint32_t lo = bf16_round(ew::f2u(ew::u2f(x << 16) + ew::u2f(y << 16)));
  const uint32_t hi = bf16_round(ew::f2u(ew::u2f(x & 0xffff0000u) + ew::u2f(y & 0xffff0000u)));
  return (hi & 0xffff0000u) | (lo >> 16);
}
// o[i] = a[i] + b[i] as bf16 for n elements, two at a time; o may be a (not partly overlapping).
inline void bf16_sums(uint16_t *o, const uint16_t *a, const uint16_t *__restrict b, int64_t n) {
  for (int64_t i = 0; i + 1 < n; i += 2) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    const uint32_t r = bf16_sum_pair(x, y);
    std::memcpy(o + i, &r, 4);
  }
  if (n & 1) o[n - 1] = bf16_sum(a[n - 1], b[n - 1]);
}
LM_VECTOR_LOOP void sum_bf16(uint16_t *__restrict a, const uint16_t *__restrict b, int64_t n) {
  bf16_sums(a, a, b, n);
}
LM_VECTOR_LOOP void sum2_f32(float *__restrict o, const float *__restrict a,
                             const float *__restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
LM_VECTOR_LOOP void sum2_f64(double *__restrict o, const double *__restrict a,
                             const double *__restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
LM_VECTOR_LOOP void sum2_bf16(uint16_t *__restrict o, const uint16_t *__restrict a,
                              const uint16_t *__restrict b, int64_t n) {
  bf16_sums(o, a, b, n);
}
bool is_sum(int op) { return op == LM_REDUCE_SUM || op == LM_REDUCE_AVG; }
// Whether [p, p + n) and [q, q + n) share a byte.
bool overlap(const void *p, const void *q, size_t n) {
  const uintptr_t x = (uintptr_t)p, y = (uintptr_t)q;
  return x < y + n && y < x + n;
}
}  // namespace

void reduce_pair_into(DType t, int op, void *out, const void *a, const void *in, int64_t n) {
  const size_t bytes = (size_t)n * dtype_size(t);
  if (is_sum(op) && n > 0 && !overlap(out, a, bytes) && !overlap(out, in, bytes)) {
    if (t == DType::F32) return sum2_f32((float *)out, (const float *)a, (const float *)in, n);
    if (t == DType::F64) return sum2_f64((double *)out, (const double *)a, (const double *)in, n);
    if (t == DType::BF16)
      return sum2_bf16((uint16_t *)out, (const uint16_t *)a, (const uint16_t *)in, n);
  }
  if (out != a && bytes) std::memmove(out, a, bytes);
  reduce_into(t, op, out, in, n);
}

void reduce_into(DType t, int op, void *acc, const void *in, int64_t n) {
  if (is_sum(op) && acc != in) {  // (the vector loops promise no overlap)
    if (t == DType::F32) return sum_f32((float *)acc, (const float *)in, n);
    if (t == DType::F64) return sum_f64((double *)acc, (const double *)in, n);
    if (t == DType::BF16) return sum_bf16((uint16_t *)acc, (const uint16_t *)in, n);
  }
  switch (t) {
    case DType::F32: red(op, (float *)acc, (const float *)in, n); break;
    case DType::F64: red(op, (double *)acc, (const double *)in, n); break;
    case DType::I8: red(op, (int8_t *)acc, (const int8_t *)in, n); break;
    case DType::I16: red(op, (int16_t *)acc, (const int16_t *)in, n); break;
    case DType::I32: red(op, (int32_t *)acc, (const int32_t *)in, n); break;
    case DType::I64: red(op, (int64_t *)acc, (const int64_t *)in, n); break;
    case DType::U8: red(op, (uint8_t *)acc, (const uint8_t *)in, n); break;
    case DType::BOOL: {
      uint8_t *a = (uint8_t *)acc;
      const uint8_t *b = (const uint8_t *)in;
      bool any = op == LM_REDUCE_SUM || op == LM_REDUCE_MAX;  // or; prod/min: and
      for (int64_t i = 0; i < n; ++i) a[i] = any ? (a[i] || b[i]) : (a[i] && b[i]);
      break;
    }
    case DType::C64:
      red_complex(op, (std::complex<float> *)acc, (const std::complex<float> *)in, n);
      break;
    case DType::C128:
      red_complex(op, (std::complex<double> *)acc, (const std::complex<double> *)in, n);
      break;
    case DType::F16: red16<half_to_float, float_to_half>(op, (uint16_t *)acc, (const uint16_t *)in, n); break;
    case DType::BF16: red16<bf16_to_float, float_to_bf16>(op, (uint16_t *)acc, (const uint16_t *)in, n); break;
  }
}

namespace {
template <class T>
void scale(T *a, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) a[i] = (T)(a[i] / (T)k);
}
}  // namespace

void scale_avg(DType t, void *acc, int64_t n, int64_t k) {
  switch (t) {
    case DType::F32: scale((float *)acc, n, k); break;
    case DType::F64: scale((double *)acc, n, k); break;
    case DType::I8: scale((int8_t *)acc, n, k); break;
    case DType::I16: scale((int16_t *)acc, n, k); break;
    case DType::I32: scale((int32_t *)acc, n, k); break;
    case DType::I64: scale((int64_t *)acc, n, k); break;
    case DType::U8: scale((uint8_t *)acc, n, k); break;
    case DType::C64: {
      auto *a = (std::complex<float> *)acc;
      for (int64_t i = 0; i < n; ++i) a[i] /= (float)k;
      break;
    }
    case DType::C128: {
      auto *a = (std::complex<double> *)acc;
      for (int64_t i = 0; i < n; ++i) a[i] /= (double)k;
      break;
    }
    case DType::F16: {
      auto *a = (uint16_t *)acc;
      for (int64_t i = 0; i < n; ++i) a[i] = float_to_half(half_to_float(a[i]) / (float)k);
      break;
    }
    case DType::BF16: {
      auto *a = (uint16_t *)acc;
      for (int64_t i = 0; i < n; ++i) a[i] = float_to_bf16(bf16_to_float(a[i]) / (float)k);
      break;
    }
    case DType::BOOL: break;
  }
}

bool dtype_is_integer(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 || t == DType::U8;
}

namespace {
template <class T>
void wide_acc(__int128 *acc, const T *in, int64_t n, bool assign) {
  if (assign)
    for (int64_t i = 0; i < n; ++i) acc[i] = (__int128)in[i];
  else
    for (int64_t i = 0; i < n; ++i) acc[i] += (__int128)in[i];
}
template <class T>
void wide_fin(T *out, const __int128 *acc, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) out[i] = (T)(acc[i] / k);
}
}  // namespace

void wide_accumulate(DType t, __int128 *acc, const void *in, int64_t n, bool assign) {
  switch (t) {
    case DType::I8: wide_acc(acc, (const int8_t *)in, n, assign); break;
    case DType::I16: wide_acc(acc, (const int16_t *)in, n, assign); break;
    case DType::I32: wide_acc(acc, (const int32_t *)in, n, assign); break;
    case DType::I64: wide_acc(acc, (const int64_t *)in, n, assign); break;
    case DType::U8: wide_acc(acc, (const uint8_t *)in, n, assign); break;
    default: fail(LM_ERR_INTERNAL, "wide_accumulate: %s is not an integer type", dtype_name(t));
  }
}

void wide_finish_avg(DType t, void *out, const __int128 *acc, int64_t n, int64_t k) {
  switch (t) {
    case DType::I8: wide_fin((int8_t *)out, acc, n, k); break;
    case DType::I16: wide_fin((int16_t *)out, acc, n, k); break;
    case DType::I32: wide_fin((int32_t *)out, acc, n, k); break;
    case DType::I64: wide_fin((int64_t *)out, acc, n, k); break;
    case DType::U8: wide_fin((uint8_t *)out, acc, n, k); break;
    default: fail(LM_ERR_INTERNAL, "wide_finish_avg: %s is not an integer type", dtype_name(t));
  }
}

void fill_identity(DType t, int op, void *buf, int64_t n) {
  if (n <= 0) return;  // an empty shard may have no buffer (NULL): memset(NULL, 0, 0) is UB
  size_t es = dtype_size(t);
  std::memset(buf, 0, (size_t)n * es);
  if (op != LM_REDUCE_PROD) return;
  switch (t) {
    case DType::F32: for (int64_t i = 0; i < n; ++i) ((float *)buf)[i] = 1.f; break;
    case DType::F64: for (int64_t i = 0; i < n; ++i) ((double *)buf)[i] = 1.0; break;
    case DType::I8: case DType::U8: case DType::BOOL: std::memset(buf, 1, (size_t)n); break;
    case DType::I16: for (int64_t i = 0; i < n; ++i) ((int16_t *)buf)[i] = 1; break;
    case DType::I32: for (int64_t i = 0; i < n; ++i) ((int32_t *)buf)[i] = 1; break;
    case DType::I64: for (int64_t i = 0; i < n; ++i) ((int64_t *)buf)[i] = 1; break;
    case DType::C64: for (int64_t i = 0; i < n; ++i) ((float *)buf)[2 * i] = 1.f; break;
    case DType::C128: for (int64_t i = 0; i < n; ++i) ((double *)buf)[2 * i] = 1.0; break;
    case DType::F16: for (int64_t i = 0; i < n; ++i) ((uint16_t *)buf)[i] = 0x3c00; break;
    case DType::BF16: for (int64_t i = 0; i < n; ++i) ((uint16_t *)buf)[i] = 0x3f80; break;
  }
}

}  // namespace lm
