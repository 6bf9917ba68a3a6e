/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_scalapack_dropin: liblocalmap_scalapack's pdgemr2d_ and pdtran_ against Debian's
 * (libscalapack-openmpi), the same call with the same arrays and descriptors. The program links
 * ScaLAPACK (so pdgemr2d_ and pdtran_ are Debian's) and opens the drop-in with dlopen, taking
 * its entry points by dlsym from its handle. Cases, f64 square matrices of 1, 4, 16 and 64 MiB:
 *   gemr2d  blocks 64 x 64 on a 1 x P grid -> blocks 32 x 32 on a P x 1 grid (ICTXT: 1 x P);
 *   tran    C = A^T (alpha 1, beta 0) on the 1 x P grid, blocks 64 x 64.
 * Before timing, the drop-in's result is compared element by element with Debian's (a mismatch
 * ends the run). Interleaved rounds; the median over rounds of the max over ranks. One JSON line
 * per (size, case, implementation). No timed assertion: it measures. Run by bench/run.sh at np 2
 * and 4 (`make bench`). LM_SCALAPACK_DROPIN=path overrides the library's path.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "localmap_scalapack.h"

void pdgemr2d_(int *m, int *n, double *a, int *ia, int *ja, int *desca, double *b, int *ib,
               int *jb, int *descb, int *ictxt);
void pdtran_(int *m, int *n, double *alpha, double *a, int *ia, int *ja, int *desca,
             double *beta, double *c, int *ic, int *jc, int *descc);
typedef void (*gemr2d_fn)(int *, int *, double *, int *, int *, int *, double *, int *, int *,
                          int *, int *);
typedef void (*tran_fn)(int *, int *, double *, double *, int *, int *, int *, double *,
                        double *, int *, int *, int *);

static int rank, nproc;

struct mat {
  int desc[9], in;
  double *a;
  size_t n;
};

/* An n x n matrix in blocks of nb on grid ctxt (nprow x npcol), filled with f(i, j). */
static void make(struct mat *x, int ctxt, int n, int nb, int fill) {
  int nprow, npcol, myrow, mycol, zero = 0, info;
  Cblacs_gridinfo(ctxt, &nprow, &npcol, &myrow, &mycol);
  x->in = myrow >= 0;
  int locr = x->in ? numroc_(&n, &nb, &myrow, &zero, &nprow) : 0;
  int locc = x->in ? numroc_(&n, &nb, &mycol, &zero, &npcol) : 0;
  int lld = locr > 1 ? locr : 1;
  x->n = (size_t)lld * (size_t)(locc > 0 ? locc : 1);
  x->a = calloc(x->n, sizeof(double));
  if (x->in) descinit_(x->desc, &n, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
  else memset(x->desc, 0, sizeof x->desc), x->desc[1] = -1;
  for (int c = 0; fill && c < locc; ++c) {
    int cl = c + 1, gc = indxl2g_(&cl, &nb, &mycol, &zero, &npcol);
    for (int r = 0; r < locr; ++r) {
      int rl = r + 1, gr = indxl2g_(&rl, &nb, &myrow, &zero, &nprow);
      x->a[r + (size_t)c * lld] = gr * 1e-4 + gc;
    }
  }
}

static double now(void) { return MPI_Wtime(); }

/* Median over rounds of the max over ranks of one call. */
static double median(double *t, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
      double s = t[j];
      t[j] = t[j - 1], t[j - 1] = s;
    }
  return t[n / 2];
}

static void report(const char *kase, const char *impl, int n, double sec) {
  if (rank != 0) return;
  double mib = 8.0 * n * n / (1024.0 * 1024.0);
  printf("{\"bench\": \"scalapack_dropin\", \"np\": %d, \"case\": \"%s\", \"impl\": \"%s\", "
         "\"n\": %d, \"mib\": %.0f, \"seconds\": %.6f, \"gib_per_s\": %.3f}\n",
         nproc, kase, impl, n, mib, sec, mib / 1024.0 / sec);
  fflush(stdout);
}

static int same(const struct mat *x, const struct mat *y) {
  int ok = memcmp(x->a, y->a, x->n * sizeof(double)) == 0, all;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

/* Times `rounds` interleaved calls of the reference (impl 0) and the drop-in (impl 1). */
#define TIME2(t0, t1, rounds, call0, call1)                                   \
  for (int r_ = 0; r_ < (rounds); ++r_)                                       \
    for (int i_ = 0; i_ < 2; ++i_) {                                          \
      MPI_Barrier(MPI_COMM_WORLD);                                            \
      double s_ = now();                                                      \
      if (i_ == 0) { call0; } else { call1; }                                 \
      double d_ = now() - s_, m_;                                             \
      MPI_Allreduce(&d_, &m_, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);        \
      (i_ == 0 ? t0 : t1)[r_] = m_;                                           \
    }

static void bench_size(int n, int row, int col, gemr2d_fn my_gemr2d, tran_fn my_tran) {
  int one = 1, rounds = n >= 1448 ? 5 : 11;
  double alpha = 1.0, beta = 0.0, t0[16], t1[16];
  struct mat a, b0, b1, c0, c1;
  make(&a, row, n, 64, 1);
  make(&b0, col, n, 32, 0), make(&b1, col, n, 32, 0);
  make(&c0, row, n, 64, 0), make(&c1, row, n, 64, 0);
  pdgemr2d_(&n, &n, a.a, &one, &one, a.desc, b0.a, &one, &one, b0.desc, &row);
  my_gemr2d(&n, &n, a.a, &one, &one, a.desc, b1.a, &one, &one, b1.desc, &row);
  pdtran_(&n, &n, &alpha, a.a, &one, &one, a.desc, &beta, c0.a, &one, &one, c0.desc);
  my_tran(&n, &n, &alpha, a.a, &one, &one, a.desc, &beta, c1.a, &one, &one, c1.desc);
  if (!same(&b0, &b1) || !same(&c0, &c1)) {
    if (rank == 0) fprintf(stderr, "bench_scalapack_dropin: results differ at n = %d\n", n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  TIME2(t0, t1, rounds,
        pdgemr2d_(&n, &n, a.a, &one, &one, a.desc, b0.a, &one, &one, b0.desc, &row),
        my_gemr2d(&n, &n, a.a, &one, &one, a.desc, b1.a, &one, &one, b1.desc, &row));
  report("gemr2d_bc64_1xP_to_bc32_Px1", "scalapack", n, median(t0, rounds));
  report("gemr2d_bc64_1xP_to_bc32_Px1", "dropin", n, median(t1, rounds));
  TIME2(t0, t1, rounds,
        pdtran_(&n, &n, &alpha, a.a, &one, &one, a.desc, &beta, c0.a, &one, &one, c0.desc),
        my_tran(&n, &n, &alpha, a.a, &one, &one, a.desc, &beta, c1.a, &one, &one, c1.desc));
  report("tran_bc64_1xP", "scalapack", n, median(t0, rounds));
  report("tran_bc64_1xP", "dropin", n, median(t1, rounds));
  free(a.a), free(b0.a), free(b1.a), free(c0.a), free(c1.a);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nproc);
  const char *path = getenv("LM_SCALAPACK_DROPIN");
#ifdef LM_DROPIN_PATH
  if (path == NULL) path = LM_DROPIN_PATH;
#endif
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  gemr2d_fn my_gemr2d = h ? (gemr2d_fn)dlsym(h, "pdgemr2d_") : NULL;
  tran_fn my_tran = h ? (tran_fn)dlsym(h, "pdtran_") : NULL;
  if (my_gemr2d == NULL || my_tran == NULL) {
    if (rank == 0) fprintf(stderr, "bench_scalapack_dropin: cannot open the drop-in (%s)\n", path ? path : "no path");
    MPI_Finalize();
    return 1;
  }
  int row, col;
  Cblacs_get(-1, 0, &row);
  Cblacs_gridinit(&row, "Row", 1, nproc);
  Cblacs_get(-1, 0, &col);
  Cblacs_gridinit(&col, "Col", nproc, 1);
  const int sizes[4] = {362, 724, 1448, 2896}; /* 1, 4, 16 and 64 MiB of f64 */
  int count = argc > 1 && strcmp(argv[1], "--small") == 0 ? 2 : 4;
  for (int i = 0; i < count; ++i) bench_size(sizes[i], row, col, my_gemr2d, my_tran);
  Cblacs_gridexit(row);
  Cblacs_gridexit(col);
  Cblacs_exit(1);
  MPI_Finalize();
  return 0;
}
