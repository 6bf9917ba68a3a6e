// SPDX-License-Identifier: BSD-3-Clause
// Dist tensors: a layout (mesh grid + placements + global shape), a dtype, a device, and this
// rank's compact row-major shard in a refcounted storage (owned, borrowed, or a DLManagedTensor).
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "common/dtype.hpp"
#include "layout/layout.hpp"
#include "mem/storage.hpp"
#include "mesh/mesh.hpp"

namespace lm {

constexpr uint32_t kTensorMagic = 0x54444d4cu;  // "LMDT"

}  // namespace lm

struct lm_dist_tensor_s {
  uint32_t magic = lm::kTensorMagic;
  std::atomic<int> refs{1};
  lm_mesh_s *mesh = nullptr;  // retained
  lm::Layout layout;
  DLDataType dtype{};
  lm::DType dt{};
  size_t esize = 0;
  DLDevice device{kDLCPU, 0};
  lm::Box local;  // global box of this rank's shard (empty shape for non-members)
  std::shared_ptr<lm::Storage> storage;
  size_t byte_offset = 0;  // into storage->data

  void *data() const {
    return storage ? static_cast<char *>(storage->data) + byte_offset : nullptr;
  }
  // 0 on a non-member, also for a 0-d tensor (whose empty box would count one element).
  int64_t local_numel() const { return mesh && !mesh->member ? 0 : local.numel(); }
  size_t local_bytes() const { return static_cast<size_t>(local_numel()) * esize; }
  ~lm_dist_tensor_s();
};

namespace lm {

// Handles (core/handle.hpp): tensor_check unwraps a caller's handle (the C boundary only);
// tensor_wrap makes a new owned handle taking over one reference (released on failure);
// tensor_retain_handle / tensor_destroy_handle are lm_dist_tensor_retain / _destroy.
lm_dist_tensor_s *tensor_check(lm_dist_tensor_t h, const char *what);
lm_dist_tensor_t tensor_wrap(lm_dist_tensor_s *t);
void tensor_retain_handle(lm_dist_tensor_t h, const char *what);
void tensor_destroy_handle(lm_dist_tensor_t *h, const char *what);
void tensor_retain(lm_dist_tensor_s *t);
void tensor_release(lm_dist_tensor_s *t);

// A new tensor with the given layout on `mesh` (retained), with zeroed storage if alloc.
lm_dist_tensor_s *tensor_new(lm_mesh_s *mesh, const Layout &layout, DLDataType dtype,
                             DLDevice device, bool alloc);

// The local box of `layout` for this rank of `mesh` (zero-size box for non-members).
Box local_box(const lm_mesh_s *mesh, const Layout &layout);

// Checks a global shape argument; throws LM_ERR_INVALID_ARGUMENT naming `what`, also when the
// element count could overflow a byte count (more than kMaxElements elements).
Shape check_shape(int ndim, const int64_t *shape, const char *what);
constexpr int64_t kMaxElements = int64_t(1) << 58;  // * 16 bytes (complex128) < 2^63
void check_numel(const Shape &s, const char *what);
// Checks device (kDLCPU; kDLCUDA in CUDA builds with a device), throws LM_ERR_NOT_SUPPORTED
// otherwise.
void check_device(DLDevice device, const char *what);

// lm_tensor_alloc: a zero-filled compact tensor from the buffer pool as a DLManagedTensor whose
// deleter returns the storage to the pool. Throws LM_ERR_INVALID_ARGUMENT / NOT_SUPPORTED /
// OUT_OF_MEMORY naming the argument.
DLManagedTensor *tensor_alloc_managed(int ndim, const int64_t *shape, DLDataType dtype,
                                      DLDevice device);

// Copies a box of `len` elements between two compact row-major buffers of local shapes
// src_shape / dst_shape at offsets src_off / dst_off (elements of esize bytes).
void copy_box(void *dst, const Shape &dst_shape, const Shape &dst_off, const void *src,
              const Shape &src_shape, const Shape &src_off, const Shape &len, size_t esize);
// Copies a strided DLTensor into a compact buffer.
void copy_strided_to_compact(void *dst, const DLTensor *src, size_t esize);
// True when `t` is compact row-major (strides NULL or matching). An empty tensor is compact.
bool is_compact(const DLTensor *t);
// Checks a user tensor's strides and data before they are read or borrowed (issue 8 item 4):
// the byte span that shape x strides covers must fit in int64 (no wrapping offsets), and
// borrowed data (data + byte_offset) must be aligned for the dtype (element or component size,
// at most 8 bytes). Throws LM_ERR_INVALID_ARGUMENT naming `what`.
void check_strides_span(const DLTensor *t, size_t esize, const char *what);
void check_alignment(const DLTensor *t, DType dt, const char *what);
// Refuses placements whose Partial op has no meaning for the dtype (bool avg, complex max/min):
// LM_ERR_NOT_SUPPORTED where the tensor is made, not at its first reshard.
void check_partial_dtype(const lm_placement_t *pl, int n, DType dt, const char *what);

}  // namespace lm
