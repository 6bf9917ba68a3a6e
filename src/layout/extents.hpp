// SPDX-License-Identifier: BSD-3-Clause
// The extents of ragged placements (LM_RAGGED): a process-wide registry of immutable offset
// arrays, named by small integer ids that live in lm_placement_t::op. Pure (no MPI).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace lm {

// The split of one tensor dim along one mesh dim: coordinate i holds [off[i], off[i + 1]).
struct Extents {
  int32_t id = 0;
  std::vector<int64_t> off;  // count + 1 offsets, off[0] = 0, nondecreasing

  int64_t count() const { return (int64_t)off.size() - 1; }
  int64_t total() const { return off.back(); }
  int64_t len(int64_t i) const { return off[(size_t)i + 1] - off[(size_t)i]; }
  // The indices whose (nonempty or empty) blocks lie across [lo, hi), hi > lo: [*first, *last],
  // found by binary search; false when none does. Empty blocks inside the span are included (the
  // caller skips them as it skips torch.chunk's empty trailing blocks).
  bool span(int64_t lo, int64_t hi, int64_t *first, int64_t *last) const;
  std::vector<int64_t> lengths() const;
};

// Registers `count` lengths (checked: each >= 0, the sum fits in int64; throws
// LM_ERR_INVALID_ARGUMENT naming `what`) and returns their id with one more user reference;
// equal lengths give the same id while it lives.
int32_t extents_register(const int64_t *lengths, int64_t count, const char *what);
// Registers lengths the library derived (no user reference: the id lives while a layout holds it).
std::shared_ptr<const Extents> extents_adopt(const std::vector<int64_t> &lengths);
// The extents of `id` while anything holds them, else null.
std::shared_ptr<const Extents> extents_find(int32_t id);
// Drops one user reference; false when `id` has none.
bool extents_release(int32_t id);

}  // namespace lm
