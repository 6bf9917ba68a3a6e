/* SPDX-License-Identifier: BSD-3-Clause */
/* Directed reshard tests: the classic tables of the peer libraries.
 *
 *  1. 1-D mesh of all ranks, uneven shapes [13,3] [14,5] [3] [0,4], float64 and int64: every
 *     ordered pair of {S(0), S(1), R, P(sum), P(max), P(avg)}; Partial(a) -> Partial(b) refused.
 *  2. Bytes moved (lm_reshard_plan_info's bytes_sent summed over ranks) against closed forms, and the
 *     zero-copy Replicate -> Shard view.
 *  3. 2x2 (np 4) and 2x2x2 (np 8) meshes: placement lists from {R, S(0), S(1), P(sum)} per mesh
 *     dim plus co-shard lists with reversed `order`, on an uneven [7,5] tensor.
 *  4. Cross-mesh on 8 ranks: pipeline hand-off, one replica crossing, bystanders, overlap.
 *  5. Persistent plans: repeated execution, nonblocking, in-flight misuse.
 *  6. Bad inputs.
 *
 * Every rank checks its own shard without gathering: values come from the global linear index,
 * and the expected box of each rank is computed here (torch.chunk nesting with the co-shard
 * order), independently of the library. Partial sources are split so that the reduction is exact;
 * Partial targets are reduced by a second reshard to Replicate, and their raw parts are checked
 * where the header/design fix them (R -> P(sum): the value at coordinate 0, zeros elsewhere;
 * R -> P(max)/P(avg): the value everywhere; identity: the parts unchanged).
 * Failures are collected per rank and printed by rank 0 before the agreed assertion. */
#include "lm_oracle.h"
#include "lm_test.h"

#include <localmap.h>
#include <localmap_mpi.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------- failure log */
#define FAILBUF 4096
static char failbuf[FAILBUF];
static int nbad;
static int nchecked;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  size_t l = strlen(failbuf);
  va_list ap;
  if (nbad++ >= 10 || l + 2 >= FAILBUF) return;
  va_start(ap, fmt);
  vsnprintf(failbuf + l, FAILBUF - l, fmt, ap);
  va_end(ap);
  l = strlen(failbuf);
  if (l + 1 < FAILBUF && (l == 0 || failbuf[l - 1] != '\n')) strcat(failbuf, "\n");
}

/* Collective over MPI_COMM_WORLD: rank 0 prints every rank's notes, then all ranks fail the test
 * together if any rank noted a failure. */
static void finish(const char *what) {
  int n = lm_test_size(), r = lm_test_rank();
  char *all = r == 0 ? (char *)malloc((size_t)n * FAILBUF) : NULL;
  int bad = nbad, total_bad = 0, total_checked = 0;
  MPI_Gather(failbuf, FAILBUF, MPI_CHAR, all, FAILBUF, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Allreduce(&bad, &total_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&nchecked, &total_checked, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (r == 0) {
    for (int i = 0; i < n; ++i)
      if (all[(size_t)i * FAILBUF] != 0)
        printf("[%s] failures on rank %d of %d:\n%s", what, i, n, all + (size_t)i * FAILBUF);
    printf("[%s] np %d: %d shard checks, %d failures\n", what, n, total_checked, total_bad);
    fflush(stdout);
    free(all);
  }
  failbuf[0] = 0;
  nbad = 0;
  nchecked = 0;
  LM_ASSERT_ALL(bad == 0);
}

/* ----------------------------------------------------------------------------- placements */
static lm_placement_t R_(void) { return (lm_placement_t){LM_REPLICATE, 0, 0, 0, 0, 0, 0, 0}; }
static lm_placement_t S_(int d) { return (lm_placement_t){LM_SHARD, d, 0, 0, 0, 0, 0, 0}; }
static lm_placement_t So(int d, int order) { lm_placement_t p = LM_PLACEMENT_SHARD(d); p.order = order; return p; }
static lm_placement_t P_(int op) { return LM_PLACEMENT_PARTIAL(op); }

static const char *fmt_pl(const lm_placement_t *pl, int n, char *buf, size_t size) {
  if (lm_placements_format(pl, n, buf, size) != LM_SUCCESS) snprintf(buf, size, "(unformattable)");
  return buf;
}

static int partial_op(const lm_placement_t *pl, int n) {
  for (int i = 0; i < n; ++i)
    if (pl[i].kind == LM_PARTIAL) return pl[i].reduce_op;
  return -1;
}

static const char *op_name(int op) {
  switch (op) {
    case LM_REDUCE_SUM: return "sum";
    case LM_REDUCE_AVG: return "avg";
    case LM_REDUCE_MAX: return "max";
    case LM_REDUCE_MIN: return "min";
    default: return "prod";
  }
}

static int pl_same(const lm_placement_t *a, const lm_placement_t *b, int n) {
  for (int i = 0; i < n; ++i)
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) return 0; /* eight int32 fields, no padding */
  return 1;
}

/* ----------------------------------------------------------------------------- meshes */
typedef struct {
  lm_mesh_t mesh;
  int mdim;
  int64_t shape[3];
  int member;
  int64_t coord[3];
} minfo_t;

static minfo_t minfo(lm_mesh_t m) {
  minfo_t mi;
  memset(&mi, 0, sizeof mi);
  mi.mesh = m;
  LM_ASSERT_OK(lm_mesh_ndim(m, &mi.mdim));
  LM_ASSERT_OK(lm_mesh_shape(m, mi.shape, mi.mdim));
  LM_ASSERT_OK(lm_mesh_is_member(m, &mi.member));
  if (mi.member) LM_ASSERT_OK(lm_mesh_coord(m, mi.coord, 3));
  return mi;
}

/* A mesh of `ndim` dims over `ranks` of MPI_COMM_WORLD (NULL: all). Collective. */
static lm_mesh_t make_mesh(int ndim, const int64_t *shape, const int *ranks, int nranks) {
  lm_mesh_t m = NULL;
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  cfg.ranks = ranks;
  cfg.nranks = ranks ? nranks : 0;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), ndim, shape, ranks ? &cfg : NULL));
  return m;
}

static lm_mesh_t make_1d(void) {
  int64_t s[1] = {lm_test_size()};
  return make_mesh(1, s, NULL, 0);
}

/* This rank's position among the Partial mesh dims of pl. */
typedef struct {
  int n, c[3], e[3];
  int p, K;
} pinfo_t;

static pinfo_t pinfo(const minfo_t *mi, const lm_placement_t *pl) {
  pinfo_t pi;
  memset(&pi, 0, sizeof pi);
  pi.K = 1;
  for (int m = 0; m < mi->mdim; ++m)
    if (pl[m].kind == LM_PARTIAL) {
      pi.p = pi.p * (int)mi->shape[m] + (int)mi->coord[m];
      pi.K *= (int)mi->shape[m];
      pi.c[pi.n] = (int)mi->coord[m];
      pi.e[pi.n++] = (int)mi->shape[m];
    }
  return pi;
}

/* ----------------------------------------------------------------------------- values */
/* The value at global linear index lin (small integers: exact in float64 and int64). */
static double val(int64_t lin, int salt) {
  return (double)((lin * 37 + 11 + (int64_t)salt * 13) % 101) - 50.0;
}

/* The part the rank at Partial position pi holds, so that the op-reduction is exactly val. */
static double part_val(int op, int64_t lin, int salt, const pinfo_t *pi) {
  double v = val(lin, salt), s = 0;
  if (pi->K <= 1) return v;
  switch (op) {
    case LM_REDUCE_SUM:
      if (pi->p > 0) return (double)((lin + pi->p) % 5 - 2);
      for (int q = 1; q < pi->K; ++q) s += (double)((lin + q) % 5 - 2);
      return v - s;
    case LM_REDUCE_AVG: {
      /* v + h(lin) * prod_m g(c_m) with sum_c g(c) = 0 along each Partial dim. */
      double d = (double)(lin % 3 - 1);
      for (int m = 0; m < pi->n; ++m) d *= pi->c[m] == 0 ? -(double)(pi->e[m] - 1) : 1.0;
      return v + d;
    }
    case LM_REDUCE_MAX: return pi->p == 0 ? v : v - 1 - (double)((lin + pi->p) % 3);
    case LM_REDUCE_MIN: return pi->p == 0 ? v : v + 1 + (double)((lin + pi->p) % 3);
    default: return pi->p == 0 ? v : 1;
  }
}

static int is_int(DLDataType dt) { return dt.code == kDLInt; }
static void put(DLDataType dt, void *base, int64_t i, double v) {
  if (is_int(dt))
    ((int64_t *)base)[i] = (int64_t)v;
  else
    ((double *)base)[i] = v;
}
static double get(DLDataType dt, const void *base, int64_t i) {
  return is_int(dt) ? (double)((const int64_t *)base)[i] : ((const double *)base)[i];
}
static const char *dt_name(DLDataType dt) { return is_int(dt) ? "int64" : "float64"; }

/* What a checked shard must hold. */
enum {
  EXP_VALUE,   /* the value */
  EXP_RINIT,   /* R -> P(op): sum/prod: value where all Partial coords are 0, else 0/1; others: value */
  EXP_PARTS    /* the parts a Partial source of the same layout was filled with */
};

static double expected(int kind, int op, int64_t lin, int salt, const pinfo_t *pi) {
  switch (kind) {
    case EXP_VALUE: return val(lin, salt);
    case EXP_RINIT:
      if (op == LM_REDUCE_SUM) return pi->p == 0 ? val(lin, salt) : 0.0;
      if (op == LM_REDUCE_PROD) return pi->p == 0 ? val(lin, salt) : 1.0;
      return val(lin, salt);
    default: return part_val(op, lin, salt, pi);
  }
}

static void *local_data(lm_dist_tensor_t t, int64_t *numel) {
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  if (numel) *numel = n;
  return (char *)v.data + v.byte_offset;
}

/* Checks t (on any rank): metadata, and on members the box and every element. Returns 1 if ok. */
static int check_tensor(lm_dist_tensor_t t, const lm_placement_t *pl, int ndim, const int64_t *g,
                        DLDataType dt, int kind, int salt, const char *label) {
  lm_mesh_t mesh = NULL;
  int nd = -1;
  int64_t gs[4], off[4], len[4], loff[4], llen[4];
  lm_placement_t tp[3];
  DLDataType tdt;
  ++nchecked;
  LM_ASSERT_OK(lm_dist_tensor_mesh(t, &mesh));
  minfo_t mi = minfo(mesh);
  LM_ASSERT_OK(lm_dist_tensor_ndim(t, &nd));
  if (nd != ndim) {
    note("%s: ndim %d, expected %d", label, nd, ndim);
    return 0;
  }
  LM_ASSERT_OK(lm_dist_tensor_dtype(t, &tdt));
  LM_ASSERT_OK(lm_dist_tensor_global_shape(t, gs, ndim));
  LM_ASSERT_OK(lm_dist_tensor_placements(t, tp, mi.mdim));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, llen, ndim));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, loff, ndim));
  if (tdt.code != dt.code || tdt.bits != dt.bits) {
    note("%s: wrong dtype", label);
    return 0;
  }
  for (int d = 0; d < ndim; ++d)
    if (gs[d] != g[d]) {
      note("%s: global shape dim %d is %lld, expected %lld", label, d, (long long)gs[d],
           (long long)g[d]);
      return 0;
    }
  if (!pl_same(tp, pl, mi.mdim)) {
    char a[96], b[96];
    note("%s: placements %s, expected %s", label, fmt_pl(tp, mi.mdim, a, sizeof a),
         fmt_pl(pl, mi.mdim, b, sizeof b));
    return 0;
  }
  int64_t n;
  const void *data = local_data(t, &n);
  if (!mi.member) {
    /* a 0-d placeholder's view has no dims to be empty along: it has no data instead */
    if (ndim == 0 ? data != NULL : n != 0) {
      note("%s: a non-member's placeholder has %lld local elements", label, (long long)n);
      return 0;
    }
    return 1;
  }
  lm_oracle_box(mi.shape, mi.mdim, mi.coord, pl, ndim, g, off, len);
  for (int d = 0; d < ndim; ++d)
    if (off[d] != loff[d] || len[d] != llen[d]) {
      note("%s: local box dim %d is [%lld,+%lld), expected [%lld,+%lld)", label, d,
           (long long)loff[d], (long long)llen[d], (long long)off[d], (long long)len[d]);
      return 0;
    }
  pinfo_t pi = pinfo(&mi, pl);
  int op = partial_op(pl, mi.mdim);
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t lin = 0;
    for (int d = 0; d < ndim; ++d) lin = lin * g[d] + off[d] + idx[d];
    double want = expected(kind, op, lin, salt, &pi), got = get(dt, data, e);
    if (got != want) {
      note("%s: element %lld (global linear %lld) is %g, expected %g (%s)", label, (long long)e,
           (long long)lin, got, want,
           kind == EXP_VALUE ? "value" : kind == EXP_RINIT ? "R->P initial part" : "source part");
      return 0;
    }
    for (int d = ndim - 1; d >= 0; --d) {
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
  return 1;
}

