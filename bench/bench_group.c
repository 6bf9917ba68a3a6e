/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_group: 64 tensors resharded at once (issue 22, section 1). Two mixes of 1-D tensors,
 * f32 and bf16 alternating: "small" (4 KiB to 64 KiB each, 1.4 MiB in all: latency-bound) and
 * "block" (a transformer block's parameters and norms, 4 KiB to 16 MiB, 51 MiB in all). For S0 -> R and P(sum) -> S0,
 * three ways, timed in interleaved rounds (median over rounds of the max over ranks):
 *   group  lm_reshard_group_execute of the 64 entries (one plan, created once);
 *   each   lm_reshard_plan_execute of 64 persistent plans, one after the other;
 *   mpi    the same bytes in one hand-written collective on buffers already packed the way the
 *          collective wants them (MPI_Allgatherv of MPI_BYTE; MPI_Reduce_scatter of MPI_FLOAT
 *          over the same bytes, bf16 counted as half a float): the floor a user's own packing
 *          code could reach, without its packing and unpacking.
 *   copy   one memcpy of the bytes each rank's outputs hold, from a buffer of its own, every rank
 *          at once until the last is done: the floor of any implementation on one node (each /
 *          copy bounds each / group from above).
 * Targets: group within 1.1x of mpi; each at least 3x group for the small mix.
 * One JSON line per (mix, case); run by bench/run.sh at np 2 and 4. `--mix small` (or block): one mix.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localmap.h"
#include "bench_util.h"

enum { N = 64, ROUNDS = 9, INNER = 3 };

static int rank, size;


/* Chunk j of n elements over size ranks (torch.chunk): ceil-sized blocks. */
static int64_t chunk_len(int64_t n, int j) {
  int64_t c = (n + size - 1) / size, lo = c * j;
  return lo >= n ? 0 : (n - lo < c ? n - lo : c);
}

typedef struct {
  const char *mix, *name;
  int64_t n[N];          /* elements of each tensor */
  DLDataType dt[N];
  lm_placement_t src, dst;
  lm_mesh_t mesh;
  lm_dist_tensor_t x[N], y[N];
  lm_reshard_plan_t plan[N];
  lm_reshard_group_t group;
  char *mbuf, *mout;     /* the MPI baseline's buffers */
  char *cin, *cout;      /* the copy floor's: the bytes this rank's outputs hold */
  size_t cbytes;
  int *counts, *displs;
  int64_t total_bytes;
} bench_t;

static void run_group(bench_t *b) { OK(lm_reshard_group_execute(b->group, N, b->x, b->y)); }
static void run_each(bench_t *b) {
  for (int i = 0; i < N; ++i) OK(lm_reshard_plan_execute(b->plan[i], b->x[i], b->y[i]));
}
/* The floor on one node: every byte of every rank's outputs written once, by one memcpy from a
 * buffer of its own, all ranks at once (what any implementation does at least; per-tensor
 * executions copy the same bytes, so each / group is at most each / copy). It ends when every
 * rank has copied: with more ranks than cores (np 4 here) the copies share the cores, as the
 * implementations' do, and one rank's own copy time would understate the floor. */
static void run_copy(bench_t *b) {
  memcpy(b->cout, b->cin, b->cbytes);
  MPI_Barrier(MPI_COMM_WORLD);
}
static void run_mpi(bench_t *b) {
  if (b->src.kind == LM_SHARD)
    MPI_Allgatherv(b->mbuf, b->counts[rank], MPI_BYTE, b->mout, b->counts, b->displs, MPI_BYTE,
                   MPI_COMM_WORLD);
  else
    MPI_Reduce_scatter(b->mbuf, b->mout, b->counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* INNER executions of fn, after one untimed: every variant is timed warm, whichever ran before it
 * (the block mix's 50 MiB fit this VM's L3: a variant that follows one sharing its tensors would
 * otherwise find them cached, one that follows the baselines would not). */
static double once(void (*fn)(bench_t *), bench_t *b) {
  fn(b);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int k = 0; k < INNER; ++k) fn(b);
  double t = (MPI_Wtime() - t0) * 1e3 / INNER, m = 0;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static void setup(bench_t *b) {
  lm_reshard_entry_t e[N];
  int64_t shapes[N][1];
  int64_t per_rank[8] = {0};
  b->total_bytes = 0;
  for (int i = 0; i < N; ++i) {
    shapes[i][0] = b->n[i];
    e[i] = (lm_reshard_entry_t){1, shapes[i], b->dt[i], &b->src, &b->dst};
    OK(lm_dist_tensor_zeros(&b->x[i], b->mesh, 1, shapes[i], b->dt[i], LM_CPU, &b->src));
    OK(lm_reshard_plan_create(&b->plan[i], b->mesh, &b->src, NULL, &b->dst, 1, shapes[i], b->dt[i]));
    OK(lm_reshard_plan_alloc_target(&b->y[i], b->plan[i], LM_CPU));
    const int64_t es = b->dt[i].bits / 8;
    b->total_bytes += b->n[i] * es;
    for (int j = 0; j < size; ++j) per_rank[j] += chunk_len(b->n[i], j) * es;
  }
  OK(lm_reshard_group_create(&b->group, b->mesh, NULL, N, e, NULL));
  b->counts = calloc((size_t)size, sizeof(int));
  b->displs = calloc((size_t)size, sizeof(int));
  int64_t off = 0;
  for (int j = 0; j < size; ++j) {
    /* Allgatherv: bytes; Reduce_scatter: floats (bytes / 4, rounded up) */
    b->counts[j] = (int)(b->src.kind == LM_SHARD ? per_rank[j] : (per_rank[j] + 3) / 4);
    b->displs[j] = (int)off;
    off += b->counts[j];
  }
  const size_t el = b->src.kind == LM_SHARD ? 1 : 4;
  const size_t in = (size_t)(b->src.kind == LM_SHARD ? b->counts[rank] : off) * el + 64,
               out = (size_t)(b->src.kind == LM_SHARD ? off : b->counts[rank]) * el + 64;
  b->mbuf = malloc(in);
  b->mout = malloc(out);
  /* Written, as the library's tensors are (lm_dist_tensor_zeros): a calloc'd buffer never written
   * maps the kernel's zero page, whose reads hit one cached page (2.8x memcpy's speed here). */
  for (size_t i = 0; i + 4 <= in; i += 4) memcpy(b->mbuf + i, &(float){1.0f}, 4);
  memset(b->mout, 0, out);
  b->cbytes = (size_t)(b->src.kind == LM_SHARD ? off : b->counts[rank] * 4);
  b->cin = malloc(b->cbytes + 64);
  b->cout = malloc(b->cbytes + 64);
  memset(b->cin, 1, b->cbytes + 64);
  memset(b->cout, 0, b->cbytes + 64);
}

static void teardown(bench_t *b) {
  for (int i = 0; i < N; ++i) {
    lm_dist_tensor_destroy(&b->x[i]);
    lm_dist_tensor_destroy(&b->y[i]);
    lm_reshard_plan_destroy(&b->plan[i]);
  }
  lm_reshard_group_destroy(&b->group);
  free(b->mbuf);
  free(b->mout);
  free(b->cin);
  free(b->cout);
  free(b->counts);
  free(b->displs);
}

static void measure(bench_t *b) {
  setup(b);
  double t[4][ROUNDS];
  void (*fns[4])(bench_t *) = {run_group, run_each, run_mpi, run_copy};
  for (int v = 0; v < 4; ++v) fns[v](b); /* warm: pools, transports, MPI's connections */
  for (int r = 0; r < ROUNDS; ++r) /* interleaved, each variant first in turn */
    for (int k = 0; k < 4; ++k) {
      const int v = (r + k) % 4;
      t[v][r] = once(fns[v], b);
    }
  for (int v = 0; v < 4; ++v) qsort(t[v], ROUNDS, sizeof(double), bench_cmp);
  const double g = t[0][ROUNDS / 2], e = t[1][ROUNDS / 2], m = t[2][ROUNDS / 2],
               c = t[3][ROUNDS / 2];
  int buckets = 0;
  OK(lm_reshard_group_size(b->group, NULL, &buckets));
  if (rank == 0)
    printf("{\"bench\": \"group\", \"mix\": \"%s\", \"case\": \"%s\", \"np\": %d, \"tensors\": %d, "
           "\"bytes\": %lld, \"buckets\": %d, \"group_ms\": %.4f, \"each_ms\": %.4f, "
           "\"mpi_ms\": %.4f, \"copy_ms\": %.4f, \"group_over_mpi\": %.2f, "
           "\"each_over_group\": %.2f, \"each_over_copy\": %.2f}\n",
           b->mix, b->name, size, N, (long long)b->total_bytes, buckets, g, e, m, c, g / m, e / g,
           e / c);
  fflush(stdout);
  teardown(b);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 8) {
    if (rank == 0) fprintf(stderr, "bench_group: at most 8 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  lm_mesh_t mesh = NULL;
  int64_t shape[1] = {size};
  OK(lm_mesh_create(&mesh, (int)MPI_Comm_c2f(MPI_COMM_WORLD), 1, shape, NULL));
  /* small: 4, 8, 16, 64 KiB repeating; block: per 8 tensors 2 x 4 KiB (norms), 16 and 64 KiB
   * (biases), 256 KiB, 1 MiB, 2 MiB and 1 MiB (projections), the last one 16 MiB (an MLP). */
  static const int64_t small_kib[4] = {4, 8, 16, 64};
  static const int64_t block_kib[8] = {4, 4, 16, 64, 256, 1024, 2048, 1024};
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE,
                       psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  const char *mixes[2] = {"small", "block"};
  const char *only = argc > 2 && strcmp(argv[1], "--mix") == 0 ? argv[2] : NULL; /* one mix */
  for (int mx = 0; mx < 2; ++mx)
    for (int c = 0; c < 2 && (!only || strcmp(only, mixes[mx]) == 0); ++c) {
      bench_t b;
      memset(&b, 0, sizeof b);
      b.mix = mixes[mx];
      b.name = c == 0 ? "S0->R" : "P(sum)->S0";
      b.src = c == 0 ? s0 : psum;
      b.dst = c == 0 ? rep : s0;
      b.mesh = mesh;
      for (int i = 0; i < N; ++i) {
        b.dt[i] = i % 2 ? LM_BFLOAT16 : LM_FLOAT32;
        const int64_t kib = mx == 0 ? small_kib[i % 4] : i == N - 1 ? 16384 : block_kib[i % 8];
        b.n[i] = kib * 1024 / (b.dt[i].bits / 8);
      }
      measure(&b);
    }
  OK(lm_mesh_destroy(&mesh));
  MPI_Finalize();
  return 0;
}
