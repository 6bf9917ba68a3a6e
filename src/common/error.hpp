// SPDX-License-Identifier: BSD-3-Clause
// Error model of localmap's C++ core: modules throw lm::Error; the C API layer (src/capi) catches
// it in one place, stores the thread-local message and returns the status.
#pragma once

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "localmap.h"

namespace lm {

class Error : public std::exception {
 public:
  Error(lm_status_t status, std::string message, lm_status_t cause = LM_SUCCESS)
      : status_(status), cause_(cause == LM_SUCCESS ? status : cause), message_(std::move(message)) {}
  lm_status_t status() const noexcept { return status_; }
  // What went wrong at the origin: the status itself, or for LM_ERR_REMOTE the other rank's.
  lm_status_t cause() const noexcept { return cause_; }
  const char *what() const noexcept override { return message_.c_str(); }
  const std::string &message() const noexcept { return message_; }
  // Agreed before any data moved: every rank of the call knows of the failure and nothing of the
  // call is in flight, so the meshes stay usable (mesh_break leaves them alone).
  bool agreed() const noexcept { return agreed_; }
  Error &mark_agreed() noexcept {
    agreed_ = true;
    return *this;
  }

 private:
  lm_status_t status_;
  lm_status_t cause_;
  bool agreed_ = false;
  std::string message_;
};

// printf-style formatting into std::string.
std::string strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// "fn: arg" (an argument's name in messages) in a buffer of its own, without printf: the hot
// paths (reshard, local_map) name their arguments on every call, and only a failure reads it.
// Truncates past 127 characters.
class ArgName {
 public:
  ArgName(const char *fn, const char *arg) { n_ = 0, put(fn), put(": "), put(arg); }
  // "fn: arg[index]"
  ArgName(const char *fn, const char *arg, long long index) : ArgName(fn, arg) { put_index(index); }
  // "arg[index]", or "arg" where index < 0 (one argument or an entry of an array).
  static ArgName entry(const char *arg, long long index) {
    ArgName a;
    a.put(arg);
    if (index >= 0) a.put_index(index);
    return a;
  }
  const char *c_str() const { return buf_; }

 private:
  ArgName() : n_(0) { buf_[0] = '\0'; }
  void put_index(long long index) {
    char d[24];
    int k = 0;
    unsigned long long u = index < 0 ? 0ULL - (unsigned long long)index : (unsigned long long)index;
    do d[k++] = (char)('0' + u % 10); while (u /= 10);
    if (index < 0) d[k++] = '-';
    put("[");
    while (k > 0 && n_ + 1 < sizeof buf_) buf_[n_++] = d[--k];
    put("]");
  }
  void put(const char *p) {
    const size_t k = std::min(std::strlen(p), sizeof buf_ - 1 - n_);
    std::memcpy(buf_ + n_, p, k);
    buf_[n_ += k] = '\0';
  }
  char buf_[128];
  size_t n_;
};

// Throws Error(status, "<formatted message>").
[[noreturn]] void fail(lm_status_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Convenience for the most common case.
#define LM_CHECK_ARG(cond, ...)                              \
  do {                                                       \
    if (!(cond)) ::lm::fail(LM_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

// This process's rank in MPI_COMM_WORLD, or -1 when MPI is not initialised (for messages).
int world_rank_or_minus1();

// The int value of an enum that came from C: C callers may pass any int, and loading an
// out-of-range value as a C++ enum is undefined behaviour, so the bits are read as an int.
template <class E>
inline int enum_bits(const E &e) {
  static_assert(sizeof(E) == sizeof(int), "enum is int-sized");
  int v;
  __builtin_memcpy(&v, &e, sizeof v);
  return v;
}

// Thread-local last error.
void set_last_error(const std::string &message);
void clear_last_error();
const char *last_error();

// Text a user callback left with lm_set_error_message (thread-local); taking it clears it.
std::string take_user_message();
void set_user_message(const char *message);

}  // namespace lm
