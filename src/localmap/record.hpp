// SPDX-License-Identifier: BSD-3-Clause
// The record of one lm_local_map_ex call (the object behind lm_local_map_record_t): what its
// backward pass needs. For each dist input: its own mesh, placements and global shape, the
// placements fn saw and those of their gradient; for each dist output: its placements (the
// gradient's come from placements_adjoint when asked). Built by local_map.cpp once the call has
// succeeded; everything here is local except record_input_grad (a reshard).
#pragma once

#include <vector>

#include "layout/layout.hpp"
#include "localmap.h"
#include "mesh/mesh.hpp"

namespace lm {
constexpr uint32_t kRecordMagic = 0x524c4d4cu;  // "LMLR"
}  // namespace lm

struct lm_local_map_record_s {
  struct Input {
    lm_mesh_s *own_mesh = nullptr;           // retained; nullptr: inputs[i] was not a dist tensor
    std::vector<lm_placement_t> own, seen, grad;
    lm::Shape gshape;
  };
  uint32_t magic = lm::kRecordMagic;
  std::vector<Input> in;
  std::vector<std::vector<lm_placement_t>> out;  // empty: outputs[j] is not a dist tensor
  // The extents of every ragged placement above: their ids stay valid while the record lives.
  std::vector<std::shared_ptr<const lm::Extents>> keep;
  ~lm_local_map_record_s();
};

namespace lm {
lm_local_map_record_s *record_check(lm_local_map_record_t h, const char *what);
lm_local_map_record_t record_wrap(lm_local_map_record_s *r);  // deletes r on failure
// Fills r->keep from the ragged placements of r's inputs and outputs.
void record_keep_extents(lm_local_map_record_s *r);
void record_destroy_handle(lm_local_map_record_t *h, const char *what);
// lm_local_map_record_placements: copies (capacity permitting) and sets *n.
void record_placements(const lm_local_map_record_s *r, int which, int index, int capacity,
                       lm_placement_t *placements, int *n, const char *fn);
// lm_local_map_record_input_grad: grad resharded to inputs[index]'s mesh and the adjoint of its
// own placements (a new reference).
lm_dist_tensor_s *record_input_grad(const lm_local_map_record_s *r, int index,
                                    lm_dist_tensor_s *grad, const char *fn);
}  // namespace lm
