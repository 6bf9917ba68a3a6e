/* SPDX-License-Identifier: BSD-3-Clause */
/* Handles stay safe after destroy (issue 8 item 3): a destroyed handle is dead
 * (LM_ERR_INVALID_ARGUMENT), the object lives on for its other holders (tensors hold their mesh,
 * exports their tensor, plans their meshes), and no sequence of destroys drops a reference the
 * caller does not own. Before the handle registry, destroying a stale mesh handle again freed the
 * mesh under a live tensor (heap-use-after-free in mesh.cpp under ASan). */
// lm-test-np: 1 2 3
#include "lm_test.h"

#include <localmap.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static lm_mesh_t world(void) {
  lm_mesh_t m = NULL;
  int64_t s[1] = {lm_test_size()};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  return m;
}

/* A tensor of 0..n-1 as float64, Shard(0). */
static lm_dist_tensor_t iota(lm_mesh_t m, int64_t n, double *full) {
  int64_t g[1] = {n};
  for (int64_t i = 0; i < n; ++i) full[i] = (double)i;
  DLTensor d = {full, LM_CPU, 1, LM_FLOAT64, g, NULL, 0};
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &d, &s0, -1));
  return t;
}

static int gathered_ok(lm_dist_tensor_t t, int64_t n) {
  double *b = calloc((size_t)n, sizeof *b);
  int64_t g[1] = {n};
  DLTensor d = {b, LM_CPU, 1, LM_FLOAT64, g, NULL, 0};
  int ok = lm_dist_tensor_gather(t, -1, &d) == LM_SUCCESS;
  for (int64_t i = 0; ok && i < n; ++i) ok = b[i] == (double)i;
  free(b);
  return ok;
}

static void test_stale_mesh_handle_is_dead_and_the_mesh_lives_on(void **state) {
  (void)state;
  double full[11];
  lm_mesh_t m = world();
  lm_dist_tensor_t t = iota(m, 11, full);
  lm_mesh_t stale = m, borrowed = NULL;
  int nd = 0;
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(t, &borrowed));
  LM_ASSERT_ALL(borrowed == m); /* the creator's handle while it lives */
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_ASSERT_ALL(m == NULL);
  /* The scenario: the stale handle kept working, and destroying it again dropped the
   * tensor's reference, freeing the mesh under it. */
  LM_EXPECT_ALL(lm_mesh_ndim(stale, &nd), LM_ERR_INVALID_ARGUMENT, "mesh");
  for (int k = 0; k < 3; ++k) {
    lm_mesh_t s = stale;
    LM_EXPECT_ALL(lm_mesh_destroy(&s), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_ASSERT_ALL(s == stale); /* a refused destroy leaves the variable alone */
  }
  {
    lm_dist_tensor_t z = NULL;
    lm_placement_t rp = LM_PLACEMENT_REPLICATE;
    int64_t g[1] = {3};
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&z, stale, 1, g, LM_FLOAT64, LM_CPU, &rp),
                  LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_ASSERT_ALL(z == NULL);
  }
  /* The tensor still works on its mesh: collectives, accessors, a reshard. */
  LM_ASSERT_ALL(gathered_ok(t, 11));
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &rep));
  LM_ASSERT_ALL(gathered_ok(r, 11));
  /* lm_dist_tensor_mesh now gives a borrowed handle: usable, not destroyable, not the stale one. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(t, &borrowed));
  LM_ASSERT_ALL(borrowed != NULL && borrowed != stale);
  LM_ASSERT_OK_ALL(lm_mesh_ndim(borrowed, &nd));
  LM_ASSERT_ALL(nd == 1);
  {
    lm_mesh_t b = borrowed, b2 = NULL;
    LM_EXPECT_ALL(lm_mesh_destroy(&b), LM_ERR_INVALID_ARGUMENT, "borrowed");
    LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(r, &b2));
    LM_ASSERT_ALL(b2 == borrowed); /* one borrowed handle per mesh */
  }
  /* The borrowed handle may create new tensors (which then hold the mesh too). */
  {
    lm_dist_tensor_t z = NULL;
    int64_t g[1] = {4};
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&z, borrowed, 1, g, LM_FLOAT32, LM_CPU, &rep));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&z));
  }
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* The mesh is gone with its last holder, and its borrowed handle with it. */
  LM_EXPECT_ALL(lm_mesh_ndim(borrowed, &nd), LM_ERR_INVALID_ARGUMENT, "mesh");
}