static void refill(lm_dist_tensor_t t, const lm_placement_t *pl, int ndim, const int64_t *g,
                   DLDataType dt, int salt);

/* A source tensor with placements pl on mesh, filled with the parts of (salt). Local. */
static lm_dist_tensor_t make_src(lm_mesh_t mesh, const lm_placement_t *pl, int ndim,
                                 const int64_t *g, DLDataType dt, int salt) {
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK(lm_dist_tensor_zeros(&t, mesh, ndim, g, dt, LM_CPU, pl));
  refill(t, pl, ndim, g, dt, salt);
  return t;
}

/* Refills an existing source tensor (same layout as at creation) with another salt. */
static void refill(lm_dist_tensor_t t, const lm_placement_t *pl, int ndim, const int64_t *g,
                   DLDataType dt, int salt) {
  lm_mesh_t mesh = NULL;
  LM_ASSERT_OK(lm_dist_tensor_mesh(t, &mesh));
  minfo_t mi = minfo(mesh);
  if (!mi.member) return;
  int64_t off[4], len[4], n;
  lm_oracle_box(mi.shape, mi.mdim, mi.coord, pl, ndim, g, off, len);
  void *data = local_data(t, &n);
  int64_t want = 1;
  for (int d = 0; d < ndim; ++d) want *= len[d];
  if (want != n) {
    note("refill: the library's local shard has %lld elements, expected %lld", (long long)n,
         (long long)want);
    return;
  }
  pinfo_t pi = pinfo(&mi, pl);
  int op = partial_op(pl, mi.mdim);
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t lin = 0;
    for (int d = 0; d < ndim; ++d) lin = lin * g[d] + off[d] + idx[d];
    put(dt, data, e, part_val(op, lin, salt, &pi));
    for (int d = ndim - 1; d >= 0; --d) {
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
}

/* ----------------------------------------------------------------------------- one reshard */
enum { PATH_RESHARD = 0, PATH_EXECUTE = 1, PATH_NONBLOCKING = 2 };

/* Runs src -> dst placements by `path`. Collective over all ranks. */
static lm_status_t do_reshard(lm_dist_tensor_t src, lm_mesh_t sm, const lm_placement_t *sp,
                              lm_mesh_t dm, const lm_placement_t *dp, int ndim, const int64_t *g,
                              DLDataType dt, int path, lm_dist_tensor_t *out) {
  lm_status_t st;
  *out = NULL;
  if (path == PATH_RESHARD) return lm_dist_tensor_reshard(out, src, dm, dp);
  lm_reshard_plan_t plan = NULL;
  st = lm_reshard_plan_create(&plan, sm, sp, dm, dp, ndim, g, dt);
  if (st != LM_SUCCESS) return st;
  st = lm_reshard_plan_alloc_target(out, plan, LM_CPU);
  if (st == LM_SUCCESS) {
    if (path == PATH_EXECUTE) {
      st = lm_reshard_plan_execute(plan, src, *out);
    } else {
      lm_request_t req = NULL;
      int done = 0, spins = 0;
      st = lm_reshard_plan_start(&req, plan, src, *out);
      while (st == LM_SUCCESS && !done && spins++ < 2) st = lm_request_test(&req, &done);
      if (st == LM_SUCCESS && done && req != NULL) {
        note("lm_request_test said done but left the request non-NULL");
        st = LM_ERR_INTERNAL;
      }
      if (st == LM_SUCCESS && !done) st = lm_request_wait(&req);
      if (st == LM_SUCCESS && req != NULL) {
        note("lm_request_wait left the request non-NULL");
        st = LM_ERR_INTERNAL;
      }
    }
  }
  if (lm_reshard_plan_destroy(&plan) != LM_SUCCESS) note("lm_reshard_plan_destroy failed");
  if (st != LM_SUCCESS) lm_dist_tensor_destroy(out);
  return st;
}

static void label_of(char *buf, size_t size, const char *prefix, int smd, const lm_placement_t *sp,
                     int dmd, const lm_placement_t *dp, int ndim, const int64_t *g, DLDataType dt,
                     int path) {
  char a[96], b[96], sh[64] = "";
  for (int d = 0; d < ndim; ++d)
    snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%lld", d ? "," : "", (long long)g[d]);
  snprintf(buf, size, "%s %s -> %s shape [%s] %s path %s", prefix, fmt_pl(sp, smd, a, sizeof a),
           fmt_pl(dp, dmd, b, sizeof b), sh, dt_name(dt),
           path == 0 ? "reshard" : path == 1 ? "execute" : "nonblocking");
}

/* Reshards a fresh source and checks the target on every rank: the raw parts when raw_kind is
 * EXP_RINIT/EXP_PARTS, then (reduced to Replicate if Partial) the values. Returns the status
 * of the reshard; a failure status leaves nothing to check. Collective over all ranks. */
static lm_status_t run_pair(const char *prefix, lm_mesh_t sm, const lm_placement_t *sp,
                            lm_mesh_t dm, const lm_placement_t *dp, int ndim, const int64_t *g,
                            DLDataType dt, int path, int raw_kind, int salt) {
  char label[400];
  minfo_t smi = minfo(sm), dmi = minfo(dm);
  lm_dist_tensor_t src = make_src(sm, sp, ndim, g, dt, salt), dst = NULL, rep = NULL;
  label_of(label, sizeof label, prefix, smi.mdim, sp, dmi.mdim, dp, ndim, g, dt, path);
  lm_status_t st = do_reshard(src, sm, sp, dm, dp, ndim, g, dt, path, &dst);
  if (st != LM_SUCCESS) {
    lm_dist_tensor_destroy(&src);
    return st;
  }
  if (partial_op(dp, dmi.mdim) >= 0) {
    lm_placement_t r3[3] = {R_(), R_(), R_()};
    if (raw_kind != EXP_VALUE) {
      char l2[440];
      snprintf(l2, sizeof l2, "%s (raw parts)", label);
      check_tensor(dst, dp, ndim, g, dt, raw_kind, salt, l2);
    }
    lm_status_t s2 = lm_dist_tensor_reshard(&rep, dst, NULL, r3);
    if (s2 != LM_SUCCESS) {
      note("%s: reducing the Partial target to R failed: %s: %s", label, lm_status_string(s2),
           lm_last_error_message());
    } else {
      char l2[440];
      snprintf(l2, sizeof l2, "%s (reduced to R)", label);
      check_tensor(rep, r3, ndim, g, dt, EXP_VALUE, salt, l2);
      /* the reduction must not have changed the Partial tensor's parts */
      if (raw_kind != EXP_VALUE) {
        snprintf(l2, sizeof l2, "%s (raw parts after the reduction)", label);
        check_tensor(dst, dp, ndim, g, dt, raw_kind, salt, l2);
      }
    }
  } else {
    check_tensor(dst, dp, ndim, g, dt, EXP_VALUE, salt, label);
  }
  /* the source is untouched */
  {
    char l2[440];
    snprintf(l2, sizeof l2, "%s (source after)", label);
    check_tensor(src, sp, ndim, g, dt, EXP_PARTS, salt, l2);
  }
  lm_dist_tensor_destroy(&rep);
  lm_dist_tensor_destroy(&dst);
  lm_dist_tensor_destroy(&src);
  return LM_SUCCESS;
}

/* Expects an agreed success of run_pair. */
static void pair_ok(const char *prefix, lm_mesh_t sm, const lm_placement_t *sp, lm_mesh_t dm,
                    const lm_placement_t *dp, int ndim, const int64_t *g, DLDataType dt, int path,
                    int raw_kind, int salt) {
  lm_status_t st = run_pair(prefix, sm, sp, dm, dp, ndim, g, dt, path, raw_kind, salt);
  if (st != LM_SUCCESS) {
    char label[400];
    minfo_t smi = minfo(sm), dmi = minfo(dm);
    label_of(label, sizeof label, prefix, smi.mdim, sp, dmi.mdim, dp, ndim, g, dt, path);
    note("%s: failed: %s: %s", label, lm_status_string(st), lm_last_error_message());
  }
}

/* The raw-part expectation of a same-mesh pair. */
static int raw_kind_of(const lm_placement_t *sp, const lm_placement_t *dp, int mdim) {
  if (partial_op(dp, mdim) < 0) return EXP_VALUE;
  if (partial_op(sp, mdim) < 0) return EXP_RINIT;
  if (pl_same(sp, dp, mdim)) return EXP_PARTS;
  return EXP_VALUE;
}

/* ============================================================================ 1. 1-D tables */
static void test_1d_all_pairs(void **state) {
  (void)state;
  lm_mesh_t mesh = make_1d();
  const int64_t shapes[4][2] = {{13, 3}, {14, 5}, {3, 0}, {0, 4}};
  const int ndims[4] = {2, 2, 1, 2};
  const DLDataType dts[2] = {LM_FLOAT64, LM_INT64};
  int npairs = 0, nrefused = 0;
  for (int s = 0; s < 4; ++s) {
    int ndim = ndims[s];
    lm_placement_t list[6];
    int nl = 0;
    list[nl++] = S_(0);
    if (ndim > 1) list[nl++] = S_(1);
    list[nl++] = R_();
    list[nl++] = P_(LM_REDUCE_SUM);
    list[nl++] = P_(LM_REDUCE_MAX);
    list[nl++] = P_(LM_REDUCE_AVG);
    for (int t = 0; t < 2; ++t)
      for (int a = 0; a < nl; ++a)
        for (int b = 0; b < nl; ++b) {
          const lm_placement_t *sp = &list[a], *dp = &list[b];
          int path = (a + b + s + t) % 3;
          int salt = a * 7 + b;
          if (sp->kind == LM_PARTIAL && dp->kind == LM_PARTIAL && sp->reduce_op != dp->reduce_op) {
            /* refused on every rank, naming both ops, with no effect */
            lm_dist_tensor_t src = make_src(mesh, sp, ndim, shapes[s], dts[t], salt), dst = NULL;
            lm_status_t st = lm_dist_tensor_reshard(&dst, src, NULL, dp);
            const char *msg = lm_last_error_message();
            int named = strstr(msg, op_name(sp->reduce_op)) != NULL && strstr(msg, op_name(dp->reduce_op)) != NULL;
            if (st != LM_ERR_INVALID_ARGUMENT || dst != NULL || !named)
              note("1d P(%s)->P(%s) shape %d %s: got %s, out %p, message \"%s\" (want "
                   "INVALID_ARGUMENT naming both ops, out NULL)",
                   op_name(sp->reduce_op), op_name(dp->reduce_op), s, dt_name(dts[t]), lm_status_string(st),
                   (void *)dst, msg);
            lm_reshard_plan_t plan = NULL;
            st = lm_reshard_plan_create(&plan, mesh, sp, mesh, dp, ndim, shapes[s], dts[t]);
            msg = lm_last_error_message();
            named = strstr(msg, op_name(sp->reduce_op)) != NULL && strstr(msg, op_name(dp->reduce_op)) != NULL;
            if (st != LM_ERR_INVALID_ARGUMENT || plan != NULL || !named)
              note("1d plan P(%s)->P(%s): got %s, message \"%s\"", op_name(sp->reduce_op),
                   op_name(dp->reduce_op), lm_status_string(st), msg);
            lm_reshard_plan_destroy(&plan);
            lm_dist_tensor_destroy(&dst);
            /* the source still works */
            check_tensor(src, sp, ndim, shapes[s], dts[t], EXP_PARTS, salt, "source after refusal");
            lm_dist_tensor_destroy(&src);
            ++nrefused;
            continue;
          }
          pair_ok("1d", mesh, sp, mesh, dp, ndim, shapes[s], dts[t], path,
                  raw_kind_of(sp, dp, 1), salt);
          ++npairs;
        }
  }
  if (lm_test_rank() == 0) printf("1d: %d pairs checked, %d refused\n", npairs, nrefused);
  lm_mesh_destroy(&mesh);
  finish("1d all pairs");
}

/* ============================================================================ 2. bytes */
static int64_t plan_bytes(lm_mesh_t sm, const lm_placement_t *sp, lm_mesh_t dm,
                          const lm_placement_t *dp, int ndim, const int64_t *g, DLDataType dt,
                          int64_t *mine, char *desc, size_t dsize) {
  lm_reshard_plan_t plan = NULL;
  int64_t b = -1, total = 0;
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  lm_status_t st = lm_reshard_plan_create(&plan, sm, sp, dm, dp, ndim, g, dt);
  if (st == LM_SUCCESS) st = lm_reshard_plan_info(plan, 0, &info);
  if (st == LM_SUCCESS) b = info.bytes_sent;
  if (st == LM_SUCCESS && desc) st = lm_reshard_plan_describe(plan, desc, dsize);
  if (st != LM_SUCCESS) {
    note("plan_bytes: %s: %s", lm_status_string(st), lm_last_error_message());
    b = 0;
  }
  if (b < 0) {
    note("plan_bytes: negative byte count %lld", (long long)b);
    b = 0;
  }
  lm_reshard_plan_destroy(&plan);
  if (mine) *mine = b;
  MPI_Allreduce(&b, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

static void expect_bytes(const char *what, int64_t got, int64_t want, const char *desc) {
  if (got != want)
    note("%s: %lld bytes sent over all ranks, expected %lld (plan: %s)", what, (long long)got,
         (long long)want, desc ? desc : "");
}

static void test_bytes_sent(void **state) {
  (void)state;
  int np = lm_test_size();
  lm_mesh_t mesh = make_1d();
  const int64_t shapes[3][2] = {{13, 3}, {14, 5}, {16, 8}};
  char desc[512], what[160];
  for (int s = 0; s < 3; ++s) {
    const int64_t *g = shapes[s];
    const int64_t es = 8, total = g[0] * g[1] * es;
    lm_placement_t r = R_(), s0 = S_(0), s1 = S_(1), ps = P_(LM_REDUCE_SUM), pm = P_(LM_REDUCE_MAX);
    const lm_placement_t *ids[5] = {&r, &s0, &s1, &ps, &pm};
    for (int d = 0; d < 2; ++d) {
      lm_placement_t sd = S_(d);
      snprintf(what, sizeof what, "[%lld,%lld] R -> S(%d)", (long long)g[0], (long long)g[1], d);
      expect_bytes(what, plan_bytes(mesh, &r, mesh, &sd, 2, g, LM_FLOAT64, NULL, desc, sizeof desc), 0, desc);
    }
    snprintf(what, sizeof what, "[%lld,%lld] S(0) -> R", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &s0, mesh, &r, 2, g, LM_FLOAT64, NULL, desc, sizeof desc),
                 (int64_t)(np - 1) * total, desc);
    snprintf(what, sizeof what, "[%lld,%lld] S(1) -> R", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &s1, mesh, &r, 2, g, LM_FLOAT64, NULL, desc, sizeof desc),
                 (int64_t)(np - 1) * total, desc);
    /* S(0) -> S(1): rank i sends rows_i x cols_j to every j != i. */
    int64_t want = 0;
    for (int i = 0; i < np; ++i)
      for (int j = 0; j < np; ++j) {
        int64_t ro, rl, co, cl;
        if (i == j) continue;
        LM_ASSERT_OK(lm_layout_chunk(g[0], np, i, &ro, &rl));
        LM_ASSERT_OK(lm_layout_chunk(g[1], np, j, &co, &cl));
        want += rl * cl * es;
      }
    snprintf(what, sizeof what, "[%lld,%lld] S(0) -> S(1)", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &s0, mesh, &s1, 2, g, LM_FLOAT64, NULL, desc, sizeof desc), want, desc);
    snprintf(what, sizeof what, "[%lld,%lld] S(1) -> S(0)", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &s1, mesh, &s0, 2, g, LM_FLOAT64, NULL, desc, sizeof desc), want, desc);
    /* P(sum) -> S(d): a reduce-scatter: every rank sends every other rank that rank's chunk. */
    int64_t rs = 0;
    for (int i = 0; i < np; ++i) {
      int64_t o, l;
      LM_ASSERT_OK(lm_layout_chunk(g[0], np, i, &o, &l));
      rs += (total - l * g[1] * es);
    }
    snprintf(what, sizeof what, "[%lld,%lld] P(sum) -> S(0)", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &ps, mesh, &s0, 2, g, LM_FLOAT64, NULL, desc, sizeof desc), rs, desc);
    if (rs != (int64_t)(np - 1) * total) note("self-check: reduce-scatter bytes %lld", (long long)rs);
    snprintf(what, sizeof what, "[%lld,%lld] P(sum) -> S(1)", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &ps, mesh, &s1, 2, g, LM_FLOAT64, NULL, desc, sizeof desc),
                 (int64_t)(np - 1) * total, desc);
    /* identities */
    for (int k = 0; k < 5; ++k) {
      char a[32];
      snprintf(what, sizeof what, "[%lld,%lld] identity %s", (long long)g[0], (long long)g[1],
               fmt_pl(ids[k], 1, a, sizeof a));
      expect_bytes(what, plan_bytes(mesh, ids[k], mesh, ids[k], 2, g, LM_FLOAT64, NULL, desc, sizeof desc), 0, desc);
    }
    /* R -> P(op) moves nothing either (a local fill) */
    snprintf(what, sizeof what, "[%lld,%lld] R -> P(sum)", (long long)g[0], (long long)g[1]);
    expect_bytes(what, plan_bytes(mesh, &r, mesh, &ps, 2, g, LM_FLOAT64, NULL, desc, sizeof desc), 0, desc);
  }

  /* The plain reshard R -> S(0) of a 2-d tensor is a view into the source's buffer. */
  for (int s = 0; s < 3; ++s) {
    const int64_t *g = shapes[s];
    lm_placement_t r = R_(), s0 = S_(0);
    lm_dist_tensor_t src = make_src(mesh, &r, 2, g, LM_FLOAT64, 5), dst = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&dst, src, NULL, &s0));
    int64_t ns, nd;
    const char *ps = (const char *)local_data(src, &ns), *pd = (const char *)local_data(dst, &nd);
    if (nd > 0 && !(pd >= ps && pd + nd * 8 <= ps + ns * 8))
      note("[%lld,%lld] R -> S(0): the target's local data %p (+%lld B) is not inside the "
           "source's buffer %p (+%lld B): not a zero-copy view",
           (long long)g[0], (long long)g[1], (const void *)pd, (long long)(nd * 8),
           (const void *)ps, (long long)(ns * 8));
    else if (nd > 0) {
      int64_t o, l;
      LM_ASSERT_OK(lm_layout_chunk(g[0], np, lm_test_rank(), &o, &l));
      if (pd != ps + o * g[1] * 8)
        note("R -> S(0) view starts at byte %lld of the source, expected %lld",
             (long long)(pd - ps), (long long)(o * g[1] * 8));
    }
    check_tensor(dst, &s0, 2, g, LM_FLOAT64, EXP_VALUE, 5, "R->S(0) view");
    /* the header: the view shares the source's memory, writing one changes the other */
    if (nd > 0) {
      int64_t o, l;
      LM_ASSERT_OK(lm_layout_chunk(g[0], np, lm_test_rank(), &o, &l));
      double *sv = (double *)ps + o * g[1], *dv = (double *)pd, keep = sv[0];
      sv[0] = 1234.5;
      if (dv[0] != 1234.5) note("R -> S(0): a write to the source is not seen through the view");
      dv[0] = keep;
      if (sv[0] != keep) note("R -> S(0): a write through the view is not seen in the source");
    }
    /* the view keeps the storage alive after the source handle goes */
    lm_dist_tensor_destroy(&src);
    check_tensor(dst, &s0, 2, g, LM_FLOAT64, EXP_VALUE, 5, "R->S(0) view after destroying src");
    lm_dist_tensor_destroy(&dst);
  }
  lm_mesh_destroy(&mesh);
  finish("bytes sent");
}

