// SPDX-License-Identifier: BSD-3-Clause
// The counting assertion of the MPI-free unit tests (tests/unit_*.cpp): CHECK(cond) counts a pass
// or prints the failing condition with the current test's name (g_test), and each program ends
// with unit_check_report(), which prints "<name>: <N> passed, <N> failed" (the closing line CI
// reads) and gives the exit status.
#pragma once

#include <cstdio>

namespace {

int g_passed = 0, g_failed = 0;
const char *g_test = "";

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (cond) {                                                                         \
      ++g_passed;                                                                       \
    } else {                                                                            \
      ++g_failed;                                                                       \
      std::fprintf(stderr, "FAIL [%s] %s:%d: %s\n", g_test, __FILE__, __LINE__, #cond); \
    }                                                                                   \
  } while (0)

[[maybe_unused]] int unit_check_report(const char *name) {
  std::printf("%s: %d passed, %d failed\n", name, g_passed, g_failed);
  return g_failed ? 1 : 0;
}

}  // namespace
