// SPDX-License-Identifier: BSD-3-Clause
// The device component's table (mem/device_api.hpp) and its one exported symbol,
// lm_device_component_entry (src/device/component.map exports nothing else). The core finds this
// library, checks the table, and calls nothing else of it (mem/component.cpp).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#include "common/dtype.hpp"
#include "device/kernels.hpp"
#include "device/runtime.hpp"
#include "device/status.hpp"
#include "localmap.h"
#include "mem/device_api.hpp"

namespace lm {
namespace device {
namespace {

// The headers this component was compiled against: "CUDA 13.0, NCCL 2.28.9".
const char *built_with() {
  static char b[128];
  std::snprintf(b, sizeof b, "%sCUDA %d.%d, NCCL %d.%d.%d",
#ifdef CUDASIM_VERSION
                "the simulator of tests/sim (cudasim): ",
#else
                "",
#endif
                CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, NCCL_MAJOR, NCCL_MINOR,
                NCCL_PATCH);
  return b;
}

DType T(int dtype) { return static_cast<DType>(dtype); }

int box_copy(const BoxCopy *c, void *dst, const void *src, int64_t e0, int64_t e1, void *s) {
  return cuda::box_copy(*c, dst, src, e0, e1, s);
}
int reduce(int t, int op, void *acc, const void *in, int64_t n, void *s) {
  return cuda::reduce(T(t), op, acc, in, n, s);
}
int scale_avg(int t, void *acc, int64_t n, int64_t k, void *s) {
  return cuda::scale_avg(T(t), acc, n, k, s);
}
int fill_identity(int t, int op, void *buf, int64_t n, void *s) {
  return cuda::fill_identity(T(t), op, buf, n, s);
}
int wide_accumulate(int t, void *acc, const void *in, int64_t n, int assign, void *s) {
  return cuda::wide_accumulate(T(t), acc, in, n, assign != 0, s);
}
int wide_finish_avg(int t, void *out, const void *acc, int64_t n, int64_t k, void *s) {
  return cuda::wide_finish_avg(T(t), out, acc, n, k, s);
}

const lm_device_api_t kApi = {
    LM_DEVICE_API_MAGIC, LM_DEVICE_API_VERSION, sizeof(lm_device_api_t), LM_VERSION_CODE,
    built_with(), last_error,
    device_count, versions,
    get_device, set_device, pci_bus_id, pointer_kind, malloc_async, free_async, malloc_host,
    free_host, memcpy_async, memset_async, stream_synchronize, event_create, event_record,
    event_query, event_synchronize, event_destroy, stream_wait_event,
    box_copy, reduce, scale_avg, fill_identity, wide_accumulate, wide_finish_avg,
    nccl_unique_id, nccl_init, nccl_async_error, nccl_finalize, nccl_destroy, nccl_abort,
    nccl_group_start, nccl_group_end, nccl_send, nccl_recv, nccl_all_gather,
    nccl_reduce_scatter, nccl_all_reduce, nccl_all_to_all, nccl_reduces, nccl_has_all_to_all,
};

}  // namespace
}  // namespace device
}  // namespace lm

// The table for interface `version`, or NULL when this component does not speak it (the core
// says so, naming both versions).
extern "C" __attribute__((visibility("default"))) const lm_device_api_t *lm_device_component_entry(
    uint32_t version) {
  return version == LM_DEVICE_API_VERSION ? &lm::device::kApi : nullptr;
}
