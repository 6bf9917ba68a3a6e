// SPDX-License-Identifier: BSD-3-Clause
// lm_dist_tensor_reshard: a new dist tensor with other placements, on the same mesh (through the
// mesh's plan cache) or another mesh of the same parent (a fresh plan; O(peers) planning).
#include "common/error.hpp"
#include "exec/device_run.hpp"
#include "exec/plan_cache.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "mesh/device.hpp"
#include "tensor/ops.hpp"
#include "transport/failure.hpp"

namespace lm {

namespace {
struct ReshardCtx {
  lm_dist_tensor_s *t;
  lm_mesh_s *sm, *dm;
  const lm_placement_t *pl;
  const ReshardExtra *extra;  // what else the call agrees on (lm_dist_tensor_transpose's perm)
};
std::string describe_reshard(const void *p, int field) {
  const ReshardCtx &c = *static_cast<const ReshardCtx *>(p);
  switch (field) {
    case 1: return mesh_desc(c.sm) + " (source)";
    case 2: return mesh_desc(c.dm) + " (target)";
    case 3: return c.t->layout.desc();
    case 4: {
      std::string r = "[";
      for (size_t i = 0; i < c.t->layout.gshape.size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)c.t->layout.gshape[i]);
      return r + "]";
    }
    case 5: return dl_dtype_name(c.t->dtype);
    case 6: return placements_desc(c.pl, c.dm->ndim());
    case 7: return c.extra ? c.extra->text : std::string();
  }
  return "?";
}
}  // namespace

