// SPDX-License-Identifier: BSD-3-Clause
#include "mem/storage.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/fault.hpp"
#include "mem/pool.hpp"

namespace lm {

Storage::~Storage() {
  if (free_fn) {
    free_fn();
  } else if (managed) {
    if (managed->deleter) managed->deleter(managed);
  } else if (owned) {
    pool_give(data, cap, bytes);
  }
}

std::shared_ptr<Storage> storage_alloc(size_t bytes, bool zero) {
  auto s = std::make_shared<Storage>();
  size_t cap = 0;
  void *p = fault_hit(FaultKind::Alloc) ? nullptr : pool_take(bytes, &cap);
  if (!p) fail(LM_ERR_OUT_OF_MEMORY, "could not allocate %zu bytes on rank %d", bytes,
               world_rank_or_minus1());
  if (zero) std::memset(p, 0, cap);
  s->data = p;
  s->bytes = bytes;
  s->cap = cap;
  s->owned = true;
  return s;
}

}  // namespace lm
