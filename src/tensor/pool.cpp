// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/pool.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

namespace lm {

namespace {
struct Pool {
  std::mutex mu;
  std::multimap<size_t, void *> free;  // capacity -> buffer
  size_t held = 0;
  size_t limit;
  Pool() {
    const char *e = std::getenv("LM_POOL_BYTES");
    limit = e ? (size_t)std::strtoull(e, nullptr, 10) : (size_t(1) << 30);
  }
};
// Never destroyed: storages may die after static destructors ran (atexit handlers, finalizers of
// garbage-collected languages), and must still find the pool. Cached buffers go with the process.
Pool &pool() {
  static Pool *p = new Pool;
  return *p;
}
}  // namespace

void *pool_take(size_t bytes, size_t *cap) {
  if (bytes > (SIZE_MAX >> 2)) return nullptr;  // rounding below would wrap
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  if (n >= kPoolMinBytes) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.free.lower_bound(n);
    if (it != p.free.end() && it->first <= 2 * n) {
      void *b = it->second;
      *cap = it->first;
      p.held -= it->first;
      p.free.erase(it);
      return b;
    }
  }
  *cap = n;
  return std::aligned_alloc(64, n);
}

void pool_give(void *b, size_t cap) {
  if (!b) return;
  if (cap >= kPoolMinBytes) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.held + cap <= p.limit) {
      p.free.emplace(cap, b);
      p.held += cap;
      return;
    }
  }
  std::free(b);
}

}  // namespace lm
