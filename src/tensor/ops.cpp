// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/ops.hpp"

#include <cstring>

#include "core/error.hpp"
#include "device/device.hpp"

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
  dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  check_device(device, strfmt("%s: device", fn).c_str());
  Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
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

lm_dist_tensor_s *tensor_from_local(lm_mesh_t mesh, const DLTensor *local,
                                    const lm_placement_t *pl, int mode,
                                    const int64_t *gshape, unsigned flags,
                                    DLManagedTensor *managed, const char *fn) {
  lm_mesh_s *m = mesh_check(mesh, fn);
  const int mode_bits = mode;
  LM_CHECK_ARG(mode_bits == LM_SHAPE_GIVEN || mode_bits == LM_SHAPE_EVEN ||
                   mode_bits == LM_SHAPE_ALLGATHER,
               "%s: shape_mode %d is not an lm_shape_mode_t", fn, mode_bits);
  if (mode != LM_SHAPE_GIVEN && !m->member)
    fail(LM_ERR_INVALID_USAGE, "%s: a rank outside the mesh must use LM_SHAPE_GIVEN", fn);
  if (mode == LM_SHAPE_ALLGATHER) mesh_check_usable(m, fn);
  Shape ls;
  int64_t numel = 1;
  // Local checks. With LM_SHAPE_ALLGATHER (collective) a failure still joins the allgather.
  try {
    LM_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
    LM_CHECK_ARG(flags == LM_FROM_LOCAL_COPY || flags == LM_FROM_LOCAL_BORROW,
                 "%s: flags 0x%x unknown (LM_FROM_LOCAL_COPY or LM_FROM_LOCAL_BORROW)", fn, flags);
    if (m->member)
      ls = check_shape(local->ndim, local->shape, strfmt("%s: local", fn).c_str());
    else
      LM_CHECK_ARG(local->ndim >= 0 && local->ndim <= kMaxDims, "%s: local->ndim %d must be in "
                   "[0, %d]", fn, local->ndim, kMaxDims);
    dtype_from_dl(local->dtype, strfmt("%s: local->dtype", fn).c_str());
    check_device(local->device, strfmt("%s: local->device", fn).c_str());
    validate_placements(pl, m->ndim(), local->ndim, strfmt("%s: placements", fn).c_str());
    for (int64_t e : ls) numel *= e;
    if (m->member)
      LM_CHECK_ARG(local->data != nullptr || numel == 0, "%s: local->data is NULL", fn);
    bool borrow = managed != nullptr || flags == LM_FROM_LOCAL_BORROW;
    if (borrow && m->member)
      LM_CHECK_ARG(is_compact(local),
                   "%s: local has strides that are not compact row-major; use LM_FROM_LOCAL_COPY", fn);
    if (is_device(local->device) && m->member && numel > 0)
      check_device_pointer(static_cast<const char *>(local->data) + local->byte_offset,
                           local->device, strfmt("%s: local->data", fn).c_str());
    if (is_device(local->device) && m->member && !borrow && !is_compact(local))
      fail(LM_ERR_NOT_SUPPORTED, "%s: local is a strided device tensor: LM_FROM_LOCAL_COPY copies "
           "compact device tensors only (make it contiguous first)", fn);
  } catch (const Error &e) {
    if (mode != LM_SHAPE_ALLGATHER) throw;
    allgather_global_shape(m, pl, local, fn, &e);  // throws e after the collective
  }
  bool borrow = managed != nullptr || flags == LM_FROM_LOCAL_BORROW;

  Shape g;
  switch (mode) {
    case LM_SHAPE_GIVEN:
      g = check_shape(local->ndim, gshape, strfmt("%s: global_shape", fn).c_str());
      break;
    case LM_SHAPE_EVEN:
      g = ls;
      for (int k = 0; k < m->ndim(); ++k)
        if (pl[k].kind == LM_SHARD) g[pl[k].dim] *= m->grid->shape()[k];
      check_numel(g, fn);
      break;
    case LM_SHAPE_ALLGATHER:
      g = allgather_global_shape(m, pl, local, fn, nullptr);
      check_numel(g, fn);
      break;
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
      t->storage = device_storage_alloc(m, local->device, t->local_bytes(), false);
      device_copy_d2d(m, t->storage->data, static_cast<const char *>(local->data) + local->byte_offset,
                      t->local_bytes());
    } else {
      t->storage = storage_alloc(t->local_bytes(), false);
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
  lm_mesh_s *m = mesh_check_usable(mesh, fn);
  if (root < 0) {
    LM_CHECK_ARG(global != nullptr, "%s: global is NULL (root < 0: every rank passes it)", fn);
    Shape g = check_shape(global->ndim, global->shape, strfmt("%s: global", fn).c_str());
    dtype_from_dl(global->dtype, strfmt("%s: global->dtype", fn).c_str());
    Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
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
  LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn, root,
               (long long)m->grid->size());
  // The root validates and broadcasts ndim, shape and dtype (with its verdict).
  const int W = kMaxDims + 3;
  long long meta[W] = {0};
  std::string root_err;
  if (m->index == root) {
    try {
      LM_CHECK_ARG(global != nullptr, "%s: global is NULL on the root", fn);
      Shape g = check_shape(global->ndim, global->shape, strfmt("%s: global", fn).c_str());
      dtype_from_dl(global->dtype, strfmt("%s: global->dtype", fn).c_str());
      Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
      check_global_buffer(global, L, global->dtype, fn, "global");
      meta[1] = global->ndim;
      meta[2] = (long long)global->dtype.code << 16 | (long long)global->dtype.bits << 8 | global->dtype.lanes;
      for (int i = 0; i < global->ndim; ++i) meta[3 + i] = global->shape[i];
    } catch (const Error &e) {
      meta[0] = e.status();
      root_err = e.message();
    }
  }
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
  Layout L = make_layout(m, pl, g, strfmt("%s: placements", fn).c_str());
  lm_dist_tensor_s *t = tensor_new(m, L, dtype, DLDevice{kDLCPU, 0}, false);
  try {
    t->storage = storage_alloc(t->local_bytes(), false);
    Layout R = root_layout(m->grid->rank_at_index(root), g);
    auto plan = plan_build(R, L, dtype, m->world, m->world_rank);
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
  lm_mesh_s *m = mesh_check_usable(t->mesh, fn);
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", fn, m->world_rank);
  LM_CHECK_ARG(root < m->grid->size(), "%s: root %d is not a mesh rank (mesh size %lld)", fn, root,
               (long long)m->grid->size());
  bool receives = root < 0 || m->index == root;
  // Checks dst on a receiving rank, returning the verdict instead of throwing: the ranks agree
  // on it before any data moves, so a refused dst leaves no message behind and no rank waiting.
  std::string err;
  auto check_dst = [&]() -> lm_status_t {
    try {
      LM_CHECK_ARG(dst != nullptr, "%s: dst is NULL", fn);
      check_global_buffer(dst, t->layout, t->dtype, fn, "dst");
      return LM_SUCCESS;
    } catch (const Error &e) {
      err = e.message();
      return e.status();
    }
  };
  if (root < 0) {
    lm_status_t st = check_dst();  // every rank checks its own: one small allreduce agrees
    mesh_agree(m, st, err, "lm_dist_tensor_gather: dst checks");
  } else {
    int verdict = receives ? check_dst() : LM_SUCCESS;  // only the root can: it broadcasts
    try {
      mpi_check(MPI_Bcast(&verdict, 1, MPI_INT, root, m->comm), "lm_dist_tensor_gather: MPI_Bcast");
    } catch (const Error &e) {
      mesh_break(m, e);
    }
    if (verdict) {
      if (receives) throw Error((lm_status_t)verdict, err);
      fail(LM_ERR_REMOTE, "%s: the root (mesh rank %d) refused its dst: %s", fn, root,
           lm_status_string((lm_status_t)verdict));
    }
  }
  std::unique_ptr<Plan> plan;
  if (root < 0) {
    std::vector<lm_placement_t> rep(m->ndim(), lm_placement_t{LM_REPLICATE, 0, 0, 0});
    plan = plan_build(t->layout, Layout(m->grid, rep, t->layout.gshape), t->dtype, m->world,
                      m->world_rank);
  } else {
    plan = plan_build(t->layout, root_layout(m->grid->rank_at_index(root), t->layout.gshape),
                      t->dtype, m->world, m->world_rank);
  }
  try {
    void *out = receives ? static_cast<char *>(dst->data) + dst->byte_offset : nullptr;
    if (is_device(t->device)) {  // dst is host memory: the shard goes through host staging
      void *h = stage_to_host_agreed(m, m, t->data(), t->local_bytes());
      try {
        plan->run(h, out);
      } catch (...) {
        stage_release(m, h);
        throw;
      }
      stage_release(m, h);
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

lm_dist_tensor_s *tensor_reshard(lm_dist_tensor_t src, lm_mesh_t dst_mesh,
                                 const lm_placement_t *pl, const char *fn) {
  lm_dist_tensor_s *t = tensor_check(src, strfmt("%s: src", fn).c_str());
  lm_mesh_s *sm = mesh_check_usable(t->mesh, strfmt("%s: src mesh", fn).c_str());
  lm_mesh_s *dm = dst_mesh ? mesh_check_usable(dst_mesh, strfmt("%s: dst_mesh", fn).c_str()) : sm;
  MPI_Comm comm = transfer_comm(sm, dm, fn);
  Layout L = make_layout(dm, pl, t->layout.gshape, strfmt("%s: placements", fn).c_str());
  check_reshard(t->layout, L, t->dt);
  lm_dist_tensor_s *out = tensor_new(dm, L, t->dtype, t->device, false);
  if (!sm->member && !dm->member) return out;  // neither mesh: nothing to do, never waited on
  try {
    std::shared_ptr<Plan> plan;
    if (sm == dm) {
      std::string key = t->layout.key() + "->" + L.key() + strfmt("#%u.%u.%u", t->dtype.code, t->dtype.bits, t->dtype.lanes);
      if (is_device(t->device)) key += "@cuda";  // device plans keep their own transport
      auto it = sm->plan_cache.find(key);
      if (it != sm->plan_cache.end()) {
        plan = it->second.first;
        it->second.second = ++sm->plan_clock;
      } else {
        plan = plan_build(t->layout, L, t->dtype, comm, sm->world_rank);
        if (sm->plan_cache.size() >= 64) {
          auto lru = sm->plan_cache.begin();
          for (auto i = sm->plan_cache.begin(); i != sm->plan_cache.end(); ++i)
            if (i->second.second < lru->second.second) lru = i;
          sm->plan_cache.erase(lru);
        }
        sm->plan_cache.emplace(key, std::make_pair(plan, ++sm->plan_clock));
      }
    } else {
      plan = plan_build(t->layout, L, t->dtype, comm, sm->world_rank);
    }
    size_t off = 0;
    if (plan->steps.size() == 1 && plan->steps[0]->alias_offset(&off) && t->storage) {
      out->storage = t->storage;  // Replicate -> Shard: a view of the source, no copy
      out->byte_offset = t->byte_offset + off;
      return out;
    }
    if (is_device(t->device)) {
      if (dm->member) out->storage = device_storage_alloc(dm, t->device, out->local_bytes(), false);
      device_run_plan(sm, dm, *plan, t->data(), t->local_bytes(), out->data(), out->local_bytes(),
                      t->device.device_id);
      return out;
    }
    if (dm->member) out->storage = storage_alloc(out->local_bytes(), false);
    plan->run(t->data(), out->data());
  } catch (const Error &e) {
    tensor_release(out);
    if (dm != sm && (e.status() == LM_ERR_MPI || e.status() == LM_ERR_NCCL)) {
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
