// SPDX-License-Identifier: BSD-3-Clause
// The shared arena of the node-local path (issue 12 item 4; docs/DESIGN.md, "Node-local copies").
// process_vm_readv/writev move bytes between processes at about 70% of memcpy speed here (and at
// 20-25% out of shared pages), so the last copy cannot reach the memcpy floor through the kernel.
// Memory that both processes map can: this is that memory.
//
// One sparse memfd per process (LM_NODE_ARENA_BYTES of address space, default 256 GiB; pages
// exist only once touched), mapped MAP_SHARED once. The buffer pool (mem/pool.cpp) carves its
// buffers of kArenaMinBytes and more from it, so library-allocated host shards, reshard outputs,
// intermediate and staging buffers live there; borrowed user buffers do not. A node-local peer
// maps the whole arena once, through /proc/<pid>/fd/<fd> (the access check is the one
// process_vm_readv passes, which node_probe tested), and keeps the mapping for the life of the
// process: freed blocks go back to the arena's free list and their pages to the kernel
// (fallocate PUNCH_HOLE), so a peer's mapping never pins freed memory and never goes stale.
//
// Activated by the first node probe that finds peers (arena_activate), never before: a process
// without node-local peers keeps plain heap buffers. LM_NODE_ARENA_BYTES=0 (or LM_NODE_LOCAL=0)
// turns it off. A child made by fork() does not inherit the arena's pages (MADV_DONTFORK: they
// would be shared with the parent, not copied); in the child the arena is off, and buffers the
// parent allocated there are not mapped (documented: fork before using localmap, as with MPI).
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lm {

// The smallest pool buffer the arena serves: LM_NODE_ARENA_MIN_BYTES, default 32 KiB (smaller
// ones stay on the heap: the node-local path starts at LM_NODE_LOCAL_MIN_BYTES, 32 KiB too; the
// tests set both to 1 so that every message and buffer takes the path).
size_t arena_min_bytes();

// Creates this process's arena if LM_NODE_LOCAL and LM_NODE_ARENA_BYTES allow and it does not
// exist yet. Returns whether the arena is active.
bool arena_activate();
// A block of at least `bytes` (rounded up to whole pages) from the arena, or NULL when the arena
// is off or full (the caller then allocates elsewhere). Contents undefined.
void *arena_alloc(size_t bytes, size_t *cap);
// Gives a block of arena_alloc back (its pages are returned to the kernel). Returns false when p
// is not an arena block (the caller frees it its own way).
bool arena_free(void *p, size_t cap);

// This process's arena as a peer names it: pid, descriptor number and size; fd < 0 when off.
struct ArenaId {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t size = 0;
};
ArenaId arena_self();
// The offset in this process's arena of [p, p + bytes), or UINT64_MAX when it is not all inside.
uint64_t arena_offset(const void *p, size_t bytes);
// The base address, in this process, of the peer's arena `id` (mapped on first use, kept for the
// life of the process), or NULL when it cannot be mapped (then the caller copies through the
// kernel instead).
char *arena_peer(const ArenaId &id);

// Whether p lies in this process's arena's address range (in a fork() child too, where the
// range is not mapped: the pool drops such cached buffers there).
bool arena_owns(const void *p);

// Bytes of the arena handed out now (for tests).
size_t arena_in_use();

}  // namespace lm
