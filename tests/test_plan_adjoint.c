/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_plan_adjoint: gradient placements and backward plans (lm_placements_adjoint,
 * lm_reshard_plan_adjoint), PyTorch DTensor's convention: Shard and Replicate keep theirs,
 * Partial(sum) gradients are Replicate, Partial(avg/max/min/prod) are refused naming the entry.
 * For forward plans on 1-D and 2-D meshes and across meshes, the adjoint runs from the target
 * mesh to the source mesh, its target has the mapped source placements, a gradient given in the
 * mapped target placements arrives whole (gathered and compared with the global gradient, every
 * element), and the backward of an all-gather moves nothing while the backward of a
 * reduce-scatter is an all-gather (lm_reshard_plan_info, all ranks).
 */
// lm-test-np: 1 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()
#define S(d) LM_PLACEMENT_SHARD(d)
#define R LM_PLACEMENT_REPLICATE
#define P(o) LM_PLACEMENT_PARTIAL(o)

static int same(const lm_placement_t *a, const lm_placement_t *b, int n) {
  for (int i = 0; i < n; ++i)
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) return 0; /* eight int32 fields, no padding */
  return 1;
}

static void test_placements_adjoint(void **state) {
  (void)state;
  lm_placement_t in[4] = {S(1), R, P(LM_REDUCE_SUM), S(0)}, out[4];
  in[3].order = 2;
  const lm_placement_t want[4] = {S(1), R, R, in[3]};
  LM_ASSERT_OK(lm_placements_adjoint(in, 4, out));
  LM_ASSERT_ALL(same(out, want, 4));
  LM_ASSERT_OK(lm_placements_adjoint(in, 4, in)); /* in place */
  LM_ASSERT_ALL(same(in, want, 4));
  LM_ASSERT_OK(lm_placements_adjoint(NULL, 0, NULL));
  const struct {
    int op;
    const char *word;
  } refused[] = {{LM_REDUCE_AVG, "Partial(avg)"}, {LM_REDUCE_MAX, "Partial(max)"},
                 {LM_REDUCE_MIN, "Partial(min)"}, {LM_REDUCE_PROD, "Partial(prod)"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
    lm_placement_t p[2] = {R, P(refused[i].op)};
    LM_ASSERT_STATUS(lm_placements_adjoint(p, 2, out), LM_ERR_NOT_SUPPORTED);
    LM_ASSERT_ALL(strstr(lm_last_error_message(), "placements[1]") != NULL &&
                  strstr(lm_last_error_message(), refused[i].word) != NULL);
  }
  lm_placement_t bad = {7, 0, 0, 0, 0, 0, 0, 0};
  LM_ASSERT_STATUS(lm_placements_adjoint(&bad, 1, out), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "placements[0]") != NULL);
  LM_ASSERT_STATUS(lm_placements_adjoint(in, -1, out), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_placements_adjoint(NULL, 1, out), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS(lm_placements_adjoint(in, 1, NULL), LM_ERR_INVALID_ARGUMENT);
}

typedef struct {
  int mdim, cross;
  lm_placement_t src[2], dst[2];
  int64_t shape[2];
  int moves; /* -1: don't check; else whether the adjoint moves bytes between ranks (np > 1) */
} case_t;

static lm_mesh_t make_mesh(int mdim, int reversed) {
  int ranks[8];
  for (int i = 0; i < NP; ++i) ranks[i] = reversed ? NP - 1 - i : i;
  int64_t ms[2] = {mdim == 2 ? 2 : NP, NP / 2};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = NP;
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), mdim, ms, &cfg));
  return m;
}

