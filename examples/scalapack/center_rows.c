/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A ScaLAPACK program hands its block-cyclic matrix to localmap without a copy, reshards it to row
 * shards, centres every row with lm_local_map (a row needs all its columns: that is why it moves),
 * and gets the result back as a ScaLAPACK matrix (descriptor + local array) for pdlange.
 *
 * Needs libscalapack-openmpi-dev. Built by tests/script_scalapack.sh (examples/README.md has the
 * command), and from an installed localmap by share/doc/localmap/examples/Makefile, into scalapack/:
 *   lm-mpirun 4 scalapack/center_rows [M N MB NB]
 *
 * A(i, j) = i + 1000 j (0-based). After centring, B(i, j) = 1000 (j - (N - 1) / 2) in every row.
 */
#include <localmap.h>
#include <localmap_mpi.h>
#include <localmap_scalapack.h> /* the BLACS and descriptor prototypes, LM_SCALAPACK_DESC_* */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ScaLAPACK's norm (a Fortran symbol; Debian's libscalapack-openmpi). */
double pdlange_(const char *norm, const int *m, const int *n, const double *a, const int *ia,
                const int *ja, const int *desca, double *work);

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != LM_SUCCESS) {                                                       \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, lm_last_error_message());    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)

/* fn of lm_local_map: this rank's rows of the [N, M] tensor (a column-major M x N block of whole
 * rows: row i of the matrix is column i of the local [N, m] array) minus their means. */
static lm_status_t center(void *user, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                          lm_arg_t *out) {
  (void)user, (void)mesh, (void)nin, (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  const int64_t n = x->shape[0], m = x->shape[1];
  DLManagedTensor *y;
  lm_status_t s = lm_tensor_alloc(&y, 2, x->shape, x->dtype, LM_CPU);
  if (s != LM_SUCCESS) return s;
  const double *a = (const double *)x->data;
  double *b = (double *)y->dl_tensor.data;
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0;
    for (int64_t j = 0; j < n; ++j) mean += a[j * m + i];
    mean /= (double)(n ? n : 1);
    for (int64_t j = 0; j < n; ++j) b[j * m + i] = a[j * m + i] - mean;
  }
  out[0] = lm_arg_managed(y);
  return LM_SUCCESS;
}

