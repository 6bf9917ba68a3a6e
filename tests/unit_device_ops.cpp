// SPDX-License-Identifier: BSD-3-Clause
// unit_device_ops: the elementwise arithmetic the CUDA kernels run (src/layout/elementwise.hpp,
// compiled here by g++) against the host path (src/layout/reduce.cpp), bit for bit (any NaN equals any NaN), for every
// dtype and reduce op, on random values plus edge cases (wraparound, NaN, inf, subnormals,
// 128-bit avg with negative sums). Runs in every build: no CUDA, no MPI at run time.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.hpp"
#include "layout/elementwise.hpp"
#include "layout/reduce.hpp"

namespace {

int g_passed = 0, g_failed = 0;

void check(bool ok, const char *what, lm::DType t, int op, size_t i) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  if (g_failed < 20)
    std::fprintf(stderr, "FAIL %s dtype %s op %d element %zu\n", what, lm::dtype_name(t), op, i);
}

std::mt19937_64 rng(12345);

// Random bytes, with a share of edge values for the dtype.
std::vector<unsigned char> random_values(lm::DType t, size_t n) {
  size_t es = lm::dtype_size(t);
  std::vector<unsigned char> v(n * es);
  for (auto &b : v) b = (unsigned char)rng();
  auto put = [&](size_t i, const void *p, size_t k) { std::memcpy(&v[i * es], p, k); };
  for (size_t i = 0; i < n; ++i) {
    unsigned r = (unsigned)(rng() % 8);
    switch (t) {
      case lm::DType::F32: {
        float f = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? 1e-40f : (float)((int64_t)(rng() % 2001) - 1000) / 7.f;
        put(i, &f, 4);
        break;
      }
      case lm::DType::F64: {
        double f = r == 0 ? NAN : r == 1 ? -INFINITY : (double)((int64_t)(rng() % 2001) - 1000) / 3.0;
        put(i, &f, 8);
        break;
      }
      case lm::DType::BOOL: v[i] = (unsigned char)(rng() % 2); break;
      case lm::DType::C64: {
        float f[2] = {(float)((int64_t)(rng() % 201) - 100) / 8.f, (float)((int64_t)(rng() % 201) - 100) / 4.f};
        put(i, f, 8);
        break;
      }
      case lm::DType::C128: {
        double f[2] = {(double)((int64_t)(rng() % 201) - 100) / 8.0, (double)((int64_t)(rng() % 201) - 100) / 16.0};
        put(i, f, 16);
        break;
      }
      case lm::DType::F16:
      case lm::DType::BF16: {
        uint16_t h = r == 0 ? 0x7e00 : r == 1 ? 0x0001 : (uint16_t)rng();  // NaN, subnormal, any
        put(i, &h, 2);
        break;
      }
      default:  // integers: extremes now and then
        if (r == 0) std::memset(&v[i * es], 0xff, es);
        if (r == 1) {
          std::memset(&v[i * es], 0xff, es);
          v[i * es + es - 1] = 0x7f;  // max (little endian)
        }
        break;
    }
  }
  return v;
}

// The elementwise header applied to n elements, the way the kernels do.
void ew_reduce(lm::DType t, int op, void *acc, const void *in, size_t n) {
  using namespace lm::ew;
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case lm::DType::F32: ((float *)acc)[i] = reduce_float<float>(op, ((float *)acc)[i], ((const float *)in)[i]); break;
      case lm::DType::F64: ((double *)acc)[i] = reduce_float<double>(op, ((double *)acc)[i], ((const double *)in)[i]); break;
      case lm::DType::I8: ((int8_t *)acc)[i] = reduce_int<int8_t>(op, ((int8_t *)acc)[i], ((const int8_t *)in)[i]); break;
      case lm::DType::I16: ((int16_t *)acc)[i] = reduce_int<int16_t>(op, ((int16_t *)acc)[i], ((const int16_t *)in)[i]); break;
      case lm::DType::I32: ((int32_t *)acc)[i] = reduce_int<int32_t>(op, ((int32_t *)acc)[i], ((const int32_t *)in)[i]); break;
      case lm::DType::I64: ((int64_t *)acc)[i] = reduce_int<int64_t>(op, ((int64_t *)acc)[i], ((const int64_t *)in)[i]); break;
      case lm::DType::U8: ((uint8_t *)acc)[i] = reduce_int<uint8_t>(op, ((uint8_t *)acc)[i], ((const uint8_t *)in)[i]); break;
      case lm::DType::BOOL: ((uint8_t *)acc)[i] = reduce_bool(op, ((uint8_t *)acc)[i], ((const uint8_t *)in)[i]); break;
      case lm::DType::F16: ((uint16_t *)acc)[i] = reduce_16(op, false, ((uint16_t *)acc)[i], ((const uint16_t *)in)[i]); break;
      case lm::DType::BF16: ((uint16_t *)acc)[i] = reduce_16(op, true, ((uint16_t *)acc)[i], ((const uint16_t *)in)[i]); break;
      case lm::DType::C64: reduce_complex<float>(op, (float *)acc + 2 * i, (const float *)in + 2 * i); break;
      case lm::DType::C128: reduce_complex<double>(op, (double *)acc + 2 * i, (const double *)in + 2 * i); break;
    }
  }
}

