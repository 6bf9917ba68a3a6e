/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * demo: a tour of localmap on a 2-D mesh named {"dp", "tp"}.
 *
 *   mpirun -np 4 build/examples/demo        (or: make demo)
 *
 * The mesh is 2x2 at 4 ranks, 2x1 at 2, 1x1 at 1 (in general: tp = 2 when the world size is a
 * multiple of 2 and at least 4, dp = size / tp).
 *
 * Part 1 shards a 4x6 tensor as [S(0), S(1)] and prints each rank's shard and the gathered
 * tensor.
 *
 * Part 2 computes a masked loss (squared error against one-hot labels) with lm_local_map. predictions [B, C] and labels [B]
 * are sharded on the batch dim over dp (Replicate over tp); B = 11 is uneven on every dp > 1 here.
 * Labels equal to -100 are ignored. fn computes this rank's loss sum and token count and returns
 * both as scalars (0-d tensors, as PyTorch's local_map does) placed Partial(sum) over dp (and Replicate over tp: every tp rank holds the same partial), so
 * the placements are {P(sum), R}. Resharding to Replicate sums over dp, and loss_sum / count is
 * exactly the serial loss, whatever the shard sizes (a Partial(avg) of per-rank means would not
 * be).
 *
 * Then its backward pass, from the forward call's record (lm_local_map_ex): the gradient of
 * loss_sum is 1 / count, placed as the record says for a Partial(sum) output's gradient
 * (LM_RECORD_OUT_GRAD: Replicate); a second lm_local_map computes each rank's rows of
 * d loss / d predictions = 2 (pred - onehot) / count (0 for ignored rows), placed LM_RECORD_IN_GRAD
 * ([S(0), R]: the placements fn saw), and lm_local_map_record_input_grad gives it in the
 * predictions' own layout.
 *
 * Every rank checks the results against a serial reference computed from the full data. The
 * program prints PASS or FAIL and exits nonzero on a mismatch.
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
      fprintf(stderr, "demo: %s failed: %s: %s\n", #call, lm_status_string(st_),             \
              lm_last_error_message());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                           \
    }                                                                                         \
  } while (0)

enum { B = 11, C = 5, IGNORE = -100 }; /* B = 11: uneven over dp = 2 (6 + 5) and dp = 3 */

/* Prints one line per rank, in rank order, through rank 0. */
static void print_ordered(const char *line) {
  int rank, size;
  char mine[256];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  snprintf(mine, sizeof mine, "%s", line);
  char *all = rank == 0 ? malloc((size_t)size * sizeof mine) : NULL;
  MPI_Gather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; r++) printf("%s\n", all + (size_t)r * sizeof mine);
    fflush(stdout);
    free(all);
  }
}

/* Sets *out to a new scalar (0-d) float64 tensor holding value. */
static lm_status_t scalar_out(lm_arg_t *out, double value) {
  DLManagedTensor *m = NULL;
  lm_status_t st = lm_tensor_alloc(&m, 0, NULL, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  *(double *)m->dl_tensor.data = value;
  *out = lm_arg_managed(m);
  return LM_SUCCESS;
}

/* Squared error of one row of predictions against the one-hot encoding of its label. */
static double row_loss(const double *pred, int64_t label) {
  double s = 0;
  for (int c = 0; c < C; c++) {
    double d = pred[c] - (c == label ? 1.0 : 0.0);
    s += d * d;
  }
  return s;
}

/* fn: this rank's masked loss sum and token count, from its local shards. */
static lm_status_t masked_loss_fn(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                                  int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 2 || nout != 2) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *pred = in[0].ptr, *lab = in[1].ptr;
  const double *p = pred->data;
  const int64_t *l = lab->data;
  if (pred->shape[0] != lab->shape[0]) {
    lm_set_error_message("predictions and labels have different local batch sizes");
    return LM_ERR_INVALID_ARGUMENT;
  }
  double loss_sum = 0, count = 0;
  for (int64_t i = 0; i < pred->shape[0]; i++) {
    if (l[i] == IGNORE) continue;
    loss_sum += row_loss(p + i * C, l[i]);
    count += 1;
  }
  lm_status_t st = scalar_out(&out[0], loss_sum);
  return st != LM_SUCCESS ? st : scalar_out(&out[1], count);
}