int main(int argc, char **argv) {
  int M = argc > 4 ? atoi(argv[1]) : 37, N = argc > 4 ? atoi(argv[2]) : 23;
  int MB = argc > 4 ? atoi(argv[3]) : 4, NB = argc > 4 ? atoi(argv[4]) : 3;
  int rank, size, ctxt, nprow = 1, npcol, myrow, mycol, zero = 0, one = 1, info;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int f = 1; f * f <= size; ++f)
    if (size % f == 0) nprow = f;
  npcol = size / nprow;
  Cblacs_get(-1, 0, &ctxt); /* the BLACS grid, as a ScaLAPACK program makes it */
  Cblacs_gridinit(&ctxt, "Row", nprow, npcol);
  Cblacs_gridinfo(ctxt, &nprow, &npcol, &myrow, &mycol);

  /* The ScaLAPACK matrix: local array of LOCr x LOCc, column-major, with one leading dimension on
   * every process, as many programs choose it: the most local rows (process row 0's), so LLD >
   * LOCr where a process row holds fewer (the borrow then reads and writes padded rows). */
  const int locr = numroc_(&M, &MB, &myrow, &zero, &nprow);
  const int locc = numroc_(&N, &NB, &mycol, &zero, &npcol);
  const int most = numroc_(&M, &MB, &zero, &zero, &nprow);
  int lld = most > 1 ? most : 1, desc[LM_SCALAPACK_DLEN];
  descinit_(desc, &M, &N, &MB, &NB, &zero, &zero, &ctxt, &lld, &info);
  double *A = (double *)malloc(sizeof(double) * (size_t)(lld * (locc ? locc : 1)));
  for (int jl = 1; jl <= locc; ++jl)
    for (int il = 1; il <= locr; ++il) {
      const int gi = indxl2g_(&il, &MB, &myrow, &zero, &nprow) - 1;
      const int gj = indxl2g_(&jl, &NB, &mycol, &zero, &npcol) - 1;
      A[(il - 1) + (jl - 1) * lld] = gi + 1000.0 * gj;
    }

  /* 1. The mesh is the BLACS grid; the tensor borrows A (no copy). */
  lm_mesh_t grid;
  lm_dist_tensor_t x, rows, y, yb;
  CHECK(lm_mesh_create_grid_mpi(&grid, MPI_COMM_WORLD, myrow, mycol, NULL));
  CHECK(lm_dist_tensor_from_scalapack(&x, grid, desc, A, LM_FLOAT64, LM_CPU,
                                      LM_FROM_LOCAL_BORROW));
  DLTensor view;
  CHECK(lm_dist_tensor_local(x, &view));
  const int borrowed = view.data == (void *)A;

  /* 2. Row shards: the matrix rows (tensor dim 1) split over the process rows, whole rows. */
  lm_placement_t bc[2], by_rows[2] = {LM_PLACEMENT_SHARD(1), LM_PLACEMENT_REPLICATE};
  CHECK(lm_dist_tensor_placements(x, bc, 2));
  CHECK(lm_dist_tensor_reshard(&rows, x, NULL, by_rows));

  /* 3. lm_local_map: centre each row; the output keeps the row layout. */
  lm_arg_t args[1] = {lm_arg_dist(rows)}, outs[1];
  const lm_placement_t *out_pl[1] = {by_rows};
  CHECK(lm_local_map(center, NULL, 1, args, NULL, 1, out_pl, NULL, NULL, 0, outs));
  y = (lm_dist_tensor_t)outs[0].ptr;

  /* 4. Back to the block-cyclic layout, handed to ScaLAPACK as a descriptor + local array. */
  CHECK(lm_dist_tensor_reshard(&yb, y, NULL, bc));
  int descb[LM_SCALAPACK_DLEN];
  CHECK(lm_dist_tensor_to_scalapack(yb, ctxt, descb));
  DLTensor b;
  CHECK(lm_dist_tensor_local(yb, &b));
  double fro = pdlange_("F", &M, &N, (const double *)b.data, &one, &one, descb, NULL);
  double want = 0;
  for (int j = 0; j < N; ++j) want += M * pow(1000.0 * (j - (N - 1) / 2.0), 2);
  want = sqrt(want);

  /* Every local element of B against its formula; A untouched. */
  long bad = 0;
  const double *B = (const double *)b.data;
  for (int jl = 1; jl <= locc; ++jl)
    for (int il = 1; il <= locr; ++il) {
      const int gi = indxl2g_(&il, &MB, &myrow, &zero, &nprow) - 1;
      const int gj = indxl2g_(&jl, &NB, &mycol, &zero, &npcol) - 1;
      bad += fabs(B[(il - 1) + (jl - 1) * descb[LM_SCALAPACK_DESC_LLD]] - 1000.0 * (gj - (N - 1) / 2.0)) > 1e-6;
      bad += A[(il - 1) + (jl - 1) * lld] != gi + 1000.0 * gj;
    }
  for (int i = 0; i < LM_SCALAPACK_DLEN; ++i) bad += i != LM_SCALAPACK_DESC_LLD && descb[i] != desc[i];
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  int all_borrowed = borrowed;
  MPI_Allreduce(&borrowed, &all_borrowed, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  const int ok = !bad && all_borrowed && fabs(fro - want) <= 1e-9 * want;
  if (rank == 0)
    printf("center_rows: %d x %d (blocks %d x %d) on a %d x %d BLACS grid: %s, rows centred, "
           "pdlange ||B||_F = %.6e (expected %.6e), %ld wrong elements: %s\n",
           M, N, MB, NB, nprow, npcol, all_borrowed ? "borrowed without a copy" : "COPIED", fro,
           want, bad, ok ? "OK" : "FAILED");
  lm_dist_tensor_destroy(&yb);
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&rows);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&grid);
  free(A);
  Cblacs_gridexit(ctxt);
  MPI_Finalize();
  return ok ? 0 : 1;
}
