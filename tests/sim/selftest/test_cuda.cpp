// SPDX-License-Identifier: BSD-3-Clause
// cudasim self-test, CUDA runtime: memory protection, pointer attributes, free poisoning, stream
// asynchrony and ordering (legacy, blocking, non-blocking, events), a planted missing event wait,
// sticky and non-sticky errors, kernel launches and their alignment checks, devices and
// topologies. Each case runs in its own process (sim_test.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace {

__global__ void k_iota(int *a, int n, int base) {
  for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(blockDim.x * gridDim.x))
    a[i] = base + i;
}

__global__ void k_scale(double *a, int n, double f) {
  for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(blockDim.x * gridDim.x))
    a[i] *= f;
}

// Every thread of a 3-D grid of 3-D blocks, once.
__global__ void k_scale3d(double *a, int n, double f) {
  unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  unsigned tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned total = threads * gridDim.x * gridDim.y * gridDim.z;
  for (unsigned i = block * threads + tid; i < (unsigned)n; i += total) a[i] *= f;
}

// A 16-byte access, stated as the library's kernels state theirs.
__global__ void k_copy16(const char *src, char *dst) {
  cudasimCheckAccess(src, 16);
  cudasimCheckAccess(dst, 16);
  std::memcpy(dst, src, 16);
}

int *dev_ints(size_t n) {
  int *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), n * sizeof(int)));
  return d;
}

std::vector<int> download(const int *d, size_t n) {
  std::vector<int> h(n, -1);
  SIM_CUDA(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  return h;
}

bool all_equal(const std::vector<int> &v, int x) {
  for (int y : v)
    if (y != x) return false;
  return true;
}

cudaStream_t make_stream(unsigned flags) {
  cudaStream_t s = nullptr;
  SIM_CUDA(cudaStreamCreateWithFlags(&s, flags));
  return s;
}

// ------------------------------------------------------------------------------ memory
// Device memory is usable by stream work, never by host code: a host read faults.
void host_deref_crashes() {
  int *d = dev_ints(1024);
  std::vector<int> h(1024, 5);
  SIM_CUDA(cudaMemcpy(d, h.data(), 4096, cudaMemcpyHostToDevice));
  SIM_CHECK(all_equal(download(d, 1024), 5));
  sim_expect_segv(d, 4096);
  volatile int x = reinterpret_cast<volatile int *>(d)[10];
  (void)x;
  SIM_CHECK(!"a host read of device memory did not fault");
}

void host_write_crashes() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  void *p = nullptr;
  SIM_CUDA(cudaMallocAsync(&p, 256, s));
  SIM_CUDA(cudaMemsetAsync(p, 0, 256, s));
  SIM_CUDA(cudaStreamSynchronize(s));
  sim_expect_segv(p, 256);
  static_cast<volatile char *>(p)[3] = 1;
  SIM_CHECK(!"a host write to device memory did not fault");
}

void roundtrip_and_memset() {
  const size_t n = 10000;
  int *d = dev_ints(n);
  SIM_CUDA(cudaMemset(d, 0x01, n * sizeof(int)));  // asynchronous, on the legacy stream
  SIM_CHECK(all_equal(download(d, n), 0x01010101));  // ordered after it on the same stream
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  int *pinned = nullptr;
  SIM_CUDA(cudaMallocHost(reinterpret_cast<void **>(&pinned), n * sizeof(int)));
  for (size_t i = 0; i < n; ++i) pinned[i] = (int)i;
  SIM_CUDA(cudaMemcpyAsync(d, pinned, n * sizeof(int), cudaMemcpyHostToDevice, s));
  SIM_CUDA(cudaMemsetAsync(pinned, 0, n * sizeof(int), s));
  SIM_CUDA(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDefault, s));
  SIM_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) SIM_CHECK(pinned[i] == (int)i);
  SIM_CUDA(cudaFreeHost(pinned));
  SIM_CUDA(cudaFree(d));
  SIM_CUDA(cudaStreamDestroy(s));
}

