// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/persistent.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "common/handle.hpp"
#include "common/settings.hpp"
#include "exec/device_run.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "transport/failure.hpp"
#include "tensor/group.hpp"
#include "tensor/ops.hpp"

namespace lm {

ReshardArgs check_reshard_args(lm_mesh_t src_mesh, const lm_placement_t *src_pl,
                               lm_mesh_t dst_mesh, const lm_placement_t *dst_pl, int ndim,
                               const int64_t *gshape, DLDataType dtype, const char *fn) {
  ReshardArgs a;
  a.sm = mesh_check(src_mesh, strfmt("%s: src_mesh", fn).c_str());
  a.dm = dst_mesh ? mesh_check(dst_mesh, strfmt("%s: dst_mesh", fn).c_str()) : a.sm;
  Shape g = check_shape(ndim, gshape, strfmt("%s: global_shape", fn).c_str());
  dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  a.comm = transfer_comm(a.sm, a.dm, fn);
  a.src = make_layout(a.sm, src_pl, g, strfmt("%s: src_placements", fn).c_str());
  a.dst = make_layout(a.dm, dst_pl, g, strfmt("%s: dst_placements", fn).c_str());
  return a;
}

namespace {

// A plan object from sm's layout S to dm's layout D over comm, holding both meshes.
lm_reshard_plan_s *new_plan(lm_mesh_s *sm, lm_mesh_s *dm, const Layout &S, const Layout &D,
                            DLDataType dtype, MPI_Comm comm, bool keep_buffers) {
  auto p = std::make_unique<lm_reshard_plan_s>();
  p->plan = plan_build(S, D, dtype, comm, sm->world_rank);
  p->plan->keep_buffers = keep_buffers;
  mesh_retain(sm);
  p->src_mesh = sm;
  mesh_retain(dm);
  p->dst_mesh = dm;
  return p.release();
}

}  // namespace

lm_reshard_plan_s *plan_create(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                               const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                               DLDataType dtype, const char *fn) {
  ReshardArgs a = check_reshard_args(src_mesh, src_pl, dst_mesh, dst_pl, ndim, gshape, dtype, fn);
  // Opt-in: keep intermediate and staging buffers from one execution to the next.
  return new_plan(a.sm, a.dm, a.src, a.dst, dtype, a.comm, setting_on(Setting::PlanKeepBuffers));
}

lm_reshard_plan_s *plan_adjoint(lm_reshard_plan_s *p) {
  const char *fn = "lm_reshard_plan_adjoint";
  const Layout &S = p->plan->src, &D = p->plan->dst;
  std::vector<lm_placement_t> gs = placements_adjoint(S.pl.data(), S.mesh_ndim(),
                                                      strfmt("%s: the plan's source placements", fn).c_str());
  std::vector<lm_placement_t> gd = placements_adjoint(D.pl.data(), D.mesh_ndim(),
                                                      strfmt("%s: the plan's target placements", fn).c_str());
  lm_mesh_s *sm = p->dst_mesh, *dm = p->src_mesh;  // backward: target mesh -> source mesh
  // Copies keep ragged extents whose ids may be gone by now.
  Layout GD = D, GS = S;
  GD.pl = gd;
  GS.pl = gs;
  GD.derive();
  GS.derive();
  return new_plan(sm, dm, GD, GS, p->plan->dtype, transfer_comm(sm, dm, fn),
                  p->plan->keep_buffers);
}

lm_reshard_plan_s *plan_check(lm_reshard_plan_t h, const char *what) {
  return handle_object<lm_reshard_plan_s>(h, HandleKind::Plan, what, "plan", "lm_reshard_plan_t");
}

lm_reshard_plan_t plan_wrap(lm_reshard_plan_s *p) {
  return handle_wrap_owned(p, HandleKind::Plan);
}

void plan_destroy_handle(lm_reshard_plan_t *h, const char *what) {
  lm_reshard_plan_s *p = plan_check(*h, what);
  if (p->in_flight)
    fail(LM_ERR_INVALID_USAGE, "%s: a request is in flight; wait for it", what);
  void *obj = nullptr;
  if (handle_drop(*h, HandleKind::Plan, &obj) != DropResult::Died)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: plan is not a live lm_reshard_plan_t", what);
  *h = nullptr;
  delete static_cast<lm_reshard_plan_s *>(obj);
}

lm_dist_tensor_s *plan_alloc_target(lm_reshard_plan_s *p, DLDevice device) {
  check_device(device, "lm_reshard_plan_alloc_target: device");
  return tensor_new(p->dst_mesh, p->plan->dst, p->plan->dtype, device, true);
}

// Whether t fits the side `role` (0: source, 1: target) of plan p: its mesh, layout, dtype and
// memory kind. A tensor's are fixed from its creation and a plan's from its own, so a match is
// remembered in t (the plan's serial, never reused) and not compared again: a group of 64
// tensors otherwise spends most of its checks fetching their layouts' vectors.
static void check_matches(const lm_dist_tensor_s *t, const lm_reshard_plan_s *p, int role,
                          const char *fn, int index) {
  const uint64_t serial = p->plan->serial;
  if (t->matched[role].load(std::memory_order_relaxed) == serial) return;
  const lm_mesh_s *mesh = role ? p->dst_mesh : p->src_mesh;
  const Layout &L = role ? p->plan->dst : p->plan->src;
  const DLDataType dtype = p->plan->dtype;
  auto arg = [&] { return ArgName::entry(role ? "dst" : "src", index); };  // on failure only
  LM_CHECK_ARG(t->mesh == mesh || t->mesh->grid->same_as(*mesh->grid),
               "%s: %s lives on another mesh than the plan's", fn, arg().c_str());
  LM_CHECK_ARG(t->layout.equals(L), "%s: %s has layout %s, the plan expects %s", fn,
               arg().c_str(), t->layout.str().c_str(), L.str().c_str());
  LM_CHECK_ARG(dtype_equal(t->dtype, dtype), "%s: %s has dtype %s, the plan %s", fn,
               arg().c_str(), dl_dtype_name(t->dtype).c_str(), dl_dtype_name(dtype).c_str());
  LM_CHECK_ARG(t->device.device_type == kDLCPU || is_device(t->device),
               "%s: %s is neither host (kDLCPU) nor CUDA (kDLCUDA) memory", fn, arg().c_str());
  t->matched[role].store(serial, std::memory_order_relaxed);
}

void plan_check_tensors(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                        const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso) {
  LM_CHECK_ARG(p->in_flight == nullptr, "%s: the plan already has a request in flight", fn);
  mesh_check_usable(p->src_mesh, fn);
  if (p->dst_mesh != p->src_mesh) mesh_check_usable(p->dst_mesh, fn);
  plan_check_pair(p, src, dst, fn, so, dso, -1);
}

void plan_check_pair(const lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                     const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso, int index) {
  // The arguments' names, formatted on a failure only: "src" and "dst", or "src[i]" and "dst[i]".
  auto sn = [&] { return ArgName::entry("src", index); };
  auto dn = [&] { return ArgName::entry("dst", index); };
  lm_dist_tensor_s *s = static_cast<lm_dist_tensor_s *>(handle_get(src, HandleKind::Tensor));
  lm_dist_tensor_s *d = static_cast<lm_dist_tensor_s *>(handle_get(dst, HandleKind::Tensor));
  LM_CHECK_ARG(s != nullptr, "%s: %s is NULL or not a live lm_dist_tensor_t", fn, sn().c_str());
  LM_CHECK_ARG(d != nullptr, "%s: %s is NULL or not a live lm_dist_tensor_t", fn, dn().c_str());
  *so = s;
  *dso = d;
  check_matches(s, p, 0, fn, index);
  check_matches(d, p, 1, fn, index);
  LM_CHECK_ARG(s != d, "%s: %s and %s are the same tensor", fn, sn().c_str(), dn().c_str());
  LM_CHECK_ARG(s->device.device_type == d->device.device_type,
               "%s: %s lives on device type %d, %s on %d: both host or both CUDA", fn,
               sn().c_str(), (int)s->device.device_type, dn().c_str(),
               (int)d->device.device_type);
  // Any overlap of the two shards' bytes (two tensors may borrow one buffer): the copy would read
  // what it already overwrote.
  const uintptr_t sp = (uintptr_t)s->base(), dp = (uintptr_t)d->base();
  const size_t sb = s->span_bytes(), db = d->span_bytes();
  if (sp && dp && sb && db && sp < dp + db && dp < sp + sb)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: %s's memory overlaps %s's (bytes [%p, +%zu) and "
         "[%p, +%zu) on rank %d)", fn, dn().c_str(), sn().c_str(), d->base(), db, s->base(), sb,
         world_rank_or_minus1());
}

namespace {
std::string describe_plan(const void *p, int field) {
  const lm_reshard_plan_s &c = *static_cast<const lm_reshard_plan_s *>(p);
  switch (field) {
    case 1: return mesh_desc(c.src_mesh) + " (source)";
    case 2: return mesh_desc(c.dst_mesh) + " (target)";
    case 3: return c.plan->src.desc();
    case 4: return c.plan->dst.desc();
    case 5: {
      std::string r = "[";
      for (size_t i = 0; i < c.plan->src.gshape.size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)c.plan->src.gshape[i]);
      return r + "]";
    }
    case 6: return dl_dtype_name(c.plan->dtype);
  }
  return "?";
}

// The exchange fused with the agreement round (transport/select.hpp): a small host plan whose
// agreement set shares one node (same mesh), or agrees by messages (also across meshes). Decided
// once per plan (Plan::fused_exchange), from the plan and the agreed settings alone, so every
// rank with the same plan decides alike; each round then checks that every rank packed (one
// more MAX), else all take the transport.
FusedExchange *fused_exchange(lm_reshard_plan_s *p) {
  return p->agree ? p->plan->fused_exchange(p->agree, p->src_mesh != p->dst_mesh) : nullptr;
}

struct FusedPack {
  FusedExchange *fx;  // the plan that runs' (a padded variant packs from the padded array)
  const void *in;
};
void fused_pack(void *ctx, char *bank) {
  const FusedPack &f = *static_cast<const FusedPack *>(ctx);
  f.fx->pack(f.in, bank);
}

// Checks src/dst against the plan and, at LM_CHECK >= 1, agrees with the other ranks taking part
// on the plan (meshes, layouts, shape, dtype) before any data moves. Returns whether this rank
// takes part at all. board (blocking executions; NULL otherwise): set when the agreement round
// also moved the data (the board exchange): the caller then only copies it out (board_unpack).
// *run: the plan to run, p's or its variant for padded shards, or p's on compact stand-ins kept
// in cs (*so and *dso are then the stand-ins): CompactShards::plan_for.
bool plan_prepare(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                  const char *fn, CompactShards &cs, lm_dist_tensor_s **so,
                  lm_dist_tensor_s **dso, Plan **run, bool *board = nullptr) {
  auto check = [&] {
    plan_check_tensors(p, src, dst, fn, so, dso);
    *run = cs.plan_for(*p->plan, so, dso);
  };
  if (board) *board = false;
  const int level = check_level(p->src_mesh, p->dst_mesh);
  // At level 0 no agreement runs before the data moves, except where the data moves with it:
  // a blocking same-mesh plan that can take the board exchange runs the round anyway (the
  // failure-only agreement; it is the transfer's own synchronisation).
  const bool board_round = level == 0 && board && p->plan->involved &&
                           p->src_mesh == p->dst_mesh &&
                           (p->agree || (p->agree = collective_comm(p->src_mesh, p->dst_mesh))) &&
                           p->agree->board && fused_exchange(p);
  if ((level == 0 && !board_round) || !p->plan->involved) {
    check();
    return p->plan->involved;
  }
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    check();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", fn);
  } catch (const Error &e) {
    // A broken mesh joins the agreement with its failure too (as every collective call does), so
    // that no rank waits for it; a mesh broken by a deadline fails at once in agree().
    st = e.status();
    err = e.message();
  }
  if (!p->agree) p->agree = collective_comm(p->src_mesh, p->dst_mesh);
  // The operation: execute and start differ (a blocking execution may take the node-local path
  // or the board exchange, a nonblocking one never does, so they cannot meet).
  Fingerprint fp(fn);
  fp.add("source mesh", p->src_mesh->id);
  fp.add("target mesh", p->dst_mesh->id);
  fp.add("source placements", hash_placements(p->plan->src.pl.data(), p->plan->src.mesh_ndim()));
  fp.add("target placements", hash_placements(p->plan->dst.pl.data(), p->plan->dst.mesh_ndim()));
  fp.add("global shape", hash_shape(p->plan->src.gshape.data(), p->plan->src.ndim()));
  fp.add("dtype", hash_dtype(p->plan->dtype));
  AgreeArgs a;
  a.fn = fn;
  a.ac = p->agree;
  a.fp = level >= 1 ? &fp : nullptr;
  a.describe = describe_plan;
  a.ctx = p;
  a.local = st;
  a.err = &err;
  a.parent_rank = p->src_mesh->world_rank;
  a.mesh_rank = p->src_mesh == p->dst_mesh ? p->src_mesh->index : -1;
  a.timeout = call_timeout(p->src_mesh, p->dst_mesh);
  // The fused exchange: every rank says whether it packed its sends into its outbox (MAX of
  // both `yes` and `-yes`: all did only when the maxima are 1 and -1).
  FusedPack pack{nullptr, nullptr};
  long long yes[2] = {0, 0};
  if (board && st == LM_SUCCESS && !is_device((*so)->device) && fused_exchange(p) &&
      (!p->agree->by_messages || a.timeout <= 0) &&  // (by messages: never with a deadline)
      (pack.fx = (*run)->fused_exchange(p->agree))) {
    pack.in = (*so)->base();
    a.publish = fused_pack;
    a.publish_ctx = &pack;
    yes[0] = 1;
    yes[1] = -1;
  }
  // By messages every rank with the exchange gives its room to the round (the plan's own, or
  // the variant's it packed into: then it unpacks from there).
  if (p->agree->by_messages && board && fused_exchange(p))
    a.ride = pack.fx ? pack.fx->ride() : fused_exchange(p)->ride();
  if (p->agree->board || p->agree->by_messages) {  // the same on every rank of the set
    a.maxes = yes;
    a.nmax = 2;
  }
  agree_meshes(a, p->src_mesh, p->dst_mesh);
  if (board) *board = yes[0] == 1 && yes[1] == -1;
  if (level >= 2 && p->src_mesh->member) check_replicas(*so, fn);
  return true;
}
}  // namespace