void ew_scale(lm::DType t, void *acc, size_t n, int64_t k) {
  using namespace lm::ew;
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case lm::DType::F32: ((float *)acc)[i] = scale<float>(((float *)acc)[i], k); break;
      case lm::DType::F64: ((double *)acc)[i] = scale<double>(((double *)acc)[i], k); break;
      case lm::DType::I8: ((int8_t *)acc)[i] = scale<int8_t>(((int8_t *)acc)[i], k); break;
      case lm::DType::I16: ((int16_t *)acc)[i] = scale<int16_t>(((int16_t *)acc)[i], k); break;
      case lm::DType::I32: ((int32_t *)acc)[i] = scale<int32_t>(((int32_t *)acc)[i], k); break;
      case lm::DType::I64: ((int64_t *)acc)[i] = scale<int64_t>(((int64_t *)acc)[i], k); break;
      case lm::DType::U8: ((uint8_t *)acc)[i] = scale<uint8_t>(((uint8_t *)acc)[i], k); break;
      case lm::DType::F16: ((uint16_t *)acc)[i] = scale_16(false, ((uint16_t *)acc)[i], k); break;
      case lm::DType::BF16: ((uint16_t *)acc)[i] = scale_16(true, ((uint16_t *)acc)[i], k); break;
      case lm::DType::C64: for (int j = 0; j < 2; ++j) ((float *)acc)[2 * i + j] = scale<float>(((float *)acc)[2 * i + j], k); break;
      case lm::DType::C128: for (int j = 0; j < 2; ++j) ((double *)acc)[2 * i + j] = scale<double>(((double *)acc)[2 * i + j], k); break;
      case lm::DType::BOOL: break;
    }
  }
}

// Same bytes, except that any two NaNs of a float type compare equal: the host and the kernel
// share the conversions, but the compiler may commute a vectorized op, and x86 then keeps the
// other operand's NaN payload. Values, not payloads, are the contract.
bool is_nan_at(lm::DType t, const unsigned char *p) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case lm::DType::F16: std::memcpy(&h, p, 2); return std::isnan(lm::ew::half_to_float(h));
    case lm::DType::BF16: std::memcpy(&h, p, 2); return std::isnan(lm::ew::bf16_to_float(h));
    case lm::DType::F32: std::memcpy(&f, p, 4); return std::isnan(f);
    case lm::DType::F64: std::memcpy(&d, p, 8); return std::isnan(d);
    default: return false;
  }
}

bool same_bytes(lm::DType t, const unsigned char *a, const unsigned char *b, size_t i) {
  size_t es = lm::dtype_size(t);
  if (std::memcmp(a + i * es, b + i * es, es) == 0) return true;
  return is_nan_at(t, a + i * es) && is_nan_at(t, b + i * es);
}

void test_reduce() {
  const lm::DType types[] = {lm::DType::F16, lm::DType::BF16, lm::DType::F32, lm::DType::F64,
                             lm::DType::I8,  lm::DType::I16,  lm::DType::I32, lm::DType::I64,
                             lm::DType::U8,  lm::DType::BOOL, lm::DType::C64, lm::DType::C128};
  const size_t n = 4096;
  for (lm::DType t : types) {
    for (int op = 0; op <= 4; ++op) {
      bool complex = t == lm::DType::C64 || t == lm::DType::C128;
      if (complex && (op == 2 || op == 3)) continue;  // refused by check_reduce
      if (t == lm::DType::BOOL && op == 1) continue;
      auto a = random_values(t, n), b = random_values(t, n);
      auto host = a, dev = a;
      lm::reduce_into(t, op, host.data(), b.data(), (int64_t)n);
      ew_reduce(t, op, dev.data(), b.data(), n);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (!same_bytes(t, host.data(), dev.data(), i)) ++bad;
      check(bad == 0, "reduce", t, op, bad);
      if (op == 1 && !lm::dtype_is_integer(t)) {  // avg's scale step
        auto h2 = host, d2 = dev;
        lm::scale_avg(t, h2.data(), (int64_t)n, 3);
        ew_scale(t, d2.data(), n, 3);
        bad = 0;
        for (size_t i = 0; i < n; ++i)
          if (!same_bytes(t, h2.data(), d2.data(), i)) ++bad;
        check(bad == 0, "scale_avg", t, op, bad);
      }
    }
  }
}

