/* SPDX-License-Identifier: BSD-3-Clause */
/* The host buffer pool: large buffers freed by one tensor are reused by the next allocation
 * (checked: the same buffer comes back, by address). Reuse must never leak old contents into
 * lm_dist_tensor_zeros, and reshard outputs that reuse a buffer must hold exactly the new values. */
// lm-test-np: 1 2 3
#include "lm_test.h"

#include <localmap.h>
#include <stdlib.h>
#include <string.h>

/* LM_POOL_BYTES=0 turns the pool off: nothing is reused then. */
static int pool_off(void) {
  const char *e = getenv("LM_POOL_BYTES");
  return e != NULL && strtoll(e, NULL, 10) == 0 && e[0] == '0';
}

static void test_zeros_after_dirty_reuse(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_placement_t r = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {1 << 19}; /* 4 MiB of float64 per rank: pooled */
  void *first = NULL;
  int reused = 1;
  for (int round = 0; round < 4; ++round) {
    lm_dist_tensor_t t = NULL;
    DLTensor v;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT64, LM_CPU, &r));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
    double *d = v.data;
    if (round == 0) first = v.data;
    else if (v.data != first) reused = 0; /* the buffer given back is the one taken again */
    int zero = 1;
    for (int64_t i = 0; i < g[0]; ++i)
      if (d[i] != 0) zero = 0;
    LM_ASSERT_ALL(zero);
    for (int64_t i = 0; i < g[0]; ++i) d[i] = 1234.5 + (double)round; /* dirty it */
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  if (pool_off()) lm_test_skip("LM_POOL_BYTES=0: the pool is off, no reuse to check");
  if (!reused) lm_test__diag("rank %d: a 4 MiB buffer given back was not taken again\n", lm_test_rank());
  LM_ASSERT_ALL(reused);
}

/* Size classes: below 1 MiB a request takes a cached buffer of its power-of-two class, so 300 KiB
 * and then 400 KiB (both of the 512 KiB class) share one buffer. */
static void test_size_class_reuse(void **state) {
  (void)state;
  if (pool_off()) lm_test_skip("LM_POOL_BYTES=0: the pool is off, no reuse to check");
  lm_mesh_t m = lm_test_world_mesh();
  lm_placement_t r = LM_PLACEMENT_REPLICATE;
  int64_t a[1] = {300 * 1024}, b[1] = {400 * 1024}; /* bytes of uint8 */
  lm_dist_tensor_t t = NULL;
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, a, LM_UINT8, LM_CPU, &r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  void *first = v.data;
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, b, LM_UINT8, LM_CPU, &r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  int same = v.data == first, zero = 1;
  for (int64_t i = 0; i < b[0]; ++i) zero &= ((unsigned char *)v.data)[i] == 0;
  LM_ASSERT_ALL(same && zero);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_reshard_outputs_reuse_buffers(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  int64_t g[2] = {1031, 257}; /* ~2 MiB, uneven rows */
  void *prev[2] = {NULL, NULL};
  int fresh = 0; /* rounds after the first whose buffers were not the previous round's */
  for (int round = 0; round < 5; ++round) {
    lm_dist_tensor_t t = NULL, u = NULL;
    DLTensor v;
    int64_t off[2], ls[2];
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT64, LM_CPU, &s0));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local_offset(t, off, 2));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local_shape(t, ls, 2));
    double *d = v.data;
    for (int64_t i = 0; i < ls[0]; ++i)
      for (int64_t j = 0; j < ls[1]; ++j) d[i * ls[1] + j] = (double)((off[0] + i) * g[1] + j + round);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&u, t, NULL, &r));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(u, &v));
    d = v.data;
    int ok = 1;
    for (int64_t k = 0; k < g[0] * g[1]; ++k)
      if (d[k] != (double)(k + round)) ok = 0;
    LM_ASSERT_ALL(ok);
    /* From the second round on, both buffers come back from the pool: the source and the
     * output take the buffers the previous round gave back (in either order). */
    void *tp = NULL, *up = d;
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
    tp = v.data;
    if (round > 0 && !((tp == prev[0] || tp == prev[1]) && (up == prev[0] || up == prev[1]))) ++fresh;
    prev[0] = tp;
    prev[1] = up;
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&u));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  if (pool_off()) lm_test_skip("LM_POOL_BYTES=0: the pool is off, no reuse to check");
  if (fresh) lm_test__diag("rank %d: %d rounds took buffers the pool did not give back\n", lm_test_rank(), fresh);
  LM_ASSERT_ALL(fresh == 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_zeros_after_dirty_reuse),
    cmocka_unit_test(test_size_class_reuse),
    cmocka_unit_test(test_reshard_outputs_reuse_buffers),
};

LM_TEST_MAIN(tests)
