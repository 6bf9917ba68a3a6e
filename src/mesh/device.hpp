// SPDX-License-Identifier: BSD-3-Clause
// The device state of a mesh on this rank: its device memory context (mem/device.hpp: the stream
// and allocator of lm_mesh_set_device_config, pinned staging), the transport its ranks chose for
// device data (NCCL or host staging) and its device communicator (an opaque handle made and
// released through transport/select.hpp), and the same for each pair of meshes that moved device
// data between them (cross-mesh reshards: one communicator over the union of both meshes' ranks).
// Failures here break the mesh (or both meshes of a pair).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mem/device.hpp"
#include "mesh/mesh.hpp"

namespace lm {

struct DeviceComm;  // transport/select.hpp: opaque here

// A pair of meshes' device state: kept by the mesh of the smaller local id, keyed by the other's.
struct PairDevice {
  int transport = LM_TRANSPORT_UNDECIDED;
  std::string transport_why;
  MPI_Comm comm = MPI_COMM_NULL;  // the union of both meshes' ranks (MPI_Comm_create_group)
  int rank = -1, size = 0;        // this rank in the union, the union's size
  std::vector<int> map;           // parent rank -> rank in the union (-1: in neither mesh)
  DeviceComm *device_comm = nullptr;  // NULL until first used
  PairDevice() = default;
  PairDevice(const PairDevice &) = delete;
  PairDevice &operator=(const PairDevice &) = delete;
  ~PairDevice();
};

struct MeshDevice {
  DeviceMem mem;
  int transport = LM_TRANSPORT_UNDECIDED;
  std::string transport_why;  // one line: why this transport (for messages and docs)
  DeviceComm *device_comm = nullptr;  // of the mesh's ranks; NULL until first used
  // Cross-mesh: one entry per other mesh (its local id) with a larger local id that this mesh moved
  // device data with. Lives as long as this mesh (local ids are never reused).
  std::map<uint64_t, std::unique_ptr<PairDevice>> pairs;
  MeshDevice() = default;
  MeshDevice(const MeshDevice &) = delete;
  MeshDevice &operator=(const MeshDevice &) = delete;
  ~MeshDevice();
};

// The mesh's device state (created on first use).
MeshDevice &mesh_device(lm_mesh_s *m);
inline DeviceMem &mesh_mem(lm_mesh_s *m) { return mesh_device(m).mem; }

// The transport of device data on `m`, chosen on first use (collective over the mesh members:
// transport/select.hpp, choose_device_transport).
int device_transport(lm_mesh_s *m, int device_id);
// The mesh's device communicator on device_id, created on first use (collective over the
// members). Any failure on any rank breaks the mesh and throws LM_ERR_NCCL everywhere.
DeviceComm *mesh_device_comm(lm_mesh_s *m, int device_id);
// The pair's device state and, when it chose NCCL, its communicator: created on first use,
// collective over the union of both meshes' ranks (every rank of either mesh calls it in the same
// order; ranks of neither never do). parent: the transfers' communicator (parent ranks).
PairDevice &pair_device(lm_mesh_s *sm, lm_mesh_s *dm, MPI_Comm parent, int device_id);
DeviceComm *pair_device_comm(PairDevice &p, lm_mesh_s *sm, lm_mesh_s *dm, int device_id);
// Agrees a local outcome over the union of two meshes' ranks (the pair's communicator; nothing to
// agree when no pair exists): rethrows `local` where it failed, LM_ERR_REMOTE naming the first
// failed rank on the others. Both meshes break on an MPI error.
void pair_agree(lm_mesh_s *sm, lm_mesh_s *dm, lm_status_t local, const std::string &err,
                const char *what);
// stage_to_host (dev NULL: returns NULL) whose failure the members of `agree` (NULL: nobody)
// agree on before any data moves (mesh_agree), so no rank waits for a failed one.
void *stage_to_host_agreed(lm_mesh_s *agree, lm_mesh_s *m, const void *dev, size_t bytes);

}  // namespace lm
