// SPDX-License-Identifier: BSD-3-Clause
// p?tran_, p?tranu_, p?tranc_, p?geadd_, p?tradd_: C := beta * C + alpha * op(A) on submatrices
// of one grid (PBLAS). localmap serves a call whose windows start on block boundaries (as
// p?gemr2d): op(A) is moved into a compact buffer laid out as C's window by one
// lm_dist_tensor_transpose_into (perm {1, 0} for a transpose, {0, 1} otherwise), then a local
// pass computes beta * C + alpha * op (conjugated for tranc / 'C', on the trapezoid for tradd).
// Bad arguments and windows localmap cannot serve go to the reference routine (so that its
// error codes are ScaLAPACK's own), or to PXERBLA without one.
#include <complex>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "dropin.hpp"

namespace lmsp {

// One PBLAS call, decoded: op(A) is m x n (A itself n x m when transposed).
struct Add {
  const char *routine;  // "pdgeadd_"
  char letter;          // s d c z
  char trans;           // 'N', 'T' or 'C'
  char uplo;            // ' ' (all), 'U' or 'L'
  int m, n;
  const void *alpha, *beta;
  void *a;
  int ia, ja;
  const int *desca;
  void *c;
  int ic, jc;
  const int *descc;
  int first;            // the position of M (1 for p?tran, 2 for geadd, 3 for tradd)
  std::function<void()> reference;  // the reference call with the caller's arguments
};

namespace {
template <typename T> T conj_if(T v, bool) { return v; }
template <typename T> std::complex<T> conj_if(std::complex<T> v, bool c) {
  return c ? std::conj(v) : v;
}

// Whether window element (row r, column k) of C's window is updated (tradd's trapezoid).
bool in_part(char uplo, int64_t row, int64_t col) {
  return uplo == 'U' ? row <= col : uplo == 'L' ? row >= col : true;
}


// C's window := beta * C + alpha * op, op being the compact [cols, rows] buffer tmp.
template <typename T>
void axpby(const Add &x, const Grid &g, const Window &w, const T *tmp) {
  T alpha = *static_cast<const T *>(x.alpha), beta = *static_cast<const T *>(x.beta);
  T *c = static_cast<T *>(x.c) + w.offset;
  bool cj = x.trans == 'C';
  for (int64_t k = 0; k < w.shape[0]; ++k) {
    int64_t col = window_global(k, g.desc[NB], g.mycol, w.sc, g.npcol);
    for (int64_t r = 0; r < w.shape[1]; ++r) {
      if (!in_part(x.uplo, window_global(r, g.desc[MB], g.myrow, w.sr, g.nprow), col)) continue;
      T v = tmp ? alpha * conj_if(tmp[k * w.shape[1] + r], cj) : T(0);
      T &dst = c[r + k * g.lld];
      dst = beta == T(0) ? v : beta * dst + v;
    }
  }
}

void local_update(const Add &x, const Grid &g, const Window &w, const void *tmp) {
  switch (x.letter) {
    case 's': return axpby(x, g, w, static_cast<const float *>(tmp));
    case 'd': return axpby(x, g, w, static_cast<const double *>(tmp));
    case 'c': return axpby(x, g, w, static_cast<const std::complex<float> *>(tmp));
    default: return axpby(x, g, w, static_cast<const std::complex<double> *>(tmp));
  }
}

bool is_one(const void *v, char letter) {
  switch (letter) {
    case 's': return *static_cast<const float *>(v) == 1.0f;
    case 'd': return *static_cast<const double *>(v) == 1.0;
    case 'c': return *static_cast<const std::complex<float> *>(v) == std::complex<float>(1.0f);
    default: return *static_cast<const std::complex<double> *>(v) == std::complex<double>(1.0);
  }
}

bool is_zero(const void *v, size_t size) {
  static const unsigned char zero[16] = {0};
  return std::memcmp(v, zero, size) == 0;  // +0.0; a -0.0 alpha takes the full path (same result)
}
}  // namespace

// op(A) into a buffer laid out as C's window, then the local update; agreed status.
lm_status_t add_serve(const Add &x, const Call &c, const Type &t) {
  lm_mesh_t mesh = mesh_of(c, c.b);
  if (mesh == nullptr) return LM_ERR_INTERNAL;
  Window wc = window_layout(c.b, x.ic, x.jc, x.m, x.n);
  bool tr = x.trans != 'N';
  if (is_zero(x.alpha, t.size)) return local_update(x, c.b, wc, nullptr), LM_SUCCESS;
  Window wa = window_layout(c.a, x.ia, x.ja, tr ? x.n : x.m, tr ? x.m : x.n);
  std::vector<unsigned char> tmp(static_cast<size_t>(wc.shape[0] * wc.shape[1]) * t.size + 1);
  lm_dist_tensor_t ta = nullptr, tt = nullptr;
  lm_status_t st = window_tensor(&ta, mesh, c.a, wa, x.a, c.a.lld, t);
  lm_status_t st_t = window_tensor(&tt, mesh, c.b, wc, tmp.data(), 0, t);
  int failed = st != LM_SUCCESS || st_t != LM_SUCCESS, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, c.comm);
  const int perm_t[2] = {1, 0}, perm_n[2] = {0, 1};
  st = any ? LM_ERR_INVALID_ARGUMENT : lm_dist_tensor_transpose_into(tt, ta, tr ? perm_t : perm_n);
  lm_dist_tensor_destroy(&ta);
  lm_dist_tensor_destroy(&tt);
  if (st == LM_SUCCESS) local_update(x, c.b, wc, tmp.data());
  return st;
}