namespace {

// What a reshard prepares before any data moves.
struct Reshard {
  lm_dist_tensor_s *t = nullptr;
  lm_mesh_s *sm = nullptr, *dm = nullptr;
  const lm_placement_t *pl = nullptr;
  const char *fn = nullptr;
  bool part = false;  // this rank is in one of the meshes
  lm_dist_tensor_s *out = nullptr;
  std::shared_ptr<CachedPlan> cached;  // the plan cache's entry
  std::shared_ptr<Plan> plan;
  Plan *run = nullptr;  // plan, or its variant for a padded source (CompactShards::plan_for)
  FusedExchange *fused = nullptr;  // a same-mesh host plan that can take the board exchange:
  FusedExchange *pub = nullptr;    // then run's (padded shards' extents), which this rank packs
  bool alias = false;
  bool into = false;   // run writes extra->into through extra->out_str (a fused transposition)
  bool moved = false;  // the agreement round moved the data (the board exchange)
  CompactShards cs;    // a padded source's compact stand-in, where it needs one (then t is it)
  const ReshardExtra *extra = nullptr;  // tensor_reshard's `extra`
};

void choose_fused(Reshard &r, const AgreeComm *ac);

// Checks, plan and output buffer: everything that can fail locally, so that with the agreement
// a failure on one rank is a failure on all.
void prepare(Reshard &r) {
  lm_dist_tensor_s *t = r.t;
  mesh_check_usable(r.sm, ArgName(r.fn, "src mesh").c_str());
  mesh_check_usable(r.dm, ArgName(r.fn, "dst_mesh").c_str());
  MPI_Comm comm = transfer_comm(r.sm, r.dm, r.fn);
  // A cached plan brings its target layout, checked when it was cached.
  const bool dev = is_device(t->device);
  r.cached = cached_plan_find(r.sm, r.dm, t->layout, r.pl, t->dtype, dev);
  Layout made;
  if (!r.cached) {
    made = make_layout(r.dm, r.pl, t->layout.gshape, ArgName(r.fn, "placements").c_str());
    check_reshard(t->layout, made, t->dt);
  }
  const Layout &L = r.cached ? r.cached->dst : made;
  r.out = tensor_new(r.dm, L, t->dtype, t->device, false);
  if (r.extra && r.extra->prepare) r.extra->prepare();
  if (!r.part) return;
  if (!r.cached)
    r.cached = cached_plan_add(r.sm, r.dm, t->layout, L, t->dtype, dev,
                               r.sm == r.dm ? r.sm->world : comm);
  r.plan = r.cached->plan;
  r.run = r.cs.plan_for(*r.plan, &r.t, nullptr);
  t = r.t;
  const ReshardExtra *x = r.extra;
  if (x && x->out_str && r.dm->member && r.run == r.plan.get() && !is_device(t->device)) {
    if (Plan *v = r.plan->strided_out(*x->out_str)) {
      r.run = v;
      r.into = true;
    }
  }
  if (x && x->fused) *x->fused = r.into;
  size_t off = 0;
  // Host only: a device reshard runs collectives of the mesh (the transport choice, NCCL init,
  // the staging agreement) on every rank, so no rank may return early on its own, and whether a
  // rank can alias depends on its shard (an empty one cannot). A padded shard is no compact view.
  if (r.into) {
    // The variant writes x->into: no storage of the reshard's own.
  } else if (r.plan->steps.size() == 1 && r.plan->steps[0]->alias_offset(&off) && t->storage &&
      !is_device(t->device) && !t->padded()) {
    r.out->storage = t->storage;  // Replicate -> Shard: a view of the source, no copy
    r.out->byte_offset = t->byte_offset + off;
    r.alias = true;
  } else if (r.dm->member) {
    r.out->storage = is_device(t->device)
                         ? device_storage_alloc(mesh_mem(r.dm), t->device, r.out->local_bytes(),
                                                false)
                         : storage_alloc(r.out->local_bytes(), false);
  }
  // A small exchange within one node moves inside the agreement round (as a blocking
  // lm_reshard_plan_execute does): decided from the plan and the agreed settings alone; this
  // rank packs with the exchange of the plan it runs (none for a strided variant: then every
  // rank takes the transport). (Across meshes: agree_reshard, by messages only.) A rank that
  // aliases has no message: it packs nothing and says it packed, so that the others ride.
  if (r.dm->member && r.sm == r.dm && !is_device(t->device) && r.plan->involved)
    choose_fused(r, collective_comm(r.sm, r.sm));
}

void choose_fused(Reshard &r, const AgreeComm *ac) {
  if ((r.fused = r.plan->fused_exchange(ac, r.sm != r.dm))) r.pub = r.run->fused_exchange(ac);
}

void fused_pack(void *ctx, char *bank) {
  const Reshard &r = *static_cast<const Reshard *>(ctx);
  r.pub->pack(r.t->base(), bank);
}

// The agreement round over both meshes' ranks of an outcome st (and, at level >= 1, a
// fingerprint of the call). With a fused exchange on this rank it also carries the data: every
// rank says whether it packed (MAX of `yes` and `-yes`: all did only when they are 1 and -1), and
// r.moved says that they all did.
void agree_reshard(Reshard &r, int level, lm_status_t st, const std::string &err) {
  lm_dist_tensor_s *t = r.t;
  Fingerprint fp("lm_dist_tensor_reshard");
  fp.add("source mesh", r.sm->id);
  fp.add("target mesh", r.dm->id);
  fp.add("source placements", hash_placements(t->layout.pl.data(), r.sm->ndim()));
  fp.add("global shape", hash_shape(t->layout.gshape.data(), t->layout.ndim()));
  fp.add("dtype", hash_dtype(t->dtype));
  fp.add("target placements", hash_placements(r.pl, r.dm->ndim()));
  if (r.extra) {
    Hasher h;
    h.bytes(r.extra->text.data(), r.extra->text.size());
    fp.add(r.extra->field, h.h);
  }
  ReshardCtx ctx{t, r.sm, r.dm, r.pl, r.extra};
  require_mpi(r.fn);  // after MPI_Finalize the channels are gone: fail before looking them up
  AgreeArgs a;
  a.fn = r.fn;
  a.ac = collective_comm(r.sm, r.dm);
  a.fp = level >= 1 ? &fp : nullptr;
  a.describe = describe_reshard;
  a.ctx = &ctx;
  a.local = st;
  a.err = &err;
  a.parent_rank = r.sm->world_rank;
  a.mesh_rank = r.sm == r.dm ? r.sm->index : -1;
  a.timeout = call_timeout(r.sm, r.dm);
  long long yes[2] = {0, 0};
  // (A rank without a board exchange of its own does not pack: every rank then takes the
  // transport.)
  // By messages, the blocks land in the room of the plan's own exchange: a rank packs only into
  // that one (not a variant's), never with a deadline, and every rank with it gives its room to
  // the round.
  const bool msgs = a.ac->by_messages;
  // Across meshes the union's set may ride too (by messages; found here, where every rank of the
  // union looks the set up): every rank taking part packs its sends and unpacks its receives.
  // Only with the plan's own messages (Plan::fused_exchange across meshes).
  if (msgs && r.sm != r.dm && st == LM_SUCCESS && r.part && !is_device(t->device) &&
      r.plan->involved)
    choose_fused(r, a.ac);
  if (st == LM_SUCCESS && r.fused && r.pub && (!msgs || (r.pub == r.fused && a.timeout <= 0))) {
    a.publish = fused_pack;
    a.publish_ctx = &r;
    yes[0] = 1;
    yes[1] = -1;
  }
  if (msgs && r.fused) a.ride = r.fused->ride();
  if (a.ac->board || msgs) {  // the same on every rank of the set (MPI rounds keep their 3 words)
    a.maxes = yes;
    a.nmax = 2;
  }
  agree_meshes(a, r.sm, r.dm);
  r.moved = yes[0] == 1 && yes[1] == -1;
  if (level >= 2 && r.sm->member) check_replicas(t, r.fn);
}

// prepare(), its outcome agreed over both meshes' ranks.
void prepare_agreed(Reshard &r, int level) {
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    prepare(r);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", r.fn);
  }
  agree_reshard(r, level, st, err);
}