void pointer_attributes() {
  void *d = nullptr, *h = nullptr;
  int stack = 0;
  SIM_CUDA(cudaMalloc(&d, 1000));
  SIM_CUDA(cudaMallocHost(&h, 1000));
  cudaPointerAttributes a;
  SIM_CUDA(cudaPointerGetAttributes(&a, d));
  SIM_CHECK(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == d && !a.hostPointer);
  SIM_CUDA(cudaPointerGetAttributes(&a, static_cast<char *>(d) + 999));  // inside the block
  SIM_CHECK(a.type == cudaMemoryTypeDevice);
  SIM_CUDA(cudaPointerGetAttributes(&a, h));
  SIM_CHECK(a.type == cudaMemoryTypeHost && a.hostPointer == h);
  SIM_CUDA(cudaPointerGetAttributes(&a, &stack));  // CUDA 11+: no error for host memory
  SIM_CHECK(a.type == cudaMemoryTypeUnregistered);
  void *m = std::malloc(64);
  SIM_CUDA(cudaPointerGetAttributes(&a, m));
  SIM_CHECK(a.type == cudaMemoryTypeUnregistered);
  std::free(m);
  SIM_CHECK((uintptr_t)d % 256 == 0 && (uintptr_t)h % 256 == 0);  // cudaMalloc's alignment
  SIM_CUDA(cudaFree(d));
  SIM_CUDA(cudaPointerGetAttributes(&a, d));  // freed: no longer device memory
  SIM_CHECK(a.type == cudaMemoryTypeUnregistered);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
}

// A stream-ordered free poisons the block: calls refuse it, stream work faults on it, host code
// crashes on it, and its address is not handed out again while it sits in the quarantine.
void free_poisons() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  void *p = nullptr, *q = nullptr;
  SIM_CUDA(cudaMallocAsync(&p, 4096, s));
  SIM_CUDA(cudaMemsetAsync(p, 1, 4096, s));
  SIM_CUDA(cudaFreeAsync(p, s));
  SIM_CUDA(cudaStreamSynchronize(s));
  SIM_CUDA(cudaMallocAsync(&q, 4096, s));
  SIM_CHECK(q != p);
  cudaPointerAttributes a;
  SIM_CUDA(cudaPointerGetAttributes(&a, p));
  SIM_CHECK(a.type == cudaMemoryTypeUnregistered);
  char h[16];
  SIM_CHECK(cudaMemcpy(h, p, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // not sticky
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  SIM_CHECK(cudaFreeAsync(p, s) == cudaErrorInvalidValue);  // double free
  SIM_CHECK(cudaFree(p) == cudaErrorInvalidValue);
  cudaGetLastError();
  sim_expect_segv(p, 4096);
  volatile char c = *static_cast<volatile char *>(p);
  (void)c;
  SIM_CHECK(!"a host read of freed device memory did not fault");
}

// Work queued after the free in stream order (here: another stream ordered by an event) faults:
// sticky cudaErrorIllegalAddress, like a GPU touching unmapped memory.
void use_after_free_async_faults() {
  cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(256);
  SIM_CUDA(cudaFreeAsync(d, a));
  cudaEvent_t e;
  SIM_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SIM_CUDA(cudaEventRecord(e, a));
  SIM_CUDA(cudaStreamWaitEvent(b, e, 0));
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, b, d, 256, 0);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);  // the launch itself is fine
  SIM_CHECK(cudaStreamSynchronize(b) == cudaErrorIllegalAddress);
  SIM_CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  SIM_CHECK(cudaGetLastError() == cudaErrorIllegalAddress);  // sticky
}

// cudaMallocAsync memory is usable from its point in stream order on; a stream not ordered after
// that point faults on it.
void malloc_async_pending_faults() {
  cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
  SIM_CUDA(cudasimStreamDelay(a, 500000));
  void *p = nullptr;
  SIM_CUDA(cudaMallocAsync(&p, 4096, a));
  SIM_CUDA(cudaMemsetAsync(p, 0, 4096, b));  // b does not wait for a
  SIM_CHECK(cudaStreamSynchronize(b) == cudaErrorIllegalAddress);
}

