// SPDX-License-Identifier: BSD-3-Clause
#include "reshard/persistent.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/error.hpp"
#include "core/handle.hpp"
#include "reshard/boxcopy.hpp"
#include "transport/node.hpp"
#include "tensor/collective.hpp"
#include "tensor/ops.hpp"

namespace lm {

lm_reshard_plan_s *plan_create(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                               const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                               DLDataType dtype) {
  const char *fn = "lm_reshard_plan_create";
  lm_mesh_s *sm = mesh_check(src_mesh, strfmt("%s: src_mesh", fn).c_str());
  lm_mesh_s *dm = dst_mesh ? mesh_check(dst_mesh, strfmt("%s: dst_mesh", fn).c_str()) : sm;
  Shape g = check_shape(ndim, gshape, strfmt("%s: global_shape", fn).c_str());
  dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  MPI_Comm comm = transfer_comm(sm, dm, fn);
  Layout S = make_layout(sm, src_pl, g, strfmt("%s: src_placements", fn).c_str());
  Layout D = make_layout(dm, dst_pl, g, strfmt("%s: dst_placements", fn).c_str());
  auto p = std::make_unique<lm_reshard_plan_s>();
  p->plan = plan_build(S, D, dtype, comm, sm->world_rank);
  // Opt-in: keep intermediate and staging buffers from one execution to the next.
  static const bool keep = [] {
    const char *e = std::getenv("LM_PLAN_KEEP_BUFFERS");
    return e && e[0] == '1';
  }();
  p->plan->keep_buffers = keep;
  mesh_retain(sm);
  p->src_mesh = sm;
  mesh_retain(dm);
  p->dst_mesh = dm;
  return p.release();
}

lm_reshard_plan_s *plan_check(lm_reshard_plan_t h, const char *what) {
  LM_CHECK_ARG(h != nullptr, "%s: plan is NULL", what);
  void *p = handle_get(h, HandleKind::Plan);
  LM_CHECK_ARG(p != nullptr, "%s: plan is not a live lm_reshard_plan_t", what);
  return static_cast<lm_reshard_plan_s *>(p);
}

lm_reshard_plan_t plan_wrap(lm_reshard_plan_s *p) {
  try {
    return handle_as<lm_reshard_plan_s>(handle_new(HandleKind::Plan, p, true));
  } catch (...) {
    delete p;
    throw;
  }
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

static void check_matches(const lm_dist_tensor_s *t, lm_mesh_s *mesh, const Layout &L,
                          DLDataType dtype, const char *fn, const char *arg) {
  LM_CHECK_ARG(t->mesh == mesh || t->mesh->grid->same_as(*mesh->grid),
               "%s: %s lives on another mesh than the plan's", fn, arg);
  LM_CHECK_ARG(t->layout.equals(L), "%s: %s has layout %s, the plan expects %s", fn, arg,
               t->layout.str().c_str(), L.str().c_str());
  LM_CHECK_ARG(dtype_equal(t->dtype, dtype), "%s: %s has dtype %s, the plan %s", fn, arg,
               dl_dtype_name(t->dtype).c_str(), dl_dtype_name(dtype).c_str());
  LM_CHECK_ARG(t->device.device_type == kDLCPU || is_device(t->device),
               "%s: %s is neither host (kDLCPU) nor CUDA (kDLCUDA) memory", fn, arg);
}

// Checks src/dst against the plan (no allocation on success).
static void plan_check_tensors(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                               const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso) {
  lm_dist_tensor_s *s = static_cast<lm_dist_tensor_s *>(handle_get(src, HandleKind::Tensor));
  lm_dist_tensor_s *d = static_cast<lm_dist_tensor_s *>(handle_get(dst, HandleKind::Tensor));
  LM_CHECK_ARG(s != nullptr, "%s: src is NULL or not a live lm_dist_tensor_t", fn);
  LM_CHECK_ARG(d != nullptr, "%s: dst is NULL or not a live lm_dist_tensor_t", fn);
  *so = s;
  *dso = d;
  LM_CHECK_ARG(p->in_flight == nullptr, "%s: the plan already has a request in flight", fn);
  mesh_check_usable(p->src_mesh, fn);
  mesh_check_usable(p->dst_mesh, fn);
  check_matches(s, p->src_mesh, p->plan->src, p->plan->dtype, fn, "src");
  check_matches(d, p->dst_mesh, p->plan->dst, p->plan->dtype, fn, "dst");
  LM_CHECK_ARG(s != d, "%s: src and dst are the same tensor", fn);
  LM_CHECK_ARG(s->device.device_type == d->device.device_type,
               "%s: src lives on device type %d, dst on %d: both host or both CUDA", fn,
               (int)s->device.device_type, (int)d->device.device_type);
  if (s->storage && d->storage && s->storage == d->storage && s->local_bytes() && d->local_bytes())
    fail(LM_ERR_INVALID_ARGUMENT, "%s: dst shares memory with src", fn);
}

namespace {
std::string describe_plan(const void *p, int field) {
  const lm_reshard_plan_s &c = *static_cast<const lm_reshard_plan_s *>(p);
  switch (field) {
    case 1: return mesh_desc(c.src_mesh) + " (source)";
    case 2: return mesh_desc(c.dst_mesh) + " (target)";
    case 3: return c.plan->src.str();
    case 4: return c.plan->dst.str();
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

// ---- The board exchange (transport/node.hpp): a small same-mesh plan of one exchange step, every
// rank of its set on one node with the agreement board and outboxes: the agreement round carries
// the data. Whether a plan may go this way depends on the plan and the settings alone, so every
// rank with the same plan decides alike; the round itself checks that every rank did (one more
// MAX), else all take the MPI path.
bool board_capable(lm_reshard_plan_s *p) {
  if (p->board >= 0) return p->board == 1;
  p->board = 0;
  const Plan &pl = *p->plan;
  AgreeComm *ac = p->agree;
  if (!ac || ac->outbox.empty() || p->src_mesh != p->dst_mesh || pl.steps.size() != 1 ||
      pl.steps[0]->kind != StepKind::kExchange)
    return false;
  uint64_t bytes = pl.esize;
  for (int64_t e : pl.src.gshape) bytes *= (uint64_t)e;
  if (bytes > (uint64_t)ac->size * board_exchange_bytes()) return false;
  // What this rank sends must fit its bank (a rank that cannot says so in the round).
  size_t need = ((size_t)ac->size * 16 + 63) / 64 * 64;
  for (const Msg &m : pl.steps[0]->sends) need += (m.bytes + 63) / 64 * 64;
  if (need > ac->outbox_bank) return false;
  int n = 0;
  if (MPI_Comm_size(pl.comm, &n) != MPI_SUCCESS) return false;
  std::vector<int> all((size_t)n);
  for (int i = 0; i < n; ++i) all[(size_t)i] = i;
  p->board_ranks = translate_ranks(pl.comm, ac->comm, all.data(), n);
  if (p->board_ranks.size() != (size_t)n) return false;
  for (int r : p->board_ranks)
    if (r == MPI_UNDEFINED) return false;
  p->board = 1;
  return true;
}

struct BoardPack {
  const lm_reshard_plan_s *p;
  const char *in;
};

// Publish hook: this rank's sends, packed into its outbox bank: a header of (offset, bytes) per
// agreement rank, then one 64-byte aligned block per destination.
void board_pack(void *ctx, char *bank) {
  const BoardPack &b = *static_cast<const BoardPack *>(ctx);
  const SchedStep &st = *b.p->plan->steps[0];
  const AgreeComm &ac = *b.p->agree;
  uint64_t *hdr = reinterpret_cast<uint64_t *>(bank);
  std::memset(hdr, 0, (size_t)ac.size * 16);
  size_t off = ((size_t)ac.size * 16 + 63) / 64 * 64;
  const int n = (int)st.inbox.len.size();
  const int64_t zero[kBoxMaxDims] = {0};
  for (const Msg &m : st.sends) {
    const int r = b.p->board_ranks[(size_t)m.peer];
    hdr[2 * r] = off;
    hdr[2 * r + 1] = m.bytes;
    BoxCopy c;
    boxcopy_init(c, n, m.box.len.data(), st.inbox.len.data(), m.rel.data(), m.box.len.data(), zero,
                 (int64_t)st.esize);
    boxcopy_range(c, bank + off, b.in, 0, c.numel);
    off += (m.bytes + 63) / 64 * 64;
  }
}

// After the round: this rank's blocks, copied out of its peers' banks, and its own part.
void board_unpack(lm_reshard_plan_s *p, const char *in, char *out) {
  const SchedStep &st = *p->plan->steps[0];
  const AgreeComm &ac = *p->agree;
  const size_t bank = (size_t)(ac.seq & 1) * ac.outbox_bank;
  const int n = (int)st.outbox.len.size();
  const int64_t zero[kBoxMaxDims] = {0};
  for (const Msg &m : st.recvs) {
    const char *box = ac.outbox[(size_t)p->board_ranks[(size_t)m.peer]] + bank;
    const uint64_t *hdr = reinterpret_cast<const uint64_t *>(box);
    if (hdr[2 * ac.rank + 1] != m.bytes)
      fail(LM_ERR_INTERNAL, "board exchange: %llu bytes from rank %d, %zu expected",
           (unsigned long long)hdr[2 * ac.rank + 1], m.peer, m.bytes);
    BoxCopy c;
    boxcopy_init(c, n, m.box.len.data(), m.box.len.data(), zero, st.outbox.len.data(),
                 m.rel.data(), (int64_t)st.esize);
    boxcopy_range(c, out, box + hdr[2 * ac.rank], 0, c.numel);
  }
  for (const LocalCopy &b : st.selfs) {
    BoxCopy c;
    boxcopy_init(c, n, b.box.len.data(), st.inbox.len.data(), b.in_rel.data(), st.outbox.len.data(),
                 b.out_rel.data(), (int64_t)st.esize);
    boxcopy_range(c, out, in, 0, c.numel);
  }
}

// Checks src/dst against the plan and, at LM_CHECK >= 1, agrees with the other ranks taking part
// on the plan (meshes, layouts, shape, dtype) before any data moves. Returns whether this rank
// takes part at all. board (blocking executions; NULL otherwise): set when the agreement round
// also moved the data (the board exchange): the caller then only copies it out (board_unpack).
bool plan_prepare(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                  const char *fn, lm_dist_tensor_s **so, lm_dist_tensor_s **dso,
                  bool *board = nullptr) {
  if (board) *board = false;
  const int level = check_level(p->src_mesh, p->dst_mesh);
  // At level 0 no agreement runs before the data moves, except where the data moves with it:
  // a blocking same-mesh plan that can take the board exchange runs the round anyway (the
  // failure-only agreement; it is the transfer's own synchronisation).
  const bool board_round = level == 0 && board && p->plan->involved &&
                           p->src_mesh == p->dst_mesh &&
                           (p->agree || (p->agree = collective_comm(p->src_mesh, p->dst_mesh))) &&
                           board_capable(p);
  if ((level == 0 && !board_round) || !p->plan->involved) {
    plan_check_tensors(p, src, dst, fn, so, dso);
    return p->plan->involved;
  }
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    plan_check_tensors(p, src, dst, fn, so, dso);
  } catch (const Error &e) {
    if (p->src_mesh->broken || p->dst_mesh->broken) throw;  // no agreement on a broken mesh
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
  a.m1 = p->src_mesh;
  a.m2 = p->dst_mesh;
  a.timeout = call_timeout(p->src_mesh, p->dst_mesh);
  // The board exchange: every rank says whether it packed its sends into its outbox (MAX of
  // both `yes` and `-yes`: all did only when the maxima are 1 and -1).
  BoardPack pack{p, nullptr};
  long long yes[2] = {0, 0};
  if (board && st == LM_SUCCESS && !is_device((*so)->device) && board_capable(p)) {
    pack.in = static_cast<const char *>((*so)->data());
    a.publish = board_pack;
    a.publish_ctx = &pack;
    yes[0] = 1;
    yes[1] = -1;
  }
  if (p->agree->board) {  // the same on every rank of the set (MPI rounds keep their 3 words)
    a.maxes = yes;
    a.nmax = 2;
  }
  agree(a);
  if (board) *board = yes[0] == 1 && yes[1] == -1;
  if (level >= 2 && p->src_mesh->member) check_replicas(*so, fn);
  return true;
}
}  // namespace

void plan_execute(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst) {
  const char *fn = "lm_reshard_plan_execute";
  lm_dist_tensor_s *s = nullptr, *d = nullptr;
  bool board = false;
  if (!plan_prepare(p, src, dst, fn, &s, &d, &board)) return;
  if (board) {  // the round moved the data: copy it out (memory reads, nothing to fail)
    board_unpack(p, static_cast<const char *>(s->data()), static_cast<char *>(d->data()));
    return;
  }
  try {
    TimeoutScope ts(call_timeout(p->src_mesh, p->dst_mesh));
    if (is_device(s->device))
      device_run_plan(p->src_mesh, p->dst_mesh, *p->plan, s->data(), s->local_bytes(),
                      d->data(), d->local_bytes(), s->device.device_id);
    else {
      plan_use_host_transport(*p->plan);
      p->plan->run(s->data(), d->data());
    }
  } catch (const Error &e) {
    p->plan->abandon();
    mesh_break(p->src_mesh, e);
  }
}

lm_request_s *plan_start(lm_reshard_plan_s *p, lm_dist_tensor_t src, lm_dist_tensor_t dst,
                         const char *fn) {
  lm_dist_tensor_s *s = nullptr, *d = nullptr;
  if (!plan_prepare(p, src, dst, fn, &s, &d)) return nullptr;
  auto r = std::make_unique<lm_request_s>();
  r->plan = p;
  tensor_retain(s);
  r->src = s;
  tensor_retain(d);
  r->dst = d;
  try {
    if (is_device(s->device) &&
        device_plan_on_nccl(p->src_mesh, p->dst_mesh, *p->plan, s->device.device_id)) {
      CurrentDevice on(s->device.device_id);
      device_plan_join_streams(p->src_mesh, p->dst_mesh, *p->plan, true);
      p->plan->start(s->data(), d->data());  // NCCL: enqueued on the plan's stream
    } else if (is_device(s->device)) {  // staged: the host plan runs on pinned copies
      plan_use_host_transport(*p->plan);
      r->dev = device_plan_begin(p->src_mesh, p->dst_mesh, s->data(), s->local_bytes(), d->data(),
                                 d->local_bytes());
      p->plan->start(r->dev->host_in, r->dev->host_out);
    } else {
      plan_use_host_transport(*p->plan);
      p->plan->start(s->data(), d->data());
    }
  } catch (const Error &e) {
    p->plan->abandon();
    if (r->dev) device_plan_abandon(*r->dev);
    mesh_break(p->src_mesh, e);
  }
  p->in_flight = r.get();
  p->src_mesh->in_flight = true;
  p->dst_mesh->in_flight = true;
  return r.release();
}

bool request_progress(lm_request_s *r, bool block) {
  bool done;
  try {
    TimeoutScope ts(call_timeout(r->plan->src_mesh, r->plan->dst_mesh));
    // Later rounds of a device plan launch kernels and NCCL groups: on the tensor's device.
    std::optional<CurrentDevice> on;
    if (is_device(r->src->device)) on.emplace(r->src->device.device_id);
    done = r->plan->plan->progress(block);
  } catch (const Error &e) {
    r->plan->src_mesh->in_flight = r->plan->dst_mesh->in_flight = false;
    r->plan->in_flight = nullptr;
    r->plan->plan->abandon();
    if (r->dev) device_plan_abandon(*r->dev);
    mesh_break(r->plan->src_mesh, e);
  }
  if (!done) return false;
  if (!r->dev && is_device(r->src->device)) {  // NCCL: the source stream waits for the reads
    try {
      CurrentDevice on(r->src->device.device_id);
      device_plan_join_streams(r->plan->src_mesh, r->plan->dst_mesh, *r->plan->plan, false);
    } catch (...) {
      r->plan->src_mesh->in_flight = r->plan->dst_mesh->in_flight = false;
      r->plan->in_flight = nullptr;
      throw;
    }
  }
  if (r->dev) {
    try {
      device_plan_finish(*r->dev);  // enqueues the copy back to the device
    } catch (...) {
      r->plan->src_mesh->in_flight = r->plan->dst_mesh->in_flight = false;
      r->plan->in_flight = nullptr;
      throw;
    }
  }
  r->plan->src_mesh->in_flight = false;
  r->plan->dst_mesh->in_flight = false;
  r->plan->in_flight = nullptr;
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
  magic = lm::kDeadMagic;
}