// The data moves; a transfer failure breaks both meshes.
void move(Reshard &r) {
  lm_dist_tensor_s *t = r.t;
  try {
    TimeoutScope ts(call_timeout(r.sm, r.dm));
    if (is_device(t->device))
      device_run_plan(r.sm, r.dm, *r.plan, t->data(), t->local_bytes(), r.out->data(),
                      r.out->local_bytes(), t->device.device_id);
    else
      r.run->run(t->base(), r.into ? r.extra->into->base() : r.out->data());
  } catch (const Error &e) {
    mesh_break(r.sm, e, r.dm != r.sm ? r.dm : nullptr);
  }
}

}  // namespace

lm_dist_tensor_s *tensor_reshard(lm_dist_tensor_s *t, lm_mesh_s *dst_mesh,
                                 const lm_placement_t *pl, const char *fn,
                                 const ReshardExtra *extra) {
  expect_object(t, fn);
  Reshard r;
  r.t = t;
  r.extra = extra;
  r.sm = t->mesh;
  r.dm = dst_mesh ? dst_mesh : t->mesh;
  r.pl = pl;
  r.fn = fn;
  r.part = r.sm->member || r.dm->member;
  const int level = check_level(r.sm, r.dm);
  try {
    if (level == 0 || !r.part) {
      prepare(r);
      // At level 0 no agreement runs, except where the data moves with it (the failure-only
      // round is then the transfer's own synchronisation, as in lm_reshard_plan_execute).
      // (By messages no round runs: the transport's own messages are the cheaper.)
      if (r.fused && collective_comm(r.sm, r.sm)->board) agree_reshard(r, 0, LM_SUCCESS, std::string());
    } else {
      prepare_agreed(r, level);
    }
    if (r.moved) {
      if (!r.alias) r.pub->unpack(r.t->base(), r.out->data());  // memory reads: cannot fail
    }
    else if (r.part && !r.alias)
      move(r);  // neither mesh: nothing to do, never waited on
  } catch (...) {
    tensor_release(r.out);
    throw;
  }
  return r.out;
}

}  // namespace lm
