// SPDX-License-Identifier: BSD-3-Clause
// Device tensors, streams, allocators, staging and the transport choice (see device.hpp).
// Under LM_WITH_CUDA this file calls the CUDA runtime and NCCL; without, every entry that would
// need them refuses with LM_ERR_NOT_SUPPORTED, so the rest of the library is the same code.
#include "device/device.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.hpp"
#include "mesh/mesh.hpp"
#include "reshard/plan.hpp"
#include "tensor/tensor.hpp"
#include "transport/mpi.hpp"

#ifdef LM_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include "device/nccl_transport.hpp"
#endif

namespace lm {

struct PairDevice {
  int transport = LM_TRANSPORT_UNDECIDED;
  std::string transport_why;
  MPI_Comm comm = MPI_COMM_NULL;  // the union of both meshes' ranks (MPI_Comm_create_group)
  int rank = -1, size = 0;        // this rank in the union, the union's size
  std::vector<int> map;           // parent rank -> rank in the union (-1: in neither mesh)
  NcclComm nccl;
  ~PairDevice() {
    nccl.release();
    if (comm != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm);
  }
};

bool is_device(DLDevice d) { return enum_bits(d.device_type) == kDLCUDA; }

MeshDevice &mesh_device(lm_mesh_s *m) {
  if (!m->dev) m->dev = std::make_shared<MeshDevice>();
  return *m->dev;
}

MeshDevice::MeshDevice() {
  config.size = sizeof config;
  config.magic = LM_DEVICE_CONFIG_MAGIC;
  config.version = LM_DEVICE_CONFIG_VERSION;
}

#ifdef LM_WITH_CUDA

bool cuda_built() { return true; }

[[noreturn]] void cuda_fail(int err, const char *what) {
  cudaGetLastError();  // clear the sticky-free error state of the runtime
  fail(LM_ERR_CUDA, "%s failed: %s (%s) on rank %d", what,
       cudaGetErrorString(static_cast<cudaError_t>(err)),
       cudaGetErrorName(static_cast<cudaError_t>(err)), world_rank_or_minus1());
}

#define LM_CUDA(call, what)                          \
  do {                                               \
    cudaError_t lm_rc_ = (call);                     \
    if (lm_rc_ != cudaSuccess) cuda_fail(lm_rc_, what); \
  } while (0)

static std::string g_count_why;

int cuda_device_count() {
  static const int count = [] {  // once per process, thread-safe
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {  // no driver / no device: a CUDA build on a CPU machine
      g_count_why = strfmt("cudaGetDeviceCount: %s", cudaGetErrorString(rc));
      cudaGetLastError();
      n = 0;
    } else if (n == 0) {
      g_count_why = "cudaGetDeviceCount found no device";
    }
    return n;
  }();
  return count;
}

void check_cuda_device(DLDevice d, const char *what) {
  int n = cuda_device_count();
  if (n == 0)
    fail(LM_ERR_NOT_SUPPORTED, "%s: kDLCUDA: no CUDA device is visible to rank %d (%s)", what,
         world_rank_or_minus1(), g_count_why.c_str());
  LM_CHECK_ARG(d.device_id >= 0 && d.device_id < n,
               "%s: kDLCUDA device_id %d is not a visible device [0, %d) on rank %d", what,
               d.device_id, n, world_rank_or_minus1());
}

void check_device_pointer(const void *p, DLDevice d, const char *what) {
  cudaPointerAttributes a{};
  cudaError_t rc = cudaPointerGetAttributes(&a, p);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is not CUDA memory (cudaPointerGetAttributes: %s) on "
         "rank %d", what, p, cudaGetErrorString(rc), world_rank_or_minus1());
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p is %s memory, not device memory of kDLCUDA device %d "
         "(rank %d)", what, p, a.type == cudaMemoryTypeHost ? "pinned host" : "host (unregistered)",
         d.device_id, world_rank_or_minus1());
  if (a.type == cudaMemoryTypeDevice && a.device != d.device_id)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %p lives on CUDA device %d, the DLDevice says %d (rank %d)",
         what, p, a.device, d.device_id, world_rank_or_minus1());
}

