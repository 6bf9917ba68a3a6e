/* SPDX-License-Identifier: BSD-3-Clause */
// lm-test-np: 1 2 3 4 8
/*
 * lm_local_map: argument unwrapping and pass-through, mesh inference, input placements and
 * resharding (also across meshes), output wrapping and global-shape modes, failure agreement
 * (no hang, no leak), per-dim communicators inside fn, ranks outside the mesh, bad arguments.
 *
 * Every DLManagedTensor that fn hands over comes from mt_new(); its deleter counts into
 * g_deleted, so each test checks that exactly the tensors it expects were freed.
 */
#include "lm_test.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */
static int g_deleted = 0; /* managed tensors freed by their deleter (this rank) */
static int g_created = 0; /* managed tensors made by mt_new (this rank) */

static void mt_deleter(DLManagedTensor *m) {
  free(m->dl_tensor.data);
  free(m->dl_tensor.shape);
  free(m);
  g_deleted++;
}

/* A compact float64 (or dtype) managed tensor: malloc'd struct, shape and data. */
static DLManagedTensor *mt_new_dtype(int ndim, const int64_t *shape, DLDataType dtype) {
  DLManagedTensor *m = (DLManagedTensor *)calloc(1, sizeof *m);
  int64_t n = 1;
  int d;
  for (d = 0; d < ndim; d++) n *= shape[d];
  m->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ndim > 0 ? ndim : 1));
  for (d = 0; d < ndim; d++) m->dl_tensor.shape[d] = shape[d];
  m->dl_tensor.data = calloc((size_t)(n > 0 ? n : 1), dtype.bits / 8);
  m->dl_tensor.ndim = ndim;
  m->dl_tensor.dtype = dtype;
  m->dl_tensor.device = LM_CPU;
  m->dl_tensor.strides = NULL;
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = NULL;
  m->deleter = mt_deleter;
  g_created++;
  return m;
}

static DLManagedTensor *mt_new(int ndim, const int64_t *shape) {
  return mt_new_dtype(ndim, shape, LM_FLOAT64);
}

static double *mt_data(DLManagedTensor *m) { return (double *)m->dl_tensor.data; }

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

static lm_arg_t arg_dist(lm_dist_tensor_t t) {
  lm_arg_t a = {LM_ARG_DIST_TENSOR, 0, 0, 0.0, t};
  return a;
}
static lm_arg_t arg_tensor(DLTensor *t) {
  lm_arg_t a = {LM_ARG_TENSOR, 0, 0, 0.0, t};
  return a;
}
static lm_arg_t arg_i64(int64_t v) {
  lm_arg_t a = {LM_ARG_INT64, 0, v, 0.0, NULL};
  return a;
}
static lm_arg_t arg_f64(double v) {
  lm_arg_t a = {LM_ARG_DOUBLE, 0, 0, v, NULL};
  return a;
}
static lm_arg_t arg_ptr(void *p) {
  lm_arg_t a = {LM_ARG_POINTER, 0, 0, 0.0, p};
  return a;
}
static lm_arg_t arg_none(void) {
  lm_arg_t a = {LM_ARG_NONE, 0, 0, 0.0, NULL};
  return a;
}

/* The 1-D mesh over every rank of MPI_COMM_WORLD, in order. */
/* The 1-D mesh over the world ranks in reverse order. */
static lm_mesh_t reversed_mesh(void) {
  lm_mesh_t m = NULL;
  int n = lm_test_size();
  int ranks[64];
  int64_t shape[1] = {n};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  for (int i = 0; i < n; i++) ranks[i] = n - 1 - i;
  cfg.ranks = ranks;
  cfg.nranks = n;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  return m;
}

/* A 2-D mesh {d0, d1} over the world: 2 columns when the size is even. */
static lm_mesh_t grid_mesh(int64_t *d0, int64_t *d1) {
  lm_mesh_t m = NULL;
  int n = lm_test_size();
  int64_t shape[2];
  shape[1] = (n % 2 == 0) ? 2 : 1;
  shape[0] = n / shape[1];
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape, NULL));
  *d0 = shape[0];
  *d1 = shape[1];
  return m;
}

/* Fills g[rows][cols] with row * 100 + col and builds a tensor from it (every rank has it). */
static double *global_matrix(int64_t rows, int64_t cols) {
  double *g = (double *)malloc(sizeof(double) * (size_t)(rows * cols > 0 ? rows * cols : 1));
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) g[i * cols + j] = (double)(i * 100 + j);
  return g;
}

static lm_dist_tensor_t dist_from(lm_mesh_t mesh, double *g, int64_t rows, int64_t cols,
                                  const lm_placement_t *pl) {
  lm_dist_tensor_t t = NULL;
  int64_t shape[2] = {rows, cols};
  DLTensor full = {g, LM_CPU, 2, LM_FLOAT64, shape, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, mesh, &full, pl, -1));
  return t;
}

/* Gathers a float64 tensor of `n` elements on every rank into a malloc'd buffer. */
static double *gather_all(lm_dist_tensor_t t, int ndim, const int64_t *gshape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= gshape[d];
  double *buf = (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  DLTensor dst = {buf, LM_CPU, ndim, LM_FLOAT64, (int64_t *)gshape, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &dst));
  return buf;
}

static int same_doubles(const double *a, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static int has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

/* Calls lm_local_map and copies the error message (later calls may overwrite it). */
static char g_msg[2048];
static lm_status_t call_lm(lm_local_fn_t fn, void *ud, int nin, const lm_arg_t *in,
                           const lm_placement_t *const *inpl, int nout,
                           const lm_placement_t *const *outpl, const int64_t *const *oshapes,
                           lm_mesh_t mesh, unsigned flags, lm_arg_t *out) {
  lm_status_t st = lm_local_map(fn, ud, nin, in, inpl, nout, outpl, oshapes, mesh, flags, out);
  snprintf(g_msg, sizeof g_msg, "%s", lm_last_error_message());
  if (st != LM_SUCCESS && lm_test__abort_mode == 0 && getenv("LM_TEST_VERBOSE") != NULL)
    fprintf(stderr, "rank %d: %s: %s\n", lm_test_rank(), lm_status_string(st), g_msg);
  return st;
}

static int all_none(const lm_arg_t *out, int n) {
  for (int i = 0; i < n; i++)
    if (out[i].kind != LM_ARG_NONE || out[i].ptr != NULL) return 0;
  return 1;
}

static void destroy_outputs(lm_arg_t *out, int n) {
  for (int i = 0; i < n; i++) {
    if (out[i].kind == LM_ARG_DIST_TENSOR) {
      lm_dist_tensor_t t = (lm_dist_tensor_t)out[i].ptr;
      lm_dist_tensor_destroy(&t);
      out[i] = arg_none();
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * User functions
 * ------------------------------------------------------------------------------------------- */
/* Scales the first input (a tensor) by inputs[1].f64 (default 2) into a new tensor of the same
 * local shape. Records the mesh it saw and how often it ran. */
typedef struct {
  lm_mesh_t seen_mesh;
  int calls;
  int64_t seen_shape[2];
} scale_state;

static lm_status_t scale_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  scale_state *s = (scale_state *)ud;
  const DLTensor *x;
  double k = (nin > 1 && in[1].kind == LM_ARG_DOUBLE) ? in[1].f64 : 2.0;
  DLManagedTensor *m;
  s->calls++;
  s->seen_mesh = mesh;
  if (nin < 1 || in[0].kind != LM_ARG_TENSOR || nout < 1) {
    lm_set_error_message("scale_fn: bad arguments");
    return LM_ERR_INVALID_ARGUMENT;
  }
  x = (const DLTensor *)in[0].ptr;
  for (int d = 0; d < x->ndim && d < 2; d++) s->seen_shape[d] = x->shape[d];
  m = mt_new(x->ndim, x->shape);
  for (int64_t i = 0; i < numel(x); i++) mt_data(m)[i] = k * ((const double *)x->data)[i];
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = m;
  return LM_SUCCESS;
}

/* Checks that each TENSOR input is this rank's S(0) shard (on fn's 1-D mesh) of the global
 * matrix g[rows][cols]; writes the verdict into ok. */
typedef struct {
  const double *g;
  int64_t rows, cols;
  int ok;
  int ntensors;
  lm_mesh_t seen_mesh;
} shard_check;

static lm_status_t check_shards_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in,
                                   int nout, lm_arg_t *out) {
  shard_check *c = (shard_check *)ud;
  int64_t msize = 1, off = 0, len = 0;
  int mrank = 0;
  (void)nout;
  (void)out;
  c->ok = 1;
  c->ntensors = 0;
  c->seen_mesh = mesh;
  if (lm_mesh_shape(mesh, &msize, 1) != LM_SUCCESS || lm_mesh_rank(mesh, &mrank) != LM_SUCCESS ||
      lm_layout_chunk(c->rows, msize, mrank, &off, &len) != LM_SUCCESS) {
    c->ok = 0;
    return LM_SUCCESS;
  }
  for (int i = 0; i < nin; i++) {
    const DLTensor *t;
    if (in[i].kind != LM_ARG_TENSOR) continue;
    c->ntensors++;
    t = (const DLTensor *)in[i].ptr;
    if (t->ndim != 2 || t->shape[0] != len || t->shape[1] != c->cols) {
      c->ok = 0;
      continue;
    }
    if (!same_doubles((const double *)t->data, c->g + off * c->cols, len * c->cols)) c->ok = 0;
  }
  return LM_SUCCESS;
}

/* Returns outputs as the test asks: kinds[j] per output (LM_ARG_MANAGED_TENSOR makes an [n]
 * tensor of value `fill`), and fails on `fail_rank` (world rank; -1: never) after making them.
 * rows_of_rank: if set, the tensor outputs get shape [rows_of_rank[rank], 2] instead. */
typedef struct {
  int nout;
  int kinds[8];
  int64_t n;
  double fill;
  int fail_rank;     /* world rank that fails, -1 none */
  int fail_rank2;    /* a second failing rank, -1 none */
  int ndim_of_rank0; /* 0: all 1-D; else rank 0 makes outputs with this ndim, others 1-D */
  const int64_t *rows_of_rank;
  lm_dist_tensor_t give_dist; /* for kind LM_ARG_DIST_TENSOR */
  DLTensor *give_tensor;      /* for kind LM_ARG_TENSOR */
  int calls;
} maker;

static lm_status_t maker_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  maker *mk = (maker *)ud;
  int r = lm_test_rank();
  (void)mesh;
  (void)nin;
  (void)in;
  mk->calls++;
  for (int j = 0; j < nout && j < mk->nout; j++) {
    switch (mk->kinds[j]) {
      case LM_ARG_MANAGED_TENSOR: {
        DLManagedTensor *m;
        if (mk->rows_of_rank != NULL) {
          int64_t shape[2] = {mk->rows_of_rank[r], 2};
          if (mk->ndim_of_rank0 == 1 && r == 0) {
            m = mt_new(1, shape);
          } else {
            m = mt_new(2, shape);
          }
        } else if (mk->ndim_of_rank0 == 2 && r == 0) {
          int64_t shape[2] = {mk->n, 1};
          m = mt_new(2, shape);
        } else {
          int64_t shape[1] = {mk->n};
          m = mt_new(1, shape);
        }
        for (int64_t i = 0; i < numel(&m->dl_tensor); i++) mt_data(m)[i] = mk->fill + (double)i;
        out[j].kind = LM_ARG_MANAGED_TENSOR;
        out[j].ptr = m;
        break;
      }
      case LM_ARG_INT64: out[j] = arg_i64(40 + j); break;
      case LM_ARG_DOUBLE: out[j] = arg_f64(0.5 + j); break;
      case LM_ARG_POINTER: out[j] = arg_ptr(mk); break;
      case LM_ARG_DIST_TENSOR: out[j] = arg_dist(mk->give_dist); break;
      case LM_ARG_TENSOR: out[j] = arg_tensor(mk->give_tensor); break;
      default: out[j] = arg_none(); break;
    }
  }
  if (r == mk->fail_rank || r == mk->fail_rank2) {
    char buf[128];
    snprintf(buf, sizeof buf, "maker_fn: boom on rank %d", r);
    lm_set_error_message(buf);
    return LM_ERR_INVALID_ARGUMENT;
  }
  return LM_SUCCESS;
}

static maker maker_init(void) {
  maker mk;
  memset(&mk, 0, sizeof mk);
  mk.fail_rank = -1;
  mk.fail_rank2 = -1;
  mk.n = 3;
  return mk;
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------------------------- */

/* NULL in_placements, mesh inferred from the dist input, uneven S(0) output with the default
 * (allgather) shape mode; the output's deleter runs only when the dist tensor dies. */
static void test_inferred_mesh_null_in_placements(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int64_t rows = 2 * lm_test_size() + 1, cols = 3; /* uneven on every np > 1 */
  double *g = global_matrix(rows, cols);
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, s0);
  scale_state s;
  memset(&s, 0, sizeof s);
  lm_arg_t in[2] = {arg_dist(x), arg_f64(3.0)};
  const lm_placement_t *outpl[1] = {s0};
  lm_arg_t out[1];
  int del0 = g_deleted;
  int64_t lshape[2] = {0, 0}, gshape[2] = {0, 0}, off = 0, len = 0;

  LM_ASSERT_OK_ALL(call_lm(scale_fn, &s, 2, in, NULL, 1, outpl, NULL, NULL, 0, out));
  LM_ASSERT_ALL(s.calls == 1 && s.seen_mesh == mesh);
  LM_ASSERT_OK_ALL(lm_layout_chunk(rows, lm_test_size(), lm_test_rank(), &off, &len));
  LM_ASSERT_ALL(s.seen_shape[0] == len && s.seen_shape[1] == cols);
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && out[0].ptr != NULL);
  lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
  LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape(y, gshape, 2));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_shape(y, lshape, 2));
  LM_ASSERT_ALL(gshape[0] == rows && gshape[1] == cols && lshape[0] == len && lshape[1] == cols);
  lm_mesh_t ymesh = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh(y, &ymesh));
  LM_ASSERT_ALL(ymesh == mesh);

  double *full = gather_all(y, 2, gshape);
  int ok = 1;
  for (int64_t i = 0; i < rows * cols; i++) ok &= full[i] == 3.0 * g[i];
  LM_ASSERT_ALL(ok);
  LM_ASSERT_ALL(g_deleted == del0); /* alive while y lives */
  LM_ASSERT_OK_ALL(lm_dist_tensor_retain(y));
  lm_dist_tensor_t y2 = y;
  lm_dist_tensor_destroy(&y2);
  LM_ASSERT_ALL(g_deleted == del0); /* one reference left */
  lm_dist_tensor_destroy(&y);
  LM_ASSERT_ALL(g_deleted == del0 + 1);

  /* The input is untouched. */
  double *xfull = gather_all(x, 2, gshape);
  LM_ASSERT_ALL(same_doubles(xfull, g, rows * cols));
  free(xfull);
  free(full);
  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}

