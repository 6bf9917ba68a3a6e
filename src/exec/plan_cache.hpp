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
#include "transport/transport.hpp"

namespace lm {

// A cached plan and, for a host plan, the exchange fused with its mesh's agreement round (the
// board exchange, transport/select.hpp), decided at its first blocking execution.
struct CachedPlan {
  std::shared_ptr<Plan> plan;
  std::unique_ptr<FusedExchange> fused;
  bool fused_decided = false;
};

// The cached plan of src -> dst on mesh m (building and caching it when missing).
std::shared_ptr<CachedPlan> cached_plan(lm_mesh_s *m, const Layout &src, const Layout &dst,
                                        DLDataType dtype, bool device);

// The fused exchange of a cached host plan of mesh m, or NULL; decided once per entry from the
// plan and the mesh's agreed settings alone (as lm_reshard_plan_execute decides its own).
FusedExchange *cached_fused_exchange(CachedPlan &c, lm_mesh_s *m);

}  // namespace lm
