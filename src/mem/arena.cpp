// SPDX-License-Identifier: BSD-3-Clause
// This process's arena: limits, the memfd and its segments, blocks, fork(). Peers' windows are
// arena_peer.cpp.
#include "mem/arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "common/settings.hpp"

namespace lm {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = uint64_t(1) << 20, kGiB = uint64_t(1) << 30;
// Segments: the first maps kSegMin, each next one as much as is mapped already (at most kSegMax),
// or what a block needs; so a few dozen segments cover any arena.
constexpr uint64_t kSegMin = 64 * kMiB, kSegMax = 4 * kGiB, kSegAlign = 2 * kMiB;
constexpr int kMaxSegs = 1024;
constexpr uint64_t kMinArena = 64 * kMiB;  // below this (RLIMIT_AS), no arena

struct Seg {
  char *base;
  uint64_t off, len;  // the file range mapped at base
};

struct Arena {
  std::mutex mu;
  int fd = -1;
  ArenaId id;
  std::atomic<bool> active{false};
  std::atomic<bool> child{false};           // a fork() child: the segments are private copies
  // Segments, in file order; written before nseg publishes them (read without the lock).
  Seg segs[kMaxSegs];
  std::atomic<int> nseg{0};
  uint64_t top = kPage;                     // file bytes below are in segments (or the header)
  std::map<uint64_t, uint64_t> free;        // file offset -> length, coalesced within a segment
  std::atomic<size_t> in_use{0};
  bool tried = false;
};
// Never destroyed (buffers may be given back after static destructors ran).
Arena &arena() {
  static Arena *a = new Arena;
  return *a;
}

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ---- Limits

uint64_t vm_size_now() {
  unsigned long long pages = 0;
  if (FILE *f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

void note_as(const ArenaLimits &l, uint64_t used) {
  const double g = (double)kGiB;
  if (l.size == 0)
    std::fprintf(stderr,
                 "localmap: RLIMIT_AS (%.2f GiB, %.2f GiB in use) leaves too little address space "
                 "for the shared arena: node-local copies go through the kernel or MPI\n",
                 l.as_limit / g, used / g);
  else
    std::fprintf(stderr,
                 "localmap: RLIMIT_AS (%.2f GiB, %.2f GiB in use): shared arena of at most %.2f "
                 "GiB instead of %.2f, peers' arena windows %.2f GiB instead of %.2f\n",
                 l.as_limit / g, used / g, l.size / g, l.requested / g, l.peer_budget / g,
                 l.peer_requested / g);
}

ArenaLimits compute_limits() {
  ArenaLimits l;
  const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  l.phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
  const SettingValue &v = setting(Setting::NodeArenaBytes);
  l.requested = v.u / kPage * kPage;
  // The default is a bound, not a wish: more than the machine's memory could never be used.
  if (!v.from_env && l.phys) l.requested = std::min(l.requested, round_up(l.phys, kGiB));
  l.peer_requested = std::max(setting_u(Setting::NodePeerMapBytes) / kPage * kPage, kPage);
  l.size = l.requested;
  l.peer_budget = l.peer_requested;
  struct rlimit r {};
  if (getrlimit(RLIMIT_FSIZE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)  // ftruncate's bound
    l.size = std::min<uint64_t>(l.size, (uint64_t)r.rlim_cur / kPage * kPage);
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return l;
  l.as_limit = (uint64_t)r.rlim_cur;
  const uint64_t used = vm_size_now(), room = l.as_limit > used ? l.as_limit - used : 0;
  if (l.size > room / 2) {
    l.size = room / 2 / kPage * kPage;
    if (l.size < kMinArena) l.size = 0;
    l.as_capped = true;
  }
  if (l.peer_budget > room / 8) {
    l.peer_budget = std::max(room / 8 / kPage * kPage, kPage);
    l.as_capped = true;
  }
  if (l.as_capped && setting_on(Setting::NodeLocal) && l.requested) note_as(l, used);
  return l;
}

// ---- Segments

// The segment holding file offset `off` (NULL: none). Segments are in file order.
const Seg *seg_of_off(const Arena &a, uint64_t off) {
  const int n = a.nseg.load(std::memory_order_acquire);
  const Seg *b = a.segs, *e = a.segs + n;
  const Seg *s = std::upper_bound(b, e, off, [](uint64_t o, const Seg &x) { return o < x.off; });
  if (s == b) return nullptr;
  --s;
  return off < s->off + s->len ? s : nullptr;
}

// The segment holding address p (NULL: none).
const Seg *seg_of_addr(const Arena &a, const char *p) {
  const int n = a.nseg.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (p >= a.segs[i].base && p < a.segs[i].base + a.segs[i].len) return &a.segs[i];
  return nullptr;
}

// Maps a new segment of at least n bytes (under a.mu); returns its file offset, or UINT64_MAX.
// What the block does not take becomes a free range.
uint64_t grow(Arena &a, uint64_t n) {
  const int k = a.nseg.load(std::memory_order_relaxed);
  const uint64_t room = a.id.size - a.top;
  if (k == kMaxSegs || n > room) return UINT64_MAX;
  uint64_t mapped = a.top - kPage;
  uint64_t len = round_up(std::max(n, std::min(std::max(mapped, kSegMin), kSegMax)), kSegAlign);
  len = std::min(len, room);
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a.fd,
                 (off_t)a.top);
  if (p == MAP_FAILED && len > n) {  // out of address space: just the block
    len = n;
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a.fd, (off_t)a.top);
  }
  if (p == MAP_FAILED) return UINT64_MAX;
  a.segs[k] = Seg{static_cast<char *>(p), a.top, len};
  a.nseg.store(k + 1, std::memory_order_release);
  const uint64_t off = a.top;
  a.top += len;
  if (len > n) a.free.emplace(off + n, len - n);
  return off;
}

// ---- fork()

// The child keeps the parent's segments as private copy-on-write mappings of the same memfd, at
// the same addresses (replacing the inherited shared ones in one step, so nothing else can land
// there). Where a private writable mapping is refused (strict overcommit), a read-only one; where
// that fails too, the shared mapping is made read-only: the child can never write the parent's
// memory.
void fork_prepare() { arena().mu.lock(); }
void fork_parent() { arena().mu.unlock(); }
void fork_child() {
  Arena &a = arena();
  a.child.store(true);
  const int n = a.nseg.load();
  for (int i = 0; i < n; ++i) {
    const Seg &s = a.segs[i];
    const int fl = MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE;
    if (mmap(s.base, s.len, PROT_READ | PROT_WRITE, fl, a.fd, (off_t)s.off) != MAP_FAILED) continue;
    if (mmap(s.base, s.len, PROT_READ, fl, a.fd, (off_t)s.off) != MAP_FAILED) continue;
    mprotect(s.base, s.len, PROT_READ);
  }
  a.mu.unlock();
}

uint64_t make_nonce() {
  uint64_t x = 0;
  if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x && x) return x;
  x = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
  return (x ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&x) | 1;
}

// The memfd, its size and header (under a.mu). False: none (nothing left open).
bool create_memfd(Arena &a, uint64_t size) {
  char name[48];
  std::snprintf(name, sizeof name, "localmap-arena.%d", (int)getpid());
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return false;
  const ArenaHeader h{kArenaMagic, make_nonce()};
  struct stat st {};
  if (ftruncate(fd, (off_t)size) != 0 || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
      fstat(fd, &st) != 0) {
    close(fd);
    return false;
  }
  a.fd = fd;
  a.id.pid = (int32_t)getpid();
  a.id.fd = fd;
  a.id.size = size;
  a.id.dev = (uint64_t)st.st_dev;
  a.id.ino = (uint64_t)st.st_ino;
  a.id.nonce = h.nonce;
  return true;
}

}  // namespace

