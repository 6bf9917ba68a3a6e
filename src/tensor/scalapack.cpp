// SPDX-License-Identifier: BSD-3-Clause
// ScaLAPACK interop (issue 21, section 2): a dist tensor from a ScaLAPACK local array and its
// 9-integer descriptor, and a tensor's layout as a descriptor.
//
// ScaLAPACK stores an M x N matrix column-major: a local array of LOCr(M) rows and LOCc(N) columns
// with leading dimension LLD. Read row-major, those bytes are the [LOCc, LOCr] shard of the
// tensor of global shape [N, M] (the matrix's row-major view: tensor dim 0 is the matrix column,
// dim 1 the matrix row), laid out as [BC(1, MB, RSRC), BC(0, NB, CSRC)] over the 2-D mesh
// [NPROW, NPCOL]. So the borrow needs no copy and no new kind of storage (with LLD > LOCr the
// shard's rows are padded: tensor.hpp); a Fortran caller (whose binding reverses dims) sees the
// matrix as (M, N).
#include <climits>

#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "tensor/ops.hpp"

namespace lm {

namespace {

// The descriptor entries (ScaLAPACK's DTYPE_, CTXT_, M_, N_, MB_, NB_, RSRC_, CSRC_, LLD_).
enum { kDtype = 0, kCtxt, kM, kN, kMb, kNb, kRsrc, kCsrc, kLld };
constexpr int kBlockCyclic2d = 1;  // DTYPE_ of a dense block-cyclic matrix

void check_desc(const lm_mesh_s *m, const int *desc, unsigned flags, const char *fn) {
  LM_CHECK_ARG(desc != nullptr, "%s: desc is NULL", fn);
  LM_CHECK_ARG(flags == LM_FROM_LOCAL_COPY || flags == LM_FROM_LOCAL_BORROW,
               "%s: flags 0x%x unknown (LM_FROM_LOCAL_COPY or LM_FROM_LOCAL_BORROW)", fn, flags);
  LM_CHECK_ARG(m->grid->ndim() == 2,
               "%s: mesh has %d dims; a ScaLAPACK process grid is 2-D [NPROW, NPCOL]", fn,
               m->grid->ndim());
  if (desc[kDtype] != kBlockCyclic2d)
    fail(LM_ERR_NOT_SUPPORTED, "%s: desc[0] (DTYPE_) is %d; only 1 (dense block-cyclic) is "
         "supported", fn, desc[kDtype]);
  LM_CHECK_ARG(desc[kM] >= 0 && desc[kN] >= 0, "%s: desc[2..3] (M_, N_) = %d, %d: negative", fn,
               desc[kM], desc[kN]);
  LM_CHECK_ARG(desc[kMb] >= 1 && desc[kNb] >= 1, "%s: desc[4..5] (MB_, NB_) = %d, %d: blocks "
               "must be >= 1", fn, desc[kMb], desc[kNb]);
  const Shape &ms = m->grid->shape();
  LM_CHECK_ARG(desc[kRsrc] >= 0 && desc[kRsrc] < ms[0], "%s: desc[6] (RSRC_) = %d is outside the "
               "grid's %lld process rows", fn, desc[kRsrc], (long long)ms[0]);
  LM_CHECK_ARG(desc[kCsrc] >= 0 && desc[kCsrc] < ms[1], "%s: desc[7] (CSRC_) = %d is outside the "
               "grid's %lld process columns", fn, desc[kCsrc], (long long)ms[1]);
}

// How mesh dim `md` (0: process rows, 1: process columns) splits the matrix as a descriptor's
// (block, source) pair, or throws LM_ERR_NOT_SUPPORTED naming the placement.
void desc_dim(const Layout &L, int md, int *block, int *src, const char *fn) {
  const lm_placement_t &p = L.pl[(size_t)md];
  const int td = 1 - md;  // mesh dim 0 splits the matrix rows M: tensor dim 1
  const int64_t n = L.gshape[(size_t)td], P = L.grid->shape()[md];
  const char *what = md == 0 ? "process rows" : "process columns";
  if (p.kind == LM_BLOCK_CYCLIC && p.dim == td) {
    *block = p.block;
    *src = p.source;
    return;
  }
  if (p.kind == LM_SHARD && p.dim == td && L.order[(size_t)td].size() == 1) {
    const int64_t b = n > 0 ? (n + P - 1) / P : 1;  // torch.chunk's blocks: one per coordinate
    *block = (int)b;
    *src = 0;
    return;
  }
  if ((p.kind == LM_REPLICATE || p.kind == LM_SHARD || p.kind == LM_RAGGED) && P == 1 &&
      L.order[(size_t)td].empty()) {
    *block = (int)(n > 0 ? n : 1);
    *src = 0;
    return;
  }
  fail(LM_ERR_NOT_SUPPORTED, "%s: placement %d (%s) over the %s cannot be a ScaLAPACK "
       "descriptor: mesh dim %d must split tensor dim %d (the matrix %s) as BlockCyclic or a lone "
       "Shard, or have extent 1", fn, md, L.str().c_str(), what, md, td,
       md == 0 ? "rows M" : "columns N");
}

// This member's local array [LOCc, LOCr] with row stride LLD_, checked against the descriptor.
// A borrowed host array with LLD_ > LOCr is a padded shard (tensor.hpp): rows of LLD_ elements.
void local_array(const lm_mesh_s *m, const int *desc, unsigned flags, DLDevice device,
                 int64_t *shape, int64_t *strides, const char *fn) {
  const Shape &ms = m->grid->shape();
  const int64_t locr = cyclic_extent(desc[kM], desc[kMb], m->coord[0], desc[kRsrc], ms[0]);
  const int64_t locc = cyclic_extent(desc[kN], desc[kNb], m->coord[1], desc[kCsrc], ms[1]);
  shape[0] = locc;
  shape[1] = locr;
  strides[0] = desc[kLld];
  LM_CHECK_ARG(desc[kLld] >= (locr > 1 ? locr : 1), "%s: desc[8] (LLD_) = %d is less than "
               "max(1, LOCr) = %lld, the local rows at grid coordinate (%lld, %lld)", fn,
               desc[kLld], (long long)(locr > 1 ? locr : 1), (long long)m->coord[0],
               (long long)m->coord[1]);
  if (desc[kLld] != locr && locc > 1 && locr > 0 && flags == LM_FROM_LOCAL_BORROW &&
      is_device(device))
    fail(LM_ERR_NOT_SUPPORTED, "%s: desc[8] (LLD_) = %d exceeds the local rows (%lld) at grid "
         "coordinate (%lld, %lld): a borrowed device array needs LLD_ = max(1, LOCr) (host "
         "arrays may be padded); pass LM_FROM_LOCAL_COPY to copy it", fn, desc[kLld],
         (long long)locr, (long long)m->coord[0], (long long)m->coord[1]);
}

}  // namespace

lm_dist_tensor_s *tensor_from_scalapack(lm_mesh_s *m, const int *desc, void *data,
                                        DLDataType dtype, DLDevice device, unsigned flags,
                                        const char *fn) {
  check_desc(m, desc, flags, fn);
  lm_placement_t pl[2] = {LM_PLACEMENT_BLOCK_CYCLIC(1, desc[kMb], desc[kRsrc]),
                          LM_PLACEMENT_BLOCK_CYCLIC(0, desc[kNb], desc[kCsrc])};
  const int64_t gshape[2] = {desc[kN], desc[kM]};
  int64_t shape[2] = {0, 0}, strides[2] = {1, 1};
  DLTensor local{};
  local.data = data;
  local.device = device;
  local.ndim = 2;
  local.dtype = dtype;
  local.shape = shape;
  if (m->member) {
    try {
      local_array(m, desc, flags, device, shape, strides, fn);
    } catch (const Error &e) {  // LM_CHECK=2 makes the local modes collective: agree on it
      if (m->check_level >= 2)
        agree_call(fn, m, nullptr, nullptr, nullptr, nullptr, e.status(), e.message());
      throw;
    }
    if (strides[0] != shape[1] && shape[0] > 1 && shape[1] > 0) local.strides = strides;
  }
  return tensor_from_local(m, &local, pl, LM_SHAPE_GIVEN, gshape, flags, nullptr, fn);
}

void tensor_scalapack_desc(const lm_dist_tensor_s *t, int ctxt, int *desc, const char *fn) {
  LM_CHECK_ARG(desc != nullptr, "%s: desc is NULL", fn);
  const Layout &L = t->layout;
  LM_CHECK_ARG(L.ndim() == 2, "%s: the tensor has %d dims; a ScaLAPACK matrix has 2", fn,
               L.ndim());
  LM_CHECK_ARG(L.mesh_ndim() == 2, "%s: the mesh has %d dims; a ScaLAPACK process grid is 2-D",
               fn, L.mesh_ndim());
  for (int d = 0; d < 2; ++d)
    if (L.gshape[(size_t)d] > INT_MAX)
      fail(LM_ERR_NOT_SUPPORTED, "%s: global extent %lld of dim %d does not fit a descriptor's "
           "int", fn, (long long)L.gshape[(size_t)d], d);
  int out[9] = {kBlockCyclic2d, ctxt, (int)L.gshape[1], (int)L.gshape[0], 0, 0, 0, 0, 1};
  desc_dim(L, 0, &out[kMb], &out[kRsrc], fn);
  desc_dim(L, 1, &out[kNb], &out[kCsrc], fn);
  const int64_t locr = t->mesh->member ? t->local.len[1] : 0;  // also when N is 0
  out[kLld] = locr > 1 ? (int)locr : 1;
  if (t->padded()) out[kLld] = (int)t->pad[1];  // a borrowed array's own LLD_ (its rows' stride)
  for (int i = 0; i < 9; ++i) desc[i] = out[i];
}

}  // namespace lm