FusedExchange *plan_fused(lm_reshard_plan_s *p) {
  if (p->src_mesh != p->dst_mesh || !p->plan->involved) return nullptr;
  if (!p->agree) p->agree = collective_comm(p->src_mesh, p->dst_mesh);
  if (p->agree->board) return fused_exchange(p);  // (at every level, with a deadline too)
  if (!p->agree->by_messages || check_level(p->src_mesh, p->dst_mesh) == 0 ||
      call_timeout(p->src_mesh, p->dst_mesh) > 0)
    return nullptr;
  return fused_exchange(p);
}

bool plan_takes_board(lm_reshard_plan_s *p) {
  if (p->src_mesh != p->dst_mesh) return false;  // (and finding a union's channel may be collective)
  if (!p->agree) p->agree = collective_comm(p->src_mesh, p->dst_mesh);
  return p->agree->board && fused_exchange(p) != nullptr;  // (the message exchange: MPI)
}

void plan_execute(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst) {
  const char *fn = "lm_reshard_plan_execute";
  lm_dist_tensor_s *s = nullptr, *d = nullptr;
  Plan *run = nullptr;
  bool board = false;
  CompactShards cs;
  if (!plan_prepare(p, src, dst, fn, cs, &s, &d, &run, &board)) return;
  if (board) {  // the round moved the data: copy it out (memory reads, nothing to fail)
    run->fused_exchange(p->agree)->unpack(s->base(), d->base());
  } else {
    try {
      TimeoutScope ts(call_timeout(p->src_mesh, p->dst_mesh));
      if (is_device(s->device))
        device_run_plan(p->src_mesh, p->dst_mesh, *p->plan, s->data(), s->local_bytes(),
                        d->data(), d->local_bytes(), s->device.device_id);
      else {
        run->use(run->host_spec());
        run->run(s->base(), d->base());
      }
    } catch (const Error &e) {
      run->abandon();
      mesh_break(p->src_mesh, e, p->dst_mesh);
    }
  }
  cs.finish();  // the targets' stand-ins back into their padded tensors
}

