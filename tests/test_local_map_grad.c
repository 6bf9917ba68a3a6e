/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_local_map_grad: gradient placements across lm_local_map (lm_local_map_ex with
 * in_grad_placements, the call's record, lm_local_map_record_input_grad).
 *
 * The forward is a sum of squares loss(x, w) = sum_r (x_r . w)^2 over the rows r of x [N, K]
 * (N uneven over the ranks), with w [K] replicated: fn gets x's S(0) shard and w, and returns its
 * rows' part of the loss as a 0-d output placed P(sum). The backward is one more lm_local_map
 * built only from the record: the loss gradient g resharded to LM_RECORD_OUT_GRAD (R), x and w as
 * LM_RECORD_IN; it returns dx_r = 2 g (x_r . w) w placed LM_RECORD_IN_GRAD of x (S(0)) and this
 * rank's rows' part of dw = 2 g sum_r (x_r . w) x_r placed LM_RECORD_IN_GRAD of w, which the
 * forward declared P(sum). lm_local_map_record_input_grad then moves each gradient to its input's
 * own layout: x given as S(0) (nothing moves) or as R (fn saw S(0): an all-gather), w as R
 * (P(sum) -> R: an all-reduce). Both gradients are gathered and compared, every element, with a
 * serial reference each rank computes from the global x and w. The record's placements, its
 * errors and the options' checks are tested separately.
 */
// lm-test-np: 1 2 3 4 8
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define S(d) LM_PLACEMENT_SHARD(d)
#define R LM_PLACEMENT_REPLICATE
#define P(o) LM_PLACEMENT_PARTIAL(o)
#define N_ROWS (2 * NP + 1) /* uneven over the ranks */
#define K 3

static double x_at(int64_t r, int64_t k) { return 0.25 * (double)((r * 7 + k * 3) % 11) - 1.0; }
static double w_at(int64_t k) { return 0.5 + 0.125 * (double)k; }

static DLTensor host_f64(double *data, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device = LM_CPU;
  t.ndim = ndim;
  t.dtype = LM_FLOAT64;
  t.shape = shape;
  return t;
}

static lm_dist_tensor_t from_global(lm_mesh_t m, double *data, int ndim, int64_t *shape,
                                    lm_placement_t p) {
  DLTensor g = host_f64(data, ndim, shape);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, m, &g, &p, -1));
  return t;
}

static DLManagedTensor *new_f64(int ndim, const int64_t *shape) {
  DLManagedTensor *t = NULL;
  return lm_tensor_alloc(&t, ndim, shape, LM_FLOAT64, LM_CPU) == LM_SUCCESS ? t : NULL;
}

static double dot_row(const DLTensor *x, int64_t r, const double *w) {
  double s = 0.0;
  for (int64_t k = 0; k < K; ++k) s += ((const double *)x->data)[r * K + k] * w[k];
  return s;
}

/* inputs: x (local rows), w; output 0: this rank's part of the loss (0-d). */
static lm_status_t loss_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr, *w = (const DLTensor *)in[1].ptr;
  DLManagedTensor *l = new_f64(0, NULL);
  if (!l) return LM_ERR_OUT_OF_MEMORY;
  double s = 0.0;
  for (int64_t r = 0; r < x->shape[0]; ++r) {
    const double d = dot_row(x, r, (const double *)w->data);
    s += d * d;
  }
  *(double *)l->dl_tensor.data = s;
  out[0] = lm_arg_managed(l);
  return LM_SUCCESS;
}

/* inputs: g (0-d, replicated), x (local rows), w; outputs: dx (x's local shape), this rank's
 * part of dw. */