namespace {
// Makes `dev` the current device for a scope and restores the caller's.
struct DeviceGuard {
  int prev = -1;
  explicit DeviceGuard(int dev) {
    LM_CUDA(cudaGetDevice(&prev), "cudaGetDevice");
    if (prev != dev) LM_CUDA(cudaSetDevice(dev), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev && prev >= 0) cudaSetDevice(prev);
  }
};
cudaStream_t stream_of(lm_mesh_s *m) {
  return static_cast<cudaStream_t>(mesh_device(m).config.stream);
}
}  // namespace

std::shared_ptr<Storage> device_storage_alloc(lm_mesh_s *m, DLDevice device, size_t bytes,
                                              bool zero) {
  check_cuda_device(device, "device allocation");
  const lm_device_config_t cfg = mesh_device(m).config;
  cudaStream_t st = static_cast<cudaStream_t>(cfg.stream);
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  if (bytes == 0) return s;  // no memory: data stays NULL (a zero-size shard)
  DeviceGuard g(device.device_id);
  void *p = nullptr;
  if (cfg.alloc) {
    p = cfg.alloc(cfg.alloc_ctx, bytes, device.device_id, cfg.stream);
    if (!p)
      fail(LM_ERR_OUT_OF_MEMORY, "the mesh's device allocator returned NULL for %zu bytes on "
           "device %d (rank %d)", bytes, device.device_id, world_rank_or_minus1());
    lm_device_free_fn_t fr = cfg.free;
    void *ctx = cfg.alloc_ctx, *stream = cfg.stream;
    int id = device.device_id;
    s->free_fn = [fr, ctx, p, bytes, id, stream]() { fr(ctx, p, bytes, id, stream); };
  } else {
    cudaError_t rc = cudaMallocAsync(&p, bytes, st);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocAsync of %zu bytes on device %d failed (rank %d)",
           bytes, device.device_id, world_rank_or_minus1());
    }
    if (rc != cudaSuccess) cuda_fail(rc, "cudaMallocAsync");
    s->free_fn = [p, st]() {
      if (cudaFreeAsync(p, st) != cudaSuccess) cudaGetLastError();  // late frees: runtime gone
    };
  }
  s->data = p;
  s->device = true;
  if (zero) {
    cudaError_t rc = cudaMemsetAsync(p, 0, bytes, st);
    if (rc != cudaSuccess) cuda_fail(rc, "cudaMemsetAsync");  // s frees p
  }
  return s;
}

void device_copy_d2d(lm_mesh_s *m, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  LM_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(m)),
          "cudaMemcpyAsync (device to device)");
}

// ------------------------------------------------------------------------------ staging
void *stage_host_buffer(lm_mesh_s *m, size_t bytes) {
  MeshDevice &d = mesh_device(m);
  if (bytes == 0) bytes = 1;
  MeshDevice::Pinned *best = nullptr;
  for (auto &p : d.pinned) {
    if (p.cap < bytes || p.event == reinterpret_cast<void *>(1)) continue;  // too small / in use
    if (!best || p.cap < best->cap) best = &p;
  }
  if (best) {
    if (best->event) {
      LM_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(best->event)),
              "cudaEventSynchronize (staging buffer reuse)");
      LM_CUDA(cudaEventDestroy(static_cast<cudaEvent_t>(best->event)), "cudaEventDestroy");
    }
    best->event = reinterpret_cast<void *>(1);  // in use
    return best->ptr;
  }
  void *p = nullptr;
  cudaError_t rc = cudaMallocHost(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(LM_ERR_OUT_OF_MEMORY, "cudaMallocHost of %zu staging bytes failed (rank %d)", bytes,
         world_rank_or_minus1());
  }
  if (rc != cudaSuccess) cuda_fail(rc, "cudaMallocHost (staging)");
  d.pinned.push_back({p, bytes, reinterpret_cast<void *>(1)});
  return p;
}

static MeshDevice::Pinned *find_pinned(lm_mesh_s *m, void *host) {
  for (auto &p : mesh_device(m).pinned)
    if (p.ptr == host) return &p;
  return nullptr;
}