// ------------------------------------------------------------------------------ streams
void stream_is_asynchronous() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(4096), *h = nullptr;
  SIM_CUDA(cudaMallocHost(reinterpret_cast<void **>(&h), 4096 * sizeof(int)));
  double t0 = sim_now();
  SIM_CUDA(cudasimStreamDelay(s, 1000000));
  CUDASIM_LAUNCH(k_iota, 4, 128, 0, s, d, 4096, 7);
  SIM_CUDA(cudaMemcpyAsync(h, d, 4096 * sizeof(int), cudaMemcpyDeviceToHost, s));
  SIM_CHECK(sim_now() - t0 < 0.5);  // the calls returned at once (margin for a loaded machine)
  SIM_CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);  // not-ready is not an error
  SIM_CUDA(cudaStreamSynchronize(s));
  SIM_CHECK(sim_now() - t0 >= 1.0);
  SIM_CHECK(cudaStreamQuery(s) == cudaSuccess);
  for (int i = 0; i < 4096; ++i) SIM_CHECK(h[i] == 7 + i);
}

// The legacy stream (cudaMemcpy) waits for work on blocking streams.
void legacy_waits_for_blocking() {
  cudaStream_t b = make_stream(cudaStreamDefault);
  int *d = dev_ints(64);
  SIM_CUDA(cudasimStreamDelay(b, 200000));
  SIM_CUDA(cudaMemsetAsync(d, 1, 64 * sizeof(int), b));
  SIM_CHECK(all_equal(download(d, 64), 0x01010101));
}

// Blocking streams wait for earlier legacy-stream work; non-blocking ones do not.
void blocking_waits_for_legacy() {
  cudaStream_t b = make_stream(cudaStreamDefault), n = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64);
  SIM_CUDA(cudasimStreamDelay(nullptr, 200000));
  SIM_CUDA(cudaMemset(d, 3, 64 * sizeof(int)));
  SIM_CUDA(cudaMemsetAsync(d, 4, 64 * sizeof(int), b));  // after the legacy memset
  SIM_CUDA(cudaStreamSynchronize(b));
  SIM_CHECK(all_equal(download(d, 64), 0x04040404));
  SIM_CUDA(cudasimStreamDelay(nullptr, 500000));
  SIM_CUDA(cudaMemset(d, 5, 64 * sizeof(int)));
  SIM_CUDA(cudaMemsetAsync(d, 6, 64 * sizeof(int), n));  // not ordered: runs first
  SIM_CUDA(cudaDeviceSynchronize());
  SIM_CHECK(all_equal(download(d, 64), 0x05050505));
}

// cudaMemcpy is synchronous for the host but not ordered with non-blocking streams, and
// cudaMemset is asynchronous: the pattern of tests/gpu/gpu_test.h (issue 18, section 2) reads
// stale data here, as it may on a GPU.
void nonblocking_not_ordered_with_memcpy() {
  cudaStream_t n = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64);
  SIM_CUDA(cudaMemset(d, 0, 64 * sizeof(int)));
  SIM_CUDA(cudaDeviceSynchronize());
  SIM_CUDA(cudasimStreamDelay(n, 1000000));
  SIM_CUDA(cudaMemsetAsync(d, 2, 64 * sizeof(int), n));
  double t0 = sim_now();
  SIM_CHECK(all_equal(download(d, 64), 0));  // cudaMemcpy did not wait for n
  SIM_CHECK(sim_now() - t0 < 0.5);
  SIM_CUDA(cudaStreamSynchronize(n));
  SIM_CHECK(all_equal(download(d, 64), 0x02020202));
}

