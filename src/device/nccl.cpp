// SPDX-License-Identifier: BSD-3-Clause
// The device component's NCCL calls (mem/device_api.hpp): communicators (non-blocking), grouped
// point-to-point messages as bytes, and the collectives the executor issues where a step's data
// allows (plan/collective.hpp). dtypes and reduce ops arrive as localmap's and map onto NCCL's here,
// the one place that knows both; ncclAlltoAll is looked up at run time in the NCCL that is loaded
// (it came with NCCL 2.28), so a component built against newer headers still loads with an older
// libnccl.so.2, and answers LMD_UNSUPPORTED.
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>

#include "common/dtype.hpp"
#include "device/runtime.hpp"
#include "device/status.hpp"
#include "layout/elementwise.hpp"
#include "mem/device_api.hpp"

namespace lm {
namespace device {

namespace {

ncclComm_t C(void *c) { return static_cast<ncclComm_t>(c); }
cudaStream_t S(void *s) { return static_cast<cudaStream_t>(s); }

// localmap's dtype as NCCL's, with the elements per localmap element (complex: two reals); false
// where NCCL has no such type.
bool nccl_type(int dtype, ncclDataType_t *t, size_t *per) {
  *per = 1;
  switch (static_cast<DType>(dtype)) {
    case DType::I8: *t = ncclInt8; return true;
    case DType::U8: *t = ncclUint8; return true;
    case DType::I32: *t = ncclInt32; return true;
    case DType::I64: *t = ncclInt64; return true;
    case DType::F16: *t = ncclFloat16; return true;
    case DType::BF16: *t = ncclBfloat16; return true;
    case DType::F32: *t = ncclFloat32; return true;
    case DType::F64: *t = ncclFloat64; return true;
    case DType::C64: *t = ncclFloat32, *per = 2; return true;
    case DType::C128: *t = ncclFloat64, *per = 2; return true;
    default: return false;  // int16 (NCCL has none), bool (or/and of any nonzero byte)
  }
}

// localmap's op as NCCL's: avg adds (the caller divides after, as the kernels' avg does); complex
// only adds (NCCL's prod of a real pair is not the complex product).
bool nccl_op(int dtype, int op, ncclRedOp_t *o) {
  const DType t = static_cast<DType>(dtype);
  const bool complex = t == DType::C64 || t == DType::C128;
  switch (op) {
    case ew::kSum: case ew::kAvg: *o = ncclSum; return true;
    case ew::kProd: *o = ncclProd; return !complex;
    case ew::kMax: *o = ncclMax; return !complex;
    case ew::kMin: *o = ncclMin; return !complex;
    default: return false;
  }
}

// A reduction as NCCL runs it: its type and op, and NCCL elements per localmap element.
struct Reduction {
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t per;
};

// localmap's dtype and op as NCCL's; false where NCCL cannot reduce them.
bool nccl_reduction(int dtype, int op, Reduction *r) {
  return nccl_type(dtype, &r->type, &r->per) && nccl_op(dtype, op, &r->op);
}

// The same for a collective that must run: LMD_OK, or LMD_UNSUPPORTED with the reason.
int resolve_reduction(int dtype, int op, Reduction *r) {
  if (!nccl_reduction(dtype, op, r))
    return failed(LMD_UNSUPPORTED, "NCCL does not reduce dtype %d with op %d", dtype, op);
  return LMD_OK;
}

using AlltoAllFn = ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                                    cudaStream_t);
// ncclAlltoAll of the NCCL this component runs with: the library that defines its ncclGetVersion
// (a program may interpose ncclSend and the like, never that one).
AlltoAllFn all_to_all_fn() {
  static AlltoAllFn fn = [] {
    AlltoAllFn f = nullptr;
    Dl_info info{};
    void *anchor = reinterpret_cast<void *>(&ncclGetVersion);
    if (dladdr(anchor, &info) && info.dli_fname) {
      if (void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
        void *sym = dlsym(h, "ncclAlltoAll");
        std::memcpy(&f, &sym, sizeof f);
        dlclose(h);  // NOLOAD: only drops the reference it took
      }
    }
    return f;
  }();
  return fn;
}

}  // namespace

void nccl_version(int *v) {
  if (ncclGetVersion(v) != ncclSuccess) *v = 0;
}

int nccl_unique_id(void *id, size_t len) {
  if (len != sizeof(ncclUniqueId))
    return failed(LMD_FAILED, "ncclUniqueId is %zu bytes, not %zu", sizeof(ncclUniqueId), len);
  ncclUniqueId u;
  int st = nccl_status(ncclGetUniqueId(&u), nullptr);
  if (st == LMD_OK) std::memcpy(id, &u, sizeof u);
  return st;
}

int nccl_init(void **comm, int n, const void *id, int rank) {
  ncclUniqueId u;
  std::memcpy(&u, id, sizeof u);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&c, n, u, rank, &cfg);
  *comm = c;
  return nccl_status(rc, c);
}

