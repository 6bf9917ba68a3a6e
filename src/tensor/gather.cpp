// SPDX-License-Identifier: BSD-3-Clause
// lm_dist_tensor_gather: the whole tensor into a host buffer on every rank (root < 0) or on the
// root: one plan to all-Replicate, or to a virtual one-rank layout on the root.
#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "mesh/device.hpp"
#include "tensor/ops.hpp"
#include "transport/failure.hpp"

namespace lm {

namespace {

constexpr const char *kFn = "lm_dist_tensor_gather";

// The local checks (the receiving ranks check their dst) and the plan.
std::unique_ptr<Plan> prepare(lm_dist_tensor_s *t, int root, bool receives, DLTensor *dst) {
  lm_mesh_s *m = t->mesh;
  mesh_check_usable(m, kFn);
  LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", kFn,
               root, (long long)m->grid->size());
  if (receives) {
    LM_CHECK_ARG(dst != nullptr, "%s: dst is NULL", kFn);
    check_global_buffer(dst, t->layout, t->dtype, kFn, "dst");
  }
  if (root >= 0)
    return plan_build(t->layout, root_layout(m->grid->rank_at_index(root), t->layout.gshape),
                      t->dtype, m->world, m->world_rank);
  std::vector<lm_placement_t> rep(m->ndim(), LM_PLACEMENT_REPLICATE);
  return plan_build(t->layout, Layout(m->grid, rep, t->layout.gshape), t->dtype, m->world,
                    m->world_rank);
}

// Every rank agrees on the verdict and, at LM_CHECK >= 1, on a fingerprint of the call before any
// data moves: a refused dst leaves no message behind and no rank waiting.
void agree_gather(lm_dist_tensor_s *t, int root, lm_status_t st, const std::string &err) {
  lm_mesh_s *m = t->mesh;
  Fingerprint fp("lm_dist_tensor_gather");
  fp.add("mesh", m->id);
  fp.add("placements", hash_placements(t->layout.pl.data(), m->ndim()));
  fp.add("global shape", hash_shape(t->layout.gshape.data(), t->layout.ndim()));
  fp.add("dtype", hash_dtype(t->dtype));
  fp.add("root", (uint64_t)(int64_t)(root < 0 ? -1 : root));
  struct Ctx {
    lm_dist_tensor_s *t;
    int root;
  } ctx{t, root};
  agree_call(kFn, m, nullptr, m->check_level >= 1 ? &fp : nullptr,
             [](const void *p, int f) -> std::string {
               const Ctx &c = *static_cast<const Ctx *>(p);
               switch (f) {
                 case 1: return mesh_desc(c.t->mesh);
                 case 2: return c.t->layout.desc();
                 case 3: return shape_str(c.t->layout.gshape);
                 case 4: return dl_dtype_name(c.t->dtype);
                 case 5: return c.root < 0 ? std::string("-1 (all ranks)") : std::to_string(c.root);
               }
               return "?";
             },
             &ctx, st, err, root);
}

}  // namespace

void tensor_gather(lm_dist_tensor_t tensor, int root, DLTensor *dst) {
  lm_dist_tensor_s *t = tensor_check(tensor, kFn);
  lm_mesh_s *m = t->mesh;  // retained by the tensor
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", kFn, m->world_rank);
  const bool receives = root < 0 || m->index == root;
  std::unique_ptr<Plan> plan;
  Plan *run = nullptr;  // plan, or its variant reading a padded shard in place
  std::string err;
  lm_status_t st = LM_SUCCESS;
  CompactShards cs;  // a padded shard's compact stand-in, where the plan has no such variant
  try {
    plan = prepare(t, root, receives, dst);
    run = cs.plan_for(*plan, &t, nullptr);
  } catch (const Error &e) {
    err = e.message();
    st = e.status();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", kFn);
  }
  agree_gather(t, root, st, err);
  if (m->check_level >= 2) check_replicas(t, kFn);
  try {
    TimeoutScope ts(m->timeout);
    void *out = receives ? static_cast<char *>(dst->data) + dst->byte_offset : nullptr;
    if (!is_device(t->device)) {
      run->run(t->base(), out);
      return;
    }
    // dst is host memory: the shard goes through host staging
    void *h = stage_to_host_agreed(m, m, t->data(), t->local_bytes());
    try {
      plan->run(h, out);
    } catch (...) {
      stage_release(mesh_mem(m), h);
      throw;
    }
    stage_release(mesh_mem(m), h);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
}

}  // namespace lm