namespace {
// PBLAS's argument checks, in its order: 0 or the position (descriptor entries as 100 * pos +
// entry). A and C must be on one grid.
int add_check(const Add &x, const Call &c) {
  int p = x.first;  // position of M
  if (x.first >= 3 && x.uplo != 'U' && x.uplo != 'L') return 1;
  if (x.first >= 2 && x.trans != 'N' && x.trans != 'T' && x.trans != 'C') return x.first - 1;
  if (x.m < 0) return p;
  if (x.n < 0) return p + 1;
  bool tr = x.trans != 'N';
  if (int info = check_window(c.a, p + 3, p + 4, p + 5, x.ia, x.ja, tr ? x.n : x.m, tr ? x.m : x.n))
    return info;
  if (int info = check_window(c.b, p + 8, p + 9, p + 10, x.ic, x.jc, x.m, x.n)) return info;
  if (c.a.ranks != c.b.ranks || c.a.nprow != c.b.nprow) return (p + 5) * 100 + CTXT + 1;
  return 0;
}

}  // namespace

const char *bad_argument(int info) {
  static thread_local char text[64];
  std::snprintf(text, sizeof text, "argument %d is wrong", info);
  return text;
}

char upper(const char *s) { return static_cast<char>(*s >= 'a' && *s <= 'z' ? *s - 32 : *s); }

// One PBLAS add (tran, geadd, tradd) from its decoded arguments.
void add(Add &x) {
  const Type &t = type_of(x.letter);
  char name[16];
  std::snprintf(name, sizeof name, "%s", x.routine);
  for (char *p = name; *p; ++p) *p = *p == '_' ? '\0' : upper(p);  // PDGEADD
  Norm na = normalize(x.desca), nc = normalize(x.descc);
  Call c;
  int info = 0;
  const char *why = "";
  if (!exchange(&c, nc.desc[CTXT], na, x.a, local_span(na, static_cast<int>(t.size)), nc, x.c,
                local_span(nc, static_cast<int>(t.size))))
    info = (x.first + 10) * 100 + CTXT + 1, why = "C's context is not a grid of this process";
  else if ((info = add_check(x, c)) != 0)
    why = bad_argument(info);
  else if (x.m == 0 || x.n == 0 || (is_zero(x.alpha, t.size) && is_one(x.beta, x.letter)))
    return log_call(x.routine, "localmap", "empty");
  else if (!window_aligned(c.a, x.ia, x.ja))
    info = x.first + 3, why = "A's window is not on a block boundary";
  else if (!window_aligned(c.b, x.ic, x.jc))
    info = x.first + 8, why = "C's window is not on a block boundary";
  else if (c.overlap)
    info = x.first + 7, why = "A and C share memory";
  else if (add_serve(x, c, t) == LM_SUCCESS)
    return log_call(x.routine, "localmap", "");
  else
    info = x.first + 10, why = lm_last_error_message();
  if (x.reference) {
    log_call(x.routine, "reference", why);
    return x.reference();
  }
  log_call(x.routine, "error", why);
  report(c.comm == MPI_COMM_NULL ? -1 : nc.desc[CTXT], name, info);
}

}  // namespace lmsp

