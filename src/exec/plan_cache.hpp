// SPDX-License-Identifier: BSD-3-Clause
// The plan cache of lm_dist_tensor_reshard within one mesh: up to 64 plans per mesh, keyed by the
// source layout, the target placements, the dtype and host/device, least recently used out first. Entries die with their mesh
// (a mesh destroy hook, mesh/mesh.hpp). Thread-safe: distinct meshes may be used from distinct
// threads; one mesh is used by one thread at a time (the header's rule), so a cached plan is never
// executed by two threads at once.
#pragma once

#include <memory>

#include "exec/plan.hpp"
#include "mesh/mesh.hpp"
#include "transport/transport.hpp"

namespace lm {

// A cached plan, its target layout and, for a host plan, the exchange fused with its mesh's
// agreement round (the board exchange, transport/select.hpp), decided at its first blocking
// execution.
struct CachedPlan {
  std::shared_ptr<Plan> plan;
  Layout dst;
  std::unique_ptr<FusedExchange> fused;
  bool fused_decided = false;
};

// The cached plan of src -> the target placements pl on mesh m, or NULL when none is cached.
// A hit needs no allocation: the key is built on the stack, and the target layout (which the
// placements determine on m) comes with the entry, already checked.
std::shared_ptr<CachedPlan> cached_plan_find(lm_mesh_s *m, const Layout &src,
                                             const lm_placement_t *pl, DLDataType dtype,
                                             bool device);
// Builds and caches the plan of src -> dst on mesh m (dst: a checked layout of m).
std::shared_ptr<CachedPlan> cached_plan_add(lm_mesh_s *m, const Layout &src, const Layout &dst,
                                            DLDataType dtype, bool device);

// The fused exchange of a cached host plan of mesh m, or NULL; decided once per entry from the
// plan and the mesh's agreed settings alone (as lm_reshard_plan_execute decides its own).
FusedExchange *cached_fused_exchange(CachedPlan &c, lm_mesh_s *m);

}  // namespace lm
