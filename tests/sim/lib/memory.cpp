// SPDX-License-Identifier: BSD-3-Clause
// cudasim: the memory registry. Every allocation is its own mapping: device memory stays
// PROT_NONE except while a stream operation that touches it runs (opens are counted per block), so
// a host dereference of a device pointer faults; each block ends 0-255 bytes before a guard page,
// so overruns fault too. Freed blocks stay mapped PROT_NONE in a quarantine (bounded by
// CUDASIM_QUARANTINE_MB) before their addresses can be reused, so stale pointers keep faulting.
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <map>

#include "sim.hpp"

namespace cudasim {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kAlign = 256;  // cudaMalloc's alignment

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Block *> blocks;  // by base, live and quarantined
  std::deque<Block *> quarantine;
  size_t quarantined = 0;
  size_t used[64] = {};  // device bytes in use per device
};

Registry &reg() {
  static Registry *r = new Registry;  // never destroyed: workers may outlive static destructors
  return *r;
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void protect(Block *b, int prot) {
  if (mprotect(b->map, b->map_len - kPage, prot) != 0)
    report("mprotect(%p, %zu) failed: %s", (void *)b->map, b->map_len - kPage, strerror(errno));
}

Block *find_locked(const void *p) {
  Registry &r = reg();
  uintptr_t a = (uintptr_t)p;
  auto it = r.blocks.upper_bound(a);
  if (it == r.blocks.begin()) return nullptr;
  --it;
  Block *b = it->second;
  return a <= (uintptr_t)b->base + b->size ? b : nullptr;  // the end counts (empty ranges)
}

// Unmaps the oldest quarantined blocks beyond the bound (never one still open).
void evict_locked() {
  Registry &r = reg();
  while (r.quarantined > settings().quarantine_bytes && !r.quarantine.empty() &&
         r.quarantine.front()->opens == 0) {
    Block *b = r.quarantine.front();
    r.quarantine.pop_front();
    r.quarantined -= b->map_len;
    r.blocks.erase((uintptr_t)b->base);
    munmap(b->map, b->map_len);
    delete b;
  }
}

const char *state_name(State s) {
  switch (s) {
    case State::Pending: return "not yet allocated in stream order (cudaMallocAsync)";
    case State::Live: return "live";
    case State::Freed: return "freed (poisoned)";
  }
  return "?";
}

// One touch: registered, usable now, in bounds, aligned. Returns the fault or cudaSuccess.
cudaError_t check_touch(const Touch &t, Block *b, std::string *why) {
  char buf[256];
  if (!b) {
    std::snprintf(buf, sizeof buf, "%p is not device or pinned memory", t.p);
  } else if (b->state == State::Freed || b->state == State::Pending) {
    std::snprintf(buf, sizeof buf, "%p is in a block [%p, +%zu) that is %s", t.p, (void *)b->base,
                  b->size, state_name(b->state));
  } else if (t.bytes && (const char *)t.p + t.bytes > b->base + b->size) {
    std::snprintf(buf, sizeof buf, "[%p, +%zu) overruns its block [%p, +%zu) by %zu bytes", t.p,
                  t.bytes, (void *)b->base, b->size,
                  (size_t)((const char *)t.p + t.bytes - (b->base + b->size)));
  } else if (t.align > 1 && (uintptr_t)t.p % t.align) {
    std::snprintf(buf, sizeof buf, "%p is not aligned to %zu bytes (%" PRIuPTR " mod %zu)", t.p,
                  t.align, (uintptr_t)t.p % t.align, t.align);
    *why = buf;
    return cudaErrorMisalignedAddress;
  } else {
    return cudaSuccess;
  }
  *why = buf;
  return cudaErrorIllegalAddress;
}

}  // namespace

std::mutex &mem_lock() { return reg().mu; }

Block *mem_alloc(size_t size, Kind kind, int device, State state) {
  Registry &r = reg();
  size_t data = round_up(size, kPage), len = data + kPage;
  {
    std::lock_guard<std::mutex> g(r.mu);
    if (kind == Kind::Device) {
      if (r.used[device] + size > settings().device_bytes) return nullptr;
      r.used[device] += size;
    }
  }
  void *m = mmap(nullptr, len, kind == Kind::Device ? PROT_NONE : PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  std::lock_guard<std::mutex> g(r.mu);
  if (m == MAP_FAILED) {
    if (kind == Kind::Device) r.used[device] -= size;
    return nullptr;
  }
  auto *b = new Block;
  b->map = static_cast<char *>(m);
  b->map_len = len;
  mprotect(b->map + data, kPage, PROT_NONE);  // the guard page
  b->base = b->map + data - round_up(size, kAlign);
  b->size = size;
  b->kind = kind;
  b->device = device;
  b->state = state;
  evict_locked();  // keep the quarantine within its bound
  r.blocks[(uintptr_t)b->base] = b;
  return b;
}

Block *mem_find(const void *p) {
  std::lock_guard<std::mutex> g(reg().mu);
  return find_locked(p);
}

void mem_set_state(Block *b, State s) {
  std::lock_guard<std::mutex> g(reg().mu);
  b->state = s;
}

State mem_state(Block *b) {
  std::lock_guard<std::mutex> g(reg().mu);
  return b->state;
}

void mem_poison(Block *b) {
  Registry &r = reg();
  std::lock_guard<std::mutex> g(r.mu);
  if (b->state == State::Freed) return;
  b->state = State::Freed;
  if (b->kind == Kind::Device) r.used[b->device] -= b->size;
  if (b->opens == 0) protect(b, PROT_NONE);
  r.quarantine.push_back(b);
  r.quarantined += b->map_len;
  evict_locked();
}

cudaError_t mem_open(const std::vector<Touch> &ts, std::vector<Block *> *opened, std::string *why) {
  std::lock_guard<std::mutex> g(reg().mu);
  for (const Touch &t : ts) {
    Block *b = find_locked(t.p);
    cudaError_t e = check_touch(t, b, why);
    if (e != cudaSuccess) {
      for (Block *o : *opened)
        if (--o->opens == 0 && (o->kind == Kind::Device || o->state == State::Freed))
          protect(o, PROT_NONE);
      opened->clear();
      return e;
    }
    if (b->kind == Kind::Device && b->opens++ == 0) protect(b, PROT_READ | PROT_WRITE);
    if (b->kind == Kind::Device) opened->push_back(b);
  }
  return cudaSuccess;
}

void mem_close(std::vector<Block *> *opened) {
  std::lock_guard<std::mutex> g(reg().mu);
  for (Block *b : *opened)
    if (--b->opens == 0) protect(b, PROT_NONE);
  opened->clear();
  evict_locked();
}

}  // namespace cudasim

extern "C" int cudasimIsDeviceMemory(const void *p) {
  using namespace cudasim;
  std::lock_guard<std::mutex> g(mem_lock());
  Block *b = find_locked(p);
  return b && b->kind == Kind::Device && (const char *)p < b->base + b->size &&
         b->state == State::Live;
}