/* Every argument kind passes through: dist -> TENSOR view, the rest unchanged; fn returns every
 * kind of result. */
typedef struct {
  DLTensor *plain;
  void *cookie;
  int ok;
  const double *g;
  int64_t rows, cols;
} mixed_state;

static lm_status_t mixed_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  mixed_state *s = (mixed_state *)ud;
  int64_t off = 0, len = 0, msize = 0;
  int mrank = 0;
  s->ok = nin == 6 && nout == 6;
  if (!s->ok) return LM_ERR_INVALID_ARGUMENT;
  s->ok &= lm_mesh_shape(mesh, &msize, 1) == LM_SUCCESS && lm_mesh_rank(mesh, &mrank) == LM_SUCCESS;
  s->ok &= lm_layout_chunk(s->rows, msize, mrank, &off, &len) == LM_SUCCESS;
  /* 0: dist -> local view */
  s->ok &= in[0].kind == LM_ARG_TENSOR && in[0].ptr != NULL;
  if (s->ok) {
    const DLTensor *v = (const DLTensor *)in[0].ptr;
    s->ok &= v->ndim == 2 && v->shape[0] == len && v->shape[1] == s->cols;
    s->ok &= v->dtype.code == kDLFloat && v->dtype.bits == 64 && v->device.device_type == kDLCPU;
    s->ok &= v->strides == NULL || (v->strides[0] == s->cols && v->strides[1] == 1);
    if (s->ok)
      s->ok &= same_doubles((const double *)((const char *)v->data + v->byte_offset),
                            s->g + off * s->cols, len * s->cols);
  }
  /* 1: plain DLTensor, the same pointer */
  s->ok &= in[1].kind == LM_ARG_TENSOR && in[1].ptr == s->plain;
  s->ok &= in[2].kind == LM_ARG_INT64 && in[2].i64 == -1234567890123LL;
  s->ok &= in[3].kind == LM_ARG_DOUBLE && in[3].f64 == 2.75;
  s->ok &= in[4].kind == LM_ARG_POINTER && in[4].ptr == s->cookie;
  s->ok &= in[5].kind == LM_ARG_NONE;
  /* outputs start as NONE */
  for (int j = 0; j < nout; j++) s->ok &= out[j].kind == LM_ARG_NONE;

  out[0] = arg_i64(in[2].i64 + 1);
  out[1] = arg_f64(in[3].f64 * 2);
  out[2] = arg_ptr(in[4].ptr);
  out[3] = arg_none();
  {
    /* 4: the plain tensor's sum + this rank's shard sum as a Partial(sum) scalar [1] */
    int64_t one[1] = {1};
    DLManagedTensor *m = mt_new(1, one);
    const DLTensor *v = (const DLTensor *)in[0].ptr;
    double acc = 0;
    for (int64_t i = 0; i < numel(v); i++) acc += ((const double *)v->data)[i];
    mt_data(m)[0] = acc;
    out[4].kind = LM_ARG_MANAGED_TENSOR;
    out[4].ptr = m;
  }
  {
    /* 5: an int32 replicated copy of the plain tensor */
    DLManagedTensor *m = mt_new_dtype(1, s->plain->shape, LM_INT32);
    for (int64_t i = 0; i < s->plain->shape[0]; i++)
      ((int32_t *)m->dl_tensor.data)[i] = (int32_t)((const double *)s->plain->data)[i];
    out[5].kind = LM_ARG_MANAGED_TENSOR;
    out[5].ptr = m;
  }
  return LM_SUCCESS;
}

static void test_mixed_inputs_and_outputs(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int64_t rows = lm_test_size() + 2, cols = 2;
  double *g = global_matrix(rows, cols);
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, s0);
  double plain_data[4] = {1, 2, 3, 4};
  int64_t plain_shape[1] = {4};
  DLTensor plain = {plain_data, LM_CPU, 1, LM_FLOAT64, plain_shape, NULL, 0};
  int cookie = 7;
  mixed_state s = {&plain, &cookie, 0, g, rows, cols};
  lm_arg_t in[6] = {arg_dist(x), arg_tensor(&plain), arg_i64(-1234567890123LL), arg_f64(2.75),
                    arg_ptr(&cookie), arg_none()};
  const lm_placement_t *inpl[6] = {s0, NULL, NULL, NULL, NULL, NULL};
  const lm_placement_t *outpl[6] = {NULL, NULL, NULL, NULL, psum, rep};
  lm_arg_t out[6];
  int del0 = g_deleted;

  LM_ASSERT_OK_ALL(call_lm(mixed_fn, &s, 6, in, inpl, 6, outpl, NULL, NULL, 0, out));
  LM_ASSERT_ALL(s.ok);
  LM_ASSERT_ALL(out[0].kind == LM_ARG_INT64 && out[0].i64 == -1234567890122LL);
  LM_ASSERT_ALL(out[1].kind == LM_ARG_DOUBLE && out[1].f64 == 5.5);
  LM_ASSERT_ALL(out[2].kind == LM_ARG_POINTER && out[2].ptr == &cookie);
  LM_ASSERT_ALL(out[3].kind == LM_ARG_NONE);
  LM_ASSERT_ALL(out[4].kind == LM_ARG_DIST_TENSOR && out[5].kind == LM_ARG_DIST_TENSOR);

  /* Partial(sum) of the shard sums is the total sum. */
  int64_t one[1] = {1};
  double *total = gather_all((lm_dist_tensor_t)out[4].ptr, 1, one);
  double expect = 0;
  for (int64_t i = 0; i < rows * cols; i++) expect += g[i];
  LM_ASSERT_ALL(total[0] == expect);
  free(total);

  lm_placement_t pl[1];
  DLDataType dt;
  LM_ASSERT_OK_ALL(lm_dist_tensor_placements((lm_dist_tensor_t)out[4].ptr, pl, 1));
  LM_ASSERT_ALL(pl[0].kind == LM_PARTIAL && pl[0].reduce_op == LM_REDUCE_SUM);
  LM_ASSERT_OK_ALL(lm_dist_tensor_dtype((lm_dist_tensor_t)out[5].ptr, &dt));
  LM_ASSERT_ALL(dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1);
  {
    int32_t got[4] = {0, 0, 0, 0};
    DLTensor dst = {got, LM_CPU, 1, LM_INT32, plain_shape, NULL, 0};
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather((lm_dist_tensor_t)out[5].ptr, -1, &dst));
    LM_ASSERT_ALL(got[0] == 1 && got[1] == 2 && got[2] == 3 && got[3] == 4);
  }
  LM_ASSERT_ALL(g_deleted == del0);
  destroy_outputs(out, 6);
  LM_ASSERT_ALL(g_deleted == del0 + 2);

  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}

/* A given mesh and no dist input: tensor outputs are wrapped on it; no mesh and no dist input
 * while an output needs placements: an error before fn runs; no mesh at all and only scalar
 * outputs: fine, fn sees mesh NULL. */
