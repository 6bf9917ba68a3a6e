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

#include "core/error.hpp"
#include "layout/layout.hpp"
#include "localmap.h"
#include "mesh/agree.hpp"

namespace lm {
class Plan;
struct MeshDevice;  // device/device.hpp

constexpr uint32_t kMeshMagic = 0x534d4d4cu;  // "LMMS"
constexpr uint32_t kDeadMagic = 0xdeadbeefu;

// Throws LM_ERR_MPI ("<what>: <MPI error string>") when rc != MPI_SUCCESS.
void mpi_check(int rc, const char *what);
// MPI is initialised and not finalized: destructors may free MPI objects (after MPI_Finalize
// they must not: Python __del__ and Rust Drop run late).
bool mpi_alive();

}  // namespace lm

struct lm_mesh_s {
  uint32_t magic = lm::kMeshMagic;
  std::atomic<int> refs{1};

  MPI_Comm world = MPI_COMM_NULL;  // private dup of the parent
  int world_rank = -1, world_size = 0;
  std::shared_ptr<const lm::Grid> grid;
  std::vector<std::string> names;
  bool member = false;
  int64_t index = -1;  // row-major index in the mesh
  lm::Shape coord;     // this rank's coordinate (members)
  MPI_Comm comm = MPI_COMM_NULL;          // all mesh ranks
  std::vector<MPI_Comm> dim_comms;        // one per mesh dim (members)

  // Agreement (docs/DESIGN.md, "Failure model"): an id every rank agreed at creation, the
  // communicators shared with every mesh over the same processes (parent set; member set on
  // members), the check level and deadline (agreed: the highest any rank asked for).
  uint64_t id = 0;
  lm::AgreeComm *agree_parent = nullptr;
  lm::AgreeComm *agree_members = nullptr;
  int check_level = 1;
  double timeout = 0;

  bool broken = false;
  std::string broken_why;
  bool in_flight = false;  // a nonblocking reshard runs on this mesh's communicators

  // Plan cache of lm_dist_tensor_reshard for reshards within this mesh (not retained by plans):
  // key -> (plan, last use); the least recently used entry goes when it is full.
  std::map<std::string, std::pair<std::shared_ptr<lm::Plan>, uint64_t>> plan_cache;
  uint64_t plan_clock = 0;

  // Device state of this rank (stream, allocator, transport, NCCL comm): device/device.hpp.
  std::shared_ptr<lm::MeshDevice> dev;

  int ndim() const { return grid->ndim(); }
  ~lm_mesh_s();
};

namespace lm {

// Collective over the parent; every check, `out` included, is agreed so no rank is left waiting.
lm_mesh_s *mesh_create(lm_mesh_t *out, int parent_comm_f, int ndim, const int64_t *shape,
                       const lm_mesh_config_t *config);
// Validates a handle (magic) and returns it; throws LM_ERR_INVALID_ARGUMENT naming `what`.
lm_mesh_s *mesh_check(lm_mesh_t m, const char *what);
// Also refuses broken meshes and meshes with a nonblocking reshard in flight.
lm_mesh_s *mesh_check_usable(lm_mesh_t m, const char *what);
void mesh_retain(lm_mesh_s *m);
void mesh_release(lm_mesh_s *m);
// Makes the mesh's ranks agree on a local outcome (collective over the mesh, one small
// allreduce): rethrows `local` on the ranks where it failed (status != LM_SUCCESS), and throws
// LM_ERR_REMOTE "<what>: rank R (mesh rank M) failed; this rank did not" on the others.
void mesh_agree(lm_mesh_s *m, lm_status_t local, const std::string &err, const char *what);
// Marks the mesh broken after a transport failure and rethrows.
[[noreturn]] void mesh_break(lm_mesh_s *m, const Error &e);

}  // namespace lm
