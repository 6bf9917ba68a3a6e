// SPDX-License-Identifier: BSD-3-Clause
// A small cache of freed large host buffers, so that repeated allocating reshards (and the
// outputs of a training loop) reuse memory instead of faulting in fresh pages every call.
// Buffers of at least kPoolMinBytes go back to the pool when their storage dies; an allocation
// takes the smallest cached buffer that is at least as large and at most twice as large. The pool
// holds at most LM_POOL_BYTES bytes (default 1 GiB; 0 disables it). Thread-safe.
#pragma once

#include <cstddef>

namespace lm {
constexpr size_t kPoolMinBytes = size_t(1) << 20;
// A 64-byte aligned buffer of at least `bytes` (capacity in *cap), from the pool or new; NULL on
// failure.
void *pool_take(size_t bytes, size_t *cap);
// Gives a buffer of capacity `cap` back (kept if the pool has room, freed otherwise).
void pool_give(void *p, size_t cap);
}  // namespace lm