static lm_status_t count_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  int *calls = (int *)ud;
  (void)mesh;
  (*calls)++;
  for (int j = 0; j < nout; j++) out[j] = arg_i64(nin > 0 ? in[0].i64 * 10 + j : j);
  return LM_SUCCESS;
}

static lm_status_t no_mesh_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                              lm_arg_t *out) {
  int *seen_null = (int *)ud;
  (void)nin;
  (void)in;
  *seen_null = mesh == NULL;
  if (nout > 0) out[0] = arg_f64(1.5);
  return LM_SUCCESS;
}

static void test_mesh_given_or_missing(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  const lm_placement_t *outpl[2] = {rep, psum};
  lm_arg_t in[1] = {arg_i64(5)};
  lm_arg_t out[2];
  maker mk = maker_init();
  int del0 = g_deleted;

  /* Given mesh, no dist input: two tensor outputs wrapped on it. */
  mk.nout = 2;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.kinds[1] = LM_ARG_MANAGED_TENSOR;
  mk.n = 3;
  mk.fill = 1.0;
  LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 1, in, NULL, 2, outpl, NULL, mesh, 0, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && out[1].kind == LM_ARG_DIST_TENSOR);
  lm_mesh_t got = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_mesh((lm_dist_tensor_t)out[0].ptr, &got));
  LM_ASSERT_ALL(got == mesh);
  int64_t three[1] = {3};
  double *r0 = gather_all((lm_dist_tensor_t)out[0].ptr, 1, three);
  double *r1 = gather_all((lm_dist_tensor_t)out[1].ptr, 1, three);
  double n = lm_test_size();
  LM_ASSERT_ALL(r0[0] == 1 && r0[1] == 2 && r0[2] == 3);
  LM_ASSERT_ALL(r1[0] == n * 1 && r1[1] == n * 2 && r1[2] == n * 3);
  free(r0);
  free(r1);
  destroy_outputs(out, 2);
  LM_ASSERT_ALL(g_deleted == del0 + 2);

  /* No mesh, no dist input, an output with placements: error, fn never runs. */
  int calls = 0;
  const lm_placement_t *outpl1[1] = {rep};
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, outpl1, NULL, NULL, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(calls == 0 && all_none(out, 1));
  LM_ASSERT_ALL(has(g_msg, "mesh"));

  /* No mesh and nothing that needs one: fn runs locally with mesh NULL. */
  int seen_null = 0;
  const lm_placement_t *outpl_none[1] = {NULL};
  LM_ASSERT_OK_ALL(call_lm(no_mesh_fn, &seen_null, 1, in, NULL, 1, outpl_none, NULL, NULL, 0, out));
  LM_ASSERT_ALL(seen_null && out[0].kind == LM_ARG_DOUBLE && out[0].f64 == 1.5);

  /* nin = nout = 0 with a mesh: fine. */
  calls = 0;
  LM_ASSERT_OK_ALL(call_lm(count_fn, &calls, 0, NULL, NULL, 0, NULL, NULL, mesh, 0, NULL));
  LM_ASSERT_ALL(calls == 1);
  lm_mesh_destroy(&mesh);
}

/* Outputs that do not match out_placements, and outputs of kinds fn may not return. Each fails on
 * every rank with INVALID_ARGUMENT, outputs come back NONE and every managed tensor fn made is
 * freed. */
static void check_one_rank_fails(lm_mesh_t mesh, int fail_rank, const lm_placement_t *const *outpl,
                                 const int64_t *const *oshapes, int ntensors, int nout,
                                 const int *kinds);

static void test_output_kind_errors(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_arg_t out[3];
  maker mk;
  int del0, made0;

  /* (a) a tensor output with NULL placements comes back as this rank's plain local tensor
   * (LM_ARG_MANAGED_TENSOR, the caller's to delete), between two dist outputs; plain outputs
   * may differ between ranks (here in length). */
  mk = maker_init();
  mk.nout = 3;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.kinds[1] = LM_ARG_MANAGED_TENSOR;
  mk.kinds[2] = LM_ARG_MANAGED_TENSOR;
  mk.n = 2;
  mk.fill = 3.0;
  {
    const lm_placement_t *outpl[3] = {rep, NULL, rep};
    del0 = g_deleted;
    made0 = g_created;
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 3, outpl, NULL, mesh, 0, out));
    LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && out[2].kind == LM_ARG_DIST_TENSOR);
    LM_ASSERT_ALL(out[1].kind == LM_ARG_MANAGED_TENSOR && out[1].ptr != NULL);
    DLManagedTensor *plain = (DLManagedTensor *)out[1].ptr;
    LM_ASSERT_ALL(plain->dl_tensor.ndim == 1 && plain->dl_tensor.shape[0] == 2 &&
                  mt_data(plain)[0] == 3.0 && mt_data(plain)[1] == 4.0);
    LM_ASSERT_ALL(g_created - made0 == 3 && g_deleted - del0 == 0);
    plain->deleter(plain);
    destroy_outputs(out, 3);
    LM_ASSERT_ALL(g_deleted - del0 == 3);
  }
  /* (a') only plain outputs and no mesh at all: fn runs with mesh NULL, no collective. */
  {
    const lm_placement_t *outpl[2] = {NULL, NULL};
    mk = maker_init();
    mk.nout = 2;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    mk.kinds[1] = LM_ARG_INT64;
    mk.n = 1 + lm_test_rank();
    del0 = g_deleted;
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl, NULL, NULL, 0, out));
    LM_ASSERT_ALL(out[0].kind == LM_ARG_MANAGED_TENSOR && out[1].kind == LM_ARG_INT64);
    DLManagedTensor *plain = (DLManagedTensor *)out[0].ptr;
    LM_ASSERT_ALL(plain->dl_tensor.shape[0] == 1 + lm_test_rank());
    plain->deleter(plain);
    LM_ASSERT_ALL(g_deleted - del0 == 1);
  }
  /* (a'') failure paths: fn fails on one rank, or a later output is refused: every plain output
   * is deleted exactly once by localmap, outputs come back NONE. */
  {
    int kinds[3] = {LM_ARG_MANAGED_TENSOR, LM_ARG_MANAGED_TENSOR, LM_ARG_INT64};
    const lm_placement_t *outpl[3] = {NULL, rep, NULL};
    check_one_rank_fails(mesh, lm_test_size() - 1, outpl, NULL, 2, 3, kinds);
    const lm_placement_t *outpl2[3] = {rep, NULL, NULL};
    check_one_rank_fails(mesh, 0, outpl2, NULL, 2, 3, kinds);
    lm_placement_t s1[1] = {LM_PLACEMENT_SHARD(1)};
    const lm_placement_t *outpl3[2] = {NULL, s1}; /* Shard dim 1 of a 1-d output */
    mk = maker_init();
    mk.nout = 2;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    mk.kinds[1] = LM_ARG_MANAGED_TENSOR;
    del0 = g_deleted;
    made0 = g_created;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl3, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && g_created - made0 == 2 && g_deleted - del0 == 2);
    LM_ASSERT_ALL(has(g_msg, "out_placements[1]"));
  }
  /* (b) a non-tensor output with placements. */
  mk = maker_init();
  mk.nout = 2;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.kinds[1] = LM_ARG_INT64;
  {
    const lm_placement_t *outpl[2] = {rep, rep};
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && g_deleted - del0 == 1);
    LM_ASSERT_ALL(has(g_msg, "outputs[1]"));
  }
  /* (b') a NONE output (fn did not set it) where placements ask for a tensor. */
  mk = maker_init();
  mk.nout = 2;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.kinds[1] = LM_ARG_NONE;
  {
    const lm_placement_t *outpl[2] = {rep, rep};
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && g_deleted - del0 == 1);
  }
  /* (c) an output that is already a dist tensor: refused; the handle stays the caller's. */
  {
    lm_dist_tensor_t d = NULL;
    int64_t shape[1] = {4};
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&d, mesh, 1, shape, LM_FLOAT64, LM_CPU, rep));
    mk = maker_init();
    mk.nout = 2;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    mk.kinds[1] = LM_ARG_DIST_TENSOR;
    mk.give_dist = d;
    const lm_placement_t *outpl[2] = {rep, rep};
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && g_deleted - del0 == 1);
    LM_ASSERT_ALL(has(g_msg, "outputs[1]") && has(g_msg, "dist tensor"));
    int64_t gs[1] = {0};
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape(d, gs, 1)); /* still valid */
    LM_ASSERT_ALL(gs[0] == 4);
    /* also with NULL placements for it */
    const lm_placement_t *outpl2[2] = {rep, NULL};
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 2, outpl2, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && g_deleted - del0 == 2);
    lm_dist_tensor_destroy(&d);
  }
  /* (d) a borrowed TENSOR output. */
  {
    double buf[3] = {0, 0, 0};
    int64_t shape[1] = {3};
    DLTensor t = {buf, LM_CPU, 1, LM_FLOAT64, shape, NULL, 0};
    mk = maker_init();
    mk.nout = 1;
    mk.kinds[0] = LM_ARG_TENSOR;
    mk.give_tensor = &t;
    const lm_placement_t *outpl[1] = {rep};
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 1));
  }
  /* (e) a Shard output whose dim is beyond the tensor's ndim. */
  {
    lm_placement_t s1[1] = {LM_PLACEMENT_SHARD(1)};
    const lm_placement_t *outpl[1] = {s1};
    mk = maker_init();
    mk.nout = 1;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
  }
  /* The mesh still works afterwards. */
  {
    mk = maker_init();
    mk.nout = 1;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    const lm_placement_t *outpl[1] = {rep};
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out));
    destroy_outputs(out, 1);
  }
  lm_mesh_destroy(&mesh);
}

/* in_placements that differ from the input's: an error naming the input, its placements and the
 * required ones without RESHARD_INPUTS; fn sees the resharded shard with it. */
