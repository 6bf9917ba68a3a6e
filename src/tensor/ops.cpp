// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/ops.hpp"

#include <cstring>

#include "common/error.hpp"
#include "exec/device_run.hpp"
#include "exec/plan_cache.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "transport/failure.hpp"
#include "mesh/device.hpp"

namespace lm {

Layout make_layout(lm_mesh_s *mesh, const lm_placement_t *pl, const Shape &gshape,
                   const char *what) {
  validate_placements(pl, mesh->ndim(), (int)gshape.size(), what);
  return Layout(mesh->grid, std::vector<lm_placement_t>(pl, pl + mesh->ndim()), gshape);
}

static std::string shape_str(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += strfmt(i ? ", %lld" : "%lld", (long long)s[i]);
  return r + "]";
}

lm_dist_tensor_s *tensor_zeros(lm_mesh_t mesh, int ndim, const int64_t *gshape, DLDataType dtype,
                               DLDevice device, const lm_placement_t *pl) {
  const char *fn = "lm_dist_tensor_zeros";
  lm_mesh_s *m = mesh_check(mesh, fn);
  Shape g = check_shape(ndim, gshape, strfmt("%s: global_shape", fn).c_str());
  DType dt = dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  check_device(device, strfmt("%s: device", fn).c_str());
  Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
  check_partial_dtype(pl, m->ndim(), dt, strfmt("%s: placements", fn).c_str());
  return tensor_new(m, L, dtype, device, true);
}

// Global extents from an allgather of local extents over the mesh (members only).
// `failed` (this rank's own checks failed): it still takes part, with a flag, so every rank
// learns of the failure instead of waiting; then it rethrows its own error, the others report it.
static Shape allgather_global_shape(lm_mesh_s *m, const lm_placement_t *pl, const DLTensor *local,
                                    const char *fn, const Error *failed) {
  int n = failed ? 0 : local->ndim;
  const int W = kMaxDims + 2;
  std::vector<long long> mine(W, 0), all((size_t)W * m->grid->size());
  mine[0] = failed ? -1 : n;
  if (!failed) {
    mine[1] = (long long)local->dtype.code << 16 | (long long)local->dtype.bits << 8 | local->dtype.lanes;
    for (int i = 0; i < n; ++i) mine[2 + i] = local->shape[i];
  }
  try {
    mpi_check(MPI_Allgather(mine.data(), W, MPI_LONG_LONG, all.data(), W, MPI_LONG_LONG, m->comm),
              strfmt("%s: MPI_Allgather of local extents", fn).c_str());
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  if (failed) throw *failed;
  for (int64_t r = 0; r < m->grid->size(); ++r)
    if (all[(size_t)(r * W)] < 0)
      fail(LM_ERR_REMOTE, "%s: mesh rank %lld (rank %d) failed its checks; this rank %d did not", fn,
           (long long)r, m->grid->rank_at_index(r), m->world_rank);
  for (int64_t r = 0; r < m->grid->size(); ++r) {
    const long long *e = &all[(size_t)(r * W)];
    if (e[0] != n || e[1] != mine[1])
      fail(LM_ERR_MISMATCH, "%s: mesh rank %lld passed a local tensor of ndim %lld / another dtype "
           "than mesh rank %lld (ndim %d)", fn, (long long)r, e[0], (long long)m->index, n);
  }
  return global_shape_from_extents(
      m->grid, pl, n, local->shape,
      [&](int64_t r, int d) { return (int64_t)all[(size_t)(r * W + 2 + d)]; }, fn);
}

lm_dist_tensor_s *tensor_from_local(lm_mesh_s *m, const DLTensor *local,
                                    const lm_placement_t *pl, int mode,
                                    const int64_t *gshape, unsigned flags,
                                    DLManagedTensor *managed, const char *fn) {
  expect_object(m, fn);
  const int mode_bits = mode;
  LM_CHECK_ARG(mode_bits == LM_SHAPE_GIVEN || mode_bits == LM_SHAPE_EVEN ||
                   mode_bits == LM_SHAPE_ALLGATHER,
               "%s: shape_mode %d is not an lm_shape_mode_t", fn, mode_bits);
  if (mode != LM_SHAPE_GIVEN && !m->member)
    fail(LM_ERR_INVALID_USAGE, "%s: a rank outside the mesh must use LM_SHAPE_GIVEN", fn);
  if (mode == LM_SHAPE_ALLGATHER && m->check_level == 0) mesh_check_usable(m, fn);
  Shape ls;
  int64_t numel = 1;
  std::shared_ptr<Storage> pre;
  // LM_CHECK=2: the local modes also check every rank's extents against the layout, collectively.
  const bool level2 = m->check_level >= 2 && m->member && mode != LM_SHAPE_ALLGATHER;
  // Local checks. With LM_SHAPE_ALLGATHER (collective) a failure still joins the allgather.
  try {
    if (mode == LM_SHAPE_ALLGATHER) mesh_check_usable(m, fn);  // agreed: fails on all ranks
    LM_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
    LM_CHECK_ARG(flags == LM_FROM_LOCAL_COPY || flags == LM_FROM_LOCAL_BORROW,
                 "%s: flags 0x%x unknown (LM_FROM_LOCAL_COPY or LM_FROM_LOCAL_BORROW)", fn, flags);
    if (m->member)
      ls = check_shape(local->ndim, local->shape, strfmt("%s: local", fn).c_str());
    else
      LM_CHECK_ARG(local->ndim >= 0 && local->ndim <= kMaxDims, "%s: local->ndim %d must be in "
                   "[0, %d]", fn, local->ndim, kMaxDims);
    DType dt = dtype_from_dl(local->dtype, strfmt("%s: local->dtype", fn).c_str());
    check_device(local->device, strfmt("%s: local->device", fn).c_str());
    validate_placements(pl, m->ndim(), local->ndim, strfmt("%s: placements", fn).c_str());
    check_partial_dtype(pl, m->ndim(), dt, strfmt("%s: placements", fn).c_str());
    for (int64_t e : ls) numel *= e;
    if (m->member)
      LM_CHECK_ARG(local->data != nullptr || numel == 0, "%s: local->data is NULL", fn);
    bool borrow = managed != nullptr || flags == LM_FROM_LOCAL_BORROW;
    if (m->member && numel > 0) {
      check_strides_span(local, dtype_size(dt), strfmt("%s: local", fn).c_str());
      if (borrow) check_alignment(local, dt, strfmt("%s: local", fn).c_str());
    }
    if (borrow && m->member)
      LM_CHECK_ARG(is_compact(local),
                   "%s: local has strides that are not compact row-major; use LM_FROM_LOCAL_COPY", fn);
    if (is_device(local->device) && m->member && numel > 0)
      check_device_pointer(static_cast<const char *>(local->data) + local->byte_offset,
                           local->device, strfmt("%s: local->data", fn).c_str());
    if (is_device(local->device) && m->member && !borrow && !is_compact(local))
      fail(LM_ERR_NOT_SUPPORTED, "%s: local is a strided device tensor: LM_FROM_LOCAL_COPY copies "
           "compact device tensors only (make it contiguous first)", fn);
    // The collective mode allocates its (host) copy before the ranks agree, so a failure is
    // agreed.
    if (mode == LM_SHAPE_ALLGATHER && m->member && !borrow && !is_device(local->device))
      pre = storage_alloc((size_t)numel * (((size_t)local->dtype.bits * local->dtype.lanes + 7) / 8),
                          false);
  } catch (const Error &e) {
    if (mode != LM_SHAPE_ALLGATHER && level2) {  // collective at LM_CHECK=2: agree the failure
      agree_call(fn, m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
    }
    if (mode != LM_SHAPE_ALLGATHER) throw;
    if (m->check_level == 0) allgather_global_shape(m, pl, local, fn, &e);  // throws e after it
    agree_call(fn, m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());  // throws
  }
  if (mode == LM_SHAPE_ALLGATHER && m->check_level >= 1) {
    // The ranks agree on what they were asked before the extents travel.
    Fingerprint fp("lm_dist_tensor_from_local (LM_SHAPE_ALLGATHER)");
    fp.add("mesh", m->id);
    fp.add("placements", hash_placements(pl, m->ndim()));
    fp.add("local ndim", (uint64_t)local->ndim);
    fp.add("dtype", hash_dtype(local->dtype));
    struct Ctx {
      lm_mesh_s *m;
      const lm_placement_t *pl;
      const DLTensor *local;
    } ctx{m, pl, local};
    agree_call(fn, m, nullptr, &fp,
               [](const void *p, int f) -> std::string {
                 const Ctx &c = *static_cast<const Ctx *>(p);
                 switch (f) {
                   case 1: return mesh_desc(c.m);
                   case 2: return format_placements(c.pl, c.m->ndim());
                   case 3: return std::to_string(c.local->ndim);
                   case 4: return dl_dtype_name(c.local->dtype);
                 }
                 return "?";
               },
               &ctx, LM_SUCCESS, std::string());
  }
  bool borrow = managed != nullptr || flags == LM_FROM_LOCAL_BORROW;

  Shape g;
  switch (mode) {
    case LM_SHAPE_GIVEN:
    case LM_SHAPE_EVEN:
      try {
        if (mode == LM_SHAPE_GIVEN) {
          g = check_shape(local->ndim, gshape, strfmt("%s: global_shape", fn).c_str());
        } else {
          g = ls;
          for (int k = 0; k < m->ndim(); ++k)
            if (pl[k].kind == LM_SHARD) g[pl[k].dim] *= m->grid->shape()[k];
          check_numel(g, fn);
        }
      } catch (const Error &e) {
        if (level2) agree_call(fn, m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
        throw;
      }
      break;
    case LM_SHAPE_ALLGATHER:
      g = allgather_global_shape(m, pl, local, fn, nullptr);
      check_numel(g, fn);
      break;
  }
  if (level2) {
    Fingerprint fp("lm_dist_tensor_from_local (LM_CHECK=2)");
    fp.add("mesh", m->id);
    fp.add("placements", hash_placements(pl, m->ndim()));
    fp.add("global shape", hash_shape(g.data(), (int)g.size()));
    fp.add("dtype", hash_dtype(local->dtype));
    struct Ctx {
      lm_mesh_s *m;
      const lm_placement_t *pl;
      const Shape *g;
      DLDataType d;
    } ctx{m, pl, &g, local->dtype};
    agree_call(fn, m, nullptr, &fp,
               [](const void *p, int f) -> std::string {
                 const Ctx &c = *static_cast<const Ctx *>(p);
                 switch (f) {
                   case 1: return mesh_desc(c.m);
                   case 2: return format_placements(c.pl, c.m->ndim());
                   case 3: {
                     std::string r = "[";
                     for (size_t i = 0; i < c.g->size(); ++i)
                       r += strfmt(i ? ", %lld" : "%lld", (long long)(*c.g)[i]);
                     return r + "]";
                   }
                   case 4: return dl_dtype_name(c.d);
                 }
                 return "?";
               },
               &ctx, LM_SUCCESS, std::string());
    // Every rank's extents must be the torch.chunk shards of that shape (same data on all ranks,
    // so the same verdict everywhere).
    Shape from_extents = allgather_global_shape(m, pl, local, fn, nullptr);
    if (from_extents != g)
      fail(LM_ERR_MISMATCH,
           "%s: the ranks' local extents (LM_CHECK=2) give global shape %s, not the %s %s", fn,
           shape_str(from_extents).c_str(), mode == LM_SHAPE_EVEN ? "even-shard shape" : "given",
           shape_str(g).c_str());
  }
  Layout L(m->grid, std::vector<lm_placement_t>(pl, pl + m->ndim()), g);
  if (m->member) {
    Box b = L.box_at(m->coord.data());
    if (b.len != ls)
      fail(LM_ERR_INVALID_ARGUMENT,
           "%s: local shape %s on rank %d does not match its shard %s of global shape %s with "
           "placements %s%s",
           fn, shape_str(ls).c_str(), m->world_rank, shape_str(b.len).c_str(), shape_str(g).c_str(),
           L.str().c_str(),
           mode == LM_SHAPE_EVEN ? " (uneven shards need LM_SHAPE_ALLGATHER or LM_SHAPE_GIVEN)" : "");
  }
  lm_dist_tensor_s *t = tensor_new(m, L, local->dtype, local->device, false);
  if (!m->member && !managed) return t;
  try {
    if (managed) {
      auto s = std::make_shared<Storage>();
      s->data = static_cast<char *>(local->data) + local->byte_offset;
      s->bytes = t->local_bytes();
      s->managed = managed;
      t->storage = s;
    } else if (borrow) {
      auto s = std::make_shared<Storage>();
      s->data = static_cast<char *>(local->data) + local->byte_offset;
      s->bytes = t->local_bytes();
      t->storage = s;
    } else if (is_device(local->device)) {  // a device copy in the mesh's stream order
      t->storage = device_storage_alloc(mesh_mem(m), local->device, t->local_bytes(), false);
      device_copy_d2d(mesh_mem(m), t->storage->data, static_cast<const char *>(local->data) + local->byte_offset,
                      t->local_bytes());
    } else {
      t->storage = pre && pre->bytes == t->local_bytes() ? pre : storage_alloc(t->local_bytes(), false);
      if (numel) copy_strided_to_compact(t->storage->data, local, t->esize);
    }
  } catch (...) {
    if (t->storage) t->storage->managed = nullptr;  // ownership stays with the caller on failure
    tensor_release(t);
    throw;
  }
  return t;
}

static void check_global_buffer(const DLTensor *g, const Layout &L, DLDataType dtype, const char *fn,
                                const char *arg) {
  LM_CHECK_ARG(g->ndim == L.ndim(), "%s: %s has ndim %d, the tensor %d", fn, arg, g->ndim,
               L.ndim());
  Shape s = check_shape(g->ndim, g->shape, strfmt("%s: %s", fn, arg).c_str());
  LM_CHECK_ARG(s == L.gshape, "%s: %s has shape %s, the global shape is %s", fn, arg,
               shape_str(s).c_str(), shape_str(L.gshape).c_str());
  LM_CHECK_ARG(dtype_equal(g->dtype, dtype), "%s: %s has dtype %s, the tensor %s", fn, arg,
               dl_dtype_name(g->dtype).c_str(), dl_dtype_name(dtype).c_str());
  LM_CHECK_ARG(enum_bits(g->device.device_type) == kDLCPU, "%s: %s must be host memory (kDLCPU)", fn, arg);
  LM_CHECK_ARG(is_compact(g), "%s: %s must be compact row-major", fn, arg);
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  LM_CHECK_ARG(g->data != nullptr || n == 0, "%s: %s->data is NULL", fn, arg);
}

// A one-rank layout on parent rank `rank`, fully replicated: the shape of "the root holds all".
static Layout root_layout(int rank, const Shape &g) {
  auto grid = std::make_shared<Grid>(Shape{1}, std::vector<int>{rank});
  return Layout(grid, {lm_placement_t{LM_REPLICATE, 0, 0, 0}}, g);
}

lm_dist_tensor_s *tensor_from_global(lm_mesh_t mesh, const DLTensor *global,
                                     const lm_placement_t *pl, int root) {
  const char *fn = "lm_dist_tensor_from_global";
  lm_mesh_s *m = mesh_check(mesh, fn);
  if (root < 0 || m->check_level == 0) mesh_check_usable(m, fn);  // else agreed below
  if (root < 0) {
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
      std::vector<lm_placement_t> rep(m->ndim(), lm_placement_t{LM_REPLICATE, 0, 0, 0});
      Layout R(m->grid, rep, g);
      // Replicate -> target on one rank is local: slicing plus the Partial identity fill.
      auto plan = plan_build(R, L, global->dtype, m->world, m->world_rank);
      plan->run(static_cast<const char *>(global->data) + global->byte_offset, t->data());
    } catch (...) {
      tensor_release(t);
      throw;
    }
    return t;
  }
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", fn, m->world_rank);
  // The root validates and broadcasts ndim, shape and dtype (with its verdict).
  const int W = kMaxDims + 3;
  long long meta[W] = {0};
  std::string root_err;
  struct Ctx {
    lm_mesh_s *m;
    const lm_placement_t *pl;
    int root;
    const DLTensor *global;
    const long long *meta;
  } ctx{m, pl, root, global, meta};
  auto describe = [](const void *p, int f) -> std::string {
    const Ctx &c = *static_cast<const Ctx *>(p);
    switch (f) {
      case 1: return mesh_desc(c.m);
      case 2: return format_placements(c.pl, c.m->ndim());
      case 3: return std::to_string(c.root);
    }
    return "?";
  };
  if (m->index == root) {
    try {
      LM_CHECK_ARG(global != nullptr, "%s: global is NULL on the root", fn);
      Shape g = check_shape(global->ndim, global->shape, strfmt("%s: global", fn).c_str());
      DType dt = dtype_from_dl(global->dtype, strfmt("%s: global->dtype", fn).c_str());
      Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
      check_partial_dtype(pl, m->ndim(), dt, strfmt("%s: placements", fn).c_str());
      check_global_buffer(global, L, global->dtype, fn, "global");
      meta[1] = global->ndim;
      meta[2] = (long long)global->dtype.code << 16 | (long long)global->dtype.bits << 8 | global->dtype.lanes;
      for (int i = 0; i < global->ndim; ++i) meta[3 + i] = global->shape[i];
    } catch (const Error &e) {
      meta[0] = e.status();
      root_err = e.message();
    }
  }
  if (m->check_level >= 1) {
    // Agree on the root (and mesh, placements) before the broadcast that needs it; the root's
    // verdict on its global travels with it.
    lm_status_t st = (lm_status_t)meta[0];
    std::string err = root_err;
    try {
      mesh_check_usable(m, fn);  // a broken mesh on one rank fails the call on all
      LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn,
                   root, (long long)m->grid->size());
    } catch (const Error &e) {
      st = e.status();
      err = e.message();
    }
    Fingerprint fp("lm_dist_tensor_from_global (root >= 0)");
    fp.add("mesh", m->id);
    fp.add("placements", hash_placements(pl, m->ndim()));
    fp.add("root", (uint64_t)root);
    agree_call(fn, m, nullptr, &fp, describe, &ctx, st, err, root);
  }
  LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn, root,
               (long long)m->grid->size());
  try {
    mpi_check(MPI_Bcast(meta, W, MPI_LONG_LONG, root, m->comm), strfmt("%s: MPI_Bcast", fn).c_str());
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
  // Ranks other than the root may pass NULL; a global they do pass must have the root's shape
  // and dtype (a second small agreement, since only now do they know the root's). The target
  // and its plan are made first, so that a failure there is agreed too.
  bool mine = global != nullptr && m->index != root;
  Shape own = g;
  DLDataType own_dtype = dtype;
  if (mine) {
    own.assign(global->shape ? global->shape : g.data(),
               (global->shape ? global->shape : g.data()) + (global->ndim > 0 && global->ndim <= kMaxDims ? global->ndim : 0));
    own_dtype = global->dtype;
  }
  lm_dist_tensor_s *t = nullptr;
  std::unique_ptr<Plan> plan;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
    t = tensor_new(m, L, dtype, DLDevice{kDLCPU, 0}, false);
    t->storage = storage_alloc(t->local_bytes(), false);
    Layout R = root_layout(m->grid->rank_at_index(root), g);
    plan = plan_build(R, L, dtype, m->world, m->world_rank);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", fn);
  }
  Fingerprint fp("lm_dist_tensor_from_global (root >= 0)");
  fp.add("shape of global", hash_shape(own.data(), (int)own.size()));
  fp.add("dtype of global", hash_dtype(own_dtype));
  struct Ctx2 {
    const Shape *s;
    DLDataType d;
  } c2{&own, own_dtype};
  try {
    agree_call(fn, m, nullptr, m->check_level >= 1 ? &fp : nullptr,
               [](const void *p, int f) -> std::string {
                 const Ctx2 &c = *static_cast<const Ctx2 *>(p);
                 if (f == 2) return dl_dtype_name(c.d);
                 std::string r = "[";
                 for (size_t i = 0; i < c.s->size(); ++i)
                   r += strfmt(i ? ", %lld" : "%lld", (long long)(*c.s)[i]);
                 return r + "]";
               },
               &c2, st, err);
  } catch (...) {
    tensor_release(t);
    throw;
  }
  try {
    TimeoutScope ts(m->timeout);
    const void *in = m->index == root ? static_cast<const char *>(global->data) + global->byte_offset
                                      : nullptr;
    plan->run(in, t->data());
  } catch (const Error &e) {
    tensor_release(t);
    mesh_break(m, e);
  }
  return t;
}

void tensor_gather(lm_dist_tensor_t tensor, int root, DLTensor *dst) {
  const char *fn = "lm_dist_tensor_gather";
  lm_dist_tensor_s *t = tensor_check(tensor, fn);
  lm_mesh_s *m = t->mesh;  // retained by the tensor
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", fn, m->world_rank);
  bool receives = root < 0 || m->index == root;
  std::unique_ptr<Plan> plan;
  // Every rank checks its arguments (the receiving ones their dst) and all agree on the verdict
  // and, at LM_CHECK >= 1, on a fingerprint of the call before any data moves: a refused dst
  // leaves no message behind and no rank waiting.
  std::string err;
  lm_status_t st = LM_SUCCESS;
  try {
    mesh_check_usable(m, fn);
    LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn,
                 root, (long long)m->grid->size());
    if (receives) {
      LM_CHECK_ARG(dst != nullptr, "%s: dst is NULL", fn);
      check_global_buffer(dst, t->layout, t->dtype, fn, "dst");
    }
    if (root < 0) {
      std::vector<lm_placement_t> rep(m->ndim(), lm_placement_t{LM_REPLICATE, 0, 0, 0});
      plan = plan_build(t->layout, Layout(m->grid, rep, t->layout.gshape), t->dtype, m->world,
                        m->world_rank);
    } else {
      plan = plan_build(t->layout, root_layout(m->grid->rank_at_index(root), t->layout.gshape),
                        t->dtype, m->world, m->world_rank);
    }
  } catch (const Error &e) {
    err = e.message();
    st = e.status();
  } catch (const std::bad_alloc &) {
    st = LM_ERR_OUT_OF_MEMORY;
    err = strfmt("%s: out of memory", fn);
  }
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
  agree_call(fn, m, nullptr, m->check_level >= 1 ? &fp : nullptr,
             [](const void *p, int f) -> std::string {
               const Ctx &c = *static_cast<const Ctx *>(p);
               switch (f) {
                 case 1: return mesh_desc(c.t->mesh);
                 case 2: return c.t->layout.str();
                 case 3: {
                   std::string r = "[";
                   for (size_t i = 0; i < c.t->layout.gshape.size(); ++i)
                     r += strfmt(i ? ", %lld" : "%lld", (long long)c.t->layout.gshape[i]);
                   return r + "]";
                 }
                 case 4: return dl_dtype_name(c.t->dtype);
                 case 5: return c.root < 0 ? std::string("-1 (all ranks)") : std::to_string(c.root);
               }
               return "?";
             },
             &ctx, st, err, root);
  if (m->check_level >= 2) check_replicas(t, fn);
  try {
    TimeoutScope ts(m->timeout);
    void *out = receives ? static_cast<char *>(dst->data) + dst->byte_offset : nullptr;
    if (is_device(t->device)) {  // dst is host memory: the shard goes through host staging
      void *h = stage_to_host_agreed(m, m, t->data(), t->local_bytes());
      try {
        plan->run(h, out);
      } catch (...) {
        stage_release(mesh_mem(m), h);
        throw;
      }
      stage_release(mesh_mem(m), h);
    } else {
      plan->run(t->data(), out);
    }
  } catch (const Error &e) {
    mesh_break(m, e);
  }
}

