// SPDX-License-Identifier: BSD-3-Clause
// unit_env: the parsers of the settings table (src/common/settings.hpp): byte counts with binary
// suffixes, booleans, seconds, bounded integers, choices. A value that is not valid is refused
// (the library then warns once and keeps the default) instead of being read as something else:
// atoi("two") == 0 once turned every check off, and LM_POOL_BYTES=1G once meant one byte. A byte
// count outside its bounds is clamped with one warning naming the variable and the value used
// (test_clamp_warning: the process's settings, read once). No MPI.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/settings.hpp"
#include "unit_check.hpp"

namespace {

void test_bytes() {
  uint64_t v = 7;
  CHECK(lm::parse_bytes("0", &v) && v == 0);
  CHECK(lm::parse_bytes("512", &v) && v == 512);
  CHECK(lm::parse_bytes("1K", &v) && v == 1024);
  CHECK(lm::parse_bytes("1k", &v) && v == 1024);
  CHECK(lm::parse_bytes("2KiB", &v) && v == 2048);
  CHECK(lm::parse_bytes("2kb", &v) && v == 2048);
  CHECK(lm::parse_bytes("64M", &v) && v == (uint64_t)64 << 20);
  CHECK(lm::parse_bytes("64MiB", &v) && v == (uint64_t)64 << 20);
  CHECK(lm::parse_bytes("1G", &v) && v == (uint64_t)1 << 30);
  CHECK(lm::parse_bytes("1gib", &v) && v == (uint64_t)1 << 30);
  CHECK(lm::parse_bytes("256GB", &v) && v == (uint64_t)256 << 30);
  CHECK(lm::parse_bytes("2T", &v) && v == (uint64_t)2 << 40);
  const char *bad[] = {"", "G", "-1", " 1", "1 ", "1.5M", "1X", "1KiBB", "1iB", "0x10",
                       "99999999999999999999", "20000000000T", "one"};
  for (const char *b : bad) {
    v = 7;
    CHECK(!lm::parse_bytes(b, &v) && v == 7);  // refused, untouched
  }
}

void test_bool() {
  bool v = false;
  const char *on[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
  const char *off[] = {"0", "false", "False", "no", "NO", "off", "Off"};
  for (const char *s : on) CHECK(lm::parse_bool(s, &v) && v);
  for (const char *s : off) CHECK(lm::parse_bool(s, &v) && !v);
  const char *bad[] = {"", "2", "enable", "y", "n", " 1", "truee"};
  for (const char *b : bad) CHECK(!lm::parse_bool(b, &v));
}

void test_seconds() {
  double t = -1;
  CHECK(lm::parse_seconds("0", &t) && t == 0);
  CHECK(lm::parse_seconds("1.5", &t) && t == 1.5);
  CHECK(lm::parse_seconds("30", &t) && t == 30);
  CHECK(lm::parse_seconds("2e1", &t) && t == 20);
  const char *bad[] = {"", "soon", "-1", "1.5s", "nan", "inf", "1e300", " "};
  for (const char *b : bad) {
    t = -1;
    CHECK(!lm::parse_seconds(b, &t) && t == -1);
  }
}

void test_int() {
  int64_t v = 7;
  CHECK(lm::parse_int("0", 0, 2, &v) && v == 0);
  CHECK(lm::parse_int("2", 0, 2, &v) && v == 2);
  CHECK(lm::parse_int("-1", -1, 9, &v) && v == -1);
  const char *bad[] = {"", "two", "3", "-1", "01", "1 ", " 1", "2x", "9999999999999999999999"};
  for (const char *b : bad) {
    v = 7;
    CHECK(!lm::parse_int(b, 0, 2, &v) && v == 7);
  }
}

// Each setting's own parse: bounds clamp byte counts, refuse integers and choices outside.
void test_settings() {
  lm::SettingValue v;
  CHECK(lm::parse_setting(lm::Setting::StagingBytes, "1", &v) && v.u == 256 && v.clamped);
  CHECK(lm::parse_setting(lm::Setting::StagingBytes, "8G", &v) && v.u == (uint64_t)1 << 30 &&
        v.clamped);
  CHECK(lm::parse_setting(lm::Setting::StagingBytes, "512K", &v) && v.u == 512 << 10 &&
        !v.clamped);
  CHECK(lm::parse_setting(lm::Setting::StagingBytes, "256", &v) && v.u == 256 && !v.clamped);
  CHECK(lm::parse_setting(lm::Setting::BoardExchangeBytes, "4M", &v) && v.u == 1 << 20);
  CHECK(lm::parse_setting(lm::Setting::NodeLocalMinBytes, "0", &v) && v.u == 1);
  CHECK(lm::parse_setting(lm::Setting::PoolBytes, "1G", &v) && v.u == (uint64_t)1 << 30);
  CHECK(lm::parse_setting(lm::Setting::NodeLocal, "false", &v) && v.u == 0);
  CHECK(!lm::parse_setting(lm::Setting::NodeLocal, "maybe", &v));
  CHECK(lm::parse_setting(lm::Setting::Check, "2", &v) && v.u == 2);
  CHECK(!lm::parse_setting(lm::Setting::Check, "3", &v));
  CHECK(lm::parse_setting(lm::Setting::Transport, "mpi", &v) && v.u == lm::kTransportMpi);
  CHECK(lm::parse_setting(lm::Setting::Transport, "auto", &v) && v.u == lm::kTransportAuto);
  CHECK(!lm::parse_setting(lm::Setting::Transport, "ucx", &v));
  CHECK(lm::parse_setting(lm::Setting::Timeout, "2.5", &v) && v.d == 2.5);
  CHECK(lm::parse_setting(lm::Setting::NcclFaultInitRank, "-1", &v) && (int64_t)v.u == -1);
  // Every default parses, and the must-agree settings come first.
  for (int i = 0; i < lm::kSettingCount; ++i) {
    const lm::SettingInfo &info = lm::setting_info((lm::Setting)i);
    CHECK(lm::parse_setting((lm::Setting)i, info.dflt, &v));
    CHECK(info.must_agree == (i < lm::kMustAgreeCount));
  }
  CHECK(lm::setting_format(lm::Setting::Transport, lm::kTransportMpi) == "mpi");
}

// The process's settings (read on the first setting() call, so before any other): an
// out-of-range size is clamped with one warning on stderr naming the variable, its value and the
// value used; reading it again warns no more.
void test_clamp_warning() {
  setenv("LM_STAGING_BYTES", "100", 1);
  std::fflush(stderr);
  char path[] = "/tmp/unit_env_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const int saved = dup(2);
  dup2(fd, 2);
  const uint64_t first = lm::setting_u(lm::Setting::StagingBytes);
  const uint64_t again = lm::setting_u(lm::Setting::StagingBytes);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string err;
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
  close(fd);
  unlink(path);
  CHECK(first == 256 && again == 256);
  CHECK(lm::setting(lm::Setting::StagingBytes).from_env);
  const std::string want =
      "localmap: LM_STAGING_BYTES=100 is outside [256, 1073741824]; using 256\n";
  size_t count = 0;
  for (size_t at = err.find("LM_STAGING_BYTES"); at != std::string::npos;
       at = err.find("LM_STAGING_BYTES", at + 1))
    ++count;
  CHECK(count == 1);  // one warning, not one per read
  CHECK(err.find(want) != std::string::npos);
  if (err.find(want) == std::string::npos) std::fprintf(stderr, "stderr was: %s\n", err.c_str());
}

}  // namespace

int main() {
  test_clamp_warning();  // first: the settings are read once, on the first setting() call
  test_bytes();
  test_bool();
  test_seconds();
  test_int();
  test_settings();
  return unit_check_report("unit_env");
}