template <class T>
void test_wide_typed(lm::DType t) {
  const size_t n = 2048, k = 5;
  std::vector<std::vector<unsigned char>> parts;
  for (size_t j = 0; j < k; ++j) parts.push_back(random_values(t, n));
  std::vector<__int128> hacc(n), dacc(n);
  for (size_t j = 0; j < k; ++j) {
    lm::wide_accumulate(t, hacc.data(), parts[j].data(), (int64_t)n, j == 0);
    for (size_t i = 0; i < n; ++i)
      lm::ew::wide_acc<T>(&dacc[i], ((const T *)parts[j].data())[i], j == 0);
  }
  std::vector<T> hout(n), dout(n);
  lm::wide_finish_avg(t, hout.data(), hacc.data(), (int64_t)n, (int64_t)k);
  for (size_t i = 0; i < n; ++i) dout[i] = lm::ew::wide_fin<T>(dacc[i], (int64_t)k);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (hout[i] != dout[i]) ++bad;
  check(bad == 0, "wide avg", t, 1, bad);
  // Truncation toward zero of a negative sum: (-7) / 2 = -3.
  __int128 acc = 0;
  lm::ew::wide_acc<T>(&acc, (T)-4, true);
  lm::ew::wide_acc<T>(&acc, (T)-3, false);
  if ((T)-1 < 0) check(lm::ew::wide_fin<T>(acc, 2) == (T)-3, "wide avg truncation", t, 1, 0);
}

void test_wide() {
  test_wide_typed<int8_t>(lm::DType::I8);
  test_wide_typed<int16_t>(lm::DType::I16);
  test_wide_typed<int32_t>(lm::DType::I32);
  test_wide_typed<int64_t>(lm::DType::I64);
  test_wide_typed<uint8_t>(lm::DType::U8);
}

// An oracle for float -> bf16 written from the rule, not from either implementation: the nearest
// of the two bf16 values bracketing f (compared in double), ties to the even one; NaN stays NaN.
uint16_t bf16_oracle(float f) {
  if (std::isnan(f)) return 0;  // checked apart
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t lo = (uint16_t)(u >> 16);
  if ((u & 0xffff) == 0) return lo;
  uint16_t hi = (uint16_t)(lo + 1);  // the next value away from zero (inf past the largest)
  uint32_t ul = (uint32_t)lo << 16, uh = (uint32_t)hi << 16;
  float fl, fh;
  std::memcpy(&fl, &ul, 4);
  std::memcpy(&fh, &uh, 4);
  if (std::isinf(fh)) {  // past the largest finite bf16: IEEE rounds to inf at the midpoint
    double mid = std::fabs((double)fl) + std::ldexp(1.0, (int)((ul >> 23) & 0xff) - 127 - 7) / 2;
    return std::fabs((double)f) >= mid ? hi : lo;
  }
  double dl = std::fabs((double)f - (double)fl), dh = std::fabs((double)fh - (double)f);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

void test_conversions() {
  size_t bad = 0;
  std::vector<float> probes;
  for (uint32_t h = 0; h < 65536; ++h) {  // every half and bf16 bit pattern, widened
    probes.push_back(lm::ew::half_to_float((uint16_t)h));
    probes.push_back(lm::ew::bf16_to_float((uint16_t)h));
  }
  for (int i = 0; i < 200000; ++i) {  // random floats: rounding to 16 bits
    uint32_t u = (uint32_t)rng();
    float f;
    std::memcpy(&f, &u, 4);
    probes.push_back(f);
  }
  for (float f : probes) {
    uint16_t b = lm::ew::float_to_bf16(f);
    if (std::isnan(f) ? !std::isnan(lm::ew::bf16_to_float(b)) : b != bf16_oracle(f)) ++bad;
#ifdef __FLT16_MAX__  // the compiler's IEEE half (GCC 12 on x86-64): an independent reference
    _Float16 ref = (_Float16)f;
    uint16_t r;
    std::memcpy(&r, &ref, 2);
    uint16_t h = lm::ew::float_to_half(f);
    if (std::isnan(f) ? !std::isnan(lm::ew::half_to_float(h)) : h != r) ++bad;
    float back = (float)ref, mine = lm::ew::half_to_float(r);
    if (!std::isnan(back) && std::memcmp(&back, &mine, 4) != 0) ++bad;
#endif
  }
  check(bad == 0, "16-bit conversions", lm::DType::F16, 0, bad);
}

}  // namespace

int main() {
  test_reduce();
  test_wide();
  test_conversions();
  std::printf("unit_device_ops: %d passed, %d failed\n", g_passed, g_failed);
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
