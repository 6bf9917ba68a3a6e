// SPDX-License-Identifier: BSD-3-Clause
// The device (CUDA) side of localmap as the rest of the library sees it: no CUDA type crosses this
// header, so every module compiles with g++ in builds with and without CUDA. device.cpp implements
// it (with the CUDA runtime and NCCL under LM_WITH_CUDA, as refusals without).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "localmap.h"

struct lm_mesh_s;
struct lm_dist_tensor_s;

namespace lm {

class Plan;
struct Storage;

// True when the library was built with CUDA and NCCL.
bool cuda_built();
// Whether device plans can run on NCCL (device/nccl_transport.hpp behind the transport seam).
#ifdef LM_WITH_CUDA
constexpr bool kNcclExecutor = true;
#else
constexpr bool kNcclExecutor = false;
#endif
// CUDA devices visible to this process (0 without a build, a driver or a device). Cached.
int cuda_device_count();
// True for kDLCUDA (the only device type besides kDLCPU that tensors may live on).
bool is_device(DLDevice d);

// Checks a kDLCUDA device: built with CUDA, a device present, id in range; throws
// LM_ERR_NOT_SUPPORTED / LM_ERR_INVALID_ARGUMENT naming `what`.
void check_cuda_device(DLDevice d, const char *what);

// Checks that `p` (not NULL) is memory of CUDA device d.device_id (device or managed memory, by
// cudaPointerGetAttributes); throws LM_ERR_INVALID_ARGUMENT naming `what` otherwise: a host
// buffer labelled kDLCUDA is refused, not dereferenced on the device.
void check_device_pointer(const void *p, DLDevice d, const char *what);

// One NCCL communicator of this rank: over a mesh's ranks, or over the union of the ranks of two
// meshes (cross-mesh reshards). Created lazily, aborted (locally) when its owner goes.
struct NcclComm {
  void *comm = nullptr;    // ncclComm_t; NULL: not created yet, or aborted after an error
  int device = -1;         // the CUDA device it was created on
  void *stream = nullptr;  // the stream NCCL work was last enqueued on
  bool used = false;
  // Lets enqueued work finish (peers may wait for it), at most LM_NCCL_TIMEOUT, then aborts.
  void release();
};

// The device state of a pair of meshes (device.cpp): the transport the union of their ranks
// chose and its communicators. Kept by the mesh of the smaller id, keyed by the other's id.
struct PairDevice;

// Per-mesh, per-rank device state: the options of lm_mesh_set_device_config, the transport
// chosen for device data, lazily created NCCL communicators, pinned staging buffers.
struct MeshDevice {
  lm_device_config_t config{};
  int transport = LM_TRANSPORT_UNDECIDED;
  std::string transport_why;  // one line: why this transport (for messages and docs)
  NcclComm nccl;              // of the mesh's ranks
  // Cross-mesh: one entry per other mesh (its id) with a larger id, i.e. created later, that this
  // mesh moved device data with. Lives as long as this mesh (ids are never reused).
  std::map<uint64_t, std::unique_ptr<PairDevice>> pairs;
  struct Pinned {
    void *ptr = nullptr;
    size_t cap = 0;
    void *event = nullptr;  // cudaEvent_t recorded after the last device use
  };
  std::vector<Pinned> pinned;  // staging buffers, reused once their event completed
  MeshDevice();
  ~MeshDevice();
};

// The mesh's device state (created on first use).
MeshDevice &mesh_device(lm_mesh_s *m);

// Device storage of `bytes` on `device` from the mesh's allocator, in the mesh's stream order;
// zeroed (cudaMemsetAsync) when `zero`.
std::shared_ptr<Storage> device_storage_alloc(lm_mesh_s *m, DLDevice device, size_t bytes,
                                              bool zero);
// Copies `bytes` device->device in the mesh's stream order.
void device_copy_d2d(lm_mesh_s *m, void *dst, const void *src, size_t bytes);

// Chooses the transport of device data on `m` if not done yet (collective over the mesh members:
// one allgather of host name + PCI bus id of `device_id`); returns it.
int device_transport(lm_mesh_s *m, int device_id);

// The mesh's NCCL communicator on `device_id`, created on first use (collective over the mesh
// members): ncclGetUniqueId on mesh rank 0, MPI_Bcast on the mesh's communicator, non-blocking
// ncclCommInitRankConfig polled with ncclCommGetAsyncError until done or LM_NCCL_TIMEOUT seconds
// (default 300). Any failure on any rank: ncclCommAbort, the mesh is marked broken and EVERY rank
// throws LM_ERR_NCCL (one small allreduce agrees). Returns an ncclComm_t.
void *nccl_comm(lm_mesh_s *m, int device_id);
// Checks a communicator's asynchronous state after work was posted; on error aborts it, marks the
// mesh broken (m2 too, when given: a pair's communicator) and throws LM_ERR_NCCL (local: the
// peers see the same error from their own comm). Nothing to check when c.comm is NULL.
void nccl_check_async(NcclComm &c, lm_mesh_s *m, lm_mesh_s *m2, const char *what);
// Seconds of LM_NCCL_TIMEOUT (default 300; 0 = poll once).
double nccl_timeout_seconds();

// Makes CUDA device `dev` current for a scope (kernels and NCCL calls go to the current device)
// and restores the caller's; does nothing in builds without CUDA.
class CurrentDevice {
 public:
  explicit CurrentDevice(int dev);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice &) = delete;
  CurrentDevice &operator=(const CurrentDevice &) = delete;