static void test_in_placements_reshard(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int64_t rows = 2 * lm_test_size() + 1, cols = 2;
  double *g = global_matrix(rows, cols);
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t s1[1] = {LM_PLACEMENT_SHARD(1)};
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, s0);
  scale_state s;
  memset(&s, 0, sizeof s);
  lm_arg_t in[2] = {arg_f64(0.0), arg_dist(x)};
  lm_arg_t out[1];

  /* Without the flag: INVALID_ARGUMENT naming inputs[1], [S(0)] and [R]; fn never runs. */
  {
    const lm_placement_t *outpl[1] = {rep};
    lm_arg_t in3[3] = {arg_i64(0), arg_dist(x), arg_f64(1.0)};
    const lm_placement_t *inpl3[3] = {NULL, rep, NULL};
    LM_ASSERT_STATUS_ALL(call_lm(scale_fn, &s, 3, in3, inpl3, 1, outpl, NULL, NULL, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(s.calls == 0 && all_none(out, 1));
    LM_ASSERT_ALL(has(g_msg, "inputs[1]") && has(g_msg, "[S(0)]") && has(g_msg, "[R]"));
  }
  /* Placements equal to the input's: no flag needed. */
  {
    shard_check c = {g, rows, cols, 0, 0, NULL};
    const lm_placement_t *inpl[2] = {NULL, s0};
    LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 2, in, inpl, 0, NULL, NULL, NULL, 0, NULL));
    LM_ASSERT_ALL(c.ok && c.ntensors == 1);
  }
  /* With the flag: fn sees the full (replicated) tensor. */
  {
    lm_arg_t in2[2] = {arg_dist(x), arg_f64(-1.0)};
    const lm_placement_t *inpl2[2] = {rep, NULL};
    const lm_placement_t *outpl[1] = {rep};
    LM_ASSERT_OK_ALL(call_lm(scale_fn, &s, 2, in2, inpl2, 1, outpl, NULL, NULL,
                             LM_LOCAL_MAP_RESHARD_INPUTS, out));
    LM_ASSERT_ALL(s.calls == 1 && s.seen_shape[0] == rows && s.seen_shape[1] == cols);
    int64_t gs[2] = {rows, cols};
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    int ok = 1;
    for (int64_t i = 0; i < rows * cols; i++) ok &= full[i] == -g[i];
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
  }
  /* With the flag, S(0) -> S(1): fn sees column shards. */
  {
    lm_arg_t in2[1] = {arg_dist(x)};
    const lm_placement_t *inpl2[1] = {s1};
    const lm_placement_t *outpl[1] = {s1};
    memset(&s, 0, sizeof s);
    int64_t off = 0, len = 0;
    LM_ASSERT_OK_ALL(lm_layout_chunk(cols, lm_test_size(), lm_test_rank(), &off, &len));
    LM_ASSERT_OK_ALL(call_lm(scale_fn, &s, 1, in2, inpl2, 1, outpl, NULL, NULL,
                             LM_LOCAL_MAP_RESHARD_INPUTS, out));
    LM_ASSERT_ALL(s.seen_shape[0] == rows && s.seen_shape[1] == len);
    int64_t gs[2] = {rows, cols};
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    int ok = 1;
    for (int64_t i = 0; i < rows * cols; i++) ok &= full[i] == 2 * g[i];
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
  }
  /* x itself was not changed by the reshards. */
  {
    lm_placement_t pl[1];
    LM_ASSERT_OK_ALL(lm_dist_tensor_placements(x, pl, 1));
    LM_ASSERT_ALL(pl[0].kind == LM_SHARD && pl[0].dim == 0);
  }
  /* in_placements on a non-dist input: refused. */
  {
    lm_arg_t in2[2] = {arg_dist(x), arg_f64(1.0)};
    const lm_placement_t *inpl2[2] = {NULL, rep};
    const lm_placement_t *outpl[1] = {rep};
    memset(&s, 0, sizeof s);
    LM_ASSERT_STATUS_ALL(call_lm(scale_fn, &s, 2, in2, inpl2, 1, outpl, NULL, NULL,
                                 LM_LOCAL_MAP_RESHARD_INPUTS, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(s.calls == 0 && has(g_msg, "in_placements[1]"));
  }
  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}

/* A tensor on a mesh over the ranks in reverse order, moved onto the world mesh. */
static void test_cross_mesh_input(void **state) {
  (void)state;
  lm_mesh_t world = lm_test_world_mesh();
  lm_mesh_t rev = reversed_mesh();
  const int np = lm_test_size();
  const int64_t rows = 2 * np + 1, cols = 3;
  double *g = global_matrix(rows, cols);
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_dist_tensor_t t = dist_from(rev, g, rows, cols, s0);
  lm_dist_tensor_t x = dist_from(world, g, rows, cols, s0);
  shard_check c = {g, rows, cols, 0, 0, NULL};
  lm_arg_t in[1] = {arg_dist(t)};
  const lm_placement_t *inpl[1] = {s0};

  /* On its own mesh, fn sees the rev-mesh shard (checked against fn's mesh rank). */
  LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 1, in, inpl, 0, NULL, NULL, NULL, 0, NULL));
  LM_ASSERT_ALL(c.ok && c.ntensors == 1 && c.seen_mesh == rev);
  {
    int mr = -1;
    LM_ASSERT_OK_ALL(lm_mesh_rank(rev, &mr));
    LM_ASSERT_ALL(mr == np - 1 - lm_test_rank());
  }

  if (np > 1) {
    /* Onto the world mesh without the flag: refused, naming the input. */
    c.ok = 0;
    c.ntensors = 0;
    LM_ASSERT_STATUS_ALL(call_lm(check_shards_fn, &c, 1, in, inpl, 0, NULL, NULL, world, 0, NULL),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(c.ntensors == 0 && has(g_msg, "inputs[0]"));
    /* No in_placements and a mesh over the same ranks: kept as it is (a sibling mesh; see
     * test_sibling_mesh_inputs), with or without the flag: fn sees rev's shard, unmoved. */
    LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 1, in, NULL, 0, NULL, NULL, world,
                             LM_LOCAL_MAP_RESHARD_INPUTS, NULL));
    LM_ASSERT_ALL(c.ntensors == 1 && c.seen_mesh == world);
    /* Inferred mesh (the first dist input's) with a second input on the other mesh. */
    lm_arg_t in2[2] = {arg_dist(x), arg_dist(t)};
    const lm_placement_t *inpl2[2] = {NULL, s0};
    LM_ASSERT_STATUS_ALL(call_lm(check_shards_fn, &c, 2, in2, inpl2, 0, NULL, NULL, NULL, 0, NULL),
                         LM_ERR_INVALID_ARGUMENT);
  }
  /* With the flag: fn sees world-mesh shards of the same values. */
  memset(&c, 0, sizeof c);
  c.g = g;
  c.rows = rows;
  c.cols = cols;
  LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 1, in, inpl, 0, NULL, NULL, world,
                           LM_LOCAL_MAP_RESHARD_INPUTS, NULL));
  LM_ASSERT_ALL(c.ok && c.ntensors == 1 && c.seen_mesh == world);
  {
    /* Inferred: world first, the rev tensor moves to it. */
    lm_arg_t in2[2] = {arg_dist(x), arg_dist(t)};
    const lm_placement_t *inpl2[2] = {NULL, s0};
    c.ok = 0;
    LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 2, in2, inpl2, 0, NULL, NULL, NULL,
                             LM_LOCAL_MAP_RESHARD_INPUTS, NULL));
    LM_ASSERT_ALL(c.ok && c.ntensors == 2 && c.seen_mesh == world);
    /* Inferred: rev first, the world tensor moves to it. */
    lm_arg_t in3[2] = {arg_dist(t), arg_dist(x)};
    const lm_placement_t *inpl3[2] = {NULL, s0};
    c.ok = 0;
    LM_ASSERT_OK_ALL(call_lm(check_shards_fn, &c, 2, in3, inpl3, 0, NULL, NULL, NULL,
                             LM_LOCAL_MAP_RESHARD_INPUTS, NULL));
    LM_ASSERT_ALL(c.ok && c.ntensors == 2 && c.seen_mesh == rev);
  }
  {
    /* A cross-mesh input resharded to Replicate and a Shard output on the world mesh. */
    lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
    const lm_placement_t *inpl2[1] = {rep};
    const lm_placement_t *outpl[1] = {rep};
    scale_state s;
    lm_arg_t out[1];
    memset(&s, 0, sizeof s);
    LM_ASSERT_OK_ALL(call_lm(scale_fn, &s, 1, in, inpl2, 1, outpl, NULL, world,
                             LM_LOCAL_MAP_RESHARD_INPUTS, out));
    LM_ASSERT_ALL(s.seen_mesh == world && s.seen_shape[0] == rows);
    int64_t gs[2] = {rows, cols};
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    int ok = 1;
    for (int64_t i = 0; i < rows * cols; i++) ok &= full[i] == 2 * g[i];
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
  }
  free(g);
  lm_dist_tensor_destroy(&t);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&rev);
  lm_mesh_destroy(&world);
}

/* Uneven Shard outputs under each shape mode. */
static void test_output_shape_modes(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int np = lm_test_size(), r = lm_test_rank();
  const int64_t rows = 2 * np - 1; /* 1, 3 (2+1), 5 (2+2+1), 7 (2+2+2+1) */
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  const lm_placement_t *outpl[1] = {s0};
  int64_t rows_of_rank[64], even_rows[64], bad_rows[64];
  lm_arg_t out[1];
  maker mk = maker_init();
  int del0;
  for (int i = 0; i < np; i++) {
    int64_t off, len;
    LM_ASSERT_OK_ALL(lm_layout_chunk(rows, np, i, &off, &len));
    rows_of_rank[i] = len;
    even_rows[i] = 2;
    bad_rows[i] = (i == 0) ? 1 : 2; /* total 2np-1 but not the torch.chunk layout */
  }
  mk.nout = 1;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.rows_of_rank = rows_of_rank;

  /* Given shape. */
  {
    int64_t gshape[2] = {rows, 2};
    const int64_t *oshapes[1] = {gshape};
    int64_t gs[2] = {0, 0};
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, oshapes, mesh, 0, out));
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2));
    LM_ASSERT_ALL(gs[0] == rows && gs[1] == 2);
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    /* rank i's rows hold fill + 0.. 2*len-1 */
    int ok = 1;
    int64_t at = 0;
    for (int i = 0; i < np; i++)
      for (int64_t k = 0; k < 2 * rows_of_rank[i]; k++) ok &= full[at++] == (double)k;
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
  }
  /* Default: allgather of local extents. */
  {
    int64_t gs[2] = {0, 0};
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out));
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2));
    LM_ASSERT_ALL(gs[0] == rows && gs[1] == 2);
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    int ok = 1;
    int64_t at = 0;
    for (int i = 0; i < np; i++)
      for (int64_t k = 0; k < 2 * rows_of_rank[i]; k++) ok &= full[at++] == (double)k;
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
    /* out_shapes given but NULL for this output: the same default. */
    const int64_t *oshapes[1] = {NULL};
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, oshapes, mesh, 0, out));
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2));
    LM_ASSERT_ALL(gs[0] == rows);
    destroy_outputs(out, 1);
  }
  /* SHAPES_EVEN on even extents: right. */
  {
    int64_t gs[2] = {0, 0};
    mk.rows_of_rank = even_rows;
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh,
                             LM_LOCAL_MAP_SHAPES_EVEN, out));
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2));
    LM_ASSERT_ALL(gs[0] == 2 * np && gs[1] == 2);
    destroy_outputs(out, 1);
    mk.rows_of_rank = rows_of_rank;
  }
  /* A given shape that does not match the local extents: every rank fails. A rank whose own
   * extent is not torch.chunk's block of rows + 5 (b = ceil(n / np), block r = [min(n, r b),
   * min(n, (r + 1) b)), tests/README.md section 1) refuses its output itself,
   * LM_ERR_INVALID_ARGUMENT; the others, whose extents happen to fit, return LM_ERR_REMOTE
   * (include/localmap.h, lm_local_map: "the failing ranks their own, the others LM_ERR_REMOTE"). */
  {
    int64_t gshape[2] = {rows + 5, 2};
    const int64_t *oshapes[1] = {gshape};
    const int64_t n = rows + 5, b = (n + np - 1) / np;
    const int64_t lo = r * b < n ? r * b : n, hi = (r + 1) * b < n ? (r + 1) * b : n;
    const lm_status_t want = rows_of_rank[r] != hi - lo ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE;
    del0 = g_deleted;
    LM_EXPECT_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, oshapes, mesh, 0, out), want,
                  "outputs[0]");
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
  }
  /* Allgather mode: extents that do not follow the torch.chunk layout. */
  if (np > 1) {
    mk.rows_of_rank = bad_rows;
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
    LM_ASSERT_ALL(has(g_msg, "outputs[0]"));
    mk.rows_of_rank = rows_of_rank;
  }
  /* Allgather mode: ranks disagree on the output's ndim. */
  if (np > 1) {
    mk.ndim_of_rank0 = 1;
    del0 = g_deleted;
    LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_MISMATCH);
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
    mk.ndim_of_rank0 = 0;
  }
  /* SHAPES_EVEN on uneven extents: every rank fails cleanly, nothing leaks (last:
   * while it fails, the checks above still run). */
  if (np > 1) {
    del0 = g_deleted;
    lm_status_t st = call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh,
                             LM_LOCAL_MAP_SHAPES_EVEN, out);
    int64_t gs[2] = {-1, -1};
    if (st == LM_SUCCESS) {
      if (lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2) != LM_SUCCESS) gs[0] = -1;
      lm_test__diag("rank %d: SHAPES_EVEN on uneven extents succeeded with global shape [%lld, %lld] "
                    "(the true one is [%lld, 2])\n", r, (long long)gs[0], (long long)gs[1],
                    (long long)rows);
      destroy_outputs(out, 1);
    }
    LM_ASSERT_ALL(st != LM_SUCCESS);
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
  }
  lm_mesh_destroy(&mesh);
  (void)r;
}

