// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/group.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>

#include "common/error.hpp"
#include "common/handle.hpp"
#include "common/mpi.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "tensor/ops.hpp"
#include "transport/failure.hpp"

namespace lm {

namespace {

// The config's bounds (NULL: the defaults), into g.
void apply_config(lm_reshard_group_s &g, const lm_reshard_group_config_t *c, const char *fn) {
  if (!c) return;
  LM_CHECK_ARG(c->magic == LM_RESHARD_GROUP_CONFIG_MAGIC, "%s: config->magic is 0x%x, not "
               "LM_RESHARD_GROUP_CONFIG_MAGIC (initialise the lm_reshard_group_config_t with "
               "LM_RESHARD_GROUP_CONFIG_INIT)", fn, c->magic);
  // The library reads the fields the caller's size covers (bucket_bytes at least).
  const size_t need = offsetof(lm_reshard_group_config_t, bucket_bytes) + sizeof(size_t);
  LM_CHECK_ARG(c->size >= need, "%s: config->size is %zu, at least %zu expected (set it to "
               "sizeof(lm_reshard_group_config_t) or use LM_RESHARD_GROUP_CONFIG_INIT)", fn,
               c->size, need);
  LM_CHECK_ARG(c->version >= 1 && c->version <= LM_RESHARD_GROUP_CONFIG_VERSION,
               "%s: config->version is %u; this library knows versions 1..%u", fn, c->version,
               LM_RESHARD_GROUP_CONFIG_VERSION);
  if (c->bucket_bytes) g.bucket_bytes = c->bucket_bytes;
  if (c->size >= offsetof(lm_reshard_group_config_t, alone_bytes) + sizeof(size_t) && c->alone_bytes)
    g.alone_bytes = c->alone_bytes;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

uint64_t entry_hash(const Plan &p) {
  uint64_t h = hash_placements(p.src.pl.data(), p.src.mesh_ndim());
  h = mix(h, hash_placements(p.dst.pl.data(), p.dst.mesh_ndim()));
  h = mix(h, hash_shape(p.src.gshape.data(), p.src.ndim()));
  return mix(h, hash_dtype(p.dtype));
}

std::string describe_group(const void *ctx, int field) {
  const lm_reshard_group_s &g = *static_cast<const lm_reshard_group_s *>(ctx);
  switch (field) {
    case 1: return mesh_desc(g.src_mesh) + " (source)";
    case 2: return mesh_desc(g.dst_mesh) + " (target)";
    case 3: return strfmt("%zu entries", g.entries.size());
    case 4: return strfmt("entries' placements, shapes and dtypes hash to %016llx",
                          (unsigned long long)g.hash);
  }
  return "?";
}

// No target may share bytes with another target or a source (entries run in buckets, so a target
// written early could be a source read later). One sweep over the shards sorted by address.
void check_overlaps(const std::vector<lm_dist_tensor_s *> &S,
                    const std::vector<lm_dist_tensor_s *> &D, const char *fn) {
  struct Span {
    uintptr_t lo, hi;
    bool dst;
    size_t i;
  };
  std::vector<Span> v;
  v.reserve(2 * S.size());
  for (size_t i = 0; i < S.size(); ++i) {
    if (S[i]->base() && S[i]->span_bytes())
      v.push_back({(uintptr_t)S[i]->base(), (uintptr_t)S[i]->base() + S[i]->span_bytes(), false, i});
    if (D[i]->base() && D[i]->span_bytes())
      v.push_back({(uintptr_t)D[i]->base(), (uintptr_t)D[i]->base() + D[i]->span_bytes(), true, i});
  }
  auto lower = [](const Span &a, const Span &b) { return a.lo < b.lo; };
  if (!std::is_sorted(v.begin(), v.end(), lower))  // tensors made in order often are
    std::sort(v.begin(), v.end(), lower);
  const Span *far = nullptr;  // the span reaching furthest so far
  for (const Span &s : v) {
    if (far && s.lo < far->hi && (s.dst || far->dst)) {
      const Span &d = s.dst ? s : *far, &o = s.dst ? *far : s;
      fail(LM_ERR_INVALID_ARGUMENT, "%s: dst[%zu]'s memory overlaps %s[%zu]'s on rank %d (a "
           "target must not share bytes with another target or any source)", fn, d.i,
           o.dst ? "dst" : "src", o.i, world_rank_or_minus1());
    }
    if (!far || s.hi > far->hi) far = &s;
  }
}

// The local checks of an execution: sizes, handles, layouts, overlaps, memory kinds. Then runs[i]
// is the plan entry i runs (CompactShards::plan_for: its own, its variant for padded shards, or
// its own on compact stand-ins, which then replace S[i] / D[i], held in cs).
void group_check_tensors(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                         const lm_dist_tensor_t *dst, const char *fn, CompactShards &cs,
                         std::vector<lm_dist_tensor_s *> &S, std::vector<lm_dist_tensor_s *> &D,
                         std::vector<Plan *> &runs) {
  LM_CHECK_ARG(n == (int)g->entries.size(), "%s: n is %d, the group has %zu entries", fn, n,
               g->entries.size());
  LM_CHECK_ARG(n == 0 || src != nullptr, "%s: src is NULL", fn);
  LM_CHECK_ARG(n == 0 || dst != nullptr, "%s: dst is NULL", fn);
  LM_CHECK_ARG(g->in_flight == nullptr, "%s: the group already has a request in flight", fn);
  mesh_check_usable(g->src_mesh, fn);
  if (g->dst_mesh != g->src_mesh) mesh_check_usable(g->dst_mesh, fn);
  S.assign((size_t)n, nullptr);
  D.assign((size_t)n, nullptr);
  for (int i = 0; i < n; ++i) {
    // The entries' meshes are the group's (checked above) and no entry runs a request alone.
    plan_check_pair(g->entries[(size_t)i].get(), src[i], dst[i], fn, &S[(size_t)i],
                    &D[(size_t)i], i);
    LM_CHECK_ARG(S[(size_t)i]->device.device_type == S[0]->device.device_type,
                 "%s: src[%d] lives on device type %d, src[0] on %d: a group is all host or all "
                 "CUDA", fn, i, (int)S[(size_t)i]->device.device_type,
                 (int)S[0]->device.device_type);
  }
  check_overlaps(S, D, fn);
  runs.assign(S.size(), nullptr);
  for (size_t i = 0; i < S.size(); ++i) runs[i] = cs.plan_for(*g->entries[i]->plan, &S[i], &D[i]);
}

// Checks the tensors and, at LM_CHECK >= 1, agrees with the other ranks on the whole group (one
// round). Returns whether this rank takes part.
bool group_prepare(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                   const lm_dist_tensor_t *dst, const char *fn, CompactShards &cs,
                   std::vector<lm_dist_tensor_s *> &S, std::vector<lm_dist_tensor_s *> &D,
                   std::vector<Plan *> &runs) {
  const bool involved = g->src_mesh->member || g->dst_mesh->member;
  const int level = check_level(g->src_mesh, g->dst_mesh);
  if (level == 0 || !involved) {
    group_check_tensors(g, n, src, dst, fn, cs, S, D, runs);
    return involved;
  }
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    group_check_tensors(g, n, src, dst, fn, cs, S, D, runs);
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", fn);
  } catch (const Error &e) {  // joins the agreement with its failure, so no rank waits for it
    st = e.status();
    err = e.message();
  }
  if (!g->agree) g->agree = collective_comm(g->src_mesh, g->dst_mesh);
  Fingerprint fp(fn);
  fp.add("source mesh", g->src_mesh->id);
  fp.add("target mesh", g->dst_mesh->id);
  fp.add("entries", g->entries.size());
  fp.add("entries' layouts", g->hash);
  AgreeArgs a;
  a.fn = fn;
  a.ac = g->agree;
  a.fp = &fp;
  a.describe = describe_group;
  a.ctx = g;
  a.local = st;
  a.err = &err;
  a.parent_rank = g->src_mesh->world_rank;
  a.mesh_rank = g->src_mesh == g->dst_mesh ? g->src_mesh->index : -1;
  a.timeout = call_timeout(g->src_mesh, g->dst_mesh);
  agree_meshes(a, g->src_mesh, g->dst_mesh);
  if (level >= 2 && g->src_mesh->member)
    for (auto *s : S) check_replicas(s, fn);
  return true;
}

// The executor of the entries' own plans (built at the first use), now the current one.
GroupExec &group_exec(lm_reshard_group_s *g) {
  if (!g->exec) {
    std::vector<Plan *> plans;
    for (auto &e : g->entries) plans.push_back(e->plan.get());
    g->exec = std::make_unique<GroupExec>(std::move(plans), g->entries[0]->plan->comm,
                                          g->bucket_bytes, g->alone_bytes);
  }
  g->cur = g->exec.get();
  return *g->exec;
}

// The executor of the plans `runs` (group_check_tensors), now the current one: the entries' own,
// or, where padded shards run on plan variants, one built for those plans (the last one is kept).
GroupExec &group_exec(lm_reshard_group_s *g, const std::vector<Plan *> &runs) {
  bool own = true;
  for (size_t i = 0; i < runs.size(); ++i) own = own && runs[i] == g->entries[i]->plan.get();
  if (own) return group_exec(g);
  std::vector<uint64_t> serials(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) serials[i] = runs[i]->serial;
  if (!g->padded_exec || g->padded_plans != serials) {
    g->padded_exec.reset();
    g->padded_plans = serials;
    g->padded_exec = std::make_unique<GroupExec>(runs, g->entries[0]->plan->comm,
                                                 g->bucket_bytes, g->alone_bytes);
  }
  g->cur = g->padded_exec.get();
  return *g->padded_exec;
}

// The one device every tensor of the call lives on, else -1.
int one_device(const std::vector<lm_dist_tensor_s *> &S, const std::vector<lm_dist_tensor_s *> &D) {
  const int dev = S[0]->device.device_id;
  for (size_t i = 0; i < S.size(); ++i)
    if (S[i]->device.device_id != dev || D[i]->device.device_id != dev) return -1;
  return dev;
}

// Device groups. Over NCCL: the grouped rounds on device memory (one message per peer and round,
// enqueued on the route's stream; complete for the host once enqueued). Host-staged meshes, or
// tensors on several devices: entry by entry on the device path.
void run_device(lm_reshard_group_s *g, const std::vector<lm_dist_tensor_s *> &S,
                const std::vector<lm_dist_tensor_s *> &D) {
  const int dev = one_device(S, D);
  TransportSpec spec;
  if (dev >= 0 &&
      device_nccl_spec(g->src_mesh, g->dst_mesh, g->entries[0]->plan->comm, dev, &spec)) {
    CurrentDevice on(dev);
    GroupExec &x = group_exec(g);
    x.use(spec);
    std::vector<const void *> in(S.size());
    std::vector<void *> out(D.size());
    for (size_t i = 0; i < S.size(); ++i) {
      in[i] = S[i]->data();
      out[i] = D[i]->data();
    }
    device_join_streams(g->src_mesh, g->dst_mesh, true);
    x.run(std::move(in), std::move(out));
    device_join_streams(g->src_mesh, g->dst_mesh, false);
    x.check_errors("grouped reshard on NCCL");
    return;
  }
  for (size_t i = 0; i < S.size(); ++i)
    device_run_plan(g->src_mesh, g->dst_mesh, *g->entries[i]->plan, S[i]->data(),
                    S[i]->local_bytes(), D[i]->data(), D[i]->local_bytes(),
                    S[i]->device.device_id);
}

void start_host(lm_reshard_group_s *g, const std::vector<lm_dist_tensor_s *> &S,
                const std::vector<lm_dist_tensor_s *> &D, const std::vector<Plan *> &runs,
                bool blocking) {
  std::vector<const void *> in(S.size());
  std::vector<void *> out(D.size());
  for (size_t i = 0; i < S.size(); ++i) {
    in[i] = S[i]->base();
    out[i] = D[i]->base();
  }
  GroupExec &x = group_exec(g, runs);
  x.use(x.host_spec());
  x.start(std::move(in), std::move(out), blocking);
}

}  // namespace

lm_reshard_group_s *group_create(lm_mesh_t src_mesh, lm_mesh_t dst_mesh, int n,
                                 const lm_reshard_entry_t *entries,
                                 const lm_reshard_group_config_t *config) {
  const char *fn = "lm_reshard_group_create";
  lm_mesh_s *sm = mesh_check(src_mesh, strfmt("%s: src_mesh", fn).c_str());
  lm_mesh_s *dm = dst_mesh ? mesh_check(dst_mesh, strfmt("%s: dst_mesh", fn).c_str()) : sm;
  LM_CHECK_ARG(n >= 0, "%s: n is %d (0 or more entries)", fn, n);
  LM_CHECK_ARG(n == 0 || entries != nullptr, "%s: entries is NULL with n = %d", fn, n);
  auto g = std::make_unique<lm_reshard_group_s>();
  apply_config(*g, config, fn);
  mesh_retain(sm);  // the group holds its meshes also when it has no entry
  g->src_mesh = sm;
  mesh_retain(dm);
  g->dst_mesh = dm;
  for (int i = 0; i < n; ++i) {
    const lm_reshard_entry_t &e = entries[i];
    const std::string what = strfmt("%s: entries[%d]", fn, i);
    g->entries.emplace_back(plan_create(src_mesh, e.src_placements, dm == sm ? nullptr : dst_mesh,
                                        e.dst_placements, e.ndim, e.global_shape, e.dtype,
                                        what.c_str()));
    g->hash = mix(g->hash, entry_hash(*g->entries.back()->plan));
  }
  return g.release();
}

size_t group_bucket_count(lm_reshard_group_s *g) { return group_exec(g).bucket_count(); }

lm_reshard_group_s *group_check(lm_reshard_group_t h, const char *what) {
  return handle_object<lm_reshard_group_s>(h, HandleKind::Group, what, "group", "lm_reshard_group_t");
}

lm_reshard_group_t group_wrap(lm_reshard_group_s *g) {
  return handle_wrap_owned(g, HandleKind::Group);
}

void group_destroy_handle(lm_reshard_group_t *h, const char *what) {
  lm_reshard_group_s *g = group_check(*h, what);
  if (g->in_flight)
    fail(LM_ERR_INVALID_USAGE, "%s: a request is in flight; wait for it", what);
  void *obj = nullptr;
  if (handle_drop(*h, HandleKind::Group, &obj) != DropResult::Died)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: group is not a live lm_reshard_group_t", what);
  *h = nullptr;
  delete static_cast<lm_reshard_group_s *>(obj);
}

std::vector<lm_dist_tensor_s *> group_alloc_targets(lm_reshard_group_s *g, DLDevice device,
                                                    int n) {
  const char *fn = "lm_reshard_group_alloc_targets";
  LM_CHECK_ARG(n == (int)g->entries.size(), "%s: n is %d, the group has %zu entries", fn, n,
               g->entries.size());
  check_device(device, strfmt("%s: device", fn).c_str());
  std::vector<lm_dist_tensor_s *> out;
  try {
    for (auto &e : g->entries) out.push_back(plan_alloc_target(e.get(), device));
  } catch (...) {
    for (auto *t : out) tensor_release(t);
    throw;
  }
  return out;
}

void group_execute(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                   const lm_dist_tensor_t *dst) {
  const char *fn = "lm_reshard_group_execute";
  std::vector<lm_dist_tensor_s *> S, D;
  std::vector<Plan *> runs;
  CompactShards cs;
  if (!group_prepare(g, n, src, dst, fn, cs, S, D, runs) || n == 0) return;
  try {
    TimeoutScope ts(call_timeout(g->src_mesh, g->dst_mesh));
    if (is_device(S[0]->device)) {
      run_device(g, S, D);
    } else {
      start_host(g, S, D, runs, true);
      g->cur->progress(true);
    }
  } catch (const Error &e) {
    if (g->cur) g->cur->abandon();
    mesh_break(g->src_mesh, e, g->dst_mesh);
  }
  cs.finish();
}

lm_request_s *group_start(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                          const lm_dist_tensor_t *dst) {
  const char *fn = "lm_reshard_group_start";
  std::vector<lm_dist_tensor_s *> S, D;
  std::vector<Plan *> runs;
  auto cs = std::make_unique<CompactShards>();
  if (!group_prepare(g, n, src, dst, fn, *cs, S, D, runs) || n == 0) return nullptr;
  try {
    TimeoutScope ts(call_timeout(g->src_mesh, g->dst_mesh));
    if (is_device(S[0]->device)) {  // enqueued on the streams: complete for the host
      run_device(g, S, D);
      return nullptr;
    }
    start_host(g, S, D, runs, false);
  } catch (const Error &e) {
    if (g->cur) g->cur->abandon();
    mesh_break(g->src_mesh, e, g->dst_mesh);
  }
  auto r = std::make_unique<lm_request_s>();
  r->group = g;
  if (!cs->empty()) r->compact = std::move(cs);  // copied back into the targets at completion
  for (auto *t : S) {
    tensor_retain(t);
    r->tensors.push_back(t);
  }
  for (auto *t : D) {
    tensor_retain(t);
    r->tensors.push_back(t);
  }
  g->in_flight = r.get();
  g->src_mesh->in_flight = g->dst_mesh->in_flight = true;
  return r.release();
}

bool group_request_progress(lm_request_s *r, bool block) {
  lm_reshard_group_s *g = r->group;
  auto end = [&] {
    g->src_mesh->in_flight = g->dst_mesh->in_flight = false;
    g->in_flight = nullptr;
  };
  if (!mpi_alive()) {
    end();
    g->cur->abandon();
    fail(LM_ERR_INVALID_USAGE, "lm_request_wait/test: MPI was finalized before the request "
         "completed; it is dropped (its targets hold undefined data)");
  }
  bool done;
  try {
    TimeoutScope ts(call_timeout(g->src_mesh, g->dst_mesh));
    done = g->cur->progress(block);
  } catch (const Error &e) {
    end();
    g->cur->abandon();
    mesh_break(g->src_mesh, e, g->dst_mesh);
  }
  if (done) {
    end();
    if (r->compact) r->compact->finish();
  }
  return done;
}

}  // namespace lm

lm_reshard_group_s::~lm_reshard_group_s() {
  if (padded_exec) padded_exec->abandon();
  padded_exec.reset();
  if (exec) exec->abandon();
  exec.reset();
  entries.clear();
  lm::mesh_release(src_mesh);
  lm::mesh_release(dst_mesh);
  magic = lm::kDeadMagic;
}
