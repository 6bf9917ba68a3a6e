/* SPDX-License-Identifier: BSD-3-Clause */
/* liblocalmap_scalapack against Debian's ScaLAPACK: random p?gemr2d_ calls (sizes, blocks,
 * sources, submatrix offsets, LLD padding, grids of 1..np processes mapped from random subsets
 * in random order, different source and target contexts, processes in neither grid) made once
 * through the drop-in (linked, so p?gemr2d_ is the drop-in's) and once through the reference
 * (dlsym on the ScaLAPACK library's own handle); every byte of B's local array, padding
 * included, must agree. The drop-in's log (LM_SCALAPACK_LOG=<prefix>) must say localmap served
 * every call whose windows start on block boundaries, the reference the others. Bad arguments
 * must reach PXERBLA (this program's own, exported) with ScaLAPACK's position codes.
 * Skips when no libscalapack-openmpi.so can be opened. */
// lm-test-np: 1 2 3 4
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "lm_test.h"

#include <dlfcn.h>

#include "lm_rng.h"

typedef void (*gemr2d_fn)(int *, int *, void *, int *, int *, int *, void *, int *, int *, int *,
                          int *);
void psgemr2d_(int *, int *, float *, int *, int *, int *, float *, int *, int *, int *, int *);
void pdgemr2d_(int *, int *, double *, int *, int *, int *, double *, int *, int *, int *, int *);
void pcgemr2d_(int *, int *, float *, int *, int *, int *, float *, int *, int *, int *, int *);
void pzgemr2d_(int *, int *, double *, int *, int *, int *, double *, int *, int *, int *, int *);
void pigemr2d_(int *, int *, int *, int *, int *, int *, int *, int *, int *, int *, int *);

static void *lib;
static void (*blacs_get)(int, int, int *);
static void (*blacs_gridmap)(int *, int *, int, int, int);
static void (*blacs_gridinfo)(int, int *, int *, int *, int *);
static void (*blacs_gridexit)(int);
static gemr2d_fn ref[5];
static const gemr2d_fn mine[5] = {(gemr2d_fn)psgemr2d_, (gemr2d_fn)pdgemr2d_,
                                  (gemr2d_fn)pcgemr2d_, (gemr2d_fn)pzgemr2d_,
                                  (gemr2d_fn)pigemr2d_};
static const int esize[5] = {4, 8, 8, 16, 4};
static char log_prefix[256];

/* The PXERBLA the drop-in reports to (exported: -rdynamic): records the last INFO. */
static int last_info = 0;
void pxerbla_(int *ictxt, const char *name, int *info, size_t len) {
  (void)ictxt, (void)name, (void)len;
  last_info = *info;
}

static int load(void) {
  const char *names[] = {"libscalapack-openmpi.so.2.2", "libscalapack-openmpi.so"};
  for (int i = 0; i < 2 && lib == NULL; ++i) lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
  if (lib == NULL) return 0;
  *(void **)&blacs_get = dlsym(lib, "Cblacs_get");
  *(void **)&blacs_gridmap = dlsym(lib, "Cblacs_gridmap");
  *(void **)&blacs_gridinfo = dlsym(lib, "Cblacs_gridinfo");
  *(void **)&blacs_gridexit = dlsym(lib, "Cblacs_gridexit");
  const char *refs[5] = {"psgemr2d_", "pdgemr2d_", "pcgemr2d_", "pzgemr2d_", "pigemr2d_"};
  for (int t = 0; t < 5; ++t) *(void **)&ref[t] = dlsym(lib, refs[t]);
  return blacs_get && blacs_gridmap && blacs_gridinfo && blacs_gridexit && ref[4];
}

static int numroc(int n, int nb, int p, int src, int np) {
  int d = (np + p - src) % np, nbk = n / nb, num = (nbk / np) * nb, extra = nbk % np;
  return d < extra ? num + nb : d == extra ? num + n % nb : num;
}