 private:
  int prev_ = -1;
};

// Runs a reshard plan on device tensors (src data `in` on the source mesh, `out` on the target's)
// through the mesh's transport: host staging today, NCCL when it is chosen. Blocking in the
// library's sense: returns once the device work is enqueued. in/out may be NULL where this rank
// has no part. in_bytes / out_bytes: this rank's shard sizes.
void device_run_plan(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, const void *in,
                     size_t in_bytes, void *out, size_t out_bytes, int device_id);

// Host staging of device shards (pinned, from the mesh's pool): copies `bytes` of device memory
// into a host buffer and waits for the mesh's stream; returns the host buffer, valid until
// stage_release. For the host-only functions (gather) and the staged transport.
void *stage_to_host(lm_mesh_s *m, const void *dev, size_t bytes);
// stage_to_host (dev NULL: returns NULL) whose failure the members of `agree` (NULL: nobody)
// agree on before any data moves (mesh_agree), so no rank waits for a failed one.
void *stage_to_host_agreed(lm_mesh_s *agree, lm_mesh_s *m, const void *dev, size_t bytes);
// A pinned host buffer of `bytes` (not filled).
void *stage_host_buffer(lm_mesh_s *m, size_t bytes);
// Enqueues host -> device of `bytes` on the mesh's stream, then marks `host` reusable once done.
void stage_to_device(lm_mesh_s *m, void *dev, void *host, size_t bytes);
// Marks a staging buffer reusable at once (no device work pending on it).
void stage_release(lm_mesh_s *m, void *host);

// Prepares `plan` to run on device memory through NCCL when NCCL is chosen; returns false
// otherwise (then stage). Same mesh: the mesh's transport and communicator. Across meshes: the
// pair's, over the union of both meshes' ranks (an MPI communicator of that union made with
// MPI_Comm_create_group, the same shared-GPU check over it, a communicator of its own). Collective
// the first time over the mesh, or over the union (every rank of either mesh calls it).
bool device_plan_on_nccl(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, int device_id);
// Orders a cross-mesh NCCL plan's stream against the source mesh's stream on ranks of both meshes
// whose two streams differ (the plan runs on the target mesh's stream): before = true, the plan
// stream waits for the source stream (the source shard is ready); false, after the plan's work
// was enqueued, the source stream waits for the plan stream (the source may then be freed in its
// own stream's order). Events only, never a host wait. Nothing to do in every other case.
void device_plan_join_streams(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, bool before);
// A plan about to run on host memory gets back the host transport if a device run replaced it.
void plan_use_host_transport(Plan &plan);

// Nonblocking staged plans: the state a request keeps between start and completion.
struct DeviceRequest {
  lm_mesh_s *src_mesh = nullptr, *dst_mesh = nullptr;
  void *host_in = nullptr, *host_out = nullptr;
  void *dev_out = nullptr;
  size_t out_bytes = 0;
};
// Stages src to host and returns the host pointers the host plan runs on.
std::unique_ptr<DeviceRequest> device_plan_begin(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh,
                                                 const void *in, size_t in_bytes, void *out,
                                                 size_t out_bytes);
// After the host plan completed: enqueues the copy back to the device.
void device_plan_finish(DeviceRequest &r);
// On failure: gives the staging buffers back.
void device_plan_abandon(DeviceRequest &r);

// Messages of the CUDA runtime / NCCL (for errors): "<what>: <call> failed: <string>".
[[noreturn]] void cuda_fail(int err, const char *what);

}  // namespace lm
