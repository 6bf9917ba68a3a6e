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

#include "dropin.hpp"

namespace lmsp {

namespace {
// Argument positions of p?gemr2d.
enum { P_M = 1, P_N = 2, P_IA = 4, P_JA = 5, P_DESCA = 6, P_B = 7, P_IB = 8, P_JB = 9,
       P_DESCB = 10, P_ICTXT = 11 };

// ScaLAPACK's check of one descriptor and its window: 0, or the failing position (an entry of
// the descriptor as 100 * position + entry, 1-based as Fortran counts them).
int check_desc(const Grid &g, int pi, int pj, int pd, int i, int j, int m, int n) {
  if (!g.valid) return pd * 100 + CTXT + 1;
  const int *d = g.desc;
  if (d[DTYPE] != 1) return pd * 100 + DTYPE + 1;
  if (d[M_] < 0) return pd * 100 + M_ + 1;
  if (d[N_] < 0) return pd * 100 + N_ + 1;
  if (d[MB] < 1) return pd * 100 + MB + 1;
  if (d[NB] < 1) return pd * 100 + NB + 1;
  if (d[RSRC] < 0 || d[RSRC] >= g.nprow) return pd * 100 + RSRC + 1;
  if (d[CSRC] < 0 || d[CSRC] >= g.npcol) return pd * 100 + CSRC + 1;
  if (g.short_lld) return pd * 100 + LLD + 1;
  for (int r : g.ranks)
    if (r < 0) return pd * 100 + CTXT + 1;
  if (i < 1) return pi;
  if (j < 1) return pj;
  if (m > 0 && i - 1 + m > d[M_]) return pd * 100 + M_ + 1;
  if (n > 0 && j - 1 + n > d[N_]) return pd * 100 + N_ + 1;
  return 0;
}

int check_args(const Call &c, int m, int n, int ia, int ja, int ib, int jb) {
  if (m < 0) return P_M;
  if (n < 0) return P_N;
  if (int info = check_desc(c.a, P_IA, P_JA, P_DESCA, ia, ja, m, n)) return info;
  return check_desc(c.b, P_IB, P_JB, P_DESCB, ib, jb, m, n);
}

bool aligned(const Grid &g, int i, int j) {
  return (g.nprow == 1 || (i - 1) % g.desc[MB] == 0) && (g.npcol == 1 || (j - 1) % g.desc[NB] == 0);
}

// 0 when localmap serves the call, else the position of the argument it cannot serve.
int unservable(const Call &c, int ia, int ja, int ib, int jb, const char **why) {
  if (!aligned(c.a, ia, ja)) return *why = "A's window is not on a block boundary", P_IA;
  if (!aligned(c.b, ib, jb)) return *why = "B's window is not on a block boundary", P_IB;
  if (c.overlap) return *why = "A and B share memory", P_B;
  return 0;
}
}  // namespace

// The window (i, j, m, n) of a grid's matrix as a borrowed dist tensor [n, m] over its mesh.
lm_status_t window(lm_dist_tensor_t *out, lm_mesh_t mesh, const Grid &g, const int *mydesc,
                   void *data, int i, int j, int m, int n, const Type &t) {
  const int *d = g.desc;
  bool one_row = g.nprow == 1, one_col = g.npcol == 1;
  int sr = one_row ? 0 : (d[RSRC] + (i - 1) / d[MB]) % g.nprow;
  int sc = one_col ? 0 : (d[CSRC] + (j - 1) / d[NB]) % g.npcol;
  lm_placement_t pl[2] = {LM_PLACEMENT_BLOCK_CYCLIC(1, d[MB], sr),
                          LM_PLACEMENT_BLOCK_CYCLIC(0, d[NB], sc)};
  int64_t global[2] = {n, m};
  DLTensor local = {};
  local.ndim = 2;
  local.dtype = t.dtype;
  local.device = {kDLCPU, 0};
  int64_t shape[2] = {0, 0}, strides[2] = {mydesc[LLD], 1};
  if (g.myrow >= 0) {
    int lr0 = one_row ? i - 1 : numroc(i - 1, d[MB], g.myrow, d[RSRC], g.nprow);
    int lc0 = one_col ? j - 1 : numroc(j - 1, d[NB], g.mycol, d[CSRC], g.npcol);
    shape[1] = one_row ? m : numroc(m, d[MB], g.myrow, sr, g.nprow);
    shape[0] = one_col ? n : numroc(n, d[NB], g.mycol, sc, g.npcol);
    size_t offset = static_cast<size_t>(lr0) + static_cast<size_t>(lc0) * mydesc[LLD];
    local.data = static_cast<char *>(data) + offset * t.size;
    local.strides = shape[0] > 0 && shape[1] > 0 ? strides : nullptr;
  }
  local.shape = shape;
  return lm_dist_tensor_from_local(out, mesh, &local, pl, LM_SHAPE_GIVEN, global,
                                   LM_FROM_LOCAL_BORROW);
}

namespace {
// The copy through localmap; LM_SUCCESS, or a status agreed on every process of the union.
lm_status_t serve(const Call &c, const Type &t, int m, int n, void *a, int ia, int ja,
                  const int *desca, void *b, int ib, int jb, const int *descb) {
  lm_mesh_t mesh_a = mesh_of(c, c.a), mesh_b = mesh_of(c, c.b);
  if (mesh_a == nullptr || mesh_b == nullptr) return LM_ERR_INTERNAL;
  lm_dist_tensor_t ta = nullptr, tb = nullptr;
  lm_status_t st = window(&ta, mesh_a, c.a, desca, a, ia, ja, m, n, t);
  lm_status_t st_b = window(&tb, mesh_b, c.b, descb, b, ib, jb, m, n, t);
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
  int nprow, npcol, myrow, mycol;
  size_t sa = local_span(desca, -1, 0, 1, 1), sb = sa;
  if (blacs_gridinfo(desca[CTXT], &nprow, &npcol, &myrow, &mycol))
    sa = local_span(desca, myrow, mycol, nprow, npcol);
  if (blacs_gridinfo(descb[CTXT], &nprow, &npcol, &myrow, &mycol))
    sb = local_span(descb, myrow, mycol, nprow, npcol);
  if (!exchange(&c, *ictxt, desca, a, sa * t.size, descb, b, sb * t.size)) {
    log_call(routine, "error", "ICTXT is not a grid of this process");
    return report(*ictxt, name, P_ICTXT);
  }
  if (int info = check_args(c, *m, *n, *ia, *ja, *ib, *jb)) {
    log_call(routine, "error", "an argument is wrong");
    return report(*ictxt, name, info);
  }
  if (*m == 0 || *n == 0) return log_call(routine, "localmap", "empty");
  const char *why = "";
  int info = unservable(c, *ia, *ja, *ib, *jb, &why);
  if (info == 0) {
    lm_status_t st = serve(c, t, *m, *n, a, *ia, *ja, desca, b, *ib, *jb, descb);
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