/* A grid of k processes (random subset of the world, random order): its context, or -1 here. */
static int make_grid(int k, int *nprow, int *npcol) {
  int np = lm_test_size(), perm[64];
  for (int i = 0; i < np; ++i) perm[i] = i;
  for (int i = np - 1; i > 0; --i) {
    int j = rndi(i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  *nprow = 1;
  for (int r = 1; r <= k; ++r)
    if (k % r == 0 && rndi(2)) *nprow = r;
  *npcol = k / *nprow;
  int ctxt;
  blacs_get(-1, 0, &ctxt);
  blacs_gridmap(&ctxt, perm, *nprow, *nprow, *npcol); /* usermap column-major, ld nprow */
  return ctxt;
}

struct side {
  int ctxt, nprow, npcol, myrow, mycol, desc[9];
  size_t bytes;
};

/* A random descriptor on grid s (rows >= need_m, cols >= need_n); its array size here. */
static void make_desc(struct side *s, int need_m, int need_n) {
  int m = need_m + rndi(6), n = need_n + rndi(6), mb = 1 + rndi(5), nb = 1 + rndi(5);
  int rsrc = rndi(s->nprow), csrc = rndi(s->npcol), pad = rndi(3);
  int pr, pc; /* -1 outside the grid: keep the grid's shape from make_grid */
  blacs_gridinfo(s->ctxt, &pr, &pc, &s->myrow, &s->mycol);
  int in = s->myrow >= 0;
  int locr = in ? numroc(m, mb, s->myrow, rsrc, s->nprow) : 0;
  int locc = in ? numroc(n, nb, s->mycol, csrc, s->npcol) : 0;
  int lld = (locr > 1 ? locr : 1) + pad;
  int d[9] = {1, in ? s->ctxt : -1, m, n, mb, nb, rsrc, csrc, lld};
  memcpy(s->desc, d, sizeof d);
  s->bytes = (size_t)lld * (size_t)(locc > 0 ? locc : 1);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)((i * 131u + seed * 7u) % 61u);
}

/* A window offset in 1..size-len+1; aligned to the block when `align` (where the size allows). */
static int offset(int size, int len, int block, int align) {
  int room = size - len;
  if (align) {
    int k = room / block;
    return 1 + block * rndi(k + 1);
  }
  return 1 + rndi(room + 1);
}

static int count_lines(const char *what) {
  char name[300], line[512];
  snprintf(name, sizeof name, "%s.%d", log_prefix, lm_test_rank());
  FILE *f = fopen(name, "r");
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, what)) ++n;
  if (f) fclose(f);
  return n;
}

static int is_aligned(const struct side *s, int i, int j) {
  return (s->nprow == 1 || (i - 1) % s->desc[4] == 0) && (s->npcol == 1 || (j - 1) % s->desc[5] == 0);
}

typedef void (*trmr2d_fn)(char *, char *, int *, int *, void *, int *, int *, int *, void *,
                          int *, int *, int *, int *);
static void *own(const char *name);
static void *theirs(const char *name);

/* ---- p?tran / p?geadd / p?tradd: C := beta C + alpha op(A) on one grid ---- */
typedef void (*tran_fn)(int *, int *, void *, void *, int *, int *, int *, void *, void *, int *,
                        int *, int *);
typedef void (*geadd_fn)(char *, int *, int *, void *, void *, int *, int *, int *, void *,
                         void *, int *, int *, int *, size_t);
typedef void (*tradd_fn)(char *, char *, int *, int *, void *, void *, int *, int *, int *,
                         void *, void *, int *, int *, int *, size_t, size_t);
static const char letters[4] = {'s', 'd', 'c', 'z'};
static const int psize[4] = {4, 8, 8, 16};

static void *own(const char *name) { return dlsym(RTLD_DEFAULT, name); } /* the drop-in's */
static void *theirs(const char *name) { return dlsym(lib, name); }       /* ScaLAPACK's */

/* Small integers (exact sums and products in every type). */
static void fill_small(void *p, size_t n, int t, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    double v = (double)((int)((i * 7u + seed * 13u) % 17u) - 8);
    double w = (double)((int)((i * 5u + seed * 3u) % 11u) - 5);
    if (t == 0) ((float *)p)[i] = (float)v;
    if (t == 1) ((double *)p)[i] = v;
    if (t == 2) ((float *)p)[2 * i] = (float)v, ((float *)p)[2 * i + 1] = (float)w;
    if (t == 3) ((double *)p)[2 * i] = v, ((double *)p)[2 * i + 1] = w;
  }
}

/* Every element equal as a number (a +0 and a -0 are the same value: the reference may add
 * alpha * A and beta * C in another order), padding included. */
