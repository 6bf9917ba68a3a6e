// SPDX-License-Identifier: BSD-3-Clause
// The plan cache of lm_dist_tensor_reshard: up to 64 plans per source mesh, keyed by the target
// mesh, the source layout, the target placements, the dtype and host/device, least recently used
// out first. Entries die with either mesh (a mesh destroy hook, mesh/mesh.hpp). Thread-safe: distinct meshes may be used from distinct
// threads; one mesh is used by one thread at a time (the header's rule), so a cached plan is never
// executed by two threads at once.
#pragma once

#include <memory>

#include "exec/plan.hpp"
#include "mesh/mesh.hpp"

namespace lm {

// A cached plan and its target layout.
struct CachedPlan {
  std::shared_ptr<Plan> plan;
  Layout dst;
};

// The cached plan of src (on mesh sm) -> the target placements pl on mesh dm (sm itself, or
// another mesh), or NULL when none is cached. A hit needs no allocation: the key is built on the
// stack, and the target layout (which the placements determine on dm) comes with the entry,
// already checked.
std::shared_ptr<CachedPlan> cached_plan_find(lm_mesh_s *sm, lm_mesh_s *dm, const Layout &src,
                                             const lm_placement_t *pl, DLDataType dtype,
                                             bool device);
// Builds and caches the plan of src (on sm) -> dst (a checked layout of dm), its transfers on
// comm (the meshes' transfer communicator); the entry dies with either mesh.
std::shared_ptr<CachedPlan> cached_plan_add(lm_mesh_s *sm, lm_mesh_s *dm, const Layout &src,
                                            const Layout &dst, DLDataType dtype, bool device,
                                            MPI_Comm comm);

// How many plans are cached with the source mesh of local id `mesh_id` (tests, diagnostics).
size_t cached_plans(uint64_t mesh_id);

}  // namespace lm
