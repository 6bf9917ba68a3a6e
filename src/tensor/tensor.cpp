// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.hpp"
#include "common/handle.hpp"
#include "common/fault.hpp"
#include "exec/plan.hpp"
#include "mem/cuda.hpp"
#include "mesh/device.hpp"
#include "layout/boxcopy.hpp"
#include "layout/reduce.hpp"
#include "mem/pool.hpp"

namespace lm {

lm_dist_tensor_s *tensor_check(lm_dist_tensor_t h, const char *what) {
  LM_CHECK_ARG(h != nullptr, "%s: tensor is NULL", what);
  void *t = handle_get(h, HandleKind::Tensor);
  LM_CHECK_ARG(t != nullptr, "%s: tensor is not a live lm_dist_tensor_t (destroyed or foreign)",
               what);
  return static_cast<lm_dist_tensor_s *>(t);
}

lm_dist_tensor_t tensor_wrap(lm_dist_tensor_s *t) {
  expect_object(t, "tensor_wrap");
  try {
    return handle_as<lm_dist_tensor_s>(handle_new(HandleKind::Tensor, t, true));
  } catch (...) {
    tensor_release(t);
    throw;
  }
}

void tensor_retain_handle(lm_dist_tensor_t h, const char *what) {
  tensor_check(h, what);
  LM_CHECK_ARG(handle_retain(h, HandleKind::Tensor),
               "%s: tensor is not a live lm_dist_tensor_t (destroyed or foreign)", what);
}

void tensor_destroy_handle(lm_dist_tensor_t *h, const char *what) {
  void *obj = nullptr;
  LM_CHECK_ARG(*h != nullptr, "%s: tensor is NULL", what);
  switch (handle_drop(*h, HandleKind::Tensor, &obj)) {
    case DropResult::Dead:
    case DropResult::Borrowed:
      fail(LM_ERR_INVALID_ARGUMENT,
           "%s: tensor is not a live lm_dist_tensor_t (destroyed or foreign)", what);
    case DropResult::Alive:
      break;
    case DropResult::Died:
      tensor_release(static_cast<lm_dist_tensor_s *>(obj));
      break;
  }
  *h = nullptr;
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

lm_dist_tensor_s *tensor_new(lm_mesh_s *mesh, Layout layout, DLDataType dtype,
                             DLDevice device, bool alloc) {
  auto t = std::make_unique<lm_dist_tensor_s>();
  t->layout = std::move(layout);
  t->dtype = dtype;
  t->dt = dtype_from_dl(dtype, "dtype");
  check_partial_dtype(t->layout.pl.data(), t->layout.mesh_ndim(), t->dt, "placements");
  t->esize = dtype_size(t->dt);
  t->device = device;
  t->local = local_box(mesh, t->layout);
  if (alloc && is_device(device)) {
    if (mesh->member) t->storage = device_storage_alloc(mesh_mem(mesh), device, t->local_bytes(), true);
  } else if (alloc && mesh->member) {
    t->storage = storage_alloc(t->local_bytes());  // placeholders hold none
  }
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
  size_t bytes = 0;  // the size asked of the pool (its high-water mark counts it)
};

void alloc_deleter(DLManagedTensor *m) {
  if (!m) return;
  auto *c = static_cast<AllocCtx *>(m->manager_ctx);
  pool_give(m->dl_tensor.data, c->cap, c->bytes);
  delete c;
}
}  // namespace

DLManagedTensor *tensor_alloc_managed(int ndim, const int64_t *shape, DLDataType dtype,
                                      DLDevice device) {
  const char *fn = "lm_tensor_alloc";
  Shape s = check_shape(ndim, shape, strfmt("%s: shape", fn).c_str());
  DType dt = dtype_from_dl(dtype, strfmt("%s: dtype", fn).c_str());
  check_device(device, strfmt("%s: device", fn).c_str());
  if (enum_bits(device.device_type) != kDLCPU)  // device memory needs a mesh's stream/allocator
    fail(LM_ERR_NOT_SUPPORTED, "%s: device: only kDLCPU (a device output comes from the "
         "framework's allocator, handed over as a DLManagedTensor)", fn);
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  size_t bytes = (size_t)n * dtype_size(dt);
  auto c = std::make_unique<AllocCtx>();
  void *p = pool_take(bytes, &c->cap);
  c->bytes = bytes;
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
  if (type == kDLCUDA) {  // the device component's absence, or no device, says why not
    check_cuda_device(device, what);
    return;
  }
  if (type == kDLCUDAHost || type == kDLCUDAManaged)
    fail(LM_ERR_NOT_SUPPORTED,
         "%s: device type %d (kDLCUDAHost or kDLCUDAManaged) is not supported: tensors live on "
         "kDLCPU or kDLCUDA (lm_device_supported tells)", what, type);
  fail(LM_ERR_NOT_SUPPORTED, "%s: device type %d is not supported", what, type);
}

// Box copy through the shared host/device arithmetic (layout/boxcopy.hpp).
void copy_box(void *dst, const Shape &dst_shape, const Shape &dst_off, const void *src,
              const Shape &src_shape, const Shape &src_off, const Shape &len, size_t esize) {
  BoxCopy c;
  boxcopy_init(c, static_cast<int>(len.size()), len.data(), src_shape.data(), src_off.data(),
               dst_shape.data(), dst_off.data(), static_cast<int64_t>(esize));
  boxcopy_range(c, dst, src, 0, c.numel);
}

bool is_compact(const DLTensor *t) {
  if (!t->strides) return true;
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] == 0) return true;  // nothing to address (and the product below may overflow)
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