void stage_release(lm_mesh_s *m, void *host) {
  if (!host) return;
  if (MeshDevice::Pinned *p = find_pinned(m, host))
    if (p->event == reinterpret_cast<void *>(1)) p->event = nullptr;
}

void *stage_to_host(lm_mesh_s *m, const void *dev, size_t bytes) {
  void *h = stage_host_buffer(m, bytes);
  try {
    if (bytes) {
      cudaStream_t st = stream_of(m);
      LM_CUDA(cudaMemcpyAsync(h, dev, bytes, cudaMemcpyDeviceToHost, st),
              "cudaMemcpyAsync (device to host staging)");
      // MPI reads host memory: wait for this stream (never the whole device).
      LM_CUDA(cudaStreamSynchronize(st), "cudaStreamSynchronize (host staging)");
    }
  } catch (...) {
    stage_release(m, h);
    throw;
  }
  return h;
}

void stage_to_device(lm_mesh_s *m, void *dev, void *host, size_t bytes) {
  MeshDevice::Pinned *p = find_pinned(m, host);
  if (!bytes) {
    stage_release(m, host);
    return;
  }
  cudaStream_t st = stream_of(m);
  cudaError_t rc = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st);
  if (rc != cudaSuccess) {
    stage_release(m, host);
    cuda_fail(rc, "cudaMemcpyAsync (host staging to device)");
  }
  cudaEvent_t ev = nullptr;
  rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (rc == cudaSuccess) rc = cudaEventRecord(ev, st);
  if (rc != cudaSuccess) {
    // Cannot tell when the copy is done: wait for it so the buffer can be reused safely.
    cudaStreamSynchronize(st);
    if (ev) cudaEventDestroy(ev);
    stage_release(m, host);
    cuda_fail(rc, "cudaEventRecord (staging)");
  }
  if (p) p->event = ev;
}

void NcclComm::release() {
  if (!comm) return;
  // Let enqueued NCCL work finish (peers may be waiting for it), at most LM_NCCL_TIMEOUT, then
  // abort: local, never waits for peers (ncclCommFinalize/Destroy could).
  if (used) {
    const double limit = nccl_timeout_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    while (cudaStreamQuery(static_cast<cudaStream_t>(stream)) == cudaErrorNotReady &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < limit)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ncclCommAbort(static_cast<ncclComm_t>(comm));
  comm = nullptr;
}

MeshDevice::~MeshDevice() {
  pairs.clear();
  nccl.release();
  for (auto &p : pinned) {
    if (p.event && p.event != reinterpret_cast<void *>(1)) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(p.event));
      cudaEventDestroy(static_cast<cudaEvent_t>(p.event));
    }
    cudaFreeHost(p.ptr);
  }
  cudaGetLastError();
}

// ------------------------------------------------------------------------------ transport
namespace {
struct GpuId {
  char host[64];
  char bus[32];
};
}  // namespace

// The shared-GPU check of the n ranks of `c` (one allgather of host + PCI bus id, before any
// NCCL call: NCCL refuses two ranks of one communicator on one GPU, "Duplicate GPU detected").
// `who` names the ranks in the reason ("mesh ranks", "ranks of the two meshes' union").
static int choose_transport(MPI_Comm c, int n, int device_id, const char *who, std::string *why) {
  const char *env = std::getenv("LM_TRANSPORT");
  if (env && std::strcmp(env, "mpi") == 0) {
    *why = "LM_TRANSPORT=mpi";
    return LM_TRANSPORT_MPI_STAGED;
  }
  if (!kNcclExecutor) {
    *why = "this build has no NCCL executor: device data is staged through host";
    return LM_TRANSPORT_MPI_STAGED;
  }
  GpuId mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  if (const char *hid = std::getenv("NCCL_HOSTID"))  // NCCL_SPLIT_HOSTS test mode: NCCL's view
    std::snprintf(mine.host, sizeof mine.host, "%s", hid);
  if (cudaDeviceGetPCIBusId(mine.bus, sizeof mine.bus, device_id) != cudaSuccess) {
    cudaGetLastError();
    std::snprintf(mine.bus, sizeof mine.bus, "?%d", device_id);
  }
  std::vector<GpuId> all((size_t)n);
  mpi_check(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine,
                          MPI_BYTE, c),
            "device transport choice: MPI_Allgather of host and PCI bus ids");
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (!std::strcmp(all[i].host, all[j].host) && !std::strcmp(all[i].bus, all[j].bus)) {
        *why = strfmt("%s %zu and %zu share the GPU %s on host %s", who, i, j, all[i].bus,
                      all[i].host);
        return LM_TRANSPORT_MPI_STAGED;
      }
  *why = strfmt("NCCL: each of the %s has its own GPU", who);
  return LM_TRANSPORT_NCCL;
}