/* ============================================================================ 3. N-D meshes */
static void mesh_lists(int mdim, lm_placement_t (*lists)[3], int *nlists) {
  const lm_placement_t base[4] = {R_(), S_(0), S_(1), P_(LM_REDUCE_SUM)};
  int n = 0, total = 1;
  for (int m = 0; m < mdim; ++m) total *= 4;
  for (int k = 0; k < total; ++k) {
    int x = k;
    for (int m = mdim - 1; m >= 0; --m) {
      lists[n][m] = base[x % 4];
      x /= 4;
    }
    ++n;
  }
  /* co-shard lists with reversed / explicit orders */
  if (mdim == 2) {
    lists[n][0] = So(0, 1); lists[n][1] = S_(0); ++n;                 /* [S(0)@1, S(0)] */
    lists[n][0] = So(1, 1); lists[n][1] = S_(1); ++n;                 /* [S(1)@1, S(1)] */
    lists[n][0] = So(0, 2); lists[n][1] = So(0, 1); ++n;              /* = [S(0)@1, S(0)] */
    lists[n][0] = So(1, 1); lists[n][1] = P_(LM_REDUCE_SUM); ++n;     /* lone order: = S(1) */
  } else {
    lists[n][0] = So(0, 2); lists[n][1] = So(0, 1); lists[n][2] = S_(0); ++n;
    lists[n][0] = So(0, 1); lists[n][1] = S_(0); lists[n][2] = S_(1); ++n;
    lists[n][0] = S_(1); lists[n][1] = So(1, 1); lists[n][2] = S_(1); ++n;
    lists[n][0] = So(0, 1); lists[n][1] = So(0, 1); lists[n][2] = S_(0); ++n;
    lists[n][0] = P_(LM_REDUCE_SUM); lists[n][1] = So(1, 1); lists[n][2] = S_(1); ++n;
    lists[n][0] = So(1, 1); lists[n][1] = R_(); lists[n][2] = So(1, 0); ++n;
  }
  *nlists = n;
}

