// SPDX-License-Identifier: BSD-3-Clause
// lm_local_map's driver: unwrap dist inputs (resharding them when asked), call the user function
// on local views, agree on failure across the mesh, wrap tensor outputs as dist tensors; with
// options (lm_local_map_ex), check gradient placements and make the call's record
// (localmap/record.hpp).
#pragma once

#include "localmap.h"

namespace lm {
void local_map(lm_local_fn_t fn, void *user_data, int nin, const lm_arg_t *inputs,
               const lm_placement_t *const *in_placements, int nout,
               const lm_placement_t *const *out_placements, const int64_t *const *out_shapes,
               lm_mesh_t mesh, unsigned flags, const lm_local_map_options_t *options,
               lm_arg_t *outputs);
}  // namespace lm
