// SPDX-License-Identifier: BSD-3-Clause
#include "device/status.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdarg>
#include <cstdio>

#include "mem/device_api.hpp"

namespace lm {
namespace device {

namespace {
thread_local char t_error[512];
}

int failed(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return status;
}

int cuda_status(int err) {
  if (err == cudaSuccess) return LMD_OK;
  const cudaError_t e = static_cast<cudaError_t>(err);
  if (e == cudaErrorNotReady) return LMD_NOT_READY;  // not an error the runtime records
  cudaGetLastError();  // clears the runtime's (non-sticky) error state
  return failed(e == cudaErrorMemoryAllocation ? LMD_NO_MEMORY : LMD_FAILED, "%s (%s)",
                cudaGetErrorString(e), cudaGetErrorName(e));
}

int nccl_status(int res, void *comm) {
  const ncclResult_t r = static_cast<ncclResult_t>(res);
  if (r == ncclSuccess) return LMD_OK;
  if (r == ncclInProgress) return LMD_NOT_READY;
  const char *last = comm ? ncclGetLastError(static_cast<ncclComm_t>(comm)) : nullptr;
  return failed(LMD_FAILED, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "",
                last ? last : "");
}

const char *last_error() { return t_error; }

}  // namespace device
}  // namespace lm