void check_strides_span(const DLTensor *t, size_t esize, const char *what) {
  // The element offsets the tensor reaches, relative to data + byte_offset: [-below, hi].
  int64_t below = 0, hi = 0, compact = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] == 0) return;  // empty: nothing is read
    const int64_t st = t->strides ? t->strides[i] : compact;
    if (!t->strides && __builtin_mul_overflow(compact, t->shape[i], &compact)) compact = INT64_MAX;
    if (t->shape[i] == 1) continue;
    int64_t ext = 0;
    const bool bad = st == INT64_MIN ||
                     __builtin_mul_overflow(st < 0 ? -st : st, t->shape[i] - 1, &ext) ||
                     __builtin_add_overflow(st < 0 ? below : hi, ext, st < 0 ? &below : &hi);
    LM_CHECK_ARG(!bad, "%s: strides[%d] = %lld: the byte span of shape x strides overflows", what,
                 i, (long long)st);
  }
  const int64_t lo = -below;
  // In bytes from data: [byte_offset + lo * esize, byte_offset + (hi + 1) * esize).
  int64_t first = 0, end = 0;
  const bool wraps = t->byte_offset > (uint64_t)INT64_MAX ||
                     __builtin_mul_overflow(lo, (int64_t)esize, &first) ||
                     __builtin_add_overflow(first, (int64_t)t->byte_offset, &first) ||
                     __builtin_add_overflow(hi, (int64_t)1, &end) ||
                     __builtin_mul_overflow(end, (int64_t)esize, &end) ||
                     __builtin_add_overflow(end, (int64_t)t->byte_offset, &end);
  LM_CHECK_ARG(!wraps, "%s: byte_offset %llu with shape x strides reaches past the address space",
               what, (unsigned long long)t->byte_offset);
  LM_CHECK_ARG(first >= 0, "%s: negative strides reach %lld bytes before data (byte_offset %llu "
               "must cover them: DLPack's data points at the start of the allocation)", what,
               (long long)-first, (unsigned long long)t->byte_offset);
}

void check_alignment(const DLTensor *t, DType dt, const char *what) {
  size_t a = dtype_size(dt);
  if (dt == DType::C64 || dt == DType::C128) a /= 2;  // two components
  if (a > 8) a = 8;
  uintptr_t p = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  LM_CHECK_ARG(p % a == 0,
               "%s: data + byte_offset (%p + %llu) is not aligned to %zu bytes for %s; copy it "
               "(LM_FROM_LOCAL_COPY) or align it",
               what, t->data, (unsigned long long)t->byte_offset, a, dtype_name(dt));
}

void check_partial_dtype(const lm_placement_t *pl, int n, DType dt, const char *what) {
  for (int i = 0; i < n; ++i)
    if (pl[i].kind == LM_PARTIAL) check_reduce(dt, pl[i].reduce_op, what);
}

