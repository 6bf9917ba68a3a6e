/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * local_reshape: reshape [b, s, h] -> [b*s, h] shard by shard, keeping Shard(0).
 *
 *   mpirun -np 4 build/examples/local_reshape [b ...]        (default: b = 5 and b = 3)
 *
 * x [b, s, h] is Shard(0) on a 1-D mesh of p ranks, so rank i holds chunk_i(b) rows (torch.chunk:
 * blocks of ceil(b/p), the last ones short or empty). fn reshapes its block [b_i, s, h] to
 * [b_i*s, h] and returns it as Shard(0); no out_shapes are given, so lm_local_map learns the
 * global shape from one allgather of the local extents (the default mode, right for uneven
 * shards).
 *
 * A Shard(0) placement means the torch.chunk layout of the *output's* dim 0, and that is not
 * always what the reshaped blocks form: with b = 5, s = 3 on 4 ranks the blocks hold 6, 6, 3, 0
 * rows, but Shard(0) of 15 rows is 4, 4, 4, 3. lm_local_map checks this and refuses on every rank
 * (LM_ERR_INVALID_ARGUMENT, outputs freed). The blocks line up when s * chunk_i(b) = chunk_i(b*s)
 * for every i (always for p = 1 or b divisible by p; also e.g. b = 3, s = 3 on 4 ranks: 3,3,3,0).
 *
 * For each b the program predicts which case applies, checks that lm_local_map agrees, and
 *  - when the blocks line up: gathers the result and compares it with the serial reshape;
 *  - when they do not: runs the fallback, an fn that asks for x Replicate (in_placements +
 *    LM_LOCAL_MAP_RESHARD_INPUTS), reshapes the whole tensor and returns its own torch.chunk
 *    block of the b*s rows, and compares that.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localmap.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    lm_status_t st_ = (call);                                                                 \
    if (st_ != LM_SUCCESS) {                                                                  \
      fprintf(stderr, "local_reshape: %s failed: %s: %s\n", #call, lm_status_string(st_),    \
              lm_last_error_message());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

enum { S = 3, H = 4 };

/* Sets *out to a new [rows, H] float64 tensor holding a copy of src. */
static lm_status_t rows_out(lm_arg_t *out, int64_t rows, const double *src) {
  int64_t shape[2] = {rows, H};
  DLManagedTensor *m = NULL;
  lm_status_t st = lm_tensor_alloc(&m, 2, shape, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  if (rows > 0) memcpy(m->dl_tensor.data, src, sizeof(double) * (size_t)(rows * H));
  *out = lm_arg_managed(m);
  return LM_SUCCESS;
}

/* fn: [b_i, S, H] -> [b_i * S, H]: the same compact buffer, new shape. */
static lm_status_t reshape_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                              int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 1 || nout != 1) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = in[0].ptr;
  return rows_out(&out[0], x->shape[0] * x->shape[1], x->data);
}

/* Fallback fn: x is replicated here; reshape it and keep this rank's chunk of the b*S rows. */
static lm_status_t reshape_full_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                                   int nout, lm_arg_t *out) {
  (void)user_data;
  if (nin != 1 || nout != 1) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = in[0].ptr;
  int64_t parts = 1, off = 0, len = 0;
  int me = 0;
  if (lm_mesh_shape(mesh, &parts, 1) != LM_SUCCESS || lm_mesh_rank(mesh, &me) != LM_SUCCESS ||
      lm_layout_chunk(x->shape[0] * x->shape[1], parts, me, &off, &len) != LM_SUCCESS)
    return LM_ERR_INTERNAL;
  return rows_out(&out[0], len, (const double *)x->data + off * H);
}

/* Whether the reshaped blocks form the torch.chunk layout of b*S rows over p ranks. */
static int blocks_line_up(int64_t b, int64_t p) {
  for (int64_t i = 0; i < p; i++) {
    int64_t o1, l1, o2, l2;
    CHECK(lm_layout_chunk(b, p, i, &o1, &l1));
    CHECK(lm_layout_chunk(b * S, p, i, &o2, &l2));
    if (l1 * S != l2 || (l2 > 0 && o1 * S != o2)) return 0;
  }
  return 1;
}

