// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL: unique ids, communicator init (blocking, or non-blocking with ncclInProgress
// until every rank joined), the duplicate-GPU check, async errors, finalize, destroy, abort.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cstring>
#include <random>
#include <set>

#include "nccl_sim.hpp"

using namespace cudasim;
using namespace cudasim::nccl;

// The handle: a checked shell around the state, which queued work keeps alive.
struct ncclComm {
  uint64_t magic;
  std::shared_ptr<CommState> st;
};

namespace cudasim {
namespace nccl {

namespace {

constexpr uint64_t kCommMagic = 0x6e63636c2d73696dull, kIdMagic = 0x63756461732d6964ull;

struct IdBody {
  uint64_t magic;
  char name[64];
};
static_assert(sizeof(IdBody) <= NCCL_UNIQUE_ID_BYTES, "unique id");

std::mutex g_mu;
std::set<const ncclComm *> *g_comms = new std::set<const ncclComm *>;
thread_local std::string t_last_error;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Where the parts of the segment start, for n ranks and rings of `ring` bytes.
size_t layout(int n, size_t ring, size_t *ranks_at, size_t *chans_at, size_t *rings_at) {
  *ranks_at = align_up(sizeof(Header), 64);
  *chans_at = align_up(*ranks_at + (size_t)n * sizeof(RankInfo), 64);
  *rings_at = align_up(*chans_at + (size_t)n * (size_t)n * sizeof(Chan), 4096);
  return *rings_at + (size_t)n * (size_t)n * ring;
}

ncclResult_t map_segment(CommState &c, std::string *err) {
  size_t ra, ca, ga;
  c.map_len = layout(c.nranks, c.ring_bytes, &ra, &ca, &ga);
  int fd = shm_open(c.name.c_str(), O_CREAT | O_RDWR, 0600);
  struct stat sb {};
  if (fd < 0 || fstat(fd, &sb) != 0 ||
      ((size_t)sb.st_size < c.map_len && ftruncate(fd, (off_t)c.map_len) != 0)) {
    *err = "shm_open/ftruncate of " + c.name + ": " + strerror(errno);
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  void *m = mmap(nullptr, c.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    *err = "mmap of " + c.name + ": " + strerror(errno);
    return ncclSystemError;
  }
  char *b = static_cast<char *>(m);
  c.hdr = reinterpret_cast<Header *>(b);
  c.ranks = reinterpret_cast<RankInfo *>(b + ra);
  c.chans = reinterpret_cast<Chan *>(b + ca);
  c.rings = b + ga;
  return ncclSuccess;
}

// Claims this rank's slot, checking that every rank agrees on the size of the communicator.
ncclResult_t claim(CommState &c, std::string *err) {
  int32_t n = 0;
  if (!c.hdr->nranks.compare_exchange_strong(n, c.nranks) && n != c.nranks) {
    *err = "ranks disagree on nranks (" + std::to_string(n) + " vs " + std::to_string(c.nranks) + ")";
    return ncclInvalidArgument;
  }
  uint32_t ring = 0;
  if (!c.hdr->ring_bytes.compare_exchange_strong(ring, (uint32_t)c.ring_bytes) &&
      ring != c.ring_bytes) {
    *err = "ranks disagree on CUDASIM_NCCL_RING_KB";
    return ncclInvalidUsage;
  }
  RankInfo &me = c.ranks[c.rank];
  int32_t pid = 0;
  if (!me.pid.compare_exchange_strong(pid, (int32_t)getpid())) {
    *err = "rank " + std::to_string(c.rank) + " joined twice (pid " + std::to_string(pid) + ")";
    return ncclInvalidArgument;
  }
  me.device = c.device;
  if (cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, c.device) != cudaSuccess) cudaGetLastError();
  const char *hid = std::getenv("NCCL_HOSTID");  // NCCL's own override of the host identity
  if (hid && *hid)
    std::snprintf(me.host, sizeof me.host, "%s", hid);
  else
    gethostname(me.host, sizeof me.host - 1);
  me.state.store(kJoined);
  return ncclSuccess;
}

// NCCL refuses two ranks of one communicator on one GPU of one host.
ncclResult_t check_duplicates(CommState &c, std::string *err) {
  for (int i = 0; i < c.nranks; ++i)
    for (int j = i + 1; j < c.nranks; ++j)
      if (!std::strcmp(c.ranks[i].host, c.ranks[j].host) &&
          !std::strcmp(c.ranks[i].bus, c.ranks[j].bus)) {
        *err = "Duplicate GPU detected: rank " + std::to_string(i) + " and rank " +
               std::to_string(j) + " both on CUDA device with busId " + c.ranks[i].bus +
               " on host " + c.ranks[i].host;
        return ncclInvalidUsage;
      }
  return ncclSuccess;
}

// The whole join: map, claim, wait for all ranks (bounded), check GPUs.
ncclResult_t join(CommState &c) {
  std::string err;
  ncclResult_t r = map_segment(c, &err);
  if (r == ncclSuccess) r = claim(c, &err);
  if (r == ncclSuccess) {
    if (c.hdr->joined.fetch_add(1) + 1 == c.nranks) shm_unlink(c.name.c_str());  // all mapped it
    const double t0 = now_seconds();
    while (c.hdr->joined.load() < c.nranks && r == ncclSuccess) {
      if (c.aborted.load()) r = ncclInvalidUsage, err = "aborted during init";
      else if (now_seconds() - t0 > settings().nccl_seconds) {
        err = "ranks";
        for (int i = 0; i < c.nranks; ++i)
          if (!c.ranks[i].pid.load()) err += " " + std::to_string(i);
        err += " of " + std::to_string(c.nranks) + " did not join within CUDASIM_NCCL_TIMEOUT";
        r = ncclSystemError;
      } else {
        usleep(500);
      }
    }
  }
  if (r == ncclSuccess) r = check_duplicates(c, &err);
  if (r != ncclSuccess) set_error(c, r, "ncclCommInitRank: " + err);
  c.init.store(r);
  return r;
}

bool finalize_done(CommState &c) {
  std::lock_guard<std::mutex> g(c.mu);
  if ((c.async != ncclSuccess && c.async != ncclInProgress) || c.hdr->error.load())
    return true;  // a failed communicator has nothing left to deliver
  if (c.groups_done != c.groups_issued || c.executing || !c.deferred.empty()) return false;
  for (int p = 0; p < c.nranks; ++p) {
    Chan &ch = c.chan(c.rank, p);
    if (ch.tail.load() != ch.head.load()) return false;  // sent data not yet received
  }
  return true;
}

// Waits (bounded) until this rank's work on the communicator is done and every byte it sent was
// received, then marks it finalized.
ncclResult_t finalize_blocking(CommState &c) {
  flush_deferred(c, true);
  const double t0 = now_seconds();
  while (!finalize_done(c)) {
    if (now_seconds() - t0 > settings().nccl_seconds)
      return api_error(&c, ncclSystemError, "ncclCommFinalize: rank %d: work or sent data not "
                       "received by peers within CUDASIM_NCCL_TIMEOUT", c.rank);
    usleep(200);
  }
  c.ranks[c.rank].state.store(kFinalized);
  return ncclSuccess;
}

// The handle's state if the handle is live and initialised; else an error.
ncclResult_t usable(ncclComm_t h, std::shared_ptr<CommState> *out, const char *call) {
  *out = state_of(h);
  if (!*out) return api_error(nullptr, ncclInvalidArgument, "%s: invalid communicator", call);
  int init = (*out)->init.load();
  if (init == ncclInProgress)
    return api_error(out->get(), ncclInvalidUsage, "%s: communicator still initialising", call);
  return init == ncclSuccess ? ncclSuccess : (ncclResult_t)init;
}

void release_handle(ncclComm_t h) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_comms->erase(h);
  }
  h->magic = ~kCommMagic;
  delete h;
}

}  // namespace