size_t arena_min_bytes() { return (size_t)setting_u(Setting::NodeArenaMinBytes); }

const ArenaLimits &arena_limits() {
  static const ArenaLimits l = compute_limits();
  return l;
}

bool arena_activate() {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.active.load()) return true;
  if (a.tried || a.child.load()) return false;
  a.tried = true;
  if (!setting_on(Setting::NodeLocal)) return false;
  const uint64_t size = arena_limits().size;
  if (size <= kPage || !create_memfd(a, size)) return false;
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(fork_prepare, fork_parent, fork_child); });
  a.active.store(true);
  return true;
}

void *arena_alloc(size_t bytes, size_t *cap) {
  Arena &a = arena();
  if (!a.active.load() || a.child.load() || bytes == 0) return nullptr;
  const uint64_t n = round_up(bytes, kPage);
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
  if (off == UINT64_MAX && (off = grow(a, n)) == UINT64_MAX) return nullptr;
  const Seg *s = seg_of_off(a, off);
  a.in_use.fetch_add(n);
  *cap = (size_t)n;
  return s->base + (off - s->off);
}

bool arena_free(void *p, size_t cap) {
  Arena &a = arena();
  const Seg *s = seg_of_addr(a, static_cast<char *>(p));
  if (!s) return false;
  if (a.child.load()) return true;  // the parent's memory: nothing to give back here
  uint64_t off = s->off + (uint64_t)(static_cast<char *>(p) - s->base), n = round_up(cap, kPage);
  // The pages go back to the kernel now; a peer's mapping of them reads zeros until reused.
  fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)n);
  a.in_use.fetch_sub(n);
  std::lock_guard<std::mutex> lock(a.mu);
  const uint64_t s0 = s->off, s1 = s->off + s->len;  // ranges merge within the segment only
  auto next = a.free.lower_bound(off);
  if (next != a.free.end() && off + n == next->first && next->first < s1) {
    n += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off && prev->first >= s0) {
      off = prev->first;
      n += prev->second;
      a.free.erase(prev);
    }
  }
  a.free.emplace(off, n);
  return true;
}

ArenaId arena_self() {
  Arena &a = arena();
  if (!a.active.load() || a.child.load()) return ArenaId{};
  return a.id;
}

uint64_t arena_offset(const void *p, size_t bytes) {
  Arena &a = arena();
  const char *c = static_cast<const char *>(p);
  const Seg *s = a.child.load() ? nullptr : seg_of_addr(a, c);
  if (!s || bytes > s->len || (uint64_t)(c - s->base) > s->len - bytes) return UINT64_MAX;
  return s->off + (uint64_t)(c - s->base);
}

bool arena_owns(const void *p) { return seg_of_addr(arena(), static_cast<const char *>(p)); }

bool arena_in_child() { return arena().child.load(); }

size_t arena_in_use() { return arena().in_use.load(); }

ArenaReport arena_report() {
  Arena &a = arena();
  ArenaReport r;
  r.limits = arena_limits();
  r.active = a.active.load();
  r.child = a.child.load();
  const int n = a.nseg.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) r.mapped += a.segs[i].len;
  r.in_use = a.in_use.load();
  arena_peer_report(&r);
  return r;
}

}  // namespace lm
