// SPDX-License-Identifier: BSD-3-Clause
// The plan cache of lm_dist_tensor_reshard within one mesh: up to 64 plans per mesh, keyed by both
// layouts, the dtype and host/device, least recently used out first. Entries die with their mesh
// (a mesh destroy hook, mesh/mesh.hpp). Thread-safe: distinct meshes may be used from distinct
// threads; one mesh is used by one thread at a time (the header's rule), so a cached plan is never
// executed by two threads at once.
#pragma once

#include <memory>

#include "exec/plan.hpp"
#include "mesh/mesh.hpp"

namespace lm {

// The cached plan of src -> dst on mesh m (building and caching it when missing).
std::shared_ptr<Plan> cached_plan(lm_mesh_s *m, const Layout &src, const Layout &dst,
                                  DLDataType dtype, bool device);

}  // namespace lm
