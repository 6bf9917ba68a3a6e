// SPDX-License-Identifier: BSD-3-Clause
// The CUDA runtime as the rest of the library sees it, through the device component
// (mem/component.hpp): no CUDA type crosses this header and no CUDA library is linked. Every
// function that needs the runtime loads the component on its first call; where it cannot be
// loaded, they throw LM_ERR_NOT_SUPPORTED saying why (is_device, cuda_device_count and
// cuda_absent_reason answer without throwing).
#pragma once

#include <string>

#include "localmap.h"
#include "mem/device_api.hpp"

namespace lm {

// True when the device component is loaded (loading it on the first call).
bool device_component_loaded();
// CUDA devices visible to this process (0 without the component, a driver or a device). Cached.
int cuda_device_count();
// Why cuda_device_count() is 0 ("" when it is not): for messages.
const char *cuda_absent_reason();
// True for kDLCUDA (the only device type besides kDLCPU that tensors may live on).
bool is_device(DLDevice d);
// The component's table; throws LM_ERR_NOT_SUPPORTED naming `what` where it is not loaded.
const lm_device_api_t &cuda_api(const char *what);

// Checks a kDLCUDA device: the component loaded, a device present, id in range; throws
// LM_ERR_NOT_SUPPORTED / LM_ERR_INVALID_ARGUMENT naming `what`.
void check_cuda_device(DLDevice d, const char *what);
// Checks that `p` (not NULL) is memory of CUDA device d.device_id (device or managed memory, by
// cudaPointerGetAttributes); throws LM_ERR_INVALID_ARGUMENT naming `what` otherwise: a host
// buffer labelled kDLCUDA is refused, not dereferenced on the device.
void check_device_pointer(const void *p, DLDevice d, const char *what);

// Throws LM_ERR_CUDA "<what> failed: <the component's text of it> on rank R".
[[noreturn]] void cuda_fail(const char *what);
// Throws what a failed call of the component means: LM_ERR_OUT_OF_MEMORY for LMD_NO_MEMORY
// ("<what>: out of memory (...)"), else cuda_fail(what). Nothing when st is LMD_OK.
void cuda_check(int st, const char *what);

// Orders stream `to` after the work enqueued so far on stream `from` (cudaStream_t values): an
// event recorded on `from` that `to` waits for. Never a host wait. Nothing when they are equal.
void stream_wait(void *to, void *from);

// The PCI bus id of device `dev` ("0000:65:00.0"), or "?<dev>" where the runtime cannot tell.
std::string cuda_pci_bus_id(int dev);

// Makes CUDA device `dev` current for a scope (kernels and NCCL calls go to the current device)
// and restores the caller's.
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