// A cudaMemcpy from pageable host memory to the device returns once the bytes are staged (CUDA:
// "the DMA to final destination may not have completed"): the host buffer is free at once, but
// the device is written in the legacy stream's order, which a non-blocking stream is not ordered
// with. The old upload of tests/gpu/gpu_test.h (cudaMemcpy, then the test's non-blocking stream
// reads) is caught: the reader sees stale bytes.
void pageable_upload_not_ordered_with_nonblocking() {
  cudaStream_t n = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64), *out = dev_ints(64);
  std::vector<int> h(64, 9);
  SIM_CUDA(cudasimStreamDelay(nullptr, 300000));
  double t0 = sim_now();
  SIM_CUDA(cudaMemcpy(d, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
  SIM_CHECK(sim_now() - t0 < 0.2);  // returned before the device was written
  std::fill(h.begin(), h.end(), 7);  // the source may be reused at once: 9s were staged
  SIM_CUDA(cudaMemcpyAsync(out, d, 64 * sizeof(int), cudaMemcpyDeviceToDevice, n));  // not ordered
  SIM_CUDA(cudaStreamSynchronize(n));
  SIM_CHECK(all_equal(download(out, 64), 0));  // caught: stale
  SIM_CUDA(cudaDeviceSynchronize());
  SIM_CHECK(all_equal(download(d, 64), 9));
  std::printf("pageable cudaMemcpy read early by a non-blocking stream: stale values, caught\n");
}

void events_order_streams() {
  cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64), *h = nullptr;
  SIM_CUDA(cudaMallocHost(reinterpret_cast<void **>(&h), 64 * sizeof(int)));
  SIM_CUDA(cudaMemset(d, 0, 64 * sizeof(int)));
  SIM_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e, never;
  SIM_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SIM_CUDA(cudaEventCreate(&never));
  SIM_CHECK(cudaEventQuery(never) == cudaSuccess);  // never recorded: complete
  SIM_CUDA(cudaStreamWaitEvent(b, never, 0));       // and nothing to wait for
  SIM_CUDA(cudasimStreamDelay(a, 500000));
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, a, d, 64, 100);
  SIM_CUDA(cudaEventRecord(e, a));
  SIM_CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  SIM_CUDA(cudaStreamWaitEvent(b, e, 0));
  SIM_CUDA(cudaEventDestroy(e));  // the wait keeps what it needs
  SIM_CUDA(cudaMemcpyAsync(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost, b));
  SIM_CUDA(cudaStreamSynchronize(b));
  for (int i = 0; i < 64; ++i) SIM_CHECK(h[i] == 100 + i);
}

// Planted bug: the consumer stream forgets cudaStreamWaitEvent. The simulator must make it show:
// the consumer reads the data before the producer wrote it.
void planted_missing_event_wait() {
  cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64), *h = nullptr;
  SIM_CUDA(cudaMallocHost(reinterpret_cast<void **>(&h), 64 * sizeof(int)));
  SIM_CUDA(cudaMemset(d, 0, 64 * sizeof(int)));
  SIM_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e;
  SIM_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SIM_CUDA(cudasimStreamDelay(a, 500000));  // the producer is a slow kernel
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, a, d, 64, 100);
  SIM_CUDA(cudaEventRecord(e, a));
  /* BUG (planted): cudaStreamWaitEvent(b, e, 0) missing */
  SIM_CUDA(cudaMemcpyAsync(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost, b));
  SIM_CUDA(cudaStreamSynchronize(b));
  int wrong = 0;
  for (int i = 0; i < 64; ++i) wrong += h[i] != 100 + i;
  SIM_CHECK(wrong == 64);  // caught: every value is stale
  std::fprintf(stderr, "planted missing event wait caught: the consumer read %d stale values\n", wrong);
}

// ------------------------------------------------------------------------------ errors, kernels
void kernel_launches() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  const int n = 100000;
  double *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), n * sizeof(double)));
  std::vector<double> h(n);
  for (int i = 0; i < n; ++i) h[i] = i;
  SIM_CUDA(cudaMemcpyAsync(d, h.data(), n * sizeof(double), cudaMemcpyHostToDevice, s));
  CUDASIM_LAUNCH(k_scale3d, dim3(7, 3, 2), dim3(32, 2, 2), 0, s, d, n, 0.5);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  SIM_CUDA(cudaStreamSynchronize(s));
  SIM_CUDA(cudaMemcpy(h.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) SIM_CHECK(h[i] == 0.5 * i);
  CUDASIM_LAUNCH(k_scale, 1, 2048, 0, s, d, n, 0.5);  // too many threads: a launch error
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  SIM_CUDA(cudaStreamSynchronize(s));
}

