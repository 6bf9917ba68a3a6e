// SPDX-License-Identifier: BSD-3-Clause
// cudasim self-test, kernels: the library's own src/device/kernels.cu, compiled as host C++ into
// the CUDA=sim build's device component (device/launch.hpp), run on device memory through the
// static library's device MemOps (lm::device_ops), which load that component with dlopen as any
// program of the library does: every dtype's reduction bit for bit against the host arithmetic
// (layout/elementwise.hpp), avg, identity fills, box copies of every element size and at every
// alignment a borrowed tensor may have (complex128 at 8 mod 16, complex64 at 4 mod 8: issue 18,
// once 16-byte loads where 8-byte alignment was checked). And the simulator's own alignment check:
// a 16-byte access at 8 mod 16 (what the old k_box_copy did) must fault as on a GPU.
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "device/launch.hpp"
#include "layout/elementwise.hpp"
#include "mem/ops.hpp"
#include "sim_test.h"

namespace {

using lm::DType;
namespace ew = lm::ew;

cudaStream_t g_stream;

void setup() { SIM_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)); }

// The device memory operations of the library on g_stream (device 0): the component's kernels.
lm::MemOps &ops() {
  static std::unique_ptr<lm::MemOps> m;
  if (!m) m = lm::device_ops(g_stream, 0);
  return *m;
}

// In the stream's order (a cudaMemcpy from pageable memory is not ordered with g_stream).
void *upload(const std::vector<char> &h, size_t extra_offset = 0) {
  char *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), h.size() + extra_offset + 16));
  SIM_CUDA(cudaMemcpyAsync(d + extra_offset, h.data(), h.size(), cudaMemcpyHostToDevice, g_stream));
  SIM_CUDA(cudaStreamSynchronize(g_stream));
  return d + extra_offset;
}

std::vector<char> download(const void *d, size_t bytes) {
  std::vector<char> h(bytes);
  SIM_CUDA(cudaMemcpyAsync(h.data(), d, bytes, cudaMemcpyDeviceToHost, g_stream));
  SIM_CUDA(cudaStreamSynchronize(g_stream));
  return h;
}