int device_transport(lm_mesh_s *m, int device_id) {
  MeshDevice &d = mesh_device(m);
  if (d.transport != LM_TRANSPORT_UNDECIDED) return d.transport;
  try {
    d.transport = choose_transport(m->comm, (int)m->grid->size(), device_id, "mesh ranks",
                                   &d.transport_why);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  return d.transport;
}

// ------------------------------------------------------------------------------ NCCL
double nccl_timeout_seconds() {
  const char *e = std::getenv("LM_NCCL_TIMEOUT");
  if (!e || !*e) return 300.0;
  char *end = nullptr;
  double v = std::strtod(e, &end);
  return (end && *end == 0 && v >= 0) ? v : 300.0;
}

// Test hook (fault injection): LM_NCCL_FAULT_INIT_RANK=r makes rank r of the communicator (the
// mesh index, or the rank in a pair's union) report a failed communicator init, so the agreement,
// abort and broken-mesh path is testable on one GPU.
static bool nccl_fault_here(int64_t rank) {
  const char *e = std::getenv("LM_NCCL_FAULT_INIT_RANK");
  return e && *e && std::atoll(e) == rank;
}

// Marks m2 broken too (a pair's communicator serves both meshes), then m (mesh_break rethrows).
[[noreturn]] static void break_meshes(lm_mesh_s *m, lm_mesh_s *m2, const Error &e) {
  if (m2 && m2 != m) {
    m2->broken = true;
    m2->broken_why = e.message();
  }
  mesh_break(m, e);
}

[[noreturn]] static void nccl_break(lm_mesh_s *m, lm_mesh_s *m2, const std::string &msg) {
  break_meshes(m, m2, Error(LM_ERR_NCCL, msg));
}

// Creates the communicator of the n ranks of `c` (this rank: `rank`) on device_id, collective
// over c: the unique id from rank 0 by MPI_Bcast, non-blocking ncclCommInitRankConfig polled with
// a deadline, one allreduce agreeing on the outcome. Any failure anywhere: every rank aborts its
// communicator, m (and m2) are broken, LM_ERR_NCCL everywhere.
static void nccl_init(NcclComm &out, MPI_Comm c, int n, int rank, int device_id, lm_mesh_s *m,
                      lm_mesh_s *m2, int world_rank) {
  // 1. The unique id from rank 0, with its status, to every member.
  struct {
    ncclUniqueId id;
    int rc;
  } boot{};
  if (rank == 0) boot.rc = (int)ncclGetUniqueId(&boot.id);
  try {
    mpi_check(MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c),
              "NCCL bootstrap: MPI_Bcast of the unique id");
  } catch (const Error &e) {
    break_meshes(m, m2, e);
  }
  if (boot.rc != ncclSuccess)
    nccl_break(m, m2, strfmt("NCCL bootstrap: ncclGetUniqueId failed on rank 0 of the "
                             "communicator: %s", ncclGetErrorString((ncclResult_t)boot.rc)));
  // 2. Non-blocking init, polled with a deadline.
  std::string err;
  ncclComm_t comm = nullptr;
  {
    DeviceGuard g(device_id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, n, boot.id, rank, &cfg);
    const double limit = nccl_timeout_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t st = rc;
    while (comm && (st == ncclSuccess || st == ncclInProgress)) {
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
      if (st != ncclInProgress) break;
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited >= limit) {
        err = strfmt("ncclCommInitRankConfig did not finish within LM_NCCL_TIMEOUT = %g s", limit);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (err.empty() && st != ncclSuccess)
      err = strfmt("ncclCommInitRankConfig failed: %s%s%s", ncclGetErrorString(st),
                   comm ? ": " : "", comm ? ncclGetLastError(comm) : "");
    if (err.empty() && nccl_fault_here(rank)) err = "injected failure (LM_NCCL_FAULT_INIT_RANK)";
    if (!err.empty() && comm) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }
  // 3. Agree: any failure fails every rank with LM_ERR_NCCL and breaks the mesh(es).
  int mine = err.empty() ? -1 : rank, first = -1;
  try {
    mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MAX, c),
              "NCCL bootstrap: MPI_Allreduce of the init outcome");
  } catch (const Error &e) {
    if (comm) ncclCommAbort(comm);
    break_meshes(m, m2, e);
  }
  if (first >= 0) {
    if (comm) ncclCommAbort(comm);
    nccl_break(m, m2,
               err.empty()
                   ? strfmt("NCCL communicator init failed on rank %d of the communicator (this "
                            "rank %d succeeded and aborted its communicator)", first, world_rank)
                   : strfmt("NCCL communicator init on rank %d: %s", world_rank, err.c_str()));
  }
  out.comm = comm;
  out.device = device_id;
}

