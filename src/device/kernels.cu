// SPDX-License-Identifier: BSD-3-Clause
// CUDA kernels of the device component: elementwise reductions (layout/elementwise.hpp) for every
// dtype localmap supports, and box copies. Launched through device/launch.hpp, so CUDA=sim
// compiles this file as host C++.
// Alignment: every kernel accesses memory through the element type of its dtype, or for complex
// through the component type (float, double); the box copy picks its word from the buffers' real
// alignment. So the kernels need no more than the component alignment that a borrowed tensor is
// checked for (tensor.cpp, check_alignment), and LM_DEVICE_ACCESS states every wider access.
#include <cuda_runtime.h>

#include "common/dtype.hpp"
#include "device/kernels.hpp"
#include "device/launch.hpp"
#include "device/status.hpp"
#include "layout/elementwise.hpp"
#include "mem/device_api.hpp"

namespace lm {
namespace cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535 * 16) b = 65535 * 16;  // grid-stride loops cover the rest
  return (unsigned)(b < 1 ? 1 : b);
}

#define LM_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

template <class T>
__global__ void k_reduce_int(int op, T *a, const T *b, int64_t n) {
  LM_GRID_LOOP(i, n) a[i] = ew::reduce_int<T>(op, a[i], b[i]);
}
template <class T>
__global__ void k_reduce_float(int op, T *a, const T *b, int64_t n) {
  LM_GRID_LOOP(i, n) a[i] = ew::reduce_float<T>(op, a[i], b[i]);
}
__global__ void k_reduce_bool(int op, uint8_t *a, const uint8_t *b, int64_t n) {
  LM_GRID_LOOP(i, n) a[i] = ew::reduce_bool(op, a[i], b[i]);
}
__global__ void k_reduce_16(int op, bool bf, uint16_t *a, const uint16_t *b, int64_t n) {
  LM_GRID_LOOP(i, n) a[i] = ew::reduce_16(op, bf, a[i], b[i]);
}
template <class R>
__global__ void k_reduce_complex(int op, R *a, const R *b, int64_t n) {
  LM_GRID_LOOP(i, n) ew::reduce_complex<R>(op, a + 2 * i, b + 2 * i);
}
template <class T>
__global__ void k_scale(T *a, int64_t n, int64_t k) {
  LM_GRID_LOOP(i, n) a[i] = ew::scale<T>(a[i], k);
}
__global__ void k_scale_16(bool bf, uint16_t *a, int64_t n, int64_t k) {
  LM_GRID_LOOP(i, n) a[i] = ew::scale_16(bf, a[i], k);
}
template <class T>
__global__ void k_fill(T *a, int64_t n, T v) {
  LM_GRID_LOOP(i, n) a[i] = v;
}
template <class R>
__global__ void k_fill_complex(R *a, int64_t n) {  // (1, 0): prod's identity
  LM_GRID_LOOP(i, n) {
    a[2 * i] = R(1);
    a[2 * i + 1] = R(0);
  }
}
template <class T>
__global__ void k_wide_acc(__int128 *acc, const T *in, int64_t n, bool assign) {
  LM_GRID_LOOP(i, n) ew::wide_acc<T>(acc + i, in[i], assign);
}
template <class T>
__global__ void k_wide_fin(T *out, const __int128 *acc, int64_t n, int64_t k) {
  LM_GRID_LOOP(i, n) out[i] = ew::wide_fin<T>(acc[i], k);
}

// The launch's status (a bad configuration, a stream of another device): the runtime's last error.
int launched() { return device::cuda_status(cudaGetLastError()); }

#define LAUNCH(kernel, n, st, ...) \
  LM_LAUNCH(kernel, blocks_for(n), kThreads, static_cast<cudaStream_t>(st), __VA_ARGS__)

template <class T>
void fill_typed(void *buf, int64_t n, T v, void *st) {
  LAUNCH(k_fill<T>, n, st, static_cast<T *>(buf), n, v);
}

}  // namespace