MPI_Comm transfer_comm(lm_mesh_s *src, lm_mesh_s *dst, const char *fn) {
  if (src == dst) return src->world;
  int res = MPI_UNEQUAL;
  mpi_check(MPI_Comm_compare(src->world, dst->world, &res), strfmt("%s: MPI_Comm_compare", fn).c_str());
  if (res != MPI_CONGRUENT && res != MPI_IDENT)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: the source and target meshes were created from different parent communicators", fn);
  return src->world;
}

namespace {
struct ReshardCtx {
  lm_dist_tensor_s *t;
  lm_mesh_s *sm, *dm;
  const lm_placement_t *pl;
};
std::string describe_reshard(const void *p, int field) {
  const ReshardCtx &c = *static_cast<const ReshardCtx *>(p);
  switch (field) {
    case 1: return mesh_desc(c.sm) + " (source)";
    case 2: return mesh_desc(c.dm) + " (target)";
    case 3: return c.t->layout.str();
    case 4: {
      std::string r = "[";
      for (size_t i = 0; i < c.t->layout.gshape.size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)c.t->layout.gshape[i]);
      return r + "]";
    }
    case 5: return dl_dtype_name(c.t->dtype);
    case 6: return c.pl ? format_placements(c.pl, c.dm->ndim()) : std::string("NULL");
  }
  return "?";
}
}  // namespace