/* fn fails on one rank only: that rank gets LM_ERR_USER with fn's message, the others
 * LM_ERR_REMOTE naming it; outputs are NONE everywhere and every managed tensor (also those of
 * ranks that succeeded) is freed; nobody hangs and the mesh keeps working. */
static void check_one_rank_fails_flags(lm_mesh_t mesh, int fail_rank,
                                       const lm_placement_t *const *outpl,
                                       const int64_t *const *oshapes, int ntensors, int nout,
                                       const int *kinds, unsigned flags) {
  maker mk = maker_init();
  lm_arg_t out[8];
  int del0 = g_deleted, made0 = g_created;
  char want_remote[64];
  mk.nout = nout;
  for (int j = 0; j < nout; j++) mk.kinds[j] = kinds[j];
  mk.fail_rank = fail_rank;
  lm_status_t st = call_lm(maker_fn, &mk, 0, NULL, NULL, nout, outpl, oshapes, mesh, flags, out);
  int expected = lm_test_rank() == fail_rank ? LM_ERR_USER : LM_ERR_REMOTE;
  LM_ASSERT_STATUS_ALL(st, expected);
  LM_ASSERT_ALL(mk.calls == 1);
  snprintf(want_remote, sizeof want_remote, "rank %d", fail_rank);
  if (lm_test_rank() == fail_rank) {
    LM_ASSERT_ALL(has(g_msg, "boom on rank") && has(g_msg, want_remote));
  } else {
    LM_ASSERT_ALL(has(g_msg, want_remote));
  }
  if (st == LM_SUCCESS) destroy_outputs(out, nout); /* (only reached when the check failed) */
  LM_ASSERT_ALL(all_none(out, nout));
  LM_ASSERT_ALL(g_created - made0 == ntensors && g_deleted - del0 == ntensors);
}

static void check_one_rank_fails(lm_mesh_t mesh, int fail_rank, const lm_placement_t *const *outpl,
                                 const int64_t *const *oshapes, int ntensors, int nout,
                                 const int *kinds) {
  check_one_rank_fails_flags(mesh, fail_rank, outpl, oshapes, ntensors, nout, kinds, 0);
}

static void test_fn_fails_on_one_rank(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int np = lm_test_size();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  int kinds[3] = {LM_ARG_MANAGED_TENSOR, LM_ARG_INT64, LM_ARG_MANAGED_TENSOR};

  /* Replicate and Partial outputs (no shape exchange). The last rank, then rank 0 fails. */
  {
    const lm_placement_t *outpl[3] = {rep, NULL, psum};
    check_one_rank_fails(mesh, np - 1, outpl, NULL, 2, 3, kinds);
    check_one_rank_fails(mesh, 0, outpl, NULL, 2, 3, kinds);
  }
  /* Shard outputs with a given global shape (n = 3 per rank). */
  {
    int64_t gshape[1] = {3 * np};
    const int64_t *oshapes[3] = {gshape, NULL, gshape};
    const lm_placement_t *outpl[3] = {s0, NULL, s0};
    check_one_rank_fails(mesh, np - 1, outpl, oshapes, 2, 3, kinds);
  }
  /* Shard outputs with SHAPES_EVEN (local shapes, even extents). */
  {
    const lm_placement_t *outpl[3] = {s0, NULL, s0};
    check_one_rank_fails_flags(mesh, np - 1, outpl, NULL, 2, 3, kinds, LM_LOCAL_MAP_SHAPES_EVEN);
  }
  /* The mesh still works. */
  {
    maker mk = maker_init();
    lm_arg_t out[1];
    const lm_placement_t *outpl[1] = {s0};
    mk.nout = 1;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out));
    destroy_outputs(out, 1);
  }
  lm_mesh_destroy(&mesh);
}

/* Two ranks fail: each reports its own failure; the others name the lowest failing rank. */
static void test_fn_fails_on_two_ranks(void **state) {
  (void)state;
  const int np = lm_test_size(), r = lm_test_rank();
  if (np < 3) {
    lm_test_skip("needs 3 ranks or more (np %d)", np);
    return;
  }
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  const lm_placement_t *outpl[1] = {rep};
  maker mk = maker_init();
  lm_arg_t out[1];
  int del0 = g_deleted;
  mk.nout = 1;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.fail_rank = 1;
  mk.fail_rank2 = 2;
  lm_status_t st = call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out);
  LM_ASSERT_STATUS_ALL(st, (r == 1 || r == 2) ? LM_ERR_USER : LM_ERR_REMOTE);
  LM_ASSERT_ALL(r == 1 || r == 2 || has(g_msg, "rank 1"));
  LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
  lm_mesh_destroy(&mesh);
}

/* NO_AGREE: a failure stays local (ranks that succeed return their outputs); when all fail alike
 * each reports its own error. */
static void test_no_agree(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int np = lm_test_size(), r = lm_test_rank();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  const lm_placement_t *outpl[1] = {rep};
  maker mk = maker_init();
  lm_arg_t out[1];
  int del0 = g_deleted;
  mk.nout = 1;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.fail_rank = np - 1;
  lm_status_t st = call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh,
                           LM_LOCAL_MAP_NO_AGREE, out);
  /* (every rank reaches the same collective asserts) */
  LM_ASSERT_STATUS_ALL(st, r == np - 1 ? LM_ERR_USER : LM_SUCCESS);
  if (r == np - 1) {
    LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1);
  } else {
    LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && g_deleted - del0 == 0);
  }
  destroy_outputs(out, 1);
  LM_ASSERT_ALL(g_deleted - del0 == 1);
  /* Every rank fails alike. */
  del0 = g_deleted;
  mk = maker_init();
  mk.nout = 1;
  mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
  mk.fail_rank = r;
  LM_ASSERT_STATUS_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh,
                               LM_LOCAL_MAP_NO_AGREE, out),
                       LM_ERR_USER);
  LM_ASSERT_ALL(all_none(out, 1) && g_deleted - del0 == 1 && has(g_msg, "boom"));
  /* And success with NO_AGREE. */
  mk.fail_rank = -1;
  LM_ASSERT_OK_ALL(call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl, NULL, mesh,
                           LM_LOCAL_MAP_NO_AGREE, out));
  destroy_outputs(out, 1);
  LM_ASSERT_ALL(g_deleted - del0 == 2);
  lm_mesh_destroy(&mesh);
}

/* fn allreduces on the mesh's per-dim communicators. */
typedef struct {
  int ok;
  int64_t d1_seen;
} comm_state;

static lm_status_t dim_comm_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                               lm_arg_t *out) {
  comm_state *s = (comm_state *)ud;
  int f0 = 0, f1 = 0;
  const DLTensor *x;
  double local = 0, total = 0;
  int64_t one = 1, ones = 0;
  (void)nin;
  (void)nout;
  if (lm_mesh_dim_comm(mesh, 0, &f0) != LM_SUCCESS || lm_mesh_dim_comm(mesh, 1, &f1) != LM_SUCCESS)
    return LM_ERR_INTERNAL;
  x = (const DLTensor *)in[0].ptr;
  for (int64_t i = 0; i < numel(x); i++) local += ((const double *)x->data)[i];
  /* The shards differ along mesh dim 0 (S(0)) and repeat along dim 1 (R). */
  if (MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_Comm_f2c(f0)) != MPI_SUCCESS)
    return LM_ERR_MPI;
  if (MPI_Allreduce(&one, &ones, 1, MPI_INT64_T, MPI_SUM, MPI_Comm_f2c(f1)) != MPI_SUCCESS)
    return LM_ERR_MPI;
  s->d1_seen = ones;
  {
    int64_t shape[1] = {1};
    DLManagedTensor *m = mt_new(1, shape);
    mt_data(m)[0] = total;
    out[0].kind = LM_ARG_MANAGED_TENSOR;
    out[0].ptr = m;
  }
  {
    int64_t shape[1] = {1};
    DLManagedTensor *m = mt_new(1, shape);
    mt_data(m)[0] = local;
    out[1].kind = LM_ARG_MANAGED_TENSOR;
    out[1].ptr = m;
  }
  out[2] = arg_i64(ones);
  s->ok = 1;
  return LM_SUCCESS;
}

