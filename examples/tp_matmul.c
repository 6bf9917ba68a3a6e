/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tp_matmul: a tensor-parallel matmul. X [m, k] is sharded on k (Shard(1)), W [k, n] on k
 * (Shard(0)); each rank multiplies its blocks, X[:, k_r] @ W[k_r, :], a partial [m, n] product,
 * and lm_local_map wraps it as Partial(sum). Resharding to Replicate sums the partials: X @ W.
 *
 * Then the backward pass, from the forward call's record (lm_local_map_ex): the gradient dY of a
 * Partial(sum) output is Replicate (LM_RECORD_OUT_GRAD); a second lm_local_map computes each
 * rank's blocks dX[:, k_r] = dY @ W[k_r, :]^T and dW[k_r, :] = X[:, k_r]^T @ dY, placed as the
 * record says (LM_RECORD_IN_GRAD: Shard(1) and Shard(0), the placements fn saw), and
 * lm_local_map_record_input_grad puts each in its input's own layout. Both are gathered and
 * compared with the serial dY @ W^T and X^T @ dY.
 *
 *   mpirun -np 4 build/examples/tp_matmul
 *
 * k = 7 is uneven over 2, 3 and 4 ranks (torch.chunk: 4+3, 3+3+1, 2+2+2+1). The entries are small
 * integers, so float64 sums are exact and the check against the serial product is exact.
 */
#include <mpi.h>
#include <stdio.h>

#include "localmap.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    lm_status_t st_ = (call);                                                                 \
    if (st_ != LM_SUCCESS) {                                                                  \
      fprintf(stderr, "tp_matmul: %s failed: %s: %s\n", #call, lm_status_string(st_),        \
              lm_last_error_message());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

enum { M = 3, K = 7, N = 4 };

/* fn: local X [m, kr] and W [kr, n] -> X @ W [m, n] (plain loops). */
static lm_status_t matmul_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                             int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 2 || nout != 1) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = in[0].ptr, *w = in[1].ptr;
  int64_t m = x->shape[0], kr = x->shape[1], n = w->shape[1];
  if (w->shape[0] != kr) {
    lm_set_error_message("matmul_fn: the local blocks of X and W disagree on k");
    return LM_ERR_INVALID_ARGUMENT;
  }
  int64_t ys[2] = {m, n};
  DLManagedTensor *y = NULL; /* zero-filled */
  lm_status_t st = lm_tensor_alloc(&y, 2, ys, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  out[0] = lm_arg_managed(y);
  const double *a = x->data, *b = w->data;
  double *c = y->dl_tensor.data;
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < kr; l++)
      for (int64_t j = 0; j < n; j++) c[i * n + j] += a[i * kr + l] * b[l * n + j];
  return LM_SUCCESS;
}

/* fn of the backward pass: dY [m, n], local X [m, kr], W [kr, n] -> dX [m, kr], dW [kr, n]. */
static lm_status_t matmul_backward_fn(void *user_data, lm_mesh_t mesh, int nin,
                                      const lm_arg_t *in, int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 3 || nout != 2) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *dy = in[0].ptr, *x = in[1].ptr, *w = in[2].ptr;
  int64_t m = x->shape[0], kr = x->shape[1], n = w->shape[1];
  int64_t dxs[2] = {m, kr}, dws[2] = {kr, n};
  DLManagedTensor *dx = NULL, *dw = NULL; /* zero-filled */
  lm_status_t st = lm_tensor_alloc(&dx, 2, dxs, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  out[0] = lm_arg_managed(dx); /* owned by localmap from here, also if this fn fails */
  if ((st = lm_tensor_alloc(&dw, 2, dws, LM_FLOAT64, LM_CPU)) != LM_SUCCESS) return st;
  out[1] = lm_arg_managed(dw);
  const double *g = dy->data, *a = x->data, *b = w->data;
  double *ga = dx->dl_tensor.data, *gb = dw->dl_tensor.data;
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < kr; l++)
      for (int64_t j = 0; j < n; j++) {
        ga[i * kr + l] += g[i * n + j] * b[l * n + j];
        gb[l * n + j] += a[i * kr + l] * g[i * n + j];
      }
  return LM_SUCCESS;
}

/* The recorded placements `which` of index i (one: the mesh is 1-D). */
static lm_placement_t recorded(lm_local_map_record_t rec, int which, int i) {
  lm_placement_t p[1];
  int n = 0;
  CHECK(lm_local_map_record_placements(rec, which, i, 1, p, &n));
  return p[0];
}

