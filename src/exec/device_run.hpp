// SPDX-License-Identifier: BSD-3-Clause
// Plans on device tensors. The meshes' device transport (mesh/device.hpp) decides the route:
//   - NCCL: the plan runs on device memory through the NCCL transport and device memory
//     operations (transport/select.hpp), enqueued on a mesh's stream. Same mesh: the mesh's
//     communicator and stream. Across meshes: the pair's communicator over the union of both
//     meshes' ranks, on the target mesh's stream where this rank has a target shard (its consumers
//     order on that stream), else the source's; events order it against the source stream;
//   - host-staged: the plan runs on pinned host copies over MPI; staging failures are agreed
//     before any data moves (over the mesh, or the pair's union across meshes).
#pragma once

#include <cstddef>
#include <memory>

#include "exec/plan.hpp"
#include "mesh/mesh.hpp"

namespace lm {

// Runs `plan` on device tensors (src data `in` on the source mesh, `out` on the target's).
// Blocking in the library's sense: returns once the device work is enqueued. in/out may be NULL
// where this rank has no part; in_bytes / out_bytes: this rank's shard sizes. Collective the
// first time (transport choice, communicator creation).
void device_run_plan(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, const void *in,
                     size_t in_bytes, void *out, size_t out_bytes, int device_id);

// The NCCL route of plans on communicator `comm` between src_mesh and dst_mesh (the same mesh or
// not) on device_id, into *spec: false when these meshes' device data is staged through host.
// Collective the first time (transport choice, communicator creation). A cross-mesh route runs on
// the target mesh's stream where this rank has a target shard, else the source's.
bool device_nccl_spec(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, MPI_Comm comm, int device_id,
                      TransportSpec *spec);
// Orders a cross-mesh NCCL route's stream against the source mesh's stream, on ranks of both
// meshes: before (the route waits for the source shard) and after (the source stream waits for
// the route's reads, so the source may be freed in its own stream's order). Same mesh: nothing.
void device_join_streams(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, bool before);

// Nonblocking device plans: device_plan_start starts `plan` (on NCCL: enqueued on the plan's
// stream; staged: the host plan runs on pinned copies) and returns what its request keeps until
// completion; device_plan_finish runs after the plan completed (the source stream waits for the
// plan's reads, or the staged result is copied back to the device); device_plan_abandon gives
// staging back after a failure. The caller makes the device current around progress calls.
struct DeviceRequest {
  lm_mesh_s *src_mesh = nullptr, *dst_mesh = nullptr;
  bool nccl = false;
  void *host_in = nullptr, *host_out = nullptr;  // staged
  void *dev_out = nullptr;
  size_t out_bytes = 0;
};
std::unique_ptr<DeviceRequest> device_plan_start(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh,
                                                 Plan &plan, const void *in, size_t in_bytes,
                                                 void *out, size_t out_bytes, int device_id);
void device_plan_finish(DeviceRequest &r, Plan &plan);
void device_plan_abandon(DeviceRequest &r);

}  // namespace lm
