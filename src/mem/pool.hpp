// SPDX-License-Identifier: BSD-3-Clause
// A small cache of freed host buffers, so that repeated allocating reshards (and the outputs of a
// training loop) reuse memory instead of faulting in fresh pages every call.
// Size classes: a request of at least kPoolSmallBytes (4 KiB) and below kPoolMinBytes (1 MiB) is
// rounded up to the next power of two (its class), so that buffers of one class serve every
// request of that class; requests from 1 MiB up keep their 64-byte rounded size. Buffers of at
// least kPoolSmallBytes go back to the pool when their storage dies; an allocation takes the
// smallest cached buffer that is at least as large and at most twice as large. Requests below
// kPoolSmallBytes go to the C heap (its own bins serve them without page faults). The pool holds
// at most LM_POOL_BYTES bytes of cached buffers (default 1 GiB; 0 disables it): a buffer given
// back that would exceed the bound is freed. Thread-safe.
//
// Where buffers come from: the shared arena of the node-local path (mem/arena.hpp) for
// capacities of at least LM_NODE_ARENA_MIN_BYTES once it is active (a process with node-local
// peers), the C heap (64-byte aligned) otherwise and when the arena is full.
//
// Accounting: the pool counts the bytes it has handed out and not yet taken back (requested
// sizes rounded up to 64 bytes, whatever the capacity of a reused buffer), and the high-water
// mark of that count; lm_pool_stats reports both. Reshard tests and the benchmark measure a
// reshard's peak extra memory with it.
#pragma once

#include <cstddef>

namespace lm {
constexpr size_t kPoolMinBytes = size_t(1) << 20;  // from here up: no size classes
constexpr size_t kPoolSmallBytes = size_t(4) << 10;  // below: the C heap, not pooled
// A 64-byte aligned buffer of at least `bytes` (capacity in *cap), from the pool or new; NULL on
// failure. Contents undefined.
void *pool_take(size_t bytes, size_t *cap);
// Gives a buffer back: capacity `cap` from pool_take, `bytes` the size it was taken for (kept if
// the pool has room, freed otherwise).
void pool_give(void *p, size_t cap, size_t bytes);
// Bytes handed out now and their high-water mark; reset_peak sets the mark to the bytes in use
// (after reading it).
void pool_stats(size_t *in_use, size_t *peak, bool reset_peak);
// Bytes of buffers cached in the pool now (never above its LM_POOL_BYTES bound) and the bound.
void pool_held(size_t *held, size_t *limit);
}  // namespace lm
