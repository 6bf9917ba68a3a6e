// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "device/device.hpp"
#include "reshard/boxcopy.hpp"
#include "tensor/pool.hpp"

namespace lm {

Storage::~Storage() {
  if (free_fn) {
    free_fn();
  } else if (managed) {
    if (managed->deleter) managed->deleter(managed);
  } else if (owned) {
    pool_give(data, cap, bytes);
  }
}

std::shared_ptr<Storage> storage_alloc(size_t bytes, bool zero) {
  auto s = std::make_shared<Storage>();
  size_t cap = 0;
  void *p = fault_hit(FaultKind::Alloc) ? nullptr : pool_take(bytes, &cap);
  if (!p) fail(LM_ERR_OUT_OF_MEMORY, "could not allocate %zu bytes on rank %d", bytes,
               world_rank_or_minus1());
  if (zero) std::memset(p, 0, cap);
  s->data = p;
  s->bytes = bytes;
  s->cap = cap;
  s->owned = true;
  return s;
}

lm_dist_tensor_s *tensor_check(lm_dist_tensor_t t, const char *what) {
  LM_CHECK_ARG(t != nullptr, "%s: tensor is NULL", what);
  LM_CHECK_ARG(t->magic == kTensorMagic,
               "%s: tensor is not a live lm_dist_tensor_t (destroyed or foreign)", what);
  return t;
}

void tensor_retain(lm_dist_tensor_s *t) { t->refs.fetch_add(1, std::memory_order_relaxed); }

void tensor_release(lm_dist_tensor_s *t) {
  if (t && t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}

Box local_box(const lm_mesh_s *mesh, const Layout &layout) {
  if (!mesh->member) {
    Box b;
    b.off.assign(layout.gshape.size(), 0);
    b.len.assign(layout.gshape.size(), 0);
    return b;
  }
  return layout.box_at(mesh->coord.data());
}

lm_dist_tensor_s *tensor_new(lm_mesh_s *mesh, const Layout &layout, DLDataType dtype,
                             DLDevice device, bool alloc) {
  auto t = std::make_unique<lm_dist_tensor_s>();
  t->layout = layout;
  t->dtype = dtype;
  t->dt = dtype_from_dl(dtype, "dtype");
  t->esize = dtype_size(t->dt);
  t->device = device;
  t->local = local_box(mesh, layout);
  if (alloc && is_device(device)) {
    if (mesh->member) t->storage = device_storage_alloc(mesh, device, t->local_bytes(), true);
  } else if (alloc)
    t->storage = storage_alloc(t->local_bytes());
  mesh_retain(mesh);
  t->mesh = mesh;
  return t.release();
}

Shape check_shape(int ndim, const int64_t *shape, const char *what) {
  LM_CHECK_ARG(ndim >= 0 && ndim <= kMaxDims, "%s: ndim %d must be in [0, %d]", what, ndim,
               kMaxDims);
  LM_CHECK_ARG(shape != nullptr || ndim == 0, "%s: shape is NULL", what);
  Shape s;
  for (int i = 0; i < ndim; ++i) {
    LM_CHECK_ARG(shape[i] >= 0, "%s: shape[%d] = %lld is negative", what, i, (long long)shape[i]);
    s.push_back(shape[i]);
  }
  check_numel(s, what);
  return s;
}

void check_numel(const Shape &s, const char *what) {
  int64_t n = 1;
  for (int64_t e : s) {
    if (e == 0) return;  // empty: no bytes whatever the other extents
    if (__builtin_mul_overflow(n, e, &n) || n > kMaxElements)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: the shape has more than 2^58 elements", what);
  }
}

void check_device(DLDevice device, const char *what) {
  const int type = enum_bits(device.device_type);
  if (type == kDLCPU) {
    LM_CHECK_ARG(device.device_id == 0, "%s: a kDLCPU device must have device_id 0 (got %d)", what,
                 device.device_id);
    return;
  }
  if (type == kDLCUDA && cuda_built()) {
    check_cuda_device(device, what);
    return;
  }
  if (type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged)
    fail(LM_ERR_NOT_SUPPORTED,
         "%s: device type %d (kDLCUDA family) is not supported by this build (the CUDA/NCCL backend is "
         "not built in; lm_device_supported tells)",
         what, type);
  fail(LM_ERR_NOT_SUPPORTED, "%s: device type %d is not supported", what, type);
}

// Box copy through the shared host/device arithmetic (reshard/boxcopy.hpp).
void copy_box(void *dst, const Shape &dst_shape, const Shape &dst_off, const void *src,
              const Shape &src_shape, const Shape &src_off, const Shape &len, size_t esize) {
  BoxCopy c;
  boxcopy_init(c, static_cast<int>(len.size()), len.data(), src_shape.data(), src_off.data(),
               dst_shape.data(), dst_off.data(), static_cast<int64_t>(esize));
  boxcopy_range(c, dst, src, 0, c.numel);
}

bool is_compact(const DLTensor *t) {
  if (!t->strides) return true;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

void copy_strided_to_compact(void *dst, const DLTensor *src, size_t esize) {
  const char *base = static_cast<const char *>(src->data) + src->byte_offset;
  int n = src->ndim;
  int64_t total = 1;
  for (int i = 0; i < n; ++i) total *= src->shape[i];
  if (total == 0) return;
  if (is_compact(src)) {
    std::memcpy(dst, base, static_cast<size_t>(total) * esize);
    return;
  }
  int64_t idx[kMaxDims] = {0};
  char *d = static_cast<char *>(dst);
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (int i = 0; i < n; ++i) off += idx[i] * src->strides[i];
    std::memcpy(d + e * (int64_t)esize, base + off * (int64_t)esize, esize);
    for (int i = n - 1; i >= 0; --i) {
      if (++idx[i] < src->shape[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace lm

lm_dist_tensor_s::~lm_dist_tensor_s() {
  storage.reset();
  lm::mesh_release(mesh);
  magic = lm::kDeadMagic;
}
