// SPDX-License-Identifier: BSD-3-Clause
// Small tensor operations and the helpers the collective ones share (from_local.cpp,
// from_global.cpp, gather.cpp, reshard.cpp).
#include "tensor/ops.hpp"

#include <map>

#include "common/error.hpp"
#include "mesh/collective.hpp"

namespace lm {

Layout make_layout(lm_mesh_s *mesh, const lm_placement_t *pl, const Shape &gshape,
                   const char *what) {
  validate_placements(pl, mesh->ndim(), (int)gshape.size(), what);
  Layout L(mesh->grid, std::vector<lm_placement_t>(pl, pl + mesh->ndim()), gshape);
  check_ragged(L, what);
  return L;
}

std::string shape_str(const Shape &s) {
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

void check_global_buffer(const DLTensor *g, const Layout &L, DLDataType dtype, const char *fn,
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
Layout root_layout(int rank, const Shape &g) {
  auto grid = std::make_shared<Grid>(Shape{1}, std::vector<int>{rank});
  return Layout(grid, {LM_PLACEMENT_REPLICATE}, g);
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
  if (t->padded() && t->local_numel()) {  // the shard's elements, without the array's padding
    std::vector<char> c(t->local_bytes());
    const Shape &len = t->local.len, zero(len.size(), 0);
    copy_box(c.data(), len, zero, t->base(), t->pad, zero, len, t->esize);
    h.bytes(c.data(), c.size());
  } else if (t->base()) {
    h.bytes(t->base(), t->local_bytes());
  }
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
