/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tp_matmul: a tensor-parallel matmul. X [m, k] is sharded on k (Shard(1)), W [k, n] on k
 * (Shard(0)); each rank multiplies its blocks, X[:, k_r] @ W[k_r, :], a partial [m, n] product,
 * and lm_local_map wraps it as Partial(sum). Resharding to Replicate sums the partials: X @ W.
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
  CHECK(lm_local_map(matmul_fn, NULL, 2, in, in_pl, 1, out_pl, NULL, NULL, 0, out));
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