lm_dist_tensor_s *tensor_reshard(lm_dist_tensor_s *t, lm_mesh_s *dst_mesh,
                                 const lm_placement_t *pl, const char *fn) {
  expect_object(t, fn);
  lm_mesh_s *sm = t->mesh;
  lm_mesh_s *dm = dst_mesh ? dst_mesh : sm;
  const int level = check_level(sm, dm);
  const bool part = sm->member || dm->member;
  // Everything that can fail locally happens before any data moves (checks, plan, output
  // buffer), so that with the agreement a failure on one rank is a failure on all.
  lm_dist_tensor_s *out = nullptr;
  std::shared_ptr<Plan> plan;
  bool alias = false;
  auto prepare = [&] {
    mesh_check_usable(sm, strfmt("%s: src mesh", fn).c_str());
    mesh_check_usable(dm, strfmt("%s: dst_mesh", fn).c_str());
    MPI_Comm comm = transfer_comm(sm, dm, fn);
    Layout L = make_layout(dm, pl, t->layout.gshape, strfmt("%s: placements", fn).c_str());
    check_reshard(t->layout, L, t->dt);
    out = tensor_new(dm, L, t->dtype, t->device, false);
    if (!part) return;
    if (sm == dm)
      plan = cached_plan(sm, t->layout, L, t->dtype, is_device(t->device));
    else
      plan = plan_build(t->layout, L, t->dtype, comm, sm->world_rank);
    size_t off = 0;
    // Host only: a device reshard runs collectives of the mesh (the transport choice, NCCL
    // init, the staging agreement) on every rank, so no rank may return early on its own, and
    // whether a rank can alias depends on its shard (an empty one cannot).
    if (plan->steps.size() == 1 && plan->steps[0]->alias_offset(&off) && t->storage &&
        !is_device(t->device)) {
      out->storage = t->storage;  // Replicate -> Shard: a view of the source, no copy
      out->byte_offset = t->byte_offset + off;
      alias = true;
    } else if (dm->member) {
      out->storage = is_device(t->device)
                          ? device_storage_alloc(mesh_mem(dm), t->device, out->local_bytes(), false)
                          : storage_alloc(out->local_bytes(), false);
    }
  };
  if (level == 0 || !part) {
    try {
      prepare();
    } catch (...) {
      tensor_release(out);
      throw;
    }
  } else {
    lm_status_t st = LM_SUCCESS;
    std::string err;
    try {
      prepare();
    } catch (const Error &e) {
      st = e.status();
      err = e.message();
    } catch (const std::bad_alloc &) {
      st = LM_ERR_OUT_OF_MEMORY;
      err = strfmt("%s: out of memory", fn);
    }
    Fingerprint fp("lm_dist_tensor_reshard");
    fp.add("source mesh", sm->id);
    fp.add("target mesh", dm->id);
    fp.add("source placements", hash_placements(t->layout.pl.data(), sm->ndim()));
    fp.add("global shape", hash_shape(t->layout.gshape.data(), t->layout.ndim()));
    fp.add("dtype", hash_dtype(t->dtype));
    fp.add("target placements", hash_placements(pl, dm->ndim()));
    ReshardCtx ctx{t, sm, dm, pl};
    try {
      agree_call(fn, sm, dm, &fp, describe_reshard, &ctx, st, err);
      if (level >= 2 && sm->member) check_replicas(t, fn);
    } catch (...) {
      tensor_release(out);
      throw;
    }
  }
  if (!part || alias) return out;  // neither mesh: nothing to do, never waited on
  try {
    TimeoutScope ts(call_timeout(sm, dm));
    if (is_device(t->device)) {
      device_run_plan(sm, dm, *plan, t->data(), t->local_bytes(), out->data(), out->local_bytes(),
                      t->device.device_id);
      return out;
    }
    plan->run(t->data(), out->data());
  } catch (const Error &e) {
    tensor_release(out);
    if (dm != sm && (e.status() == LM_ERR_MPI || e.status() == LM_ERR_NCCL ||
                     e.status() == LM_ERR_TIMEOUT || e.status() == LM_ERR_REMOTE)) {
      dm->broken = true;
      dm->broken_why = e.message();
    }
    mesh_break(sm, e);
  } catch (...) {
    tensor_release(out);
    throw;
  }
  return out;
}

}  // namespace lm

