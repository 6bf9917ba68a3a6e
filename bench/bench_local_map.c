/* SPDX-License-Identifier: BSD-3-Clause */
/* lm_local_map overhead: a call with 8 arguments (4 dist tensors, 1 plain tensor, int64, double,
 * pointer) whose fn does nothing but return one scalar, so what is timed is the wrapper itself.
 * Modes: NO_AGREE (no collective: the pure wrapper cost), default (one small allreduce for the
 * failure agreement), and one Shard tensor output with a given global shape (wrapping cost).
 * Prints one JSON object per line (rank 0), the mean per call over many calls, max over ranks. */
#include <localmap.h>
#include <mpi.h>
#include <stdio.h>

#include "bench_util.h"
#include <stdlib.h>

static int rank, np;

static lm_status_t fn_scalar(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                             lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin;
  out[0].kind = LM_ARG_INT64;
  out[0].i64 = in[5].i64 + 1;
  (void)nout;
  return LM_SUCCESS;
}

static double out_data[16];
static int64_t out_shape[1] = {16};
static void noop_deleter(DLManagedTensor *self) { (void)self; }
static DLManagedTensor out_mt = {{out_data, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, out_shape, NULL, 0}, NULL, noop_deleter};

static lm_status_t fn_tensor(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                             lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)in; (void)nout;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = &out_mt;
  return LM_SUCCESS;
}

static double run(lm_local_fn_t fn, int nin, lm_arg_t *in, int nout,
                  const lm_placement_t *const *opl, const int64_t *const *osh, lm_mesh_t mesh,
                  unsigned flags, int iters) {
  lm_arg_t out[1];
  for (int w = 0; w < 100; ++w) {
    OK(lm_local_map(fn, NULL, nin, in, NULL, nout, opl, osh, mesh, flags, out));
    if (out[0].kind == LM_ARG_DIST_TENSOR) OK(lm_dist_tensor_destroy((lm_dist_tensor_t *)&out[0].ptr));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    OK(lm_local_map(fn, NULL, nin, in, NULL, nout, opl, osh, mesh, flags, out));
    if (out[0].kind == LM_ARG_DIST_TENSOR) OK(lm_dist_tensor_destroy((lm_dist_tensor_t *)&out[0].ptr));
  }
  double us = (MPI_Wtime() - t0) * 1e6 / iters;
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  int wf, iters = 200000;
  if (argc > 2) iters = atoi(argv[2]);
  OK(lm_comm_world(&wf));
  lm_mesh_t mesh;
  int64_t ms[1] = {np};
  OK(lm_mesh_create(&mesh, wf, 1, ms, NULL));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  int64_t g[2] = {64, 8};
  lm_dist_tensor_t t[4];
  for (int i = 0; i < 4; ++i) OK(lm_dist_tensor_zeros(&t[i], mesh, 2, g, LM_FLOAT32, LM_CPU, &s0));
  float plain[4] = {0};
  int64_t pshape[1] = {4};
  DLTensor pt = {plain, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, pshape, NULL, 0};
  lm_arg_t in[8] = {{0}};
  for (int i = 0; i < 4; ++i) { in[i].kind = LM_ARG_DIST_TENSOR; in[i].ptr = t[i]; }
  in[4].kind = LM_ARG_TENSOR; in[4].ptr = &pt;
  in[5].kind = LM_ARG_INT64; in[5].i64 = 41;
  in[6].kind = LM_ARG_DOUBLE; in[6].f64 = 0.5;
  in[7].kind = LM_ARG_POINTER; in[7].ptr = &pt;
  const lm_placement_t *none[1] = {NULL};
  const lm_placement_t *sh[1] = {&s0};
  int64_t gs[1] = {16 * (int64_t)np};
  const int64_t *shapes[1] = {gs};

  double a = run(fn_scalar, 8, in, 1, none, NULL, NULL, LM_LOCAL_MAP_NO_AGREE, iters);
  double b = run(fn_scalar, 8, in, 1, none, NULL, NULL, 0, iters / 10);
  double c = run(fn_tensor, 8, in, 1, sh, shapes, NULL, LM_LOCAL_MAP_NO_AGREE, iters / 4);
  /* The same agreeing call on a mesh with LM_CHECK level 0 (failure agreement only, no argument
   * fingerprint): b - d is the cost of the fingerprint. */
  lm_mesh_t mesh0;
  lm_mesh_config_t cfg0 = LM_MESH_CONFIG_INIT;
  cfg0.check_level = 0;
  OK(lm_mesh_create(&mesh0, wf, 1, ms, &cfg0));
  lm_dist_tensor_t t0[4];
  lm_arg_t in0[8];
  for (int i = 0; i < 8; ++i) in0[i] = in[i];
  for (int i = 0; i < 4; ++i) {
    OK(lm_dist_tensor_zeros(&t0[i], mesh0, 2, g, LM_FLOAT32, LM_CPU, &s0));
    in0[i].ptr = t0[i];
  }
  double d = run(fn_scalar, 8, in0, 1, none, NULL, NULL, 0, iters / 10);
  for (int i = 0; i < 4; ++i) OK(lm_dist_tensor_destroy(&t0[i]));
  OK(lm_mesh_destroy(&mesh0));
  if (!rank) {
    printf("{\"case\": \"local_map 8 args, scalar out, NO_AGREE\", \"np\": %d, \"us_per_call\": %.3f, \"target_us\": 1.0}\n", np, a);
    printf("{\"case\": \"local_map 8 args, scalar out, with agreement allreduce\", \"np\": %d, \"us_per_call\": %.3f, \"lm_check\": \"%s\"}\n", np, b, getenv("LM_CHECK") ? getenv("LM_CHECK") : "1 (default)");
    printf("{\"case\": \"local_map 8 args, scalar out, with agreement allreduce, mesh check_level 0\", \"np\": %d, \"us_per_call\": %.3f, \"fingerprint_cost_us\": %.3f}\n", np, d, b - d);
    printf("{\"case\": \"local_map 8 args, Shard tensor out (given shape), NO_AGREE\", \"np\": %d, \"us_per_call\": %.3f}\n", np, c);
  }
  for (int i = 0; i < 4; ++i) OK(lm_dist_tensor_destroy(&t[i]));
  OK(lm_mesh_destroy(&mesh));
  MPI_Finalize();
  return 0;
}