lm_request_s *plan_start(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                         const char *fn) {
  lm_dist_tensor_s *s = nullptr, *d = nullptr;
  Plan *run = nullptr;
  auto cs = std::make_unique<CompactShards>();
  if (!plan_prepare(p, src, dst, fn, *cs, &s, &d, &run)) return nullptr;
  auto r = std::make_unique<lm_request_s>();
  if (!cs->empty()) r->compact = std::move(cs);  // copied back into dst at completion
  r->plan = p;
  r->run = run;
  tensor_retain(s);
  r->src = s;
  tensor_retain(d);
  r->dst = d;
  try {
    // (The deadline also decides, at a plan's first execution, whether its even host steps may
    // run as MPI collectives: transport/mpi/mpi.hpp.)
    TimeoutScope ts(call_timeout(p->src_mesh, p->dst_mesh));
    if (is_device(s->device)) {
      r->dev = device_plan_start(p->src_mesh, p->dst_mesh, *p->plan, s->data(), s->local_bytes(),
                                 d->data(), d->local_bytes(), s->device.device_id);
    } else {
      run->use(run->host_spec());
      run->start(s->base(), d->base());
    }
  } catch (const Error &e) {
    run->abandon();
    if (r->dev) device_plan_abandon(*r->dev);
    mesh_break(p->src_mesh, e, p->dst_mesh);
  }
  p->in_flight = r.get();
  p->src_mesh->in_flight = true;
  p->dst_mesh->in_flight = true;
  return r.release();
}

