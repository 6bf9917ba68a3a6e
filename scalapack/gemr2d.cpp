// SPDX-License-Identifier: BSD-3-Clause
// p?gemr2d_: copies the M x N submatrix A(IA:IA+M-1, JA:JA+N-1) into B(IB:IB+M-1, JB:JB+N-1)
// between two block-cyclic descriptors, possibly on different grids, over the union context
// ICTXT. localmap serves the call when each window starts on a block boundary of its grid (or
// its grid has one process along that dimension): the window is then itself block-cyclic, a
// borrowed padded view of the local array, and lm_dist_tensor_transpose_into with the identity
// permutation writes it into B's window in place. Other windows, and A and B sharing memory,
// go to the reference routine (dlsym(RTLD_NEXT)), or are reported through PXERBLA without one.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "dropin.hpp"

namespace lmsp {

namespace {
// Argument positions of p?gemr2d; p?trmr2d's are 2 more (UPLO 1 and DIAG 2 come first).
enum { P_M = 1, P_N = 2, P_IA = 4, P_JA = 5, P_DESCA = 6, P_B = 7, P_IB = 8, P_JB = 9,
       P_DESCB = 10, P_ICTXT = 11 };
}  // namespace

// One p?gemr2d_ (uplo ' ') or p?trmr2d_ call, decoded.
struct Mr2d {
  char letter, uplo, diag;  // uplo ' ': the whole window; 'U' or 'L': a trapezoid
  int shift;                // 0 (gemr2d) or 2 (trmr2d): added to every argument position
  int m, n, ia, ja, ib, jb, ictxt;
  void *a, *b;
  const int *desca, *descb;
  std::function<void()> reference;
};

namespace {
int check_args(const Mr2d &x, const Call &c) {
  int s = x.shift;
  if (s && x.uplo != 'U' && x.uplo != 'L') return 1;
  if (s && x.diag != 'U' && x.diag != 'N') return 2;
  if (x.m < 0) return P_M + s;
  if (x.n < 0) return P_N + s;
  if (int info = check_window(c.a, P_IA + s, P_JA + s, P_DESCA + s, x.ia, x.ja, x.m, x.n))
    return info;
  return check_window(c.b, P_IB + s, P_JB + s, P_DESCB + s, x.ib, x.jb, x.m, x.n);
}

// 0 when localmap serves the call, else the position of the argument it cannot serve.
int unservable(const Mr2d &x, const Call &c, const char **why) {
  if (!window_aligned(c.a, x.ia, x.ja))
    return *why = "A's window is not on a block boundary", P_IA + x.shift;
  if (!window_aligned(c.b, x.ib, x.jb))
    return *why = "B's window is not on a block boundary", P_IB + x.shift;
  if (c.overlap) return *why = "A and B share memory", P_B + x.shift;
  return 0;
}

// Whether element (row, col) of an m x n window is in p?trmr2d's trapezoid: the diagonal ends
// at the window's bottom-right corner (row - col = m - n for 'U' when m > n; col - row = n - m
// for 'L' when n > m), and DIAG 'U' leaves it out (the reference's insidemat).
bool in_trapezoid(char uplo, char diag, int64_t row, int64_t col, int m, int n) {
  int64_t strict = diag == 'U';
  if (uplo == 'U') return row < std::max(m - n, 0) + col + 1 - strict;
  return row >= col - std::max(n - m, 0) + strict;
}

// p?trmr2d: the trapezoid of the compact [cols, rows] buffer tmp into B's window.
void copy_trapezoid(const Mr2d &x, const Grid &g, const Window &w, const unsigned char *tmp,
                    size_t size) {
  auto *b = static_cast<unsigned char *>(x.b) + w.offset * size;
  for (int64_t k = 0; k < w.shape[0]; ++k) {
    int64_t col = window_global(k, g.desc[NB], g.mycol, w.sc, g.npcol);
    for (int64_t r = 0; r < w.shape[1]; ++r) {
      int64_t row = window_global(r, g.desc[MB], g.myrow, w.sr, g.nprow);
      if (in_trapezoid(x.uplo, x.diag, row, col, x.m, x.n))
        std::memcpy(b + (r + k * g.lld) * size, tmp + (k * w.shape[1] + r) * size, size);
    }
  }
}
}  // namespace

namespace {
// The copy through localmap; LM_SUCCESS, or a status agreed on every process of the union.
// (A trapezoid goes through a compact buffer laid out as B's window, then a masked local copy.)
lm_status_t serve(const Mr2d &x, const Call &c, const Type &t) {
  lm_mesh_t mesh_a = mesh_of(c, c.a), mesh_b = mesh_of(c, c.b);
  if (mesh_a == nullptr || mesh_b == nullptr) return LM_ERR_INTERNAL;
  lm_dist_tensor_t ta = nullptr, tb = nullptr;
  Window wa = window_layout(c.a, x.ia, x.ja, x.m, x.n);
  Window wb = window_layout(c.b, x.ib, x.jb, x.m, x.n);
  bool trap = x.uplo != ' ';
  std::vector<unsigned char> tmp(trap ? static_cast<size_t>(wb.shape[0] * wb.shape[1]) * t.size + 1 : 0);
  lm_status_t st = window_tensor(&ta, mesh_a, c.a, wa, x.a, c.a.lld, t);
  lm_status_t st_b = trap ? window_tensor(&tb, mesh_b, c.b, wb, tmp.data(), 0, t)
                          : window_tensor(&tb, mesh_b, c.b, wb, x.b, c.b.lld, t);
  int failed = st != LM_SUCCESS || st_b != LM_SUCCESS, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, c.comm);
  if (any == 0) {
    const int perm[2] = {0, 1};
    st = lm_dist_tensor_transpose_into(tb, ta, perm);
  } else {
    st = LM_ERR_INVALID_ARGUMENT;
  }
  lm_dist_tensor_destroy(&ta);
  lm_dist_tensor_destroy(&tb);
  if (st == LM_SUCCESS && trap && c.b.myrow >= 0) copy_trapezoid(x, c.b, wb, tmp.data(), t.size);
  return st;
}

using gemr2d_fn = void (*)(int *, int *, void *, int *, int *, int *, void *, int *, int *, int *,
                           int *);
using trmr2d_fn = void (*)(char *, char *, int *, int *, void *, int *, int *, int *, void *,
                           int *, int *, int *, int *);

void upper_name(char *out, const char *name) {
  for (; *name && *name != '_'; ++name)
    *out++ = static_cast<char>(std::toupper(static_cast<unsigned char>(*name)));
  *out = '\0';
}
}  // namespace

