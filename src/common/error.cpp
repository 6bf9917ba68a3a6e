// SPDX-License-Identifier: BSD-3-Clause
#include "common/error.hpp"

#include <atomic>

#include <mpi.h>

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace lm {

static std::string vstrfmt(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char small[256];
  int n = std::vsnprintf(small, sizeof small, fmt, ap);
  if (n < 0) {
    va_end(ap2);
    return std::string(fmt);
  }
  if (static_cast<size_t>(n) < sizeof small) {
    va_end(ap2);
    return std::string(small, static_cast<size_t>(n));
  }
  std::vector<char> big(static_cast<size_t>(n) + 1);
  std::vsnprintf(big.data(), big.size(), fmt, ap2);
  va_end(ap2);
  return std::string(big.data(), static_cast<size_t>(n));
}

std::string strfmt(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrfmt(fmt, ap);
  va_end(ap);
  return s;
}

void fail(lm_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrfmt(fmt, ap);
  va_end(ap);
  throw Error(status, std::move(s));
}

namespace {
std::atomic<int> g_world_rank{-1};  // remembered, so messages after MPI_Finalize still say it
}

int world_rank_or_minus1() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return g_world_rank.load(std::memory_order_relaxed);
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  g_world_rank.store(r, std::memory_order_relaxed);
  return r;
}

namespace {
thread_local std::string t_last_error;
thread_local std::string t_user_message;
}  // namespace

void set_last_error(const std::string &message) { t_last_error = message; }
void clear_last_error() { t_last_error.clear(); }
const char *last_error() { return t_last_error.c_str(); }

std::string take_user_message() {
  std::string s;
  s.swap(t_user_message);
  return s;
}
void set_user_message(const char *message) {
  if (message)
    t_user_message = message;
  else
    t_user_message.clear();
}

}  // namespace lm