// The Fortran entry points. Character arguments' hidden lengths are not read (PBLAS's own C
// entry points do not read them either).
#define LMSP_EXPORT extern "C" __attribute__((visibility("default")))

#define LMSP_TRAN(sym, x, T, tr)                                                                \
  LMSP_EXPORT void sym(int *m, int *n, T *alpha, T *a, int *ia, int *ja, int *desca, T *beta,  \
                       T *c, int *ic, int *jc, int *descc) {                                   \
    using fn = void (*)(int *, int *, T *, T *, int *, int *, int *, T *, T *, int *, int *,    \
                        int *);                                                                \
    lmsp::Add add{#sym, x, tr, ' ', *m, *n, alpha, beta, a, *ia, *ja, desca, c, *ic, *jc,      \
                  descc, 1, {}};                                                               \
    if (auto f = reinterpret_cast<fn>(lmsp::reference(#sym)))                                  \
      add.reference = [=]() { f(m, n, alpha, a, ia, ja, desca, beta, c, ic, jc, descc); };     \
    lmsp::add(add);                                                                            \
  }

#define LMSP_GEADD(sym, x, T)                                                                   \
  LMSP_EXPORT void sym(char *trans, int *m, int *n, T *alpha, T *a, int *ia, int *ja,          \
                       int *desca, T *beta, T *c, int *ic, int *jc, int *descc) {              \
    using fn = void (*)(char *, int *, int *, T *, T *, int *, int *, int *, T *, T *, int *,   \
                        int *, int *, size_t);                                                 \
    lmsp::Add add{#sym, x, lmsp::upper(trans), ' ', *m, *n, alpha, beta, a, *ia, *ja, desca,   \
                  c, *ic, *jc, descc, 2, {}};                                                  \
    if (auto f = reinterpret_cast<fn>(lmsp::reference(#sym)))                                  \
      add.reference = [=]() { f(trans, m, n, alpha, a, ia, ja, desca, beta, c, ic, jc, descc, 1); }; \
    lmsp::add(add);                                                                            \
  }

#define LMSP_TRADD(sym, x, T)                                                                   \
  LMSP_EXPORT void sym(char *uplo, char *trans, int *m, int *n, T *alpha, T *a, int *ia,       \
                       int *ja, int *desca, T *beta, T *c, int *ic, int *jc, int *descc) {     \
    using fn = void (*)(char *, char *, int *, int *, T *, T *, int *, int *, int *, T *, T *, \
                        int *, int *, int *, size_t, size_t);                                  \
    lmsp::Add add{#sym, x, lmsp::upper(trans), lmsp::upper(uplo), *m, *n, alpha, beta, a, *ia, \
                  *ja, desca, c, *ic, *jc, descc, 3, {}};                                      \
    if (auto f = reinterpret_cast<fn>(lmsp::reference(#sym)))                                  \
      add.reference = [=]() {                                                                  \
        f(uplo, trans, m, n, alpha, a, ia, ja, desca, beta, c, ic, jc, descc, 1, 1);           \
      };                                                                                       \
    lmsp::add(add);                                                                            \
  }

LMSP_TRAN(pstran_, 's', float, 'T')
LMSP_TRAN(pdtran_, 'd', double, 'T')
LMSP_TRAN(pctranu_, 'c', float, 'T')
LMSP_TRAN(pztranu_, 'z', double, 'T')
LMSP_TRAN(pctranc_, 'c', float, 'C')
LMSP_TRAN(pztranc_, 'z', double, 'C')
LMSP_GEADD(psgeadd_, 's', float)
LMSP_GEADD(pdgeadd_, 'd', double)
LMSP_GEADD(pcgeadd_, 'c', float)
LMSP_GEADD(pzgeadd_, 'z', double)
LMSP_TRADD(pstradd_, 's', float)
LMSP_TRADD(pdtradd_, 'd', double)
LMSP_TRADD(pctradd_, 'c', float)
LMSP_TRADD(pztradd_, 'z', double)