static lm_status_t loss_backward_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                                    int nout, lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)nout;
  const DLTensor *g = (const DLTensor *)in[0].ptr, *x = (const DLTensor *)in[1].ptr,
                 *w = (const DLTensor *)in[2].ptr;
  const double gv = *(const double *)g->data, *wv = (const double *)w->data;
  int64_t wshape[1] = {K};
  DLManagedTensor *dx = new_f64(2, x->shape), *dw = new_f64(1, wshape);
  if (!dx || !dw) {
    if (dx) dx->deleter(dx);
    if (dw) dw->deleter(dw);
    return LM_ERR_OUT_OF_MEMORY;
  }
  double *dxv = (double *)dx->dl_tensor.data, *dwv = (double *)dw->dl_tensor.data;
  for (int64_t r = 0; r < x->shape[0]; ++r) {
    const double d = dot_row(x, r, wv);
    for (int64_t k = 0; k < K; ++k) {
      dxv[r * K + k] = 2.0 * gv * d * wv[k];
      dwv[k] += 2.0 * gv * d * ((const double *)x->data)[r * K + k];
    }
  }
  out[0] = lm_arg_managed(dx);
  out[1] = lm_arg_managed(dw);
  return LM_SUCCESS;
}

/* The recorded placements `which` of index i (one per dim of the 1-D mesh). */
static lm_placement_t recorded(lm_local_map_record_t rec, int which, int i) {
  lm_placement_t p[4];
  int n = -1;
  LM_ASSERT_OK(lm_local_map_record_placements(rec, which, i, 4, p, &n));
  LM_ASSERT_ALL(n == 1);
  return p[0];
}

static int same(lm_placement_t a, lm_placement_t b) {
  return memcmp(&a, &b, sizeof a) == 0; /* eight int32 fields, no padding */
}

/* Gathers t (global shape of numel elements) and compares it with want. */
static void expect_global(lm_dist_tensor_t t, int ndim, int64_t *shape, const double *want,
                          int64_t numel, const char *what) {
  double *got = calloc((size_t)numel, sizeof *got);
  LM_ASSERT_ALL(got != NULL);
  DLTensor dst = host_f64(got, ndim, shape);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &dst));
  int bad = 0;
  for (int64_t i = 0; i < numel; ++i)
    if (fabs(got[i] - want[i]) > 1e-12 * (1.0 + fabs(want[i]))) {
      if (!bad) lm_test__diag("%s[%lld]: %g, want %g", what, (long long)i, got[i], want[i]);
      ++bad;
    }
  free(got);
  LM_ASSERT_ALL(bad == 0);
}

/* One forward and backward with x given as x_own; returns after comparing both gradients with
 * the serial reference. */