static void run_mesh_pairs(int mdim, const char *prefix) {
  int64_t shape[3] = {2, 2, 2};
  lm_mesh_t mesh = make_mesh(mdim, shape, NULL, 0);
  static lm_placement_t lists[80][3];
  int nl = 0, npairs = 0;
  mesh_lists(mdim, lists, &nl);
  const int64_t g[2] = {7, 5};
  int nfull = 1;
  for (int m = 0; m < mdim; ++m) nfull *= 4;
  for (int i = 0; i < nl; ++i)
    for (int j = 0; j < nl; ++j) {
      if (mdim == 3) {
        /* a deterministic subset: every 13th pair, the diagonal, and every pair touching the
         * co-shard lists with an order */
        int k = i * nl + j;
        if (!(k % 13 == 0 || i == j || i >= nfull || j >= nfull)) continue;
      }
      int path = (i + 2 * j) % 3;
      DLDataType dt = (i + j) % 2 ? LM_INT64 : LM_FLOAT64;
      pair_ok(prefix, mesh, lists[i], mesh, lists[j], 2, g, dt, path,
              raw_kind_of(lists[i], lists[j], mdim), i + j);
      ++npairs;
    }
  if (lm_test_rank() == 0) printf("%s: %d placement lists, %d pairs\n", prefix, nl, npairs);
  lm_mesh_destroy(&mesh);
}

static void test_mesh_2x2_all_pairs(void **state) {
  (void)state;
  if (lm_test_size() != 4) lm_test_skip("runs at np 4 only (np %d)", lm_test_size());
  run_mesh_pairs(2, "2x2");
  finish("2x2 all pairs");
}

static void test_mesh_2x2x2_pairs(void **state) {
  (void)state;
  if (lm_test_size() != 8) lm_test_skip("runs at np 8 only (np %d)", lm_test_size());
  run_mesh_pairs(3, "2x2x2");
  finish("2x2x2 pairs");
}

/* [S(0), S(0)] vs [S(0)@1, S(0)] on a 2x2 mesh: the offsets of docs/DESIGN.md's table. */
static void test_coshard_order(void **state) {
  (void)state;
  if (lm_test_size() != 4) lm_test_skip("runs at np 4 only (np %d)", lm_test_size());
  int64_t shape[2] = {2, 2};
  lm_mesh_t mesh = make_mesh(2, shape, NULL, 0);
  minfo_t mi = minfo(mesh);
  lm_placement_t fwd[2] = {S_(0), S_(0)}, rev[2] = {So(0, 1), S_(0)};
  /* rows [lo, hi) per coordinate (0,0) (0,1) (1,0) (1,1) */
  const int64_t t10f[4][2] = {{0, 3}, {3, 5}, {5, 8}, {8, 10}};
  const int64_t t10r[4][2] = {{0, 3}, {5, 8}, {3, 5}, {8, 10}};
  const int64_t t7f[4][2] = {{0, 2}, {2, 4}, {4, 6}, {6, 7}};
  const int64_t t7r[4][2] = {{0, 2}, {4, 6}, {2, 4}, {6, 7}};
  const int64_t rows[2] = {10, 7};
  int ci = (int)(mi.coord[0] * 2 + mi.coord[1]);
  for (int s = 0; s < 2; ++s) {
    int64_t g[2] = {rows[s], 5};
    const int64_t(*tf)[2] = s == 0 ? t10f : t7f;
    const int64_t(*tr)[2] = s == 0 ? t10r : t7r;
    lm_dist_tensor_t a = make_src(mesh, fwd, 2, g, LM_FLOAT64, 3);
    lm_dist_tensor_t b = make_src(mesh, rev, 2, g, LM_FLOAT64, 3);
    int64_t oa[2], ob[2], la[2], lb[2];
    LM_ASSERT_OK(lm_dist_tensor_local_offset(a, oa, 2));
    LM_ASSERT_OK(lm_dist_tensor_local_offset(b, ob, 2));
    LM_ASSERT_OK(lm_dist_tensor_local_shape(a, la, 2));
    LM_ASSERT_OK(lm_dist_tensor_local_shape(b, lb, 2));
    if (oa[0] != tf[ci][0] || la[0] != tf[ci][1] - tf[ci][0] || oa[1] != 0 || la[1] != 5)
      note("[S(0), S(0)] rows %lld at coord %d: offset %lld len %lld, expected [%lld,%lld)",
           (long long)rows[s], ci, (long long)oa[0], (long long)la[0], (long long)tf[ci][0],
           (long long)tf[ci][1]);
    if (ob[0] != tr[ci][0] || lb[0] != tr[ci][1] - tr[ci][0] || ob[1] != 0 || lb[1] != 5)
      note("[S(0)@1, S(0)] rows %lld at coord %d: offset %lld len %lld, expected [%lld,%lld)",
           (long long)rows[s], ci, (long long)ob[0], (long long)lb[0], (long long)tr[ci][0],
           (long long)tr[ci][1]);
    /* the offsets differ exactly on the off-diagonal coordinates */
    int differ = oa[0] != ob[0];
    if (differ != (ci == 1 || ci == 2))
      note("rows %lld coord %d: offsets of the two orders %s", (long long)rows[s], ci,
           differ ? "differ (should not)" : "agree (should differ)");
    lm_dist_tensor_destroy(&a);
    lm_dist_tensor_destroy(&b);
    for (int path = 0; path < 3; ++path) {
      pair_ok("coshard", mesh, fwd, mesh, rev, 2, g, LM_FLOAT64, path, EXP_VALUE, 10 + path);
      pair_ok("coshard", mesh, rev, mesh, fwd, 2, g, LM_INT64, path, EXP_VALUE, 20 + path);
    }
    /* the two orders are different layouts: the reshard moves data */
    char desc[512];
    int64_t mine = 0;
    int64_t tb = plan_bytes(mesh, fwd, mesh, rev, 2, g, LM_FLOAT64, &mine, desc, sizeof desc);
    int64_t want = (int64_t)((t10f[1][1] - t10f[1][0]) + (t10f[2][1] - t10f[2][0])) * 5 * 8;
    if (s == 1) want = (int64_t)((t7f[1][1] - t7f[1][0]) + (t7f[2][1] - t7f[2][0])) * 5 * 8;
    expect_bytes("[S(0),S(0)] -> [S(0)@1,S(0)]", tb, want, desc);
  }
  /* docs/DESIGN.md's describe example: 2x2, [P(sum), S(0)] -> [R, S(1)], shape [8, 6] */
  {
    lm_placement_t sp[2] = {P_(LM_REDUCE_SUM), S_(0)}, dp[2] = {R_(), S_(1)};
    const int64_t g[2] = {8, 6};
    lm_reshard_plan_t plan = NULL;
    char desc[512], small[8];
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, mesh, sp, mesh, dp, 2, g, LM_FLOAT64));
    LM_ASSERT_OK_ALL(lm_reshard_plan_describe(plan, desc, sizeof desc));
    if (strstr(desc, "reduce-scatter [P(sum), S(0)]->[S(0)@1, S(0)] over mesh dim 0 (2 ranks)") == NULL ||
        strstr(desc, "exchange [S(0)@1, S(0)]->[R, S(1)] (") == NULL)
      note("describe of [P(sum), S(0)] -> [R, S(1)]: \"%s\"", desc);
    memset(small, 'x', sizeof small);
    LM_ASSERT_OK_ALL(lm_reshard_plan_describe(plan, small, sizeof small));
    if (small[sizeof small - 1] != 0 || strncmp(small, desc, sizeof small - 1) != 0)
      note("describe into 8 bytes is not a NUL-terminated prefix");
    lm_reshard_plan_destroy(&plan);
    for (int path = 0; path < 3; ++path)
      pair_ok("design example", mesh, sp, mesh, dp, 2, g, LM_FLOAT64, path, EXP_VALUE, path);
  }
  lm_mesh_destroy(&mesh);
  finish("co-shard order");
}