/* fn of the backward pass: g (the gradient of loss_sum), local predictions and labels -> the
 * gradient of the predictions' rows. */
static lm_status_t masked_loss_backward_fn(void *user_data, lm_mesh_t mesh, int nin,
                                           const lm_arg_t *in, int nout, lm_arg_t *out) {
  (void)user_data;
  (void)mesh;
  if (nin != 3 || nout != 1) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *g = in[0].ptr, *pred = in[1].ptr, *lab = in[2].ptr;
  DLManagedTensor *d = NULL; /* zero-filled: ignored rows keep 0 */
  lm_status_t st = lm_tensor_alloc(&d, 2, pred->shape, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  out[0] = lm_arg_managed(d);
  const double gv = *(const double *)g->data, *p = pred->data;
  const int64_t *l = lab->data;
  double *dp = d->dl_tensor.data;
  for (int64_t i = 0; i < pred->shape[0]; i++)
    for (int c = 0; l[i] != IGNORE && c < C; c++)
      dp[i * C + c] = 2.0 * gv * (p[i * C + c] - (c == l[i] ? 1.0 : 0.0));
  return LM_SUCCESS;
}

/* The recorded placements `which` of index i on the 2-D mesh. */
static void recorded(lm_local_map_record_t rec, int which, int i, lm_placement_t pl[2]) {
  int n = 0;
  CHECK(lm_local_map_record_placements(rec, which, i, 2, pl, &n));
}

/* The backward pass of the forward call `rec` for d loss / d predictions (loss = loss_sum / n):
 * returns whether it equals the serial gradient. */
static int masked_loss_backward(lm_local_map_record_t rec, lm_mesh_t mesh, lm_dist_tensor_t pred,
                                lm_dist_tensor_t labels, double n, const double *pred_full,
                                const int64_t *lab_full, int rank) {
  lm_placement_t g_pl[2], pred_pl[2], lab_pl[2], d_pl[2];
  recorded(rec, LM_RECORD_OUT_GRAD, 0, g_pl); /* [P(sum), R] -> [R, R] */
  recorded(rec, LM_RECORD_IN, 0, pred_pl);
  recorded(rec, LM_RECORD_IN, 1, lab_pl);
  recorded(rec, LM_RECORD_IN_GRAD, 0, d_pl);
  double gv = 1.0 / n; /* d loss / d loss_sum */
  DLTensor gg = {&gv, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
  lm_dist_tensor_t g = NULL;
  CHECK(lm_dist_tensor_from_global(&g, mesh, &gg, g_pl, -1));
  lm_arg_t in[3] = {lm_arg_dist(g), lm_arg_dist(pred), lm_arg_dist(labels)}, out[1];
  const lm_placement_t *in_pl[3] = {g_pl, pred_pl, lab_pl}, *out_pl[1] = {d_pl};
  CHECK(lm_local_map(masked_loss_backward_fn, NULL, 3, in, in_pl, 1, out_pl, NULL, NULL,
                     LM_LOCAL_MAP_RESHARD_INPUTS, out));
  lm_dist_tensor_t view = out[0].ptr, dpred = NULL;
  CHECK(lm_local_map_record_input_grad(&dpred, rec, 0, view));
  double got[B * C];
  int64_t shape[2] = {B, C};
  DLTensor dst = {got, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
  CHECK(lm_dist_tensor_gather(dpred, -1, &dst));
  double worst = 0;
  for (int i = 0; i < B; i++)
    for (int c = 0; c < C; c++) {
      double want = lab_full[i] == IGNORE ? 0.0
                    : 2.0 * (pred_full[i * C + c] - (c == lab_full[i] ? 1.0 : 0.0)) / n;
      double e = got[i * C + c] > want ? got[i * C + c] - want : want - got[i * C + c];
      if (e > worst) worst = e;
    }
  if (rank == 0)
    printf("  backward: d loss / d predictions [%d,%d], max error vs serial %.3g\n", B, C, worst);
  lm_dist_tensor_destroy(&g);
  lm_dist_tensor_destroy(&view);
  lm_dist_tensor_destroy(&dpred);
  return worst <= 1e-14; /* (2 g (p - y) against 2 (p - y) / n: rounding only) */
}

/* The value of a replicated scalar. */
static double replicated_scalar(lm_dist_tensor_t t) {
  DLTensor v;
  CHECK(lm_dist_tensor_local(t, &v));
  return *(const double *)v.data;
}

int main(int argc, char **argv) {
  int rank, size, ok = 1, all_ok = 0;
  CHECK(lm_init(&argc, &argv));
  CHECK(lm_world_rank(&rank, &size));
  int comm_f;
  CHECK(lm_comm_world(&comm_f));

  /* The mesh: dp x tp. */
  int64_t tp = (size % 2 == 0 && size >= 4) ? 2 : 1, dp = size / tp;
  int64_t mesh_shape[2] = {dp, tp};
  const char *names[2] = {"dp", "tp"};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.dim_names = names;
  lm_mesh_t mesh = NULL;
  CHECK(lm_mesh_create(&mesh, comm_f, 2, mesh_shape, &cfg));
  int64_t coord[2];
  CHECK(lm_mesh_coord(mesh, coord, 2));
  if (rank == 0) printf("mesh %lld x %lld {dp, tp} over %d ranks\n", (long long)dp, (long long)tp, size);

  /* ---- Part 1: a 4x6 tensor sharded [S(0), S(1)]. ---- */
  {
    int64_t shape[2] = {4, 6};
    double full[24];
    for (int i = 0; i < 24; i++) full[i] = i;
    DLTensor g = {full, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
    lm_placement_t pl[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
    lm_dist_tensor_t t = NULL;
    CHECK(lm_dist_tensor_from_global(&t, mesh, &g, pl, -1)); /* every rank has the full data */
    int64_t off[2], len[2];
    DLTensor v;
    CHECK(lm_dist_tensor_local_offset(t, off, 2));
    CHECK(lm_dist_tensor_local_shape(t, len, 2));
    CHECK(lm_dist_tensor_local(t, &v));
    char line[256];
    int n = snprintf(line, sizeof line, "  rank %d coord (%lld,%lld) offset (%lld,%lld) shape [%lld,%lld]:",
                     rank, (long long)coord[0], (long long)coord[1], (long long)off[0],
                     (long long)off[1], (long long)len[0], (long long)len[1]);
    for (int64_t i = 0; i < len[0] * len[1] && n < (int)sizeof line - 8; i++)
      n += snprintf(line + n, sizeof line - (size_t)n, " %g", ((double *)v.data)[i]);
    if (rank == 0) printf("part 1: a 4x6 tensor with placements [S(0), S(1)]\n");
    print_ordered(line);
    double back[24];
    DLTensor dst = {back, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
    CHECK(lm_dist_tensor_gather(t, -1, &dst));
    for (int i = 0; i < 24; i++) ok &= back[i] == full[i];
    if (rank == 0) {
      printf("  gathered:\n");
      for (int i = 0; i < 4; i++) {
        printf("   ");
        for (int j = 0; j < 6; j++) printf(" %3g", back[i * 6 + j]);
        printf("\n");
      }
    }
    lm_dist_tensor_destroy(&t);
  }

  /* ---- Part 2: masked loss with lm_local_map. ---- */
  double pred_full[B * C];
  int64_t lab_full[B];
  for (int i = 0; i < B; i++) {
    for (int c = 0; c < C; c++) pred_full[i * C + c] = (double)((i * 7 + c * 3) % 11) / 4.0 - 1.0;
    lab_full[i] = (i % 4 == 3) ? IGNORE : (i * 3) % C; /* rows 3 and 7 are ignored */
  }
  int64_t pshape[2] = {B, C}, lshape[1] = {B};
  DLTensor pg = {pred_full, LM_CPU, 2, LM_FLOAT64, pshape, NULL, 0};
  DLTensor lg = {lab_full, LM_CPU, 1, LM_INT64, lshape, NULL, 0};
  lm_placement_t batch[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_REPLICATE};
  lm_placement_t rep[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
  lm_placement_t partial[2] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t pred = NULL, labels = NULL;
  CHECK(lm_dist_tensor_from_global(&pred, mesh, &pg, batch, -1));
  /* The labels start replicated; lm_local_map reshards them to the batch layout it needs. */
  CHECK(lm_dist_tensor_from_global(&labels, mesh, &lg, rep, -1));
  {
    int64_t off[2], len[2];
    char line[256];
    CHECK(lm_dist_tensor_local_offset(pred, off, 2));
    CHECK(lm_dist_tensor_local_shape(pred, len, 2));
    snprintf(line, sizeof line, "  rank %d coord (%lld,%lld): predictions rows [%lld, %lld) shape [%lld,%lld]",
             rank, (long long)coord[0], (long long)coord[1], (long long)off[0],
             (long long)(off[0] + len[0]), (long long)len[0], (long long)len[1]);
    if (rank == 0) printf("part 2: masked loss, predictions [%d,%d] placed [S(0), R]\n", B, C);
    print_ordered(line);
  }

  lm_arg_t in[2] = {lm_arg_dist(pred), lm_arg_dist(labels)};
  const lm_placement_t *in_pl[2] = {batch, batch};
  const lm_placement_t *out_pl[2] = {partial, partial};
  lm_arg_t out[2];
  lm_local_map_record_t rec = NULL; /* what the backward pass needs */
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  CHECK(lm_local_map_ex(masked_loss_fn, NULL, 2, in, in_pl, 2, out_pl, NULL, NULL,
                        LM_LOCAL_MAP_RESHARD_INPUTS, &opt, out));
  lm_dist_tensor_t loss_sum = out[0].ptr, count = out[1].ptr;
  {
    DLTensor v;
    char line[256];
    CHECK(lm_dist_tensor_local(loss_sum, &v));
    double ls = *(double *)v.data;
    CHECK(lm_dist_tensor_local(count, &v));
    snprintf(line, sizeof line, "  rank %d coord (%lld,%lld): partial loss_sum %.6f count %g",
             rank, (long long)coord[0], (long long)coord[1], ls, *(double *)v.data);
    if (rank == 0) printf("  fn's outputs, placed [P(sum), R]:\n");
    print_ordered(line);
  }
  lm_dist_tensor_t loss_sum_r = NULL, count_r = NULL;
  CHECK(lm_dist_tensor_reshard(&loss_sum_r, loss_sum, NULL, rep));
  CHECK(lm_dist_tensor_reshard(&count_r, count, NULL, rep));
  int nd0 = -1, nd1 = -1;
  CHECK(lm_dist_tensor_ndim(loss_sum_r, &nd0));
  CHECK(lm_dist_tensor_ndim(count_r, &nd1));
  ok &= nd0 == 0 && nd1 == 0; /* true scalars all the way */
  double total = replicated_scalar(loss_sum_r), n = replicated_scalar(count_r);
  double loss = total / n;

  /* The serial reference, on every rank from the full data. */
  double ref_sum = 0, ref_n = 0;
  for (int i = 0; i < B; i++) {
    if (lab_full[i] == IGNORE) continue;
    ref_sum += row_loss(pred_full + i * C, lab_full[i]);
    ref_n += 1;
  }
  double ref = ref_sum / ref_n;
  double err = loss > ref ? loss - ref : ref - loss;
  ok &= n == ref_n && err <= 1e-12 * ref; /* summation order differs, nothing else */
  if (rank == 0)
    printf("  loss = %.12f over %g tokens (serial: %.12f over %g)\n", loss, n, ref, ref_n);
  ok &= masked_loss_backward(rec, mesh, pred, labels, n, pred_full, lab_full, rank);
  lm_local_map_record_destroy(&rec);

  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all_ok ? "PASS" : "FAIL");

  lm_dist_tensor_destroy(&loss_sum_r);
  lm_dist_tensor_destroy(&count_r);
  lm_dist_tensor_destroy(&loss_sum);
  lm_dist_tensor_destroy(&count);
  lm_dist_tensor_destroy(&pred);
  lm_dist_tensor_destroy(&labels);
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return all_ok ? 0 : 1;
}