int nccl_async_error(void *comm) {
  ncclResult_t st = ncclInternalError;
  if (ncclCommGetAsyncError(C(comm), &st) != ncclSuccess)
    return failed(LMD_FAILED, "ncclCommGetAsyncError failed");
  return nccl_status(st, comm);
}

int nccl_finalize(void *comm) { return nccl_status(ncclCommFinalize(C(comm)), comm); }
int nccl_destroy(void *comm) { return nccl_status(ncclCommDestroy(C(comm)), nullptr); }
int nccl_abort(void *comm) { return nccl_status(ncclCommAbort(C(comm)), nullptr); }
int nccl_group_start() { return nccl_status(ncclGroupStart(), nullptr); }
int nccl_group_end() { return nccl_status(ncclGroupEnd(), nullptr); }

int nccl_send(const void *p, size_t bytes, int peer, void *comm, void *s) {
  return nccl_status(ncclSend(p, bytes, ncclInt8, peer, C(comm), S(s)), comm);
}
int nccl_recv(void *p, size_t bytes, int peer, void *comm, void *s) {
  return nccl_status(ncclRecv(p, bytes, ncclInt8, peer, C(comm), S(s)), comm);
}

int nccl_all_gather(const void *in, void *out, size_t bytes, void *comm, void *s) {
  return nccl_status(ncclAllGather(in, out, bytes, ncclInt8, C(comm), S(s)), comm);
}

int nccl_reduces(int dtype, int op) {
  Reduction r;
  return nccl_reduction(dtype, op, &r);
}

int nccl_reduce_scatter(const void *in, void *out, size_t count, int dtype, int op, void *comm,
                        void *s) {
  Reduction r;
  const int st = resolve_reduction(dtype, op, &r);
  if (st != LMD_OK) return st;
  return nccl_status(ncclReduceScatter(in, out, count * r.per, r.type, r.op, C(comm), S(s)), comm);
}

int nccl_all_reduce(const void *in, void *out, size_t count, int dtype, int op, void *comm,
                    void *s) {
  Reduction r;
  const int st = resolve_reduction(dtype, op, &r);
  if (st != LMD_OK) return st;
  return nccl_status(ncclAllReduce(in, out, count * r.per, r.type, r.op, C(comm), S(s)), comm);
}

int nccl_has_all_to_all() { return all_to_all_fn() != nullptr; }

int nccl_all_to_all(const void *in, void *out, size_t bytes, void *comm, void *s) {
  AlltoAllFn f = all_to_all_fn();
  if (!f) return failed(LMD_UNSUPPORTED, "the loaded NCCL has no ncclAlltoAll (NCCL 2.28 added it)");
  return nccl_status(f(in, out, bytes, ncclInt8, C(comm), S(s)), comm);
}

}  // namespace device
}  // namespace lm
