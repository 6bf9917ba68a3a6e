// SPDX-License-Identifier: BSD-3-Clause
// lm_dist_tensor_from_global: a dist tensor from a whole tensor that every rank holds (root < 0:
// local slicing) or that the root holds (root >= 0: the root validates and broadcasts shape and
// dtype, then one plan moves the data from a virtual one-rank layout on the root).
#include "common/error.hpp"
#include "mesh/collective.hpp"
#include "tensor/ops.hpp"
#include "transport/failure.hpp"

namespace lm {

namespace {

constexpr const char *kFn = "lm_dist_tensor_from_global";
constexpr int kMetaWords = kMaxDims + 3;  // status, ndim, dtype, extents

// root < 0: every rank passes the whole tensor; Replicate -> target on one rank is local
// (slicing plus the Partial identity fill).
lm_dist_tensor_s *from_global_everywhere(lm_mesh_s *m, const DLTensor *global,
                                         const lm_placement_t *pl) {
  const char *fn = kFn;
  LM_CHECK_ARG(global != nullptr, "%s: global is NULL (root < 0: every rank passes it)", fn);
  Shape g = check_shape(global->ndim, global->shape, strfmt("%s: global", fn).c_str());
  DType dt = dtype_from_dl(global->dtype, strfmt("%s: global->dtype", fn).c_str());
  Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
  check_partial_dtype(pl, m->ndim(), dt, strfmt("%s: placements", fn).c_str());
  if (m->member) check_global_buffer(global, L, global->dtype, fn, "global");
  lm_dist_tensor_s *t = tensor_new(m, L, global->dtype, DLDevice{kDLCPU, 0}, false);
  if (!m->member) return t;
  try {
    t->storage = storage_alloc(t->local_bytes(), false);
    std::vector<lm_placement_t> rep(m->ndim(), LM_PLACEMENT_REPLICATE);
    auto plan = plan_build(Layout(m->grid, rep, g), L, global->dtype, m->world, m->world_rank);
    plan->run(static_cast<const char *>(global->data) + global->byte_offset, t->data());
  } catch (...) {
    tensor_release(t);
    throw;
  }
  return t;
}

// The root's verdict on its global and what it broadcasts (meta[0]: status).
void root_meta(lm_mesh_s *m, const DLTensor *global, const lm_placement_t *pl, long long *meta,
               std::string *err) {
  const char *fn = kFn;
  try {
    LM_CHECK_ARG(global != nullptr, "%s: global is NULL on the root", fn);
    Shape g = check_shape(global->ndim, global->shape, strfmt("%s: global", fn).c_str());
    DType dt = dtype_from_dl(global->dtype, strfmt("%s: global->dtype", fn).c_str());
    Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
    check_partial_dtype(pl, m->ndim(), dt, strfmt("%s: placements", fn).c_str());
    check_global_buffer(global, L, global->dtype, fn, "global");
    meta[1] = global->ndim;
    meta[2] = (long long)global->dtype.code << 16 | (long long)global->dtype.bits << 8 |
              global->dtype.lanes;
    for (int i = 0; i < global->ndim; ++i) meta[3 + i] = global->shape[i];
  } catch (const Error &e) {
    meta[0] = e.status();
    *err = e.message();
  }
}

// LM_CHECK >= 1: the ranks agree on the root (and mesh, placements) before the broadcast that
// needs it; the root's verdict on its global travels with it.
void agree_root(lm_mesh_s *m, const lm_placement_t *pl, int root, lm_status_t st,
                std::string err) {
  try {
    mesh_check_usable(m, kFn);  // a broken mesh on one rank fails the call on all
    LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", kFn,
                 root, (long long)m->grid->size());
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  }
  struct Ctx {
    lm_mesh_s *m;
    const lm_placement_t *pl;
    int root;
  } ctx{m, pl, root};
  Fingerprint fp("lm_dist_tensor_from_global (root >= 0)");
  fp.add("mesh", m->id);
  fp.add("placements", hash_placements(pl, m->ndim()));
  fp.add("root", (uint64_t)root);
  agree_call(kFn, m, nullptr, &fp,
             [](const void *p, int f) -> std::string {
               const Ctx &c = *static_cast<const Ctx *>(p);
               switch (f) {
                 case 1: return mesh_desc(c.m);
                 case 2: return placements_desc(c.pl, c.m->ndim());
                 case 3: return std::to_string(c.root);
               }
               return "?";
             },
             &ctx, st, err, root);
}

// The target and its plan (before the second agreement, so that a failure here is agreed).
void make_target(lm_mesh_s *m, const lm_placement_t *pl, int root, const Shape &g,
                 DLDataType dtype, lm_dist_tensor_s **t, std::unique_ptr<Plan> *plan) {
  Layout L = make_layout(m, pl, g, strfmt("%s: placements", kFn).c_str());
  *t = tensor_new(m, L, dtype, DLDevice{kDLCPU, 0}, false);
  (*t)->storage = storage_alloc((*t)->local_bytes(), false);
  *plan = plan_build(root_layout(m->grid->rank_at_index(root), g), L, dtype, m->world,
                     m->world_rank);
}

// Ranks other than the root may pass NULL; a global they do pass must have the root's shape and
// dtype (a second small agreement, since only now do they know the root's).
void agree_own_global(lm_mesh_s *m, const DLTensor *global, int root, const Shape &g,
                      DLDataType dtype, lm_status_t st, const std::string &err) {
  Shape own = g;
  DLDataType own_dtype = dtype;
  if (global != nullptr && m->index != root) {
    const int n = global->ndim > 0 && global->ndim <= kMaxDims ? global->ndim : 0;
    const int64_t *s = global->shape ? global->shape : g.data();
    own.assign(s, s + n);
    own_dtype = global->dtype;
  }
  Fingerprint fp("lm_dist_tensor_from_global (root >= 0)");
  fp.add("shape of global", hash_shape(own.data(), (int)own.size()));
  fp.add("dtype of global", hash_dtype(own_dtype));
  struct Ctx {
    const Shape *s;
    DLDataType d;
  } c{&own, own_dtype};
  agree_call(kFn, m, nullptr, m->check_level >= 1 ? &fp : nullptr,
             [](const void *p, int f) -> std::string {
               const Ctx &x = *static_cast<const Ctx *>(p);
               return f == 2 ? dl_dtype_name(x.d) : shape_str(*x.s);
             },
             &c, st, err);
}

lm_dist_tensor_s *from_global_root(lm_mesh_s *m, const DLTensor *global,
                                   const lm_placement_t *pl, int root) {
  const char *fn = kFn;
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", fn, m->world_rank);
  long long meta[kMetaWords] = {0};
  std::string root_err;
  if (m->index == root) root_meta(m, global, pl, meta, &root_err);
  if (m->check_level >= 1) agree_root(m, pl, root, (lm_status_t)meta[0], root_err);
  LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn, root,
               (long long)m->grid->size());
  try {
    mpi_check(MPI_Bcast(meta, kMetaWords, MPI_LONG_LONG, root, m->comm),
              strfmt("%s: MPI_Bcast", fn).c_str());
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  if (meta[0] != 0) {
    if (m->index == root) throw Error((lm_status_t)meta[0], root_err);
    fail(LM_ERR_REMOTE, "%s: the root (mesh rank %d) failed: %s", fn, root,
         lm_status_string((lm_status_t)meta[0]));
  }
  Shape g((size_t)meta[1]);
  for (size_t i = 0; i < g.size(); ++i) g[i] = meta[3 + i];
  DLDataType dtype{(uint8_t)(meta[2] >> 16), (uint8_t)(meta[2] >> 8), (uint16_t)(meta[2] & 0xff)};
  lm_dist_tensor_s *t = nullptr;
  std::unique_ptr<Plan> plan;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    make_target(m, pl, root, g, dtype, &t, &plan);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", fn);
  }
  try {
    agree_own_global(m, global, root, g, dtype, st, err);
  } catch (...) {
    tensor_release(t);
    throw;
  }
  try {
    TimeoutScope ts(m->timeout);
    const void *in = m->index == root
                         ? static_cast<const char *>(global->data) + global->byte_offset
                         : nullptr;
    plan->run(in, t->data());
  } catch (const Error &e) {
    tensor_release(t);
    mesh_break(m, e);
  }
  return t;
}

}  // namespace

lm_dist_tensor_s *tensor_from_global(lm_mesh_t mesh, const DLTensor *global,
                                     const lm_placement_t *pl, int root) {
  lm_mesh_s *m = mesh_check(mesh, kFn);
  if (root < 0 || m->check_level == 0) mesh_check_usable(m, kFn);  // else agreed
  return root < 0 ? from_global_everywhere(m, global, pl) : from_global_root(m, global, pl, root);
}

}  // namespace lm
