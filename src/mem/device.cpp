// SPDX-License-Identifier: BSD-3-Clause
// Device memory of a mesh: allocations in the mesh's stream order (its lm_device_config_t), device
// to device copies, and pinned host staging buffers for the host-staged transport and the
// host-only calls (gather). Compiled with the CUDA runtime under LM_WITH_CUDA; refusals without.
#include "mem/device.hpp"

#include "common/error.hpp"
#include "mem/cuda.hpp"

#ifdef LM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lm {

DeviceMem::DeviceMem() {
  config.size = sizeof config;
  config.magic = LM_DEVICE_CONFIG_MAGIC;
  config.version = LM_DEVICE_CONFIG_VERSION;
}

#ifdef LM_WITH_CUDA

DeviceMem::~DeviceMem() {
  for (auto &p : pinned) {
    if (p.event && p.event != reinterpret_cast<void *>(1)) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(p.event));
      cudaEventDestroy(static_cast<cudaEvent_t>(p.event));
    }
    cudaFreeHost(p.ptr);
  }
  cudaGetLastError();
}

std::shared_ptr<Storage> device_storage_alloc(DeviceMem &dm, DLDevice device, size_t bytes,
                                              bool zero) {
  check_cuda_device(device, "device allocation");
  const lm_device_config_t cfg = dm.config;
  cudaStream_t st = static_cast<cudaStream_t>(cfg.stream);
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
    void *ctx = cfg.alloc_ctx, *stream = cfg.stream;
    int id = device.device_id;
    s->free_fn = [fr, ctx, p, bytes, id, stream]() { fr(ctx, p, bytes, id, stream); };
  } else {
    cudaError_t rc = cudaMallocAsync(&p, bytes, st);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocAsync of %zu bytes on device %d failed (rank %d)",
           bytes, device.device_id, world_rank_or_minus1());
    }
    if (rc != cudaSuccess) cuda_fail(rc, "cudaMallocAsync");
    s->free_fn = [p, st]() {
      if (cudaFreeAsync(p, st) != cudaSuccess) cudaGetLastError();  // late frees: runtime gone
    };
  }
  s->data = p;
  s->device = true;
  if (zero) {
    cudaError_t rc = cudaMemsetAsync(p, 0, bytes, st);
    if (rc != cudaSuccess) cuda_fail(rc, "cudaMemsetAsync");  // s frees p
  }
  return s;
}

void device_copy_d2d(DeviceMem &dm, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  LM_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(dm.config.stream)),
          "cudaMemcpyAsync (device to device)");
}

// ------------------------------------------------------------------------------ staging
void *stage_host_buffer(DeviceMem &dm, size_t bytes) {
    if (bytes == 0) bytes = 1;
  DeviceMem::Pinned *best = nullptr;
  for (auto &p : dm.pinned) {
    if (p.cap < bytes || p.event == reinterpret_cast<void *>(1)) continue;  // too small / in use
    if (!best || p.cap < best->cap) best = &p;
  }
  if (best) {
    if (best->event) {
      LM_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(best->event)),
              "cudaEventSynchronize (staging buffer reuse)");
      LM_CUDA(cudaEventDestroy(static_cast<cudaEvent_t>(best->event)), "cudaEventDestroy");
    }
    best->event = reinterpret_cast<void *>(1);  // in use
    return best->ptr;
  }
  void *p = nullptr;
  cudaError_t rc = cudaMallocHost(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocHost of %zu staging bytes failed (rank %d)", bytes,
         world_rank_or_minus1());
  }
  if (rc != cudaSuccess) cuda_fail(rc, "cudaMallocHost (staging)");
  dm.pinned.push_back({p, bytes, reinterpret_cast<void *>(1)});
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
    if (p->event == reinterpret_cast<void *>(1)) p->event = nullptr;
}

void *stage_to_host(DeviceMem &dm, const void *dev, size_t bytes) {
  void *h = stage_host_buffer(dm, bytes);
  try {
    if (bytes) {
      cudaStream_t st = static_cast<cudaStream_t>(dm.config.stream);
      LM_CUDA(cudaMemcpyAsync(h, dev, bytes, cudaMemcpyDeviceToHost, st),
              "cudaMemcpyAsync (device to host staging)");
      // MPI reads host memory: wait for this stream (never the whole device).
      LM_CUDA(cudaStreamSynchronize(st), "cudaStreamSynchronize (host staging)");
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
  cudaStream_t st = static_cast<cudaStream_t>(dm.config.stream);
  cudaError_t rc = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st);
  if (rc != cudaSuccess) {
    stage_release(dm, host);
    cuda_fail(rc, "cudaMemcpyAsync (host staging to device)");
  }
  cudaEvent_t ev = nullptr;
  rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (rc == cudaSuccess) rc = cudaEventRecord(ev, st);
  if (rc != cudaSuccess) {
    // Cannot tell when the copy is done: wait for it so the buffer can be reused safely.
    cudaStreamSynchronize(st);
    if (ev) cudaEventDestroy(ev);
    stage_release(dm, host);
    cuda_fail(rc, "cudaEventRecord (staging)");
  }
  if (p) p->event = ev;
}

#else  // !LM_WITH_CUDA ------------------------------------------------------------------

DeviceMem::~DeviceMem() = default;
[[noreturn]] static void not_built(const char *what) {
  fail(LM_ERR_NOT_SUPPORTED, "%s: kDLCUDA is not supported by this build (CUDA=0)", what);
}
std::shared_ptr<Storage> device_storage_alloc(DeviceMem &, DLDevice, size_t, bool) {
  not_built("device allocation");
}
void device_copy_d2d(DeviceMem &, void *, const void *, size_t) { not_built("device copy"); }
void *stage_host_buffer(DeviceMem &, size_t) { not_built("device staging"); }
void *stage_to_host(DeviceMem &, const void *, size_t) { not_built("device staging"); }
void stage_to_device(DeviceMem &, void *, void *, size_t) { not_built("device staging"); }
void stage_release(DeviceMem &, void *) {}

#endif  // LM_WITH_CUDA

}  // namespace lm
