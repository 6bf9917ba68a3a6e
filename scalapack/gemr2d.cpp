// SPDX-License-Identifier: BSD-3-Clause
// p?gemr2d_: copies the M x N submatrix A(IA:IA+M-1, JA:JA+N-1) into B(IB:IB+M-1, JB:JB+N-1)
// between two block-cyclic descriptors, possibly on different grids, over the union context
// ICTXT. localmap serves the call when each window starts on a block boundary of its grid (or
// its grid has one process along that dimension): the window is then itself block-cyclic, a
// borrowed padded view of the local array, and lm_dist_tensor_transpose_into with the identity
// permutation writes it into B's window in place. Other windows, and A and B sharing memory,
// go to the reference routine (dlsym(RTLD_NEXT)), or are reported through PXERBLA without one.
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstring>

#include "dropin.hpp"

namespace lmsp {

namespace {
// Argument positions of p?gemr2d.
enum { P_M = 1, P_N = 2, P_IA = 4, P_JA = 5, P_DESCA = 6, P_B = 7, P_IB = 8, P_JB = 9,
       P_DESCB = 10, P_ICTXT = 11 };

int check_args(const Call &c, int m, int n, int ia, int ja, int ib, int jb) {
  if (m < 0) return P_M;
  if (n < 0) return P_N;
  if (int info = check_window(c.a, P_IA, P_JA, P_DESCA, ia, ja, m, n)) return info;
  return check_window(c.b, P_IB, P_JB, P_DESCB, ib, jb, m, n);
}

// 0 when localmap serves the call, else the position of the argument it cannot serve.
int unservable(const Call &c, int ia, int ja, int ib, int jb, const char **why) {
  if (!window_aligned(c.a, ia, ja)) return *why = "A's window is not on a block boundary", P_IA;
  if (!window_aligned(c.b, ib, jb)) return *why = "B's window is not on a block boundary", P_IB;
  if (c.overlap) return *why = "A and B share memory", P_B;
  return 0;
}
}  // namespace

namespace {
// The copy through localmap; LM_SUCCESS, or a status agreed on every process of the union.
lm_status_t serve(const Call &c, const Type &t, int m, int n, void *a, int ia, int ja, void *b,
                  int ib, int jb) {
  lm_mesh_t mesh_a = mesh_of(c, c.a), mesh_b = mesh_of(c, c.b);
  if (mesh_a == nullptr || mesh_b == nullptr) return LM_ERR_INTERNAL;
  lm_dist_tensor_t ta = nullptr, tb = nullptr;
  Window wa = window_layout(c.a, ia, ja, m, n), wb = window_layout(c.b, ib, jb, m, n);
  lm_status_t st = window_tensor(&ta, mesh_a, c.a, wa, a, c.a.lld, t);
  lm_status_t st_b = window_tensor(&tb, mesh_b, c.b, wb, b, c.b.lld, t);
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
  return st;
}

using gemr2d_fn = void (*)(int *, int *, void *, int *, int *, int *, void *, int *, int *, int *,
                           int *);

void upper(char *out, const char *name) {
  for (; *name; ++name) *out++ = static_cast<char>(std::toupper(static_cast<unsigned char>(*name)));
  *out = '\0';
}
}  // namespace

// One p?gemr2d_ call (letter: s d c z i).
void gemr2d(char letter, int *m, int *n, void *a, int *ia, int *ja, int *desca, void *b, int *ib,
            int *jb, int *descb, int *ictxt) {
  char routine[16], name[16];
  std::snprintf(routine, sizeof routine, "p%cgemr2d_", letter);
  upper(name, routine);
  name[8] = '\0';  // PDGEMR2D, without the underscore
  const Type &t = type_of(letter);
  Call c;
  Norm na, nb;  // p?gemr2d takes type-1 descriptors only (a type 2 is refused as DTYPE)
  std::memcpy(na.desc, desca, sizeof na.desc);
  std::memcpy(nb.desc, descb, sizeof nb.desc);
  size_t sa = local_span(na, static_cast<int>(t.size)), sb = local_span(nb, static_cast<int>(t.size));
  if (!exchange(&c, *ictxt, na, a, sa, nb, b, sb)) {
    log_call(routine, "error", "ICTXT is not a grid of this process");
    return report(*ictxt, name, P_ICTXT);
  }
  if (int info = check_args(c, *m, *n, *ia, *ja, *ib, *jb)) {
    log_call(routine, "error", bad_argument(info));
    return report(*ictxt, name, info);
  }
  if (*m == 0 || *n == 0) return log_call(routine, "localmap", "empty");
  const char *why = "";
  int info = unservable(c, *ia, *ja, *ib, *jb, &why);
  if (info == 0) {
    lm_status_t st = serve(c, t, *m, *n, a, *ia, *ja, b, *ib, *jb);
    if (st == LM_SUCCESS) return log_call(routine, "localmap", "");
    why = lm_last_error_message();
    info = P_ICTXT;
  }
  auto ref = reinterpret_cast<gemr2d_fn>(reference(routine));
  if (ref == nullptr) {
    log_call(routine, "error", why);
    return report(*ictxt, name, info);
  }
  log_call(routine, "reference", why);
  ref(m, n, a, ia, ja, desca, b, ib, jb, descb, ictxt);
}

}  // namespace lmsp

#define LMSP_EXPORT extern "C" __attribute__((visibility("default")))
#define LMSP_GEMR2D(x, T)                                                                       \
  LMSP_EXPORT void p##x##gemr2d_(int *m, int *n, T *a, int *ia, int *ja, int *desca, T *b,     \
                                 int *ib, int *jb, int *descb, int *ictxt) {                   \
    lmsp::gemr2d(#x[0], m, n, a, ia, ja, desca, b, ib, jb, descb, ictxt);                      \
  }
LMSP_GEMR2D(s, float)
LMSP_GEMR2D(d, double)
LMSP_GEMR2D(c, float)
LMSP_GEMR2D(z, double)
LMSP_GEMR2D(i, int)
