// SPDX-License-Identifier: BSD-3-Clause
// lm_dist_tensor_transpose: a tensor's dims permuted (numpy.transpose's axes), laid out anew. The
// reshard moves t to the target's placements relabelled in t's dim order, so that each rank then
// holds, compact, exactly the elements of its target shard in t's order (a dim's chunks do not
// depend on which tensor dim it is); a local transposing copy writes them in the target's order.
// Where the reshard's plan allows (no reduce-scatter or Partial fill writes the output), the
// transposition is fused into it, as COSTA's transform does: its variant (Plan::strided_out)
// writes each box it copies or receives straight into the target through the target's strides
// permuted back to t's dim order. Otherwise one reshard plus one local pass (layout/permute.hpp).
#include <cstring>
#include <functional>

#include "common/error.hpp"
#include "layout/permute.hpp"
#include "mem/cuda.hpp"
#include "mem/ops.hpp"
#include "mesh/device.hpp"
#include "tensor/ops.hpp"

namespace lm {

namespace {

void check_perm(const int *perm, int n, const char *fn) {
  LM_CHECK_ARG(perm != nullptr || n == 0, "%s: perm is NULL", fn);
  std::vector<char> seen((size_t)n, 0);
  for (int d = 0; d < n; ++d) {
    LM_CHECK_ARG(perm[d] >= 0 && perm[d] < n, "%s: perm[%d] = %d is not a dim of the %d-d tensor",
                 fn, d, perm[d], n);
    LM_CHECK_ARG(!seen[(size_t)perm[d]], "%s: perm[%d] = %d repeats a dim (perm must be a "
                 "permutation of 0 .. %d)", fn, d, perm[d], n - 1);
    seen[(size_t)perm[d]] = 1;
  }
}

// The target's placements with their tensor dims renamed to t's (out dim d is t's dim perm[d]).
std::vector<lm_placement_t> in_t_dims(const lm_placement_t *pl, int mesh_ndim, const int *perm) {
  std::vector<lm_placement_t> r(pl, pl + mesh_ndim);
  for (lm_placement_t &p : r)
    if (p.kind == LM_SHARD || p.kind == LM_BLOCK_CYCLIC || p.kind == LM_RAGGED) p.dim = perm[p.dim];
  return r;
}

// The box-copy kernel's view of a permuting copy (one thread per element: layout/boxcopy.hpp's
// arithmetic walks any strides). Dims of extent 1 are dropped. Device shards are compact (a device
// borrow cannot be padded), so a single dim left has stride 1 on both sides: the kernel's memcpy.
BoxCopy permute_box(const Shape &len, const int64_t *istr, const int64_t *ostr, size_t esize) {
  BoxCopy c;
  c.esize = (int64_t)esize;
  c.numel = 1;
  int k = 0;
  for (size_t d = 0; d < len.size(); ++d) {
    c.numel *= len[d];
    if (len[d] == 1) continue;
    c.len[k] = len[d];
    c.sstr[k] = istr[d];
    c.dstr[k] = ostr[d];
    ++k;
  }
  if (k == 0) {
    c.len[0] = 1;
    c.sstr[0] = c.dstr[0] = 1;
    k = 1;
  }
  c.n = k;
  return c;
}

// Writes y's compact shard (t's dim order) into out's array (element strides ostr, out's order):
// out dim d reads y's dim perm[d]. On the host the tiled copy of layout/permute.hpp; on the device
// the box-copy kernel, enqueued in the stream order of out's mesh (y's storage is freed in it).
void permute_shard(lm_dist_tensor_s *out, const int64_t *ostr, const lm_dist_tensor_s *y,
                   const int *perm, const char *fn) {
  const int n = y->layout.ndim();
  int64_t ys[kMaxDims], istr[kMaxDims], s = 1;
  for (int k = n - 1; k >= 0; --k) {
    ys[k] = s;
    s *= y->local.len[(size_t)k];
  }
  for (int d = 0; d < n; ++d) {
    if (out->local.len[(size_t)d] != y->local.len[(size_t)perm[d]])
      fail(LM_ERR_INTERNAL, "%s: the shard of dim %d differs from its source's", fn, d);
    istr[d] = ys[perm[d]];
  }
  if (is_device(out->device)) {
    if (out->local_numel() == 0) return;
    const BoxCopy c = permute_box(out->local.len, istr, ostr, out->esize);
    CurrentDevice on(out->device.device_id);
    device_ops(mesh_mem(out->mesh).config.stream, out->device.device_id)
        ->copy(c, out->base(), y->data(), 0, c.numel);
    return;
  }
  const bool stream = out->local_bytes() >= kPermuteStreamBytes;
  if (!strided_copy(out->base(), ostr, y->data(), istr, out->local.len.data(), n, out->esize,
                    stream))
    fail(LM_ERR_INTERNAL, "%s: no element copy of %zu bytes", fn, out->esize);
}

// Transposes t into `out` (t's dtype, on mesh m with placements pl, global shape t's permuted),
// whose shard lies in a row-major array of extents `ext` (its own shape, or padded rows). prepare
// runs where the reshard's local failures are agreed (the target's storage, checks of it).
void transpose_run(lm_dist_tensor_s *t, const int *perm, lm_mesh_s *m, const lm_placement_t *pl,
                   lm_dist_tensor_s *out, const Shape &ext, std::function<void()> prepare,
                   const char *fn) {
  const int n = t->layout.ndim();
  const std::vector<lm_placement_t> rel = in_t_dims(pl, m->ndim(), perm);
  ReshardExtra x;
  x.field = "perm";
  for (int d = 0; d < n; ++d) x.text += strfmt(d ? ", %d" : "[%d", perm[d]);
  x.text += n ? "]" : "[]";
  x.prepare = std::move(prepare);
  // Where the plan allows, the reshard writes out through the strides of out's dims permuted
  // back to t's order (the transposition fused into the reshard's copies).
  Shape ostr((size_t)n), str((size_t)n);
  int64_t s = 1;
  for (int d = n - 1; d >= 0; --d) {
    ostr[(size_t)d] = s;
    s *= ext[(size_t)d];
  }
  for (int d = 0; d < n; ++d) str[(size_t)perm[d]] = ostr[(size_t)d];
  bool fused = false;
  x.into = out;
  x.out_str = &str;
  x.fused = &fused;
  lm_dist_tensor_s *y = tensor_reshard(t, m, rel.data(), fn, &x);
  try {
    if (m->member && !fused) permute_shard(out, ostr.data(), y, perm, fn);
  } catch (...) {
    tensor_release(y);
    throw;
  }
  tensor_release(y);
}

}  // namespace

lm_dist_tensor_s *tensor_transpose(lm_dist_tensor_s *t, const int *perm, lm_mesh_s *dst_mesh,
                                   const lm_placement_t *pl, const char *fn) {
  expect_object(t, fn);
  const int n = t->layout.ndim();
  check_perm(perm, n, fn);
  lm_mesh_s *m = dst_mesh ? dst_mesh : t->mesh;
  LM_CHECK_ARG(pl != nullptr, "%s: placements is NULL", fn);
  Shape oshape((size_t)n);
  for (int d = 0; d < n; ++d) oshape[(size_t)d] = t->layout.gshape[(size_t)perm[d]];
  const Layout L = make_layout(m, pl, oshape, ArgName(fn, "placements").c_str());
  lm_dist_tensor_s *out = tensor_new(m, L, t->dtype, t->device, false);
  try {
    transpose_run(t, perm, m, pl, out, out->local.len, [&] {
      if (!m->member || out->storage) return;
      out->storage = is_device(out->device)
                         ? device_storage_alloc(mesh_mem(m), out->device, out->local_bytes(), false)
                         : storage_alloc(out->local_bytes(), false);
    }, fn);
  } catch (...) {
    tensor_release(out);
    throw;
  }
  return out;
}

void tensor_transpose_into(lm_dist_tensor_s *dst, lm_dist_tensor_s *t, const int *perm,
                           const char *fn) {
  expect_object(t, fn);
  expect_object(dst, fn);
  const int n = t->layout.ndim();
  check_perm(perm, n, fn);
  LM_CHECK_ARG(dst->dtype.code == t->dtype.code && dst->dtype.bits == t->dtype.bits &&
                   dst->dtype.lanes == t->dtype.lanes,
               "%s: dst holds %s, src %s", fn, dl_dtype_name(dst->dtype).c_str(),
               dl_dtype_name(t->dtype).c_str());
  bool same = dst->layout.ndim() == n;
  for (int d = 0; same && d < n; ++d)
    same = dst->layout.gshape[(size_t)d] == t->layout.gshape[(size_t)perm[d]];
  if (!same) {
    Shape want((size_t)n);
    for (int d = 0; d < n; ++d) want[(size_t)d] = t->layout.gshape[(size_t)perm[d]];
    fail(LM_ERR_INVALID_ARGUMENT, "%s: dst's global shape %s is not src's %s permuted by perm (%s)",
         fn, shape_str(dst->layout.gshape).c_str(), shape_str(t->layout.gshape).c_str(),
         shape_str(want).c_str());
  }
  lm_mesh_s *m = dst->mesh;
  const int me = m->world_rank;
  transpose_run(t, perm, m, dst->layout.pl.data(), dst, dst->padded() ? dst->pad : dst->local.len,
                [&] {
    // Per rank (a rank's devices are its own), so agreed here: no rank is left waiting.
    if (dst->device.device_type != t->device.device_type ||
        dst->device.device_id != t->device.device_id)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: dst lives on device type %d id %d, src on type %d id %d "
           "on world rank %d (a transpose stays on src's device)", fn,
           (int)dst->device.device_type, dst->device.device_id, (int)t->device.device_type,
           t->device.device_id, me);
    if (!m->member || dst->local_numel() == 0) return;
    LM_CHECK_ARG(dst->storage != nullptr, "%s: dst has no shard on world rank %d", fn, me);
    const char *a = static_cast<const char *>(dst->base()), *b = static_cast<const char *>(t->base());
    if (b && t->local_numel() > 0 && a < b + t->span_bytes() && b < a + dst->span_bytes())
      fail(LM_ERR_INVALID_ARGUMENT, "%s: dst's shard shares memory with src's on world rank %d "
           "(a transpose does not run in place)", fn, me);
  }, fn);
}

}  // namespace lm
