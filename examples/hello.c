/* SPDX-License-Identifier: BSD-3-Clause */
#include <localmap.h>
#include <stdio.h>
#define CHECK(call) if ((call) != LM_SUCCESS) { fprintf(stderr, "%s\n", lm_last_error_message()); return 1; }

int main(int argc, char **argv) {
  int comm, rank, size;
  int64_t mshape[1], shape[1] = {10}, off, len;
  double full[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, back[10];
  DLTensor g = {full, LM_CPU, 1, LM_FLOAT64, shape, NULL, 0}, b = {back, LM_CPU, 1, LM_FLOAT64, shape, NULL, 0};
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  lm_mesh_t mesh;
  lm_dist_tensor_t x;
  CHECK(lm_init(&argc, &argv));
  CHECK(lm_comm_world(&comm));                              /* MPI_COMM_WORLD as an MPI_Fint */
  CHECK(lm_world_rank(&rank, &size));
  mshape[0] = size;
  CHECK(lm_mesh_create(&mesh, comm, 1, mshape, NULL));      /* a 1-D mesh of all ranks */
  CHECK(lm_dist_tensor_from_global(&x, mesh, &g, &s0, -1)); /* each rank keeps its chunk */
  CHECK(lm_dist_tensor_local_offset(x, &off, 1));
  CHECK(lm_dist_tensor_local_shape(x, &len, 1));
  CHECK(lm_dist_tensor_gather(x, 0, rank == 0 ? &b : NULL)); /* the full tensor on rank 0 */
  int wrong = 0;
  for (int i = 0; rank == 0 && i < 10; ++i) wrong += back[i] != full[i];
  printf("rank %d holds [%lld, %lld)%s\n", rank, (long long)off, (long long)(off + len),
         rank != 0 ? "" : wrong ? ", gathered WRONG data" : ", gathered all 10");
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
  CHECK(lm_finalize());
  return wrong ? 1 : 0;
}