/* Gathers t ([rows, cols] f64) and compares it exactly with want. */
static int gathered_equals(lm_dist_tensor_t t, int64_t rows, int64_t cols, const double *want) {
  double got[K * N];
  int64_t shape[2] = {rows, cols};
  DLTensor dst = {got, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
  CHECK(lm_dist_tensor_gather(t, -1, &dst));
  int ok = 1;
  for (int64_t i = 0; i < rows * cols; i++) ok &= got[i] == want[i];
  return ok;
}

/* The backward pass of the forward call `rec`: returns whether dX and dW equal the serial ones. */
static int backward(lm_local_map_record_t rec, lm_mesh_t mesh, lm_dist_tensor_t x,
                    lm_dist_tensor_t w, const double *X, const double *W, int rank) {
  double G[M * N], dX_ref[M * K] = {0}, dW_ref[K * N] = {0};
  for (int i = 0; i < M * N; i++) G[i] = (double)((i * 5) % 9) - 4;
  for (int i = 0; i < M; i++)
    for (int l = 0; l < K; l++)
      for (int j = 0; j < N; j++) {
        dX_ref[i * K + l] += G[i * N + j] * W[l * N + j];
        dW_ref[l * N + j] += X[i * K + l] * G[i * N + j];
      }
  int64_t gs[2] = {M, N};
  DLTensor gg = {G, LM_CPU, 2, LM_FLOAT64, gs, NULL, 0};
  lm_placement_t g_pl = recorded(rec, LM_RECORD_OUT_GRAD, 0); /* Partial(sum) -> Replicate */
  lm_placement_t x_pl = recorded(rec, LM_RECORD_IN, 0), w_pl = recorded(rec, LM_RECORD_IN, 1);
  lm_placement_t dx_pl = recorded(rec, LM_RECORD_IN_GRAD, 0);
  lm_placement_t dw_pl = recorded(rec, LM_RECORD_IN_GRAD, 1);
  lm_dist_tensor_t dy = NULL;
  CHECK(lm_dist_tensor_from_global(&dy, mesh, &gg, &g_pl, -1));
  lm_arg_t in[3] = {lm_arg_dist(dy), lm_arg_dist(x), lm_arg_dist(w)}, out[2];
  const lm_placement_t *in_pl[3] = {&g_pl, &x_pl, &w_pl}, *out_pl[2] = {&dx_pl, &dw_pl};
  CHECK(lm_local_map(matmul_backward_fn, NULL, 3, in, in_pl, 2, out_pl, NULL, NULL,
                     LM_LOCAL_MAP_RESHARD_INPUTS, out));
  lm_dist_tensor_t dx_view = out[0].ptr, dw_view = out[1].ptr, dx = NULL, dw = NULL;
  CHECK(lm_local_map_record_input_grad(&dx, rec, 0, dx_view));
  CHECK(lm_local_map_record_input_grad(&dw, rec, 1, dw_view));
  int ok = gathered_equals(dx, M, K, dX_ref) && gathered_equals(dw, K, N, dW_ref);
  if (rank == 0)
    printf("backward: dX = dY @ W^T and dW = X^T @ dY, k sharded: %s the serial ones\n",
           ok ? "equal to" : "DIFFERENT from");
  lm_dist_tensor_t all[5] = {dy, dx_view, dw_view, dx, dw};
  for (int i = 0; i < 5; i++) lm_dist_tensor_destroy(&all[i]);
  return ok;
}

int main(int argc, char **argv) {
  int rank, size, comm_f, ok = 1, all_ok = 0;
  CHECK(lm_init(&argc, &argv));
  CHECK(lm_world_rank(&rank, &size));
  CHECK(lm_comm_world(&comm_f));
  int64_t mshape[1] = {size};
  lm_mesh_t mesh = NULL;
  CHECK(lm_mesh_create(&mesh, comm_f, 1, mshape, NULL));

  double X[M * K], W[K * N], ref[M * N] = {0}, got[M * N];
  for (int i = 0; i < M * K; i++) X[i] = (double)(i % 5) - 2;
  for (int i = 0; i < K * N; i++) W[i] = (double)((i * 3) % 7) - 3;
  for (int i = 0; i < M; i++)
    for (int l = 0; l < K; l++)
      for (int j = 0; j < N; j++) ref[i * N + j] += X[i * K + l] * W[l * N + j];

  int64_t xs[2] = {M, K}, ws[2] = {K, N};
  DLTensor xg = {X, LM_CPU, 2, LM_FLOAT64, xs, NULL, 0};
  DLTensor wg = {W, LM_CPU, 2, LM_FLOAT64, ws, NULL, 0};
  lm_placement_t s1[1] = {LM_PLACEMENT_SHARD(1)}, s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = NULL, w = NULL;
  CHECK(lm_dist_tensor_from_global(&x, mesh, &xg, s1, -1));
  CHECK(lm_dist_tensor_from_global(&w, mesh, &wg, s0, -1));

  lm_arg_t in[2] = {lm_arg_dist(x), lm_arg_dist(w)};
  const lm_placement_t *in_pl[2] = {s1, s0}; /* what fn needs (and what x, w already have) */
  const lm_placement_t *out_pl[1] = {psum};
  lm_arg_t out[1];
  lm_local_map_record_t rec = NULL; /* what the backward pass needs */
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  CHECK(lm_local_map_ex(matmul_fn, NULL, 2, in, in_pl, 1, out_pl, NULL, NULL, 0, &opt, out));
  lm_dist_tensor_t y = out[0].ptr, yr = NULL;
  CHECK(lm_dist_tensor_reshard(&yr, y, NULL, rep));
  DLTensor v;
  CHECK(lm_dist_tensor_local(yr, &v));
  for (int i = 0; i < M * N; i++) got[i] = ((const double *)v.data)[i];
  for (int i = 0; i < M * N; i++) ok &= got[i] == ref[i];

  if (rank == 0) {
    printf("tp_matmul: [%d,%d] @ [%d,%d] over %d ranks, k sharded\n", M, K, K, N, size);
    for (int i = 0; i < M; i++) {
      printf("  ");
      for (int j = 0; j < N; j++) printf(" %4g", got[i * N + j]);
      printf("   | serial");
      for (int j = 0; j < N; j++) printf(" %4g", ref[i * N + j]);
      printf("\n");
    }
  }
  ok &= backward(rec, mesh, x, w, X, W, rank);
  lm_local_map_record_destroy(&rec);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all_ok ? "PASS" : "FAIL");

  lm_dist_tensor_destroy(&yr);
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  lm_dist_tensor_destroy(&w);
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return all_ok ? 0 : 1;
}