/* ============================================================================ 4. cross-mesh */
static void test_cross_mesh_pipeline(void **state) {
  (void)state;
  if (lm_test_size() != 8) lm_test_skip("runs at np 8 only (np %d)", lm_test_size());
  int64_t shape[2] = {2, 2};
  const int ra[4] = {0, 1, 2, 3}, rb[4] = {4, 5, 6, 7};
  lm_mesh_t A = make_mesh(2, shape, ra, 4), B = make_mesh(2, shape, rb, 4);
  const int64_t g[2] = {7, 5};
  struct {
    lm_placement_t s[2], d[2];
  } pairs[] = {
      {{S_(0), R_()}, {R_(), S_(1)}},
      {{P_(LM_REDUCE_SUM), S_(0)}, {S_(0), S_(1)}},
      {{R_(), R_()}, {R_(), R_()}},
      {{R_(), R_()}, {S_(0), S_(1)}},
      {{S_(1), S_(0)}, {So(0, 1), S_(0)}},
      {{S_(0), S_(0)}, {R_(), S_(0)}},
      {{S_(0), S_(1)}, {P_(LM_REDUCE_SUM), R_()}},
      {{P_(LM_REDUCE_AVG), P_(LM_REDUCE_AVG)}, {R_(), S_(0)}},
      {{P_(LM_REDUCE_MAX), R_()}, {P_(LM_REDUCE_MAX), S_(1)}},
      {{R_(), S_(1)}, {R_(), R_()}},
  };
  const int np_ = (int)(sizeof pairs / sizeof pairs[0]);
  for (int k = 0; k < np_; ++k)
    for (int path = 0; path < 3; ++path) {
      pair_ok("A->B", A, pairs[k].s, B, pairs[k].d, 2, g, path == 1 ? LM_INT64 : LM_FLOAT64, path,
              EXP_VALUE, k + path);
      /* and back */
      pair_ok("B->A", B, pairs[k].d, A, pairs[k].s, 2, g, LM_FLOAT64, path, EXP_VALUE, k + 7);
    }

  /* Bytes crossing: with a Replicate source only one replica sends each element. */
  int rank = lm_test_rank(), in_a = rank < 4;
  char desc[512];
  const int64_t total = g[0] * g[1] * 8;
  struct {
    lm_placement_t s[2], d[2];
    const char *what;
  } bp[] = {
      {{R_(), R_()}, {S_(0), S_(1)}, "[R,R] -> [S(0),S(1)]"},
      {{R_(), R_()}, {R_(), R_()}, "[R,R] -> [R,R]"},
      {{S_(0), R_()}, {R_(), S_(1)}, "[S(0),R] -> [R,S(1)]"},
      {{R_(), S_(1)}, {R_(), R_()}, "[R,S(1)] -> [R,R]"},
      {{S_(0), S_(1)}, {S_(1), S_(0)}, "[S(0),S(1)] -> [S(1),S(0)]"},
  };
  for (size_t k = 0; k < sizeof bp / sizeof bp[0]; ++k) {
    int64_t mine = 0, from_a = 0;
    plan_bytes(A, bp[k].s, B, bp[k].d, 2, g, LM_FLOAT64, &mine, desc, sizeof desc);
    int64_t contrib = in_a ? mine : 0;
    MPI_Allreduce(&contrib, &from_a, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    char what[160];
    snprintf(what, sizeof what, "cross-mesh %s, bytes sent by source-mesh ranks", bp[k].what);
    expect_bytes(what, from_a, total, desc);
  }
  /* the reverse direction: B's ranks are the source */
  {
    lm_placement_t rr[2] = {R_(), R_()}, ss[2] = {S_(0), S_(1)};
    int64_t mine = 0, from_b = 0;
    plan_bytes(B, rr, A, ss, 2, g, LM_FLOAT64, &mine, desc, sizeof desc);
    int64_t contrib = in_a ? 0 : mine;
    MPI_Allreduce(&contrib, &from_b, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    expect_bytes("cross-mesh B[R,R] -> A[S(0),S(1)], bytes sent by B", from_b, total, desc);
  }
  lm_mesh_destroy(&A);
  lm_mesh_destroy(&B);
  finish("cross-mesh pipeline");
}

/* Ranks in neither mesh return at once with a placeholder. */
static void test_cross_mesh_bystanders(void **state) {
  (void)state;
  if (lm_test_size() != 8) lm_test_skip("runs at np 8 only (np %d)", lm_test_size());
  int rank = lm_test_rank();
  int64_t two[1] = {2};
  const int rc[2] = {0, 1}, rd[2] = {2, 3};
  lm_mesh_t C = make_mesh(1, two, rc, 2), D = make_mesh(1, two, rd, 2);
  const int64_t g[2] = {13, 3};
  lm_placement_t s0 = S_(0), r = R_(), s1 = S_(1), ps = P_(LM_REDUCE_SUM);
  int token = 0;
  /* Bystanders (4..7) reshard first and only then release ranks 0..3 with a message: if a
   * bystander waited for the meshes' ranks, this deadlocks (and the test times out). */
  if (rank >= 4) {
    lm_dist_tensor_t src = make_src(C, &s0, 2, g, LM_FLOAT64, 1), dst = NULL;
    lm_status_t st = lm_dist_tensor_reshard(&dst, src, D, &r);
    if (st != LM_SUCCESS) {
      note("bystander reshard: %s: %s", lm_status_string(st), lm_last_error_message());
    } else {
      lm_mesh_t m = NULL;
      int member = -1;
      LM_ASSERT_OK(lm_dist_tensor_mesh(dst, &m));
      LM_ASSERT_OK(lm_mesh_is_member(m, &member));
      if (member != 0) note("bystander: the placeholder's mesh says member %d", member);
      check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 1, "bystander placeholder");
    }
    lm_dist_tensor_destroy(&dst);
    /* the plan path too: execute succeeds, start gives a NULL request that is done */
    lm_reshard_plan_t plan = NULL;
    st = lm_reshard_plan_create(&plan, C, &s0, D, &r, 2, g, LM_FLOAT64);
    if (st == LM_SUCCESS) st = lm_reshard_plan_alloc_target(&dst, plan, LM_CPU);
    if (st == LM_SUCCESS) st = lm_reshard_plan_execute(plan, src, dst);
    lm_request_t req = NULL;
    if (st == LM_SUCCESS) st = lm_reshard_plan_start(&req, plan, src, dst);
    int done = 0;
    if (st == LM_SUCCESS) st = lm_request_test(&req, &done);
    if (st != LM_SUCCESS || !done || req != NULL)
      note("bystander plan path: %s, done %d, request %p: %s", lm_status_string(st), done,
           (void *)req, lm_last_error_message());
    if (st == LM_SUCCESS) st = lm_request_wait(&req);
    lm_reshard_plan_destroy(&plan);
    lm_dist_tensor_destroy(&dst);
    lm_dist_tensor_destroy(&src);
    if (rank - 4 < 4) MPI_Send(&token, 1, MPI_INT, rank - 4, 77, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&token, 1, MPI_INT, rank + 4, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    lm_dist_tensor_t src = make_src(C, &s0, 2, g, LM_FLOAT64, 1), dst = NULL;
    lm_status_t st = lm_dist_tensor_reshard(&dst, src, D, &r);
    if (st != LM_SUCCESS)
      note("C->D reshard on rank %d: %s: %s", rank, lm_status_string(st), lm_last_error_message());
    else
      check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 1, "C->D target");
    lm_dist_tensor_destroy(&dst);
    /* ranks 0..3 run the plan path as the bystanders did */
    lm_reshard_plan_t plan = NULL;
    st = lm_reshard_plan_create(&plan, C, &s0, D, &r, 2, g, LM_FLOAT64);
    if (st == LM_SUCCESS) st = lm_reshard_plan_alloc_target(&dst, plan, LM_CPU);
    if (st == LM_SUCCESS) st = lm_reshard_plan_execute(plan, src, dst);
    if (st == LM_SUCCESS) check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 1, "C->D execute");
    lm_request_t req = NULL;
    if (st == LM_SUCCESS) st = lm_reshard_plan_start(&req, plan, src, dst);
    if (st == LM_SUCCESS) st = lm_request_wait(&req);
    if (st != LM_SUCCESS)
      note("C->D plan path on rank %d: %s: %s", rank, lm_status_string(st), lm_last_error_message());
    else
      check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 1, "C->D nonblocking");
    lm_reshard_plan_destroy(&plan);
    lm_dist_tensor_destroy(&dst);
    lm_dist_tensor_destroy(&src);
  }
  /* everyone together now, several placement pairs */
  for (int path = 0; path < 3; ++path) {
    pair_ok("C->D", C, &s0, D, &r, 2, g, LM_FLOAT64, path, EXP_VALUE, 2);
    pair_ok("C->D", C, &ps, D, &s1, 2, g, LM_INT64, path, EXP_VALUE, 3);
    pair_ok("C->D", C, &r, D, &ps, 2, g, LM_FLOAT64, path, EXP_VALUE, 4);
    pair_ok("D->C", D, &s1, C, &s0, 2, g, LM_FLOAT64, path, EXP_VALUE, 5);
  }
  lm_mesh_destroy(&C);
  lm_mesh_destroy(&D);
  finish("cross-mesh bystanders");
}

/* Overlapping rank sets: source [0,1,2,3], target [2,3,4,5]. */
static void test_cross_mesh_overlap(void **state) {
  (void)state;
  if (lm_test_size() != 8) lm_test_skip("runs at np 8 only (np %d)", lm_test_size());
  int64_t four[1] = {4}, sq[2] = {2, 2};
  const int ra[4] = {0, 1, 2, 3}, rb[4] = {2, 3, 4, 5};
  lm_mesh_t A = make_mesh(1, four, ra, 4), B = make_mesh(1, four, rb, 4);
  lm_mesh_t B2 = make_mesh(2, sq, rb, 4);
  const int64_t g[2] = {13, 3};
  lm_placement_t l1[] = {S_(0), S_(1), R_(), P_(LM_REDUCE_SUM), P_(LM_REDUCE_MAX)};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      if (l1[i].kind == LM_PARTIAL && l1[j].kind == LM_PARTIAL && l1[i].reduce_op != l1[j].reduce_op) continue;
      int path = (i + j) % 3;
      pair_ok("overlap 1d", A, &l1[i], B, &l1[j], 2, g, (i + j) % 2 ? LM_INT64 : LM_FLOAT64, path,
              EXP_VALUE, i * 5 + j);
      pair_ok("overlap 1d back", B, &l1[i], A, &l1[j], 2, g, LM_FLOAT64, path, EXP_VALUE, i + j);
    }
  lm_placement_t d2[][2] = {{R_(), R_()}, {S_(0), S_(1)}, {R_(), S_(0)}, {So(0, 1), S_(0)},
                            {P_(LM_REDUCE_SUM), S_(1)}};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      pair_ok("overlap 1d->2x2", A, &l1[i], B2, d2[j], 2, g, LM_FLOAT64, (i + j) % 3, EXP_VALUE,
              i + 3 * j);
  /* one replica crosses: R on A -> S(0) on B: 2 and 3 hold their own rows already */
  {
    lm_placement_t r = R_(), s0 = S_(0);
    char desc[512];
    int64_t tb = plan_bytes(A, &r, B, &s0, 2, g, LM_FLOAT64, NULL, desc, sizeof desc);
    int64_t o, l, want = 0;
    for (int i = 2; i < 4; ++i) {
      LM_ASSERT_OK(lm_layout_chunk(g[0], 4, i, &o, &l));
      want += l * g[1] * 8;
    }
    expect_bytes("overlap R on [0..3] -> S(0) on [2..5]", tb, want, desc);
  }
  lm_mesh_destroy(&A);
  lm_mesh_destroy(&B);
  lm_mesh_destroy(&B2);
  finish("cross-mesh overlap");
}

/* Meshes on a congruent duplicate of MPI_COMM_WORLD count as the same parent. */
static void test_cross_mesh_dup_parent(void **state) {
  (void)state;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int64_t s[1] = {lm_test_size()};
  lm_mesh_t a = make_1d(), b = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create_mpi(&b, dup, 1, s, NULL));
  const int64_t g[2] = {13, 3};
  lm_placement_t s0 = S_(0), s1 = S_(1), r = R_(), ps = P_(LM_REDUCE_SUM);
  for (int path = 0; path < 3; ++path) {
    pair_ok("world->dup", a, &s0, b, &s1, 2, g, LM_FLOAT64, path, EXP_VALUE, 1);
    pair_ok("dup->world", b, &ps, a, &r, 2, g, LM_INT64, path, EXP_VALUE, 2);
  }
  lm_mesh_destroy(&a);
  lm_mesh_destroy(&b);
  MPI_Comm_free(&dup);
  finish("dup parent");
}

/* ============================================================================ 5. plans */
static void test_persistent_plan(void **state) {
  (void)state;
  lm_mesh_t mesh = make_1d();
  const int64_t g[2] = {13, 3};
  struct {
    lm_placement_t s, d;
    DLDataType dt;
  } cases[] = {
      {P_(LM_REDUCE_SUM), R_(), LM_FLOAT64},
      {S_(1), S_(0), LM_INT64},
      {P_(LM_REDUCE_AVG), S_(1), LM_INT64},
      {R_(), P_(LM_REDUCE_SUM), LM_FLOAT64},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    lm_reshard_plan_t plan = NULL;
    lm_dist_tensor_t src = NULL, dst = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, mesh, &cases[c].s, mesh, &cases[c].d, 2, g,
                                            cases[c].dt));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
    src = make_src(mesh, &cases[c].s, 2, g, cases[c].dt, 0);
    for (int it = 0; it < 5; ++it) {
      char label[160];
      refill(src, &cases[c].s, 2, g, cases[c].dt, 100 + it * 17);
      int path = it % 2;
      lm_status_t st;
      if (path == 0) {
        st = lm_reshard_plan_execute(plan, src, dst);
      } else {
        lm_request_t req = NULL;
        st = lm_reshard_plan_start(&req, plan, src, dst);
        if (st == LM_SUCCESS) st = lm_request_wait(&req);
      }
      LM_ASSERT_OK_ALL(st);
      snprintf(label, sizeof label, "persistent case %zu iteration %d", c, it);
      check_tensor(dst, &cases[c].d, 2, g, cases[c].dt,
                   cases[c].d.kind == LM_PARTIAL ? EXP_RINIT : EXP_VALUE, 100 + it * 17, label);
    }
    lm_reshard_plan_destroy(&plan);
    if (plan != NULL) note("lm_reshard_plan_destroy did not set the handle to NULL");
    /* dst outlives the plan */
    check_tensor(dst, &cases[c].d, 2, g, cases[c].dt,
                 cases[c].d.kind == LM_PARTIAL ? EXP_RINIT : EXP_VALUE, 100 + 4 * 17,
                 "target after destroying the plan");
    lm_dist_tensor_destroy(&dst);
    lm_dist_tensor_destroy(&src);
  }
  lm_mesh_destroy(&mesh);
  finish("persistent plan");
}

static double busy_compute(int n) {
  volatile double x = 0;
  for (int i = 0; i < n; ++i) x += sqrt((double)i);
  return x;
}

