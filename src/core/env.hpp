// SPDX-License-Identifier: BSD-3-Clause
// Byte-count settings from the environment (LM_STAGING_BYTES, LM_NODE_LOCAL_MIN_BYTES,
// LM_NODE_ARENA_BYTES, LM_NODE_ARENA_MIN_BYTES, LM_DATATYPE_MIN_BYTES): one reader, so they all parse alike. Callers
// read once (a function-local static) and clamp to their own bounds.
#pragma once

#include <cstdint>

namespace lm {

// The value of `name` as a whole decimal number; `dflt` when it is unset, empty or not one.
uint64_t env_bytes(const char *name, uint64_t dflt);

}  // namespace lm