namespace {
// The request is over (completed or failed): its plan and meshes are free again.
void request_end(lm_request_s *r) {
  r->plan->src_mesh->in_flight = r->plan->dst_mesh->in_flight = false;
  r->plan->in_flight = nullptr;
}
}  // namespace

bool request_progress(lm_request_s *r, bool block) {
  if (r->group) return group_request_progress(r, block);
  lm_reshard_plan_s *p = r->plan;
  if (!mpi_alive()) {  // Rust Drop and Fortran finalizers may wait on a request this late
    request_end(r);
    r->run->abandon();
    if (r->dev) device_plan_abandon(*r->dev);
    fail(LM_ERR_INVALID_USAGE, "lm_request_wait/test: MPI was finalized before the request "
         "completed; it is dropped (its target holds undefined data)");
  }
  bool done;
  try {
    TimeoutScope ts(call_timeout(p->src_mesh, p->dst_mesh));
    // Later rounds of a device plan launch kernels and NCCL groups: on the tensor's device.
    std::optional<CurrentDevice> on;
    if (is_device(r->src->device)) on.emplace(r->src->device.device_id);
    done = r->run->progress(block);
    if (done && r->dev) device_plan_finish(*r->dev, *p->plan);
  } catch (const Error &e) {
    request_end(r);
    r->run->abandon();
    if (r->dev) device_plan_abandon(*r->dev);
    mesh_break(p->src_mesh, e, p->dst_mesh);
  }
  if (!done) return false;
  request_end(r);
  if (r->compact) r->compact->finish();
  return true;
}

