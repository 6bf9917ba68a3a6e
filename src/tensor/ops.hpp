// SPDX-License-Identifier: BSD-3-Clause
// Dist tensor construction, gather and reshard (the logic behind the C API).
#pragma once

#include "exec/plan.hpp"
#include "tensor/tensor.hpp"

namespace lm {

lm_dist_tensor_s *tensor_zeros(lm_mesh_t mesh, int ndim, const int64_t *gshape, DLDataType dtype,
                               DLDevice device, const lm_placement_t *pl);
// Below the C boundary, meshes and tensors are objects (the C API unwraps handles), except where
// a function is itself the boundary (zeros, from_global, gather take the caller's handles).
lm_dist_tensor_s *tensor_from_local(lm_mesh_s *m, const DLTensor *local,
                                    const lm_placement_t *pl, int mode,
                                    const int64_t *gshape, unsigned flags,
                                    DLManagedTensor *managed, const char *fn);
// A member's compact host or device tensor already checked against layout L of m (its dtype,
// device, alignment, and its shape the rank's shard of L: lm_local_map's outputs), adopted with
// no second check. On failure the tensor stays the caller's.
lm_dist_tensor_s *tensor_adopt_checked(lm_mesh_s *m, Layout L, DLManagedTensor *managed);
lm_dist_tensor_s *tensor_from_global(lm_mesh_t mesh, const DLTensor *global,
                                     const lm_placement_t *pl, int root);
void tensor_gather(lm_dist_tensor_t t, int root, DLTensor *dst);
// ScaLAPACK interop (tensor/scalapack.cpp): the tensor [N, M] that a ScaLAPACK local array and
// descriptor hold, and a tensor's layout as a descriptor (LM_ERR_NOT_SUPPORTED naming the
// placement that has none).
lm_dist_tensor_s *tensor_from_scalapack(lm_mesh_s *m, const int *desc, void *data,
                                        DLDataType dtype, DLDevice device, unsigned flags,
                                        const char *fn);
void tensor_scalapack_desc(const lm_dist_tensor_s *t, int ctxt, int *desc, const char *fn);

// The communicator for transfers between two meshes (the source's private dup of the common
// parent); throws when the meshes come from different parents.
MPI_Comm transfer_comm(lm_mesh_s *src, lm_mesh_s *dst, const char *fn);
// "[2, 3]" for messages.
std::string shape_str(const Shape &s);
// Checks a host buffer holding a whole tensor of layout L (gather's dst, from_global's global):
// ndim, shape, dtype, kDLCPU, compact, data. Throws LM_ERR_INVALID_ARGUMENT naming `arg`.
void check_global_buffer(const DLTensor *g, const Layout &L, DLDataType dtype, const char *fn,
                         const char *arg);
// A one-rank layout on parent rank `rank`, fully replicated: "the root holds all".
Layout root_layout(int rank, const Shape &g);
// A layout over `mesh` with placements checked against `ndim` tensor dims.
Layout make_layout(lm_mesh_s *mesh, const lm_placement_t *pl, const Shape &gshape,
                   const char *what);
// LM_CHECK=2: the shards of `t` along its Replicate mesh dims hold equal bytes (one allgather of
// a hash over the mesh's members, a pass over the shard). Collective over the mesh's members; all
// ranks reach the same verdict (LM_ERR_MISMATCH naming two mesh ranks that differ).
void check_replicas(lm_dist_tensor_s *t, const char *fn);
// What a caller built on tensor_reshard adds to it: a field of the fingerprint the ranks agree on
// (its name and text) and a local step that may fail (an allocation), run where the reshard's
// own local failures are agreed, so that a failure on one rank fails the call on all.
struct ReshardExtra {
  const char *field = nullptr;
  std::string text;
  std::function<void()> prepare;
  // A transposition fused into the reshard (tensor/transpose.cpp): on a member rank of a host
  // reshard whose plan allows it (Plan::strided_out), the data lands in `into` through the element
  // strides out_str (one per tensor dim of the reshard's output) and the reshard's own output gets
  // no storage; *fused says so.
  lm_dist_tensor_s *into = nullptr;
  const Shape *out_str = nullptr;
  bool *fused = nullptr;
};
// Resharding with the mesh's plan cache (same-mesh) or a fresh plan (cross-mesh).
// dst_mesh NULL: src's mesh.
lm_dist_tensor_s *tensor_reshard(lm_dist_tensor_s *t, lm_mesh_s *dst_mesh,
                                 const lm_placement_t *pl, const char *fn,
                                 const ReshardExtra *extra = nullptr);
// lm_dist_tensor_transpose (tensor/transpose.cpp): t's dims permuted (numpy.transpose's axes),
// laid out with pl on dst_mesh (NULL: t's mesh). Collective as tensor_reshard.
lm_dist_tensor_s *tensor_transpose(lm_dist_tensor_s *t, const int *perm, lm_mesh_s *dst_mesh,
                                   const lm_placement_t *pl, const char *fn);
// lm_dist_tensor_transpose_into: t's dims permuted into dst (its mesh, placements and shard, which
// may be a padded borrow), overwriting dst's shard. Collective as tensor_reshard.
void tensor_transpose_into(lm_dist_tensor_s *dst, lm_dist_tensor_s *t, const int *perm,
                           const char *fn);

}  // namespace lm