/* Every rank takes part ([16,8], S(0) -> R): start/test/wait and in-flight misuse. */
static void test_nonblocking(void **state) {
  (void)state;
  lm_mesh_t mesh = make_1d();
  const int64_t g[2] = {16, 8};
  lm_placement_t s0 = S_(0), s1 = S_(1), r = R_();
  lm_reshard_plan_t plan = NULL;
  lm_dist_tensor_t src = make_src(mesh, &s0, 2, g, LM_FLOAT64, 7), dst = NULL, dst2 = NULL;
  lm_dist_tensor_t other = make_src(mesh, &s1, 2, g, LM_FLOAT64, 8), out = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, mesh, &s0, mesh, &r, 2, g, LM_FLOAT64));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst2, plan, LM_CPU));

  /* start, compute between tests, finish */
  for (int round = 0; round < 3; ++round) {
    lm_request_t req = NULL;
    int done = 0, tests = 0;
    refill(src, &s0, 2, g, LM_FLOAT64, 30 + round);
    LM_ASSERT_OK_ALL(lm_reshard_plan_start(&req, plan, src, dst));
    LM_ASSERT_ALL(req != NULL);
    while (!done && tests < 1000000) {
      busy_compute(2000);
      LM_ASSERT_OK(lm_request_test(&req, &done));
      ++tests;
    }
    LM_ASSERT_ALL(done && req == NULL);
    LM_ASSERT_OK_ALL(lm_request_wait(&req)); /* NULL request: done */
    check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 30 + round, "nonblocking round");
  }

  /* in-flight misuse */
  {
    lm_request_t req = NULL, req2 = NULL;
    refill(src, &s0, 2, g, LM_FLOAT64, 40);
    LM_ASSERT_OK_ALL(lm_reshard_plan_start(&req, plan, src, dst));
    busy_compute(10000);
    /* a second request on the same plan */
    LM_ASSERT_STATUS_ALL(lm_reshard_plan_start(&req2, plan, src, dst2), LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(req2 == NULL);
    /* destroying the plan */
    LM_ASSERT_STATUS_ALL(lm_reshard_plan_destroy(&plan), LM_ERR_INVALID_USAGE);
    LM_ASSERT_ALL(plan != NULL);
    /* a blocking execute of the same plan */
    LM_ASSERT_STATUS_ALL(lm_reshard_plan_execute(plan, src, dst2), LM_ERR_INVALID_ARGUMENT);
    /* another reshard on the mesh, communicating or not */
    LM_ASSERT_STATUS_ALL(lm_dist_tensor_reshard(&out, other, NULL, &r), LM_ERR_INVALID_USAGE);
    LM_ASSERT_ALL(out == NULL);
    LM_ASSERT_STATUS_ALL(lm_dist_tensor_reshard(&out, other, NULL, &s0), LM_ERR_INVALID_USAGE);
    LM_ASSERT_ALL(out == NULL);
    /* then wait and everything works */
    LM_ASSERT_OK_ALL(lm_request_wait(&req));
    LM_ASSERT_ALL(req == NULL);
    check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 40, "after in-flight misuse");
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, other, NULL, &r));
    check_tensor(out, &r, 2, g, LM_FLOAT64, EXP_VALUE, 8, "reshard after the wait");
    lm_dist_tensor_destroy(&out);
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst2));
    check_tensor(dst2, &r, 2, g, LM_FLOAT64, EXP_VALUE, 40, "execute after the wait");
  }

  /* wrong tensors for the plan */
  {
    lm_dist_tensor_t wrong_layout = make_src(mesh, &s1, 2, g, LM_FLOAT64, 1);
    lm_dist_tensor_t wrong_dtype = make_src(mesh, &s0, 2, g, LM_INT64, 1);
    const int64_t g2[2] = {16, 9};
    lm_dist_tensor_t wrong_shape = make_src(mesh, &s0, 2, g2, LM_FLOAT64, 1);
    lm_dist_tensor_t srcs[3] = {wrong_layout, wrong_dtype, wrong_shape};
    for (int k = 0; k < 3; ++k) {
      lm_status_t st = lm_reshard_plan_execute(plan, srcs[k], dst);
      const char *msg = lm_last_error_message();
      int ok = st == LM_ERR_INVALID_ARGUMENT && strstr(msg, "src") != NULL;
      if (!ok) note("execute with a wrong src (%d): %s: \"%s\" (want INVALID_ARGUMENT naming src)",
                    k, lm_status_string(st), msg);
      lm_request_t req = NULL;
      st = lm_reshard_plan_start(&req, plan, srcs[k], dst);
      msg = lm_last_error_message();
      ok = st == LM_ERR_INVALID_ARGUMENT && strstr(msg, "src") != NULL && req == NULL;
      if (!ok) note("start with a wrong src (%d): %s: \"%s\"", k, lm_status_string(st), msg);
    }
    /* a wrong dst */
    lm_status_t st = lm_reshard_plan_execute(plan, src, wrong_layout);
    if (st != LM_ERR_INVALID_ARGUMENT || strstr(lm_last_error_message(), "dst") == NULL)
      note("execute with a wrong dst: %s: \"%s\"", lm_status_string(st), lm_last_error_message());
    /* src as dst */
    st = lm_reshard_plan_execute(plan, src, src);
    if (st != LM_ERR_INVALID_ARGUMENT) note("execute with dst == src: %s", lm_status_string(st));
    /* swapped: both fit the plan's other side (and were executed there), so both are checked
     * again (a match is remembered per side) */
    st = lm_reshard_plan_execute(plan, dst, src);
    if (st != LM_ERR_INVALID_ARGUMENT || strstr(lm_last_error_message(), "src has layout") == NULL)
      note("execute with src and dst swapped: %s: \"%s\"", lm_status_string(st),
           lm_last_error_message());
    lm_dist_tensor_destroy(&wrong_layout);
    lm_dist_tensor_destroy(&wrong_dtype);
    lm_dist_tensor_destroy(&wrong_shape);
    /* the plan still works */
    refill(src, &s0, 2, g, LM_FLOAT64, 41);
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst));
    check_tensor(dst, &r, 2, g, LM_FLOAT64, EXP_VALUE, 41, "after wrong tensors");
  }
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&plan));
  LM_ASSERT_ALL(plan == NULL);
  lm_dist_tensor_destroy(&dst);
  lm_dist_tensor_destroy(&dst2);
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&other);
  lm_mesh_destroy(&mesh);
  finish("nonblocking");
}

/* The same in-flight rules when some ranks hold no data: [1,1] S(0) -> S(1) leaves every rank
 * but 0 with empty shards. The refusals must still agree across ranks (the probes used here
 * never communicate, so a disagreement cannot hang). */
static void test_inflight_uninvolved_ranks(void **state) {
  (void)state;
  if (lm_test_size() < 2) lm_test_skip("needs 2 ranks or more (np 1)");
  lm_mesh_t mesh = make_1d();
  const int64_t g[2] = {1, 1}, gr[2] = {16, 2};
  lm_placement_t s0 = S_(0), s1 = S_(1), r = R_();
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, mesh, &s0, mesh, &s1, 2, g, LM_FLOAT64));
  lm_dist_tensor_t src = make_src(mesh, &s0, 2, g, LM_FLOAT64, 1), dst = NULL, dst2 = NULL, out = NULL;
  lm_dist_tensor_t rep = make_src(mesh, &r, 2, gr, LM_FLOAT64, 2);
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst2, plan, LM_CPU));
  lm_request_t req = NULL, req2 = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_start(&req, plan, src, dst));
  lm_status_t st = lm_reshard_plan_start(&req2, plan, src, dst2);
  if (st != LM_ERR_INVALID_ARGUMENT)
    note("second start on a plan in flight (first request %s on this rank): %s, want INVALID_ARGUMENT",
         req ? "non-NULL" : "NULL", lm_status_string(st));
  lm_status_t sw = lm_request_wait(&req2);
  (void)sw;
  /* R -> S(0) never communicates (a view): safe to probe */
  st = lm_dist_tensor_reshard(&out, rep, NULL, &s0);
  if (st != LM_ERR_INVALID_USAGE)
    note("reshard on a mesh with a request in flight (request %s on this rank): %s, want "
         "INVALID_USAGE", req ? "non-NULL" : "NULL", lm_status_string(st));
  lm_dist_tensor_destroy(&out);
  st = lm_reshard_plan_destroy(&plan);
  if (st != LM_ERR_INVALID_USAGE)
    note("destroying a plan in flight (request %s on this rank): %s, want INVALID_USAGE",
         req ? "non-NULL" : "NULL", lm_status_string(st));
  LM_ASSERT_OK_ALL(lm_request_wait(&req));
  check_tensor(dst, &s1, 2, g, LM_FLOAT64, EXP_VALUE, 1, "[1,1] S(0)->S(1) nonblocking");
  lm_reshard_plan_destroy(&plan);
  lm_dist_tensor_destroy(&dst);
  lm_dist_tensor_destroy(&dst2);
  lm_dist_tensor_destroy(&src);
  lm_dist_tensor_destroy(&rep);
  lm_mesh_destroy(&mesh);
  finish("in flight with uninvolved ranks");
}

/* ============================================================================ 6. bad inputs */
static void expect_status(const char *what, lm_status_t st, lm_status_t want, const void *out) {
  const char *msg = lm_last_error_message();
  if (st != want || msg[0] == 0 || out != NULL)
    note("%s: got %s (\"%s\", out %p), want %s with a message and out NULL", what,
         lm_status_string(st), msg, out, lm_status_string(want));
}

