// SPDX-License-Identifier: BSD-3-Clause
// Permuting copies (permute.hpp). A transpose is cache-bound, not arithmetic: the old loop of one
// element at a time (tiles of 32 x 32, stores of 8 bytes) ran a 64 MiB f64 matrix at 3.4x memcpy's
// time here. Square blocks moved through registers (4 x 4 of 8 bytes, 8 x 8 of 4 bytes, AVX2;
// 8 x 8 of 2 bytes, SSE2) write whole vectors, and large outputs stream past the cache: 1.5x.
#include "layout/permute.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LM_PERMUTE_X86 1
#else
#define LM_PERMUTE_X86 0
#endif

namespace lm {

namespace {

struct Wide {
  uint64_t a, b;
};

// out[x * os + y] = in[y * is + x] for x in [x0, x1), y in [y0, y1), one element at a time.
template <class T>
inline void scalar_part(T *out, int64_t os, const T *in, int64_t is, int64_t x0, int64_t x1,
                        int64_t y0, int64_t y1) {
  for (int64_t x = x0; x < x1; ++x) {
    T *w = out + x * os;
    const T *r = in + x;
    for (int64_t y = y0; y < y1; ++y) w[y] = r[y * is];
  }
}

// The 2-D transpose out[x * os + y] = in[y * is + x] (x < lb, y < la) in tiles of kTile x kTile,
// each cut into blocks of B x B that Kernel::block moves through registers (B == 1: no kernel,
// element by element); a tile's ragged edges go element by element.
template <class Kernel>
inline void tiles(typename Kernel::T *out, int64_t os, const typename Kernel::T *in, int64_t is,
                  int64_t lb, int64_t la, bool stream) {
  constexpr int64_t kTile = Kernel::kTile, B = Kernel::B;
  for (int64_t x0 = 0; x0 < lb; x0 += kTile)
    for (int64_t y0 = 0; y0 < la; y0 += kTile) {
      const int64_t x1 = std::min(x0 + kTile, lb), y1 = std::min(y0 + kTile, la);
      const int64_t xb = x0 + (x1 - x0) / B * B, yb = y0 + (y1 - y0) / B * B;
      if (B > 1)
        for (int64_t x = x0; x < xb; x += B)
          for (int64_t y = y0; y < yb; y += B) Kernel::block(out + x * os + y, os, in + y * is + x, is, stream);
      else
        scalar_part(out, os, in, is, x0, xb, y0, yb);
      scalar_part(out, os, in, is, xb, x1, y0, y1);
      scalar_part(out, os, in, is, x0, xb, yb, y1);
    }
}

template <class E>
struct ScalarKernel {
  using T = E;
  static constexpr int64_t B = 1, kTile = sizeof(E) >= 16 ? 16 : 32;
  static void block(T *, int64_t, const T *, int64_t, bool) {}
};

#if LM_PERMUTE_X86
// One vector to w: streamed (w aligned to the vector) or stored.
inline void put(void *w, __m128i v, bool stream) {
  if (stream)
    _mm_stream_si128((__m128i *)w, v);
  else
    _mm_storeu_si128((__m128i *)w, v);
}
__attribute__((target("avx2"))) inline void put(void *w, __m256 v, bool stream) {
  if (stream)
    _mm256_stream_ps((float *)w, v);
  else
    _mm256_storeu_ps((float *)w, v);
}
__attribute__((target("avx2"))) inline void put(void *w, __m256d v, bool stream) {
  if (stream)
    _mm256_stream_pd((double *)w, v);
  else
    _mm256_storeu_pd((double *)w, v);
}

// 8 x 8 of 2-byte elements: rows r0..r7 in, columns out (SSE2, part of every x86-64).
struct Sse2Kernel16 {
  using T = uint16_t;
  static constexpr int64_t B = 8, kTile = 64;
  static inline void block(T *out, int64_t os, const T *in, int64_t is, bool stream) {
    __m128i r[8], a[8], b[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128((const __m128i *)(in + i * is));
    for (int i = 0; i < 4; ++i) {
      a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
      a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i)
      for (int h = 0; h < 2; ++h) {
        b[4 * i + 2 * h] = _mm_unpacklo_epi32(a[4 * i + h], a[4 * i + h + 2]);
        b[4 * i + 2 * h + 1] = _mm_unpackhi_epi32(a[4 * i + h], a[4 * i + h + 2]);
      }
    for (int j = 0; j < 4; ++j) {
      put(out + (2 * j) * os, _mm_unpacklo_epi64(b[j], b[j + 4]), stream);
      put(out + (2 * j + 1) * os, _mm_unpackhi_epi64(b[j], b[j + 4]), stream);
    }
  }
};

// 8 x 8 of 4-byte elements (AVX2).
struct Avx2Kernel32 {
  using T = uint32_t;
  static constexpr int64_t B = 8, kTile = 64;
  __attribute__((target("avx2"))) static inline void block(T *out, int64_t os, const T *in,
                                                           int64_t is, bool stream) {
    __m256 r[8], a[8], b[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps((const float *)(in + i * is));
    for (int i = 0; i < 4; ++i) {
      a[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      a[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i)
      for (int h = 0; h < 2; ++h) {
        b[4 * i + 2 * h] = _mm256_shuffle_ps(a[4 * i + h], a[4 * i + h + 2], 0x44);
        b[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a[4 * i + h], a[4 * i + h + 2], 0xee);
      }
    for (int j = 0; j < 4; ++j) {
      put(out + j * os, _mm256_permute2f128_ps(b[j], b[j + 4], 0x20), stream);
      put(out + (j + 4) * os, _mm256_permute2f128_ps(b[j], b[j + 4], 0x31), stream);
    }
  }
};

// 4 x 4 of 8-byte elements (AVX2).
struct Avx2Kernel64 {
  using T = uint64_t;
  static constexpr int64_t B = 4, kTile = 32;
  __attribute__((target("avx2"))) static inline void block(T *out, int64_t os, const T *in,
                                                           int64_t is, bool stream) {
    const double *r = (const double *)in;
    const __m256d r0 = _mm256_loadu_pd(r), r1 = _mm256_loadu_pd(r + is);
    const __m256d r2 = _mm256_loadu_pd(r + 2 * is), r3 = _mm256_loadu_pd(r + 3 * is);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    const __m256d o[4] = {_mm256_permute2f128_pd(t0, t2, 0x20), _mm256_permute2f128_pd(t1, t3, 0x20),
                          _mm256_permute2f128_pd(t0, t2, 0x31), _mm256_permute2f128_pd(t1, t3, 0x31)};
    for (int i = 0; i < 4; ++i) put(out + i * os, o[i], stream);
  }
};

__attribute__((target("avx2"), flatten)) void tiles_avx2_32(uint32_t *out, int64_t os,
                                                             const uint32_t *in, int64_t is,
                                                             int64_t lb, int64_t la, bool stream) {
  tiles<Avx2Kernel32>(out, os, in, is, lb, la, stream);
}
__attribute__((target("avx2"), flatten)) void tiles_avx2_64(uint64_t *out, int64_t os,
                                                             const uint64_t *in, int64_t is,
                                                             int64_t lb, int64_t la, bool stream) {
  tiles<Avx2Kernel64>(out, os, in, is, lb, la, stream);
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif  // LM_PERMUTE_X86

// The 2-D transpose of elements of esize bytes; stream: the caller's wish, honoured where the
// kernel has streaming stores and every vector store it makes is aligned.
void transpose_2d(void *out, int64_t os, const void *in, int64_t is, int64_t lb, int64_t la,
                  size_t esize, bool stream) {
#if LM_PERMUTE_X86
  const auto aligned = [&](size_t v) {
    return (uintptr_t)out % v == 0 && (size_t)os * esize % v == 0;
  };
  // Rows a whole number of vectors apart but starting off a vector boundary (an array from
  // malloc: 16 bytes past one): the first columns element by element, the rest streamed. Where
  // the rows are whole cache lines apart, the peel goes to a line boundary: streamed rows that
  // all start mid-line leave half-written lines open across tiles, 2.7x slower than unstreamed
  // stores here (2896^2 f64 with every row at 32 mod 64: 42 ms against 15).
  const size_t v = esize == 2 ? 16 : 32, to = (size_t)os * esize % 64 == 0 ? 64 : v;
  if (stream && esize <= 8 && (size_t)os * esize % v == 0 && (uintptr_t)out % to != 0 &&
      (uintptr_t)out % esize == 0) {
    const int64_t peel = (int64_t)((to - (uintptr_t)out % to) / esize);
    transpose_2d(out, os, in, is, lb, std::min(peel, la), esize, false);
    if (peel >= la) return;  // (then the rest is aligned: no second peel)
    return transpose_2d(static_cast<char *>(out) + peel * (int64_t)esize, os,
                        static_cast<const char *>(in) + peel * is * (int64_t)esize, is, lb,
                        la - peel, esize, true);
  }
  if (esize == 8 && have_avx2())
    return tiles_avx2_64((uint64_t *)out, os, (const uint64_t *)in, is, lb, la, stream && aligned(32));
  if (esize == 4 && have_avx2())
    return tiles_avx2_32((uint32_t *)out, os, (const uint32_t *)in, is, lb, la, stream && aligned(32));
  if (esize == 2)
    return tiles<Sse2Kernel16>((uint16_t *)out, os, (const uint16_t *)in, is, lb, la, stream && aligned(16));
#endif
  (void)stream;
  switch (esize) {
    case 1: return tiles<ScalarKernel<uint8_t>>((uint8_t *)out, os, (const uint8_t *)in, is, lb, la, false);
    case 2: return tiles<ScalarKernel<uint16_t>>((uint16_t *)out, os, (const uint16_t *)in, is, lb, la, false);
    case 4: return tiles<ScalarKernel<uint32_t>>((uint32_t *)out, os, (const uint32_t *)in, is, lb, la, false);
    case 8: return tiles<ScalarKernel<uint64_t>>((uint64_t *)out, os, (const uint64_t *)in, is, lb, la, false);
    default: return tiles<ScalarKernel<Wide>>((Wide *)out, os, (const Wide *)in, is, lb, la, false);
  }
}

template <class T>
void strided(T *w, int64_t ws, const T *r, int64_t rs, int64_t n) {
  for (int64_t y = 0; y < n; ++y) w[y * ws] = r[y * rs];
}
// w[y * ws] = r[y * rs] for y < n, elements of esize bytes.
void strided_run(void *w, int64_t ws, const void *r, int64_t rs, int64_t n, size_t esize) {
  switch (esize) {
    case 1: return strided((uint8_t *)w, ws, (const uint8_t *)r, rs, n);
    case 2: return strided((uint16_t *)w, ws, (const uint16_t *)r, rs, n);
    case 4: return strided((uint32_t *)w, ws, (const uint32_t *)r, rs, n);
    case 8: return strided((uint64_t *)w, ws, (const uint64_t *)r, rs, n);
    default: return strided((Wide *)w, ws, (const Wide *)r, rs, n);
  }
}

bool size_ok(size_t esize) {
  return esize == 1 || esize == 2 || esize == 4 || esize == 8 || esize == 16;
}

}  // namespace

bool strided_copy(void *dst_v, const int64_t *dstr_in, const void *src_v, const int64_t *sstr_in,
                  const int64_t *len_in, int n, size_t esize, bool stream) {
  if (!size_ok(esize) || n < 0 || n > kPermuteMaxDims) return false;
  char *dst = static_cast<char *>(dst_v);
  const char *src = static_cast<const char *>(src_v);
  // The dims of more than one index, by decreasing destination stride (insertion sort: stable).
  int64_t len[kPermuteMaxDims], ds[kPermuteMaxDims], ss[kPermuteMaxDims];
  int m = 0;
  for (int d = 0; d < n; ++d) {
    if (len_in[d] == 0) return true;
    if (len_in[d] == 1) continue;
    int k = m++;
    for (; k > 0 && ds[k - 1] < dstr_in[d]; --k) {
      len[k] = len[k - 1];
      ds[k] = ds[k - 1];
      ss[k] = ss[k - 1];
    }
    len[k] = len_in[d];
    ds[k] = dstr_in[d];
    ss[k] = sstr_in[d];
  }
  if (m == 0) {
    std::memcpy(dst, src, esize);
    return true;
  }
  const int a = m - 1;  // the smallest destination stride; b: a dim contiguous in the source
  int b = a;
  if (ds[a] == 1)
    for (int d = 0; d < m; ++d)
      if (ss[d] == 1 && d != a) b = d;
  int od[kPermuteMaxDims], no = 0;  // the other dims, walked as an odometer
  int64_t outer = 1, idx[kPermuteMaxDims] = {0};
  for (int d = 0; d < m; ++d)
    if (d != a && d != b) {
      od[no++] = d;
      outer *= len[d];
    }
  int64_t ob = 0, ib = 0;  // the current outer index's element offsets
  for (int64_t o = 0; o < outer; ++o) {
    char *w = dst + ob * (int64_t)esize;
    const char *r = src + ib * (int64_t)esize;
    if (b != a)
      transpose_2d(w, ds[b], r, ss[a], len[b], len[a], esize, stream);
    else if (ds[a] == 1 && ss[a] == 1)  // one run
      std::memcpy(w, r, (size_t)len[a] * esize);
    else
      strided_run(w, ds[a], r, ss[a], len[a], esize);
    for (int k = no - 1; k >= 0; --k) {
      const int d = od[k];
      ob += ds[d];
      ib += ss[d];
      if (++idx[k] < len[d]) break;
      ob -= ds[d] * len[d];
      ib -= ss[d] * len[d];
      idx[k] = 0;
    }
  }
#if LM_PERMUTE_X86
  if (stream) _mm_sfence();  // streaming stores are weakly ordered: done before the caller goes on
#endif
  return true;
}

bool permute_copy(void *out, const void *in, int n, const int64_t *len, const int64_t *istr,
                  size_t esize, size_t stream_min) {
  if (!size_ok(esize) || n < 0 || n > kPermuteMaxDims) return false;
  int64_t ostr[kPermuteMaxDims], total = 1;
  for (int d = n - 1; d >= 0; --d) {
    ostr[d] = total;
    total *= len[d];
  }
  return strided_copy(out, ostr, in, istr, len, n, esize, (size_t)total * esize >= stream_min);
}

}  // namespace lm
