// SPDX-License-Identifier: BSD-3-Clause
// unit_pool: the host buffer pool of src/mem/pool.hpp. Size classes (small requests are served
// from the pool and reused across sizes of one class), the LM_POOL_BYTES bound on cached bytes
// (never exceeded, however many buffers are given back), and the in-use accounting. No MPI.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mem/pool.hpp"
#include "unit_check.hpp"

namespace {


constexpr size_t kLimit = size_t(3) << 20;  // LM_POOL_BYTES set by main before the pool exists

// A small buffer given back is reused by the next request of its class, even of another size.
void test_small_classes() {
  g_test = "small_classes";
  size_t cap = 0;
  void *a = lm::pool_take(40000, &cap);  // class 64 KiB
  CHECK(a != nullptr);
  CHECK(cap == 65536);
  std::memset(a, 1, 40000);
  lm::pool_give(a, cap, 40000);
  size_t cap2 = 0;
  void *b = lm::pool_take(50000, &cap2);  // same class: the same buffer
  CHECK(b == a);
  CHECK(cap2 == 65536);
  lm::pool_give(b, cap2, 50000);
  // Below the smallest class: the C heap, capacity the 64-rounded request.
  void *c = lm::pool_take(100, &cap);
  CHECK(c != nullptr);
  CHECK(cap == 128);
  lm::pool_give(c, cap, 100);
  // 1 MiB and up: no rounding to a power of two.
  void *d = lm::pool_take((size_t(1) << 20) + 64, &cap);
  CHECK(d != nullptr);
  CHECK(cap == (size_t(1) << 20) + 64);
  lm::pool_give(d, cap, (size_t(1) << 20) + 64);
}

// However many buffers of however many sizes are given back, the pool caches at most its bound.
void test_bound() {
  g_test = "bound";
  size_t held = 0, limit = 0;
  lm::pool_held(&held, &limit);
  CHECK(limit == kLimit);
  std::vector<std::pair<void *, size_t>> bufs;
  const size_t sizes[] = {5000, 70000, 300000, 900000, size_t(1) << 20, (size_t(3) << 19) + 64};
  for (int round = 0; round < 8; ++round)
    for (size_t s : sizes) {
      size_t cap = 0;
      void *p = lm::pool_take(s, &cap);
      CHECK(p != nullptr);
      CHECK(cap >= s);
      std::memset(p, 0x5a, s);  // the whole request is writable
      bufs.emplace_back(p, s);
      bufs.back().second = cap;  // keep the capacity for give
      bufs.emplace_back(nullptr, s);  // remember the request next to it
    }
  size_t max_held = 0;
  for (size_t i = 0; i < bufs.size(); i += 2) {
    lm::pool_give(bufs[i].first, bufs[i].second, bufs[i + 1].second);
    lm::pool_held(&held, nullptr);
    if (held > max_held) max_held = held;
  }
  CHECK(max_held <= kLimit);
  CHECK(max_held > 0);  // and it did cache something
  size_t in_use = 1;
  lm::pool_stats(&in_use, nullptr, false);
  CHECK(in_use == 0);  // everything taken was given back
}

}  // namespace

int main() {
  setenv("LM_POOL_BYTES", "3145728", 1);
  test_small_classes();
  test_bound();
  return unit_check_report("unit_pool");
}
