// SPDX-License-Identifier: BSD-3-Clause
// Device memory of one mesh on this rank (mem/device.cpp): its lm_device_config_t (the stream all
// of its device work is ordered on, an optional allocator) and the pinned host buffers that stage
// device data for MPI. No CUDA type crosses this header.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "localmap.h"
#include "mem/storage.hpp"

namespace lm {

struct DeviceMem {
  lm_device_config_t config{};
  struct Pinned {
    void *ptr = nullptr;
    size_t cap = 0;
    void *event = nullptr;  // cudaEvent_t recorded after the last device use; (void*)1: in use
  };
  std::vector<Pinned> pinned;  // staging buffers, reused once their event completed
  DeviceMem();
  ~DeviceMem();
  DeviceMem(const DeviceMem &) = delete;
  DeviceMem &operator=(const DeviceMem &) = delete;
};

// Device storage of `bytes` on `device` from the config's allocator (or cudaMallocAsync), in the
// config's stream order; zeroed (cudaMemsetAsync) when `zero`.
std::shared_ptr<Storage> device_storage_alloc(DeviceMem &dm, DLDevice device, size_t bytes,
                                              bool zero);
// Copies `bytes` device -> device in the stream's order.
void device_copy_d2d(DeviceMem &dm, void *dst, const void *src, size_t bytes);

// Host staging of device shards (pinned): stage_to_host copies `bytes` of device memory into a
// host buffer and waits for the stream; the buffer is valid until stage_release.
void *stage_to_host(DeviceMem &dm, const void *dev, size_t bytes);
// A pinned host buffer of `bytes` (not filled).
void *stage_host_buffer(DeviceMem &dm, size_t bytes);
// Enqueues host -> device of `bytes` on the stream, then marks `host` reusable once done.
void stage_to_device(DeviceMem &dm, void *dev, void *host, size_t bytes);
// Marks a staging buffer reusable at once (no device work pending on it; NULL: nothing).
void stage_release(DeviceMem &dm, void *host);

}  // namespace lm
