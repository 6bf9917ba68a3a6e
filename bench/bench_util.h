/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the benchmarks share: OK(call) prints the rank, the call and the library's message, then
 * ends the whole job (a benchmark measures, it never carries on after a failure); bench_cmp
 * orders doubles for qsort (medians). The including file has `rank` in scope where OK is used.
 */
#ifndef LOCALMAP_BENCH_UTIL_H_
#define LOCALMAP_BENCH_UTIL_H_

#include <mpi.h>
#include <stdio.h>

#include "localmap.h"

#define OK(x)                                                                          \
  do {                                                                                 \
    lm_status_t s_ = (x);                                                              \
    if (s_ != LM_SUCCESS) {                                                            \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, lm_last_error_message()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

static inline int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif /* LOCALMAP_BENCH_UTIL_H_ */