namespace lm {

void check_replicas(lm_dist_tensor_s *t, const char *fn) {
  lm_mesh_s *m = t->mesh;
  if (!m->member) return;
  bool any = false;
  for (int k = 0; k < m->ndim(); ++k)
    if (t->layout.pl[(size_t)k].kind == LM_REPLICATE && m->grid->shape()[(size_t)k] > 1) any = true;
  if (!any) return;
  Hasher h;
  if (t->data()) h.bytes(t->data(), t->local_bytes());
  unsigned long long mine = h.h;
  std::vector<unsigned long long> all((size_t)m->grid->size());
  try {
    mpi_check(MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1,
                            MPI_UNSIGNED_LONG_LONG, m->comm),
              strfmt("%s: MPI_Allgather (LM_CHECK=2 replica hashes)", fn).c_str());
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  // Ranks whose coordinates differ only along Replicate dims must agree.
  std::map<Shape, int64_t> first;
  Shape c((size_t)m->ndim());
  for (int64_t r = 0; r < m->grid->size(); ++r) {
    m->grid->coord_of(r, c.data());
    for (int k = 0; k < m->ndim(); ++k)
      if (t->layout.pl[(size_t)k].kind == LM_REPLICATE) c[(size_t)k] = 0;
    auto it = first.emplace(c, r).first;
    if (all[(size_t)it->second] != all[(size_t)r])
      fail(LM_ERR_MISMATCH,
           "%s: ranks disagree on the data of a Replicate tensor (LM_CHECK=2): mesh rank %lld "
           "(rank %d) and mesh rank %lld (rank %d) hold different values for placements %s",
           fn, (long long)it->second, m->grid->rank_at_index(it->second), (long long)r,
           m->grid->rank_at_index(r), t->layout.str().c_str());
  }
}

}  // namespace lm
