/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * z_loss: the router/logit z-loss, mean over tokens of logsumexp(logits)^2, as Partial(avg).
 *
 *   mpirun -np 4 build/examples/z_loss
 *
 * logits [B, V] are sharded on the batch dim (Shard(0), 1-D mesh). fn computes the mean of
 * logsumexp(row)^2 over its local rows and returns it as a scalar (0-d, from lm_tensor_alloc)
 * placed Partial(avg); resharding to Replicate averages the per-rank means.
 *
 * NOTE: the average of per-rank means equals the global mean only when every rank holds the same
 * number of rows. B = 12 divides evenly over 1, 2, 3, 4 and 6 ranks; the program refuses other
 * sizes. For uneven shards return the local *sum* and the row count as Partial(sum) instead and
 * divide after the reshard (see examples/demo.c).
 *
 * The examples link no libm, so exp and log are small series below; the serial reference uses
 * the same functions, so the comparison checks localmap, not the series.
 */
#include <mpi.h>
#include <stdio.h>

#include "localmap.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    lm_status_t st_ = (call);                                                                 \
    if (st_ != LM_SUCCESS) {                                                                  \
      fprintf(stderr, "z_loss: %s failed: %s: %s\n", #call, lm_status_string(st_),           \
              lm_last_error_message());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

enum { B = 12, V = 6 };
static const double LN2 = 0.69314718055994530942;

/* exp(x) for moderate |x|: x = k ln2 + r, |r| <= ln2 / 2, Taylor series of exp(r), times 2^k. */
static double ex_exp(double x) {
  int k = (int)(x / LN2 + (x >= 0 ? 0.5 : -0.5));
  double r = x - k * LN2, term = 1, sum = 1, scale = 1;
  for (int i = 1; i < 24; i++) {
    term *= r / i;
    sum += term;
  }
  for (int i = 0; i < (k >= 0 ? k : -k); i++) scale *= k >= 0 ? 2.0 : 0.5;
  return sum * scale;
}

/* log(x), x > 0: x = m 2^k with m in [1, 2), log m = 2 atanh((m - 1) / (m + 1)). */
static double ex_log(double x) {
  int k = 0;
  while (x >= 2) x /= 2, k++;
  while (x < 1) x *= 2, k--;
  double z = (x - 1) / (x + 1), z2 = z * z, term = z, sum = 0;
  for (int i = 1; i < 61; i += 2) {
    sum += term / i;
    term *= z2;
  }
  return 2 * sum + k * LN2;
}

static double logsumexp(const double *row) {
  double mx = row[0], s = 0;
  for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
  for (int v = 0; v < V; v++) s += ex_exp(row[v] - mx);
  return mx + ex_log(s);
}

/* fn: local logits [b, V] -> the local mean of logsumexp^2 as a scalar (0-d) tensor. */
static lm_status_t z_loss_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                             int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 1 || nout != 1) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = in[0].ptr;
  if (x->shape[0] == 0) {
    lm_set_error_message("z_loss_fn: an empty shard has no mean");
    return LM_ERR_INVALID_ARGUMENT;
  }
  double s = 0;
  for (int64_t i = 0; i < x->shape[0]; i++) {
    double z = logsumexp((const double *)x->data + i * V);
    s += z * z;
  }
  DLManagedTensor *m = NULL;
  lm_status_t st = lm_tensor_alloc(&m, 0, NULL, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  *(double *)m->dl_tensor.data = s / (double)x->shape[0];
  out[0] = lm_arg_managed(m);
  return LM_SUCCESS;
}

int main(int argc, char **argv) {
  int rank, size, comm_f, ok = 1, all_ok = 0;
  CHECK(lm_init(&argc, &argv));
  CHECK(lm_world_rank(&rank, &size));
  CHECK(lm_comm_world(&comm_f));
  if (B % size != 0) {
    if (rank == 0) printf("z_loss: B = %d does not divide over %d ranks (see the NOTE)\nFAIL\n", B, size);
    CHECK(lm_finalize());
    return 1;
  }
  int64_t mshape[1] = {size};
  lm_mesh_t mesh = NULL;
  CHECK(lm_mesh_create(&mesh, comm_f, 1, mshape, NULL));

  double logits[B * V];
  for (int i = 0; i < B * V; i++) logits[i] = (double)((i * 17) % 23) / 5.0 - 2.0;
  int64_t shape[2] = {B, V};
  DLTensor g = {logits, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t pavg[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = NULL;
  CHECK(lm_dist_tensor_from_global(&x, mesh, &g, s0, -1));

  lm_arg_t in[1] = {lm_arg_dist(x)};
  const lm_placement_t *out_pl[1] = {pavg};
  lm_arg_t out[1];
  CHECK(lm_local_map(z_loss_fn, NULL, 1, in, NULL, 1, out_pl, NULL, NULL, 0, out));
  lm_dist_tensor_t zl = out[0].ptr, zr = NULL;
  CHECK(lm_dist_tensor_reshard(&zr, zl, NULL, rep));
  DLTensor v;
  CHECK(lm_dist_tensor_local(zr, &v));
  double z = *(const double *)v.data;

  double ref = 0;
  for (int i = 0; i < B; i++) {
    double l = logsumexp(logits + i * V);
    ref += l * l;
  }
  ref /= B;
  double err = z > ref ? z - ref : ref - z;
  ok &= err <= 1e-12 * ref;
  if (rank == 0) printf("z_loss: B = %d, V = %d, %d ranks: z = %.15f (serial %.15f)\n", B, V, size, z, ref);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all_ok ? "PASS" : "FAIL");

  lm_dist_tensor_destroy(&zr);
  lm_dist_tensor_destroy(&zl);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return all_ok ? 0 : 1;
}