static void check_comm_device(const NcclComm &c, int device_id, const char *whose) {
  if (c.device != device_id)
    fail(LM_ERR_INVALID_ARGUMENT, "NCCL: %s communicator lives on device %d, this tensor on "
         "device %d (one device per rank and mesh)", whose, c.device, device_id);
}

void *nccl_comm(lm_mesh_s *m, int device_id) {
  MeshDevice &d = mesh_device(m);
  if (d.nccl.comm) {
    check_comm_device(d.nccl, device_id, "the mesh's");
    return d.nccl.comm;
  }
  nccl_init(d.nccl, m->comm, (int)m->grid->size(), (int)m->index, device_id, m, nullptr,
            m->world_rank);
  return d.nccl.comm;
}

void nccl_check_async(NcclComm &nc, lm_mesh_s *m, lm_mesh_s *m2, const char *what) {
  if (!nc.comm) return;
  ncclComm_t c = static_cast<ncclComm_t>(nc.comm);
  ncclResult_t st = ncclSuccess;
  const double limit = nccl_timeout_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {  // a non-blocking comm may still be enqueuing (ncclInProgress)
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess || st != ncclInProgress) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= limit) {
      st = ncclInProgress;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (st == ncclSuccess) return;
  std::string msg = st == ncclInProgress
                        ? strfmt("%s: NCCL did not finish enqueuing within LM_NCCL_TIMEOUT = %g s",
                                 what, limit)
                        : strfmt("%s: NCCL reported %s: %s", what, ncclGetErrorString(st),
                                 ncclGetLastError(c));
  ncclCommAbort(c);
  nc.comm = nullptr;
  nccl_break(m, m2, msg);
}

CurrentDevice::CurrentDevice(int dev) {
  LM_CUDA(cudaGetDevice(&prev_), "cudaGetDevice");
  if (prev_ != dev) LM_CUDA(cudaSetDevice(dev), "cudaSetDevice");
}
CurrentDevice::~CurrentDevice() {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_ && prev_ >= 0) cudaSetDevice(prev_);
}

// The tag of MPI_Comm_create_group for pair communicators (distinguishes concurrent creations
// on one parent; within MPI's guaranteed MPI_TAG_UB of 32767).
constexpr int kPairCommTag = 31117;

