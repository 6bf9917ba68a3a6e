/* SPDX-License-Identifier: BSD-3-Clause */
/* Ragged shards: a tensor whose rows are split unevenly, with lengths the program chooses
 * (LM_RAGGED placements; PETSc's ownership ranges, numpy.array_split, load balancing), not
 * torch.chunk's. Rank r holds r + 2 rows, except rank 1, which holds none when np >= 3 (empty
 * shards are allowed): np 4 gives 2, 0, 4, 5 rows where Shard(0) of 11 rows is 3, 3, 3, 2.
 * The 11 x 3 float64 tensor x[i][j] = 100 i + j is built from each rank's own rows, then resharded
 *   ragged -> Shard(0) -> ragged   and   ragged -> Replicate -> ragged,
 * and every element of every shard is checked against that formula, at the rows this program
 * computes itself (the extents for ragged, torch.chunk's ceil(n / np) blocks for Shard(0)).
 *
 *   make examples && tools/lm-mpirun 4 build/examples/ragged      # np 1, 2, 3, 4 in make check
 */
#include <localmap.h>
#include <stdio.h>
#include <stdlib.h>
#define CHECK(call) if ((call) != LM_SUCCESS) { fprintf(stderr, "%s\n", lm_last_error_message()); return 1; }
#define M 3 /* columns */

static double value(int64_t i, int64_t j) { return 100.0 * i + j; }

/* Counts the elements of x's shard that differ from value(), and a shard that does not hold
 * rows [row0, row0 + rows) of all M columns. */
static int wrong_elements(lm_dist_tensor_t x, int64_t row0, int64_t rows) {
  int64_t off[2], shape[2];
  DLTensor v;
  if (lm_dist_tensor_local_offset(x, off, 2) || lm_dist_tensor_local_shape(x, shape, 2) ||
      lm_dist_tensor_local(x, &v))
    return 1;
  if (off[0] != row0 || shape[0] != rows || off[1] != 0 || shape[1] != M) return 1;
  const double *a = v.data;
  int wrong = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int j = 0; j < M; ++j) wrong += a[i * M + j] != value(row0 + i, j);
  return wrong;
}

int main(int argc, char **argv) {
  int comm, rank, np;
  CHECK(lm_init(&argc, &argv));
  CHECK(lm_comm_world(&comm));
  CHECK(lm_world_rank(&rank, &np));
  int64_t mshape[1] = {np};
  lm_mesh_t mesh;
  CHECK(lm_mesh_create(&mesh, comm, 1, mshape, NULL));

  /* The extents: one length per rank; rows of rank r start at the sum of the lengths before it. */
  int64_t *len = malloc(sizeof *len * np), n = 0, start = 0;
  for (int r = 0; r < np; ++r) {
    len[r] = (np >= 3 && r == 1) ? 0 : r + 2;
    if (r < rank) start += len[r];
    n += len[r];
  }
  int32_t id;
  CHECK(lm_extents_create(&id, len, np));
  lm_placement_t ragged = LM_PLACEMENT_RAGGED(0, id), s0 = LM_PLACEMENT_SHARD(0),
                 rep = LM_PLACEMENT_REPLICATE;

  /* x from this rank's rows (copied: the tensor owns its storage). */
  int64_t gshape[2] = {n, M}, lshape[2] = {len[rank], M};
  double *mine = malloc(sizeof *mine * (len[rank] * M + 1));
  for (int64_t i = 0; i < len[rank]; ++i)
    for (int j = 0; j < M; ++j) mine[i * M + j] = value(start + i, j);
  DLTensor local = {mine, LM_CPU, 2, LM_FLOAT64, lshape, NULL, 0};
  lm_dist_tensor_t x, even, rep_x, back1, back2;
  CHECK(lm_dist_tensor_from_local(&x, mesh, &local, &ragged, LM_SHAPE_GIVEN, gshape, LM_FROM_LOCAL_COPY));

  /* Shard(0): torch.chunk's blocks of b = ceil(n / np) rows, the last ones short or empty. */
  int64_t b = (n + np - 1) / np;
  int64_t s0_start = rank * b < n ? rank * b : n, s0_end = (rank + 1) * b < n ? (rank + 1) * b : n;
  CHECK(lm_dist_tensor_reshard(&even, x, NULL, &s0));
  CHECK(lm_dist_tensor_reshard(&back1, even, NULL, &ragged));
  CHECK(lm_dist_tensor_reshard(&rep_x, x, NULL, &rep));
  CHECK(lm_dist_tensor_reshard(&back2, rep_x, NULL, &ragged));

  int wrong = wrong_elements(x, start, len[rank]) + wrong_elements(even, s0_start, s0_end - s0_start) +
              wrong_elements(back1, start, len[rank]) + wrong_elements(rep_x, 0, n) +
              wrong_elements(back2, start, len[rank]);
  printf("rank %d: ragged rows [%lld, %lld) -> Shard(0) rows [%lld, %lld) -> ragged; "
         "-> Replicate (%lld rows) -> ragged: %s\n",
         rank, (long long)start, (long long)(start + len[rank]), (long long)s0_start,
         (long long)s0_end, (long long)n, wrong ? "FAIL" : "PASS");

  lm_dist_tensor_destroy(&back2);
  lm_dist_tensor_destroy(&rep_x);
  lm_dist_tensor_destroy(&back1);
  lm_dist_tensor_destroy(&even);
  lm_dist_tensor_destroy(&x);
  CHECK(lm_extents_destroy(id));   /* the id stays valid while a tensor made with it lives */
  lm_mesh_destroy(&mesh);
  free(mine);
  free(len);
  CHECK(lm_finalize());
  return wrong ? 1 : 0;
}