lm_request_s *request_check(lm_request_t h, const char *what) {
  LM_CHECK_ARG(h != nullptr, "%s: request is NULL", what);
  void *r = handle_get(h, HandleKind::Request);
  LM_CHECK_ARG(r != nullptr, "%s: request is not a live lm_request_t", what);
  return static_cast<lm_request_s *>(r);
}

lm_request_t request_wrap(lm_request_s *r) {
  try {
    return handle_as<lm_request_s>(handle_new(HandleKind::Request, r, true));
  } catch (...) {
    std::unique_ptr<lm_request_s> own(r);
    request_progress(r, true);  // the transfer was started: finish it before freeing its buffers
    throw;
  }
}

void request_free_handle(lm_request_t *h, lm_request_s *r) {
  handle_kill(reinterpret_cast<uintptr_t>(*h));
  *h = nullptr;
  delete r;
}

}  // namespace lm

lm_reshard_plan_s::~lm_reshard_plan_s() {
  plan.reset();
  lm::mesh_release(src_mesh);
  lm::mesh_release(dst_mesh);
  magic = lm::kDeadMagic;
}

lm_request_s::~lm_request_s() {
  lm::tensor_release(src);
  lm::tensor_release(dst);
  for (auto *t : tensors) lm::tensor_release(t);
  magic = lm::kDeadMagic;
}
