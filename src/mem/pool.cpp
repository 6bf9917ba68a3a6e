// SPDX-License-Identifier: BSD-3-Clause
#include "mem/pool.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <atomic>
#include <map>
#include <mutex>

#include <pthread.h>

#include "common/settings.hpp"
#include "mem/arena.hpp"

namespace lm {

namespace {
struct Pool {
  std::mutex mu;
  std::multimap<size_t, void *> free;  // capacity -> buffer
  size_t held = 0;
  size_t limit;
  Pool() : limit((size_t)setting_u(Setting::PoolBytes)) {}
};
Pool &pool();
// fork(): in a child the shared arena is a private copy of the parent's (mem/arena.hpp) that it
// must never hand out, so it drops the cached buffers that lie there (the pool's lock is held
// across the fork), and pool_give never caches one there.
void fork_prepare() { pool().mu.lock(); }
void fork_parent() { pool().mu.unlock(); }
void fork_child() {
  Pool &p = pool();
  for (auto it = p.free.begin(); it != p.free.end();)
    if (arena_owns(it->second)) {
      p.held -= it->first;
      it = p.free.erase(it);
    } else {
      ++it;
    }
  p.mu.unlock();
}
// Never destroyed: storages may die after static destructors ran (atexit handlers, finalizers of
// garbage-collected languages), and must still find the pool. Cached buffers go with the process.
Pool &pool() {
  static Pool *p = [] {
    Pool *q = new Pool;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return q;
  }();
  return *p;
}
std::atomic<size_t> g_in_use{0}, g_peak{0};

size_t rounded(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  return n == 0 ? 64 : n;
}

// The capacity allocated for a request of n (already 64-rounded) bytes: its power-of-two class
// from kPoolSmallBytes to kPoolMinBytes, n itself otherwise.
size_t class_of(size_t n) {
  if (n < kPoolSmallBytes || n >= kPoolMinBytes) return n;
  size_t c = kPoolSmallBytes;
  while (c < n) c <<= 1;
  return c;
}

void account_take(size_t n) {
  size_t now = g_in_use.fetch_add(n, std::memory_order_relaxed) + n;
  size_t p = g_peak.load(std::memory_order_relaxed);
  while (now > p && !g_peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

void pool_stats(size_t *in_use, size_t *peak, bool reset_peak) {
  size_t u = g_in_use.load(std::memory_order_relaxed);
  if (in_use) *in_use = u;
  if (peak) *peak = std::max(g_peak.load(std::memory_order_relaxed), u);
  if (reset_peak) g_peak.store(u, std::memory_order_relaxed);
}

void pool_held(size_t *held, size_t *limit) {
  Pool &p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (held) *held = p.held;
  if (limit) *limit = p.limit;
}

void *pool_take(size_t bytes, size_t *cap) {
  if (bytes > (SIZE_MAX >> 2)) return nullptr;  // rounding below would wrap
  size_t n = rounded(bytes);
  size_t c = class_of(n);
  if (c >= kPoolSmallBytes) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.free.lower_bound(c);
    if (it != p.free.end() && it->first <= 2 * c) {
      void *b = it->second;
      *cap = it->first;
      p.held -= it->first;
      p.free.erase(it);
      account_take(n);
      return b;
    }
  }
  // Large buffers come from the shared arena when it is active (node-local peers can then copy
  // straight into and out of them with memcpy), else from the heap.
  void *b = c >= arena_min_bytes() ? arena_alloc(c, cap) : nullptr;
  if (!b) {
    *cap = c;
    b = std::aligned_alloc(64, c);
  }
  if (b) account_take(n);
  return b;
}

void pool_give(void *b, size_t cap, size_t bytes) {
  if (!b) return;
  g_in_use.fetch_sub(rounded(bytes), std::memory_order_relaxed);
  if (cap >= kPoolSmallBytes && !(arena_in_child() && arena_owns(b))) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.held + cap <= p.limit) {
      p.free.emplace(cap, b);
      p.held += cap;
      return;
    }
  }
  if (!arena_free(b, cap)) std::free(b);
}

}  // namespace lm