void non_sticky_errors() {
  SIM_CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
  SIM_CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  void *h = std::malloc(64), *d = nullptr;
  SIM_CUDA(cudaMalloc(&d, 64));
  SIM_CHECK(cudaMemcpy(h, d, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // wrong kind
  SIM_CHECK(cudaMemcpy(d, h, 128, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // overrun
  SIM_CHECK(cudaMemset(h, 0, 64) == cudaErrorInvalidValue);  // host memory
  SIM_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(h)) == cudaErrorInvalidResourceHandle);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  SIM_CUDA(cudaMemcpy(d, h, 64, cudaMemcpyDefault));
  SIM_CHECK(std::strcmp(cudaGetErrorName(cudaErrorMisalignedAddress), "cudaErrorMisalignedAddress") == 0);
  std::free(h);
}

// A typed pointer argument that is misaligned for its type faults the context (sticky).
void sticky_misaligned_argument() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  char *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), 1024));
  CUDASIM_LAUNCH(k_scale, 1, 32, 0, s, reinterpret_cast<double *>(d + 4), 8, 2.0);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);
  SIM_CHECK(cudaStreamSynchronize(s) == cudaErrorMisalignedAddress);
  SIM_CHECK(cudaGetLastError() == cudaErrorMisalignedAddress);
  SIM_CHECK(cudaGetLastError() == cudaErrorMisalignedAddress);  // cannot be cleared
  void *p = nullptr;
  SIM_CHECK(cudaMalloc(&p, 16) == cudaErrorMisalignedAddress);  // the context is dead
}

// An access stated with cudasimCheckAccess: 16 bytes at 8 mod 16 faults like the GPU.
void access_width_checked() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  char *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), 1024));
  SIM_CUDA(cudaMemset(d, 1, 1024));
  CUDASIM_LAUNCH(k_copy16, 1, 1, 0, s, d + 16, d + 512);  // aligned: fine
  SIM_CUDA(cudaStreamSynchronize(s));
  CUDASIM_LAUNCH(k_copy16, 1, 1, 0, s, d + 8, d + 512);
  SIM_CHECK(cudaStreamSynchronize(s) == cudaErrorMisalignedAddress);
}

void access_bounds_checked() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  char *d = nullptr;
  SIM_CUDA(cudaMalloc(reinterpret_cast<void **>(&d), 1024));
  CUDASIM_LAUNCH(k_copy16, 1, 1, 0, s, d + 1024 - 16, d);  // last 16 bytes: fine
  SIM_CUDA(cudaStreamSynchronize(s));
  CUDASIM_LAUNCH(k_copy16, 1, 1, 0, s, d + 1024, d);  // past the end
  SIM_CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
}

void host_pointer_to_kernel_faults() {
  cudaStream_t s = make_stream(cudaStreamNonBlocking);
  std::vector<int> h(64);
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, s, h.data(), 64, 0);
  SIM_CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
}

// A host wait longer than CUDASIM_HANG_TIMEOUT reports the streams and aborts (bounded time).
void hang_aborts() {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("CUDASIM_HANG_TIMEOUT", "0.3", 1);
    cudaStream_t s = make_stream(cudaStreamNonBlocking);
    SIM_CUDA(cudasimStreamDelay(s, 5000000));
    cudaStreamSynchronize(s);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  SIM_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

// ------------------------------------------------------------------------------ devices
void devices_and_per_rank_topology() {
  setenv("CUDASIM_DEVICES", "2", 1);
  int n = 0, dev = -1;
  SIM_CUDA(cudaGetDeviceCount(&n));
  SIM_CHECK(n == 2 && cudasimTopology() == 0);
  char b0[32], b1[32], want[32];
  SIM_CUDA(cudaDeviceGetPCIBusId(b0, sizeof b0, 0));
  SIM_CUDA(cudaDeviceGetPCIBusId(b1, sizeof b1, 1));
  std::snprintf(want, sizeof want, "%08x:10:00.0", (unsigned)getpid());  // this process's GPU
  SIM_CHECK(std::strcmp(b0, want) == 0 && std::strcmp(b0, b1) != 0);
  SIM_CUDA(cudaSetDevice(1));
  SIM_CUDA(cudaGetDevice(&dev));
  SIM_CHECK(dev == 1);
  void *p = nullptr;
  SIM_CUDA(cudaMalloc(&p, 64));
  cudaPointerAttributes a;
  SIM_CUDA(cudaPointerGetAttributes(&a, p));
  SIM_CHECK(a.type == cudaMemoryTypeDevice && a.device == 1);
  SIM_CHECK(cudaSetDevice(2) == cudaErrorInvalidDevice);
}

// A kernel launched on a stream of another device than the current one fails, as in CUDA (not
// sticky); a copy on that stream is allowed.
void launch_on_other_device_stream_fails() {
  setenv("CUDASIM_DEVICES", "2", 1);
  SIM_CUDA(cudaSetDevice(1));
  cudaStream_t s1 = make_stream(cudaStreamNonBlocking);
  int *d = dev_ints(64);
  SIM_CUDA(cudaSetDevice(0));
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, s1, d, 64, 0);
  SIM_CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  SIM_CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  SIM_CUDA(cudaMemsetAsync(d, 0, 64 * sizeof(int), s1));
  SIM_CUDA(cudaStreamSynchronize(s1));
  SIM_CUDA(cudaSetDevice(1));
  CUDASIM_LAUNCH(k_iota, 1, 64, 0, s1, d, 64, 7);
  SIM_CUDA(cudaGetLastError());
  SIM_CUDA(cudaStreamSynchronize(s1));
  SIM_CHECK(download(d, 64)[63] == 7 + 63);
}

