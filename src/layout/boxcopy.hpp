// SPDX-License-Identifier: BSD-3-Clause
// Box pack/unpack arithmetic, written once for host and device: g++ compiles it for the MPI
// transport's host copies, nvcc for the device pack/unpack kernels (every function is LM_HD:
// __host__ __device__ under __CUDACC__). No std:: containers, no exceptions, no allocation:
// plain structs of fixed-size arrays that can be passed by value to a kernel.
//
// Vocabulary. A *local buffer* is a compact row-major array holding one box of the global tensor
// (shape = that box's extents). A *box copy* moves a box of `len` elements from one local buffer
// (shape src_shape, the box at src_off) to another (dst_shape, dst_off). Elements of the box are
// numbered in row-major order of the box itself (0 .. numel-1); a copy may be restricted to a
// range [e0, e1) of those numbers, which is how staging is pipelined chunk by chunk.
//
// A *split* cuts a box into sub-boxes of at most max_bytes each, in row-major order: dims
// [0, k) take one index each, dim k a range of `step` indices, dims (k, n) whole. Each sub-box is
// a contiguous range of the box's element numbers, and contiguous in a compact buffer of the box.
// Sender and receiver of a message compute the same split from the same box and byte bound, so
// they agree on message boundaries without talking.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LM_HD __host__ __device__
#else
#define LM_HD
#endif

