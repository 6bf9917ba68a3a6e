/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_small: small calls against MPI (issue 22 item 5). A [64, 64] float64 tensor (32 KiB) on
 * the 1-D world mesh, for S0->R, S0->S1, P(sum)->S0 and P(sum)->R, and S0 -> S0 on the world
 * mesh in reverse rank order (a cross-mesh reshard: every shard moves to its mirror rank), and
 * S0->S1 between padded borrows (each shard the first 64 columns of rows of 72: read and written
 * in place, as a ScaLAPACK array with LLD > LOCr):
 *   execute   lm_reshard_plan_execute of a persistent plan into a tensor made once;
 *   reshard   lm_dist_tensor_reshard + lm_dist_tensor_destroy (the allocating call most users
 *             make: plan cache, output allocation, agreement);
 *   alloc     lm_reshard_plan_alloc_target + lm_dist_tensor_destroy (the output's own cost);
 *   mpi       the MPI collective that moves the same bytes (MPI_Allgather, MPI_Alltoall of
 *             packed blocks, MPI_Reduce_scatter_block, MPI_Allreduce; MPI_Sendrecv with the
 *             mirror rank for the cross-mesh case).
 * The breakdown of the allocating call: reshard = execute + alloc + rest (rest: plan-cache lookup,
 * argument checks, the fingerprint); targets: reshard / execute <= 1.2, Partial cases' execute
 * <= mpi. Then lm_local_map with one Shard tensor output against one scalar output (NO_AGREE,
 * target <= 1 us). Interleaved rounds: each round times BATCH calls of every variant in turn;
 * the result is the median over ROUNDS rounds of the max over ranks, in microseconds per call.
 * Prints one JSON object per line (rank 0).
 */
#include <localmap.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { ROUNDS = 15, BATCH = 200, N = 64, VARIANTS = 4 };
static int rank, np;

typedef struct {
  const char *name, *mpi_name;
  lm_placement_t src, dst;
  int mpi_kind; /* 0 allgather, 1 alltoall, 2 reduce_scatter_block, 3 allreduce, 4 sendrecv */
  lm_reshard_plan_t plan;
  lm_dist_tensor_t s, d;
  double *sbuf, *rbuf;
  int block; /* elements per rank block */
  lm_mesh_t dmesh; /* the target mesh (NULL: the source's) */
  int pad;         /* > 0: source and target are padded borrows of rows of N + pad */
  double *sarr, *darr;
} scase;

/* A padded borrow laid out as placement p of the [N, N] tensor: this rank's shard in rows of
 * N + pad elements; *arr holds it (free it after the tensor). */
static lm_dist_tensor_t padded_borrow(lm_mesh_t mesh, lm_placement_t p, int pad, double **arr) {
  int64_t g[2] = {N, N}, off = 0;
  static int64_t len[2], st[2];
  len[0] = len[1] = N;
  OK(lm_layout_chunk(N, np, rank, &off, &len[p.dim]));
  st[0] = len[1] + pad;
  st[1] = 1;
  *arr = calloc((size_t)(len[0] * st[0]) + 1, sizeof(double));
  DLTensor v = {*arr, LM_CPU, 2, LM_FLOAT64, len, st, 0};
  lm_dist_tensor_t t = NULL;
  OK(lm_dist_tensor_from_local(&t, mesh, &v, &p, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  return t;
}

static void run_variant(scase *c, int v) {
  for (int i = 0; i < BATCH; ++i) {
    if (v == 0) {
      OK(lm_reshard_plan_execute(c->plan, c->s, c->d));
    } else if (v == 1) {
      lm_dist_tensor_t o;
      OK(lm_dist_tensor_reshard(&o, c->s, c->dmesh, &c->dst));
      OK(lm_dist_tensor_destroy(&o));
    } else if (v == 2) {
      lm_dist_tensor_t o;
      OK(lm_reshard_plan_alloc_target(&o, c->plan, LM_CPU));
      OK(lm_dist_tensor_destroy(&o));
    } else if (c->mpi_kind == 0) {
      MPI_Allgather(c->sbuf, c->block, MPI_DOUBLE, c->rbuf, c->block, MPI_DOUBLE, MPI_COMM_WORLD);
    } else if (c->mpi_kind == 1) {
      MPI_Alltoall(c->sbuf, c->block / np, MPI_DOUBLE, c->rbuf, c->block / np, MPI_DOUBLE,
                   MPI_COMM_WORLD);
    } else if (c->mpi_kind == 2) {
      MPI_Reduce_scatter_block(c->sbuf, c->rbuf, c->block, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    } else if (c->mpi_kind == 3) {
      MPI_Allreduce(c->sbuf, c->rbuf, N * N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    } else { /* the shard to the rank holding it on the reversed mesh */
      MPI_Sendrecv(c->sbuf, c->block, MPI_DOUBLE, np - 1 - rank, 0, c->rbuf, c->block, MPI_DOUBLE,
                   np - 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof(double), bench_cmp);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* us per call of each variant: median over rounds of the max over ranks. */
static void time_case(scase *c, double *us) {
  double t[VARIANTS][ROUNDS];
  for (int v = 0; v < VARIANTS; ++v) run_variant(c, v); /* warm-up */
  for (int r = 0; r < ROUNDS; ++r)
    for (int v = 0; v < VARIANTS; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      run_variant(c, v);
      t[v][r] = (MPI_Wtime() - t0) * 1e6 / BATCH;
    }
  MPI_Allreduce(MPI_IN_PLACE, t, VARIANTS * ROUNDS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int v = 0; v < VARIANTS; ++v) us[v] = median(t[v], ROUNDS);
}

static void bench_reshards(lm_mesh_t mesh, lm_mesh_t reversed) {
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE, P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  scase cases[6] = {
      {"S0->R", "MPI_Allgather", S0, R, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL},
      {"S0->S1", "MPI_Alltoall", S0, S1, 1, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL},
      {"P->S0", "MPI_Reduce_scatter_block", P, S0, 2, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0,
       NULL, NULL},
      {"P->R", "MPI_Allreduce", P, R, 3, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL},
      {"S0->S0 cross-mesh", "MPI_Sendrecv", S0, S0, 4, NULL, NULL, NULL, NULL, NULL, 0, reversed,
       0, NULL, NULL},
      {"S0->S1 padded", "MPI_Alltoall", S0, S1, 1, NULL, NULL, NULL, NULL, NULL, 0, NULL, 8, NULL,
       NULL}};
  int64_t g[2] = {N, N};
  for (int k = 0; k < 6; ++k) {
    scase *c = &cases[k];
    lm_mesh_t to = c->dmesh ? c->dmesh : mesh;
    OK(lm_reshard_plan_create(&c->plan, mesh, &c->src, to, &c->dst, 2, g, LM_FLOAT64));
    if (c->pad) {
      c->s = padded_borrow(mesh, c->src, c->pad, &c->sarr);
      c->d = padded_borrow(mesh, c->dst, c->pad, &c->darr);
    } else {
      OK(lm_dist_tensor_zeros(&c->s, mesh, 2, g, LM_FLOAT64, LM_CPU, &c->src));
      OK(lm_reshard_plan_alloc_target(&c->d, c->plan, LM_CPU));
    }
    c->block = N * N / np; /* the MPI baselines move whole blocks (np divides 64) */
    c->sbuf = calloc(N * N, sizeof(double));
    c->rbuf = calloc(N * N, sizeof(double));
    for (int i = 0; i < N * N; ++i) c->sbuf[i] = 1.0; /* written: never the zero page */
    double us[VARIANTS];
    time_case(c, us);
    if (!rank)
      printf("{\"case\": \"small:%s\", \"np\": %d, \"bytes\": %d, \"execute_us\": %.2f, "
             "\"reshard_us\": %.2f, \"alloc_us\": %.2f, \"rest_us\": %.2f, \"mpi\": \"%s\", "
             "\"mpi_us\": %.2f, \"reshard_over_execute\": %.2f, \"target_reshard_over_execute\": "
             "1.2, \"execute_over_mpi\": %.2f%s}\n",
             c->name, np, N * N * 8, us[0], us[1], us[2], us[1] - us[0] - us[2], c->mpi_name,
             us[3], us[1] / us[0], us[0] / us[3],
             c->mpi_kind == 2 || c->mpi_kind == 3 ? ", \"target_execute_over_mpi\": 1.0" : "");
    OK(lm_reshard_plan_destroy(&c->plan));
    OK(lm_dist_tensor_destroy(&c->s));
    OK(lm_dist_tensor_destroy(&c->d));
    free(c->sarr);
    free(c->darr);
    free(c->sbuf);
    free(c->rbuf);
  }
}

/* ---------------------------------------------------------------- lm_local_map */
static double out_data[16];
static int64_t out_shape[1] = {16};
static void noop_deleter(DLManagedTensor *self) { (void)self; }
static DLManagedTensor out_mt = {
    {out_data, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, out_shape, NULL, 0}, NULL, noop_deleter};

static lm_status_t fn_scalar(void *ud, lm_mesh_t m, int nin, const lm_arg_t *in, int nout,
                             lm_arg_t *out) {
  (void)ud, (void)m, (void)nin, (void)in, (void)nout;
  out[0].kind = LM_ARG_INT64;
  out[0].i64 = 1;
  return LM_SUCCESS;
}
static lm_status_t fn_tensor(void *ud, lm_mesh_t m, int nin, const lm_arg_t *in, int nout,
                             lm_arg_t *out) {
  (void)ud, (void)m, (void)nin, (void)in, (void)nout;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = &out_mt;
  return LM_SUCCESS;
}

static void bench_local_map(lm_mesh_t mesh) {
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0);
  int64_t g[2] = {64, 8}, gs[1] = {16 * (int64_t)np};
  lm_dist_tensor_t t;
  OK(lm_dist_tensor_zeros(&t, mesh, 2, g, LM_FLOAT32, LM_CPU, &S0));
  lm_arg_t in[1] = {{0}};
  in[0].kind = LM_ARG_DIST_TENSOR;
  in[0].ptr = t;
  const lm_placement_t *none[1] = {NULL}, *sh[1] = {&S0};
  const int64_t *shapes[1] = {gs};
  double tm[2][ROUNDS];
  for (int r = 0; r < ROUNDS; ++r)
    for (int v = 0; v < 2; ++v) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < 10 * BATCH; ++i) {
        lm_arg_t out[1];
        OK(lm_local_map(v ? fn_tensor : fn_scalar, NULL, 1, in, NULL, 1, v ? sh : none,
                        v ? shapes : NULL, NULL, LM_LOCAL_MAP_NO_AGREE, out));
        if (out[0].kind == LM_ARG_DIST_TENSOR)
          OK(lm_dist_tensor_destroy((lm_dist_tensor_t *)&out[0].ptr));
      }
      tm[v][r] = (MPI_Wtime() - t0) * 1e6 / (10 * BATCH);
    }
  MPI_Allreduce(MPI_IN_PLACE, tm, 2 * ROUNDS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double scalar = median(tm[0], ROUNDS), tensor = median(tm[1], ROUNDS);
  if (!rank)
    printf("{\"case\": \"small:local_map tensor out\", \"np\": %d, \"tensor_out_us\": %.3f, "
           "\"scalar_out_us\": %.3f, \"wrap_us\": %.3f, \"target_us\": 1.0}\n",
           np, tensor, scalar, tensor - scalar);
  OK(lm_dist_tensor_destroy(&t));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (N % np != 0 || N * N / np % np != 0) {
    if (!rank) fprintf(stderr, "bench_small: np must divide 64 (got %d)\n", np);
    MPI_Finalize();
    return 0;
  }
  int wf;
  OK(lm_comm_world(&wf));
  lm_mesh_t mesh;
  int64_t ms[1] = {np};
  OK(lm_mesh_create(&mesh, wf, 1, ms, NULL));
  /* The world in reverse: a cross-mesh reshard S0 -> S0 moves every shard (but the middle). */
  int *rev = malloc(sizeof(int) * (size_t)np);
  for (int i = 0; i < np; ++i) rev[i] = np - 1 - i;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = rev;
  cfg.nranks = np;
  lm_mesh_t reversed;
  OK(lm_mesh_create(&reversed, wf, 1, ms, &cfg));
  free(rev);
  bench_reshards(mesh, reversed);
  bench_local_map(mesh);
  OK(lm_mesh_destroy(&reversed));
  OK(lm_mesh_destroy(&mesh));
  MPI_Finalize();
  return 0;
}