static void test_bad_inputs(void **state) {
  (void)state;
  lm_mesh_t mesh = make_1d();
  int64_t s2[2] = {1, lm_test_size()};
  lm_mesh_t mesh2 = make_mesh(2, s2, NULL, 0);
  const int64_t g[2] = {13, 3};
  lm_placement_t s0 = S_(0), r = R_();
  lm_dist_tensor_t src = make_src(mesh, &s0, 2, g, LM_FLOAT64, 1), out = NULL;
  lm_reshard_plan_t plan = NULL;
  lm_status_t st;

  /* NULL out / src / placements */
  st = lm_dist_tensor_reshard(NULL, src, NULL, &r);
  expect_status("reshard out NULL", st, LM_ERR_INVALID_ARGUMENT, NULL);
  st = lm_dist_tensor_reshard(&out, NULL, NULL, &r);
  expect_status("reshard src NULL", st, LM_ERR_INVALID_ARGUMENT, out);
  st = lm_dist_tensor_reshard(&out, src, NULL, NULL);
  expect_status("reshard placements NULL", st, LM_ERR_INVALID_ARGUMENT, out);
  st = lm_reshard_plan_create(NULL, mesh, &s0, mesh, &r, 2, g, LM_FLOAT64);
  expect_status("plan out NULL", st, LM_ERR_INVALID_ARGUMENT, NULL);
  st = lm_reshard_plan_create(&plan, NULL, &s0, mesh, &r, 2, g, LM_FLOAT64);
  expect_status("plan src_mesh NULL", st, LM_ERR_INVALID_ARGUMENT, plan);
  st = lm_reshard_plan_create(&plan, mesh, NULL, mesh, &r, 2, g, LM_FLOAT64);
  expect_status("plan src_placements NULL", st, LM_ERR_INVALID_ARGUMENT, plan);
  st = lm_reshard_plan_create(&plan, mesh, &s0, mesh, NULL, 2, g, LM_FLOAT64);
  expect_status("plan dst_placements NULL", st, LM_ERR_INVALID_ARGUMENT, plan);
  st = lm_reshard_plan_create(&plan, mesh, &s0, mesh, &r, 2, NULL, LM_FLOAT64);
  expect_status("plan global_shape NULL", st, LM_ERR_INVALID_ARGUMENT, plan);

  /* destroyed (the destroy sets NULL) and foreign handles */
  {
    lm_dist_tensor_t dead = make_src(mesh, &s0, 2, g, LM_FLOAT64, 1);
    lm_dist_tensor_destroy(&dead);
    if (dead != NULL) note("lm_dist_tensor_destroy did not set the handle to NULL");
    st = lm_dist_tensor_reshard(&out, dead, NULL, &r);
    expect_status("reshard destroyed src", st, LM_ERR_INVALID_ARGUMENT, out);
    /* a mesh handle passed as a tensor, and a zero-filled block */
    static uint64_t zeros[64];
    st = lm_dist_tensor_reshard(&out, (lm_dist_tensor_t)(void *)mesh, NULL, &r);
    expect_status("reshard src = a mesh handle", st, LM_ERR_INVALID_ARGUMENT, out);
    st = lm_dist_tensor_reshard(&out, (lm_dist_tensor_t)(void *)zeros, NULL, &r);
    expect_status("reshard src = zeros", st, LM_ERR_INVALID_ARGUMENT, out);
    st = lm_dist_tensor_reshard(&out, src, (lm_mesh_t)(void *)src, &r);
    expect_status("reshard dst_mesh = a tensor handle", st, LM_ERR_INVALID_ARGUMENT, out);
    st = lm_reshard_plan_create(&plan, (lm_mesh_t)(void *)src, &s0, mesh, &r, 2, g, LM_FLOAT64);
    expect_status("plan src_mesh = a tensor handle", st, LM_ERR_INVALID_ARGUMENT, plan);
    st = lm_reshard_plan_create(&plan, mesh, &s0, (lm_mesh_t)(void *)zeros, &r, 2, g, LM_FLOAT64);
    expect_status("plan dst_mesh = zeros", st, LM_ERR_INVALID_ARGUMENT, plan);
    /* a plan handle that is not one */
    lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
    st = lm_reshard_plan_info((lm_reshard_plan_t)(void *)src, 0, &info);
    expect_status("plan_info of a tensor handle", st, LM_ERR_INVALID_ARGUMENT, NULL);
    st = lm_reshard_plan_execute((lm_reshard_plan_t)(void *)zeros, src, src);
    expect_status("execute of zeros", st, LM_ERR_INVALID_ARGUMENT, NULL);
    st = lm_reshard_plan_execute(NULL, src, src);
    expect_status("execute of NULL", st, LM_ERR_INVALID_ARGUMENT, NULL);
  }

  /* placements out of range */
  {
    lm_placement_t bad[] = {
        S_(2),                             /* shard dim >= ndim */
        S_(-1),                            /* negative shard dim */
        /* kind, dim, order, reduce_op, extents, block, source, reserved */
        {7, 0, 0, 0, 0, 0, 0, 0},                      /* kind */
        {LM_PARTIAL, 0, 0, 9, 0, 0, 0, 0},             /* reduce_op */
        {LM_PARTIAL, 0, 0, -1, 0, 0, 0, 0},            /* reduce_op */
        {LM_REPLICATE, 1, 0, 0, 0, 0, 0, 0},           /* dim on Replicate */
        {LM_PARTIAL, 1, 0, LM_REDUCE_SUM, 0, 0, 0, 0}, /* dim on Partial */
        {LM_REPLICATE, 0, 1, 0, 0, 0, 0, 0},           /* order on Replicate */
        {LM_SHARD, 0, 0, LM_REDUCE_MAX, 0, 0, 0, 0},   /* reduce_op on Shard */
        {LM_SHARD, 0, -1, 0, 0, 0, 0, 0},              /* negative order */
        {LM_SHARD, 0, 0, 0, 1, 0, 0, 0},               /* extents on Shard */
        {LM_SHARD, 0, 0, 0, 0, 4, 0, 0},               /* block on Shard */
        {LM_PARTIAL, 0, 0, LM_REDUCE_SUM, 0, 0, 1, 0}, /* source on Partial */
        {LM_PARTIAL, 0, 1, LM_REDUCE_SUM, 0, 0, 0, 0}, /* order on Partial */
        {LM_SHARD, 0, 0, 0, 0, 0, 0, 1},               /* reserved */
        {LM_BLOCK_CYCLIC, 0, 0, 0, 0, 0, 0, 0},        /* block 0 */
        {LM_BLOCK_CYCLIC, 0, 1, 0, 0, 2, 0, 0},        /* order on BlockCyclic */
        {LM_BLOCK_CYCLIC, 0, 0, LM_REDUCE_MAX, 0, 2, 0, 0}, /* reduce_op on BlockCyclic */
        {LM_BLOCK_CYCLIC, 0, 0, 0, 0, 2, -1, 0},       /* negative source */
        {LM_RAGGED, 0, 0, 0, 0, 2, 0, 0},              /* block on Ragged */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
      char what[96];
      snprintf(what, sizeof what, "reshard to bad placement #%zu", k);
      st = lm_dist_tensor_reshard(&out, src, NULL, &bad[k]);
      expect_status(what, st, LM_ERR_INVALID_ARGUMENT, out);
      snprintf(what, sizeof what, "plan from bad placement #%zu", k);
      st = lm_reshard_plan_create(&plan, mesh, &bad[k], mesh, &r, 2, g, LM_FLOAT64);
      expect_status(what, st, LM_ERR_INVALID_ARGUMENT, plan);
      snprintf(what, sizeof what, "plan to bad placement #%zu", k);
      st = lm_reshard_plan_create(&plan, mesh, &r, mesh, &bad[k], 2, g, LM_FLOAT64);
      expect_status(what, st, LM_ERR_INVALID_ARGUMENT, plan);
    }
    /* plan with a tensor ndim that makes S(1) out of range, a negative ndim, a negative extent */
    lm_placement_t s1 = S_(1);
    const int64_t g1[1] = {13}, gneg[2] = {13, -3};
    st = lm_reshard_plan_create(&plan, mesh, &s1, mesh, &r, 1, g1, LM_FLOAT64);
    expect_status("plan S(1) on a 1-d tensor", st, LM_ERR_INVALID_ARGUMENT, plan);
    st = lm_reshard_plan_create(&plan, mesh, &s0, mesh, &r, -1, g, LM_FLOAT64);
    expect_status("plan ndim -1", st, LM_ERR_INVALID_ARGUMENT, plan);
    st = lm_reshard_plan_create(&plan, mesh, &s0, mesh, &r, 2, gneg, LM_FLOAT64);
    expect_status("plan negative extent", st, LM_ERR_INVALID_ARGUMENT, plan);
    st = lm_reshard_plan_create(&plan, mesh, &s0, mesh, &r, 2, g, LM_DTYPE(kDLFloat, 24));
    expect_status("plan unsupported dtype", st, LM_ERR_INVALID_ARGUMENT, plan);
    /* a 1-d placement list read for a 2-d mesh: the second entry is out of range */
    lm_placement_t two[2] = {R_(), S_(5)};
    st = lm_dist_tensor_reshard(&out, src, mesh2, two);
    expect_status("reshard to mesh2 with S(5) on mesh dim 1", st, LM_ERR_INVALID_ARGUMENT, out);
  }

  /* mixed Partial ops: NOT_SUPPORTED */
  {
    lm_placement_t mixed[2] = {P_(LM_REDUCE_SUM), P_(LM_REDUCE_MAX)}, rr[2] = {R_(), R_()};
    lm_dist_tensor_t src2 = make_src(mesh2, rr, 2, g, LM_FLOAT64, 1);
    st = lm_dist_tensor_reshard(&out, src2, NULL, mixed);
    expect_status("reshard to [P(sum), P(max)]", st, LM_ERR_NOT_SUPPORTED, out);
    st = lm_reshard_plan_create(&plan, mesh2, mixed, mesh2, rr, 2, g, LM_FLOAT64);
    expect_status("plan from [P(sum), P(max)]", st, LM_ERR_NOT_SUPPORTED, plan);
    st = lm_reshard_plan_create(&plan, mesh2, rr, mesh2, mixed, 2, g, LM_FLOAT64);
    expect_status("plan to [P(sum), P(max)]", st, LM_ERR_NOT_SUPPORTED, plan);
    lm_dist_tensor_t z = NULL;
    st = lm_dist_tensor_zeros(&z, mesh2, 2, g, LM_FLOAT64, LM_CPU, mixed);
    expect_status("zeros [P(sum), P(max)]", st, LM_ERR_NOT_SUPPORTED, z);
    lm_dist_tensor_destroy(&z);
    /* the source still works */
    lm_placement_t pm2[2] = {P_(LM_REDUCE_MAX), P_(LM_REDUCE_MAX)};
    pair_ok("after refusals", mesh2, rr, mesh2, pm2, 2, g, LM_FLOAT64, 0, EXP_RINIT, 9);
    lm_dist_tensor_destroy(&src2);
  }

  /* complex + P(max), bool + P(avg): NOT_SUPPORTED */
  {
    lm_dist_tensor_t c = NULL, b = NULL;
    lm_placement_t pmax = P_(LM_REDUCE_MAX), pmin = P_(LM_REDUCE_MIN), pavg = P_(LM_REDUCE_AVG);
    LM_ASSERT_OK(lm_dist_tensor_zeros(&c, mesh, 2, g, LM_COMPLEX128, LM_CPU, &r));
    LM_ASSERT_OK(lm_dist_tensor_zeros(&b, mesh, 2, g, LM_BOOL, LM_CPU, &r));
    st = lm_dist_tensor_reshard(&out, c, NULL, &pmax);
    expect_status("complex128 R -> P(max)", st, LM_ERR_NOT_SUPPORTED, out);
    st = lm_dist_tensor_reshard(&out, c, NULL, &pmin);
    expect_status("complex128 R -> P(min)", st, LM_ERR_NOT_SUPPORTED, out);
    st = lm_reshard_plan_create(&plan, mesh, &pmax, mesh, &r, 2, g, LM_COMPLEX64);
    expect_status("plan complex64 P(max) -> R", st, LM_ERR_NOT_SUPPORTED, plan);
    st = lm_dist_tensor_reshard(&out, b, NULL, &pavg);
    expect_status("bool R -> P(avg)", st, LM_ERR_NOT_SUPPORTED, out);
    st = lm_reshard_plan_create(&plan, mesh, &pavg, mesh, &s0, 2, g, LM_BOOL);
    expect_status("plan bool P(avg) -> S(0)", st, LM_ERR_NOT_SUPPORTED, plan);
    /* the allowed ones work */
    lm_placement_t psum = P_(LM_REDUCE_SUM);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, c, NULL, &psum));
    lm_dist_tensor_destroy(&out);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, b, NULL, &pmax));
    lm_dist_tensor_destroy(&out);
    lm_dist_tensor_destroy(&c);
    lm_dist_tensor_destroy(&b);
  }

  /* a different global shape between plan ends cannot be expressed; a mismatched mesh pair:
   * meshes from a non-congruent parent (MPI_Comm_split with reversed keys) */
  if (lm_test_size() > 1) {
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, lm_test_size() - lm_test_rank(), &rev);
    int cmp = MPI_UNEQUAL;
    MPI_Comm_compare(rev, MPI_COMM_WORLD, &cmp);
    LM_ASSERT_ALL(cmp == MPI_SIMILAR);
    int64_t s[1] = {lm_test_size()};
    lm_mesh_t other = NULL;
    LM_ASSERT_OK_ALL(lm_mesh_create_mpi(&other, rev, 1, s, NULL));
    st = lm_dist_tensor_reshard(&out, src, other, &r);
    expect_status("reshard to a mesh of another parent", st, LM_ERR_INVALID_ARGUMENT, out);
    st = lm_reshard_plan_create(&plan, mesh, &s0, other, &r, 2, g, LM_FLOAT64);
    expect_status("plan to a mesh of another parent", st, LM_ERR_INVALID_ARGUMENT, plan);
    st = lm_reshard_plan_create(&plan, other, &s0, mesh, &r, 2, g, LM_FLOAT64);
    expect_status("plan from a mesh of another parent", st, LM_ERR_INVALID_ARGUMENT, plan);
    lm_mesh_destroy(&other);
    MPI_Comm_free(&rev);
  }

  /* after all that, the source and the mesh still work */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&out, src, NULL, &r));
  check_tensor(out, &r, 2, g, LM_FLOAT64, EXP_VALUE, 1, "reshard after bad inputs");
  lm_dist_tensor_destroy(&out);
  lm_dist_tensor_destroy(&src);
  lm_mesh_destroy(&mesh);
  lm_mesh_destroy(&mesh2);
  finish("bad inputs");
}