static void test_fn_uses_dim_comm(void **state) {
  (void)state;
  int64_t d0 = 0, d1 = 0;
  lm_mesh_t mesh = grid_mesh(&d0, &d1);
  const int64_t rows = 2 * d0 + 1, cols = 3;
  double *g = global_matrix(rows, cols);
  lm_placement_t xpl[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_REPLICATE};
  lm_placement_t rr[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
  lm_placement_t pr[2] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), LM_PLACEMENT_REPLICATE};
  lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, xpl);
  comm_state s = {0, 0};
  lm_arg_t in[1] = {arg_dist(x)};
  const lm_placement_t *inpl[1] = {xpl};
  const lm_placement_t *outpl[3] = {rr, pr, NULL};
  lm_arg_t out[3];
  double expect = 0;
  for (int64_t i = 0; i < rows * cols; i++) expect += g[i];

  LM_ASSERT_OK_ALL(call_lm(dim_comm_fn, &s, 1, in, inpl, 3, outpl, NULL, NULL, 0, out));
  LM_ASSERT_ALL(s.ok && s.d1_seen == d1 && out[2].kind == LM_ARG_INT64 && out[2].i64 == d1);
  int64_t one[1] = {1};
  double *a = gather_all((lm_dist_tensor_t)out[0].ptr, 1, one);
  double *b = gather_all((lm_dist_tensor_t)out[1].ptr, 1, one);
  LM_ASSERT_ALL(a[0] == expect && b[0] == expect);
  free(a);
  free(b);
  /* The Partial output resharded to Replicate: the local value is the total everywhere. */
  {
    lm_dist_tensor_t rep = NULL;
    DLTensor v;
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&rep, (lm_dist_tensor_t)out[1].ptr, NULL, rr));
    LM_ASSERT_OK_ALL(lm_dist_tensor_local(rep, &v));
    LM_ASSERT_ALL(v.ndim == 1 && v.shape[0] == 1 && ((double *)v.data)[0] == expect);
    lm_dist_tensor_destroy(&rep);
  }
  destroy_outputs(out, 3);
  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}

/* A mesh created on a subset of the ranks: members run lm_local_map among themselves; the other
 * ranks get LM_ERR_INVALID_USAGE (given mesh, or a placeholder input on it) and fn never runs. */
static void test_rank_outside_mesh(void **state) {
  (void)state;
  const int np = lm_test_size(), r = lm_test_rank();
  const int nmem = np > 1 ? np - 1 : 1; /* the last rank stays out when np > 1 */
  int ranks[64];
  int64_t shape[1] = {nmem};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t sub = NULL;
  for (int i = 0; i < nmem; i++) ranks[i] = i;
  cfg.ranks = ranks;
  cfg.nranks = nmem;
  LM_ASSERT_OK_ALL(lm_mesh_create(&sub, lm_test_comm_f(), 1, shape, &cfg));
  int member = -1;
  LM_ASSERT_OK_ALL(lm_mesh_is_member(sub, &member));
  LM_ASSERT_ALL(member == (r < nmem));

  const int64_t rows = 2 * nmem + 1, cols = 2;
  double *g = global_matrix(rows, cols);
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_dist_tensor_t x = NULL;
  {
    int64_t gshape[2] = {rows, cols};
    DLTensor full = {g, LM_CPU, 2, LM_FLOAT64, gshape, NULL, 0};
    /* (every rank passes the full tensor; non-members get a placeholder) */
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, sub, &full, s0, -1));
  }
  scale_state s;
  memset(&s, 0, sizeof s);
  lm_arg_t in[1] = {arg_dist(x)};
  const lm_placement_t *outpl[1] = {s0};
  lm_arg_t out[1];

  /* Inferred mesh (the input's). */
  lm_status_t st = call_lm(scale_fn, &s, 1, in, NULL, 1, outpl, NULL, NULL, 0, out);
  LM_ASSERT_STATUS_ALL(st, member ? LM_SUCCESS : LM_ERR_INVALID_USAGE);
  LM_ASSERT_ALL(s.calls == (member ? 1 : 0));
  if (member) {
    int64_t gs[2] = {rows, cols};
    int ok = 1;
    /* Check the local shard (a gather would be collective over the members only: fine, but
     * this needs no communication at all). */
    DLTensor v;
    int64_t off[2] = {0, 0};
    ok &= lm_dist_tensor_local((lm_dist_tensor_t)out[0].ptr, &v) == LM_SUCCESS;
    ok &= lm_dist_tensor_local_offset((lm_dist_tensor_t)out[0].ptr, off, 2) == LM_SUCCESS;
    ok &= lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, gs, 2) == LM_SUCCESS;
    ok &= gs[0] == rows && gs[1] == cols;
    for (int64_t i = 0; ok && i < v.shape[0] * cols; i++)
      ok &= ((double *)v.data)[i] == 2 * g[off[0] * cols + i];
    LM_ASSERT_ALL(ok);
    destroy_outputs(out, 1);
  } else {
    LM_ASSERT_ALL(all_none(out, 1) && has(g_msg, "not in the mesh"));
  }
  /* Given mesh, no dist input. */
  {
    maker mk = maker_init();
    lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
    const lm_placement_t *outpl2[1] = {rep};
    mk.nout = 1;
    mk.kinds[0] = LM_ARG_MANAGED_TENSOR;
    int del0 = g_deleted;
    st = call_lm(maker_fn, &mk, 0, NULL, NULL, 1, outpl2, NULL, sub, 0, out);
    LM_ASSERT_STATUS_ALL(st, member ? LM_SUCCESS : LM_ERR_INVALID_USAGE);
    LM_ASSERT_ALL(mk.calls == (member ? 1 : 0));
    destroy_outputs(out, 1);
    LM_ASSERT_ALL(g_deleted - del0 == (member ? 1 : 0));
  }
  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&sub);
}

/* Ranks that pass different numbers of inputs or outputs: a clear error on every rank rather than
 * silently different results. */
static lm_status_t rep_outputs_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                                  lm_arg_t *out) {
  (void)ud;
  (void)mesh;
  (void)nin;
  (void)in;
  for (int j = 0; j < nout; j++) {
    int64_t shape[1] = {2};
    DLManagedTensor *m = mt_new(1, shape);
    out[j].kind = LM_ARG_MANAGED_TENSOR;
    out[j].ptr = m;
  }
  return LM_SUCCESS;
}

static void test_counts_disagree(void **state) {
  (void)state;
  const int np = lm_test_size(), r = lm_test_rank();
  if (np < 2) {
    lm_test_skip("needs 2 ranks or more (np 1)");
    return;
  }
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  const lm_placement_t *outpl[2] = {rep, rep};
  lm_arg_t in[2] = {arg_i64(1), arg_i64(2)};
  lm_arg_t out[2];
  int del0 = g_deleted;
  /* nout: 2 on rank 0, 1 elsewhere. */
  lm_status_t st = call_lm(rep_outputs_fn, NULL, 2, in, NULL, r == 0 ? 2 : 1, outpl, NULL, mesh, 0,
                           out);
  if (st == LM_SUCCESS) {
    lm_test__diag("rank %d: lm_local_map with nout = %d here, 2 on rank 0 and 1 elsewhere "
                  "succeeded\n", r, r == 0 ? 2 : 1);
    destroy_outputs(out, r == 0 ? 2 : 1);
  }
  LM_ASSERT_ALL(st != LM_SUCCESS);
  LM_ASSERT_ALL(g_deleted - del0 == (r == 0 ? 2 : 1));
  /* nin: 2 on rank 0, 1 elsewhere. */
  del0 = g_deleted;
  st = call_lm(rep_outputs_fn, NULL, r == 0 ? 2 : 1, in, NULL, 1, outpl, NULL, mesh, 0, out);
  if (st == LM_SUCCESS) {
    lm_test__diag("rank %d: lm_local_map with nin = %d here, 2 on rank 0 and 1 elsewhere "
                  "succeeded\n", r, r == 0 ? 2 : 1);
    destroy_outputs(out, 1);
  }
  LM_ASSERT_ALL(st != LM_SUCCESS);
  LM_ASSERT_ALL(g_deleted - del0 == 1);
  lm_mesh_destroy(&mesh);
}

/* Bad arguments: INVALID_ARGUMENT with a message, fn never runs, nothing changes. */
static void test_bad_arguments(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  lm_placement_t bad[1] = {{LM_SHARD, -1, 0, 0, 0, 0, 0, 0}};
  const lm_placement_t *outpl[1] = {rep};
  lm_arg_t in[1] = {arg_i64(1)};
  lm_arg_t out[1];
  int calls = 0;

  LM_ASSERT_STATUS_ALL(call_lm(NULL, NULL, 1, in, NULL, 1, outpl, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "fn"));
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, -1, in, NULL, 1, outpl, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, -2, outpl, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, outpl, NULL, mesh, 0, NULL),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, NULL, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, outpl, NULL, mesh, 0x100u, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "flags"));
  {
    /* Input kinds: MANAGED_TENSOR is for outputs only; out-of-range kinds; NULL pointers. */
    lm_arg_t bad_in[1] = {{LM_ARG_MANAGED_TENSOR, 0, 0, 0.0, NULL}};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, bad_in, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(has(g_msg, "inputs[0]"));
    lm_arg_t bad_in2[2] = {arg_i64(0), {99, 0, 0, 0.0, NULL}};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 2, bad_in2, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(has(g_msg, "inputs[1]"));
    lm_arg_t bad_in3[1] = {{LM_ARG_TENSOR, 0, 0, 0.0, NULL}};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, bad_in3, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    lm_arg_t bad_in4[1] = {{LM_ARG_DIST_TENSOR, 0, 0, 0.0, NULL}};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, bad_in4, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    /* A pointer that is not a dist tensor handle (magic check). */
    uint64_t junk[16];
    memset(junk, 0x5a, sizeof junk);
    lm_arg_t bad_in5[1] = {{LM_ARG_DIST_TENSOR, 0, 0, 0.0, junk}};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, bad_in5, NULL, 1, outpl, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
  }
  {
    /* Bad out_placements (Shard of dim -1) and bad in_placements for a dist input. */
    const lm_placement_t *outpl_bad[1] = {bad};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, outpl_bad, NULL, mesh, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    int64_t rows = 4, cols = 2;
    double *g = global_matrix(rows, cols);
    lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, s0);
    lm_arg_t xin[1] = {arg_dist(x)};
    lm_placement_t s5[1] = {LM_PLACEMENT_SHARD(5)};
    const lm_placement_t *inpl[1] = {s5};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, xin, inpl, 0, NULL, NULL, NULL,
                                 LM_LOCAL_MAP_RESHARD_INPUTS, NULL),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(has(g_msg, "in_placements[0]"));
    free(g);
    lm_dist_tensor_destroy(&x);
  }
  {
    /* Memory that is not a mesh handle (no magic word). */
    uint64_t junk[16];
    memset(junk, 0, sizeof junk);
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, in, NULL, 1, outpl, NULL,
                                 (lm_mesh_t)(void *)junk, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
  }
  LM_ASSERT_ALL(calls == 0);
  /* Mesh still fine. */
  LM_ASSERT_OK_ALL(call_lm(count_fn, &calls, 1, in, NULL, 0, NULL, NULL, mesh, 0, NULL));
  LM_ASSERT_ALL(calls == 1);
  lm_mesh_destroy(&mesh);
}