void shared_topology() {
  setenv("CUDASIM_TOPOLOGY", "shared", 1);
  char b0[32];
  SIM_CUDA(cudaDeviceGetPCIBusId(b0, sizeof b0, 0));
  SIM_CHECK(std::strcmp(b0, "00000000:10:00.0") == 0 && cudasimTopology() == 1);
}

void no_device() {
  setenv("CUDASIM_DEVICES", "0", 1);
  int n = 5;
  SIM_CHECK(cudaGetDeviceCount(&n) == cudaErrorNoDevice && n == 0);
  void *p = nullptr;
  SIM_CHECK(cudaMalloc(&p, 16) == cudaErrorNoDevice);
}

void out_of_memory() {
  setenv("CUDASIM_DEVICE_MEMORY_MB", "1", 1);
  void *p = nullptr, *q = nullptr;
  SIM_CUDA(cudaMalloc(&p, 600 << 10));
  SIM_CHECK(cudaMalloc(&q, 600 << 10) == cudaErrorMemoryAllocation);
  SIM_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  SIM_CUDA(cudaFree(p));
  SIM_CUDA(cudaMalloc(&q, 600 << 10));
  SIM_CHECK(cudaMalloc(&p, (size_t)1 << 50) == cudaErrorMemoryAllocation);
}

const sim_case cases[] = {
    {"host_deref_crashes", host_deref_crashes},
    {"host_write_crashes", host_write_crashes},
    {"roundtrip_and_memset", roundtrip_and_memset},
    {"pointer_attributes", pointer_attributes},
    {"free_poisons", free_poisons},
    {"use_after_free_async_faults", use_after_free_async_faults},
    {"malloc_async_pending_faults", malloc_async_pending_faults},
    {"stream_is_asynchronous", stream_is_asynchronous},
    {"legacy_waits_for_blocking", legacy_waits_for_blocking},
    {"blocking_waits_for_legacy", blocking_waits_for_legacy},
    {"nonblocking_not_ordered_with_memcpy", nonblocking_not_ordered_with_memcpy},
    {"pageable_upload_not_ordered_with_nonblocking", pageable_upload_not_ordered_with_nonblocking},
    {"events_order_streams", events_order_streams},
    {"planted_missing_event_wait", planted_missing_event_wait},
    {"kernel_launches", kernel_launches},
    {"non_sticky_errors", non_sticky_errors},
    {"sticky_misaligned_argument", sticky_misaligned_argument},
    {"access_width_checked", access_width_checked},
    {"access_bounds_checked", access_bounds_checked},
    {"host_pointer_to_kernel_faults", host_pointer_to_kernel_faults},
    {"hang_aborts", hang_aborts},
    {"devices_and_per_rank_topology", devices_and_per_rank_topology},
    {"launch_on_other_device_stream_fails", launch_on_other_device_stream_fails},
    {"shared_topology", shared_topology},
    {"no_device", no_device},
    {"out_of_memory", out_of_memory},
};

}  // namespace

int main(int argc, char **argv) {
  return sim_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