CommState::~CommState() {
  if (init_thread.joinable()) init_thread.join();
  if (hdr) munmap(hdr, map_len);
}

bool comm_valid(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_mu);
  return c && g_comms->count(c) && c->magic == kCommMagic;
}

std::shared_ptr<CommState> state_of(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!c || !g_comms->count(c) || c->magic != kCommMagic) return nullptr;
  return c->st;
}

void set_error(CommState &c, ncclResult_t r, const std::string &msg) {
  std::lock_guard<std::mutex> g(c.mu);
  if (c.async == ncclSuccess || c.async == ncclInProgress) c.async = r;
  c.last_error = msg;
  t_last_error = msg;
}

ncclResult_t api_error(CommState *c, ncclResult_t r, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  t_last_error = msg;
  if (c) {
    std::lock_guard<std::mutex> g(c->mu);
    c->last_error = msg;
  }
  if (settings().verbose) report("NCCL %s: %s", ncclGetErrorString(r), msg);
  return r;
}

void ring_bell(CommState &c, int rank) {
  std::atomic<uint32_t> &b = c.ranks[rank].bell;
  b.fetch_add(1, std::memory_order_acq_rel);
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&b), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ring_all(CommState &c) {
  for (int r = 0; r < c.nranks; ++r) ring_bell(c, r);
}