int reduce(DType t, int op, void *acc, const void *in, int64_t n, void *st) {
  if (n <= 0) return LMD_OK;
  switch (t) {
    case DType::F32: LAUNCH(k_reduce_float<float>, n, st, op, (float *)acc, (const float *)in, n); break;
    case DType::F64: LAUNCH(k_reduce_float<double>, n, st, op, (double *)acc, (const double *)in, n); break;
    case DType::I8: LAUNCH(k_reduce_int<int8_t>, n, st, op, (int8_t *)acc, (const int8_t *)in, n); break;
    case DType::I16: LAUNCH(k_reduce_int<int16_t>, n, st, op, (int16_t *)acc, (const int16_t *)in, n); break;
    case DType::I32: LAUNCH(k_reduce_int<int32_t>, n, st, op, (int32_t *)acc, (const int32_t *)in, n); break;
    case DType::I64: LAUNCH(k_reduce_int<int64_t>, n, st, op, (int64_t *)acc, (const int64_t *)in, n); break;
    case DType::U8: LAUNCH(k_reduce_int<uint8_t>, n, st, op, (uint8_t *)acc, (const uint8_t *)in, n); break;
    case DType::BOOL: LAUNCH(k_reduce_bool, n, st, op, (uint8_t *)acc, (const uint8_t *)in, n); break;
    case DType::F16: LAUNCH(k_reduce_16, n, st, op, false, (uint16_t *)acc, (const uint16_t *)in, n); break;
    case DType::BF16: LAUNCH(k_reduce_16, n, st, op, true, (uint16_t *)acc, (const uint16_t *)in, n); break;
    case DType::C64: LAUNCH(k_reduce_complex<float>, n, st, op, (float *)acc, (const float *)in, n); break;
    case DType::C128: LAUNCH(k_reduce_complex<double>, n, st, op, (double *)acc, (const double *)in, n); break;
  }
  return launched();
}

int scale_avg(DType t, void *acc, int64_t n, int64_t k, void *st) {
  if (n <= 0) return LMD_OK;
  switch (t) {
    case DType::F32: LAUNCH(k_scale<float>, n, st, (float *)acc, n, k); break;
    case DType::F64: LAUNCH(k_scale<double>, n, st, (double *)acc, n, k); break;
    case DType::I8: LAUNCH(k_scale<int8_t>, n, st, (int8_t *)acc, n, k); break;
    case DType::I16: LAUNCH(k_scale<int16_t>, n, st, (int16_t *)acc, n, k); break;
    case DType::I32: LAUNCH(k_scale<int32_t>, n, st, (int32_t *)acc, n, k); break;
    case DType::I64: LAUNCH(k_scale<int64_t>, n, st, (int64_t *)acc, n, k); break;
    case DType::U8: LAUNCH(k_scale<uint8_t>, n, st, (uint8_t *)acc, n, k); break;
    case DType::C64: LAUNCH(k_scale<float>, 2 * n, st, (float *)acc, 2 * n, k); break;
    case DType::C128: LAUNCH(k_scale<double>, 2 * n, st, (double *)acc, 2 * n, k); break;
    case DType::F16: LAUNCH(k_scale_16, n, st, false, (uint16_t *)acc, n, k); break;
    case DType::BF16: LAUNCH(k_scale_16, n, st, true, (uint16_t *)acc, n, k); break;
    case DType::BOOL: return LMD_OK;
  }
  return launched();
}

int fill_identity(DType t, int op, void *buf, int64_t n, void *st) {
  if (n <= 0) return LMD_OK;
  size_t bytes = (size_t)n * dtype_size(t);
  if (op != ew::kProd)
    return device::cuda_status(cudaMemsetAsync(buf, 0, bytes, static_cast<cudaStream_t>(st)));
  switch (t) {
    case DType::F32: fill_typed<float>(buf, n, 1.f, st); break;
    case DType::F64: fill_typed<double>(buf, n, 1.0, st); break;
    case DType::I8: case DType::U8: case DType::BOOL: fill_typed<uint8_t>(buf, n, 1, st); break;
    case DType::I16: fill_typed<int16_t>(buf, n, 1, st); break;
    case DType::I32: fill_typed<int32_t>(buf, n, 1, st); break;
    case DType::I64: fill_typed<int64_t>(buf, n, 1, st); break;
    case DType::C64: LAUNCH(k_fill_complex<float>, n, st, (float *)buf, n); break;
    case DType::C128: LAUNCH(k_fill_complex<double>, n, st, (double *)buf, n); break;
    case DType::F16: fill_typed<uint16_t>(buf, n, 0x3c00, st); break;
    case DType::BF16: fill_typed<uint16_t>(buf, n, 0x3f80, st); break;
  }
  return launched();
}

int wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign, void *st) {
  if (n <= 0) return LMD_OK;
  __int128 *a = static_cast<__int128 *>(acc);
  switch (t) {
    case DType::I8: LAUNCH(k_wide_acc<int8_t>, n, st, a, (const int8_t *)in, n, assign); break;
    case DType::I16: LAUNCH(k_wide_acc<int16_t>, n, st, a, (const int16_t *)in, n, assign); break;
    case DType::I32: LAUNCH(k_wide_acc<int32_t>, n, st, a, (const int32_t *)in, n, assign); break;
    case DType::I64: LAUNCH(k_wide_acc<int64_t>, n, st, a, (const int64_t *)in, n, assign); break;
    case DType::U8: LAUNCH(k_wide_acc<uint8_t>, n, st, a, (const uint8_t *)in, n, assign); break;
    default: return device::failed(LMD_FAILED, "wide_accumulate: dtype %d is not an integer type", (int)t);
  }
  return launched();
}

int wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k, void *st) {
  if (n <= 0) return LMD_OK;
  const __int128 *a = static_cast<const __int128 *>(acc);
  switch (t) {
    case DType::I8: LAUNCH(k_wide_fin<int8_t>, n, st, (int8_t *)out, a, n, k); break;
    case DType::I16: LAUNCH(k_wide_fin<int16_t>, n, st, (int16_t *)out, a, n, k); break;
    case DType::I32: LAUNCH(k_wide_fin<int32_t>, n, st, (int32_t *)out, a, n, k); break;
    case DType::I64: LAUNCH(k_wide_fin<int64_t>, n, st, (int64_t *)out, a, n, k); break;
    case DType::U8: LAUNCH(k_wide_fin<uint8_t>, n, st, (uint8_t *)out, a, n, k); break;
    default: return device::failed(LMD_FAILED, "wide_finish_avg: dtype %d is not an integer type", (int)t);
  }
  return launched();
}

namespace {
// One thread per element, which it moves as c.esize / sizeof(T) words of T (T: copy_word).
template <class T>
__global__ void k_box_copy(BoxCopy c, char *dst, const char *src, int64_t e0, int64_t n) {
  const int64_t words = c.esize / (int64_t)sizeof(T);
  LM_GRID_LOOP(i, n) {
    int64_t so, dof;
    boxcopy_locate(c, e0 + i, &so, &dof);
    T *d = reinterpret_cast<T *>(dst + dof * c.esize);
    const T *s = reinterpret_cast<const T *>(src + so * c.esize);
    for (int64_t w = 0; w < words; ++w) {
      LM_DEVICE_ACCESS(s + w, sizeof(T));
      LM_DEVICE_ACCESS(d + w, sizeof(T));
      d[w] = s[w];
    }
  }
}
struct alignas(16) Bytes16 {
  uint64_t a, b;
};

// The widest word (1 to 16 bytes, dividing the element size) at which every element of both
// buffers is aligned. Elements sit at base + k * esize, so that is the alignment the two base
// addresses share with esize: a complex128 shard at 8 mod 16 (a borrowed tensor may be: its
// check asks the 8-byte component alignment) moves as two 8-byte words, never a misaligned
// 16-byte load, which faults the context on a GPU (cudaErrorMisalignedAddress).
int64_t copy_word(int64_t esize, const void *dst, const void *src) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                      static_cast<uintptr_t>(esize);
  int64_t w = 16;
  while (w > 1 && a % (uintptr_t)w) w /= 2;
  return w;
}
}  // namespace

int box_copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1, void *st) {
  if (e1 > c.numel) e1 = c.numel;
  if (e0 >= e1) return LMD_OK;
  cudaStream_t s = static_cast<cudaStream_t>(st);
  if (c.n == 1)  // one run: both buffers contiguous over the range
    return device::cuda_status(cudaMemcpyAsync(
        static_cast<char *>(dst) + (c.dbase + e0) * c.esize,
        static_cast<const char *>(src) + (c.sbase + e0) * c.esize, (size_t)((e1 - e0) * c.esize),
        cudaMemcpyDeviceToDevice, s));
  const int64_t n = e1 - e0;
  char *d = static_cast<char *>(dst);
  const char *sp = static_cast<const char *>(src);
  if (c.esize < 1 || c.esize > 16 || (c.esize & (c.esize - 1)))
    return device::failed(LMD_FAILED, "box_copy: element size %lld", (long long)c.esize);
  switch (copy_word(c.esize, d, sp)) {
    case 1: LAUNCH(k_box_copy<uint8_t>, n, st, c, d, sp, e0, n); break;
    case 2: LAUNCH(k_box_copy<uint16_t>, n, st, c, d, sp, e0, n); break;
    case 4: LAUNCH(k_box_copy<uint32_t>, n, st, c, d, sp, e0, n); break;
    case 8: LAUNCH(k_box_copy<uint64_t>, n, st, c, d, sp, e0, n); break;
    default: LAUNCH(k_box_copy<Bytes16>, n, st, c, d, sp, e0, n); break;
  }
  return launched();
}

}  // namespace cuda
}  // namespace lm
