// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "tensor/pool.hpp"

namespace lm {

Storage::~Storage() {
  if (managed) {
    if (managed->deleter) managed->deleter(managed);
  } else if (owned) {
    pool_give(data, cap);
  }
}

std::shared_ptr<Storage> storage_alloc(size_t bytes, bool zero) {
  auto s = std::make_shared<Storage>();
  size_t cap = 0;
  void *p = pool_take(bytes, &cap);
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
  if (alloc && mesh->member) t->storage = storage_alloc(t->local_bytes());  // placeholders hold none
  mesh_retain(mesh);
  t->mesh = mesh;
  return t.release();
}

namespace {
// One allocation per lm_tensor_alloc: the DLManagedTensor, its shape, and the pool buffer's
// capacity; the deleter gives the buffer back to the pool and frees the rest.
struct AllocCtx {
  DLManagedTensor mt{};
  int64_t shape[kMaxDims] = {};
  size_t cap = 0;
};

void alloc_deleter(DLManagedTensor *m) {
  if (!m) return;
  auto *c = static_cast<AllocCtx *>(m->manager_ctx);
  pool_give(m->dl_tensor.data, c->cap);
  delete c;
}
}  // namespace

DLManagedTensor *tensor_alloc_managed(int ndim, const int64_t *shape, DLDataType dtype,
                                      DLDevice device) {
  const char *fn = "lm_tensor_alloc";
  Shape s = check_shape(ndim, shape, strfmt("%s: shape", fn).c_str());
  DType dt = dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  check_device(device, strfmt("%s: device", fn).c_str());
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  size_t bytes = (size_t)n * dtype_size(dt);
  auto c = std::make_unique<AllocCtx>();
  void *p = pool_take(bytes, &c->cap);
  if (!p) fail(LM_ERR_OUT_OF_MEMORY, "%s: could not allocate %zu bytes", fn, bytes);
  std::memset(p, 0, bytes);
  for (int i = 0; i < ndim; ++i) c->shape[i] = s[(size_t)i];
  DLTensor &t = c->mt.dl_tensor;
  t.data = p;
  t.device = device;
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = c->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  c->mt.manager_ctx = c.get();
  c->mt.deleter = alloc_deleter;
  return &c.release()->mt;
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
  if (type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged)
    fail(LM_ERR_NOT_SUPPORTED,
         "%s: device type %d (CUDA) is not supported by this build (the CUDA/NCCL backend is "
         "not built in; lm_device_supported tells)",
         what, type);
  fail(LM_ERR_NOT_SUPPORTED, "%s: device type %d is not supported", what, type);
}

// Recursive box copy; the innermost dim (merged with the trailing dims the box covers fully)
// is one memcpy.
void copy_box(void *dst, const Shape &dst_shape, const Shape &dst_off, const void *src,
              const Shape &src_shape, const Shape &src_off, const Shape &len, size_t esize) {
  int n = static_cast<int>(len.size());
  for (int i = 0; i < n; ++i)
    if (len[i] == 0) return;
  if (n == 0) {
    std::memcpy(dst, src, esize);
    return;
  }
  // Merge trailing dims where both buffers are covered fully by the box.
  int k = n - 1;  // dims [k, n) are one contiguous run
  int64_t run = len[n - 1];
  while (k > 0 && len[k] == src_shape[k] && len[k] == dst_shape[k] && src_off[k] == 0 &&
         dst_off[k] == 0) {
    --k;
    run *= len[k];
  }
  // Strides (elements) of both buffers.
  int64_t sstr[kMaxDims], dstr[kMaxDims];
  sstr[n - 1] = dstr[n - 1] = 1;
  for (int i = n - 2; i >= 0; --i) {
    sstr[i] = sstr[i + 1] * src_shape[i + 1];
    dstr[i] = dstr[i + 1] * dst_shape[i + 1];
  }
  int64_t sbase = 0, dbase = 0;
  for (int i = 0; i < n; ++i) {
    sbase += src_off[i] * sstr[i];
    dbase += dst_off[i] * dstr[i];
  }
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  size_t bytes = static_cast<size_t>(run) * esize;
  if (k == 0) {
    std::memcpy(d + dbase * (int64_t)esize, s + sbase * (int64_t)esize, bytes);
    return;
  }
  // Odometer over dims [0, k).
  int64_t idx[kMaxDims] = {0};
  int64_t so = sbase, dof = dbase;
  for (;;) {
    std::memcpy(d + dof * (int64_t)esize, s + so * (int64_t)esize, bytes);
    int i = k - 1;
    for (; i >= 0; --i) {
      if (++idx[i] < len[i]) {
        so += sstr[i];
        dof += dstr[i];
        break;
      }
      so -= (len[i] - 1) * sstr[i];
      dof -= (len[i] - 1) * dstr[i];
      idx[i] = 0;
    }
    if (i < 0) break;
  }
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