// Enqueues the groups a non-blocking communicator ended, once their delay passed (or now).
void flush_deferred(CommState &c, bool force) {
  std::vector<std::unique_ptr<Group>> gs;
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.deferred.empty() || (!force && now_seconds() < c.deferred_ready)) return;
    gs.swap(c.deferred);
  }
  for (auto &g : gs) enqueue_group(std::move(g));
}

void enqueue_group(std::unique_ptr<Group> gp) {
  std::shared_ptr<Group> g(std::move(gp));
  auto op = std::make_unique<Op>();
  op->what = "NCCL group #" + std::to_string(g->seq) + " (" + std::to_string(g->ops.size()) +
             " transfers, rank " + std::to_string(g->comm->rank) + ")";
  op->touches = g->touches;
  op->run = [g](Op &) { execute_group(*g); };
  enqueue(g->stream, std::move(op));
}

const char *type_name(int t) {
  static const char *names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16", "float8e4m3",
                                "float8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

size_t type_size(int t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;  // fp8: not simulated
  }
}

}  // namespace nccl
}  // namespace cudasim

extern "C" {

ncclResult_t ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return api_error(nullptr, ncclInvalidArgument, "ncclGetUniqueId: NULL");
  static std::atomic<unsigned> counter{0};
  IdBody b{};
  b.magic = kIdMagic;
  std::snprintf(b.name, sizeof b.name, "/cudasim-nccl-%d-%u-%08x", (int)getpid(), counter++,
                (unsigned)std::random_device{}());
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &b, sizeof b);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  IdBody b;
  std::memcpy(&b, id.internal, sizeof b);
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks || b.magic != kIdMagic)
    return api_error(nullptr, ncclInvalidArgument,
                     "ncclCommInitRankConfig: bad arguments (nranks %d, rank %d, id %s)", nranks,
                     rank, b.magic == kIdMagic ? "ok" : "not from ncclGetUniqueId");
  if (config && (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize)))
    return api_error(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: config not initialised "
                     "with NCCL_CONFIG_INITIALIZER");
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return api_error(nullptr, ncclUnhandledCudaError, "ncclCommInitRankConfig: no CUDA device");
  auto st = std::make_shared<CommState>();
  st->rank = rank;
  st->nranks = nranks;
  st->device = dev;
  st->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  st->name = b.name;
  st->ring_bytes = settings().ring_bytes;
  st->sends_issued.assign((size_t)nranks, 0);
  st->recvs_issued.assign((size_t)nranks, 0);
  st->sends_done.assign((size_t)nranks, 0);
  st->recvs_done.assign((size_t)nranks, 0);
  auto *h = new ncclComm{kCommMagic, st};
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_comms->insert(h);
  }
  *comm = h;
  if (st->blocking) return join(*st);
  CommState *raw = st.get();
  st->init_thread = std::thread([raw] { join(*raw); });
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *out) {
  std::shared_ptr<CommState> c = state_of(comm);
  if (!c || !out) return api_error(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: bad argument");
  int init = c->init.load();
  if (init != ncclSuccess) {
    *out = (ncclResult_t)init;
    return ncclSuccess;
  }
  flush_deferred(*c, false);
  bool deferred, finalizing;
  {
    std::lock_guard<std::mutex> g(c->mu);
    deferred = !c->deferred.empty();
    finalizing = c->finalizing && c->async == ncclSuccess && !c->aborted.load();
  }
  if (deferred || (finalizing && !finalize_done(*c))) {
    *out = ncclInProgress;
    return ncclSuccess;
  }
  if (finalizing) c->ranks[c->rank].state.store(kFinalized);
  std::lock_guard<std::mutex> g(c->mu);
  *out = c->async;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::shared_ptr<CommState> c;
  ncclResult_t r = usable(comm, &c, "ncclCommFinalize");
  if (r != ncclSuccess) return r;
  if (!c->blocking) {
    flush_deferred(*c, true);
    std::lock_guard<std::mutex> g(c->mu);
    c->finalizing = true;
    return ncclInProgress;  // ncclCommGetAsyncError tells when it is done
  }
  return finalize_blocking(*c);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<CommState> c = state_of(comm);
  if (!c) return api_error(nullptr, ncclInvalidArgument, "ncclCommDestroy: invalid communicator");
  // Like NCCL 2.28: a communicator not finalized yet is finalized first (blocking).
  if (c->init.load() == ncclSuccess && c->ranks[c->rank].state.load() == kJoined &&
      finalize_blocking(*c) != ncclSuccess)
    report("ncclCommDestroy: rank %d: %s", c->rank, ncclGetLastError(comm));
  if (c->hdr && c->ranks[c->rank].pid.load() == getpid()) c->ranks[c->rank].state.store(kDestroyed);
  release_handle(comm);
  return ncclSuccess;
}

// Local and immediate, like NCCL's: the executing group of this rank stops, queued ones are
// dropped; peers that still wait for this rank will hang (and their watchdog reports it), as
// with NCCL. Data this rank sent that was not received yet counts as dropped.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<CommState> c = state_of(comm);
  if (!c) return comm ? api_error(nullptr, ncclInvalidArgument, "ncclCommAbort: invalid communicator")
                      : ncclSuccess;
  c->aborted.store(true);
  if (c->init_thread.joinable()) c->init_thread.join();
  if (c->hdr) {
    if (c->ranks[c->rank].pid.load() == getpid()) c->ranks[c->rank].state.store(kAborted);
    ring_all(*c);
    shm_unlink(c->name.c_str());  // in case not every rank joined
  }
  {
    std::unique_lock<std::mutex> g(c->mu);
    c->deferred.clear();
    c->cv.wait_for(g, std::chrono::seconds(10), [&] { return !c->executing; });
  }
  release_handle(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  std::shared_ptr<CommState> c;
  ncclResult_t r = usable(comm, &c, "ncclCommCount");
  if (r == ncclSuccess && !count) r = ncclInvalidArgument;
  if (r == ncclSuccess) *count = c->nranks;
  return r;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  std::shared_ptr<CommState> c;
  ncclResult_t r = usable(comm, &c, "ncclCommUserRank");
  if (r == ncclSuccess && !rank) r = ncclInvalidArgument;
  if (r == ncclSuccess) *rank = c->rank;
  return r;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  std::shared_ptr<CommState> c;
  ncclResult_t r = usable(comm, &c, "ncclCommCuDevice");
  if (r == ncclSuccess && !device) r = ncclInvalidArgument;
  if (r == ncclSuccess) *device = c->device;
  return r;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  std::shared_ptr<CommState> c = state_of(comm);
  if (c) {
    std::lock_guard<std::mutex> g(c->mu);
    copy = c->last_error;
  } else {
    copy = t_last_error;
  }
  return copy.c_str();
}

}  // extern "C"
