// SPDX-License-Identifier: BSD-3-Clause
// The device component's statuses (mem/device_api.hpp, LMD_*) and this thread's text of the last
// failure, which the core reads through the table's error(). Nothing here throws.
#pragma once

namespace lm {
namespace device {

// A CUDA runtime error (cudaError_t) as a status: its text "<string> (<name>)" recorded, the
// runtime's non-sticky error state cleared. cudaSuccess is LMD_OK.
int cuda_status(int err);
// An NCCL result (ncclResult_t) as a status: ncclInProgress is LMD_NOT_READY; a failure's text is
// NCCL's string, and its last message on `comm` when there is one.
int nccl_status(int res, void *comm);
// LMD_FAILED (or `status`) with a formatted text.
int failed(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The text of this thread's last failure ("" when none).
const char *last_error();

}  // namespace device
}  // namespace lm