// Random elements that are valid for the type (finite floats, 0/1 bools).
std::vector<char> random_data(DType t, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  size_t es = lm::dtype_size(t);
  std::vector<char> v(n * es);
  for (size_t i = 0; i < n; ++i) {
    char *p = v.data() + i * es;
    int r = (int)(rng() % 200) - 100;
    switch (t) {
      case DType::F32: { float f = (float)r / 8; std::memcpy(p, &f, 4); break; }
      case DType::C64: { float f[2] = {(float)r / 8, (float)(r % 7)}; std::memcpy(p, f, 8); break; }
      case DType::F64: { double f = r / 8.0; std::memcpy(p, &f, 8); break; }
      case DType::C128: { double f[2] = {r / 8.0, (double)(r % 5)}; std::memcpy(p, f, 16); break; }
      case DType::F16: { uint16_t h = ew::float_to_half((float)r / 4); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { uint16_t h = ew::float_to_bf16((float)r / 4); std::memcpy(p, &h, 2); break; }
      case DType::BOOL: *p = (char)(r & 1); break;
      default:
        for (size_t b = 0; b < es; ++b) p[b] = (char)rng();
    }
  }
  return v;
}

// The host's acc = op(acc, in), element by element, with the kernels' own arithmetic.
template <class T>
void host_loop(std::vector<char> &a, const std::vector<char> &b, T (*f)(int, T, T), int op) {
  for (size_t i = 0; i < a.size() / sizeof(T); ++i) {
    T x, y;
    std::memcpy(&x, &a[i * sizeof(T)], sizeof x);
    std::memcpy(&y, &b[i * sizeof(T)], sizeof y);
    x = f(op, x, y);
    std::memcpy(&a[i * sizeof(T)], &x, sizeof x);
  }
}

template <class R>
void host_complex(std::vector<char> &a, const std::vector<char> &b, int op) {
  for (size_t i = 0; i < a.size() / (2 * sizeof(R)); ++i) {
    R x[2], y[2];
    std::memcpy(x, &a[i * sizeof x], sizeof x);
    std::memcpy(y, &b[i * sizeof y], sizeof y);
    ew::reduce_complex<R>(op, x, y);
    std::memcpy(&a[i * sizeof x], x, sizeof x);
  }
}

uint16_t half_op(int op, uint16_t a, uint16_t b) { return ew::reduce_16(op, false, a, b); }
uint16_t bf16_op(int op, uint16_t a, uint16_t b) { return ew::reduce_16(op, true, a, b); }

void host_reduce(DType t, int op, std::vector<char> &a, const std::vector<char> &b) {
  switch (t) {
    case DType::F32: host_loop<float>(a, b, ew::reduce_float<float>, op); break;
    case DType::F64: host_loop<double>(a, b, ew::reduce_float<double>, op); break;
    case DType::I8: host_loop<int8_t>(a, b, ew::reduce_int<int8_t>, op); break;
    case DType::I16: host_loop<int16_t>(a, b, ew::reduce_int<int16_t>, op); break;
    case DType::I32: host_loop<int32_t>(a, b, ew::reduce_int<int32_t>, op); break;
    case DType::I64: host_loop<int64_t>(a, b, ew::reduce_int<int64_t>, op); break;
    case DType::U8: host_loop<uint8_t>(a, b, ew::reduce_int<uint8_t>, op); break;
    case DType::BOOL: host_loop<uint8_t>(a, b, ew::reduce_bool, op); break;
    case DType::F16: host_loop<uint16_t>(a, b, half_op, op); break;
    case DType::BF16: host_loop<uint16_t>(a, b, bf16_op, op); break;
    case DType::C64: host_complex<float>(a, b, op); break;
    case DType::C128: host_complex<double>(a, b, op); break;
  }
}

const DType kAll[] = {DType::F16, DType::BF16, DType::F32, DType::F64, DType::I8,  DType::I16,
                      DType::I32, DType::I64,  DType::U8,  DType::BOOL, DType::C64, DType::C128};

void reduce_every_dtype() {
  setup();
  const size_t n = 3001;  // 12 blocks of 256, the last partly idle
  int checked = 0;
  for (DType t : kAll)
    for (int op : {ew::kSum, ew::kProd, ew::kMax, ew::kMin}) {
      if ((t == DType::C64 || t == DType::C128) && (op == ew::kMax || op == ew::kMin)) continue;
      std::vector<char> a = random_data(t, n, 1 + op), b = random_data(t, n, 100 + op);
      void *da = upload(a), *db = upload(b);
      ops().reduce(t, op, da, db, (int64_t)n);
      host_reduce(t, op, a, b);
      SIM_CHECK(download(da, a.size()) == a);
      SIM_CUDA(cudaFree(da));
      SIM_CUDA(cudaFree(db));
      ++checked;
    }
  std::printf("%d dtype/op reductions bit-equal to the host\n", checked);
}

void avg_and_identity() {
  setup();
  const size_t n = 1000;
  // float avg: sum then scale
  std::vector<char> a = random_data(DType::F64, n, 7);
  void *da = upload(a);
  ops().scale_avg(DType::F64, da, (int64_t)n, 3);
  std::vector<char> back = download(da, a.size());
  for (size_t i = 0; i < n; ++i) {
    double x, y;
    std::memcpy(&x, &a[i * 8], 8);
    std::memcpy(&y, &back[i * 8], 8);
    SIM_CHECK(y == ew::scale<double>(x, 3));
  }
  // integer avg through the 128-bit accumulator: (x + x + x) / 3 == x
  std::vector<char> xi = random_data(DType::I32, n, 9);
  void *dx = upload(xi), *acc = nullptr, *out = nullptr;
  SIM_CUDA(cudaMalloc(&acc, n * 16));
  SIM_CUDA(cudaMalloc(&out, n * 4));
  ops().wide_accumulate(DType::I32, acc, dx, (int64_t)n, true);
  ops().wide_accumulate(DType::I32, acc, dx, (int64_t)n, false);
  ops().wide_accumulate(DType::I32, acc, dx, (int64_t)n, false);
  ops().wide_finish_avg(DType::I32, out, acc, (int64_t)n, 3);
  SIM_CHECK(download(out, n * 4) == xi);
  // prod's identity: ones, (1, 0) for complex; sum's: zeros
  ops().fill_identity(DType::C128, ew::kProd, da, (int64_t)(n / 2));
  back = download(da, n * 8);
  for (size_t i = 0; i < n / 2; ++i) {
    double z[2];
    std::memcpy(z, &back[i * 16], 16);
    SIM_CHECK(z[0] == 1.0 && z[1] == 0.0);
  }
  ops().fill_identity(DType::F16, ew::kProd, da, (int64_t)n);
  back = download(da, n * 2);
  for (size_t i = 0; i < n; ++i) SIM_CHECK(back[2 * i] == 0x00 && back[2 * i + 1] == 0x3c);
  ops().fill_identity(DType::I64, ew::kSum, da, (int64_t)(n / 8));
  back = download(da, n);
  for (char c : back) SIM_CHECK(c == 0);
}

// A 3x2 box of a 6x5 buffer at (1, 2) into a compact 3x2 buffer, elements of `es` bytes;
// `offset` shifts the source buffer from its (256-aligned) allocation, `doff` the target.
void box_copy_once(int64_t es, size_t offset, size_t doff = (size_t)-1) {
  if (doff == (size_t)-1) doff = offset;
  const int64_t len[2] = {3, 2}, src_shape[2] = {6, 5}, src_off[2] = {1, 2};
  const int64_t dst_shape[2] = {3, 2}, dst_off[2] = {0, 0};
  lm::BoxCopy c;
  lm::boxcopy_init(c, 2, len, src_shape, src_off, dst_shape, dst_off, es);
  SIM_CHECK(c.n == 2);  // not one contiguous run: the kernel path
  std::vector<char> src((size_t)(30 * es)), want((size_t)(6 * es), 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = (char)(i * 7 + 1);
  lm::boxcopy_range(c, want.data(), src.data(), 0, c.numel);
  void *ds = upload(src, offset), *dd = upload(std::vector<char>(want.size(), 0), doff);
  ops().copy(c, dd, ds, 0, c.numel);
  SIM_CHECK(download(dd, want.size()) == want);
}

void box_copy_every_size() {
  setup();
  for (int64_t es : {1, 2, 4, 8, 16}) box_copy_once(es, 0);
  box_copy_once(8, 8);  // complex64 / float64 at 8 mod 16: 8-byte accesses, fine
}

// Issue 18: a borrowed complex128 shard may sit at 8 mod 16 (its check asks the 8-byte component
// alignment), a complex64 one at 4 mod 8: the box copy moves them in words their real alignment
// allows (the old kernel loaded 16 / 8 bytes and faulted the context). Each offset on either side.
void box_copy_at_component_alignment() {
  setup();
  for (size_t off : {(size_t)8, (size_t)24}) {
    box_copy_once(16, off);
    box_copy_once(16, off, 0);
    box_copy_once(16, 0, off);
  }
  for (size_t off : {(size_t)4, (size_t)12}) {
    box_copy_once(8, off);
    box_copy_once(8, 0, off);
  }
  box_copy_once(4, 2);  // int32 at 2 mod 4 is refused at borrow; the copy would still be right
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  std::printf("complex128 at 8 mod 16, complex64 at 4 mod 8: box copies right, no fault\n");
}

// The simulator catches what a GPU faults on: a 16-byte access at 8 mod 16 (the old
// k_box_copy<Bytes16> on such a shard) is a sticky cudaErrorMisalignedAddress.
__global__ void k_wide_load(char *p) {
  LM_DEVICE_ACCESS(p, 16);
  p[0] = 1;
}
void planted_misaligned_16_byte_access() {
  setup();
  char *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), 64));
  LM_LAUNCH(k_wide_load, 1, 1, g_stream, d + 8);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);  // the launch succeeds
  cudaError_t e = cudaStreamSynchronize(g_stream);
  SIM_CHECK(e == cudaErrorMisalignedAddress);
  SIM_CHECK(cudaGetLastError() == cudaErrorMisalignedAddress);  // sticky
  std::printf("16-byte access at 8 mod 16 caught: %s\n", cudaGetErrorName(e));
}

// A launch failure reaches the library as an exception (the component's status, turned into
// LM_ERR_CUDA by the core's device MemOps).
void launch_error_throws() {
  setup();
  void *d = nullptr;
  SIM_CUDA(cudaMalloc(&d, 64));
  bool thrown = false;
  try {
    lm::device_ops(reinterpret_cast<void *>(0x1234), 0)->reduce(DType::F32, ew::kSum, d, d, 16);
  } catch (const lm::Error &e) {
    thrown = e.status() == LM_ERR_CUDA && std::strstr(e.what(), "cudaErrorInvalidResourceHandle");
  }
  SIM_CHECK(thrown);
}

const sim_case cases[] = {
    {"reduce_every_dtype", reduce_every_dtype},
    {"avg_and_identity", avg_and_identity},
    {"box_copy_every_size", box_copy_every_size},
    {"box_copy_at_component_alignment", box_copy_at_component_alignment},
    {"planted_misaligned_16_byte_access", planted_misaligned_16_byte_access},
    {"launch_error_throws", launch_error_throws},
};

}  // namespace

int main(int argc, char **argv) {
  return sim_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
