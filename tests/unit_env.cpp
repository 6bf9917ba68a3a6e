// SPDX-License-Identifier: BSD-3-Clause
// unit_env: the parsers of the environment settings LM_CHECK and LM_TIMEOUT (src/mesh/agree.hpp).
// A value that is not valid is refused (the caller then warns once and keeps the default) instead
// of being read as something else: atoi("two") == 0 once turned every check off. No MPI calls.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <cmath>
#include <cstdio>

#include "mesh/agree.hpp"
#include "unit_check.hpp"

namespace {


void test_check_level() {
  int v = -7;
  CHECK(lm::parse_check_level(nullptr, &v) && v == 1);  // unset: the default
  CHECK(lm::parse_check_level("", &v) && v == 1);
  CHECK(lm::parse_check_level("0", &v) && v == 0);
  CHECK(lm::parse_check_level("1", &v) && v == 1);
  CHECK(lm::parse_check_level("2", &v) && v == 2);
  const char *bad[] = {"two", "3", "-1", "01", "1 ", " 1", "2x", "9999999999"};
  for (const char *b : bad) {
    v = -7;
    CHECK(!lm::parse_check_level(b, &v) && v == 1);  // refused; the default stands
  }
}

void test_timeout() {
  double t = -1;
  CHECK(lm::parse_timeout(nullptr, &t) && t == 0);
  CHECK(lm::parse_timeout("", &t) && t == 0);
  CHECK(lm::parse_timeout("0", &t) && t == 0);
  CHECK(lm::parse_timeout("1.5", &t) && t == 1.5);
  CHECK(lm::parse_timeout("30", &t) && t == 30);
  CHECK(lm::parse_timeout("2e1", &t) && t == 20);
  const char *bad[] = {"soon", "-1", "1.5s", "nan", "inf", "1e300", " "};
  for (const char *b : bad) {
    t = -1;
    CHECK(!lm::parse_timeout(b, &t) && t == 0);  // refused: no deadline
  }
}

}  // namespace

int main() {
  test_check_level();
  test_timeout();
  return unit_check_report("unit_env");
}
