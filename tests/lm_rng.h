/* SPDX-License-Identifier: BSD-3-Clause */
/* lm_rng.h: the seeded generator of the random suites (splitmix64). Every rank seeds it alike, so
 * all ranks draw the same cases; `LM_SEED` / `LM_CASE` replay one. Header-only, one state per
 * program. */
#ifndef LM_RNG_H_
#define LM_RNG_H_

#include <stdint.h>

static uint64_t rng_state;
static inline uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Uniform in [0, n), n >= 1. */
static inline int rndi(int n) { return (int)(rnd() % (uint64_t)n); }

#endif
