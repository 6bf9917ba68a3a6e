// SPDX-License-Identifier: BSD-3-Clause
// Peers' arenas mapped here (mem/arena.hpp): windows on demand, least recently used first out,
// read-only unless a copy writes, each mapped only after the file proves to be the arena named.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "mem/arena.hpp"

namespace lm {

namespace {

constexpr uint64_t kPage = 4096;

// A window: chunk `chunk` of the arena (dev, ino, nonce), read-only or writable.
struct Key {
  uint64_t dev, ino, nonce, chunk;
  bool write;
  bool operator<(const Key &o) const {
    return std::tie(dev, ino, nonce, chunk, write) < std::tie(o.dev, o.ino, o.nonce, o.chunk, o.write);
  }
};
struct Window {
  char *base;
  uint64_t len;
  int pins;
  uint64_t tick;  // last use
  bool write;
};

struct Peers {
  std::mutex mu;
  std::map<Key, Window *> windows;
  uint64_t mapped = 0, pinned = 0, tick = 0;
  bool child = false;
};
Peers &peers();

// fork(): peers' windows are not inherited (MADV_DONTFORK), so the child forgets them (without
// unmapping: those addresses are not its mappings) and maps none.
void fork_prepare() { peers().mu.lock(); }
void fork_parent() { peers().mu.unlock(); }
void fork_child() {
  Peers &p = peers();
  p.windows.clear();  // the Window records leak in the child: a few bytes each
  p.mapped = 0;
  p.child = true;
  p.mu.unlock();
}
// Never destroyed (copies may run from late finalizers).
Peers &peers() {
  static Peers *p = [] {
    Peers *q = new Peers;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return q;
  }();
  return *p;
}

// The peer's arena, opened through /proc (read-only unless write), or -1. It must be the arena
// named: same file (st_dev, st_ino), size and header nonce. A pid reused by another process, or
// a descriptor number reused by another file, fails here.
int open_arena(const ArenaId &id, bool write) {
  if (id.fd < 0 || id.pid <= 0 || id.size <= kPage) return -1;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)id.pid, (int)id.fd);
  int fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  ArenaHeader h{};
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != id.dev || (uint64_t)st.st_ino != id.ino ||
      (uint64_t)st.st_size != id.size || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
      h.magic != kArenaMagic || h.nonce != id.nonce) {
    close(fd);
    return -1;
  }
  return fd;
}

// Unmaps unpinned windows, least recently used first, until at most `keep` bytes are mapped or
// every window left is pinned (under p.mu).
void evict(Peers &p, uint64_t keep) {
  while (p.mapped > keep) {
    auto lru = p.windows.end();
    for (auto it = p.windows.begin(); it != p.windows.end(); ++it)
      if (it->second->pins == 0 && (lru == p.windows.end() || it->second->tick < lru->second->tick))
        lru = it;
    if (lru == p.windows.end()) return;
    munmap(lru->second->base, lru->second->len);
    p.mapped -= lru->second->len;
    delete lru->second;
    p.windows.erase(lru);
  }
}

// Maps window k of arena id (under p.mu), making room within the budget first; NULL on failure.
Window *map_window(Peers &p, const ArenaId &id, const Key &k) {
  const uint64_t off = k.chunk * kPeerWindow, len = std::min(kPeerWindow, id.size - off);
  const uint64_t budget = arena_limits().peer_budget;
  evict(p, budget > len ? budget - len : 0);
  int fd = open_arena(id, k.write);
  if (fd < 0) return nullptr;
  const int prot = k.write ? PROT_READ | PROT_WRITE : PROT_READ;
  void *m = mmap(nullptr, len, prot, MAP_SHARED | MAP_NORESERVE, fd, (off_t)off);
  if (m == MAP_FAILED && errno == ENOMEM) {  // RLIMIT_AS: give back every unpinned window
    evict(p, 0);
    m = mmap(nullptr, len, prot, MAP_SHARED | MAP_NORESERVE, fd, (off_t)off);
  }
  close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED) return nullptr;
  madvise(m, len, MADV_DONTFORK);
  Window *w = new Window{static_cast<char *>(m), len, 0, 0, k.write};
  p.windows.emplace(k, w);
  p.mapped += len;
  return w;
}

}  // namespace

bool arena_peer_check(const ArenaId &id) {
  int fd = open_arena(id, true);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

PeerView::PeerView(const ArenaId &id, uint64_t off, bool write) {
  if (id.fd < 0 || off >= id.size) return;
  Peers &p = peers();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.child) return;
  const Key k{id.dev, id.ino, id.nonce, off / kPeerWindow, write};
  auto it = p.windows.find(k);
  Window *w = it != p.windows.end() ? it->second : map_window(p, id, k);
  if (!w) return;
  ++w->pins;
  w->tick = ++p.tick;
  const uint64_t in = off - k.chunk * kPeerWindow;
  w_ = w;
  p_ = w->base + in;
  n_ = w->len - in;
}

void PeerView::release() {
  if (!w_) return;
  Peers &p = peers();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.child) {
    --static_cast<Window *>(w_)->pins;
    evict(p, arena_limits().peer_budget);
  }
  w_ = nullptr;
  p_ = nullptr;
  n_ = 0;
}

PeerView::~PeerView() { release(); }

PeerView::PeerView(PeerView &&o) noexcept : w_(o.w_), p_(o.p_), n_(o.n_) {
  o.w_ = nullptr;
  o.p_ = nullptr;
  o.n_ = 0;
}

PeerView &PeerView::operator=(PeerView &&o) noexcept {
  if (this != &o) {
    release();
    std::swap(w_, o.w_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  return *this;
}

char *arena_peer_pin(const ArenaId &id, uint64_t off, uint64_t len, bool write) {
  if (id.fd < 0 || len == 0 || off >= id.size || len > id.size - off) return nullptr;
  Peers &p = peers();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.child) return nullptr;
  const uint64_t a = off / kPage * kPage, b = (off + len + kPage - 1) / kPage * kPage;
  int fd = open_arena(id, write);
  if (fd < 0) return nullptr;
  void *m = mmap(nullptr, b - a, write ? PROT_READ | PROT_WRITE : PROT_READ,
                 MAP_SHARED | MAP_NORESERVE, fd, (off_t)a);
  close(fd);
  if (m == MAP_FAILED) return nullptr;
  madvise(m, b - a, MADV_DONTFORK);
  p.pinned += b - a;
  return static_cast<char *>(m) + (off - a);
}

void arena_peer_report(ArenaReport *r) {
  Peers &p = peers();
  std::lock_guard<std::mutex> lock(p.mu);
  r->peer_mapped = p.mapped;
  r->peer_windows = p.windows.size();
  r->peer_writable = 0;
  for (const auto &kv : p.windows)
    if (kv.second->write) r->peer_writable += kv.second->len;
  r->peer_pinned = p.pinned;
}

}  // namespace lm
