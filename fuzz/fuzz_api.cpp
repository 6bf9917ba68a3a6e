// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: every public entry point with hostile arguments, on one process (a singleton
// MPI run: no mpirun). Each input is a sequence of calls whose arguments come from a pool of
// handles (live, destroyed, of the wrong kind, forged, NULL) and of hostile numbers (negative,
// huge, bad enums, bad configs). Every call must return a known status with a message, never
// crash; whatever an input creates it destroys, so LeakSanitizer checks each input too.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "localmap.h"

namespace {

struct In {
  const uint8_t *p;
  size_t n;
  uint8_t u8() { return n ? (--n, *p++) : 0; }
  int64_t i64() {
    int64_t v = 0;
    size_t k = n < 8 ? n : 8;
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  // Hostile integers: small, negative, extremes.
  int64_t num() {
    switch (u8() % 8) {
      case 0: return INT64_MAX - (u8() & 3);
      case 1: return INT64_MIN + (u8() & 3);
      case 2: return -static_cast<int64_t>(u8() & 7);
      case 3: return INT_MAX;
      case 4: return i64();
      default: return u8() % 9;
    }
  }
};

void check(lm_status_t s) {
  if (static_cast<unsigned>(s) > LM_ERR_USER || !lm_last_error_message()) abort();
  if (s != LM_SUCCESS && !lm_last_error_message()[0]) abort();  // an error always says why
}

lm_mesh_t g_mesh;  // a live 1-rank mesh for the whole run
int g_comm;

lm_placement_t placement(In &in) {
  switch (in.u8() % 6) {
    case 0: return LM_PLACEMENT_REPLICATE;
    case 1: return LM_PLACEMENT_SHARD(static_cast<int32_t>(in.u8() % 4));
    case 2: return LM_PLACEMENT_PARTIAL(static_cast<int32_t>(in.u8() % 5));
    default:
    {
      lm_placement_t p;  // every field from the input: mostly invalid combinations
      for (int32_t *f : {&p.kind, &p.dim, &p.order, &p.reduce_op, &p.extents, &p.block,
                         &p.source, &p.reserved})
        *f = static_cast<int32_t>(in.num());
      return p;
    }
  }
}

DLDataType dtype(In &in) {
  static const DLDataType ok[] = {LM_FLOAT32, LM_FLOAT64, LM_INT8, LM_BOOL, LM_COMPLEX64, LM_BFLOAT16};
  if (in.u8() % 4) return ok[in.u8() % 6];
  return DLDataType{in.u8(), in.u8(), static_cast<uint16_t>(in.u8())};
}

// A DLTensor that is honest about its buffer where the library must trust it (data covers the
// shape; strides NULL or overflowing for sure) and hostile where the library must check it.
struct Tensor {
  DLTensor t{};
  std::vector<int64_t> shape, strides;
  std::vector<unsigned char> data;
  void make(In &in) {
    int nd = static_cast<int>(in.u8() % 6);
    if (in.u8() % 16 == 0) nd = static_cast<int>(in.num() % 64);
    shape.assign(nd > 0 ? static_cast<size_t>(nd) : 0, 0);
    int64_t numel = 1;
    for (auto &s : shape) {
      s = in.u8() % 5 ? in.u8() % 7 : in.num();
      if (s > 7) s |= int64_t(1) << 59;  // see shp below
      if (s > 0 && numel > 0 && s < (1 << 20) && numel < (1 << 20)) numel *= s; else numel = -1;
    }
    t.ndim = nd;
    t.dtype = dtype(in);
    t.device = in.u8() % 8 ? LM_CPU : DLDevice{static_cast<DLDeviceType>(in.u8()), in.u8()};
    t.shape = shape.empty() ? (in.u8() % 2 ? nullptr : reinterpret_cast<int64_t *>(16)) : shape.data();
    if (shape.empty()) t.shape = nullptr;
    size_t bytes = numel >= 0 && numel < (1 << 16) ? static_cast<size_t>(numel) * 16 + 16 : 0;
    t.byte_offset = bytes && in.u8() % 4 == 0 ? in.u8() % 8 : 0;
    data.assign(bytes + 8, 0);
    t.data = bytes ? data.data() : nullptr;
    t.strides = nullptr;
    if (nd > 0 && in.u8() % 4 == 0) {  // strides that overflow for sure (a dim of extent >= 2)
      strides.assign(static_cast<size_t>(nd), 1);
      for (int d = 0; d < nd; ++d)
        if (shape[d] >= 2) strides[d] = in.u8() % 2 ? INT64_MAX : INT64_MIN;
      t.strides = strides.data();
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  if (lm_init(argc, argv) != LM_SUCCESS || lm_comm_world(&g_comm) != LM_SUCCESS) abort();
  int64_t one[1] = {1};
  if (lm_mesh_create(&g_mesh, g_comm, 1, one, nullptr) != LM_SUCCESS) abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  In in{data, size};
  std::deque<Tensor> buffers;  // destroyed last, after the cleanup of the tensors borrowing them
  std::vector<lm_mesh_t> meshes{nullptr, g_mesh};
  std::vector<lm_dist_tensor_t> tensors{nullptr};
  std::vector<lm_reshard_plan_t> plans{nullptr};
  std::vector<lm_mesh_t> live_meshes;
  std::vector<lm_dist_tensor_t> live_tensors;
  std::vector<lm_reshard_plan_t> live_plans;
  // Forged handles: random bits, and tagged values that look like handles of each kind.
  for (int k = 0; k < 2; ++k) {
    uint64_t forged = static_cast<uint64_t>(in.i64()) | (k ? (uint64_t(1) << 63) : 0);
    meshes.push_back(reinterpret_cast<lm_mesh_t>(forged | (uint64_t(1) << 56)));
    tensors.push_back(reinterpret_cast<lm_dist_tensor_t>(forged));
    plans.push_back(reinterpret_cast<lm_reshard_plan_t>(forged));
  }
  auto pick_mesh = [&]() { return meshes[in.u8() % meshes.size()]; };
  auto pick_tensor = [&]() { return tensors[in.u8() % tensors.size()]; };
  auto pick_plan = [&]() { return plans[in.u8() % plans.size()]; };
  auto add_tensor = [&](lm_dist_tensor_t t) {
    if (!t) return;
    tensors.push_back(t);
    live_tensors.push_back(t);
  };
  for (int step = 0; step < 24 && in.n; ++step) {
    lm_placement_t pl[4] = {placement(in), placement(in), placement(in), placement(in)};
    lm_placement_t *plp = in.u8() % 8 ? pl : nullptr;
    // Extents: small (what gets allocated stays tiny), negative, or so huge (>= 2^59) that any
    // non-empty shape is refused before allocating; read up to ndim (<= 63) entries.
    int64_t shp[64] = {in.num(), in.num(), in.num(), in.num()};
    for (int k = 0; k < 4; ++k)
      if (shp[k] > 7) shp[k] = in.u8() % 2 ? (shp[k] & 7) : (shp[k] | (int64_t(1) << 59));
    int n = static_cast<int>(in.num());
    // A borrowed buffer (from_local with LM_FROM_LOCAL_BORROW) must outlive its tensor, which
    // may live until the cleanup below: each step's buffer stays until the input is done.
    Tensor &tt = buffers.emplace_back();
    switch (in.u8() % 22) {
      case 0: {  // mesh create: bad shapes, configs, communicators
        lm_mesh_t m = nullptr;
        lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
        int ranks[2] = {static_cast<int>(in.num()), 0};
        const char *names[2] = {in.u8() % 2 ? "x" : "", nullptr};
        if (in.u8() % 2) cfg.magic = static_cast<uint32_t>(in.i64());
        if (in.u8() % 2) cfg.size = static_cast<size_t>(in.u8());
        if (in.u8() % 2) { cfg.ranks = ranks; cfg.nranks = static_cast<int>(in.num()); }
        if (in.u8() % 2) cfg.dim_names = names;
        int comm = in.u8() % 4 ? g_comm : static_cast<int>(in.num());
        int nd = in.u8() % 4 ? 1 : static_cast<int>(in.num());
        int64_t one[1] = {in.u8() % 4 ? 1 : in.num()};
        lm_status_t s = lm_mesh_create(in.u8() % 8 ? &m : nullptr, comm, nd > 1 ? 1 : nd, one,
                                       in.u8() % 2 ? &cfg : nullptr);
        check(s);
        if (m) { meshes.push_back(m); live_meshes.push_back(m); }
        break;
      }
      case 1: {  // mesh queries
        lm_mesh_t m = pick_mesh();
        int i = 0;
        int64_t c[4];
        char buf[16];
        check(lm_mesh_ndim(m, &i));
        check(lm_mesh_shape(m, c, n > 4 ? 4 : n));
        check(lm_mesh_size(m, &i));
        check(lm_mesh_is_member(m, &i));
        check(lm_mesh_coord(m, c, n > 4 ? 4 : n));
        check(lm_mesh_rank(m, &i));
        check(lm_mesh_rank_at(m, shp, n > 4 ? 4 : n, &i));
        check(lm_mesh_dim_index(m, in.u8() % 2 ? "x" : nullptr, &i));
        check(lm_mesh_dim_name(m, n, buf, in.u8() % 2 ? sizeof buf : 0));
        check(lm_mesh_dim_comm(m, n, &i));
        check(lm_mesh_comm(m, nullptr));
        break;
      }
      case 2: {  // destroy a mesh (live, stale, forged, borrowed)
        size_t k = in.u8() % meshes.size();
        lm_mesh_t m = meshes[k];
        if (m == g_mesh) break;
        check(lm_mesh_destroy(&m));
        break;
      }
      case 3: {
        lm_dist_tensor_t t = nullptr;
        check(lm_dist_tensor_zeros(in.u8() % 8 ? &t : nullptr, pick_mesh(), static_cast<int>(n % 6),
                                   shp, dtype(in), LM_CPU, plp));
        add_tensor(t);
        break;
      }
      case 4: {
        lm_dist_tensor_t t = nullptr;
        tt.make(in);
        check(lm_dist_tensor_from_local(&t, pick_mesh(), in.u8() % 8 ? &tt.t : nullptr, plp,
                                        static_cast<lm_shape_mode_t>(in.u8() % 4 == 0 ? n : n & 1),
                                        in.u8() % 2 ? tt.t.shape : shp, static_cast<unsigned>(in.u8() % 3)));
        add_tensor(t);
        break;
      }
      case 5: {
        lm_dist_tensor_t t = nullptr;
        tt.make(in);
        check(lm_dist_tensor_from_global(&t, pick_mesh(), in.u8() % 8 ? &tt.t : nullptr, plp,
                                         static_cast<int>(in.u8() % 4 ? -1 : n)));
        add_tensor(t);
        break;
      }
      case 6: {
        tt.make(in);
        check(lm_dist_tensor_gather(pick_tensor(), static_cast<int>(in.u8() % 2 ? -1 : n),
                                    in.u8() % 8 ? &tt.t : nullptr));
        break;
      }
      case 7: {  // accessors
        lm_dist_tensor_t t = pick_tensor();
        lm_mesh_t m = nullptr;
        int i;
        DLDataType dt;
        DLDevice dev;
        lm_placement_t p4[4];
        int64_t s4[4];
        DLTensor v;
        check(lm_dist_tensor_mesh(t, &m));
        if (m) meshes.push_back(m);  // borrowed: destroying it must be refused
        check(lm_dist_tensor_ndim(t, &i));
        check(lm_dist_tensor_dtype(t, &dt));
        check(lm_dist_tensor_device(t, &dev));
        check(lm_dist_tensor_placements(t, p4, n > 4 ? 4 : n));
        check(lm_dist_tensor_global_shape(t, s4, n > 4 ? 4 : n));
        check(lm_dist_tensor_local_shape(t, s4, n > 4 ? 4 : n));
        check(lm_dist_tensor_local_offset(t, s4, n > 4 ? 4 : n));
        check(lm_dist_tensor_local(t, in.u8() % 8 ? &v : nullptr));
        break;
      }
      case 8: {
        DLManagedTensor *mt = nullptr;
        check(lm_dist_tensor_to_dlpack(pick_tensor(), &mt));
        if (mt) mt->deleter(mt);
        break;
      }
      case 9: {  // retain then destroy twice, or a destroy of anything
        lm_dist_tensor_t t = pick_tensor();
        if (in.u8() % 2 && lm_dist_tensor_retain(t) == LM_SUCCESS) check(lm_dist_tensor_destroy(&t));
        else check(lm_dist_tensor_destroy(&t));
        break;
      }
      case 10: {
        lm_dist_tensor_t t = nullptr;
        check(lm_dist_tensor_reshard(in.u8() % 8 ? &t : nullptr, pick_tensor(),
                                     in.u8() % 2 ? nullptr : pick_mesh(), plp));
        add_tensor(t);
        break;
      }
      case 11: {
        lm_reshard_plan_t p = nullptr;
        check(lm_reshard_plan_create(&p, pick_mesh(), plp, in.u8() % 2 ? nullptr : pick_mesh(),
                                     in.u8() % 2 ? pl + 1 : plp, static_cast<int>(n % 6), shp,
                                     dtype(in)));
        if (p) { plans.push_back(p); live_plans.push_back(p); }
        break;
      }
      case 12: {
        lm_dist_tensor_t t = nullptr;
        check(lm_reshard_plan_alloc_target(in.u8() % 8 ? &t : nullptr, pick_plan(), LM_CPU));
        add_tensor(t);
        break;
      }
      case 13: {
        check(lm_reshard_plan_execute(pick_plan(), pick_tensor(), pick_tensor()));
        break;
      }
      case 14: {
        lm_request_t r = nullptr;
        check(lm_reshard_plan_start(&r, pick_plan(), pick_tensor(), pick_tensor()));
        lm_request_t stale = r;
        int done = 0;
        if (in.u8() % 2) check(lm_request_test(&r, &done));
        check(lm_request_wait(&r));
        check(lm_request_wait(&stale));  // stale after completion (or NULL)
        break;
      }
      case 15: {
        lm_reshard_plan_t p = pick_plan();
        lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
        char buf[32];
        check(lm_reshard_plan_info(p, 0, in.u8() % 8 ? &info : nullptr));
        check(lm_reshard_plan_describe(p, buf, in.u8() % 4 ? sizeof buf : 0));
        if (in.u8() % 4 == 0) check(lm_reshard_plan_destroy(&p));
        break;
      }
      case 16: {  // local_map with hostile arguments (fn never gets called with garbage)
        lm_arg_t args[3], outs[2];
        for (auto &a : args) {
          a = lm_arg_t{};
          a.kind = static_cast<int32_t>(in.u8() % 4 ? in.u8() % 6 : in.num());
          a.ptr = a.kind == LM_ARG_DIST_TENSOR ? static_cast<void *>(pick_tensor()) : nullptr;
        }
        const lm_placement_t *ip[3] = {nullptr, plp, nullptr};
        const lm_placement_t *op[2] = {in.u8() % 2 ? plp : nullptr, nullptr};
        auto fn = [](void *, lm_mesh_t, int, const lm_arg_t *, int nout, lm_arg_t *out) -> lm_status_t {
          for (int j = 0; j < nout; ++j) out[j].kind = LM_ARG_INT64;
          return LM_SUCCESS;
        };
        int nin = in.u8() % 4 ? in.u8() % 4 : static_cast<int>(in.num());
        int nout = in.u8() % 4 ? in.u8() % 3 : static_cast<int>(in.num());
        // Counts the arrays can hold, or absurd ones the library must refuse before any access.
        auto fit = [](int v, int cap) { return v < 0 || v > LM_LOCAL_MAP_MAX_ARGS ? v : v > cap ? cap : v; };
        nin = fit(nin, 3);
        nout = fit(nout, 2);
        lm_status_t s = lm_local_map(in.u8() % 8 ? +fn : nullptr, nullptr, nin, args,
                                     in.u8() % 2 ? ip : nullptr, nout, op,
                                     nullptr, in.u8() % 2 ? nullptr : pick_mesh(),
                                     static_cast<unsigned>(in.u8() % 8), outs);
        check(s);
        if (s == LM_SUCCESS)
          for (int j = 0; j < nout; ++j)
            if (outs[j].kind == LM_ARG_DIST_TENSOR) add_tensor(static_cast<lm_dist_tensor_t>(outs[j].ptr));
        break;
      }
      case 17: {
        int64_t o, l;
        check(lm_layout_chunk(in.num(), in.num(), in.num(), in.u8() % 8 ? &o : nullptr, &l));
        char buf[64];
        check(lm_placements_format(plp, n >= 0 && n <= 64 ? n % 5 : n, buf, in.u8() % 4 ? sizeof buf : 0));
        (void)lm_status_string(static_cast<lm_status_t>(n));
        int sup;
        check(lm_device_supported(static_cast<DLDeviceType>(n), &sup));
        break;
      }
      case 18: {  // lm_tensor_alloc, then lm_dist_tensor_from_dlpack takes it (or not)
        DLManagedTensor *mt = nullptr;
        DLDevice dev = in.u8() % 8 ? LM_CPU : DLDevice{static_cast<DLDeviceType>(in.u8()), in.u8()};
        int nd = in.u8() % 4 ? static_cast<int>(n % 6) : static_cast<int>(in.num());
        check(lm_tensor_alloc(in.u8() % 8 ? &mt : nullptr, nd, in.u8() % 8 ? shp : nullptr,
                              dtype(in), dev));
        if (!mt) break;
        lm_dist_tensor_t t = nullptr;
        lm_status_t s = lm_dist_tensor_from_dlpack(in.u8() % 8 ? &t : nullptr, pick_mesh(), mt, plp,
                                                    static_cast<lm_shape_mode_t>(n & 1),
                                                    in.u8() % 2 ? mt->dl_tensor.shape : shp);
        check(s);
        if (s == LM_SUCCESS) add_tensor(t);  // the tensor owns mt now
        else mt->deleter(mt);                // on failure ownership stays here
        break;
      }
      case 19: {  // device config, transport query, pool stats, messages, version, world rank
        lm_mesh_t m = pick_mesh();
        lm_device_config_t dc = LM_DEVICE_CONFIG_INIT;
        check(lm_mesh_device_config(m, in.u8() % 8 ? &dc : nullptr));
        if (in.u8() % 2) dc.size = static_cast<size_t>(in.u8());
        if (in.u8() % 4 == 0) dc.magic = static_cast<uint32_t>(in.i64());
        if (in.u8() % 4 == 0) dc.alloc = [](void *, size_t, int, void *) -> void * { return nullptr; };
        check(lm_mesh_set_device_config(m, in.u8() % 8 ? &dc : nullptr));
        check(lm_mesh_set_device_config(m, nullptr));  // back to the defaults
        int tr = 0;
        check(lm_mesh_transport(m, static_cast<DLDeviceType>(in.u8() % 4 ? kDLCPU : n), in.u8() % 8 ? &tr : nullptr));
        int64_t use = 0, peak = 0;
        check(lm_pool_stats(in.u8() % 8 ? &use : nullptr, &peak, in.u8() % 2));
        char msg[8] = {'m', 's', 'g', 0};
        lm_set_error_message(in.u8() % 2 ? msg : nullptr);
        if (lm_get_version() != LM_VERSION_CODE) abort();
        int r = -1, sz = 0;
        check(lm_world_rank(in.u8() % 8 ? &r : nullptr, &sz));
        break;
      }
      default: {  // destroy a live tensor or plan (then its handle is stale in the pool)
        if (!live_tensors.empty() && in.u8() % 2) {
          size_t k = in.u8() % live_tensors.size();
          check(lm_dist_tensor_destroy(&live_tensors[k]));
          live_tensors.erase(live_tensors.begin() + static_cast<long>(k));
        } else if (!live_plans.empty()) {
          size_t k = in.u8() % live_plans.size();
          check(lm_reshard_plan_destroy(&live_plans[k]));
          live_plans.erase(live_plans.begin() + static_cast<long>(k));
        }
        break;
      }
    }
  }
  // Clean up what is still live (destroys above may already have killed some: refused, fine).
  for (auto &t : live_tensors) (void)lm_dist_tensor_destroy(&t);
  for (auto &p : live_plans) (void)lm_reshard_plan_destroy(&p);
  for (auto &m : live_meshes) (void)lm_mesh_destroy(&m);
  return 0;
}
