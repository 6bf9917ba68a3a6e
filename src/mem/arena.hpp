// SPDX-License-Identifier: BSD-3-Clause
// The shared arena of the node-local path (docs/DESIGN.md, "Node-local machinery, by role").
// process_vm_readv/writev move bytes between processes at about 70% of memcpy speed (and at 20-25%
// out of shared pages), so the last copy cannot reach the memcpy floor through the kernel. Memory
// that both processes map can: this is that memory.
//
// One sparse memfd per process ("localmap-arena.<pid>"), at most arena_limits().size bytes (pages
// exist only once touched). Its first page is a header (magic, a random nonce); the rest is mapped
// here MAP_SHARED in segments as the buffer pool needs them (mem/pool.cpp carves buffers of
// LM_NODE_ARENA_MIN_BYTES and more from them), so this process's address space grows with what it
// uses, not with the arena's bound. Freed blocks go back to a free list and their pages to the
// kernel (fallocate PUNCH_HOLE), so a peer's mapping never pins freed memory.
//
// Peers map parts of it (arena_peer.cpp): windows of kPeerWindow bytes through
// /proc/<pid>/fd/<fd> (a ptrace READ-mode access check: same uid, not restricted by Yama scope 1),
// on demand, read-only unless the copy writes, cached least recently used first within
// arena_limits().peer_budget and unmapped beyond it. A window is mapped only after the opened file
// proves to be the arena named (its st_dev, st_ino and size, and the nonce in its header): a
// reused pid or descriptor number never maps another process's memory.
//
// fork(): the child keeps the parent's arena as a private copy-on-write mapping of the same memfd
// (reads see the parent's data; the child's writes stay in the child; a page the child has not
// written shows what the parent writes there later, and a page the parent frees reads zeros). The
// child never hands out, frees or punches arena memory (its pool drops arena buffers), and does not
// inherit peers' windows (MADV_DONTFORK). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lm {

// The smallest pool buffer the arena serves: LM_NODE_ARENA_MIN_BYTES, default 4 KiB, the pool's
// smallest size class (smaller ones stay on the heap). A single message starts the node-local path
// at LM_NODE_LOCAL_MIN_BYTES (32 KiB), but a grouped round's message gathers many small tensors,
// which its receiver reads with memcpy when they lie here (bench_group, small mix: 1.40 -> 0.99x
// of MPI_Allgatherv at np 4). The tests set both to 1 so that every message and buffer takes
// the path.
size_t arena_min_bytes();

// What the arena may take, decided once per process (at the first activation) from
// LM_NODE_ARENA_BYTES (the user's bound; its default is also capped by physical memory),
// LM_NODE_PEER_MAP_BYTES and RLIMIT_AS: under a finite RLIMIT_AS the arena gets at most half and
// peers' windows an eighth of the address space left then, and the arena is off when that is
// under 64 MiB. One line on stderr says so when RLIMIT_AS made either smaller than asked (for an
// lm-info tool: arena_report()).
struct ArenaLimits {
  uint64_t requested = 0;    // LM_NODE_ARENA_BYTES, or its default capped by physical memory
  uint64_t size = 0;         // the arena's bound (0: no arena)
  uint64_t peer_requested = 0, peer_budget = 0;  // LM_NODE_PEER_MAP_BYTES and what applies
  uint64_t phys = 0;         // physical memory
  uint64_t as_limit = 0;     // RLIMIT_AS (0: unlimited)
  bool as_capped = false;    // RLIMIT_AS made size or peer_budget smaller than asked
};
const ArenaLimits &arena_limits();

// Creates this process's arena if LM_NODE_LOCAL and the limits allow and it does not exist yet.
// Returns whether the arena is active.
bool arena_activate();
// A block of at least `bytes` (rounded up to whole pages) from the arena, or NULL when the arena
// is off or full or this is a fork() child (the caller then allocates elsewhere). Contents
// undefined.
void *arena_alloc(size_t bytes, size_t *cap);
// Gives a block of arena_alloc back (its pages are returned to the kernel; in a fork() child
// nothing happens). Returns false when p is not an arena block (the caller frees it its own way).
bool arena_free(void *p, size_t cap);

// This process's arena as a peer names it; fd < 0 when off (or in a fork() child).
struct ArenaId {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t size = 0;           // the memfd's size: offsets are below it
  uint64_t dev = 0, ino = 0;   // the memfd's identity (fstat)
  uint64_t nonce = 0;          // random, also in the header page
};
ArenaId arena_self();
// The offset in this process's arena of [p, p + bytes), or UINT64_MAX when it is not all inside
// one mapped segment (or this is a fork() child).
uint64_t arena_offset(const void *p, size_t bytes);
// Whether p lies in this process's arena (in a fork() child too: the pool drops such buffers).
bool arena_owns(const void *p);
// Whether this process is a fork() child of one that had an arena.
bool arena_in_child();
// Bytes of the arena handed out now (for tests).
size_t arena_in_use();

// ---- Peers' arenas (arena_peer.cpp)

// The header page at offset 0 of every arena (written by its owner with pwrite, read by peers
// with pread before they map anything).
struct ArenaHeader {
  uint64_t magic, nonce;
};
constexpr uint64_t kArenaMagic = 0x414e4552414d4c4cull;  // "LLMARENA"

// The granule of peers' windows: a window maps [k * kPeerWindow, (k + 1) * kPeerWindow) of a
// peer's memfd (less at its end).
constexpr uint64_t kPeerWindow = uint64_t(64) << 20;

// Whether this process may map the peer's arena `id` (opens it through /proc and checks that it
// is that arena, maps nothing): the node probe's test.
bool arena_peer_check(const ArenaId &id);

// A window of a peer's arena mapped here (read-only unless `write`), holding the byte at offset
// `off`; pinned (never unmapped) while the view lives. data() is NULL when it cannot be mapped
// (not allowed, not that arena any more, out of address space): the caller copies another way.
class PeerView {
 public:
  PeerView() = default;
  PeerView(const ArenaId &id, uint64_t off, bool write);
  ~PeerView();
  PeerView(PeerView &&o) noexcept;
  PeerView &operator=(PeerView &&o) noexcept;
  PeerView(const PeerView &) = delete;
  PeerView &operator=(const PeerView &) = delete;
  char *data() const { return p_; }    // where `off` is mapped here
  uint64_t avail() const { return n_; }  // bytes mapped from there on
  explicit operator bool() const { return p_ != nullptr; }

 private:
  void release();
  void *w_ = nullptr;
  char *p_ = nullptr;
  uint64_t n_ = 0;
};

// [off, off + len) of a peer's arena mapped here for the life of the process (the agreement
// board's slots: write; peers' outboxes: read-only), or NULL. Not counted in the window budget.
char *arena_peer_pin(const ArenaId &id, uint64_t off, uint64_t len, bool write);

// What the arena and peers' windows hold now, for an lm-info tool and the tests.
struct ArenaReport {
  ArenaLimits limits;
  bool active = false, child = false;
  uint64_t mapped = 0;           // this arena's segments mapped here
  uint64_t in_use = 0;           // of which handed out
  uint64_t peer_mapped = 0;      // peers' windows mapped here (pinned or cached)
  uint64_t peer_windows = 0;     // how many
  uint64_t peer_writable = 0;    // of peer_mapped, writable
  uint64_t peer_pinned = 0;      // arena_peer_pin's mappings (bytes; board: writable)
};
ArenaReport arena_report();
// The peer half of arena_report (arena_peer.cpp).
void arena_peer_report(ArenaReport *r);

}  // namespace lm
