/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * moe_aux_loss: the Switch-Transformer load-balancing loss from local expert counts.
 *
 *   mpirun -np 4 build/examples/moe_aux_loss
 *
 * T tokens are sharded over the ranks (Shard(0) on a 1-D mesh; T = 37 is uneven). A deterministic
 * router gives each token a probability per expert (positive scores normalised to sum to 1) and
 * sends it to its top-1 expert. Each rank, inside lm_local_map, counts its tokens per expert and
 * sums its router probabilities per expert; both [E] vectors come back as Partial(sum) and are
 * resharded to Replicate. Then, on every rank,
 *     f_e = count_e / T,  P_e = prob_sum_e / T,  aux = E * sum_e f_e * P_e
 * which is compared with the serial value computed from all tokens.
 */
#include <mpi.h>
#include <stdio.h>

#include "localmap.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    lm_status_t st_ = (call);                                                                 \
    if (st_ != LM_SUCCESS) {                                                                  \
      fprintf(stderr, "moe_aux_loss: %s failed: %s: %s\n", #call, lm_status_string(st_),     \
              lm_last_error_message());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

enum { T = 37, E = 4, H = E }; /* one feature per expert drives its score */

/* The router: scores from the token's features, normalised; returns the top-1 expert. */
static int route(const double *x, double *prob) {
  double sum = 0;
  int best = 0;
  for (int e = 0; e < E; e++) {
    double s = 0.5 + x[e] + 0.25 * x[(e + 1) % H]; /* > 0: features are in [0, 1) */
    prob[e] = s;
    sum += s;
  }
  for (int e = 0; e < E; e++) {
    prob[e] /= sum;
    if (prob[e] > prob[best]) best = e;
  }
  return best;
}

/* fn: local tokens [t, H] -> counts [E] (int64) and probability sums [E] (float64). */
static lm_status_t count_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 1 || nout != 2) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = in[0].ptr;
  int64_t ne[1] = {E};
  DLManagedTensor *counts = NULL, *probs = NULL; /* zero-filled, owned by localmap once set */
  lm_status_t st = lm_tensor_alloc(&counts, 1, ne, LM_INT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  out[0] = lm_arg_managed(counts);
  if ((st = lm_tensor_alloc(&probs, 1, ne, LM_FLOAT64, LM_CPU)) != LM_SUCCESS) return st;
  out[1] = lm_arg_managed(probs);
  int64_t *c = counts->dl_tensor.data;
  double *p = probs->dl_tensor.data;
  for (int64_t t = 0; t < x->shape[0]; t++) {
    double prob[E];
    c[route((const double *)x->data + t * H, prob)]++;
    for (int e = 0; e < E; e++) p[e] += prob[e];
  }
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

  /* Token features, the same on every rank (the serial reference uses them all). */
  double tokens[T * H];
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) tokens[t * H + h] = (double)((t * 11 + h * 7) % 13) / 13.0;
  int64_t tshape[2] = {T, H};
  DLTensor tg = {tokens, LM_CPU, 2, LM_FLOAT64, tshape, NULL, 0};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = NULL;
  CHECK(lm_dist_tensor_from_global(&x, mesh, &tg, s0, -1));

  lm_arg_t in[1] = {lm_arg_dist(x)};
  const lm_placement_t *out_pl[2] = {psum, psum};
  lm_arg_t out[2];
  CHECK(lm_local_map(count_fn, NULL, 1, in, NULL, 2, out_pl, NULL, NULL, 0, out));
  lm_dist_tensor_t counts = out[0].ptr, probs = out[1].ptr, counts_r = NULL, probs_r = NULL;
  CHECK(lm_dist_tensor_reshard(&counts_r, counts, NULL, rep));
  CHECK(lm_dist_tensor_reshard(&probs_r, probs, NULL, rep));
  DLTensor cv, pv;
  CHECK(lm_dist_tensor_local(counts_r, &cv));
  CHECK(lm_dist_tensor_local(probs_r, &pv));
  const int64_t *c = cv.data;
  const double *p = pv.data;
  double aux = 0;
  for (int e = 0; e < E; e++) aux += ((double)c[e] / T) * (p[e] / T);
  aux *= E;

  /* Serial reference. */
  int64_t rc[E] = {0};
  double rp[E] = {0}, ref = 0;
  for (int t = 0; t < T; t++) {
    double prob[E];
    rc[route(tokens + t * H, prob)]++;
    for (int e = 0; e < E; e++) rp[e] += prob[e];
  }
  for (int e = 0; e < E; e++) ref += ((double)rc[e] / T) * (rp[e] / T);
  ref *= E;
  for (int e = 0; e < E; e++) ok &= c[e] == rc[e];
  double err = aux > ref ? aux - ref : ref - aux;
  ok &= err <= 1e-12 * ref; /* the probability sums differ only in summation order */

  if (rank == 0) {
    printf("moe_aux_loss: %d tokens, %d experts, %d ranks\n  counts:", T, E, size);
    for (int e = 0; e < E; e++) printf(" %lld", (long long)c[e]);
    printf("\n  aux = %.15f (serial %.15f)\n", aux, ref);
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all_ok ? "PASS" : "FAIL");

  lm_dist_tensor_destroy(&counts_r);
  lm_dist_tensor_destroy(&probs_r);
  lm_dist_tensor_destroy(&counts);
  lm_dist_tensor_destroy(&probs);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return all_ok ? 0 : 1;
}
