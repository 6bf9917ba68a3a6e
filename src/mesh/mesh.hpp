// SPDX-License-Identifier: BSD-3-Clause
// The mesh: an N-D grid of MPI ranks with private communicators (a dup of the parent, the mesh,
// one per mesh dim), all with MPI_ERRORS_RETURN.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "common/error.hpp"
#include "common/mpi.hpp"
#include "layout/layout.hpp"
#include "localmap.h"

namespace lm {
struct MeshDevice;  // mesh/device.hpp

constexpr uint32_t kMeshMagic = 0x534d4d4cu;  // "LMMS"
constexpr uint32_t kDeadMagic = 0xdeadbeefu;

}  // namespace lm

struct lm_mesh_s {
  uint32_t magic = lm::kMeshMagic;
  std::atomic<int> refs{1};  // holders: owned handles (one each), tensors, plans
  // The handle lm_dist_tensor_mesh and lm_local_map's fn get: the creator's while it lives, else a
  // borrowed one made on demand (killed with the object). See core/handle.hpp.
  std::atomic<uint64_t> handle{0};

  MPI_Comm world = MPI_COMM_NULL;  // private dup of the parent
  int world_rank = -1, world_size = 0;
  std::shared_ptr<const lm::Grid> grid;
  std::vector<std::string> names;
  bool member = false;
  int64_t index = -1;  // row-major index in the mesh
  lm::Shape coord;     // this rank's coordinate (members)
  MPI_Comm comm = MPI_COMM_NULL;          // all mesh ranks
  std::vector<MPI_Comm> dim_comms;        // one per mesh dim (members)

  // Agreement (docs/DESIGN.md, "Meshes and agreement"): an id every rank agreed at creation
  // (for fingerprints), the agreement channels of the parent's processes and of the members
  // (shared with every mesh over the same processes, or, with MPI_THREAD_MULTIPLE, the mesh's own:
  // then listed in own_agree and freed with it), the check level and deadline (agreed: the
  // highest any rank asked for). local_id: unique in this process, for process-local maps (plan
  // cache, pairs of meshes), since agreed ids of meshes made concurrently may coincide.
  uint64_t id = 0;
  uint64_t local_id = 0;
  lm::AgreeComm *agree_parent = nullptr;
  lm::AgreeComm *agree_members = nullptr;
  std::vector<lm::AgreeComm *> own_agree;
  // With private channels: the channel of each cross-mesh union with a mesh of larger local_id.
  std::map<uint64_t, lm::AgreeComm *> union_agree;
  int check_level = 1;
  double timeout = 0;

  bool broken = false;
  std::string broken_why;
  bool in_flight = false;  // a nonblocking reshard runs on this mesh's communicators

  // Device state of this rank (stream, allocator, transport, NCCL comm): mesh/device.hpp.
  std::shared_ptr<lm::MeshDevice> dev;

  int ndim() const { return grid->ndim(); }
  ~lm_mesh_s();
};

namespace lm {

// Collective over the parent; every check, `out` included, is agreed so no rank is left waiting.
lm_mesh_s *mesh_create(lm_mesh_t *out, int parent_comm_f, int ndim, const int64_t *shape,
                       const lm_mesh_config_t *config);
// lm_mesh_create_grid: the 2-D mesh of a process grid from every rank's (myrow, mycol).
lm_mesh_s *mesh_create_grid(lm_mesh_t *out, int parent_comm_f, int myrow, int mycol,
                            const lm_mesh_config_t *config);
// Handles (core/handle.hpp). mesh_check unwraps a caller's handle into its object; a NULL,
// destroyed, borrowed-and-dead or foreign handle throws LM_ERR_INVALID_ARGUMENT naming `what`.
// Only the C boundary calls it: below it, code passes objects.
lm_mesh_s *mesh_check(lm_mesh_t h, const char *what);
// A new owned handle for `m`, taking over one reference of the caller (released on failure).
lm_mesh_t mesh_wrap(lm_mesh_s *m);
// The handle to give out for an object the caller does not own (lm_dist_tensor_mesh, fn's mesh):
// the creator's handle while it lives, else a borrowed one valid while the object lives.
lm_mesh_t mesh_borrow(lm_mesh_s *m);
// lm_mesh_destroy: drops one caller reference of an owned handle; refuses dead and borrowed ones.
void mesh_destroy_handle(lm_mesh_t *h, const char *what);
// Refuses broken meshes and meshes with a nonblocking reshard in flight (an object, not a handle).
lm_mesh_s *mesh_check_usable(lm_mesh_s *m, const char *what);
// Throws LM_ERR_INTERNAL when `p` is a handle where an object is expected (a missed unwrap).
void expect_object(const void *p, const char *what);
void mesh_retain(lm_mesh_s *m);
void mesh_release(lm_mesh_s *m);
// Makes the mesh's ranks agree on a local outcome (collective over the mesh, one small
// allreduce): rethrows `local` on the ranks where it failed (status != LM_SUCCESS), and throws
// LM_ERR_REMOTE "<what>: rank R (mesh rank M) failed; this rank did not" on the others.
void mesh_agree(lm_mesh_s *m, lm_status_t local, const std::string &err, const char *what);  // throws agreed errors
// Marks the mesh (and m2, when given: the other mesh of a cross-mesh call) broken after a
// transport failure (LM_ERR_MPI, LM_ERR_NCCL, LM_ERR_TIMEOUT, LM_ERR_REMOTE) and rethrows e.
[[noreturn]] void mesh_break(lm_mesh_s *m, const Error &e, lm_mesh_s *m2 = nullptr);
// Calls `hook` with a mesh's id whenever a mesh object dies, for state kept by layers above the
// mesh (the plan cache, exec/plan_cache.hpp). At most a few hooks per process.
void mesh_on_destroy(void (*hook)(uint64_t id));

}  // namespace lm