/* Outputs on a 2-D mesh with a Shard over both dims and allgather shapes (uneven). */
static lm_status_t grid_out_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                               lm_arg_t *out) {
  (void)ud;
  (void)mesh;
  (void)nin;
  (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *m = mt_new(x->ndim, x->shape);
  for (int64_t i = 0; i < numel(x); i++) mt_data(m)[i] = ((const double *)x->data)[i] + 1;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = m;
  return LM_SUCCESS;
}

static void test_grid_shard_outputs(void **state) {
  (void)state;
  int64_t d0 = 0, d1 = 0;
  lm_mesh_t mesh = grid_mesh(&d0, &d1);
  const int64_t rows = 2 * d0 + 1, cols = 2 * d1 + 1;
  double *g = global_matrix(rows, cols);
  lm_placement_t pl[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
  lm_placement_t pl2[2] = {LM_PLACEMENT_SHARD(1), LM_PLACEMENT_SHARD(0)};
  lm_dist_tensor_t x = dist_from(mesh, g, rows, cols, pl);
  lm_arg_t in[1] = {arg_dist(x)};
  int64_t gs[2] = {rows, cols};
  lm_arg_t out[1];
  for (int k = 0; k < 2; k++) {
    const lm_placement_t *want = k == 0 ? pl : pl2;
    const lm_placement_t *inpl[1] = {want};
    const lm_placement_t *outpl[1] = {want};
    LM_ASSERT_OK_ALL(call_lm(grid_out_fn, NULL, 1, in, inpl, 1, outpl, NULL, NULL,
                             LM_LOCAL_MAP_RESHARD_INPUTS, out));
    int64_t got[2] = {0, 0};
    LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape((lm_dist_tensor_t)out[0].ptr, got, 2));
    LM_ASSERT_ALL(got[0] == rows && got[1] == cols);
    double *full = gather_all((lm_dist_tensor_t)out[0].ptr, 2, gs);
    int ok = 1;
    for (int64_t i = 0; i < rows * cols; i++) ok &= full[i] == g[i] + 1;
    LM_ASSERT_ALL(ok);
    free(full);
    destroy_outputs(out, 1);
  }
  free(g);
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}


/* ---------------------------------------------------------------------------------------------
 * Sibling meshes (an input kept as it is on another mesh over the same processes), plain-tensor
 * outputs, lm_tensor_alloc and the lm_arg_* builders, English messages.
 * ------------------------------------------------------------------------------------------- */
/* Sums this rank's shard of inputs[0] into a 0-d float64 Partial output from lm_tensor_alloc,
 * and returns the shard's element count as an INT64. */
static lm_status_t shard_sum_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                                lm_arg_t *out) {
  lm_mesh_t *seen = (lm_mesh_t *)ud;
  DLManagedTensor *s = NULL;
  lm_status_t st;
  if (seen) *seen = mesh;
  if (nin < 1 || nout != 2 || in[0].kind != LM_ARG_TENSOR) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  st = lm_tensor_alloc(&s, 0, NULL, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  double *v = (double *)s->dl_tensor.data;
  for (int64_t i = 0; i < numel(x); i++) *v += ((const double *)x->data)[i];
  out[0] = lm_arg_managed(s);
  out[1] = lm_arg_i64(numel(x));
  return LM_SUCCESS;
}

/* Runs shard_sum_fn on input t with output mesh `mesh` and checks the total. */
static void expect_total(lm_dist_tensor_t t, lm_mesh_t mesh, int out_mdim, double want,
                         unsigned flags) {
  lm_placement_t psum[2] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  lm_placement_t rep[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_REPLICATE};
  const lm_placement_t *outpl[2] = {psum, NULL};
  lm_arg_t in[1] = {lm_arg_dist(t)};
  lm_arg_t out[2];
  lm_mesh_t seen = NULL;
  LM_ASSERT_OK_ALL(call_lm(shard_sum_fn, &seen, 1, in, NULL, 2, outpl, NULL, mesh, flags, out));
  LM_ASSERT_ALL(seen == mesh && out[0].kind == LM_ARG_DIST_TENSOR && out[1].kind == LM_ARG_INT64);
  lm_dist_tensor_t r = NULL, p = (lm_dist_tensor_t)out[0].ptr;
  int nd = -1;
  LM_ASSERT_OK_ALL(lm_dist_tensor_ndim(p, &nd));
  LM_ASSERT_ALL(nd == 0);
  /* a true scalar: reduce it to Replicate and read it */
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, p, NULL, rep));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(r, &v));
  LM_ASSERT_ALL(v.ndim == 0 && *(double *)v.data == want);
  (void)out_mdim;
  lm_dist_tensor_destroy(&r);
  destroy_outputs(out, 2);
}

static void test_sibling_mesh_inputs(void **state) {
  (void)state;
  const int np = lm_test_size();
  lm_mesh_t world = lm_test_world_mesh(), rev = reversed_mesh();
  int64_t d0 = 0, d1 = 0;
  lm_mesh_t grid = grid_mesh(&d0, &d1);
  const int64_t rows = 2 * np + 1, cols = 3;
  double *g = global_matrix(rows, cols), want = 0;
  for (int64_t i = 0; i < rows * cols; i++) want += g[i];
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)}, s01[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
  lm_dist_tensor_t on_rev = dist_from(rev, g, rows, cols, s0);
  lm_dist_tensor_t on_world = dist_from(world, g, rows, cols, s0);
  lm_dist_tensor_t on_grid = dist_from(grid, g, rows, cols, s01);

  /* Same ranks in another order: accepted, each rank's own rev shard, no flag needed. */
  expect_total(on_rev, world, 1, want, 0);
  /* A 2-D mesh's input beside a 1-D output mesh, and the other way round. */
  expect_total(on_grid, world, 1, want, 0);
  expect_total(on_world, grid, 2, want, 0);
  expect_total(on_rev, grid, 2, want, LM_LOCAL_MAP_RESHARD_INPUTS);
  if (np > 1) {
    /* A mesh over the first half of the ranks: the others hold no shard of it. */
    lm_mesh_t half = NULL;
    int ranks[64], h = (np + 1) / 2;
    int64_t hs[1] = {h};
    lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
    for (int i = 0; i < h; i++) ranks[i] = i;
    cfg.ranks = ranks;
    cfg.nranks = h;
    LM_ASSERT_OK_ALL(lm_mesh_create(&half, lm_test_comm_f(), 1, hs, &cfg));
    lm_dist_tensor_t on_half = dist_from(half, g, rows, cols, s0);
    lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
    const lm_placement_t *outpl[2] = {psum, NULL};
    lm_arg_t in[1] = {lm_arg_dist(on_half)}, out[2];
    lm_mesh_t seen = NULL;
    char who[64];
    snprintf(who, sizeof who, "mesh rank %d (rank %d)", h, h);
    for (int f = 0; f < 2; f++) {
      unsigned flags = f ? LM_LOCAL_MAP_RESHARD_INPUTS : 0;
      LM_ASSERT_STATUS_ALL(call_lm(shard_sum_fn, &seen, 1, in, NULL, 2, outpl, NULL, world, flags,
                                   out),
                           LM_ERR_INVALID_ARGUMENT);
      LM_ASSERT_ALL(all_none(out, 2) && seen == NULL);
      if (!has(g_msg, who)) lm_test__diag("rank %d: %s\n", lm_test_rank(), g_msg);
      LM_ASSERT_ALL(has(g_msg, "inputs[0]") && has(g_msg, who) && has(g_msg, "no shard"));
    }
    /* The other side of the rule: an input on a mesh of more ranks (world) beside the output mesh
     * `half`, every rank of which holds a shard of it: accepted (only half's ranks call), and fn
     * sees each rank's world shard, so the total is that of the first h world chunks. */
    {
      int ok = 1;
      double want_half = 0;
      for (int rk = 0; rk < h; rk++) {
        int64_t o = 0, l = 0;
        if (lm_layout_chunk(rows, np, rk, &o, &l) != LM_SUCCESS) ok = 0;
        for (int64_t i = o * cols; i < (o + l) * cols; i++) want_half += g[i];
      }
      if (lm_test_rank() < h) {
        lm_arg_t inw[1] = {lm_arg_dist(on_world)}, outw[2];
        lm_placement_t rep1[1] = {LM_PLACEMENT_REPLICATE};
        lm_status_t st = call_lm(shard_sum_fn, &seen, 1, inw, NULL, 2, outpl, NULL, half, 0, outw);
        ok = st == LM_SUCCESS && seen == half && outw[0].kind == LM_ARG_DIST_TENSOR;
        if (ok) {
          lm_dist_tensor_t r = NULL;
          DLTensor v;
          ok = lm_dist_tensor_reshard(&r, (lm_dist_tensor_t)outw[0].ptr, NULL, rep1) == LM_SUCCESS &&
               lm_dist_tensor_local(r, &v) == LM_SUCCESS && v.ndim == 0 &&
               *(double *)v.data == want_half;
          lm_dist_tensor_destroy(&r);
        }
        if (!ok) lm_test__diag("rank %d: bigger input mesh: %s\n", lm_test_rank(), g_msg);
        destroy_outputs(outw, 2);
        seen = NULL;
      }
      LM_ASSERT_ALL(ok);
    }
    /* mesh NULL and inputs on two meshes: refused (nothing to check them against). */
    lm_arg_t in2[2] = {lm_arg_dist(on_world), lm_arg_dist(on_rev)};
    LM_ASSERT_STATUS_ALL(call_lm(shard_sum_fn, &seen, 2, in2, NULL, 2, outpl, NULL, NULL, 0, out),
                         LM_ERR_INVALID_ARGUMENT);
    LM_ASSERT_ALL(all_none(out, 2) && seen == NULL && has(g_msg, "inputs[1]") &&
                  has(g_msg, "another mesh"));
    /* The same two inputs with `mesh` given: both kept, fn runs once. */
    LM_ASSERT_OK_ALL(call_lm(shard_sum_fn, &seen, 2, in2, NULL, 2, outpl, NULL, rev, 0, out));
    LM_ASSERT_ALL(seen == rev);
    destroy_outputs(out, 2);
    lm_dist_tensor_destroy(&on_half);
    lm_mesh_destroy(&half);
  }
  free(g);
  lm_dist_tensor_destroy(&on_rev);
  lm_dist_tensor_destroy(&on_world);
  lm_dist_tensor_destroy(&on_grid);
  lm_mesh_destroy(&grid);
  lm_mesh_destroy(&rev);
  lm_mesh_destroy(&world);
}