// The pair of meshes' device state, created on first use: collective over the union of their
// ranks (every rank of either mesh calls it in the same order; ranks of neither never do).
static PairDevice &pair_device(lm_mesh_s *sm, lm_mesh_s *dm, MPI_Comm parent, int device_id) {
  lm_mesh_s *lo = sm->id < dm->id ? sm : dm, *hi = lo == sm ? dm : sm;
  MeshDevice &d = mesh_device(lo);
  auto it = d.pairs.find(hi->id);
  if (it != d.pairs.end()) return *it->second;
  auto p = std::make_unique<PairDevice>();
  int wsize = 0;
  try {
    mpi_check(MPI_Comm_size(parent, &wsize), "cross-mesh device transport: MPI_Comm_size");
    p->map.assign((size_t)wsize, -1);
    for (lm_mesh_s *m : {sm, dm})
      for (int64_t i = 0; i < m->grid->size(); ++i) p->map[(size_t)m->grid->rank_at_index(i)] = 0;
    std::vector<int> ranks;  // the union in parent rank order
    for (int r = 0; r < wsize; ++r)
      if (p->map[(size_t)r] == 0) {
        p->map[(size_t)r] = (int)ranks.size();
        ranks.push_back(r);
      }
    p->size = (int)ranks.size();
    p->rank = p->map[(size_t)sm->world_rank];
    if (p->rank < 0)
      fail(LM_ERR_INTERNAL, "cross-mesh device transport: rank %d is in neither mesh",
           sm->world_rank);
    MPI_Group wg = MPI_GROUP_NULL, ug = MPI_GROUP_NULL;
    mpi_check(MPI_Comm_group(parent, &wg), "cross-mesh device transport: MPI_Comm_group");
    int rc = MPI_Group_incl(wg, p->size, ranks.data(), &ug);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(parent, ug, kPairCommTag, &p->comm);
    MPI_Group_free(&wg);
    if (ug != MPI_GROUP_NULL) MPI_Group_free(&ug);
    mpi_check(rc, "cross-mesh device transport: MPI_Comm_create_group of the two meshes' ranks");
    MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
    p->transport = choose_transport(p->comm, p->size, device_id, "ranks of the two meshes' union",
                                    &p->transport_why);
  } catch (const Error &e) {
    break_meshes(sm, dm, e);
  }
  return *(d.pairs[hi->id] = std::move(p));
}

bool device_plan_on_nccl(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, int device_id) {
  NcclComm *nc = nullptr;
  lm_mesh_s *m2 = nullptr;
  void *stream = nullptr;
  std::vector<int> map;  // parent rank -> NCCL rank (-1: none)
  if (src_mesh == dst_mesh) {
    if (!src_mesh->member) return false;
    if (device_transport(src_mesh, device_id) != LM_TRANSPORT_NCCL) return false;
    nccl_comm(src_mesh, device_id);
    nc = &mesh_device(src_mesh).nccl;
    stream = mesh_device(src_mesh).config.stream;
    map.assign((size_t)src_mesh->world_size, -1);
    for (int64_t i = 0; i < src_mesh->grid->size(); ++i)
      map[(size_t)src_mesh->grid->rank_at_index(i)] = (int)i;
  } else {
    // Across meshes: the union's communicator; the work goes on the target mesh's stream where
    // this rank has a target shard (its consumers order on that stream), else the source's.
    PairDevice &p = pair_device(src_mesh, dst_mesh, plan.comm, device_id);
    if (p.transport != LM_TRANSPORT_NCCL) return false;
    if (p.nccl.comm)
      check_comm_device(p.nccl, device_id, "the two meshes'");
    else
      nccl_init(p.nccl, p.comm, p.size, p.rank, device_id, src_mesh, dst_mesh,
                src_mesh->world_rank);
    nc = &p.nccl;
    m2 = dst_mesh;
    stream = (dst_mesh->member ? mesh_device(dst_mesh) : mesh_device(src_mesh)).config.stream;
    map = p.map;
  }
  auto *cur = dynamic_cast<NcclTransport *>(plan.transport());
  if (!cur || cur->comm() != nc->comm || cur->stream() != stream)
    plan.use_transport(std::make_unique<NcclTransport>(nc, src_mesh, m2, stream, device_id,
                                                       std::move(map)));
  return true;
}