static void run_forward_backward(lm_placement_t x_own) {
  lm_mesh_t m = lm_test_world_mesh();
  int64_t xs[2] = {N_ROWS, K}, ws[1] = {K};
  double *xg = malloc(sizeof(double) * N_ROWS * K), wg[K];
  LM_ASSERT_ALL(xg != NULL);
  for (int64_t r = 0; r < N_ROWS; ++r)
    for (int64_t k = 0; k < K; ++k) xg[r * K + k] = x_at(r, k);
  for (int64_t k = 0; k < K; ++k) wg[k] = w_at(k);
  lm_dist_tensor_t x = from_global(m, xg, 2, xs, x_own), w = from_global(m, wg, 1, ws, R);

  /* Forward: fn sees x as S(0) (moved when given as R); w's gradient is partial per rank. */
  const lm_placement_t x_in = S(0), loss_pl = P(LM_REDUCE_SUM), w_grad = P(LM_REDUCE_SUM);
  const lm_placement_t *in_pl[2] = {&x_in, NULL}, *out_pl[1] = {&loss_pl};
  const lm_placement_t *in_grad[2] = {NULL, &w_grad};
  lm_arg_t in[2] = {lm_arg_dist(x), lm_arg_dist(w)}, out[1];
  lm_local_map_record_t rec = NULL;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.in_grad_placements = in_grad;
  opt.record = &rec;
  LM_ASSERT_OK_ALL(lm_local_map_ex(loss_fn, NULL, 2, in, in_pl, 1, out_pl, NULL, NULL,
                                   LM_LOCAL_MAP_RESHARD_INPUTS, &opt, out));
  LM_ASSERT_ALL(rec != NULL && out[0].kind == LM_ARG_DIST_TENSOR);
  lm_dist_tensor_t loss = (lm_dist_tensor_t)out[0].ptr;

  /* What the record says. */
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_INPUT, 0), x_own));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_IN, 0), S(0)));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_IN_GRAD, 0), S(0)));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_INPUT, 1), R));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_IN, 1), R));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_IN_GRAD, 1), P(LM_REDUCE_SUM)));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_OUT, 0), P(LM_REDUCE_SUM)));
  LM_ASSERT_ALL(same(recorded(rec, LM_RECORD_OUT_GRAD, 0), R));

  /* The loss, and its serial reference. */
  double want_loss = 0.0, *want_dx = calloc((size_t)N_ROWS * K, sizeof(double)), want_dw[K] = {0};
  const double g = 1.5;
  LM_ASSERT_ALL(want_dx != NULL);
  for (int64_t r = 0; r < N_ROWS; ++r) {
    double d = 0.0;
    for (int64_t k = 0; k < K; ++k) d += xg[r * K + k] * wg[k];
    want_loss += d * d;
    for (int64_t k = 0; k < K; ++k) {
      want_dx[r * K + k] = 2.0 * g * d * wg[k];
      want_dw[k] += 2.0 * g * d * xg[r * K + k];
    }
  }
  expect_global(loss, 0, NULL, &want_loss, 1, "loss");

  /* Backward, from the record alone: dloss placed as the output's gradient (R). */
  lm_placement_t gp = recorded(rec, LM_RECORD_OUT_GRAD, 0);
  double gv = g;
  lm_dist_tensor_t dloss = from_global(m, &gv, 0, NULL, gp);
  lm_placement_t x_seen = recorded(rec, LM_RECORD_IN, 0), w_seen = recorded(rec, LM_RECORD_IN, 1);
  lm_placement_t dx_pl = recorded(rec, LM_RECORD_IN_GRAD, 0);
  lm_placement_t dw_pl = recorded(rec, LM_RECORD_IN_GRAD, 1);
  const lm_placement_t *bin_pl[3] = {&gp, &x_seen, &w_seen}, *bout_pl[2] = {&dx_pl, &dw_pl};
  lm_arg_t bin[3] = {lm_arg_dist(dloss), lm_arg_dist(x), lm_arg_dist(w)}, bout[2];
  LM_ASSERT_OK_ALL(lm_local_map(loss_backward_fn, NULL, 3, bin, bin_pl, 2, bout_pl, NULL, NULL,
                                LM_LOCAL_MAP_RESHARD_INPUTS, bout));
  lm_dist_tensor_t dx_view = (lm_dist_tensor_t)bout[0].ptr, dw_view = (lm_dist_tensor_t)bout[1].ptr;

  /* Each gradient to its input's own layout: x's as x_own, w's as R. */
  lm_dist_tensor_t dx = NULL, dw = NULL;
  LM_ASSERT_OK_ALL(lm_local_map_record_input_grad(&dx, rec, 0, dx_view));
  LM_ASSERT_OK_ALL(lm_local_map_record_input_grad(&dw, rec, 1, dw_view));
  lm_placement_t got;
  LM_ASSERT_OK(lm_dist_tensor_placements(dx, &got, 1));
  LM_ASSERT_ALL(same(got, x_own));
  LM_ASSERT_OK(lm_dist_tensor_placements(dw, &got, 1));
  LM_ASSERT_ALL(same(got, R));
  /* A replicated gradient is whole on this rank, without a gather. */
  DLTensor dwl;
  LM_ASSERT_OK(lm_dist_tensor_local(dw, &dwl));
  for (int64_t k = 0; k < K; ++k)
    LM_ASSERT_ALL(fabs(((double *)dwl.data)[k] - want_dw[k]) <= 1e-12 * (1.0 + fabs(want_dw[k])));
  expect_global(dx, 2, xs, want_dx, N_ROWS * K, "dx");
  expect_global(dw, 1, ws, want_dw, K, "dw");

  lm_dist_tensor_t all[8] = {x, w, loss, dloss, dx_view, dw_view, dx, dw};
  for (int i = 0; i < 8; ++i) LM_ASSERT_OK(lm_dist_tensor_destroy(&all[i]));
  LM_ASSERT_OK(lm_local_map_record_destroy(&rec));
  LM_ASSERT_ALL(rec == NULL);
  LM_ASSERT_OK(lm_local_map_record_destroy(&rec)); /* NULL-safe */
  LM_ASSERT_OK(lm_local_map_record_destroy(NULL));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
  free(want_dx);
  free(xg);
}

