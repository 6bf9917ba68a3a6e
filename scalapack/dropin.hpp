// SPDX-License-Identifier: BSD-3-Clause
// liblocalmap_scalapack: ScaLAPACK's redistribution routines (p?gemr2d_) served by localmap.
// Internal header of the drop-in (scalapack/): the BLACS seam, the descriptor exchange over the
// union context, the mesh cache, the fallback to the reference routine and the log.
#ifndef LOCALMAP_SCALAPACK_DROPIN_HPP_
#define LOCALMAP_SCALAPACK_DROPIN_HPP_

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "localmap.h"

namespace lmsp {

// Descriptor entries (0-based), as localmap_scalapack.h names them.
enum { DTYPE = 0, CTXT = 1, M_ = 2, N_ = 3, MB = 4, NB = 5, RSRC = 6, CSRC = 7, LLD = 8, DLEN = 9 };

// One element type of the p?... family.
struct Type {
  char letter;      // 's', 'd', 'c', 'z', 'i'
  DLDataType dtype;
  size_t size;      // bytes per element
};
const Type &type_of(char letter);

// The BLACS and PXERBLA, looked up at run time in whatever the program linked (the drop-in
// links no ScaLAPACK): BLACS contexts belong to the program's BLACS.
bool blacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
int blacs_pnum(int ctxt, int prow, int pcol);
// Reports argument `info` (its position, or 100 * position + descriptor entry) of routine
// `name` ("PDGEMR2D") as ScaLAPACK does: PXERBLA(ICTXT, NAME, INFO).
void report(int ictxt, const char *name, int info);

// NUMROC: the part of an n-long dimension in blocks of nb that process iproc of nprocs holds.
int numroc(int n, int nb, int iproc, int isrc, int nprocs);

// A descriptor of type 1 (9 entries) or 2 (PBLAS's 11 entries, with IMB/INB) as a type-1
// descriptor of a matrix with drow = MB - IMB rows and dcol = NB - INB columns in front that no
// process stores (so its first blocks are the short ones). A type 2 with IMB > MB or INB > NB,
// or another type, keeps its DTYPE, which the checks then refuse.
struct Norm {
  int desc[DLEN] = {0};
  int drow = 0, dcol = 0;
};
Norm normalize(const int *desc);

// One process grid as every process of the union context sees it after the exchange.
struct Grid {
  bool valid = false;         // some process of the union is in the grid
  int nprow = 0, npcol = 0;
  int desc[DLEN] = {0};       // the descriptor of a member (processes outside pass CTXT -1)
  std::vector<int> ranks;     // union-communicator rank of grid process (r, c), row-major
  int myrow = -1, mycol = -1; // this process in the grid, -1 outside
  bool short_lld = false;     // some member's LLD is below max(1, LOCr)
  int drow = 0, dcol = 0;     // the unstored rows and columns in front (Norm)
  int lld = 0;                // this process's LLD (0 outside the grid)
};

// What one call agreed on: the union communicator and both grids.
struct Call {
  MPI_Comm comm = MPI_COMM_NULL;
  Grid a, b;
  bool overlap = false;  // some process's A and B local arrays share memory
};

// Builds (or finds) the communicator of the processes of context ictxt and exchanges both
// descriptors over it; false when ictxt is not a grid this process belongs to.
bool exchange(Call *call, int ictxt, const Norm &desca, const void *a, size_t abytes,
              const Norm &descb, const void *b, size_t bbytes);
// The local array span of a descriptor on this process, in elements (0 outside its grid).
size_t local_span(const Norm &desc, int elem_size);
// The rows of a matrix that process (myrow of nprow) stores (LOCr), and its columns (LOCc).
int local_rows(const Norm &d, int myrow, int nprow);
int local_cols(const Norm &d, int mycol, int npcol);

// A window (i, j, m, n) of grid g's matrix on this process: its block-cyclic placements over the
// grid's mesh, its local shape [cols, rows] and the element offset of its first local element.
struct Window {
  lm_placement_t pl[2];
  int64_t global[2];  // {n, m}
  int64_t shape[2];   // {local cols, local rows}; {0, 0} outside the grid
  size_t offset;
  int sr, sc;         // the grid row and column of the window's first block
};
Window window_layout(const Grid &g, int i, int j, int m, int n);
// The window as a tensor over mesh borrowing `data` (the local array, leading dimension lld; or
// a compact [cols, rows] buffer when lld is 0).
lm_status_t window_tensor(lm_dist_tensor_t *out, lm_mesh_t mesh, const Grid &g, const Window &w,
                          void *data, int lld, const Type &t);
// ScaLAPACK's check of grid g's descriptor (argument position pd) and its window (i at position
// pi, j at pj; m x n): 0, or the failing position (a descriptor entry as 100 * pd + entry,
// entries counted from 1 in the type-1 layout).
int check_window(const Grid &g, int pi, int pj, int pd, int i, int j, int m, int n);
// The window-relative global index of local index k along a dimension of a window (blocks of nb
// over p processes from s; this process me).
int64_t window_global(int64_t k, int nb, int me, int s, int p);
// Whether window (i, j) of g starts on a block boundary along each split dimension.
bool window_aligned(const Grid &g, int i, int j);

// The 2-D mesh of grid g over call.comm, cached by its ranks (collective over call.comm).
lm_mesh_t mesh_of(const Call &call, const Grid &g);

// LM_SCALAPACK_LOG: "1" logs each call to stderr, another value is a file name prefix
// (appended <prefix>.<world rank>); unset logs nothing.
void log_call(const char *routine, const char *path, const char *why);

// "argument <info> is wrong", for the log.
const char *bad_argument(int info);
// A Fortran character argument in upper case.
char upper(const char *s);

// The reference routine of the next library (dlsym(RTLD_NEXT)), or NULL.
void *reference(const char *symbol);

}  // namespace lmsp

#endif  // LOCALMAP_SCALAPACK_DROPIN_HPP_