namespace lm {

constexpr int kBoxMaxDims = 32;  // = kMaxDims (layout.hpp); checked there

// Copies n bytes (memcpy on the host; a byte loop in device code).
LM_HD inline void box_bytes_copy(void *dst, const void *src, size_t n) {
#if defined(__CUDA_ARCH__)
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
#else
  if (n) memcpy(dst, src, n);
#endif
}

// A prepared box copy: trailing dims that both buffers hold whole are merged into one run.
struct BoxCopy {
  int n = 0;          // dims left after merging (>= 1 unless the box is empty or 0-d)
  int64_t len[kBoxMaxDims];   // extents after merging; len[n-1] is the run length (elements)
  int64_t sstr[kBoxMaxDims];  // element strides of the source buffer
  int64_t dstr[kBoxMaxDims];  // element strides of the destination buffer
  int64_t sbase = 0, dbase = 0;  // element offset of the box's first element in each buffer
  int64_t numel = 0;
  int64_t esize = 0;
};

// Fills c's dims from k dims of extents len and element strides sst / dst (the innermost with
// stride 1 on both sides), merging trailing dims where both sides continue: dim i - 1 merges into
// the run when both its strides equal the run's length (a box covering both buffers' trailing
// dims whole, as boxcopy_init finds them, or a piece's staging side).
LM_HD inline void boxcopy_merge(BoxCopy &c, int k, const int64_t *len, const int64_t *sst,
                                const int64_t *dst) {
  int top = k - 1;
  int64_t run = len[top];
  while (top > 0 && sst[top - 1] == run && dst[top - 1] == run) {
    --top;
    run *= len[top];
  }
  c.n = top + 1;
  for (int i = 0; i < top; ++i) {
    c.len[i] = len[i];
    c.sstr[i] = sst[i];
    c.dstr[i] = dst[i];
  }
  c.len[top] = run;
  c.sstr[top] = 1;
  c.dstr[top] = 1;
}

// Prepares a copy of the box `len` (ndim dims) at src_off in a buffer of src_shape to dst_off in a
// buffer of dst_shape. ndim == 0 is one element.
LM_HD inline void boxcopy_init(BoxCopy &c, int ndim, const int64_t *len, const int64_t *src_shape,
                               const int64_t *src_off, const int64_t *dst_shape,
                               const int64_t *dst_off, int64_t esize) {
  c.esize = esize;
  c.sbase = c.dbase = 0;
  c.numel = 1;
  for (int i = 0; i < ndim; ++i) c.numel *= len[i];
  if (ndim == 0) {
    c.n = 1;
    c.len[0] = 1;
    c.sstr[0] = c.dstr[0] = 1;
    return;
  }
  // Element strides of both buffers and offsets of the box.
  int64_t ss = 1, ds = 1;
  int64_t sstr[kBoxMaxDims], dstr[kBoxMaxDims];
  for (int i = ndim - 1; i >= 0; --i) {
    sstr[i] = ss;
    dstr[i] = ds;
    c.sbase += src_off[i] * ss;
    c.dbase += dst_off[i] * ds;
    ss *= src_shape[i];
    ds *= dst_shape[i];
  }
  boxcopy_merge(c, ndim, len, sstr, dstr);
}

// Element offsets (in the source and destination buffers) of box element number e.
LM_HD inline void boxcopy_locate(const BoxCopy &c, int64_t e, int64_t *so, int64_t *dof) {
  int64_t s = c.sbase, d = c.dbase;
  for (int i = c.n - 1; i >= 0; --i) {
    int64_t q = e % c.len[i];
    e /= c.len[i];
    s += q * c.sstr[i];
    d += q * c.dstr[i];
  }
  *so = s;
  *dof = d;
}

// Copies box elements [e0, e1) from src to dst (runs of the innermost merged dim are one
// box_bytes_copy each; an odometer walks the outer dims).
LM_HD inline void boxcopy_range(const BoxCopy &c, void *dst, const void *src, int64_t e0,
                                int64_t e1) {
  if (e1 > c.numel) e1 = c.numel;
  if (e0 >= e1) return;
  const int64_t es = c.esize;
  const int64_t run = c.len[c.n - 1];
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  int64_t idx[kBoxMaxDims];
  int64_t r = e0;
  for (int i = c.n - 1; i >= 0; --i) {
    idx[i] = r % c.len[i];
    r /= c.len[i];
  }
  int64_t so, dof;
  boxcopy_locate(c, e0, &so, &dof);
  int64_t e = e0;
  while (e < e1) {
    int64_t take = run - idx[c.n - 1];
    if (take > e1 - e) take = e1 - e;
    box_bytes_copy(d + dof * es, s + so * es, (size_t)(take * es));
    e += take;
    if (e >= e1) break;
    // Next run: reset the innermost index, advance the odometer over the outer dims.
    so -= idx[c.n - 1];
    dof -= idx[c.n - 1];
    idx[c.n - 1] = 0;
    for (int i = c.n - 2; i >= 0; --i) {
      if (++idx[i] < c.len[i]) {
        so += c.sstr[i];
        dof += c.dstr[i];
        break;
      }
      so -= (c.len[i] - 1) * c.sstr[i];
      dof -= (c.len[i] - 1) * c.dstr[i];
      idx[i] = 0;
    }
  }
}

// One element of the copy (a device kernel's thread body: for e in [e0, e1) in parallel).
LM_HD inline void boxcopy_element(const BoxCopy &c, void *dst, const void *src, int64_t e) {
  int64_t so, dof;
  boxcopy_locate(c, e, &so, &dof);
  box_bytes_copy(static_cast<char *>(dst) + dof * c.esize,
                 static_cast<const char *>(src) + so * c.esize, (size_t)c.esize);
}

// Whether the box (offset off, extents len, ndim dims) is one contiguous run of a compact buffer
// of shape `shape`; if so, *elem_off is the element offset of its first element.
LM_HD inline bool box_contiguous(int ndim, const int64_t *shape, const int64_t *off,
                                 const int64_t *len, int64_t *elem_off) {
  int j = 0;
  while (j < ndim && len[j] == 1) ++j;
  for (int i = j + 1; i < ndim; ++i)
    if (off[i] != 0 || len[i] != shape[i]) return false;
  int64_t lin = 0;
  for (int i = 0; i < ndim; ++i) lin = lin * shape[i] + off[i];
  *elem_off = lin;
  return true;
}

// Split of a box into sub-boxes of at most max_bytes (at least one element each).
struct BoxSplit {
  int k = 0;          // the dim cut into ranges (dims before it take one index each)
  int64_t step = 1;   // indices of dim k per sub-box
  int64_t per = 1;    // sub-boxes per index of the dims before k
  int64_t count = 0;  // sub-boxes in all (0 for an empty box)
  int64_t inner = 1;  // elements per index of dim k (product of the dims after k)
};

LM_HD inline void boxsplit_init(BoxSplit &s, int ndim, const int64_t *len, int64_t esize,
                                int64_t max_bytes) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; ++i) numel *= len[i];
  s.k = 0;
  s.step = 1;
  s.per = 1;
  s.inner = 1;
  s.count = numel == 0 ? 0 : 1;
  if (numel == 0 || ndim == 0) return;
  int64_t max_el = max_bytes / esize;
  if (max_el < 1) max_el = 1;
  // Largest k such that one index of dim k (everything after it) fits: inner <= max_el.
  int k = ndim - 1;
  int64_t inner = 1;
  while (k > 0 && inner * len[k] <= max_el) {
    inner *= len[k];
    --k;
  }
  // Now dims (k, n) fit whole; dim k takes as many indices as fit.
  int64_t step = max_el / inner;
  if (step < 1) step = 1;
  if (step > len[k]) step = len[k];
  int64_t outer = 1;
  for (int i = 0; i < k; ++i) outer *= len[i];
  s.k = k;
  s.step = step;
  s.inner = inner;
  s.per = (len[k] + step - 1) / step;
  s.count = outer * s.per;
}

// Sub-box number `idx`: its offsets (relative to the box) and extents, and its range of box
// element numbers [*e0, *e1).
LM_HD inline void boxsplit_get(const BoxSplit &s, int ndim, const int64_t *len, int64_t idx,
                               int64_t *sub_off, int64_t *sub_len, int64_t *e0, int64_t *e1) {
  if (ndim == 0) {
    *e0 = 0;
    *e1 = 1;
    return;
  }
  int64_t o = idx / s.per, t = idx % s.per;
  int64_t outer_lin = o;
  for (int i = s.k - 1; i >= 0; --i) {
    sub_off[i] = o % len[i];
    o /= len[i];
    sub_len[i] = 1;
  }
  int64_t a = t * s.step, b = a + s.step;
  if (b > len[s.k]) b = len[s.k];
  sub_off[s.k] = a;
  sub_len[s.k] = b - a;
  for (int i = s.k + 1; i < ndim; ++i) {
    sub_off[i] = 0;
    sub_len[i] = len[i];
  }
  *e0 = (outer_lin * len[s.k] + a) * s.inner;
  *e1 = (outer_lin * len[s.k] + b) * s.inner;
}

}  // namespace lm
