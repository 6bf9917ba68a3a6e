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

#include "common/error.hpp"
#include "layout/permute.hpp"
#include "mem/cuda.hpp"
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

}  // namespace

lm_dist_tensor_s *tensor_transpose(lm_dist_tensor_s *t, const int *perm, lm_mesh_s *dst_mesh,
                                   const lm_placement_t *pl, const char *fn) {
  expect_object(t, fn);
  const int n = t->layout.ndim();
  check_perm(perm, n, fn);
  if (is_device(t->device))
    fail(LM_ERR_NOT_SUPPORTED, "%s: src is a device tensor; transposes run on host tensors "
         "(reshard to the target's placements in src's dim order, then transpose locally)", fn);
  lm_mesh_s *m = dst_mesh ? dst_mesh : t->mesh;
  LM_CHECK_ARG(pl != nullptr, "%s: placements is NULL", fn);
  Shape oshape((size_t)n);
  for (int d = 0; d < n; ++d) oshape[(size_t)d] = t->layout.gshape[(size_t)perm[d]];
  const Layout L = make_layout(m, pl, oshape, ArgName(fn, "placements").c_str());
  const std::vector<lm_placement_t> rel = in_t_dims(pl, m->ndim(), perm);
  lm_dist_tensor_s *out = tensor_new(m, L, t->dtype, t->device, false);
  ReshardExtra x;
  x.field = "perm";
  for (int d = 0; d < n; ++d) x.text += strfmt(d ? ", %d" : "[%d", perm[d]);
  x.text += n ? "]" : "[]";
  x.prepare = [&] {  // the target's storage, where a failure is agreed with the reshard's own
    if (m->member && !out->storage) out->storage = storage_alloc(out->local_bytes(), false);
  };
  // Where the plan allows, the reshard writes out through the strides of out's dims permuted
  // back to t's order (the transposition fused into the reshard's copies).
  Shape ostr((size_t)n), str((size_t)n);
  for (int d = n - 1, s = 1; d >= 0; --d) {
    ostr[(size_t)d] = s;
    s *= out->local.len[(size_t)d];
  }
  for (int d = 0; d < n; ++d) str[(size_t)perm[d]] = ostr[(size_t)d];
  bool fused = false;
  x.into = out;
  x.out_str = &str;
  x.fused = &fused;
  lm_dist_tensor_s *y = nullptr;
  try {
    y = tensor_reshard(t, dst_mesh, rel.data(), fn, &x);
    if (m->member) {
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
      if (!fused && !permute_copy(out->data(), y->data(), n, out->local.len.data(), istr, t->esize))
        fail(LM_ERR_INTERNAL, "%s: no element copy of %zu bytes", fn, t->esize);
    }
  } catch (...) {
    tensor_release(y);
    tensor_release(out);
    throw;
  }
  tensor_release(y);
  return out;
}

}  // namespace lm
