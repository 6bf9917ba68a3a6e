/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file localmap_scalapack.h
 * @brief What a C program needs to hand a ScaLAPACK matrix to localmap and back: the entries of
 * an array descriptor by name, and the C prototypes of the BLACS grid calls and of ScaLAPACK's
 * descriptor tools (NUMROC, INDXL2G, DESCINIT), which ScaLAPACK itself ships no C header for.
 *
 * Only declarations: localmap does not link ScaLAPACK. A program that calls these functions links
 * its ScaLAPACK (Debian: `pkg-config --libs scalapack-openmpi`, whose library also holds the
 * BLACS); one that only reads descriptors by name (LM_SCALAPACK_DESC_*) needs nothing more. The
 * prototypes follow the reference BLACS and ScaLAPACK with the default 32-bit integers (LP64),
 * and agree with those of Intel MKL's mkl_blacs.h and mkl_scalapack.h for LP64.
 *
 * The BLACS grid is the 2-D mesh of lm_mesh_create_grid (lm_mesh_create_grid_mpi of
 * localmap_mpi.h): every process of the grid passes the (myrow, mycol) that Cblacs_gridinfo
 * returns, so that mesh coordinate (r, c) is grid process (r, c) whatever the grid's order
 * ("Row" or "Col"), and lm_dist_tensor_from_scalapack and lm_dist_tensor_to_scalapack read and
 * write descriptors over that mesh:
 * @code
 * int ctxt, nprow, npcol, myrow, mycol, desc[LM_SCALAPACK_DLEN], info, zero = 0;
 * Cblacs_get(-1, 0, &ctxt);
 * Cblacs_gridinit(&ctxt, "Row", 2, 2);
 * Cblacs_gridinfo(ctxt, &nprow, &npcol, &myrow, &mycol);
 * int locr = numroc_(&m, &mb, &myrow, &zero, &nprow), lld = locr > 1 ? locr : 1;
 * descinit_(desc, &m, &n, &mb, &nb, &zero, &zero, &ctxt, &lld, &info);
 * lm_mesh_create_grid_mpi(&grid, MPI_COMM_WORLD, myrow, mycol, NULL);
 * lm_dist_tensor_from_scalapack(&x, grid, desc, a, LM_FLOAT64, LM_CPU, LM_FROM_LOCAL_BORROW);
 * @endcode
 * (examples/scalapack/center_rows.c, installed under share/doc/localmap/examples/scalapack, is
 * the whole program.) Fortran programs call blacs_gridinfo and the rest directly.
 */
#ifndef LOCALMAP_SCALAPACK_H_
#define LOCALMAP_SCALAPACK_H_

#include "localmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The entries of a ScaLAPACK array descriptor (LM_SCALAPACK_DLEN ints), as 0-based C indices:
 * `desc[LM_SCALAPACK_DESC_LLD]` is what Fortran calls `DESC(LLD_)`. */
typedef enum lm_scalapack_desc_entry_t {
  LM_SCALAPACK_DESC_DTYPE = 0, /**< DTYPE_: the descriptor type, 1 for a dense matrix */
  LM_SCALAPACK_DESC_CTXT = 1,  /**< CTXT_: the BLACS context of the grid */
  LM_SCALAPACK_DESC_M = 2,     /**< M_: the rows of the global matrix */
  LM_SCALAPACK_DESC_N = 3,     /**< N_: the columns of the global matrix */
  LM_SCALAPACK_DESC_MB = 4,    /**< MB_: the rows of a block */
  LM_SCALAPACK_DESC_NB = 5,    /**< NB_: the columns of a block */
  LM_SCALAPACK_DESC_RSRC = 6,  /**< RSRC_: the process row of the first row block */
  LM_SCALAPACK_DESC_CSRC = 7,  /**< CSRC_: the process column of the first column block */
  LM_SCALAPACK_DESC_LLD = 8    /**< LLD_: the leading dimension of the local array (>= LOCr) */
} lm_scalapack_desc_entry_t;

/* BLACS (C interface). */
/** Cblacs_pinfo: this process's BLACS number and the number of processes. */
void Cblacs_pinfo(int *mypnum, int *nprocs);
/** Cblacs_get: a BLACS value; `Cblacs_get(-1, 0, &ctxt)` gives the system context to pass to
 * Cblacs_gridinit (it is MPI_COMM_WORLD's). */
void Cblacs_get(int ctxt, int what, int *val);
/** Cblacs_gridinit: makes *ctxt (a system context on entry) a grid of nprow x npcol processes,
 * numbered in `order`: "Row" (row-major) or "Col" (column-major). */
void Cblacs_gridinit(int *ctxt, const char *order, int nprow, int npcol);
/** Cblacs_gridinfo: the grid's shape and this process's coordinate in it (-1 outside the grid):
 * the (myrow, mycol) to pass to lm_mesh_create_grid. */
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
/** Cblacs_gridexit: frees the grid of ctxt. */
void Cblacs_gridexit(int ctxt);
/** Cblacs_exit: frees the BLACS; `notdone` != 0 leaves MPI running (needed when the program calls
 * MPI or localmap afterwards, or finalizes MPI itself). */
void Cblacs_exit(int notdone);

/* ScaLAPACK's descriptor tools (Fortran functions: every argument by address). */
/** NUMROC: the rows (or columns) of an n-long dimension, in blocks of nb dealt round-robin over
 * nprocs processes from isrcproc, that process iproc holds: LOCr(M_) or LOCc(N_). */
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc, const int *nprocs);
/** INDXL2G: the 1-based global index of the 1-based local index indxloc of process iproc (blocks
 * of nb over nprocs processes from isrcproc). */
int indxl2g_(const int *indxloc, const int *nb, const int *iproc, const int *isrcproc,
             const int *nprocs);
/** DESCINIT: fills desc (LM_SCALAPACK_DLEN ints) for an m x n matrix in mb x nb blocks from
 * process (irsrc, icsrc) of the grid ictxt, with local leading dimension lld; *info = 0 on
 * success, -i when argument i is wrong. */
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb,
               const int *irsrc, const int *icsrc, const int *ictxt, const int *lld, int *info);

#ifdef __cplusplus
}
#endif

#endif /* LOCALMAP_SCALAPACK_H_ */
