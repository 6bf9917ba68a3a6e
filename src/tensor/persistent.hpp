// SPDX-License-Identifier: BSD-3-Clause
// Persistent reshard plans and nonblocking requests (the objects behind lm_reshard_plan_t and
// lm_request_t).
#pragma once

#include "exec/device_run.hpp"
#include "exec/plan.hpp"
#include "tensor/tensor.hpp"

namespace lm {
constexpr uint32_t kPlanMagic = 0x4e504d4cu;     // "LMPN"
constexpr uint32_t kRequestMagic = 0x51524d4cu;  // "LMRQ"
}  // namespace lm

#include <vector>

struct lm_reshard_plan_s {
  uint32_t magic = lm::kPlanMagic;
  std::unique_ptr<lm::Plan> plan;
  lm_mesh_s *src_mesh = nullptr, *dst_mesh = nullptr;  // retained
  lm_request_s *in_flight = nullptr;
  lm::AgreeComm *agree = nullptr;  // where executions agree (found at the first one)
  ~lm_reshard_plan_s();
};

struct lm_reshard_group_s;

struct lm_request_s {
  uint32_t magic = lm::kRequestMagic;
  lm_reshard_plan_s *plan = nullptr;    // a plan's request (run: its plan or padded variant), or
  lm::Plan *run = nullptr;
  lm_reshard_group_s *group = nullptr;  // a group's (tensor/group.hpp)
  lm_dist_tensor_s *src = nullptr, *dst = nullptr;  // retained until completion
  std::vector<lm_dist_tensor_s *> tensors;           // a group's sources and targets, retained
  std::unique_ptr<lm::DeviceRequest> dev;            // device tensors: host staging in flight
  std::unique_ptr<lm::CompactShards> compact;        // padded shards' stand-ins (tensor.hpp)
  ~lm_request_s();
};

namespace lm {
// The arguments of lm_reshard_plan_create and lm_reshard_estimate, checked (errors name them):
// both meshes (dst NULL: src), the communicator a transfer between them uses, both layouts.
struct ReshardArgs {
  lm_mesh_s *sm = nullptr, *dm = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  Layout src, dst;
};
ReshardArgs check_reshard_args(lm_mesh_t src_mesh, const lm_placement_t *src_pl,
                               lm_mesh_t dst_mesh, const lm_placement_t *dst_pl, int ndim,
                               const int64_t *gshape, DLDataType dtype, const char *fn);
lm_reshard_plan_s *plan_create(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                               const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                               DLDataType dtype, const char *fn = "lm_reshard_plan_create");
// Checks src/dst against the plan: no request in flight, usable meshes, live handles, meshes,
// layouts, dtypes, memory kinds, no overlap (no allocation on success). plan_check_pair: the
// same without the plan's own state (request, meshes), which a group checks once for all its
// entries; it names the tensors "src[index]" and "dst[index]" (index >= 0) or "src" and "dst".
void plan_check_tensors(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                        const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso);
void plan_check_pair(const lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                     const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso, int index);
// lm_reshard_plan_adjoint: the backward plan of p, from the gradient placements of p's target
// (on its target mesh) to those of its source (on its source mesh); layout/layout.hpp,
// placements_adjoint, says which. Local, like plan_create.
lm_reshard_plan_s *plan_adjoint(lm_reshard_plan_s *p);
// Handles (core/handle.hpp): plan_check unwraps a caller's handle (the C boundary only);
// plan_wrap makes one (deleting the plan on failure); plan_destroy_handle is lm_reshard_plan_destroy.
lm_reshard_plan_s *plan_check(lm_reshard_plan_t p, const char *what);
lm_reshard_plan_t plan_wrap(lm_reshard_plan_s *p);
void plan_destroy_handle(lm_reshard_plan_t *h, const char *what);
lm_dist_tensor_s *plan_alloc_target(lm_reshard_plan_s *p, DLDevice device);
// Runs the plan to completion (no allocation).
void plan_execute(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst);
// Starts the plan; returns a request (NULL when this rank takes no part: already complete).
lm_request_s *plan_start(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                         const char *fn);
// Whether a blocking execution moves this plan's data inside its agreement round (the board
// exchange); decided once per plan, from the plan and the agreed settings alone.
bool plan_takes_board(lm_reshard_plan_s *p);
// The exchange a blocking execution of this same-mesh plan fuses with its agreement round (the
// board exchange; or the message exchange where its set agrees by messages, checking is on and no
// deadline is set), or NULL: what lm_reshard_plan_info asks for the traffic of a one-round
// all-reduce (FusedExchange::traffic).
FusedExchange *plan_fused(lm_reshard_plan_s *p);
// lm_reshard_plan_info (tensor/plan_info.cpp): `info` validated by the caller, filled here.
void plan_info(lm_reshard_plan_s *p, int flags, lm_reshard_plan_info_t *info);
// lm_reshard_estimate (tensor/plan_info.cpp): the same numbers from this rank's schedule alone,
// without a plan (`info` validated by the caller).
void reshard_estimate(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                      const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                      DLDataType dtype, int flags, lm_reshard_plan_info_t *info);
// Progress; true when complete (the request is then deleted).
bool request_progress(lm_request_s *r, bool block);
lm_request_s *request_check(lm_request_t r, const char *what);
lm_request_t request_wrap(lm_request_s *r);  // on failure: completes r (blocking) and deletes it
// Kills the handle *h (which request_check accepted) and deletes its request; *h = NULL.
void request_free_handle(lm_request_t *h, lm_request_s *r);
}  // namespace lm
