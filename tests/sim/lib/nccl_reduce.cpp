// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL: the reductions of ncclAllReduce / ncclReduceScatter, in rank order (NCCL's own
// order differs: float results may differ from NCCL's in the last bits, never more).
#include <cstring>

#include "nccl_sim.hpp"

namespace cudasim {
namespace nccl {

namespace {

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0 && man == 0) {
    bits = sign;
  } else if (exp == 0) {  // subnormal: normalise
    exp = 127 - 15 + 1;
    while (!(man & 0x400)) man <<= 1, --exp;
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even through float arithmetic: exact for every finite half.
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (a < 0x38800000u) {  // subnormal half: scale so the integer part is the mantissa
    float m = (f < 0 ? -f : f) * 16777216.0f;  // 2^24
    uint32_t v = (uint32_t)m;
    float rem = m - (float)v;
    if (rem > 0.5f || (rem == 0.5f && (v & 1))) ++v;
    return (uint16_t)(sign | v);
  }
  uint32_t v = (a >> 13) - ((127 - 15) << 10), rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) ++v;
  return (uint16_t)(sign | v);
}

float bf16_to_float(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

template <class T>
T apply(int op, T a, T b) {
  switch (op) {
    case ncclProd: return (T)(a * b);
    case ncclMax: return b > a ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return (T)(a + b);  // sum, avg
  }
}

// A = the arithmetic type, T the stored one (half and bfloat16 compute in float).
template <class T, class A, A (*load)(T), T (*store)(A)>
void reduce_typed(int op, char *dst, const char *tmp, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, tmp + i * sizeof(T), sizeof v);
    A acc = load(v);
    for (int p = 1; p < n; ++p) {
      std::memcpy(&v, tmp + ((size_t)p * count + i) * sizeof(T), sizeof v);
      acc = apply<A>(op, acc, load(v));
    }
    if (op == ncclAvg) acc = (A)(acc / (A)n);
    T out = store(acc);
    std::memcpy(dst + i * sizeof(T), &out, sizeof out);
  }
}

template <class T>
T same(T v) { return v; }

}  // namespace

void reduce_into(int type, int op, char *dst, const char *tmp, size_t count, int n) {
  switch (type) {
    case ncclInt8: reduce_typed<int8_t, int8_t, same, same>(op, dst, tmp, count, n); break;
    case ncclUint8: reduce_typed<uint8_t, uint8_t, same, same>(op, dst, tmp, count, n); break;
    case ncclInt32: reduce_typed<int32_t, int32_t, same, same>(op, dst, tmp, count, n); break;
    case ncclUint32: reduce_typed<uint32_t, uint32_t, same, same>(op, dst, tmp, count, n); break;
    case ncclInt64: reduce_typed<int64_t, int64_t, same, same>(op, dst, tmp, count, n); break;
    case ncclUint64: reduce_typed<uint64_t, uint64_t, same, same>(op, dst, tmp, count, n); break;
    case ncclFloat32: reduce_typed<float, float, same, same>(op, dst, tmp, count, n); break;
    case ncclFloat64: reduce_typed<double, double, same, same>(op, dst, tmp, count, n); break;
    case ncclFloat16:
      reduce_typed<uint16_t, float, half_to_float, float_to_half>(op, dst, tmp, count, n);
      break;
    case ncclBfloat16:
      reduce_typed<uint16_t, float, bf16_to_float, float_to_bf16>(op, dst, tmp, count, n);
      break;
    default: break;  // refused when posted
  }
}

}  // namespace nccl
}  // namespace cudasim