static int same_values(const void *x, const void *y, size_t n, int t) {
  size_t parts = t >= 2 ? 2 * n : n;
  for (size_t i = 0; i < parts; ++i)
    if (t % 2 == 0 ? ((const float *)x)[i] != ((const float *)y)[i]
                   : ((const double *)x)[i] != ((const double *)y)[i])
      return 0;
  return 1;
}

static void scalar(void *out, int t, int re, int im) {
  if (t == 0) *(float *)out = (float)re;
  if (t == 1) *(double *)out = re;
  if (t == 2) ((float *)out)[0] = (float)re, ((float *)out)[1] = (float)im;
  if (t == 3) ((double *)out)[0] = re, ((double *)out)[1] = im;
}

/* One routine call through fn (kind 0 tran, 1 tranc, 2 geadd, 3 tradd). */
static void call_add(void *fn, int kind, char uplo, char trans, int m, int n, void *alpha,
                     void *a, int ia, int ja, int *da, void *beta, void *c, int ic, int jc,
                     int *dc) {
  if (kind <= 1) ((tran_fn)fn)(&m, &n, alpha, a, &ia, &ja, da, beta, c, &ic, &jc, dc);
  else if (kind == 2) ((geadd_fn)fn)(&trans, &m, &n, alpha, a, &ia, &ja, da, beta, c, &ic, &jc, dc, 1);
  else ((tradd_fn)fn)(&uplo, &trans, &m, &n, alpha, a, &ia, &ja, da, beta, c, &ic, &jc, dc, 1, 1);
}

static void add_name(char *name, int kind, int t) {
  const char *base[4] = {"tran", "tranc", "geadd", "tradd"};
  if (kind == 0) sprintf(name, "p%ctran%s_", letters[t], t >= 2 ? "u" : "");
  else sprintf(name, "p%c%s_", letters[t], base[kind]);
}

/* One random PBLAS case; 1 when C's local arrays agree with the reference's. */
static int add_case(int t, int kind, int *served) {
  struct side a = {0}, c = {0};
  a.ctxt = make_grid(1 + rndi(lm_test_size()), &a.nprow, &a.npcol);
  c.ctxt = a.ctxt, c.nprow = a.nprow, c.npcol = a.npcol;
  const char *tr = t >= 2 ? "NTC" : "NT";
  char trans = kind <= 1 ? 'T' : tr[rndi(t >= 2 ? 3 : 2)], uplo = "UL"[rndi(2)];
  int m = rndi(12), n = rndi(12), align = rndi(4) != 0, tt = trans != 'N';
  make_desc(&a, tt ? n : m, tt ? m : n);
  make_desc(&c, m, n);
  int ia = offset(a.desc[2], tt ? n : m, a.desc[4], align), ja = offset(a.desc[3], tt ? m : n, a.desc[5], align);
  int ic = offset(c.desc[2], m, c.desc[4], align), jc = offset(c.desc[3], n, c.desc[5], align);
  int ok = 1, zb = rndi(5) == 0, za = rndi(8) == 0; /* every rank draws alike */
  unsigned char alpha[16], beta[16];
  int are = za ? 0 : rndi(7) - 3, aim = rndi(5) - 2;
  scalar(alpha, t, are, aim);
  int bre = zb ? 0 : rndi(7) - 3, bim = zb ? 0 : rndi(5) - 2;
  scalar(beta, t, bre, bim);
  /* Served without data movement: nothing to do (alpha = 0, beta = 1) or an empty window. */
  int nothing = (are == 0 && (t < 2 || aim == 0) && bre == 1 && (t < 2 || bim == 0)) || m == 0 || n == 0;
  if (a.myrow >= 0) {
    size_t as = a.bytes * psize[t], cs = c.bytes * psize[t];
    unsigned char *A = malloc(as), *C1 = malloc(cs), *C2 = malloc(cs);
    fill_small(A, a.bytes, t, 1u + (unsigned)lm_test_rank());
    fill_small(C1, c.bytes, t, 5u), fill_small(C2, c.bytes, t, 5u);
    char name[16];
    add_name(name, kind, t);
    call_add(own(name), kind, uplo, trans, m, n, alpha, A, ia, ja, a.desc, beta, C1, ic, jc, c.desc);
    call_add(theirs(name), kind, uplo, trans, m, n, alpha, A, ia, ja, a.desc, beta, C2, ic, jc, c.desc);
    ok = same_values(C1, C2, c.bytes, t);
    if (!ok) fprintf(stderr, "%s %c%c m=%d n=%d ia=%d ja=%d ic=%d jc=%d mb=%d,%d nb=%d,%d grid %dx%d\n",
                     name, uplo, trans, m, n, ia, ja, ic, jc, a.desc[4], c.desc[4], a.desc[5],
                     c.desc[5], a.nprow, a.npcol);
    free(A), free(C1), free(C2);
    *served += nothing || (is_aligned(&a, ia, ja) && is_aligned(&c, ic, jc));
    blacs_gridexit(a.ctxt);
  }
  return ok;
}