void device_plan_join_streams(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, bool before) {
  if (src_mesh == dst_mesh || !src_mesh->member || !dst_mesh->member) return;
  auto *t = dynamic_cast<NcclTransport *>(plan.transport());
  if (!t) return;
  cudaStream_t src = stream_of(src_mesh), run = static_cast<cudaStream_t>(t->stream());
  if (src == run) return;
  cudaStream_t from = before ? src : run, to = before ? run : src;
  cudaEvent_t ev = nullptr;
  LM_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t rc = cudaEventRecord(ev, from);
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(to, ev, 0);
  cudaEventDestroy(ev);  // released once the recorded work completes
  if (rc != cudaSuccess) cuda_fail(rc, "cross-mesh stream ordering (cudaEventRecord / cudaStreamWaitEvent)");
}

void plan_use_host_transport(Plan &plan) {
  if (dynamic_cast<NcclTransport *>(plan.transport())) plan.use_transport(transport_for(plan.comm));
}

static void nccl_plan_check(Plan &plan, const char *what) {
  if (auto *t = dynamic_cast<NcclTransport *>(plan.transport())) t->check_async(what);
}

// Agrees a local outcome over the union of two meshes' ranks (the pair's communicator, made by
// device_plan_on_nccl before any cross-mesh staging): rethrows `local` where it failed, and
// LM_ERR_REMOTE naming the first failed rank on the others. Both meshes break on an MPI error.
static void pair_agree(lm_mesh_s *sm, lm_mesh_s *dm, lm_status_t local, const std::string &err,
                       const char *what) {
  lm_mesh_s *lo = sm->id < dm->id ? sm : dm, *hi = lo == sm ? dm : sm;
  MeshDevice &d = mesh_device(lo);
  auto it = d.pairs.find(hi->id);
  if (it == d.pairs.end() || it->second->comm == MPI_COMM_NULL) {
    if (local != LM_SUCCESS) throw Error(local, err);
    return;
  }
  PairDevice &p = *it->second;
  int v = local != LM_SUCCESS ? p.size - p.rank : 0;
  try {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, p.comm), what);
  } catch (const Error &e) {
    break_meshes(sm, dm, e);
  }
  if (local != LM_SUCCESS) throw Error(local, err);
  if (v) {
    const int failed = p.size - v;
    int parent = -1;
    for (size_t r = 0; r < p.map.size(); ++r)
      if (p.map[r] == failed) parent = (int)r;
    fail(LM_ERR_REMOTE, "%s: rank %d failed; this rank %d did not", what, parent, sm->world_rank);
  }
}

#else  // !LM_WITH_CUDA ------------------------------------------------------------------

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

[[noreturn]] void cuda_fail(int err, const char *what) {
  fail(LM_ERR_CUDA, "%s failed (error %d)", what, err);
}

[[noreturn]] static void not_built(const char *what) {
  fail(LM_ERR_NOT_SUPPORTED,
       "%s: device type kDLCUDA is not supported by this build (the CUDA/NCCL backend is not "
       "built in: build with CUDA=1; lm_device_supported tells)",
       what);
}

void check_cuda_device(DLDevice, const char *what) { not_built(what); }
void check_device_pointer(const void *, DLDevice, const char *what) { not_built(what); }
std::shared_ptr<Storage> device_storage_alloc(lm_mesh_s *, DLDevice, size_t, bool) {
  not_built("device allocation");
}
void device_copy_d2d(lm_mesh_s *, void *, const void *, size_t) { not_built("device copy"); }
void *stage_host_buffer(lm_mesh_s *, size_t) { not_built("device staging"); }
void *stage_to_host(lm_mesh_s *, const void *, size_t) { not_built("device staging"); }
void stage_to_device(lm_mesh_s *, void *, void *, size_t) { not_built("device staging"); }
void stage_release(lm_mesh_s *, void *) {}
int device_transport(lm_mesh_s *, int) { not_built("device transport"); }
bool device_plan_on_nccl(lm_mesh_s *, lm_mesh_s *, Plan &, int) { not_built("NCCL"); }
void plan_use_host_transport(Plan &) {}
CurrentDevice::CurrentDevice(int) {}
CurrentDevice::~CurrentDevice() = default;
void device_plan_join_streams(lm_mesh_s *, lm_mesh_s *, Plan &, bool) {}
void *nccl_comm(lm_mesh_s *, int) { not_built("NCCL"); }
void nccl_check_async(NcclComm &, lm_mesh_s *, lm_mesh_s *, const char *) {}
double nccl_timeout_seconds() { return 300.0; }
void NcclComm::release() { comm = nullptr; }
static void nccl_plan_check(Plan &, const char *) {}
static void pair_agree(lm_mesh_s *, lm_mesh_s *, lm_status_t local, const std::string &err,
                       const char *) {
  if (local != LM_SUCCESS) throw Error(local, err);
}
MeshDevice::~MeshDevice() = default;

