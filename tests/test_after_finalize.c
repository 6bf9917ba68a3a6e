/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_after_finalize: calls after MPI_Finalize return errors instead of aborting the process
 * (issue 19 item 4). Rust's Drop for Request and Fortran's request finalizer wait on a request
 * when it is dropped, which can be after MPI_Finalize: lm_request_wait then returned through
 * MPI_Testall, and Open MPI aborted the process ("called after MPI_FINALIZE"). Here a started
 * reshard's request outlives MPI: lm_request_wait (and lm_request_test) must return
 * LM_ERR_INVALID_USAGE and drop it; a collective call returns LM_ERR_INVALID_USAGE too; destroys
 * still work. Runs without the test harness (the harness finalizes MPI itself); the exit status is
 * the number of failed checks.
 */
// lm-test-np: 2 3
#include <localmap.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* The mesh outlives MPI_Finalize on purpose, so its communicators are never freed (a destroy
 * after MPI_Finalize must not call MPI), as in test_late_destroy: what MPI keeps for them is not
 * reported by LeakSanitizer, for this program only (tests/lsan.supp, tests/README.md). */
__attribute__((used)) const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void) { return "leak:lm::mesh_create\n"; }

static int failures;
static void check(int ok, const char *what, lm_status_t st) {
  if (ok) return;
  ++failures;
  fprintf(stderr, "FAIL: %s: status %d: %s\n", what, (int)st, lm_last_error_message());
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int np = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  lm_mesh_t m = NULL;
  int64_t ms[1] = {np}, n = 64 * np;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  lm_reshard_plan_t p = NULL;
  lm_dist_tensor_t a = NULL, b = NULL, c = NULL, d = NULL;
  lm_request_t r1 = NULL, r2 = NULL;
  lm_status_t st = lm_mesh_create(&m, (int)MPI_Comm_c2f(MPI_COMM_WORLD), 1, ms, NULL);
  check(st == LM_SUCCESS, "lm_mesh_create", st);
  st = lm_reshard_plan_create(&p, m, &s0, NULL, &rep, 1, &n, LM_FLOAT64);
  check(st == LM_SUCCESS, "lm_reshard_plan_create", st);
  check(lm_dist_tensor_zeros(&a, m, 1, &n, LM_FLOAT64, LM_CPU, &s0) == LM_SUCCESS, "zeros", st);
  check(lm_dist_tensor_zeros(&c, m, 1, &n, LM_FLOAT64, LM_CPU, &s0) == LM_SUCCESS, "zeros", st);
  check(lm_reshard_plan_alloc_target(&b, p, LM_CPU) == LM_SUCCESS, "alloc_target", st);
  check(lm_reshard_plan_alloc_target(&d, p, LM_CPU) == LM_SUCCESS, "alloc_target", st);
  st = lm_reshard_plan_start(&r1, p, a, b);
  check(st == LM_SUCCESS && (r1 != NULL || np == 1), "lm_reshard_plan_start", st);
  MPI_Barrier(MPI_COMM_WORLD); /* the small messages are delivered; nobody waits for them */
  MPI_Finalize();
  if (r1) {
    st = lm_request_wait(&r1);
    check(st == LM_ERR_INVALID_USAGE && r1 == NULL && strstr(lm_last_error_message(), "finalized"),
          "lm_request_wait after MPI_Finalize", st);
  }
  int done = 0;
  st = lm_request_test(&r2, &done); /* a NULL request: complete, also now */
  check(st == LM_SUCCESS && done, "lm_request_test(NULL) after MPI_Finalize", st);
  lm_dist_tensor_t out = NULL;
  st = lm_dist_tensor_reshard(&out, c, NULL, &rep);
  check(st == LM_ERR_INVALID_USAGE && out == NULL, "lm_dist_tensor_reshard after MPI_Finalize", st);
  st = lm_reshard_plan_execute(p, c, d);
  check(st == LM_ERR_INVALID_USAGE, "lm_reshard_plan_execute after MPI_Finalize", st);
  check(lm_dist_tensor_destroy(&a) == LM_SUCCESS && lm_dist_tensor_destroy(&b) == LM_SUCCESS &&
            lm_dist_tensor_destroy(&c) == LM_SUCCESS && lm_dist_tensor_destroy(&d) == LM_SUCCESS &&
            lm_reshard_plan_destroy(&p) == LM_SUCCESS && lm_mesh_destroy(&m) == LM_SUCCESS,
        "destroys after MPI_Finalize", LM_SUCCESS);
  if (failures == 0) printf("test_after_finalize: all checks passed\n");
  return failures;
}
