// SPDX-License-Identifier: BSD-3-Clause
// Shared by the libFuzzer targets: a byte reader and random layouts built from fuzz input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "layout/layout.hpp"

namespace fz {

// Reads values from the fuzz input; past its end everything reads as 0.
struct Bytes {
  const uint8_t *p;
  size_t n;
  uint64_t u64() {
    uint64_t v = 0;
    size_t k = n < 8 ? n : 8;
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  int range(int lo, int hi) { return lo + u8() % (hi - lo + 1); }  // [lo, hi]
};

[[noreturn]] inline void die(const char *what) {
  std::fprintf(stderr, "invariant violated: %s\n", what);
  std::abort();
}
#define FZ_CHECK(c)            \
  do {                         \
    if (!(c)) fz::die(#c);     \
  } while (0)

// A small random mesh (1-3 dims, extents 1-4) with ranks 0..size-1 or a permutation of them.
inline std::shared_ptr<const lm::Grid> random_grid(Bytes &b) {
  int nd = b.range(1, 3);
  lm::Shape s;
  int64_t size = 1;
  for (int i = 0; i < nd; ++i) {
    s.push_back(b.range(1, 4));
    size *= s.back();
  }
  std::vector<int> ranks;
  if (b.u8() & 1) {  // a permutation of 0..size-1, offset
    int off = b.range(0, 3);
    for (int64_t i = 0; i < size; ++i) ranks.push_back(static_cast<int>(i) + off);
    for (int64_t i = size - 1; i > 0; --i) std::swap(ranks[i], ranks[b.u8() % (i + 1)]);
  }
  return std::make_shared<lm::Grid>(s, ranks);
}

// Random placements for `mesh_ndim` dims of a `ndim`-d tensor; valid unless `raw` (then any ints).
inline std::vector<lm_placement_t> random_placements(Bytes &b, int mesh_ndim, int ndim, bool raw,
                                                     int partial_op) {
  std::vector<lm_placement_t> pl(static_cast<size_t>(mesh_ndim));
  for (auto &p : pl) {
    if (raw) {
      p = {static_cast<int32_t>(b.u8()) - 1, static_cast<int32_t>(b.u8()) - 2,
           static_cast<int32_t>(b.u8()) - 1, static_cast<int32_t>(b.u8()) - 1,
           static_cast<int32_t>(b.u8() % 4) - 1, static_cast<int32_t>(b.u8() % 4) - 1,
           static_cast<int32_t>(b.u8() % 4) - 1, static_cast<int32_t>(b.u8() % 3) - 1};
      continue;
    }
    int k = b.range(0, 2);
    if (k == 1 && ndim > 0)
      p = {LM_SHARD, b.range(0, ndim - 1), b.range(0, 2), 0, 0, 0, 0, 0};
    else if (k == 2)
      p = LM_PLACEMENT_PARTIAL(partial_op);
    else
      p = {LM_REPLICATE, 0, 0, 0, 0, 0, 0, 0};
  }
  return pl;
}

inline lm::Shape random_shape(Bytes &b, int ndim) {
  lm::Shape g;
  for (int i = 0; i < ndim; ++i) g.push_back(b.range(0, 13));
  return g;
}

inline int64_t volume(const lm::Box &x) {
  int64_t v = 1;
  for (int64_t l : x.len) v *= l;
  return v;
}

}  // namespace fz
