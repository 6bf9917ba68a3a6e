// SPDX-License-Identifier: BSD-3-Clause
#include "mem/cuda.hpp"

#include <dlfcn.h>

#include <string>

#include "common/error.hpp"

#ifdef LM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lm {

bool is_device(DLDevice d) { return enum_bits(d.device_type) == kDLCUDA; }

#ifdef LM_WITH_CUDA

namespace {
std::string g_absent_why;
// Whether an NVIDIA driver is installed at all: without one the runtime says "CUDA driver
// version is insufficient", which would send a user hunting for a driver upgrade.
bool driver_present() {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}
}  // namespace

bool cuda_built() { return true; }

[[noreturn]] void cuda_fail(int err, const char *what) {
  cudaGetLastError();  // clear the runtime's (non-sticky) error state
  fail(LM_ERR_CUDA, "%s failed: %s (%s) on rank %d", what,
       cudaGetErrorString(static_cast<cudaError_t>(err)),
       cudaGetErrorName(static_cast<cudaError_t>(err)), world_rank_or_minus1());
}

int cuda_device_count() {
  static const int count = [] {  // once per process, thread-safe
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaErrorNoDevice || (rc == cudaErrorInsufficientDriver && !driver_present())) {
      g_absent_why = rc == cudaErrorNoDevice ? "no GPU on this machine"
                                             : "no GPU on this machine: no NVIDIA driver";
      cudaGetLastError();
      n = 0;
    } else if (rc != cudaSuccess) {  // a driver problem: say what the runtime says
      g_absent_why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
      cudaGetLastError();
      n = 0;
    } else if (n == 0) {
      g_absent_why = "no GPU on this machine";
    }
    return n;
  }();
  return count;
}

const char *cuda_absent_reason() {
  cuda_device_count();
  return g_absent_why.c_str();
}

void check_cuda_device(DLDevice d, const char *what) {
  int n = cuda_device_count();
  if (n == 0)
    fail(LM_ERR_NOT_SUPPORTED, "%s: kDLCUDA: no CUDA device is visible to rank %d (%s)", what,
         world_rank_or_minus1(), g_absent_why.c_str());
  LM_CHECK_ARG(d.device_id >= 0 && d.device_id < n,
               "%s: kDLCUDA device_id %d is not a visible device [0, %d) on rank %d", what,
               d.device_id, n, world_rank_or_minus1());
}

void check_device_pointer(const void *p, DLDevice d, const char *what) {
  cudaPointerAttributes a{};
  cudaError_t rc = cudaPointerGetAttributes(&a, p);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is not CUDA memory (cudaPointerGetAttributes: %s) on "
         "rank %d", what, p, cudaGetErrorString(rc), world_rank_or_minus1());
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is %s memory, not device memory of kDLCUDA device %d "
         "(rank %d)", what, p, a.type == cudaMemoryTypeHost ? "pinned host" : "host (unregistered)",
         d.device_id, world_rank_or_minus1());
  if (a.type == cudaMemoryTypeDevice && a.device != d.device_id)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p lives on CUDA device %d, the DLDevice says %d (rank %d)",
         what, p, a.device, d.device_id, world_rank_or_minus1());
}

void stream_wait(void *to, void *from) {
  if (to == from) return;
  cudaEvent_t ev = nullptr;
  LM_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t rc = cudaEventRecord(ev, static_cast<cudaStream_t>(from));
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(to), ev, 0);
  cudaEventDestroy(ev);  // released once the recorded work completes
  if (rc != cudaSuccess) cuda_fail(rc, "stream ordering (cudaEventRecord / cudaStreamWaitEvent)");
}

CurrentDevice::CurrentDevice(int dev) {
  LM_CUDA(cudaGetDevice(&prev_), "cudaGetDevice");
  if (prev_ != dev) LM_CUDA(cudaSetDevice(dev), "cudaSetDevice");
}
CurrentDevice::~CurrentDevice() {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_ && prev_ >= 0) cudaSetDevice(prev_);
}

#else  // !LM_WITH_CUDA

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
const char *cuda_absent_reason() { return "this build has no CUDA backend (CUDA=0)"; }

[[noreturn]] void cuda_fail(int err, const char *what) {
  fail(LM_ERR_CUDA, "%s failed (error %d)", what, err);
}

[[noreturn]] static void not_built(const char *what) {
  fail(LM_ERR_NOT_SUPPORTED,
       "%s: device type kDLCUDA is not supported by this build (the CUDA/NCCL backend is not "
       "built in: build with CUDA=1; lm_device_supported tells)",
       what);
}
void check_cuda_device(DLDevice, const char *what) { not_built(what); }
void check_device_pointer(const void *, DLDevice, const char *what) { not_built(what); }
void stream_wait(void *, void *) {}
CurrentDevice::CurrentDevice(int) {}
CurrentDevice::~CurrentDevice() = default;

#endif  // LM_WITH_CUDA

}  // namespace lm
