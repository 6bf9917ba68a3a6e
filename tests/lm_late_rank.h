/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the late-rank timeout tests (test_timeout_late, test_timeout_next): the rank that comes
 * late, the deadline, and one agreeing call (lm_local_map of a function that does nothing) that
 * keeps its error message. */
#ifndef LM_LATE_RANK_H
#define LM_LATE_RANK_H
#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()
#define LATE (NP - 1)
#define TMO 2.0

static lm_status_t noop(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                        lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)in; (void)nout; (void)out;
  return LM_SUCCESS;
}

static LM_TEST_UNUSED lm_status_t call(lm_mesh_t m, char *msg, size_t cap) {
  lm_arg_t x = lm_arg_i64(1);
  lm_status_t st = lm_local_map(noop, NULL, 1, &x, NULL, 0, NULL, NULL, m, 0, NULL);
  snprintf(msg, cap, "%s", lm_last_error_message());
  return st;
}
#endif
