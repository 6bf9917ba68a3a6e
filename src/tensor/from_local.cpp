// SPDX-License-Identifier: BSD-3-Clause
// lm_dist_tensor_from_local / _from_managed (and lm_local_map's outputs): a dist tensor from each
// rank's local shard, by copy, borrow or adoption of a DLManagedTensor; its global shape given,
// implied by even shards, or agreed from every rank's extents (LM_SHAPE_ALLGATHER, collective).
#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "mesh/device.hpp"
#include "tensor/ops.hpp"

namespace lm {

namespace {

// The layout from an allgather of local extents over the mesh (members only): the global shape,
// and the extents of ragged dims with LM_EXTENTS_AGREED.
// `failed` (this rank's own checks failed): it still takes part, with a flag, so every rank
// learns of the failure instead of waiting; then it rethrows its own error, the others report it.
Layout allgather_layout(lm_mesh_s *m, const lm_placement_t *pl, const DLTensor *local,
                        const char *fn, const Error *failed) {
  require_mpi(fn);
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
  return layout_from_extents(
      m->grid, pl, n, local->shape,
      [&](int64_t r, int d) { return (int64_t)all[(size_t)(r * W + 2 + d)]; }, fn);
}

// One call: its arguments and what the local checks found.
struct FromLocal {
  lm_mesh_s *m;
  const DLTensor *local;
  const lm_placement_t *pl;
  int mode;
  const int64_t *gshape;
  unsigned flags;
  DLManagedTensor *managed;
  const char *fn;
  Shape ls;          // the local shape (members)
  Shape pad;         // a padded borrow: the extents of the array it lies in (else empty)
  int64_t numel = 1;
  bool borrow = false;
  bool level2 = false;  // LM_CHECK=2: the local modes also check every rank's extents, collectively
  std::shared_ptr<Storage> pre;  // LM_SHAPE_ALLGATHER's copy, allocated before the agreement
};

std::string shape_text(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += strfmt(i ? ", %lld" : "%lld", (long long)s[i]);
  return r + "]";
}

// The local checks (throw). With LM_SHAPE_ALLGATHER (collective) the caller agrees on a failure.
void check_local(FromLocal &c) {
  const char *fn = c.fn;
  lm_mesh_s *m = c.m;
  const DLTensor *local = c.local;
  if (c.mode == LM_SHAPE_ALLGATHER) mesh_check_usable(m, fn);  // agreed: fails on all
  LM_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
  LM_CHECK_ARG(c.flags == LM_FROM_LOCAL_COPY || c.flags == LM_FROM_LOCAL_BORROW,
               "%s: flags 0x%x unknown (LM_FROM_LOCAL_COPY or LM_FROM_LOCAL_BORROW)", fn, c.flags);
  if (m->member)
    c.ls = check_shape(local->ndim, local->shape, ArgName(fn, "local").c_str());
  else
    LM_CHECK_ARG(local->ndim >= 0 && local->ndim <= kMaxDims, "%s: local->ndim %d must be in "
                 "[0, %d]", fn, local->ndim, kMaxDims);
  DType dt = dtype_from_dl(local->dtype, ArgName(fn, "local->dtype").c_str());
  check_device(local->device, ArgName(fn, "local->device").c_str());
  validate_placements(c.pl, m->ndim(), local->ndim, ArgName(fn, "placements").c_str(),
                      c.mode == LM_SHAPE_ALLGATHER);
  check_partial_dtype(c.pl, m->ndim(), dt, ArgName(fn, "placements").c_str());
  for (int64_t e : c.ls) c.numel *= e;
  if (m->member) LM_CHECK_ARG(local->data != nullptr || c.numel == 0, "%s: local->data is NULL", fn);
  if (m->member && c.numel > 0) {  // the bytes it reaches lie after data, without wrapping
    check_strides_span(local, dtype_size(dt), ArgName(fn, "local").c_str());
    if (c.borrow) check_alignment(local, dt, ArgName(fn, "local").c_str());
  }
  if (c.borrow && m->member) {
    // A borrow keeps compact row-major strides, or padded rows of a host array (its strides
    // nested, each a multiple of the next: a ScaLAPACK array with LLD_ > LOCr, a slice of a C
    // array), also when adopted (lm_dist_tensor_from_dlpack).
    Shape pad;
    const bool padded = !is_compact(local) && padded_extents(local, &pad);
    LM_CHECK_ARG(is_compact(local) || (padded && !is_device(local->device)),
                 "%s: local has strides that are %s; use LM_FROM_LOCAL_COPY", fn,
                 padded ? "padded rows of device memory (a device borrow must be compact)"
                        : "neither compact nor padded row-major (each stride a multiple of the "
                          "next, the innermost 1)");
    if (padded) c.pad = pad;
  }
  if (is_device(local->device) && m->member && c.numel > 0)
    check_device_pointer(static_cast<const char *>(local->data) + local->byte_offset,
                         local->device, ArgName(fn, "local->data").c_str());
  if (is_device(local->device) && m->member && !c.borrow && !is_compact(local))
    fail(LM_ERR_NOT_SUPPORTED, "%s: local is a strided device tensor: LM_FROM_LOCAL_COPY copies "
         "compact device tensors only (make it contiguous first)", fn);
  // The collective mode allocates its (host) copy before the ranks agree, so a failure is agreed.
  if (c.mode == LM_SHAPE_ALLGATHER && m->member && !c.borrow && !is_device(local->device))
    c.pre = storage_alloc(
        (size_t)c.numel * (((size_t)local->dtype.bits * local->dtype.lanes + 7) / 8), false);
}

// A local check failed: the collective forms still meet the other ranks (which then fail too),
// then this rank throws its own error.
[[noreturn]] void fail_checked(FromLocal &c, const Error &e) {
  if (c.mode != LM_SHAPE_ALLGATHER && c.level2)
    agree_call(c.fn, c.m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
  if (c.mode != LM_SHAPE_ALLGATHER) throw e;
  if (c.m->check_level == 0) allgather_layout(c.m, c.pl, c.local, c.fn, &e);  // throws e
  agree_call(c.fn, c.m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
  throw e;
}

// Agreement on (mesh, placements, extra fields) before a collective form proceeds.
void agree_args(FromLocal &c, const char *op, const char *field3, uint64_t h3, std::string d3,
                DLDataType dtype) {
  Fingerprint fp(op);
  fp.add("mesh", c.m->id);
  fp.add("placements", hash_placements(c.pl, c.m->ndim()));
  fp.add(field3, h3);
  fp.add("dtype", hash_dtype(dtype));
  struct Ctx {
    lm_mesh_s *m;
    const lm_placement_t *pl;
    std::string d3;
    DLDataType d;
  } ctx{c.m, c.pl, std::move(d3), dtype};
  agree_call(c.fn, c.m, nullptr, &fp,
             [](const void *p, int f) -> std::string {
               const Ctx &x = *static_cast<const Ctx *>(p);
               switch (f) {
                 case 1: return mesh_desc(x.m);
                 case 2: return placements_desc(x.pl, x.m->ndim());
                 case 3: return x.d3;
                 case 4: return dl_dtype_name(x.d);
               }
               return "?";
             },
             &ctx, LM_SUCCESS, std::string());
}

// The global shape of the local modes: given, or the local extents times the mesh extents.
Shape local_mode_shape(FromLocal &c) {
  try {
    if (c.mode == LM_SHAPE_GIVEN)
      return check_shape(c.local->ndim, c.gshape, ArgName(c.fn, "global_shape").c_str());
    Shape g = even_global_shape(*c.m->grid, c.pl, c.ls);
    check_numel(g, c.fn);
    return g;
  } catch (const Error &e) {
    if (c.level2)
      agree_call(c.fn, c.m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
    throw;
  }
}

// LM_CHECK=2: the ranks agree on the shape, and every rank's extents must be the torch.chunk
// shards of it (same data on all ranks, so the same verdict everywhere).
void check_level2(FromLocal &c, const Shape &g) {
  agree_args(c, "lm_dist_tensor_from_local (LM_CHECK=2)", "global shape",
             hash_shape(g.data(), (int)g.size()), shape_text(g), c.local->dtype);
  Shape from_extents = allgather_layout(c.m, c.pl, c.local, c.fn, nullptr).gshape;
  if (from_extents != g)
    fail(LM_ERR_MISMATCH,
         "%s: the ranks' local extents (LM_CHECK=2) give global shape %s, not the %s %s", c.fn,
         shape_text(from_extents).c_str(), c.mode == LM_SHAPE_EVEN ? "even-shard shape" : "given",
         shape_text(g).c_str());
}

// The shard's storage: the adopted DLManagedTensor, the borrowed pointer, or a copy.
void attach_storage(lm_dist_tensor_s *t, FromLocal &c) {
  const DLTensor *local = c.local;
  void *at = static_cast<char *>(local->data) + local->byte_offset;
  if (c.managed || c.borrow) {
    if (!c.pad.empty()) t->set_pad(c.pad);
    auto s = std::make_shared<Storage>();
    s->data = at;
    s->bytes = t->span_bytes();
    s->managed = c.managed;
    t->storage = s;
  } else if (is_device(local->device)) {  // a device copy in the mesh's stream order
    t->storage = device_storage_alloc(mesh_mem(c.m), local->device, t->local_bytes(), false);
    device_copy_d2d(mesh_mem(c.m), t->storage->data, at, t->local_bytes());
  } else {
    t->storage = c.pre && c.pre->bytes == t->local_bytes() ? c.pre
                                                            : storage_alloc(t->local_bytes(), false);
    if (c.numel) copy_strided_to_compact(t->storage->data, local, t->esize);
  }
}

// Attaches t's storage (attach_storage); on failure releases t, and the local tensor stays the
// caller's.
lm_dist_tensor_s *with_storage(lm_dist_tensor_s *t, FromLocal &c) {
  try {
    attach_storage(t, c);
  } catch (...) {
    if (t->storage) t->storage->managed = nullptr;
    tensor_release(t);
    throw;
  }
  return t;
}

}  // namespace

lm_dist_tensor_s *tensor_from_local(lm_mesh_s *m, const DLTensor *local,
                                    const lm_placement_t *pl, int mode,
                                    const int64_t *gshape, unsigned flags,
                                    DLManagedTensor *managed, const char *fn) {
  expect_object(m, fn);
  LM_CHECK_ARG(mode == LM_SHAPE_GIVEN || mode == LM_SHAPE_EVEN || mode == LM_SHAPE_ALLGATHER,
               "%s: shape_mode %d is not an lm_shape_mode_t", fn, mode);
  if (mode != LM_SHAPE_GIVEN && !m->member)
    fail(LM_ERR_INVALID_USAGE, "%s: a rank outside the mesh must use LM_SHAPE_GIVEN", fn);
  if (mode == LM_SHAPE_ALLGATHER && m->check_level == 0) mesh_check_usable(m, fn);
  FromLocal c;
  c.m = m;
  c.local = local;
  c.pl = pl;
  c.mode = mode;
  c.gshape = gshape;
  c.flags = flags;
  c.managed = managed;
  c.fn = fn;
  c.borrow = managed != nullptr || flags == LM_FROM_LOCAL_BORROW;
  c.level2 = m->check_level >= 2 && m->member && mode != LM_SHAPE_ALLGATHER;
  try {
    check_local(c);
  } catch (const Error &e) {
    fail_checked(c, e);
  }
  Layout L;
  if (mode == LM_SHAPE_ALLGATHER) {
    if (m->check_level >= 1)  // the ranks agree on what they were asked before extents travel
      agree_args(c, "lm_dist_tensor_from_local (LM_SHAPE_ALLGATHER)", "local ndim",
                 (uint64_t)local->ndim, std::to_string(local->ndim), local->dtype);
    L = allgather_layout(m, pl, local, fn, nullptr);
    check_numel(L.gshape, fn);
  } else {
    Shape g = local_mode_shape(c);
    if (c.level2) check_level2(c, g);
    L = Layout(m->grid, std::vector<lm_placement_t>(pl, pl + m->ndim()), g);
    check_ragged(L, ArgName(fn, "placements").c_str());
  }
  if (m->member && L.box_at(m->coord.data()).len != c.ls)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: local shape %s on rank %d does not match its shard %s of global shape %s with "
         "placements %s%s", fn, shape_text(c.ls).c_str(), m->world_rank,
         shape_text(L.box_at(m->coord.data()).len).c_str(), shape_text(L.gshape).c_str(),
         L.str().c_str(),
         mode == LM_SHAPE_EVEN ? " (uneven shards need LM_SHAPE_ALLGATHER or LM_SHAPE_GIVEN)" : "");
  lm_dist_tensor_s *t = tensor_new(m, std::move(L), local->dtype, local->device, false);
  if (!m->member && !managed) return t;
  return with_storage(t, c);
}

lm_dist_tensor_s *tensor_adopt_checked(lm_mesh_s *m, Layout L, DLManagedTensor *managed) {
  FromLocal c{};
  c.m = m;
  c.local = &managed->dl_tensor;
  c.managed = managed;
  c.borrow = true;
  return with_storage(tensor_new(m, std::move(L), c.local->dtype, c.local->device, false), c);
}

}  // namespace lm
