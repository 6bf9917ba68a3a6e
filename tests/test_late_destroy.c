/* SPDX-License-Identifier: BSD-3-Clause */
/* Handles destroyed after MPI_Finalize and from atexit handlers, as finalizers of garbage-collected
 * languages (Python __del__, Rust Drop at exit) do: no abort, no use-after-free. No CMocka here:
 * this program finalizes MPI itself halfway, so it reports with its exit status and a
 * "N passed, N failed" line. */
// lm-test-np: 1 2
#include <localmap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The mesh outlives MPI_Finalize on purpose, so its communicators are never freed (a destroy after
 * MPI_Finalize must not call MPI): what MPI keeps for them (their attributes) is not reported by
 * LeakSanitizer, for this program only (tests/lsan.supp, tests/README.md). */
__attribute__((used)) const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void) { return "leak:lm::mesh_create\n"; }

static lm_dist_tensor_t at_exit_tensor;
static void destroy_at_exit(void) { lm_dist_tensor_destroy(&at_exit_tensor); }

#define REQUIRE(c)                                                   \
  do {                                                               \
    if (!(c)) {                                                      \
      fprintf(stderr, "FAILED: %s (%s)\n", #c, lm_last_error_message()); \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char **argv) {
  atexit(destroy_at_exit); /* registered before the pool exists: runs after static destructors */
  REQUIRE(lm_init(&argc, &argv) == LM_SUCCESS);
  int w, r, n;
  REQUIRE(lm_comm_world(&w) == LM_SUCCESS && lm_world_rank(&r, &n) == LM_SUCCESS);
  lm_mesh_t mesh;
  int64_t ms[1] = {n}, g[2] = {64, 4096}, big[1] = {1 << 20};
  REQUIRE(lm_mesh_create(&mesh, w, 1, ms, NULL) == LM_SUCCESS);
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t a, b, tmp;
  REQUIRE(lm_dist_tensor_zeros(&a, mesh, 2, g, LM_FLOAT32, LM_CPU, &s0) == LM_SUCCESS);
  REQUIRE(lm_dist_tensor_reshard(&b, a, NULL, &s1) == LM_SUCCESS); /* caches a plan (datatypes) */
  lm_reshard_plan_t plan;
  REQUIRE(lm_reshard_plan_create(&plan, mesh, &s1, NULL, &s0, 2, g, LM_FLOAT32) == LM_SUCCESS);
  /* Pooled buffers: one cached in the pool, one alive until the atexit handler. */
  REQUIRE(lm_dist_tensor_zeros(&tmp, mesh, 1, big, LM_FLOAT32, LM_CPU, &rep) == LM_SUCCESS);
  REQUIRE(lm_dist_tensor_zeros(&at_exit_tensor, mesh, 1, big, LM_FLOAT32, LM_CPU, &rep) == LM_SUCCESS);
  REQUIRE(lm_dist_tensor_destroy(&tmp) == LM_SUCCESS);
  REQUIRE(lm_finalize() == LM_SUCCESS);
  /* After MPI_Finalize: destroys must neither call MPI nor fail. */
  REQUIRE(lm_reshard_plan_destroy(&plan) == LM_SUCCESS);
  REQUIRE(lm_dist_tensor_destroy(&a) == LM_SUCCESS);
  REQUIRE(lm_dist_tensor_destroy(&b) == LM_SUCCESS);
  REQUIRE(lm_mesh_destroy(&mesh) == LM_SUCCESS);
  /* After MPI_Finalize the bootstrap queries answer INVALID_USAGE (MPI itself would abort). */
  int w2 = -7, r2 = -7, n2 = -7;
  REQUIRE(lm_world_rank(&r2, &n2) == LM_ERR_INVALID_USAGE && r2 == -7 && n2 == -7);
  REQUIRE(strstr(lm_last_error_message(), "finalized") != NULL);
  REQUIRE(lm_comm_world(&w2) == LM_ERR_INVALID_USAGE && w2 == -7);
  REQUIRE(strstr(lm_last_error_message(), "lm_comm_world") != NULL);
  REQUIRE(lm_init(&argc, &argv) == LM_ERR_INVALID_USAGE);
  if (r == 0) printf("2 passed, 0 failed\n");
  return 0; /* at_exit_tensor dies in the atexit handler, after static destructors */
}
