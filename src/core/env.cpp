// SPDX-License-Identifier: BSD-3-Clause
#include "core/env.hpp"

#include <cstdlib>

namespace lm {

uint64_t env_bytes(const char *name, uint64_t dflt) {
  const char *e = std::getenv(name);
  if (!e || !*e) return dflt;
  char *end = nullptr;
  unsigned long long x = std::strtoull(e, &end, 10);
  return end && *end == '\0' ? (uint64_t)x : dflt;
}

}  // namespace lm