static void test_backward_sharded_input(void **state) {
  (void)state;
  run_forward_backward(S(0));
}

static void test_backward_moved_input(void **state) {
  (void)state;
  run_forward_backward(R); /* fn saw S(0); the gradient is all-gathered back to R */
}

/* inputs: anything; outputs: a 1-element f64 tensor, and an int64 scalar. */
static lm_status_t small_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)in, (void)nout;
  int64_t one[1] = {1};
  DLManagedTensor *t = new_f64(1, one);
  if (!t) return LM_ERR_OUT_OF_MEMORY;
  out[0] = lm_arg_managed(t);
  out[1] = lm_arg_i64(7);
  return LM_SUCCESS;
}

#define HAS(s) (strstr(lm_last_error_message(), (s)) != NULL)

static void test_record_errors(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  int64_t xs[1] = {NP + 2}; /* not y's [1] */
  double xg[10] = {0};
  lm_dist_tensor_t x = from_global(m, xg, 1, xs, S(0));
  const lm_placement_t mx = P(LM_REDUCE_MAX);
  const lm_placement_t *out_pl[2] = {&mx, NULL};
  lm_arg_t in[2] = {lm_arg_dist(x), lm_arg_i64(3)}, out[2];
  lm_local_map_record_t rec = NULL;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  LM_ASSERT_OK_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, 0, &opt, out));
  lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
  lm_placement_t p[2];
  int n = -1;
  /* A Partial(max) output has no gradient placements; a non-dist input and output none at all. */
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_OUT_GRAD, 0, 2, p, &n),
                   LM_ERR_NOT_SUPPORTED);
  LM_ASSERT_ALL(HAS("outputs[0]") && HAS("Partial(max)"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_IN, 1, 2, p, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("inputs[1]") && HAS("not a dist tensor"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_OUT, 1, 2, p, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("outputs[1]"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_IN, 2, 2, p, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("index 2") && HAS("2 inputs"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, 9, 0, 2, p, &n), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("which = 9"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_IN, 0, 2, p, NULL),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("n is NULL"));
  n = -1;
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_IN, 0, 0, NULL, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("capacity 0") && n == 1); /* the count is still given */
  LM_ASSERT_STATUS(lm_local_map_record_placements(rec, LM_RECORD_IN, 0, 2, NULL, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("placements is NULL"));
  LM_ASSERT_STATUS(lm_local_map_record_placements(NULL, LM_RECORD_IN, 0, 2, p, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("record is NULL"));
  /* input_grad: the wrong global shape, a non-dist input, NULL out and grad. */
  lm_dist_tensor_t g = NULL;
  LM_ASSERT_STATUS(lm_local_map_record_input_grad(&g, rec, 0, y), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(g == NULL && HAS("grad has global shape") && HAS("inputs[0]"));
  LM_ASSERT_STATUS(lm_local_map_record_input_grad(&g, rec, 1, x), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("inputs[1]"));
  LM_ASSERT_STATUS(lm_local_map_record_input_grad(NULL, rec, 0, x), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("out is NULL"));
  LM_ASSERT_STATUS(lm_local_map_record_input_grad(&g, rec, 0, NULL), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("grad"));
  /* A dead record is refused, not read. */
  lm_local_map_record_t dead = rec;
  LM_ASSERT_OK(lm_local_map_record_destroy(&rec));
  LM_ASSERT_STATUS(lm_local_map_record_placements(dead, LM_RECORD_IN, 0, 2, p, &n),
                   LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("not a live lm_local_map_record_t"));
  LM_ASSERT_STATUS(lm_local_map_record_destroy(&dead), LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* An input whose own placements have no linear adjoint: its gradient has no layout to go to. */
static void test_input_without_adjoint(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  int64_t xs[1] = {NP};
  double xg[8] = {0};
  lm_dist_tensor_t x = from_global(m, xg, 1, xs, P(LM_REDUCE_MIN));
  const lm_placement_t sp = S(0);
  const lm_placement_t *out_pl[2] = {&sp, NULL};
  lm_arg_t in[1] = {lm_arg_dist(x)}, out[2];
  lm_local_map_record_t rec = NULL;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  LM_ASSERT_OK_ALL(lm_local_map_ex(small_fn, NULL, 1, in, NULL, 2, out_pl, NULL, NULL,
                                   LM_LOCAL_MAP_SHAPES_EVEN, &opt, out));
  lm_dist_tensor_t g = NULL;
  LM_ASSERT_STATUS(lm_local_map_record_input_grad(&g, rec, 0, x), LM_ERR_NOT_SUPPORTED);
  LM_ASSERT_ALL(g == NULL && HAS("inputs[0]") && HAS("Partial(min)"));
  lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_local_map_record_destroy(&rec));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* The options' checks: every rank fails alike, no record, no output. */
static void test_options_errors(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  int64_t xs[1] = {NP};
  double xg[8] = {0};
  lm_dist_tensor_t x = from_global(m, xg, 1, xs, S(0));
  const lm_placement_t sp = S(0), bad_dim = S(1);
  const lm_placement_t *out_pl[2] = {&sp, NULL};
  lm_arg_t in[2] = {lm_arg_dist(x), lm_arg_i64(3)}, out[2];
  lm_local_map_record_t rec = (lm_local_map_record_t)1; /* overwritten with NULL on failure */
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  const unsigned f = LM_LOCAL_MAP_SHAPES_EVEN;

  opt.size = sizeof(size_t);
  LM_ASSERT_STATUS_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, &opt, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("options->size"));
  opt.size = sizeof opt;
  opt.version = 99;
  LM_ASSERT_STATUS_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, &opt, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("options->version is 99"));
  opt.version = LM_LOCAL_MAP_OPTIONS_VERSION;
  opt.magic = 0;
  LM_ASSERT_STATUS_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, &opt, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("options->magic"));
  opt.magic = LM_LOCAL_MAP_OPTIONS_MAGIC;

  const lm_placement_t *on_scalar[2] = {NULL, &sp};
  opt.in_grad_placements = on_scalar;
  LM_ASSERT_STATUS_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, &opt, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(HAS("in_grad_placements[1]") && HAS("not a dist tensor"));
  LM_ASSERT_ALL(rec == NULL && out[0].kind == LM_ARG_NONE);

  /* A Shard dim the 1-D input lacks, on the last rank only: every rank fails. */
  const lm_placement_t *bad[2] = {lm_test_rank() == NP - 1 ? &bad_dim : NULL, NULL};
  opt.in_grad_placements = bad;
  rec = (lm_local_map_record_t)1;
  lm_status_t st =
      lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, &opt, out);
  const int bad_rank = lm_test_rank() == NP - 1;
  if (!bad_rank) LM_ASSERT_STATUS(st, LM_ERR_REMOTE);
  LM_ASSERT_ALL(!bad_rank || (st == LM_ERR_INVALID_ARGUMENT && HAS("in_grad_placements[0]")));
  LM_ASSERT_ALL(rec == NULL && out[0].kind == LM_ARG_NONE);

  /* options NULL is lm_local_map; a record not asked for is not made. */
  LM_ASSERT_OK_ALL(lm_local_map_ex(small_fn, NULL, 2, in, NULL, 2, out_pl, NULL, NULL, f, NULL, out));
  lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_backward_sharded_input),
    cmocka_unit_test(test_backward_moved_input),
    cmocka_unit_test(test_record_errors),
    cmocka_unit_test(test_input_without_adjoint),
    cmocka_unit_test(test_options_errors),
};

LM_TEST_MAIN(tests)
