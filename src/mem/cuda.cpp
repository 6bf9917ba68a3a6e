// SPDX-License-Identifier: BSD-3-Clause
#include "mem/cuda.hpp"

#include <string>

#include "common/error.hpp"
#include "mem/component.hpp"

namespace lm {

namespace {
std::string g_absent_why;
}  // namespace

bool is_device(DLDevice d) { return enum_bits(d.device_type) == kDLCUDA; }

bool device_component_loaded() { return device_component().api != nullptr; }

const lm_device_api_t &cuda_api(const char *what) { return device_api(what); }

[[noreturn]] void cuda_fail(const char *what) {
  const lm_device_api_t *api = device_component().api;
  fail(LM_ERR_CUDA, "%s failed: %s on rank %d", what, api ? api->error() : "(no device component)",
       world_rank_or_minus1());
}

void cuda_check(int st, const char *what) {
  if (st == LMD_OK) return;
  if (st == LMD_NO_MEMORY)
    fail(LM_ERR_OUT_OF_MEMORY, "%s: out of memory (%s) on rank %d", what,
         device_component().api->error(), world_rank_or_minus1());
  cuda_fail(what);
}

int cuda_device_count() {
  static const int count = [] {  // once per process, thread-safe
    const ComponentInfo &c = device_component();
    if (!c.api) {
      g_absent_why = c.why;
      return 0;
    }
    int n = 0;
    char why[256] = "";
    if (c.api->device_count(&n, why, sizeof why) != LMD_OK || n < 0) n = 0;
    g_absent_why = n ? "" : why;
    return n;
  }();
  return count;
}

const char *cuda_absent_reason() {
  cuda_device_count();
  return g_absent_why.c_str();
}

void check_cuda_device(DLDevice d, const char *what) {
  cuda_api(what);  // the component's absence first: its own reason
  int n = cuda_device_count();
  if (n == 0)
    fail(LM_ERR_NOT_SUPPORTED, "%s: kDLCUDA: no CUDA device is visible to rank %d (%s)", what,
         world_rank_or_minus1(), g_absent_why.c_str());
  LM_CHECK_ARG(d.device_id >= 0 && d.device_id < n,
               "%s: kDLCUDA device_id %d is not a visible device [0, %d) on rank %d", what,
               d.device_id, n, world_rank_or_minus1());
}

void check_device_pointer(const void *p, DLDevice d, const char *what) {
  const lm_device_api_t &api = cuda_api(what);
  int kind = LMD_MEM_UNREGISTERED, dev = -1;
  if (api.pointer_kind(p, &kind, &dev) != LMD_OK)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is not CUDA memory (cudaPointerGetAttributes: %s) on "
         "rank %d", what, p, api.error(), world_rank_or_minus1());
  if (kind != LMD_MEM_DEVICE && kind != LMD_MEM_MANAGED)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is %s memory, not device memory of kDLCUDA device %d "
         "(rank %d)", what, p, kind == LMD_MEM_PINNED ? "pinned host" : "host (unregistered)",
         d.device_id, world_rank_or_minus1());
  if (kind == LMD_MEM_DEVICE && dev != d.device_id)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p lives on CUDA device %d, the DLDevice says %d (rank %d)",
         what, p, dev, d.device_id, world_rank_or_minus1());
}

void stream_wait(void *to, void *from) {
  if (to == from) return;
  const lm_device_api_t &api = cuda_api("stream ordering");
  void *ev = nullptr;
  cuda_check(api.event_create(&ev), "cudaEventCreateWithFlags");
  int st = api.event_record(ev, from);
  if (st == LMD_OK) st = api.stream_wait_event(to, ev);
  const std::string err = st == LMD_OK ? "" : api.error();
  api.event_destroy(ev);  // released once the recorded work completes
  if (st != LMD_OK)
    fail(LM_ERR_CUDA, "stream ordering (cudaEventRecord / cudaStreamWaitEvent) failed: %s on "
         "rank %d", err.c_str(), world_rank_or_minus1());
}

std::string cuda_pci_bus_id(int dev) {
  const lm_device_api_t *api = device_component().api;
  char bus[32] = "";
  if (!api || api->pci_bus_id(dev, bus, (int)sizeof bus) != LMD_OK) return strfmt("?%d", dev);
  return bus;
}

CurrentDevice::CurrentDevice(int dev) {
  const lm_device_api_t &api = cuda_api("making a device current");
  cuda_check(api.get_device(&prev_), "cudaGetDevice");
  if (prev_ != dev) cuda_check(api.set_device(dev), "cudaSetDevice");
}
CurrentDevice::~CurrentDevice() {
  const lm_device_api_t *api = device_component().api;
  int cur = -1;
  if (api && api->get_device(&cur) == LMD_OK && cur != prev_ && prev_ >= 0) api->set_device(prev_);
}

}  // namespace lm