/* ============================================================================ 0-d tensors */
/* A scalar (0-d) dist tensor holds one element on every member. Every pair of the placements a
 * 0-d tensor can have (R, P(sum), P(max), P(avg), P(min), P(prod); 2-D meshes mix them), on the
 * 1-D mesh, across to the reversed mesh and from the first half of the ranks, and on a 2-D mesh
 * when the size allows, by every path; then gather, from_global, from_local, export, and Shard
 * refused at the call that asks for it. */
static void run_0d_pairs(const char *prefix, lm_mesh_t sm, lm_mesh_t dm,
                         lm_placement_t (*lists)[2], int nl, int *npairs) {
  const DLDataType dts[2] = {LM_FLOAT64, LM_INT64};
  minfo_t smi = minfo(sm), dmi = minfo(dm);
  for (int a = 0; a < nl; ++a)
    for (int b = 0; b < nl; ++b)
      for (int t = 0; t < 2; ++t) {
        const lm_placement_t *sp = lists[a], *dp = lists[b];
        int path = (a + b + t) % 3, salt = 3 * a + b + t;
        int sop = partial_op(sp, smi.mdim), dop = partial_op(dp, dmi.mdim);
        if (is_int(dts[t]) && (sop == LM_REDUCE_PROD || dop == LM_REDUCE_PROD)) continue;
        if (sop >= 0 && dop >= 0 && sop != dop) {
          lm_dist_tensor_t src = make_src(sm, sp, 0, NULL, dts[t], salt), dst = NULL;
          lm_status_t st = do_reshard(src, sm, sp, dm, dp, 0, NULL, dts[t], path, &dst);
          if (st != LM_ERR_INVALID_ARGUMENT || dst != NULL)
            note("%s 0-d P(%s)->P(%s): got %s, want INVALID_ARGUMENT", prefix, op_name(sop),
                 op_name(dop), lm_status_string(st));
          lm_dist_tensor_destroy(&dst);
          lm_dist_tensor_destroy(&src);
          continue;
        }
        int raw = sm == dm ? raw_kind_of(sp, dp, smi.mdim) : EXP_VALUE;
        if (sm != dm && dop >= 0 && sop < 0) raw = EXP_VALUE; /* cross-mesh R->P: values only */
        pair_ok(prefix, sm, sp, dm, dp, 0, NULL, dts[t], path, raw, salt);
        ++*npairs;
      }
}

static void test_0d_all_pairs(void **state) {
  (void)state;
  int n = lm_test_size(), npairs = 0;
  lm_mesh_t mesh = make_1d();
  static lm_placement_t l1[6][2];
  int nl1 = 0;
  l1[nl1++][0] = R_();
  for (int op = LM_REDUCE_SUM; op <= LM_REDUCE_PROD; ++op) l1[nl1++][0] = P_(op);
  run_0d_pairs("0-d 1d", mesh, mesh, l1, nl1, &npairs);
  /* across meshes: reversed ranks, and a mesh over the first half of the ranks */
  {
    int ranks[64];
    int64_t s[1] = {n};
    for (int i = 0; i < n; ++i) ranks[i] = n - 1 - i;
    lm_mesh_t rev = make_mesh(1, s, ranks, n);
    run_0d_pairs("0-d 1d->reversed", mesh, rev, l1, nl1, &npairs);
    s[0] = (n + 1) / 2;
    for (int i = 0; i < s[0]; ++i) ranks[i] = i;
    lm_mesh_t half = make_mesh(1, s, ranks, (int)s[0]);
    run_0d_pairs("0-d half->1d", half, mesh, l1, nl1, &npairs);
    lm_mesh_destroy(&half);
    lm_mesh_destroy(&rev);
  }
  if (n % 2 == 0 && n >= 4) {
    int64_t s[2] = {2, n / 2};
    lm_mesh_t m2 = make_mesh(2, s, NULL, 0);
    static lm_placement_t l2[8][2];
    int nl2 = 0;
    const lm_placement_t b[4] = {R_(), P_(LM_REDUCE_SUM), P_(LM_REDUCE_AVG), P_(LM_REDUCE_MAX)};
    for (int i = 0; i < 4; ++i) {
      l2[nl2][0] = b[i];
      l2[nl2++][1] = R_();
    }
    l2[nl2][0] = R_(); l2[nl2++][1] = P_(LM_REDUCE_SUM);
    l2[nl2][0] = P_(LM_REDUCE_SUM); l2[nl2++][1] = P_(LM_REDUCE_SUM);
    l2[nl2][0] = P_(LM_REDUCE_AVG); l2[nl2++][1] = P_(LM_REDUCE_AVG);
    l2[nl2][0] = R_(); l2[nl2++][1] = P_(LM_REDUCE_MIN);
    run_0d_pairs("0-d 2d", m2, m2, l2, nl2, &npairs);
    lm_mesh_destroy(&m2);
  }
  if (lm_test_rank() == 0) printf("0-d: %d pairs checked\n", npairs);
  lm_mesh_destroy(&mesh);
  finish("0-d all pairs");
}

static void test_0d_entry_points(void **state) {
  (void)state;
  lm_mesh_t mesh = make_1d();
  minfo_t mi = minfo(mesh);
  lm_placement_t psum[1] = {P_(LM_REDUCE_SUM)}, pavg[1] = {P_(LM_REDUCE_AVG)}, rep[1] = {R_()},
                 sh[1] = {S_(0)};
  int n = lm_test_size(), me = (int)mi.coord[0];
  /* from_local of a Partial scalar: every rank holds rank+1; gather reduces (every rank, root) */
  {
    double mine = (double)(me + 1), got = -1, want = n * (n + 1) / 2.0;
    DLTensor l = {&mine, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
    DLTensor d = {&got, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
    lm_dist_tensor_t t = NULL, r = NULL, a = NULL;
    for (int mode = 0; mode < 3; ++mode) {
      LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, mesh, &l, psum, (lm_shape_mode_t)mode, NULL,
                                                 LM_FROM_LOCAL_COPY));
      int nd = -1;
      LM_ASSERT_OK(lm_dist_tensor_ndim(t, &nd));
      if (nd != 0) note("from_local 0-d mode %d: ndim %d", mode, nd);
      got = -1;
      LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &d));
      if (got != want) note("gather of a P(sum) scalar: %g, want %g", got, want);
      got = -1;
      LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, 0, me == 0 ? &d : NULL));
      if (me == 0 && got != want) note("gather to root of a P(sum) scalar: %g, want %g", got, want);
      lm_dist_tensor_destroy(&t);
    }
    /* P(avg) -> R, then R -> P(sum) -> P(sum) */
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, mesh, &l, pavg, LM_SHAPE_GIVEN, NULL,
                                               LM_FROM_LOCAL_BORROW));
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, rep));
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(r, &v));
    if (v.ndim != 0 || *(double *)v.data != (n + 1) / 2.0)
      note("P(avg)->R of a scalar: ndim %d value %g, want %g", v.ndim, *(double *)v.data,
           (n + 1) / 2.0);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&a, r, NULL, psum));
    lm_dist_tensor_destroy(&t);
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&t, a, NULL, psum));
    got = -1;
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &d));
    if (got != (n + 1) / 2.0) note("R->P(sum)->P(sum)->gather of a scalar: %g", got);
    /* export: a 0-d DLManagedTensor */
    DLManagedTensor *mt = NULL;
    LM_ASSERT_OK(lm_dist_tensor_to_dlpack(r, &mt));
    if (mt->dl_tensor.ndim != 0 || *(double *)mt->dl_tensor.data != (n + 1) / 2.0)
      note("export of a 0-d tensor: ndim %d", mt->dl_tensor.ndim);
    mt->deleter(mt);
    lm_dist_tensor_destroy(&t);
    lm_dist_tensor_destroy(&a);
    lm_dist_tensor_destroy(&r);
  }
  /* from_global with Partial, both modes: the root's value is the value */
  {
    int64_t full = 42, got = 0;
    DLTensor g = {&full, LM_CPU, 0, LM_INT64, NULL, NULL, 0};
    DLTensor d = {&got, LM_CPU, 0, LM_INT64, NULL, NULL, 0};
    lm_placement_t pmax[1] = {P_(LM_REDUCE_MAX)};
    for (int root = -1; root <= 0; ++root) {
      lm_dist_tensor_t t = NULL;
      LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, mesh, root < 0 || me == 0 ? &g : NULL, pmax,
                                                  root));
      got = 0;
      LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &d));
      if (got != 42) note("from_global(root %d) P(max) scalar gathered %lld", root, (long long)got);
      lm_dist_tensor_destroy(&t);
    }
  }
  /* Shard of a 0-d tensor: refused where it is asked for, naming the argument */
  {
    lm_dist_tensor_t t = NULL, o = NULL;
    lm_reshard_plan_t plan = NULL;
    double x = 1;
    DLTensor l = {&x, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 0, NULL, LM_FLOAT64, LM_CPU, sh),
                  LM_ERR_INVALID_ARGUMENT, "placements[0]");
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, mesh, &l, sh, LM_SHAPE_GIVEN, NULL, 0),
                  LM_ERR_INVALID_ARGUMENT, "placements[0]");
    LM_EXPECT_ALL(lm_dist_tensor_from_global(&t, mesh, &l, sh, -1), LM_ERR_INVALID_ARGUMENT,
                  "placements[0]");
    LM_EXPECT_ALL(lm_reshard_plan_create(&plan, mesh, psum, mesh, sh, 0, NULL, LM_FLOAT64),
                  LM_ERR_INVALID_ARGUMENT, "dst_placements[0]");
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, mesh, 0, NULL, LM_FLOAT64, LM_CPU, psum));
    LM_EXPECT_ALL(lm_dist_tensor_reshard(&o, t, NULL, sh), LM_ERR_INVALID_ARGUMENT,
                  "placements[0]");
    LM_ASSERT_ALL(o == NULL);
    lm_dist_tensor_destroy(&t);
  }
  lm_mesh_destroy(&mesh);
  finish("0-d entry points");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_1d_all_pairs),
    cmocka_unit_test(test_bytes_sent),
    cmocka_unit_test(test_mesh_2x2_all_pairs),
    cmocka_unit_test(test_mesh_2x2x2_pairs),
    cmocka_unit_test(test_coshard_order),
    cmocka_unit_test(test_cross_mesh_pipeline),
    cmocka_unit_test(test_cross_mesh_bystanders),
    cmocka_unit_test(test_cross_mesh_overlap),
    cmocka_unit_test(test_cross_mesh_dup_parent),
    cmocka_unit_test(test_persistent_plan),
    cmocka_unit_test(test_nonblocking),
    cmocka_unit_test(test_inflight_uninvolved_ranks),
    cmocka_unit_test(test_bad_inputs),
    cmocka_unit_test(test_0d_all_pairs),
    cmocka_unit_test(test_0d_entry_points),
};

LM_TEST_MAIN(tests)
