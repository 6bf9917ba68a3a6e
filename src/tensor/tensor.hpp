// SPDX-License-Identifier: BSD-3-Clause
// Dist tensors: a layout (mesh grid + placements + global shape), a dtype, a device, and this
// rank's row-major shard in a refcounted storage (owned, borrowed, or a DLManagedTensor). The
// shard is compact, except where a host array was borrowed with padded rows (a ScaLAPACK array
// with LLD_ > LOCr, a slice of a larger C array): then `pad` gives the extents of the compact
// array it lies in (at offset 0); views give the strides, and the operations that move data run
// a padded variant of their plan on it in place, or, where a reduce-scatter or a Partial fill
// would write a padded target, a compact stand-in (CompactShards::plan_for).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

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
  // The serials of the last plans (lm::Plan::serial) whose source [0] and target [1] this tensor
  // was checked to fit (tensor/persistent.cpp): what is compared below never changes once the
  // tensor has a handle.
  mutable std::atomic<uint64_t> matched[2] = {{0}, {0}};
  lm_mesh_s *mesh = nullptr;  // retained
  // What every execution's checks read first, together (the layout's vectors come after).
  DLDataType dtype{};
  lm::DType dt{};
  size_t esize = 0;
  DLDevice device{kDLCPU, 0};
  std::shared_ptr<lm::Storage> storage;
  size_t byte_offset = 0;  // into storage->data
  lm::Layout layout;
  lm::Box local;  // global box of this rank's shard (empty shape for non-members)
  // A padded shard (host, borrowed): the extents of the compact array holding it (>= local.len,
  // equal in dim 0) and its element strides; both empty for a compact shard.
  // Set only through set_pad, which derives pad_strides (views point into it).
  lm::Shape pad, pad_strides;

  bool padded() const { return !pad.empty(); }
  // Makes this a padded shard lying in a row-major array of extents `extents`.
  void set_pad(const lm::Shape &extents);
  // The first element of the shard (padded or not).
  void *base() const {
    return storage ? static_cast<char *>(storage->data) + byte_offset : nullptr;
  }
  // The compact shard; a padded one never reaches the paths that call this (CompactShards).
  void *data() const {
    if (padded()) padded_misuse();
    return base();
  }
  // The bytes from base() to one past the last element (local_bytes() when compact).
  size_t span_bytes() const;
  [[noreturn]] static void padded_misuse();
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

// A new tensor with the given layout (moved in where the caller passes an rvalue) on `mesh`
// (retained), with zeroed storage if alloc.
lm_dist_tensor_s *tensor_new(lm_mesh_s *mesh, Layout layout, DLDataType dtype,
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
// Copies a strided DLTensor into a compact buffer (row by row where the strides are padded).
void copy_strided_to_compact(void *dst, const DLTensor *src, size_t esize);
// The extents `pad` of the compact row-major array that a padded DLTensor lies in at offset 0
// (strides positive and nested: each a multiple of the next, the innermost 1; dims of extent 1
// take any stride). False when the strides are not of that form; `pad` equals the shape when
// the tensor is compact.
bool padded_extents(const DLTensor *t, Shape *pad);

class Plan;

// Compact stand-ins for padded shards during one operation: add() returns the tensor to run on
// (t itself when compact; else a compact copy of its shard, retained here with t); finish()
// copies the targets' stand-ins back into their padded tensors once the data has moved.
// Allocates (LM_ERR_OUT_OF_MEMORY): call it where a local failure is agreed.
class CompactShards {
 public:
  CompactShards() = default;
  CompactShards(const CompactShards &) = delete;
  CompactShards &operator=(const CompactShards &) = delete;
  ~CompactShards();
  lm_dist_tensor_s *add(lm_dist_tensor_s *t, bool target);
  // The plan to run from *s into *d (d NULL: a compact buffer of the caller's): p itself when
  // both shards are compact; for padded host shards p's variant for their extents
  // (Plan::padded), reading and writing them in place; where p has none, p on stand-ins that
  // replace *s / *d (add). Run it on (*s)->base() and (*d)->base().
  Plan *plan_for(Plan &p, lm_dist_tensor_s **s, lm_dist_tensor_s **d);
  // Stand-ins made by this process so far (tests: a padded reshard that needs none makes none).
  static uint64_t made();
  void finish();
  bool empty() const { return v_.empty(); }

 private:
  struct One {
    lm_dist_tensor_s *orig, *tmp;
    bool target;
  };
  std::vector<One> v_;
};
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
