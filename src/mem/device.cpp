// SPDX-License-Identifier: BSD-3-Clause
// Device memory of a mesh: allocations in the mesh's stream order (its lm_device_config_t), device
// to device copies, and pinned host staging buffers for the host-staged transport and the
// host-only calls (gather). Through the device component (mem/component.hpp): where it is not
// loaded, these throw LM_ERR_NOT_SUPPORTED.
#include "mem/device.hpp"

#include <string>

#include "common/error.hpp"
#include "mem/component.hpp"
#include "mem/cuda.hpp"

namespace lm {

DeviceMem::DeviceMem() {
  config.size = sizeof config;
  config.magic = LM_DEVICE_CONFIG_MAGIC;
  config.version = LM_DEVICE_CONFIG_VERSION;
}

namespace {
void *const kInUse = reinterpret_cast<void *>(1);  // Pinned::event of a buffer in use
}  // namespace

DeviceMem::~DeviceMem() {
  if (pinned.empty()) return;
  const lm_device_api_t *api = device_component().api;  // loaded: these came from it
  for (auto &p : pinned) {
    if (p.event && p.event != kInUse) {
      api->event_synchronize(p.event);
      api->event_destroy(p.event);
    }
    api->free_host(p.ptr);
  }
}

std::shared_ptr<Storage> device_storage_alloc(DeviceMem &dm, DLDevice device, size_t bytes,
                                              bool zero) {
  check_cuda_device(device, "device allocation");
  const lm_device_api_t &api = cuda_api("device allocation");
  const lm_device_config_t cfg = dm.config;
  void *st = cfg.stream;
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  if (bytes == 0) return s;  // no memory: data stays NULL (a zero-size shard)
  CurrentDevice g(device.device_id);
  void *p = nullptr;
  if (cfg.alloc) {
    p = cfg.alloc(cfg.alloc_ctx, bytes, device.device_id, cfg.stream);
    if (!p)
      fail(LM_ERR_OUT_OF_MEMORY, "the mesh's device allocator returned NULL for %zu bytes on "
           "device %d (rank %d)", bytes, device.device_id, world_rank_or_minus1());
    lm_device_free_fn_t fr = cfg.free;
    void *ctx = cfg.alloc_ctx;
    int id = device.device_id;
    s->free_fn = [fr, ctx, p, bytes, id, st]() { fr(ctx, p, bytes, id, st); };
  } else {
    int rc = api.malloc_async(&p, bytes, st);
    if (rc == LMD_NO_MEMORY)
      fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocAsync of %zu bytes on device %d failed (rank %d)",
           bytes, device.device_id, world_rank_or_minus1());
    cuda_check(rc, "cudaMallocAsync");
    const lm_device_api_t *a = &api;
    s->free_fn = [a, p, st]() { a->free_async(p, st); };  // late frees: the runtime may be gone
  }
  s->data = p;
  s->device = true;
  if (zero) cuda_check(api.memset_async(p, 0, bytes, st), "cudaMemsetAsync");  // s frees p
  return s;
}

void device_copy_d2d(DeviceMem &dm, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  cuda_check(cuda_api("device copy").memcpy_async(dst, src, bytes, LMD_D2D, dm.config.stream),
             "cudaMemcpyAsync (device to device)");
}

// ------------------------------------------------------------------------------ staging
void *stage_host_buffer(DeviceMem &dm, size_t bytes) {
  const lm_device_api_t &api = cuda_api("device staging");
  if (bytes == 0) bytes = 1;
  DeviceMem::Pinned *best = nullptr;
  for (auto &p : dm.pinned) {
    if (p.cap < bytes || p.event == kInUse) continue;  // too small / in use
    if (!best || p.cap < best->cap) best = &p;
  }
  if (best) {
    if (best->event) {
      cuda_check(api.event_synchronize(best->event), "cudaEventSynchronize (staging buffer reuse)");
      cuda_check(api.event_destroy(best->event), "cudaEventDestroy");
    }
    best->event = kInUse;
    return best->ptr;
  }
  void *p = nullptr;
  int rc = api.malloc_host(&p, bytes);
  if (rc == LMD_NO_MEMORY)
    fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocHost of %zu staging bytes failed (rank %d)", bytes,
         world_rank_or_minus1());
  cuda_check(rc, "cudaMallocHost (staging)");
  dm.pinned.push_back({p, bytes, kInUse});
  return p;
}

static DeviceMem::Pinned *find_pinned(DeviceMem &dm, void *host) {
  for (auto &p : dm.pinned)
    if (p.ptr == host) return &p;
  return nullptr;
}

void stage_release(DeviceMem &dm, void *host) {
  if (!host) return;
  if (DeviceMem::Pinned *p = find_pinned(dm, host))
    if (p->event == kInUse) p->event = nullptr;
}

void *stage_to_host(DeviceMem &dm, const void *dev, size_t bytes) {
  void *h = stage_host_buffer(dm, bytes);
  try {
    if (bytes) {
      const lm_device_api_t &api = cuda_api("device staging");
      void *st = dm.config.stream;
      cuda_check(api.memcpy_async(h, dev, bytes, LMD_D2H, st),
                 "cudaMemcpyAsync (device to host staging)");
      // MPI reads host memory: wait for this stream (never the whole device).
      cuda_check(api.stream_synchronize(st), "cudaStreamSynchronize (host staging)");
    }
  } catch (...) {
    stage_release(dm, h);
    throw;
  }
  return h;
}

void stage_to_device(DeviceMem &dm, void *dev, void *host, size_t bytes) {
  DeviceMem::Pinned *p = find_pinned(dm, host);
  if (!bytes) {
    stage_release(dm, host);
    return;
  }
  const lm_device_api_t &api = cuda_api("device staging");
  void *st = dm.config.stream;
  int rc = api.memcpy_async(dev, host, bytes, LMD_H2D, st);
  if (rc != LMD_OK) {
    stage_release(dm, host);
    cuda_fail("cudaMemcpyAsync (host staging to device)");
  }
  void *ev = nullptr;
  rc = api.event_create(&ev);
  if (rc == LMD_OK) rc = api.event_record(ev, st);
  if (rc != LMD_OK) {
    // Cannot tell when the copy is done: wait for it so the buffer can be reused safely.
    const std::string err = api.error();
    api.stream_synchronize(st);
    if (ev) api.event_destroy(ev);
    stage_release(dm, host);
    fail(LM_ERR_CUDA, "cudaEventRecord (staging) failed: %s on rank %d", err.c_str(),
         world_rank_or_minus1());
  }
  if (p) p->event = ev;
}

}  // namespace lm