static void run_case(const case_t *c, int index) {
  lm_mesh_t sm = make_mesh(c->mdim, 0), dm = c->cross ? make_mesh(c->mdim, 1) : sm;
  lm_reshard_plan_t fwd = NULL, adj = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&fwd, sm, c->src, dm, c->dst, 2, c->shape, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_reshard_plan_adjoint(&adj, fwd));
  lm_placement_t gsrc[2], gdst[2], got[2];
  LM_ASSERT_OK(lm_placements_adjoint(c->src, c->mdim, gsrc));
  LM_ASSERT_OK(lm_placements_adjoint(c->dst, c->mdim, gdst));
  /* The gradient of the output, as a whole tensor, laid out as the adjoint's source. */
  const int64_t n = c->shape[0] * c->shape[1];
  double *g = malloc(sizeof(double) * (size_t)(n ? n : 1)), *back = calloc((size_t)(n ? n : 1), sizeof(double));
  for (int64_t i = 0; i < n; ++i) g[i] = 0.5 * (double)i - 3.0;
  DLTensor gt = {g, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, (int64_t *)c->shape, NULL, 0};
  DLTensor bt = {back, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, (int64_t *)c->shape, NULL, 0};
  lm_dist_tensor_t dy = NULL, dx = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&dy, dm, &gt, gdst, -1));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dx, adj, LM_CPU));
  lm_mesh_t xm = NULL;
  LM_ASSERT_OK(lm_dist_tensor_placements(dx, got, c->mdim));
  LM_ASSERT_OK(lm_dist_tensor_mesh(dx, &xm));
  LM_ASSERT_ALL(same(got, gsrc, c->mdim) && xm == sm);
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(adj, dy, dx));
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(dx, -1, &bt));
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += back[i] != g[i];
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK_ALL(lm_reshard_plan_info(adj, LM_PLAN_INFO_ALL_RANKS, &info));
  const int moved_ok = c->moves < 0 || NP == 1 || (info.bytes_sent > 0) == c->moves;
  if (wrong || !moved_ok)
    lm_test__diag("rank %d: case %d: %lld of %lld gradient values wrong; the adjoint sends %lld "
                  "bytes over all ranks (expected %s)\n", ME, index, (long long)wrong, (long long)n,
                  (long long)info.bytes_sent, c->moves ? "some" : "none");
  LM_ASSERT_ALL(wrong == 0 && moved_ok);
  lm_dist_tensor_destroy(&dx);
  lm_dist_tensor_destroy(&dy);
  free(g);
  free(back);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&adj));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&fwd));
  if (c->cross) LM_ASSERT_OK(lm_mesh_destroy(&dm));
  LM_ASSERT_OK(lm_mesh_destroy(&sm));
}

static void test_plan_adjoints(void **state) {
  (void)state;
  const case_t one[] = {
      {1, 0, {S(0)}, {R}, {7, 5}, 0},                   /* all-gather: backward is a slice */
      {1, 0, {P(LM_REDUCE_SUM)}, {S(0)}, {9, 4}, 1},    /* reduce-scatter: an all-gather */
      {1, 0, {R}, {P(LM_REDUCE_SUM)}, {6, 3}, 0},       /* R -> P: nothing (R -> R) */
      {1, 0, {P(LM_REDUCE_SUM)}, {R}, {5, 5}, 0},       /* all-reduce: R -> R */
      {1, 0, {S(0)}, {S(1)}, {8, 6}, 1},                /* all-to-all: back again */
      {1, 1, {S(1)}, {S(0)}, {5, 11}, -1},              /* across meshes */
      {1, 1, {P(LM_REDUCE_SUM)}, {S(1)}, {4, 7}, -1},
  };
  for (size_t i = 0; i < sizeof one / sizeof one[0]; ++i) run_case(&one[i], (int)i);
  if (NP == 4) {
    const case_t two[] = {
        {2, 0, {S(0), P(LM_REDUCE_SUM)}, {S(0), S(1)}, {6, 10}, 1},
        {2, 1, {S(0), S(1)}, {R, S(0)}, {9, 7}, -1},
    };
    for (size_t i = 0; i < sizeof two / sizeof two[0]; ++i) run_case(&two[i], 100 + (int)i);
  }
}

static void test_refusals(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  int64_t g[2] = {4, 4};
  lm_placement_t pmax = P(LM_REDUCE_MAX), pavg = P(LM_REDUCE_AVG), r = R;
  lm_reshard_plan_t fwd = NULL, adj = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&fwd, m, &pmax, NULL, &r, 2, g, LM_FLOAT64));
  LM_ASSERT_STATUS(lm_reshard_plan_adjoint(&adj, fwd), LM_ERR_NOT_SUPPORTED);
  LM_ASSERT_ALL(adj == NULL && strstr(lm_last_error_message(), "source placements[0]") != NULL &&
                strstr(lm_last_error_message(), "Partial(max)") != NULL);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&fwd));
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&fwd, m, &r, NULL, &pavg, 2, g, LM_FLOAT64));
  LM_ASSERT_STATUS(lm_reshard_plan_adjoint(&adj, fwd), LM_ERR_NOT_SUPPORTED);
  LM_ASSERT_ALL(adj == NULL && strstr(lm_last_error_message(), "target placements[0]") != NULL &&
                strstr(lm_last_error_message(), "Partial(avg)") != NULL);
  LM_ASSERT_STATUS(lm_reshard_plan_adjoint(NULL, fwd), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(strstr(lm_last_error_message(), "adjoint is NULL") != NULL);
  LM_ASSERT_STATUS(lm_reshard_plan_adjoint(&adj, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_OK(lm_reshard_plan_destroy(&fwd));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_placements_adjoint),
    cmocka_unit_test(test_plan_adjoints),
    cmocka_unit_test(test_refusals),
};

LM_TEST_MAIN(tests)
