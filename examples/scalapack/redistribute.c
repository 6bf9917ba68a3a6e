/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * redistribute: a plain ScaLAPACK program (no localmap call, no localmap header) that moves a
 * submatrix between two BLACS grids with pdgemr2d_ and checks every element it receives. Built
 * against ScaLAPACK alone it runs Debian's pdgemr2d; with liblocalmap_scalapack preloaded or
 * linked first, the same binary runs localmap's (docs/SCALAPACK.md):
 *
 *   mpicc redistribute.c $(pkg-config --libs scalapack-openmpi) -o redistribute
 *   mpirun -np 4 ./redistribute                                   # ScaLAPACK's pdgemr2d
 *   LM_SCALAPACK_LOG=1 LD_PRELOAD=liblocalmap_scalapack.so mpirun -np 4 ./redistribute
 *
 * A 1000 x 700 matrix in 32 x 32 blocks on a 1 x P grid ("Row"), its window A(33:832, 65:664)
 * into B(1:800, 1:600) of an 800 x 600 matrix in 50 x 20 blocks on a P x 1 grid ("Col"), with
 * LLD one more than needed. Prints "redistribute: OK (np P)" on rank 0 when every element of B
 * holds its A value.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

void Cblacs_pinfo(int *mypnum, int *nprocs);
void Cblacs_get(int ctxt, int what, int *val);
void Cblacs_gridinit(int *ctxt, const char *order, int nprow, int npcol);
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int ctxt);
void Cblacs_exit(int notdone);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrc, const int *nprocs);
int indxl2g_(const int *indxloc, const int *nb, const int *iproc, const int *isrc, const int *np);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb,
               const int *irsrc, const int *icsrc, const int *ictxt, const int *lld, int *info);
void pdgemr2d_(int *m, int *n, double *a, int *ia, int *ja, int *desca, double *b, int *ib,
               int *jb, int *descb, int *ictxt);

/* The local array of an m x n matrix in mb x nb blocks on grid ctxt, filled by value(i, j). */
static double *matrix(int *desc, int ctxt, int m, int n, int mb, int nb, int fill, int *locr,
                      int *locc) {
  int nprow, npcol, myrow, mycol, zero = 0, info;
  Cblacs_gridinfo(ctxt, &nprow, &npcol, &myrow, &mycol);
  *locr = numroc_(&m, &mb, &myrow, &zero, &nprow);
  *locc = numroc_(&n, &nb, &mycol, &zero, &npcol);
  int lld = *locr + 1;
  descinit_(desc, &m, &n, &mb, &nb, &zero, &zero, &ctxt, &lld, &info);
  double *a = calloc((size_t)lld * (size_t)(*locc > 0 ? *locc : 1), sizeof(double));
  for (int c = 1; fill && c <= *locc; ++c)
    for (int r = 1; r <= *locr; ++r) {
      int gi = indxl2g_(&r, &mb, &myrow, &zero, &nprow), gj = indxl2g_(&c, &nb, &mycol, &zero, &npcol);
      a[(r - 1) + (size_t)(c - 1) * lld] = gi + 1e-4 * gj;
    }
  return a;
}

int main(void) {
  int me, np, row, col, da[9], db[9], ar, ac, br, bc, bad = 0, all;
  Cblacs_pinfo(&me, &np);
  Cblacs_get(-1, 0, &row);
  Cblacs_gridinit(&row, "Row", 1, np);
  Cblacs_get(-1, 0, &col);
  Cblacs_gridinit(&col, "Col", np, 1);
  double *a = matrix(da, row, 1000, 700, 32, 32, 1, &ar, &ac);
  double *b = matrix(db, col, 800, 600, 50, 20, 0, &br, &bc);
  int m = 800, n = 600, ia = 33, ja = 65, one = 1;
  pdgemr2d_(&m, &n, a, &ia, &ja, da, b, &one, &one, db, &row);
  int nprow, npcol, myrow, mycol, zero = 0, mb = 50, nb = 20;
  Cblacs_gridinfo(col, &nprow, &npcol, &myrow, &mycol);
  for (int c = 1; c <= bc; ++c)
    for (int r = 1; r <= br; ++r) {
      int gi = indxl2g_(&r, &mb, &myrow, &zero, &nprow), gj = indxl2g_(&c, &nb, &mycol, &zero, &npcol);
      bad += b[(r - 1) + (size_t)(c - 1) * db[8]] != (gi + ia - 1) + 1e-4 * (gj + ja - 1);
    }
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) printf("redistribute: %s (np %d, %d wrong elements)\n", all ? "FAIL" : "OK", np, all);
  free(a), free(b);
  Cblacs_gridexit(row);
  Cblacs_gridexit(col);
  Cblacs_exit(0);
  return all != 0;
}
