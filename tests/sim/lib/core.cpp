// SPDX-License-Identifier: BSD-3-Clause
// cudasim: settings from the environment, error state (per-thread last error, per-device sticky
// faults) and the error names and strings of the runtime.
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim.hpp"

namespace cudasim {

namespace {

double env_num(const char *name, double dflt, double lo, double hi) {
  const char *e = std::getenv(name);
  if (!e || !*e) return dflt;
  char *end = nullptr;
  double v = std::strtod(e, &end);
  if (!end || *end || v < lo || v > hi) {
    std::fprintf(stderr, "cudasim: %s=%s is not a number in [%g, %g]; using %g\n", name, e, lo, hi,
                 dflt);
    return dflt;
  }
  return v;
}

bool env_choice(const char *name, const char *a, const char *b) {  // true for b
  const char *e = std::getenv(name);
  if (!e || !*e || !std::strcmp(e, a)) return false;
  if (!std::strcmp(e, b)) return true;
  std::fprintf(stderr, "cudasim: %s=%s: expected %s or %s; using %s\n", name, e, a, b, a);
  return false;
}

Settings read_settings() {
  Settings s;
  s.devices = (int)env_num("CUDASIM_DEVICES", 1, 0, 64);
  s.shared = env_choice("CUDASIM_TOPOLOGY", "per-rank", "shared");
  s.jitter_us = (unsigned)env_num("CUDASIM_JITTER_US", 50, 0, 1e6);
  s.device_bytes = (size_t)env_num("CUDASIM_DEVICE_MEMORY_MB", 4096, 1, 1 << 20) << 20;
  s.quarantine_bytes = (size_t)env_num("CUDASIM_QUARANTINE_MB", 256, 0, 1 << 20) << 20;
  s.hang_seconds = env_num("CUDASIM_HANG_TIMEOUT", 120, 0.1, 1e6);
  s.nccl_seconds = env_num("CUDASIM_NCCL_TIMEOUT", 20, 0.1, 1e6);
  s.nccl_abort = !env_choice("CUDASIM_NCCL_ON_ERROR", "abort", "error");
  s.ring_bytes = (size_t)env_num("CUDASIM_NCCL_RING_KB", 256, 4, 1 << 20) << 10;
  s.enqueue_us = (unsigned)env_num("CUDASIM_NCCL_ENQUEUE_DELAY_US", 200, 0, 1e7);
  s.latency_us = (unsigned)env_num("CUDASIM_NCCL_LATENCY_US", 1000, 0, 1e7);
  s.verbose = env_num("CUDASIM_VERBOSE", 0, 0, 1) != 0;
  if (const char *log = std::getenv("CUDASIM_NCCL_LOG")) s.nccl_log = log;
  return s;
}

thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
std::atomic<int> g_sticky[64];  // per device; zero-initialised (cudaSuccess)

}  // namespace

const Settings &settings() {
  static const Settings s = read_settings();
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void report(const char *fmt, ...) {
  char buf[4096];
  int n = std::snprintf(buf, sizeof buf, "cudasim[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = std::strlen(buf);
  if (len && buf[len - 1] != '\n') buf[len++] = '\n';
  ssize_t w = write(2, buf, len);  // one write: lines of several ranks do not interleave
  (void)w;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) {
  t_last = e;
  if (settings().verbose) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report("%s: %s", cudaGetErrorName(e), msg);
  }
  return e;
}

void device_fault(int device, cudaError_t e, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int expected = cudaSuccess;
  if (g_sticky[device].compare_exchange_strong(expected, (int)e))
    report("device %d: %s (%s), sticky: the context is dead: %s", device, cudaGetErrorName(e),
           cudaGetErrorString(e), msg);
  else
    report("device %d (already dead): %s: %s", device, cudaGetErrorName(e), msg);
}

cudaError_t sticky(int device) {
  return (cudaError_t)g_sticky[device].load(std::memory_order_acquire);
}

int current_device() { return t_device; }

cudaError_t check_context() {
  if (settings().devices == 0) return fail(cudaErrorNoDevice, "CUDASIM_DEVICES=0");
  cudaError_t s = sticky(t_device);
  if (s != cudaSuccess) t_last = s;
  return s;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaGetLastError(void) {
  cudaError_t s = sticky(t_device);
  if (s != cudaSuccess) return s;  // sticky: cannot be cleared
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  cudaError_t s = sticky(t_device);
  return s != cudaSuccess ? s : t_last;
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: count is NULL");
  *count = settings().devices;
  if (*count == 0) return fail(cudaErrorNoDevice, "CUDASIM_DEVICES=0");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: device is NULL");
  if (settings().devices == 0) return fail(cudaErrorNoDevice, "CUDASIM_DEVICES=0");
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (settings().devices == 0) return fail(cudaErrorNoDevice, "CUDASIM_DEVICES=0");
  if (device < 0 || device >= settings().devices)
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d device(s)", device,
                settings().devices);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: NULL");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: NULL");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// PCI bus ids: per-rank topology gives every process its own GPUs (the process id in the PCI
// domain), shared gives all processes the same ones, so ranks that picked the same device
// index share a GPU ("Duplicate GPU" for NCCL, the host-staged path for localmap).
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
  if (!bus || len <= 0) return fail(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId: bad buffer");
  if (device < 0 || device >= settings().devices)
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId: device %d", device);
  unsigned domain = settings().shared ? 0u : (unsigned)getpid();
  std::snprintf(bus, (size_t)len, "%08x:%02x:00.0", domain, 0x10 + device);
  return cudaSuccess;
}

int cudasimTopology(void) { return settings().shared ? 1 : 0; }

#define CUDASIM_ERRORS(X)                                                                     \
  X(cudaSuccess, "no error")                                                                   \
  X(cudaErrorInvalidValue, "invalid argument")                                                 \
  X(cudaErrorMemoryAllocation, "out of memory")                                                \
  X(cudaErrorInitializationError, "initialization error")                                      \
  X(cudaErrorCudartUnloading, "driver shutting down")                                          \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                           \
  X(cudaErrorInvalidHostPointer, "invalid host pointer")                                       \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                   \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                      \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                   \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                          \
  X(cudaErrorInvalidKernelImage, "device kernel image is invalid")                             \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                 \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")           \
  X(cudaErrorNotReady, "device not ready")                                                     \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                       \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                  \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                         \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
  X(cudaErrorMisalignedAddress, "misaligned address")                                          \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                      \
  X(cudaErrorNotPermitted, "operation not permitted")                                          \
  X(cudaErrorNotSupported, "operation not supported")                                          \
  X(cudaErrorTimeout, "timeout")                                                               \
  X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorName(cudaError_t e) {
#define CUDASIM_NAME(code, text) \
  case code: return #code;
  switch (e) { CUDASIM_ERRORS(CUDASIM_NAME) }
#undef CUDASIM_NAME
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
#define CUDASIM_TEXT(code, text) \
  case code: return text;
  switch (e) { CUDASIM_ERRORS(CUDASIM_TEXT) }
#undef CUDASIM_TEXT
  return "unrecognized error code";
}

}  // extern "C"
