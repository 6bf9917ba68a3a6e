// SPDX-License-Identifier: BSD-3-Clause
#include "mem/arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "common/settings.hpp"

namespace lm {

namespace {

constexpr uint64_t kPage = 4096;

struct Arena {
  std::mutex mu;
  int fd = -1;
  std::atomic<char *> base{nullptr};
  uint64_t size = 0;
  uint64_t top = 0;                      // bytes below are blocks or free ranges
  std::map<uint64_t, uint64_t> free;     // offset -> length, below top, coalesced
  std::atomic<size_t> in_use{0};
  std::atomic<bool> forked{false};       // this is a fork() child: the arena is not mapped here
  bool tried = false;
  // Peers' arenas mapped here: (pid, fd, size) -> base (NULL: could not be mapped).
  std::map<std::tuple<int, int, uint64_t>, char *> peers;
};
// Never destroyed (buffers may be given back after static destructors ran).
Arena &arena() {
  static Arena *a = new Arena;
  return *a;
}


// fork(): the child does not get the arena's pages (MADV_DONTFORK), so it must not hand them out.
void fork_prepare() { arena().mu.lock(); }
void fork_parent() { arena().mu.unlock(); }
void fork_child() {
  Arena &a = arena();
  a.forked.store(true);
  // Keep the range reserved (inaccessible), so that no other mapping of the child lands there
  // and is taken for an arena block.
  if (char *base = a.base.load())
    mmap(base, a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  a.peers.clear();  // peer mappings are not inherited either
  a.mu.unlock();
}

uint64_t arena_bytes() { return setting_u(Setting::NodeArenaBytes) / kPage * kPage; }

}  // namespace

size_t arena_min_bytes() { return (size_t)setting_u(Setting::NodeArenaMinBytes); }

bool arena_activate() {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.base.load()) return true;
  if (a.tried || a.forked.load()) return false;
  a.tried = true;
  const uint64_t size = arena_bytes();
  if (!setting_on(Setting::NodeLocal) || size == 0) return false;
  int fd = memfd_create("localmap-arena", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return false;
  }
  void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  madvise(p, size, MADV_DONTFORK);
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(fork_prepare, fork_parent, fork_child); });
  a.fd = fd;
  a.size = size;
  a.base.store(static_cast<char *>(p));
  return true;
}

void *arena_alloc(size_t bytes, size_t *cap) {
  Arena &a = arena();
  char *base = a.base.load();
  if (!base || a.forked.load() || bytes == 0) return nullptr;
  const uint64_t n = (bytes + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(a.mu);
  uint64_t off = UINT64_MAX;
  for (auto it = a.free.begin(); it != a.free.end(); ++it)  // first fit (few free ranges)
    if (it->second >= n) {
      off = it->first;
      uint64_t rest = it->second - n;
      a.free.erase(it);
      if (rest) a.free.emplace(off + n, rest);
      break;
    }
  if (off == UINT64_MAX) {
    if (n > a.size - a.top) return nullptr;
    off = a.top;
    a.top += n;
  }
  a.in_use.fetch_add(n);
  *cap = (size_t)n;
  return base + off;
}

bool arena_free(void *p, size_t cap) {
  Arena &a = arena();
  char *base = a.base.load(), *c = static_cast<char *>(p);
  if (!base || c < base || c >= base + a.size) return false;
  if (a.forked.load()) return true;  // not mapped in this child: nothing to give back
  uint64_t off = (uint64_t)(c - base), n = (cap + kPage - 1) / kPage * kPage;
  // The pages go back to the kernel now; a peer's mapping of them reads zeros until reused.
  fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)n);
  a.in_use.fetch_sub(n);
  std::lock_guard<std::mutex> lock(a.mu);
  auto next = a.free.lower_bound(off);
  if (next != a.free.end() && off + n == next->first) {  // merge with the following range
    n += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {  // and with the preceding one
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      n += prev->second;
      a.free.erase(prev);
    }
  }
  if (off + n == a.top)
    a.top = off;
  else
    a.free.emplace(off, n);
  return true;
}

ArenaId arena_self() {
  Arena &a = arena();
  ArenaId id;
  if (a.base.load() && !a.forked.load()) {
    id.pid = (int32_t)getpid();
    id.fd = a.fd;
    id.size = a.size;
  }
  return id;
}

uint64_t arena_offset(const void *p, size_t bytes) {
  Arena &a = arena();
  const char *base = a.base.load(), *c = static_cast<const char *>(p);
  if (!base || a.forked.load() || c < base || bytes > a.size ||
      (uint64_t)(c - base) > a.size - bytes)
    return UINT64_MAX;
  return (uint64_t)(c - base);
}

char *arena_peer(const ArenaId &id) {
  if (id.fd < 0 || id.size == 0) return nullptr;
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.forked.load()) return nullptr;
  auto key = std::make_tuple((int)id.pid, (int)id.fd, id.size);
  auto it = a.peers.find(key);
  if (it != a.peers.end()) return it->second;
  char *base = nullptr;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)id.pid, (int)id.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == id.size) {
    void *p = mmap(nullptr, id.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p != MAP_FAILED) {
      madvise(p, id.size, MADV_DONTFORK);
      base = static_cast<char *>(p);
    }
  }
  if (fd >= 0) close(fd);  // the mapping keeps the file
  a.peers.emplace(key, base);
  return base;
}

bool arena_owns(const void *p) {
  Arena &a = arena();
  const char *base = a.base.load(), *c = static_cast<const char *>(p);
  return base && c >= base && c < base + a.size;
}

size_t arena_in_use() { return arena().in_use.load(); }

}  // namespace lm
