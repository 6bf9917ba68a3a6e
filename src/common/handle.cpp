// SPDX-License-Identifier: BSD-3-Clause
#include "common/handle.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

namespace lm {

namespace {

struct Slot {
  std::atomic<uint64_t> live{0};  // the handle value while live, else 0
  std::atomic<void *> obj{nullptr};
  std::atomic<int> refs{0};       // caller references of an owned handle; -1: borrowed
  uint32_t gen = 0;               // generation of the next handle in this slot
};

constexpr uint32_t kChunkBits = 12;
constexpr uint32_t kChunkSize = 1u << kChunkBits;
constexpr uint32_t kMaxChunks = 1u << 16;  // 2^28 live handles at most
constexpr uint64_t kTag = uint64_t(1) << 63;

// Zero-initialised at load time and never destroyed: handles may die in atexit handlers and
// static destructors (Python __del__, Rust Drop, Fortran final) after ours would have run.
std::atomic<Slot *> g_chunks[kMaxChunks];

struct Table {
  std::mutex mu;
  uint32_t nslots = 0;              // slots ever made
  std::vector<uint32_t> free_ring;  // FIFO of free slots, so a slot is reused as late as possible
  size_t head = 0;                  // first free entry in free_ring
};
Table &table() {
  static Table *t = new Table;  // immortal (see above)
  return *t;
}

Slot *slot_of(uint64_t h) {
  if (!(h & kTag)) return nullptr;
  uint32_t idx = static_cast<uint32_t>(h);
  uint32_t c = idx >> kChunkBits;
  if (c >= kMaxChunks) return nullptr;
  Slot *chunk = g_chunks[c].load(std::memory_order_acquire);
  if (!chunk) return nullptr;
  return &chunk[idx & (kChunkSize - 1)];
}

// The slot of a live handle of `kind`, else nullptr.
Slot *live_slot(const void *hp, HandleKind kind) {
  uint64_t h = reinterpret_cast<uintptr_t>(hp);
  if (((h >> 56) & 0x7f) != static_cast<uint64_t>(kind)) return nullptr;
  Slot *s = slot_of(h);
  if (!s || s->live.load(std::memory_order_acquire) != h) return nullptr;
  return s;
}

void free_slot(Slot *s, uint32_t idx) {
  Table &t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  s->live.store(0, std::memory_order_release);
  s->obj.store(nullptr, std::memory_order_relaxed);
  if (t.head > 0 && t.head * 2 >= t.free_ring.size()) {  // compact the consumed prefix
    t.free_ring.erase(t.free_ring.begin(), t.free_ring.begin() + static_cast<long>(t.head));
    t.head = 0;
  }
  t.free_ring.push_back(idx);
}

}  // namespace

uintptr_t handle_new(HandleKind kind, void *obj, bool owned) {
  static_assert(sizeof(uintptr_t) == 8, "handles need 64-bit pointers");
  Table &t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  uint32_t idx;
  // Reuse a free slot only once enough are free, so a stale handle's slot is rarely reused soon.
  if (t.free_ring.size() - t.head > 1024 || t.nslots >= kMaxChunks * kChunkSize) {
    if (t.free_ring.size() == t.head) throw std::bad_alloc();
    idx = t.free_ring[t.head++];
  } else {
    idx = t.nslots;
    uint32_t c = idx >> kChunkBits;
    if (!g_chunks[c].load(std::memory_order_relaxed)) {
      Slot *chunk = new Slot[kChunkSize];
      g_chunks[c].store(chunk, std::memory_order_release);
    }
    ++t.nslots;
  }
  Slot *s = &g_chunks[idx >> kChunkBits].load(std::memory_order_relaxed)[idx & (kChunkSize - 1)];
  uint32_t gen = s->gen++ & 0xffffffu;
  uint64_t h = kTag | static_cast<uint64_t>(kind) << 56 | static_cast<uint64_t>(gen) << 32 | idx;
  s->obj.store(obj, std::memory_order_relaxed);
  s->refs.store(owned ? 1 : -1, std::memory_order_relaxed);
  s->live.store(h, std::memory_order_release);
  return h;
}

void *handle_get(const void *h, HandleKind kind) {
  Slot *s = live_slot(h, kind);
  return s ? s->obj.load(std::memory_order_relaxed) : nullptr;
}

bool handle_retain(const void *h, HandleKind kind) {
  Slot *s = live_slot(h, kind);
  if (!s) return false;
  int r = s->refs.load(std::memory_order_relaxed);
  while (r > 0)
    if (s->refs.compare_exchange_weak(r, r + 1, std::memory_order_relaxed)) return true;
  return false;
}

DropResult handle_drop(const void *h, HandleKind kind, void **obj) {
  Slot *s = live_slot(h, kind);
  if (!s) return DropResult::Dead;
  int r = s->refs.load(std::memory_order_relaxed);
  for (;;) {
    if (r < 0) return DropResult::Borrowed;
    if (r == 0) return DropResult::Dead;  // a concurrent drop took the last one
    if (s->refs.compare_exchange_weak(r, r - 1, std::memory_order_acq_rel)) break;
  }
  if (r > 1) return DropResult::Alive;
  *obj = s->obj.load(std::memory_order_relaxed);
  free_slot(s, static_cast<uint32_t>(reinterpret_cast<uintptr_t>(h)));
  return DropResult::Died;
}

void handle_kill(uintptr_t h) {
  Slot *s = slot_of(h);
  if (!s || s->live.load(std::memory_order_acquire) != h) return;
  free_slot(s, static_cast<uint32_t>(h));
}

bool handle_is_owned(uintptr_t h) {
  Slot *s = slot_of(h);
  return s && s->live.load(std::memory_order_acquire) == h &&
         s->refs.load(std::memory_order_relaxed) > 0;
}

}  // namespace lm