#endif  // LM_WITH_CUDA

// ------------------------------------------------------------------------------ plans
void device_run_plan(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, const void *in,
                     size_t in_bytes, void *out, size_t out_bytes, int device_id) {
  if (device_plan_on_nccl(src_mesh, dst_mesh, plan, device_id)) {
    CurrentDevice on(device_id);
    try {
      device_plan_join_streams(src_mesh, dst_mesh, plan, true);
      plan.run(in, out);  // device pointers; everything enqueued on the plan's stream
      device_plan_join_streams(src_mesh, dst_mesh, plan, false);
    } catch (...) {
      plan.abandon();  // a cached plan must not stay mid-execution
      throw;
    }
    nccl_plan_check(plan, "reshard on NCCL");
    return;
  }
  if (src_mesh->member) device_transport(src_mesh, device_id);
  plan_use_host_transport(plan);
  // Host-staged: the plan runs on pinned host copies through MPI. Staging failures (pinned
  // memory, the copy out) are agreed before any data moves, over the mesh or, across meshes,
  // over the union of both meshes' ranks (the pair's communicator), so no rank waits for a
  // failed one.
  void *hin = nullptr, *hout = nullptr;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    if (in) hin = stage_to_host(src_mesh, in, in_bytes);
    if (out) hout = stage_host_buffer(dst_mesh, out_bytes);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  }
  try {
    if (src_mesh == dst_mesh)
      mesh_agree(src_mesh, st, err, "device staging");
    else
      pair_agree(src_mesh, dst_mesh, st, err, "device staging");
  } catch (...) {
    stage_release(src_mesh, hin);
    stage_release(dst_mesh, hout);
    throw;
  }
  try {
    plan.run(hin, hout);
  } catch (...) {
    stage_release(src_mesh, hin);
    stage_release(dst_mesh, hout);
    throw;
  }
  stage_release(src_mesh, hin);
  if (out) stage_to_device(dst_mesh, out, hout, out_bytes);
}

void *stage_to_host_agreed(lm_mesh_s *agree, lm_mesh_s *m, const void *dev, size_t bytes) {
  void *h = nullptr;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    if (dev) h = stage_to_host(m, dev, bytes);
  } catch (const Error &e) {
    if (!agree) throw;
    st = e.status();
    err = e.message();
  }
  if (agree) {
    try {
      mesh_agree(agree, st, err, "device staging");
    } catch (...) {
      stage_release(m, h);
      throw;
    }
  }
  return h;
}

std::unique_ptr<DeviceRequest> device_plan_begin(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh,
                                                 const void *in, size_t in_bytes, void *out,
                                                 size_t out_bytes) {
  auto r = std::make_unique<DeviceRequest>();
  r->src_mesh = src_mesh;
  r->dst_mesh = dst_mesh;
  r->dev_out = out;
  r->out_bytes = out_bytes;
  try {
    if (in) r->host_in = stage_to_host(src_mesh, in, in_bytes);
    if (out) r->host_out = stage_host_buffer(dst_mesh, out_bytes);
  } catch (...) {
    device_plan_abandon(*r);
    throw;
  }
  return r;
}

void device_plan_finish(DeviceRequest &r) {
  stage_release(r.src_mesh, r.host_in);
  r.host_in = nullptr;
  void *h = r.host_out;
  r.host_out = nullptr;
  if (r.dev_out) stage_to_device(r.dst_mesh, r.dev_out, h, r.out_bytes);
}

void device_plan_abandon(DeviceRequest &r) {
  stage_release(r.src_mesh, r.host_in);
  stage_release(r.dst_mesh, r.host_out);
  r.host_in = r.host_out = nullptr;
}

}  // namespace lm