static int run(lm_mesh_t mesh, int64_t b, int rank, int size) {
  int ok = 1;
  double *full = malloc(sizeof(double) * (size_t)(b * S * H));
  for (int64_t i = 0; i < b * S * H; i++) full[i] = (double)i;
  int64_t xs[3] = {b, S, H}, ys[2] = {b * S, H};
  DLTensor xg = {full, LM_CPU, 3, LM_FLOAT64, xs, NULL, 0};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = NULL;
  CHECK(lm_dist_tensor_from_global(&x, mesh, &xg, s0, -1));
  int64_t xl[3];
  CHECK(lm_dist_tensor_local_shape(x, xl, 3));

  lm_arg_t in[1] = {lm_arg_dist(x)};
  const lm_placement_t *out_pl[1] = {s0};
  lm_arg_t out[1];
  int line_up = blocks_line_up(b, size);
  lm_status_t st = lm_local_map(reshape_fn, NULL, 1, in, NULL, 1, out_pl, NULL, NULL, 0, out);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  if (rank == 0)
    printf("b = %lld, s = %d, h = %d on %d ranks: rank 0 holds [%lld, %d, %d] -> [%lld, %d]; %s\n",
           (long long)b, S, H, size, (long long)xl[0], S, H, (long long)(xl[0] * S), H,
           line_up ? "the blocks form Shard(0) of the [b*s, h] tensor"
                   : "the blocks do NOT form Shard(0) of the [b*s, h] tensor");
  lm_dist_tensor_t y = NULL;
  if (line_up) {
    ok &= st == LM_SUCCESS;
    if (st == LM_SUCCESS) y = out[0].ptr;
  } else {
    ok &= st == LM_ERR_INVALID_ARGUMENT && out[0].kind == LM_ARG_NONE; /* and fn's output freed */
    if (rank == 0) printf("  lm_local_map refused, as it should: %s\n", msg);
    if (st == LM_SUCCESS) {
      lm_dist_tensor_t bad = out[0].ptr;
      lm_dist_tensor_destroy(&bad);
    }
    /* Fallback: fn sees the whole x and returns its own chunk of the reshaped rows. */
    const lm_placement_t *in_pl[1] = {rep};
    CHECK(lm_local_map(reshape_full_fn, NULL, 1, in, in_pl, 1, out_pl, NULL, NULL,
                       LM_LOCAL_MAP_RESHARD_INPUTS, out));
    y = out[0].ptr;
    if (rank == 0) printf("  fallback (x replicated into fn, each rank keeps its chunk): done\n");
  }
  /* Gather (collective) only when every rank has a result of the right shape. */
  int64_t gs[2] = {-1, -1};
  if (y != NULL) CHECK(lm_dist_tensor_global_shape(y, gs, 2));
  int mine = y != NULL && gs[0] == b * S && gs[1] == H, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  ok &= all;
  if (all) {
    double *got = calloc((size_t)(b * S * H), sizeof(double));
    DLTensor dst = {got, LM_CPU, 2, LM_FLOAT64, ys, NULL, 0};
    CHECK(lm_dist_tensor_gather(y, -1, &dst));
    for (int64_t i = 0; i < b * S * H; i++) ok &= got[i] == full[i]; /* the serial reshape */
    if (rank == 0) printf("  gathered [%lld, %lld]: %s\n", (long long)gs[0], (long long)gs[1],
                          ok ? "equals the serial reshape" : "WRONG");
    free(got);
  }
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  free(full);
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
  int64_t bs[16] = {5, 3};
  int nb = 2;
  if (argc > 1) {
    nb = 0;
    for (int i = 1; i < argc && nb < 16; i++) bs[nb++] = atoll(argv[i]);
  }
  for (int i = 0; i < nb; i++) {
    int lok = run(mesh, bs[i], rank, size), agreed = 0;
    MPI_Allreduce(&lok, &agreed, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    ok &= agreed;
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all_ok ? "PASS" : "FAIL");
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return all_ok ? 0 : 1;
}
