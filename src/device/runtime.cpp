// SPDX-License-Identifier: BSD-3-Clause
// The device component's CUDA runtime calls (mem/device_api.hpp): thin, each one call of the
// runtime turned into a status. What the core makes of them (messages, retries, ordering) is the
// core's (mem/cuda.cpp, mem/device.cpp).
#include "device/runtime.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>

#include "device/status.hpp"
#include "mem/device_api.hpp"

namespace lm {
namespace device {

namespace {
cudaStream_t S(void *s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(void *e) { return static_cast<cudaEvent_t>(e); }

// Whether an NVIDIA driver is installed at all: without one the runtime says "CUDA driver
// version is insufficient", which would send a user hunting for a driver upgrade.
bool driver_present() {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}
}  // namespace

int device_count(int *n, char *why, size_t len) {
  *n = 0;
  if (len) why[0] = '\0';
  cudaError_t rc = cudaGetDeviceCount(n);
  if (rc == cudaErrorNoDevice || (rc == cudaErrorInsufficientDriver && !driver_present())) {
    std::snprintf(why, len, "%s", rc == cudaErrorNoDevice ? "no GPU on this machine"
                                                          : "no GPU on this machine: no NVIDIA driver");
    cudaGetLastError();
    *n = 0;
  } else if (rc != cudaSuccess) {  // a driver problem: say what the runtime says
    std::snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(rc));
    cudaGetLastError();
    *n = 0;
  } else if (*n == 0) {
    std::snprintf(why, len, "no GPU on this machine");
  }
  return LMD_OK;
}

int versions(int *runtime, int *driver, int *nccl) {
  *runtime = *driver = *nccl = 0;
  cudaRuntimeGetVersion(runtime);
  if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
  cudaGetLastError();
  nccl_version(nccl);
  return LMD_OK;
}

int get_device(int *dev) { return cuda_status(cudaGetDevice(dev)); }
int set_device(int dev) { return cuda_status(cudaSetDevice(dev)); }
int pci_bus_id(int dev, char *buf, int len) { return cuda_status(cudaDeviceGetPCIBusId(buf, len, dev)); }

int pointer_kind(const void *p, int *kind, int *dev) {
  cudaPointerAttributes a{};
  int st = cuda_status(cudaPointerGetAttributes(&a, p));
  if (st != LMD_OK) return st;
  *dev = a.device;
  switch (a.type) {
    case cudaMemoryTypeDevice: *kind = LMD_MEM_DEVICE; break;
    case cudaMemoryTypeManaged: *kind = LMD_MEM_MANAGED; break;
    case cudaMemoryTypeHost: *kind = LMD_MEM_PINNED; break;
    default: *kind = LMD_MEM_UNREGISTERED; break;
  }
  return LMD_OK;
}

int malloc_async(void **p, size_t bytes, void *s) { return cuda_status(cudaMallocAsync(p, bytes, S(s))); }
int free_async(void *p, void *s) { return cuda_status(cudaFreeAsync(p, S(s))); }
int malloc_host(void **p, size_t bytes) { return cuda_status(cudaMallocHost(p, bytes)); }
int free_host(void *p) { return cuda_status(cudaFreeHost(p)); }

int memcpy_async(void *dst, const void *src, size_t bytes, int dir, void *s) {
  const cudaMemcpyKind k = dir == LMD_H2D   ? cudaMemcpyHostToDevice
                           : dir == LMD_D2H ? cudaMemcpyDeviceToHost
                                            : cudaMemcpyDeviceToDevice;
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, k, S(s)));
}
int memset_async(void *p, int v, size_t bytes, void *s) {
  return cuda_status(cudaMemsetAsync(p, v, bytes, S(s)));
}
int stream_synchronize(void *s) { return cuda_status(cudaStreamSynchronize(S(s))); }

int event_create(void **ev) {
  cudaEvent_t e = nullptr;
  int st = cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *ev = e;
  return st;
}
int event_record(void *ev, void *s) { return cuda_status(cudaEventRecord(E(ev), S(s))); }
int event_query(void *ev) { return cuda_status(cudaEventQuery(E(ev))); }
int event_synchronize(void *ev) { return cuda_status(cudaEventSynchronize(E(ev))); }
int event_destroy(void *ev) { return cuda_status(cudaEventDestroy(E(ev))); }
int stream_wait_event(void *s, void *ev) { return cuda_status(cudaStreamWaitEvent(S(s), E(ev), 0)); }

}  // namespace device
}  // namespace lm