// One p?gemr2d_ or p?trmr2d_ call.
void mr2d(const Mr2d &x) {
  char routine[16], name[16];
  std::snprintf(routine, sizeof routine, "p%c%smr2d_", x.letter, x.shift ? "tr" : "ge");
  upper_name(name, routine);  // PDGEMR2D
  const Type &t = type_of(x.letter);
  Call c;
  Norm na, nb;  // type-1 descriptors only (a type 2 is refused as DTYPE)
  std::memcpy(na.desc, x.desca, sizeof na.desc);
  std::memcpy(nb.desc, x.descb, sizeof nb.desc);
  size_t sa = local_span(na, static_cast<int>(t.size)), sb = local_span(nb, static_cast<int>(t.size));
  if (!exchange(&c, x.ictxt, na, x.a, sa, nb, x.b, sb)) {
    log_call(routine, "error", "ICTXT is not a grid of this process");
    return report(x.ictxt, name, P_ICTXT + x.shift);
  }
  if (int info = check_args(x, c)) {
    log_call(routine, "error", bad_argument(info));
    return report(x.ictxt, name, info);
  }
  if (x.m == 0 || x.n == 0) return log_call(routine, "localmap", "empty");
  const char *why = "";
  int info = unservable(x, c, &why);
  if (info == 0) {
    if (serve(x, c, t) == LM_SUCCESS) return log_call(routine, "localmap", "");
    why = lm_last_error_message();
    info = P_ICTXT + x.shift;
  }
  if (!x.reference) {
    log_call(routine, "error", why);
    return report(x.ictxt, name, info);
  }
  log_call(routine, "reference", why);
  x.reference();
}

}  // namespace lmsp

#define LMSP_EXPORT extern "C" __attribute__((visibility("default")))
#define LMSP_GEMR2D(x, T)                                                                       \
  LMSP_EXPORT void p##x##gemr2d_(int *m, int *n, T *a, int *ia, int *ja, int *desca, T *b,     \
                                 int *ib, int *jb, int *descb, int *ictxt) {                   \
    lmsp::Mr2d call{#x[0], ' ', ' ', 0, *m, *n, *ia, *ja, *ib, *jb, *ictxt, a, b, desca, descb, {}}; \
    if (auto f = reinterpret_cast<lmsp::gemr2d_fn>(lmsp::reference("p" #x "gemr2d_")))        \
      call.reference = [=]() { f(m, n, a, ia, ja, desca, b, ib, jb, descb, ictxt); };          \
    lmsp::mr2d(call);                                                                          \
  }
#define LMSP_TRMR2D(x, T)                                                                       \
  LMSP_EXPORT void p##x##trmr2d_(char *uplo, char *diag, int *m, int *n, T *a, int *ia,        \
                                 int *ja, int *desca, T *b, int *ib, int *jb, int *descb,      \
                                 int *ictxt) {                                                 \
    lmsp::Mr2d call{#x[0], lmsp::upper(uplo), lmsp::upper(diag), 2, *m, *n, *ia, *ja, *ib,     \
                    *jb, *ictxt, a, b, desca, descb, {}};                                      \
    if (auto f = reinterpret_cast<lmsp::trmr2d_fn>(lmsp::reference("p" #x "trmr2d_")))        \
      call.reference = [=]() { f(uplo, diag, m, n, a, ia, ja, desca, b, ib, jb, descb, ictxt); }; \
    lmsp::mr2d(call);                                                                          \
  }
LMSP_GEMR2D(s, float)
LMSP_GEMR2D(d, double)
LMSP_GEMR2D(c, float)
LMSP_GEMR2D(z, double)
LMSP_GEMR2D(i, int)
LMSP_TRMR2D(s, float)
LMSP_TRMR2D(d, double)
LMSP_TRMR2D(c, float)
LMSP_TRMR2D(z, double)
LMSP_TRMR2D(i, int)
