// SPDX-License-Identifier: BSD-3-Clause
// The memory behind a tensor's shard: owned (from the buffer pool), borrowed (a user pointer), a
// DLManagedTensor (its deleter runs when the last reference goes), or device memory the library
// allocated (free_fn gives it back). Refcounted by shared_ptr: views share their source's.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "localmap.h"

namespace lm {

struct Storage {
  void *data = nullptr;
  size_t bytes = 0;
  DLManagedTensor *managed = nullptr;  // deleter called on release
  bool owned = false;                  // back to the buffer pool on release
  size_t cap = 0;                      // capacity of an owned buffer
  bool device = false;                 // CUDA memory (kDLCUDA tensors)
  std::function<void()> free_fn;       // device memory the library allocated: gives it back
  ~Storage();
};

// Host memory of `bytes` from the buffer pool (64-byte aligned), zero-filled when `zero`;
// LM_ERR_OUT_OF_MEMORY (also when LM_FAULT injects an allocation failure).
std::shared_ptr<Storage> storage_alloc(size_t bytes, bool zero = true);

}  // namespace lm