static int union_ctxt = -1;
static int served_expected, reference_expected;


/* One random case of type t through both routines; 1 when B's local arrays agree. */
static int one_case(int t) {
  int np = lm_test_size();
  struct side a = {0}, b = {0};
  a.ctxt = make_grid(1 + rndi(np), &a.nprow, &a.npcol);
  b.ctxt = make_grid(1 + rndi(np), &b.nprow, &b.npcol);
  int m = rndi(13), n = rndi(13), align = rndi(3) != 0, trap = rndi(3) == 0;
  char uplo = "UL"[rndi(2)], diag = "UN"[rndi(2)];
  make_desc(&a, m, n);
  make_desc(&b, m, n);
  int ia = offset(a.desc[2], m, a.desc[4], align), ja = offset(a.desc[3], n, a.desc[5], align);
  int ib = offset(b.desc[2], m, b.desc[4], align), jb = offset(b.desc[3], n, b.desc[5], align);
  size_t as = a.bytes * esize[t], bs = b.bytes * esize[t];
  unsigned char *A = malloc(as), *B1 = malloc(bs), *B2 = malloc(bs);
  fill(A, as, 1u + (unsigned)lm_test_rank());
  fill(B1, bs, 2u), fill(B2, bs, 2u);
  if (trap) { /* p?trmr2d_: the same call with a trapezoid */
    char name[16];
    snprintf(name, sizeof name, "p%ctrmr2d_", "sdczi"[t]);
    ((trmr2d_fn)own(name))(&uplo, &diag, &m, &n, A, &ia, &ja, a.desc, B1, &ib, &jb, b.desc, &union_ctxt);
    ((trmr2d_fn)theirs(name))(&uplo, &diag, &m, &n, A, &ia, &ja, a.desc, B2, &ib, &jb, b.desc, &union_ctxt);
  } else {
    mine[t](&m, &n, A, &ia, &ja, a.desc, B1, &ib, &jb, b.desc, &union_ctxt);
    ref[t](&m, &n, A, &ia, &ja, a.desc, B2, &ib, &jb, b.desc, &union_ctxt);
  }
  int same = memcmp(B1, B2, bs) == 0;
  if (!same)
    fprintf(stderr, "case %s%c%c t=%d m=%d n=%d ia=%d ja=%d desca={%d %d %d %d %d %d %d} ib=%d jb=%d "
            "descb={%d %d %d %d %d %d %d} grids %dx%d %dx%d\n", trap ? "trmr2d " : "", uplo, diag, t, m, n, ia, ja, a.desc[2],
            a.desc[3], a.desc[4], a.desc[5], a.desc[6], a.desc[7], a.desc[8], ib, jb, b.desc[2],
            b.desc[3], b.desc[4], b.desc[5], b.desc[6], b.desc[7], b.desc[8], a.nprow, a.npcol,
            b.nprow, b.npcol);
  int served = m == 0 || n == 0 || (is_aligned(&a, ia, ja) && is_aligned(&b, ib, jb));
  served_expected += served, reference_expected += !served;
  free(A), free(B1), free(B2);
  if (a.myrow >= 0) blacs_gridexit(a.ctxt);
  if (b.myrow >= 0) blacs_gridexit(b.ctxt);
  return same;
}

static void test_gemr2d_random(void **state) {
  (void)state;
  int bad = 0;
  for (int c = 0; c < 60; ++c)
    for (int t = 0; t < 5; ++t) bad += !one_case(t);
  LM_ASSERT_ALL(bad == 0);
  fprintf(stderr, "localmap served %d (expected %d), the reference %d (expected %d)\n",
          count_lines(" localmap"), served_expected, count_lines(" reference"), reference_expected);
  /* The log says which path served each call: localmap exactly where the windows allow. */
  LM_ASSERT_ALL(count_lines(" localmap") == served_expected);
  LM_ASSERT_ALL(count_lines(" reference") == reference_expected);
  LM_ASSERT_ALL(served_expected > 100);
  char name[300];
  snprintf(name, sizeof name, "%s.%d", log_prefix, lm_test_rank());
  unlink(name);
}