bool padded_extents(const DLTensor *t, Shape *pad) {
  const int n = t->ndim;
  pad->assign(t->shape, t->shape + n);
  for (int i = 0; i < n; ++i)
    if (t->shape[i] == 0) return true;  // nothing to address: compact
  if (!t->strides) return true;
  int prev = -1;  // the next inner dim of extent > 1 (dims of extent 1 keep extent 1)
  for (int i = n - 1; i >= 0; --i) {
    if (t->shape[i] == 1) continue;
    const int64_t st = t->strides[i];
    if (prev < 0) {  // the innermost dim of extent > 1: contiguous, or followed by dims of
      if (st != 1) {  // extent 1, the last of which its stride pads (a column of a 2-D array)
        if (i == n - 1 || st < 1) return false;
        (*pad)[(size_t)n - 1] = st;
      }
    } else {  // dim prev's extent in the array: how many of its elements fit between two of mine
      const int64_t in = t->strides[prev];
      if (st <= 0 || st % in != 0 || st / in < t->shape[prev]) return false;
      (*pad)[(size_t)prev] = st / in;
    }
    prev = i;
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
  Shape pad;
  if (padded_extents(src, &pad)) {  // rows of the array it lies in: a box copy
    const Shape len(src->shape, src->shape + n), zero((size_t)n, 0);
    copy_box(dst, len, zero, base, pad, zero, len, esize);
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

CompactShards::~CompactShards() {
  for (const One &o : v_) {
    tensor_release(o.tmp);
    tensor_release(o.orig);
  }
}

namespace {
std::atomic<uint64_t> g_standins{0};
bool padded_member(const lm_dist_tensor_s *t) { return t && t->padded() && t->mesh->member; }
}  // namespace

uint64_t CompactShards::made() { return g_standins.load(std::memory_order_relaxed); }

Plan *CompactShards::plan_for(Plan &p, lm_dist_tensor_s **s, lm_dist_tensor_s **d) {
  const bool ps = padded_member(*s), pd = d && padded_member(*d);
  if (!ps && !pd) return &p;
  if (!is_device((*s)->device)) {
    bool out_compact = false;
    if (Plan *v = p.padded(ps ? &(*s)->pad : nullptr, pd ? &(*d)->pad : nullptr, &out_compact)) {
      if (out_compact) *d = add(*d, true);  // the source read in place, the target a stand-in
      return v;
    }
  }
  *s = add(*s, false);
  if (d) *d = add(*d, true);
  return &p;
}

lm_dist_tensor_s *CompactShards::add(lm_dist_tensor_s *t, bool target) {
  if (!padded_member(t)) return t;
  g_standins.fetch_add(1, std::memory_order_relaxed);
  lm_dist_tensor_s *c = tensor_new(t->mesh, t->layout, t->dtype, t->device, false);
  try {
    c->storage = storage_alloc(t->local_bytes(), false);
    const Shape &len = t->local.len, zero(len.size(), 0);
    if (!target)  // a target's stand-in needs no copy: the reshard writes every element of it
      copy_box(c->data(), len, zero, t->base(), t->pad, zero, len, t->esize);
    v_.reserve(v_.size() + 1);
  } catch (...) {
    tensor_release(c);
    throw;
  }
  tensor_retain(t);
  v_.push_back({t, c, target});
  return c;
}

void CompactShards::finish() {
  for (const One &o : v_) {
    if (!o.target) continue;
    const Shape &len = o.orig->local.len, zero(len.size(), 0);
    copy_box(o.orig->base(), o.orig->pad, zero, o.tmp->data(), len, zero, len, o.orig->esize);
  }
}

}  // namespace lm

void lm_dist_tensor_s::padded_misuse() {
  lm::fail(LM_ERR_INTERNAL, "a padded (strided) shard reached a path for compact "
           "shards; please report it");
}

void lm_dist_tensor_s::set_pad(const lm::Shape &extents) {
  pad = extents;
  pad_strides.assign(pad.size(), 1);
  for (size_t i = pad.size(); i > 1; --i) pad_strides[i - 2] = pad_strides[i - 1] * pad[i - 1];
}

size_t lm_dist_tensor_s::span_bytes() const {
  if (!padded()) return local_bytes();
  if (local_numel() == 0) return 0;
  size_t last = 0;  // the last element's offset
  for (size_t i = 0; i < local.len.size(); ++i)
    last += (size_t)(local.len[i] - 1) * (size_t)pad_strides[i];
  return (last + 1) * esize;
}

lm_dist_tensor_s::~lm_dist_tensor_s() {
  storage.reset();
  lm::mesh_release(mesh);
  magic = lm::kDeadMagic;
}
