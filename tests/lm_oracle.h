/* SPDX-License-Identifier: BSD-3-Clause */
/* lm_oracle.h: the tests' own chunking, written from the rule and not from src/ (tests/README.md,
 * "independent oracles"): where each member's shard lies in the global tensor. Header-only. */
#ifndef LM_ORACLE_H
#define LM_ORACLE_H

#include <stdint.h>

#include "localmap.h"

/* torch.chunk, from the documented rule: b = ceil(n / parts), part i is
 * [min(n, i*b), min(n, (i+1)*b)) (the last parts short or empty). */
static inline void lm_oracle_chunk(int64_t n, int64_t parts, int64_t i, int64_t *off, int64_t *len) {
  int64_t b = (n + parts - 1) / parts;
  int64_t lo = i * b < n ? i * b : n, hi = (i + 1) * b < n ? (i + 1) * b : n;
  *off = lo;
  *len = hi - lo;
}

/* Ragged shard (LM_RAGGED) block i: the extents the caller registered, read back as lengths
 * (lm_extents_get), their offsets summed here. */
static inline void lm_oracle_ragged(int32_t id, int64_t i, int64_t *off, int64_t *len) {
  int64_t e[64], n = 0, lo = 0;
  if (lm_extents_get(id, e, 64, &n) != LM_SUCCESS || i >= n) {
    *off = *len = -1; /* never a real box: the comparison fails */
    return;
  }
  for (int64_t j = 0; j < i; ++j) lo += e[j];
  *off = lo;
  *len = e[i];
}

/* The global box (off, len per tensor dim) of the member at coord of a mesh of mdim dims (at most
 * 3) and shape mshape: per tensor dim, the mesh dims that shard it (Shard or ragged) split it in
 * turn, ordered by (order, mesh dim) (co-sharding; docs/DESIGN.md "Nested sharding"). */
static inline void lm_oracle_box(const int64_t *mshape, int mdim, const int64_t *coord,
                                 const lm_placement_t *pl, int ndim, const int64_t *g,
                                 int64_t *off, int64_t *len) {
  for (int d = 0; d < ndim; ++d) {
    int ms[3], k = 0;
    for (int m = 0; m < mdim && m < 3; ++m)
      if ((pl[m].kind == LM_SHARD || pl[m].kind == LM_RAGGED) && pl[m].dim == d) ms[k++] = m;
    for (int i = 1; i < k; ++i) /* stable insertion sort by order */
      for (int j = i; j > 0 && pl[ms[j - 1]].order > pl[ms[j]].order; --j) {
        int t = ms[j];
        ms[j] = ms[j - 1];
        ms[j - 1] = t;
      }
    int64_t lo = 0, n = g[d];
    for (int i = 0; i < k; ++i) {
      int64_t o, l;
      if (pl[ms[i]].kind == LM_RAGGED)
        lm_oracle_ragged(pl[ms[i]].extents, coord[ms[i]], &o, &l);
      else
        lm_oracle_chunk(n, mshape[ms[i]], coord[ms[i]], &o, &l);
      lo += o;
      n = l;
    }
    off[d] = lo;
    len[d] = n;
  }
}

#endif