static void test_add_random(void **state) {
  (void)state;
  char name[300];
  snprintf(name, sizeof name, "%s.%d", log_prefix, lm_test_rank());
  unlink(name);
  int bad = 0, served = 0;
  for (int r = 0; r < 12; ++r)
    for (int t = 0; t < 4; ++t)
      for (int kind = 0; kind < 4; ++kind)
        if (kind != 1 || t >= 2) bad += !add_case(t, kind, &served);
  int local = count_lines(" localmap");
  fprintf(stderr, "p?tran/geadd/tradd: localmap served %d calls here (expected %d)\n", local, served);
  LM_ASSERT_ALL(bad == 0);
  LM_ASSERT_ALL(local == served);
  LM_ASSERT_ALL(lm_test_size() == 1 || served > 20);
  unlink(name);
}

/* Bad arguments reach PXERBLA with ScaLAPACK's codes (position, or 100 * position + entry). */
static void test_gemr2d_bad_inputs(void **state) {
  (void)state;
  int nprow, npcol, myrow, mycol;
  blacs_gridinfo(union_ctxt, &nprow, &npcol, &myrow, &mycol);
  int m = 4, n = 4, one = 1, lld = 4; /* a 1 x np grid: every process holds all 4 rows */
  int good[9] = {1, union_ctxt, 4, 4, 4, 4, 0, 0, lld};
  double A[16] = {0}, B[16] = {0};
  struct { int m, ia, entry, value, ictxt, want; } cases[] = {
      {-1, 1, -1, 0, 0, 1}, {4, 0, -1, 0, 0, 4}, {4, 2, -1, 0, 0, 603},
      {4, 1, 0, 2, 0, 601}, {4, 1, 4, 0, 0, 605}, {4, 1, 7, 99, 0, 608},
      {4, 1, 8, 0, 0, 609}, {4, 1, -1, 0, 1, 11}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int da[9], db[9], ctxt = cases[c].ictxt ? -5 : union_ctxt, mm = cases[c].m, ia = cases[c].ia;
    memcpy(da, good, sizeof da), memcpy(db, good, sizeof db);
    if (cases[c].entry >= 0) da[cases[c].entry] = cases[c].value;
    last_info = 0;
    pdgemr2d_(&mm, &n, A, &ia, &one, da, B, &one, &one, db, &ctxt);
    if (last_info != cases[c].want)
      fprintf(stderr, "bad case %zu: info %d, want %d\n", c, last_info, cases[c].want);
    LM_ASSERT_ALL(last_info == cases[c].want);
  }
  (void)m;
}

static int setup(void **state) {
  (void)state;
  int ctxt, np = lm_test_size();
  blacs_get(-1, 0, &ctxt);
  int map[64];
  for (int i = 0; i < np; ++i) map[i] = i;
  blacs_gridmap(&ctxt, map, 1, 1, np);
  union_ctxt = ctxt;
  return 0;
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_gemr2d_random, setup),
    cmocka_unit_test(test_gemr2d_bad_inputs),
    cmocka_unit_test(test_add_random),
};

int main(int argc, char **argv) {
  lm_test_init(&argc, &argv);
  const char *mpi = getenv("LM_MPI");
  if (mpi && strcmp(mpi, "mpich") == 0)  /* two MPIs in one process crash */
    lm_test_skip_program("MPICH build: Debian's ScaLAPACK, the reference, is built on Open MPI (the "
                         "differential test runs in the Open MPI build)");
  if (!load()) lm_test_skip_program("no libscalapack-openmpi.so (apt-get install libscalapack-openmpi-dev)");
  const char *seed = getenv("LM_SEED");
  rng_state = seed ? strtoull(seed, NULL, 0) : 44u;
  int pid = (int)getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  snprintf(log_prefix, sizeof log_prefix, "/tmp/lm_scalapack_dropin.%d", pid);
  setenv("LM_SCALAPACK_LOG", log_prefix, 1);
  return lm_test_run(tests, sizeof tests / sizeof tests[0], lm_test_basename(argv[0]));
}
