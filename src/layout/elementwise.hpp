// SPDX-License-Identifier: BSD-3-Clause
// Elementwise arithmetic of Partial reductions, written once for host and device: nvcc compiles it
// into the device kernels (kernels.cu), g++ into tests/unit_device_ops.cpp, which checks it bit for
// bit against the host path (layout/reduce.cpp) for every dtype and op, so the CPU suite tests the
// arithmetic the kernels run. Semantics are localmap's (localmap.h, lm_placement_t):
//   integers: sum/prod wrap (computed in uint64_t), avg through a 128-bit accumulator and one
//             division truncating toward zero per reduced mesh dim;
//   bool:     sum/max = or, prod/min = and (avg refused earlier);
//   f16/bf16: computed in float, rounded to nearest even by the same bit conversions as the host;
//   complex:  real pairs (sum: pairwise add; prod: (ac - bd, ad + bc)); max/min refused earlier.
// No std:: and no exceptions here: plain functions on plain types.
#pragma once

#include <stdint.h>
#include <string.h>

#ifndef LM_HD
#if defined(__CUDACC__)
#define LM_HD __host__ __device__
#else
#define LM_HD
#endif
#endif

namespace lm {
namespace ew {

// Op codes: lm_reduce_op_t values (kept numeric so this header needs no localmap.h).
enum : int { kSum = 0, kAvg = 1, kMax = 2, kMin = 3, kProd = 4 };

LM_HD inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
LM_HD inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE half <-> float, the same algorithm as layout/reduce.cpp (round to nearest even; NaN keeps
// its sign and becomes a quiet NaN with payload bit 9).
LM_HD inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  return u2f(bits);
}

LM_HD inline uint16_t float_to_half(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (absx < 0x38800000u) {
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;
    uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    uint32_t v = m >> shift;
    if (rem > mid || (rem == mid && (v & 1))) ++v;
    return (uint16_t)(sign | v);
  }
  uint32_t v = ((absx >> 13) - ((127 - 15) << 10));
  uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) ++v;
  return (uint16_t)(sign | v);
}

LM_HD inline float bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

LM_HD inline uint16_t float_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return (uint16_t)(x >> 16);
}

// Integers and real floats: one element of acc = op(acc, in). Integer sum/prod wrap through
// uint64_t (defined behaviour, two's-complement result).
template <class T>
LM_HD inline T reduce_int(int op, T a, T b) {
  switch (op) {
    case kProd: return (T)((uint64_t)a * (uint64_t)b);
    case kMax: return b > a ? b : a;
    case kMin: return b < a ? b : a;
    default: return (T)((uint64_t)a + (uint64_t)b);
  }
}
template <class T>
LM_HD inline T reduce_float(int op, T a, T b) {
  switch (op) {
    case kProd: return a * b;
    case kMax: return b > a ? b : a;
    case kMin: return b < a ? b : a;
    default: return a + b;
  }
}
LM_HD inline uint8_t reduce_bool(int op, uint8_t a, uint8_t b) {
  bool any = op == kSum || op == kMax;
  return any ? (uint8_t)(a || b) : (uint8_t)(a && b);
}
// f16 (is_bf16 = false) or bf16: through float, rounded back.
LM_HD inline uint16_t reduce_16(int op, bool is_bf16, uint16_t a, uint16_t b) {
  float x = is_bf16 ? bf16_to_float(a) : half_to_float(a);
  float y = is_bf16 ? bf16_to_float(b) : half_to_float(b);
  float r;
  switch (op) {
    case kProd: r = x * y; break;
    case kMax: r = y > x ? y : x; break;
    case kMin: r = y < x ? y : x; break;
    default: r = x + y; break;
  }
  return is_bf16 ? float_to_bf16(r) : float_to_half(r);
}
// Complex as a real pair (re at [0], im at [1]): sum/avg adds, prod multiplies.
template <class R>
LM_HD inline void reduce_complex(int op, R *a, const R *b) {
  if (op == kProd) {
    R re = a[0] * b[0] - a[1] * b[1];
    R im = a[0] * b[1] + a[1] * b[0];
    a[0] = re;
    a[1] = im;
  } else {
    a[0] += b[0];
    a[1] += b[1];
  }
}

// avg's last step for non-wide types: a / k (integers truncate toward zero).
template <class T>
LM_HD inline T scale(T a, int64_t k) {
  return (T)(a / (T)k);
}
LM_HD inline uint16_t scale_16(bool is_bf16, uint16_t a, int64_t k) {
  float x = is_bf16 ? bf16_to_float(a) : half_to_float(a);
  x = x / (float)k;
  return is_bf16 ? float_to_bf16(x) : float_to_half(x);
}

// Integer avg: widen to 128 bits, accumulate, divide once truncating toward zero, narrow.
template <class T>
LM_HD inline void wide_acc(__int128 *acc, T in, bool assign) {
  if (assign)
    *acc = (__int128)in;
  else
    *acc += (__int128)in;
}
template <class T>
LM_HD inline T wide_fin(__int128 acc, int64_t k) {
  return (T)(acc / k);
}

}  // namespace ew
}  // namespace lm
