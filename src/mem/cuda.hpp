// SPDX-License-Identifier: BSD-3-Clause
// The CUDA runtime as the rest of the library sees it: no CUDA type crosses this header, so every
// module compiles with g++ in builds with and without CUDA. cuda.cpp implements it with the CUDA
// runtime under LM_WITH_CUDA, and as refusals (LM_ERR_NOT_SUPPORTED) without.
#pragma once

#include "localmap.h"

namespace lm {

// True when the library was built with CUDA and NCCL.
bool cuda_built();
// CUDA devices visible to this process (0 without a build, a driver or a device). Cached.
int cuda_device_count();
// Why cuda_device_count() is 0 ("" when it is not): for messages.
const char *cuda_absent_reason();
// True for kDLCUDA (the only device type besides kDLCPU that tensors may live on).
bool is_device(DLDevice d);

// Checks a kDLCUDA device: built with CUDA, a device present, id in range; throws
// LM_ERR_NOT_SUPPORTED / LM_ERR_INVALID_ARGUMENT naming `what`.
void check_cuda_device(DLDevice d, const char *what);
// Checks that `p` (not NULL) is memory of CUDA device d.device_id (device or managed memory, by
// cudaPointerGetAttributes); throws LM_ERR_INVALID_ARGUMENT naming `what` otherwise: a host
// buffer labelled kDLCUDA is refused, not dereferenced on the device.
void check_device_pointer(const void *p, DLDevice d, const char *what);

// Throws LM_ERR_CUDA "<what> failed: <string> (<name>) on rank R" (clears the runtime's error).
[[noreturn]] void cuda_fail(int err, const char *what);

// Orders stream `to` after the work enqueued so far on stream `from` (cudaStream_t values): an
// event recorded on `from` that `to` waits for. Never a host wait. Nothing when they are equal.
void stream_wait(void *to, void *from);

// Makes CUDA device `dev` current for a scope (kernels and NCCL calls go to the current device)
// and restores the caller's; does nothing in builds without CUDA.
class CurrentDevice {
 public:
  explicit CurrentDevice(int dev);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice &) = delete;
  CurrentDevice &operator=(const CurrentDevice &) = delete;

 private:
  int prev_ = -1;
};

}  // namespace lm

#ifdef LM_WITH_CUDA
// For .cpp/.cu files that include <cuda_runtime.h>: throws through cuda_fail when call fails.
#define LM_CUDA(call, what)                             \
  do {                                                  \
    cudaError_t lm_rc_ = (call);                        \
    if (lm_rc_ != cudaSuccess) ::lm::cuda_fail(lm_rc_, what); \
  } while (0)
#endif