static void test_stale_tensor_handle_with_live_export(void **state) {
  (void)state;
  double full[9];
  lm_mesh_t m = world();
  lm_dist_tensor_t t = iota(m, 9, full), stale = t;
  DLManagedTensor *ex = NULL;
  DLTensor v;
  int64_t off = 0, len = 0;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_offset(t, &off, 1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_shape(t, &len, 1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_EXPECT_ALL(lm_dist_tensor_local(stale, &v), LM_ERR_INVALID_ARGUMENT, "tensor");
  for (int k = 0; k < 3; ++k) {
    lm_dist_tensor_t s = stale;
    LM_EXPECT_ALL(lm_dist_tensor_destroy(&s), LM_ERR_INVALID_ARGUMENT, "tensor");
    LM_EXPECT_ALL(lm_dist_tensor_retain(s), LM_ERR_INVALID_ARGUMENT, "tensor");
  }
  /* The export still owns the data (under ASan a dropped reference reads freed memory here). */
  int ok = 1;
  const double *d = (const double *)ex->dl_tensor.data;
  for (int64_t i = 0; i < len; ++i) ok &= d[i] == (double)(off + i);
  LM_ASSERT_ALL(ok);
  ex->deleter(ex);
}

static void test_retain_counts_on_the_handle(void **state) {
  (void)state;
  double full[5];
  lm_mesh_t m = world();
  lm_dist_tensor_t t = iota(m, 5, full), a = t, b = t, c = t;
  LM_ASSERT_OK_ALL(lm_dist_tensor_retain(t));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&a)); /* one of two references */
  LM_ASSERT_ALL(gathered_ok(t, 5));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&b)); /* the last */
  LM_EXPECT_ALL(lm_dist_tensor_destroy(&c), LM_ERR_INVALID_ARGUMENT, "tensor");
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_stale_plan_and_request_handles(void **state) {
  (void)state;
  lm_mesh_t m = world();
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {10};
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &s0, NULL, &rep, 1, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m)); /* the plan holds the mesh */
  double full[10];
  lm_dist_tensor_t src = NULL, dst = NULL;
  {
    lm_mesh_t bm = NULL;
    lm_dist_tensor_t tmp = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&tmp, p, LM_CPU));
    LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(tmp, &bm));
    src = iota(bm, 10, full);
    dst = tmp;
  }
  lm_request_t rq = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_start(&rq, p, src, dst));
  lm_request_t stale_rq = rq;
  LM_ASSERT_OK_ALL(lm_request_wait(&rq));
  LM_ASSERT_ALL(rq == NULL);
  if (stale_rq) {
    int done = 0;
    LM_EXPECT_ALL(lm_request_test(&stale_rq, &done), LM_ERR_INVALID_ARGUMENT, "request");
    LM_EXPECT_ALL(lm_request_wait(&stale_rq), LM_ERR_INVALID_ARGUMENT, "request");
  }
  LM_ASSERT_ALL(gathered_ok(dst, 10));
  lm_reshard_plan_t stale = p;
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  char buf[64];
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  LM_EXPECT_ALL(lm_reshard_plan_describe(stale, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "plan");
  LM_EXPECT_ALL(lm_reshard_plan_info(stale, 0, &info), LM_ERR_INVALID_ARGUMENT, "plan");
  LM_EXPECT_ALL(lm_reshard_plan_destroy(&stale), LM_ERR_INVALID_ARGUMENT, "plan");
  LM_EXPECT_ALL(lm_reshard_plan_execute(stale, src, dst), LM_ERR_INVALID_ARGUMENT, "plan");
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&src));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&dst));
}

/* Handles of the wrong kind are refused, not reinterpreted. */
static void test_handle_kinds_do_not_mix(void **state) {
  (void)state;
  double full[4];
  lm_mesh_t m = world();
  lm_dist_tensor_t t = iota(m, 4, full);
  int nd = 0;
  LM_EXPECT_ALL(lm_mesh_ndim((lm_mesh_t)(void *)t, &nd), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_dist_tensor_ndim((lm_dist_tensor_t)(void *)m, &nd), LM_ERR_INVALID_ARGUMENT,
                "tensor");
  {
    lm_mesh_t as_mesh = (lm_mesh_t)(void *)t;
    LM_EXPECT_ALL(lm_mesh_destroy(&as_mesh), LM_ERR_INVALID_ARGUMENT, "mesh");
  }
  LM_ASSERT_ALL(gathered_ok(t, 4));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static lm_mesh_t g_seen;
static lm_status_t fn_mesh(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)nin, (void)in, (void)nout, (void)out;
  int nd = 0;
  g_seen = mesh;
  if (lm_mesh_ndim(mesh, &nd) != LM_SUCCESS || nd != 1) return LM_ERR_INTERNAL;
  lm_mesh_t copy = mesh;
  /* fn's mesh is not fn's to destroy once the caller's handle is gone. */
  if (lm_mesh_destroy(&copy) == LM_SUCCESS) return LM_ERR_INTERNAL;
  return LM_SUCCESS;
}

static void test_local_map_fn_gets_a_live_mesh_handle(void **state) {
  (void)state;
  double full[6];
  lm_mesh_t m = world();
  lm_dist_tensor_t t = iota(m, 6, full);
  lm_arg_t in[1] = {{.kind = LM_ARG_DIST_TENSOR, .ptr = t}};
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_ASSERT_OK_ALL(lm_local_map(fn_mesh, NULL, 1, in, NULL, 0, NULL, NULL, NULL, 0, NULL));
  LM_ASSERT_ALL(g_seen != NULL);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_stale_mesh_handle_is_dead_and_the_mesh_lives_on),
    cmocka_unit_test(test_stale_tensor_handle_with_live_export),
    cmocka_unit_test(test_retain_counts_on_the_handle),
    cmocka_unit_test(test_stale_plan_and_request_handles),
    cmocka_unit_test(test_handle_kinds_do_not_mix),
    cmocka_unit_test(test_local_map_fn_gets_a_live_mesh_handle),
};

LM_TEST_MAIN(tests)