/* lm_tensor_alloc: shapes, dtypes, pool storage, the deleter, bad arguments. */
static void test_tensor_alloc(void **state) {
  (void)state;
  DLManagedTensor *t = NULL;
  int64_t shape[3] = {3, 0, 2}, big[1] = {(int64_t)1 << 18}; /* 1 MiB of float32: pooled */
  LM_ASSERT_OK_ALL(lm_tensor_alloc(&t, 2, shape, LM_INT16, LM_CPU));
  LM_ASSERT_ALL(t && t->deleter && t->dl_tensor.ndim == 2 && t->dl_tensor.shape != shape &&
                t->dl_tensor.shape[0] == 3 && t->dl_tensor.shape[1] == 0 &&
                t->dl_tensor.strides == NULL && t->dl_tensor.dtype.bits == 16 &&
                t->dl_tensor.data != NULL);
  t->deleter(t);
  t = NULL;
  shape[1] = 5;
  LM_ASSERT_OK_ALL(lm_tensor_alloc(&t, 3, shape, LM_COMPLEX128, LM_CPU));
  {
    int zero = 1;
    const unsigned char *b = (const unsigned char *)t->dl_tensor.data;
    for (size_t i = 0; i < 3 * 5 * 2 * 16; i++) zero &= b[i] == 0;
    LM_ASSERT_ALL(zero && ((uintptr_t)t->dl_tensor.data & 63) == 0);
  }
  t->deleter(t);
  LM_ASSERT_OK_ALL(lm_tensor_alloc(&t, 0, NULL, LM_BOOL, LM_CPU));
  LM_ASSERT_ALL(t->dl_tensor.ndim == 0 && t->dl_tensor.data != NULL);
  t->deleter(t);
  /* Storage from the buffer pool: a freed large buffer is taken again. */
  LM_ASSERT_OK_ALL(lm_tensor_alloc(&t, 1, big, LM_FLOAT32, LM_CPU));
  void *first = t->dl_tensor.data;
  ((float *)first)[5] = 7.0f;
  t->deleter(t);
  LM_ASSERT_OK_ALL(lm_tensor_alloc(&t, 1, big, LM_FLOAT32, LM_CPU));
  LM_ASSERT_ALL(t->dl_tensor.data == first && ((float *)t->dl_tensor.data)[5] == 0.0f);
  t->deleter(t);
  /* Bad arguments name themselves; *out is NULL. */
  int64_t neg[1] = {-1};
  DLDataType lanes2 = {kDLFloat, 32, 2};
  DLDevice cuda = {kDLCUDA, 0};
  t = (DLManagedTensor *)(void *)&t;
  LM_EXPECT_ALL(lm_tensor_alloc(&t, 1, neg, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "shape[0]");
  LM_ASSERT_ALL(t == NULL);
  LM_EXPECT_ALL(lm_tensor_alloc(&t, 1, NULL, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "shape");
  LM_EXPECT_ALL(lm_tensor_alloc(&t, 33, big, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_tensor_alloc(&t, -1, big, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_tensor_alloc(&t, 1, big, lanes2, LM_CPU), LM_ERR_INVALID_ARGUMENT, "dtype");
  LM_EXPECT_ALL(lm_tensor_alloc(&t, 1, big, LM_FLOAT32, cuda), LM_ERR_NOT_SUPPORTED, "device");
  LM_EXPECT_ALL(lm_tensor_alloc(NULL, 1, big, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "out");
  {
    int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 30};
    LM_EXPECT_ALL(lm_tensor_alloc(&t, 2, huge, LM_FLOAT32, LM_CPU), LM_ERR_INVALID_ARGUMENT, "2^58");
  }
  /* The builders make what they say. */
  lm_arg_t a = lm_arg_none(), b = lm_arg_i64(-3), c = lm_arg_f64(1.25), d = lm_arg_ptr(&a);
  LM_ASSERT_ALL(a.kind == LM_ARG_NONE && a.ptr == NULL && b.kind == LM_ARG_INT64 && b.i64 == -3 &&
                c.kind == LM_ARG_DOUBLE && c.f64 == 1.25 && d.kind == LM_ARG_POINTER && d.ptr == &a);
}

/* Messages read as English and name the argument as the caller wrote it. */
static void test_messages_name_arguments(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE}, pavg[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG)};
  const lm_placement_t *inpl[2] = {NULL, rep};
  lm_arg_t in[2] = {lm_arg_none(), lm_arg_i64(4)}, out[1];
  int calls = 0;
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 2, in, inpl, 0, NULL, NULL, mesh, 0, NULL),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "in_placements[1] is set but inputs[1] is an INT64"));
  const lm_placement_t *inpl0[2] = {rep, NULL};
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 2, in, inpl0, 0, NULL, NULL, mesh, 0, NULL),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "inputs[0] is empty") && !has(g_msg, "a NONE"));
  /* an output of the wrong kind for its placements */
  const lm_placement_t *outpl[1] = {rep};
  LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 0, NULL, NULL, 1, outpl, NULL, mesh, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "outputs[0] is an INT64 but out_placements[0] is set"));
  /* a reshard the input cannot take names in_placements[0] */
  {
    lm_dist_tensor_t b = NULL;
    int64_t n[1] = {4};
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&b, mesh, 1, n, LM_BOOL, LM_CPU, rep));
    lm_arg_t bin[1] = {lm_arg_dist(b)};
    const lm_placement_t *binpl[1] = {pavg};
    LM_ASSERT_STATUS_ALL(call_lm(count_fn, &calls, 1, bin, binpl, 0, NULL, NULL, mesh,
                                 LM_LOCAL_MAP_RESHARD_INPUTS, NULL),
                         LM_ERR_NOT_SUPPORTED);
    LM_ASSERT_ALL(has(g_msg, "in_placements[0]") && has(g_msg, "bool"));
    lm_dist_tensor_destroy(&b);
  }
  lm_mesh_destroy(&mesh);
}

/* A scalar (0-d) dist input: kept as it is (fn sees this rank's partial) or resharded to
 * Replicate on the way in (fn sees the sum); the output is a 0-d Partial(sum) again. */
static lm_status_t scalar_in_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                                lm_arg_t *out) {
  double *seen = (double *)ud;
  DLManagedTensor *s = NULL;
  (void)mesh;
  if (nin != 1 || nout != 1 || in[0].kind != LM_ARG_TENSOR) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  if (x->ndim != 0) return LM_ERR_INVALID_ARGUMENT;
  *seen = *(const double *)x->data;
  lm_status_t st = lm_tensor_alloc(&s, 0, NULL, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  *(double *)s->dl_tensor.data = 2 * *seen;
  out[0] = lm_arg_managed(s);
  return LM_SUCCESS;
}

static void test_scalar_inputs(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int n = lm_test_size(), r = lm_test_rank();
  lm_placement_t psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)}, rep[1] = {LM_PLACEMENT_REPLICATE};
  double mine = r + 1, seen = -1, got = -1, sum = n * (n + 1) / 2.0;
  DLTensor l = {&mine, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
  DLTensor d = {&got, LM_CPU, 0, LM_FLOAT64, NULL, NULL, 0};
  lm_dist_tensor_t x = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, mesh, &l, psum, LM_SHAPE_GIVEN, NULL, 0));
  lm_arg_t in[1] = {lm_arg_dist(x)}, out[1];
  const lm_placement_t *outpl[1] = {psum};
  LM_ASSERT_OK_ALL(call_lm(scalar_in_fn, &seen, 1, in, NULL, 1, outpl, NULL, NULL, 0, out));
  LM_ASSERT_ALL(seen == mine);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather((lm_dist_tensor_t)out[0].ptr, -1, &d));
  LM_ASSERT_ALL(got == 2 * sum);
  destroy_outputs(out, 1);
  const lm_placement_t *inpl[1] = {rep};
  LM_ASSERT_OK_ALL(call_lm(scalar_in_fn, &seen, 1, in, inpl, 1, outpl, NULL, NULL,
                           LM_LOCAL_MAP_RESHARD_INPUTS, out));
  LM_ASSERT_ALL(seen == sum);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather((lm_dist_tensor_t)out[0].ptr, -1, &d));
  LM_ASSERT_ALL(got == 2 * sum * n);
  destroy_outputs(out, 1);
  /* Shard of the scalar asked for by in_placements: refused, naming it. */
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  const lm_placement_t *bad[1] = {s0};
  LM_ASSERT_STATUS_ALL(call_lm(scalar_in_fn, &seen, 1, in, bad, 1, outpl, NULL, NULL,
                               LM_LOCAL_MAP_RESHARD_INPUTS, out),
                       LM_ERR_INVALID_ARGUMENT);
  LM_ASSERT_ALL(has(g_msg, "in_placements[0]") && all_none(out, 1));
  /* Shard asked for a 0-d output by out_placements: refused on every rank, naming it; fn's
   * output is deleted (ASan builds would report a leak). */
  const lm_placement_t *badout[1] = {s0};
  LM_ASSERT_STATUS_ALL(call_lm(scalar_in_fn, &seen, 1, in, NULL, 1, badout, NULL, NULL, 0, out),
                       LM_ERR_INVALID_ARGUMENT);
  if (!has(g_msg, "out_placements[0]")) lm_test__diag("rank %d: %s\n", r, g_msg);
  LM_ASSERT_ALL(has(g_msg, "out_placements[0]") && all_none(out, 1));
  lm_dist_tensor_destroy(&x);
  lm_mesh_destroy(&mesh);
}

/* Leak accounting over the whole suite: every managed tensor made was freed. */
static void test_zz_no_leaks(void **state) {
  (void)state;
  LM_ASSERT_ALL(g_created == g_deleted);
}

/* fn fails on one rank while a Shard output takes its global shape from the allgather of local
 * extents (the default): the failure must travel with the extents, so every rank still returns
 * an error and frees every output. Last in the suite: when a rank skips the exchange the job
 * hangs until the per-test timeout aborts it. */
static void test_zz_fn_fails_with_allgather_shapes(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  const int np = lm_test_size();
  lm_placement_t rep[1] = {LM_PLACEMENT_REPLICATE};
  lm_placement_t s0[1] = {LM_PLACEMENT_SHARD(0)};
  int kinds[3] = {LM_ARG_MANAGED_TENSOR, LM_ARG_INT64, LM_ARG_MANAGED_TENSOR};
  const lm_placement_t *outpl[3] = {s0, NULL, rep};
  check_one_rank_fails(mesh, np - 1, outpl, NULL, 2, 3, kinds);
  check_one_rank_fails(mesh, 0, outpl, NULL, 2, 3, kinds);
  lm_mesh_destroy(&mesh);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_inferred_mesh_null_in_placements),
    cmocka_unit_test(test_mixed_inputs_and_outputs),
    cmocka_unit_test(test_mesh_given_or_missing),
    cmocka_unit_test(test_output_kind_errors),
    cmocka_unit_test(test_in_placements_reshard),
    cmocka_unit_test(test_cross_mesh_input),
    cmocka_unit_test(test_output_shape_modes),
    cmocka_unit_test(test_fn_fails_on_one_rank),
    cmocka_unit_test(test_fn_fails_on_two_ranks),
    cmocka_unit_test(test_no_agree),
    cmocka_unit_test(test_fn_uses_dim_comm),
    cmocka_unit_test(test_rank_outside_mesh),
    cmocka_unit_test(test_counts_disagree),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_grid_shard_outputs),
    cmocka_unit_test(test_sibling_mesh_inputs),
    cmocka_unit_test(test_tensor_alloc),
    cmocka_unit_test(test_messages_name_arguments),
    cmocka_unit_test(test_scalar_inputs),
    cmocka_unit_test(test_zz_no_leaks),
    cmocka_unit_test(test_zz_fn_fails_with_allgather_shapes),
};

LM_TEST_MAIN(tests)
