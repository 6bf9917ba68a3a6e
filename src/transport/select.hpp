// SPDX-License-Identifier: BSD-3-Clause
// The one place that chooses how a plan's bytes travel (docs/DESIGN.md, "Adding a transport"):
//   - select_route: the wire (Transport) and the memory operations (MemOps) of a plan's
//     executions, from what the executor knows: where the data lives (host, or a device with a
//     device communicator and a stream: select_device_spec) and the plan's communicator. Host
//     data goes over MPI, whose node-local provider (transport/node/) serves peers on this node;
//     device data over NCCL;
//   - choose_device_transport: whether device data of a set of ranks can go over NCCL (every rank
//     has its own GPU) or is staged through host memory, and why;
//   - device_comm_*: the device communicators (NCCL's) that meshes keep as opaque handles;
//   - select_fused_exchange: whether a blocking execution can move its data inside its agreement
//     round (the board exchange);
//   - select_node_local_route: whether one host message takes the node-local path (the rule the
//     MPI transport applies, for those that report routes: lm_reshard_plan_info).
// Nothing outside src/transport/ names a transport type.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mem/ops.hpp"
#include "transport/transport.hpp"

namespace lm {

struct AgreeComm;
struct DeviceComm;
struct Schedule;

// What a plan's executions run on.
struct TransportSpec {
  enum Kind { kHost, kNccl } kind = kHost;
  MPI_Comm comm = MPI_COMM_NULL;   // the plan's communicator (parent ranks)
  DeviceComm *device_comm = nullptr;  // kNccl: the communicator (the mesh's or the pair's)
  void *stream = nullptr;          // kNccl: the cudaStream_t all the plan's work is ordered on
  int device = -1;                 // kNccl: the CUDA device
  std::vector<int> peer_map;       // kNccl: parent rank -> NCCL rank (-1: none)
  // The same route (a plan keeps its transport while this holds).
  bool same(const TransportSpec &o) const;
};

struct Route {
  std::unique_ptr<Transport> wire;
  std::unique_ptr<MemOps> mem;
};
Route select_route(const TransportSpec &spec);

// The route of a device plan: over the device communicator dc (the mesh's, or the pair's for a
// cross-mesh plan), all its work ordered on `stream` (cudaStream_t) of `device`; comm: the plan's
// communicator; peer_map[parent rank] = rank in dc (-1: none).
TransportSpec select_device_spec(MPI_Comm comm, DeviceComm *dc, void *stream, int device,
                                 std::vector<int> peer_map);

// A communicator for device data (today NCCL's, transport/nccl/comm.hpp), held by its owner (a
// mesh, or a pair of meshes: mesh/device.hpp) as an opaque handle, made on first use and released
// when the owner goes.
//   device_comm_ready: whether dc holds a communicator (false: NULL, not made yet, or aborted
//     after an error); LM_ERR_INVALID_ARGUMENT when it lives on another device than device_id
//     (whose: "the mesh's", for the message).
//   device_comm_create: makes *dc's communicator (allocating *dc when NULL) over the n ranks of c,
//     this rank being `rank`, on device_id; collective over c. Any failure on any rank throws
//     LM_ERR_NCCL everywhere (LM_ERR_MPI for the bootstrap's MPI calls, LM_ERR_NOT_SUPPORTED in a
//     build without NCCL); the caller breaks its meshes.
//   device_comm_destroy: releases *dc and sets it NULL. Local and immediate (a mesh destroy never
//     waits for peers: the communicator retires in the background); NULL-safe.
bool device_comm_ready(const DeviceComm *dc, int device_id, const char *whose);
void device_comm_create(DeviceComm **dc, MPI_Comm c, int n, int rank, int device_id);
void device_comm_destroy(DeviceComm **dc);

// LM_TRANSPORT_NCCL when every one of the n ranks of `c` has its own GPU (one allgather of host
// name and PCI bus id of device_id: NCCL refuses two ranks of a communicator on one GPU), else
// LM_TRANSPORT_MPI_STAGED; *why says why in one line. `who` names the ranks ("mesh ranks").
// Collective over c. LM_TRANSPORT=mpi forces staging.
int choose_device_transport(MPI_Comm c, int n, int device_id, const char *who, std::string *why);

// The exchange fused with the agreement round for this plan (a host plan of one exchange step
// within one mesh, small enough, whose agreement set `ac` has the board and outboxes: the board
// exchange; or agrees by messages: the message exchange), or NULL.
// Depends on the plan and agreed settings alone: every rank with the same plan decides alike.
// Across meshes (across_meshes: the plan's source and target meshes differ) only by messages and
// only an exchange of the plan's own messages (no traffic() of its own): what
// lm_reshard_plan_info reports without the union's set.
std::unique_ptr<FusedExchange> select_fused_exchange(const Schedule &s, MPI_Comm comm,
                                                     const AgreeComm *ac,
                                                     bool across_meshes = false);

// Whether a blocking host message of `bytes` to `peer` goes through the node-local provider
// rather than over MPI (node: the sorted node_peers of the plan's communicator, comm/node.hpp):
// the MPI transport's own rule (transport/node/node_local.hpp, takes_node_local).
bool select_node_local_route(const std::vector<int> &node, int peer, size_t bytes);

}  // namespace lm
