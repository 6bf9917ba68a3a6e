/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_ragged: ragged shards (LM_RAGGED, issue 21) through the API, directed. The random suite
 * (test_reshard_random, test_random_reshards_ragged) reshards them every way; this program pins
 * what it cannot: the extents registry (ids, references, lifetime), every refusal with the
 * argument it names, a PETSc-style ownership borrowed without a copy, from_global and gather,
 * a Partial reduced straight into ragged blocks (bytes counted by lm_reshard_plan_info), a plan
 * and its adjoint after the id is gone, grouped reshards, lm_local_map with ragged inputs
 * and outputs, and extents agreed from the local shapes (LM_EXTENTS_AGREED: from_local with
 * LM_SHAPE_ALLGATHER, local_map outputs, co-sharded on a 2-D mesh, refused elsewhere), and ranks
 * whose registered extents differ (LM_ERR_MISMATCH showing each rank's extents). Rows per rank: rank r owns 2r + (r == 1 ? -2 : 1) rows (rank 1 owns none).
 */
// lm-test-np: 1 2 3 4 8
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()
#define COLS 3

static int64_t rows_of(int r) { return r == 1 ? 0 : 2 * r + 1; }
static int64_t row0_of(int r) {
  int64_t o = 0;
  for (int i = 0; i < r; ++i) o += rows_of(i);
  return o;
}
static int64_t total_rows(void) { return row0_of(NP); }
static double value_at(int64_t i, int64_t j) { return (double)(i * 100 + j); }

/* The whole matrix (total_rows() x COLS) holding value_at everywhere; the caller frees it. */
static double *value_matrix(void) {
  double *m = (double *)malloc(sizeof(double) * (size_t)(total_rows() * COLS + 1));
  for (int64_t i = 0; i < total_rows(); ++i)
    for (int64_t j = 0; j < COLS; ++j) m[i * COLS + j] = value_at(i, j);
  return m;
}

/* The ownership extents of the world mesh (rows_of each rank). */
static int32_t world_extents(void) {
  int64_t e[64];
  int32_t id = 0;
  for (int r = 0; r < NP; ++r) e[r] = rows_of(r);
  LM_ASSERT_OK(lm_extents_create(&id, e, NP));
  return id;
}

/* Checks that t (any placements without Partial) holds value_at at its local offset. */
static int check_local_values(lm_dist_tensor_t t) {
  int64_t off[2], ls[2];
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ls, 2));
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  const double *d = (const double *)v.data;
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < ls[1]; ++j)
      if (d[i * ls[1] + j] != value_at(off[0] + i, off[1] + j)) return 0;
  return 1;
}

static void test_registry(void **state) {
  (void)state;
  int64_t e[3] = {2, 0, 5}, got[3] = {0, 0, 0}, n = 0;
  int32_t a = 0, b = 0, c = 0;
  LM_ASSERT_OK(lm_extents_create(&a, e, 3));
  LM_ASSERT_OK(lm_extents_create(&b, e, 3));
  LM_ASSERT_ALL(a >= 1 && a == b); /* equal extents, one id, two references */
  LM_ASSERT_OK(lm_extents_get(a, NULL, 0, &n));
  LM_ASSERT_ALL(n == 3);
  LM_ASSERT_OK(lm_extents_get(a, got, 3, &n));
  LM_ASSERT_ALL(got[0] == 2 && got[1] == 0 && got[2] == 5);
  LM_EXPECT_ALL(lm_extents_get(a, got, 2, &n), LM_ERR_INVALID_ARGUMENT, "capacity");
  LM_EXPECT_ALL(lm_extents_get(a, got, 3, NULL), LM_ERR_INVALID_ARGUMENT, "count");
  int64_t neg[2] = {3, -1}, big[2] = {INT64_MAX, 1};
  LM_EXPECT_ALL(lm_extents_create(&c, neg, 2), LM_ERR_INVALID_ARGUMENT, "extents[1]");
  LM_ASSERT_ALL(c == 0);
  LM_EXPECT_ALL(lm_extents_create(&c, big, 2), LM_ERR_INVALID_ARGUMENT, "overflows");
  LM_EXPECT_ALL(lm_extents_create(&c, e, 0), LM_ERR_INVALID_ARGUMENT, "count");
  LM_EXPECT_ALL(lm_extents_create(&c, NULL, 3), LM_ERR_INVALID_ARGUMENT, "extents is NULL");
  LM_EXPECT_ALL(lm_extents_create(NULL, e, 3), LM_ERR_INVALID_ARGUMENT, "id is NULL");
  LM_ASSERT_OK(lm_extents_destroy(a));
  LM_ASSERT_OK(lm_extents_get(a, NULL, 0, &n)); /* one reference left */
  LM_ASSERT_OK(lm_extents_destroy(b));
  LM_EXPECT_ALL(lm_extents_get(a, NULL, 0, &n), LM_ERR_INVALID_ARGUMENT, "not a registered");
  LM_EXPECT_ALL(lm_extents_destroy(a), LM_ERR_INVALID_ARGUMENT, "holds no reference");
  LM_ASSERT_OK(lm_extents_destroy(0));
  LM_ASSERT_OK(lm_extents_create(&c, e, 3));
  LM_ASSERT_ALL(c != a); /* ids are never reused */
  LM_ASSERT_OK(lm_extents_destroy(c));
}

static void test_refusals(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_dist_tensor_t t = NULL;
  int32_t id = world_extents(), shortid = 0, wrong = 0;
  int64_t g[2] = {total_rows(), COLS}, e1[1] = {1}, e[64];
  for (int r = 0; r < NP; ++r) e[r] = rows_of(r) + (r == 0);
  LM_ASSERT_OK(lm_extents_create(&shortid, e1, 1));
  LM_ASSERT_OK(lm_extents_create(&wrong, e, NP)); /* adds up to one row too many */
  DLDataType f64 = {kDLFloat, 64, 1};
  DLDevice cpu = {kDLCPU, 0};
  lm_placement_t p = LM_PLACEMENT_RAGGED(0, id);
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  p = (lm_placement_t)LM_PLACEMENT_RAGGED(0, 999999);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "placements[0]: Ragged shard extents id 999999 is not registered");
  p = (lm_placement_t)LM_PLACEMENT_RAGGED(2, id);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "dim 2 out of range");
  p = (lm_placement_t)LM_PLACEMENT_RAGGED(0, wrong);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                "add up to");
  if (NP > 1) {
    p = (lm_placement_t)LM_PLACEMENT_RAGGED(0, shortid);
    LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &p), LM_ERR_INVALID_ARGUMENT,
                  "has 1 extents, the mesh dim");
  }
  /* A ragged dim must split first: on a 1 x NP mesh, Shard(0) on mesh dim 0 splits row 0 first. */
  lm_mesh_t m2 = NULL;
  int64_t s2[2] = {1, NP};
  int32_t one = 0;
  int64_t all[1] = {g[0]};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m2, lm_test_comm_f(), 2, s2, NULL));
  LM_ASSERT_OK(lm_extents_create(&one, all, 1));
  lm_placement_t q[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_RAGGED(0, id)};
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m2, 2, g, f64, cpu, q), LM_ERR_INVALID_ARGUMENT,
                "must split tensor dim 0 first");
  q[0] = (lm_placement_t)LM_PLACEMENT_RAGGED(0, one);
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m2, 2, g, f64, cpu, q), LM_ERR_INVALID_ARGUMENT,
                "must split tensor dim 0 first"); /* two ragged dims on one tensor dim */
  q[1] = (lm_placement_t)LM_PLACEMENT_SHARD(0); /* ragged first, Shard inside each block: fine */
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m2, 2, g, f64, cpu, q));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  char buf[64];
  LM_ASSERT_OK(lm_placements_format(q, 2, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[RS(0), S(0)]") == 0);
  LM_ASSERT_OK(lm_extents_destroy(one));
  LM_ASSERT_OK(lm_mesh_destroy(&m2));
  LM_ASSERT_OK(lm_extents_destroy(shortid));
  LM_ASSERT_OK(lm_extents_destroy(wrong));
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* PETSc-style ownership: each rank borrows its own rows, without a copy, in every shape mode. */
static void test_borrow_and_gather(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int32_t id = world_extents();
  int64_t rows = rows_of(ME), r0 = row0_of(ME), g[2] = {total_rows(), COLS};
  double *mine = (double *)malloc(sizeof(double) * (size_t)(rows * COLS + 1));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < COLS; ++j) mine[i * COLS + j] = value_at(r0 + i, j);
  int64_t ls[2] = {rows, COLS};
  DLTensor local = {mine, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, ls, NULL, 0};
  lm_placement_t p = LM_PLACEMENT_RAGGED(0, id);
  double *full = (double *)calloc((size_t)(g[0] * COLS + 1), sizeof(double));
  DLTensor dst = {full, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, NULL, 0};
  const lm_shape_mode_t modes[3] = {LM_SHAPE_GIVEN, LM_SHAPE_EVEN, LM_SHAPE_ALLGATHER};
  for (int k = 0; k < 3; ++k) {
    lm_dist_tensor_t t = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, mesh, &local, &p, modes[k], g,
                                               LM_FROM_LOCAL_BORROW));
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
    LM_ASSERT_ALL(v.data == (void *)mine); /* borrowed, not copied */
    int64_t gs[2] = {0, 0};
    LM_ASSERT_OK(lm_dist_tensor_global_shape(t, gs, 2));
    LM_ASSERT_ALL(gs[0] == g[0] && gs[1] == COLS);
    memset(full, 0, sizeof(double) * (size_t)(g[0] * COLS));
    LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &dst));
    int ok = 1;
    for (int64_t i = 0; i < g[0]; ++i)
      for (int64_t j = 0; j < COLS; ++j) ok = ok && full[i * COLS + j] == value_at(i, j);
    LM_ASSERT_ALL(ok);
    LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  }
  /* A local shape that is not this rank's block is refused, naming the placements. */
  int64_t bad[2] = {rows + 1, COLS};
  DLTensor wrong = local;
  wrong.shape = bad;
  double *more = (double *)calloc((size_t)((rows + 1) * COLS), sizeof(double));
  wrong.data = more;
  lm_dist_tensor_t t = NULL;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, mesh, &wrong, &p, LM_SHAPE_GIVEN, g,
                                          LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "RS(0)");
  /* from_global slices the same blocks. */
  free(full);
  dst.data = full = value_matrix();
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&t, mesh, &dst, &p, 0));
  int64_t off[2], lsh[2];
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, lsh, 2));
  LM_ASSERT_ALL(off[0] == r0 && lsh[0] == rows && check_local_values(t));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  free(more);
  free(full);
  free(mine);
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* Partial(sum) -> ragged: one reduce-scatter into the ragged blocks, no second exchange: each rank
 * sends every other rank's block once and receives its own block from every other rank. */
static void test_partial_into_ragged(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int32_t id = world_extents();
  int64_t g[2] = {total_rows(), COLS};
  DLDataType f64 = {kDLFloat, 64, 1};
  lm_placement_t src = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM), dst = LM_PLACEMENT_RAGGED(0, id);
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, mesh, &src, NULL, &dst, 2, g, f64));
  lm_reshard_plan_info_t info = LM_RESHARD_PLAN_INFO_INIT;
  LM_ASSERT_OK(lm_reshard_plan_info(plan, 0, &info));
  const int64_t row = COLS * 8;
  LM_ASSERT_ALL(info.bytes_sent == (g[0] - rows_of(ME)) * row);
  LM_ASSERT_ALL(info.bytes_received == (NP - 1) * rows_of(ME) * row);
  LM_ASSERT_ALL(info.steps == 1);
  /* Values: rank r holds (r + 1) * value; the sum is value * NP (NP + 1) / 2. */
  lm_dist_tensor_t s = NULL, d = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&s, mesh, 2, g, f64, (DLDevice){kDLCPU, 0}, &src));
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(s, &v));
  for (int64_t i = 0; i < g[0]; ++i)
    for (int64_t j = 0; j < COLS; ++j) ((double *)v.data)[i * COLS + j] = (ME + 1) * value_at(i, j);
  LM_ASSERT_OK(lm_extents_destroy(id)); /* the plan keeps its extents */
  LM_ASSERT_OK(lm_reshard_plan_alloc_target(&d, plan, (DLDevice){kDLCPU, 0}));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, s, d));
  int64_t off[2], ls[2];
  LM_ASSERT_OK(lm_dist_tensor_local_offset(d, off, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(d, ls, 2));
  LM_ASSERT_ALL(off[0] == row0_of(ME) && ls[0] == rows_of(ME));
  LM_ASSERT_OK(lm_dist_tensor_local(d, &v));
  int ok = 1;
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < COLS; ++j)
      ok = ok && ((double *)v.data)[i * COLS + j] == value_at(off[0] + i, j) * NP * (NP + 1) / 2;
  LM_ASSERT_ALL(ok);
  /* The target's placements name extents the tensor keeps readable. */
  lm_placement_t got;
  int64_t n = 0, e[64];
  LM_ASSERT_OK(lm_dist_tensor_placements(d, &got, 1));
  LM_ASSERT_ALL(got.kind == LM_RAGGED && got.dim == 0);
  LM_ASSERT_OK(lm_extents_get(got.extents, e, 64, &n));
  LM_ASSERT_ALL(n == NP && e[ME] == rows_of(ME));
  /* The adjoint (RS -> R, PyTorch's convention: Partial(sum)'s gradient is replicated). */
  lm_reshard_plan_t adj = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_adjoint(&adj, plan));
  lm_dist_tensor_t back = NULL;
  LM_ASSERT_OK(lm_reshard_plan_alloc_target(&back, adj, (DLDevice){kDLCPU, 0}));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(adj, d, back));
  LM_ASSERT_OK(lm_dist_tensor_local(back, &v));
  ok = 1;
  for (int64_t i = 0; i < g[0]; ++i)
    for (int64_t j = 0; j < COLS; ++j)
      ok = ok && ((double *)v.data)[i * COLS + j] == value_at(i, j) * NP * (NP + 1) / 2;
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&adj));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&d));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&s));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  LM_EXPECT_ALL(lm_extents_get(got.extents, NULL, 0, &n), LM_ERR_INVALID_ARGUMENT, "not a registered");
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* Grouped: two tensors, ragged -> Shard(0) and Shard(1) -> ragged, in one group. */
static void test_grouped(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int32_t id = world_extents();
  int64_t g[2] = {total_rows(), COLS};
  DLDataType f64 = {kDLFloat, 64, 1};
  double *full = value_matrix();
  DLTensor gt = {full, {kDLCPU, 0}, 2, f64, g, NULL, 0};
  lm_placement_t rs = LM_PLACEMENT_RAGGED(0, id), s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  lm_dist_tensor_t src[2] = {NULL, NULL}, out[2] = {NULL, NULL};
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&src[0], mesh, &gt, &rs, -1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&src[1], mesh, &gt, &s1, -1));
  const lm_reshard_entry_t e[2] = {{2, g, f64, &rs, &s0}, {2, g, f64, &s1, &rs}};
  lm_reshard_group_t grp = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_group_create(&grp, mesh, NULL, 2, e, NULL));
  LM_ASSERT_OK(lm_reshard_group_alloc_targets(out, grp, (DLDevice){kDLCPU, 0}, 2));
  LM_ASSERT_OK_ALL(lm_reshard_group_execute(grp, 2, src, out));
  LM_ASSERT_OK(lm_reshard_group_destroy(&grp));
  LM_ASSERT_ALL(check_local_values(out[0]) && check_local_values(out[1]));
  int64_t off[2], ls[2];
  LM_ASSERT_OK(lm_dist_tensor_local_offset(out[1], off, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(out[1], ls, 2));
  LM_ASSERT_ALL(off[0] == row0_of(ME) && ls[0] == rows_of(ME));
  for (int i = 0; i < 2; ++i) {
    LM_ASSERT_OK(lm_dist_tensor_destroy(&out[i]));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&src[i]));
  }
  free(full);
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* lm_local_map: a ragged input as it is (in_placements NULL), a row-wise function, and two
 * outputs: the rows doubled (ragged, global shape from the extents, no allgather) and the local
 * row count (Partial(sum): the total). user_data non-NULL: fn returns one row too many. */
static void mt_deleter(DLManagedTensor *m) {
  free(m->dl_tensor.data);
  free(m->dl_tensor.shape);
  free(m);
}

static DLManagedTensor *mt_new(int ndim, int64_t d0, int64_t d1) {
  DLManagedTensor *m = (DLManagedTensor *)calloc(1, sizeof *m);
  m->dl_tensor.shape = (int64_t *)calloc(2, sizeof(int64_t));
  m->dl_tensor.shape[0] = d0;
  m->dl_tensor.shape[1] = d1;
  m->dl_tensor.ndim = ndim;
  m->dl_tensor.dtype = (DLDataType){kDLFloat, 64, 1};
  m->dl_tensor.device = (DLDevice){kDLCPU, 0};
  m->dl_tensor.data = calloc((size_t)(d0 * (ndim > 1 ? d1 : 1) + 1), sizeof(double));
  m->deleter = mt_deleter;
  return m;
}

static lm_status_t rowwise(void *user, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)mesh;
  (void)nin;
  (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *y = mt_new(2, x->shape[0] + (user != NULL), x->shape[1]), *n = mt_new(1, 1, 1);
  int64_t cnt = x->shape[0] * x->shape[1];
  for (int64_t i = 0; i < cnt; ++i)
    ((double *)y->dl_tensor.data)[i] = 2 * ((const double *)x->data)[i];
  ((double *)n->dl_tensor.data)[0] = (double)x->shape[0];
  out[0] = lm_arg_managed(y);
  out[1] = lm_arg_managed(n);
  return LM_SUCCESS;
}

static void test_local_map(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int32_t id = world_extents();
  int64_t g[2] = {total_rows(), COLS};
  DLDataType f64 = {kDLFloat, 64, 1};
  double *full = value_matrix(), *yfull = value_matrix();
  DLTensor gt = {full, {kDLCPU, 0}, 2, f64, g, NULL, 0};
  lm_placement_t rs = LM_PLACEMENT_RAGGED(0, id), psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  lm_dist_tensor_t x = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, mesh, &gt, &rs, -1));
  lm_arg_t in[1] = {lm_arg_dist(x)};
  lm_arg_t out[2];
  const lm_placement_t *op[2] = {&rs, &psum};
  LM_ASSERT_OK_ALL(lm_local_map(rowwise, NULL, 1, in, NULL, 2, op, NULL, mesh, 0, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && out[1].kind == LM_ARG_DIST_TENSOR);
  lm_dist_tensor_t yt = (lm_dist_tensor_t)out[0].ptr, nt = (lm_dist_tensor_t)out[1].ptr;
  int64_t gs[2] = {0, 0}, off[2];
  LM_ASSERT_OK(lm_dist_tensor_global_shape(yt, gs, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(yt, off, 2));
  LM_ASSERT_ALL(gs[0] == g[0] && gs[1] == COLS && off[0] == row0_of(ME));
  double tot = 0;
  int64_t one = 1;
  DLTensor td = {&tot, {kDLCPU, 0}, 1, f64, &one, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(nt, -1, &td));
  LM_ASSERT_ALL(tot == (double)g[0]);
  DLTensor yd = gt;
  yd.data = yfull;
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(yt, -1, &yd));
  int ok = 1;
  for (int64_t i = 0; i < g[0] * COLS; ++i) ok = ok && yfull[i] == 2 * full[i];
  LM_ASSERT_ALL(ok);
  /* An output whose local shape is not this rank's ragged block is refused, naming it. */
  LM_EXPECT_ALL(lm_local_map(rowwise, &one, 1, in, NULL, 2, op, NULL, mesh, 0, out),
                LM_ERR_INVALID_ARGUMENT, "outputs[0]");
  LM_ASSERT_OK(lm_dist_tensor_destroy(&yt));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&nt));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  free(yfull);
  free(full);
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* The extents of id (count n) equal want[0..n). */
static int extents_are(int32_t id, const int64_t *want, int64_t n) {
  int64_t got[64], cnt = -1;
  if (id == 0 || lm_extents_get(id, got, 64, &cnt) != LM_SUCCESS || cnt != n) return 0;
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return 0;
  return 1;
}

/* LM_EXTENTS_AGREED with from_local: each rank borrows its own rows, nobody registers extents;
 * the tensor names extents the library registered, readable while it lives (and while anything
 * else holds equal extents: here the cached plans of the tests before). */
static void test_agreed_from_local(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  int64_t rows = rows_of(ME), r0 = row0_of(ME), ls[2] = {rows, COLS}, e[64];
  for (int r = 0; r < NP; ++r) e[r] = rows_of(r);
  double *mine = (double *)malloc(sizeof(double) * (size_t)(rows * COLS + 1));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < COLS; ++j) mine[i * COLS + j] = value_at(r0 + i, j);
  DLTensor local = {mine, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, ls, NULL, 0};
  lm_placement_t p = LM_PLACEMENT_RAGGED(0, LM_EXTENTS_AGREED), got;
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, mesh, &local, &p, LM_SHAPE_ALLGATHER, NULL,
                                             LM_FROM_LOCAL_BORROW));
  DLTensor v;
  int64_t gs[2] = {0, 0}, off[2] = {-1, -1};
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  LM_ASSERT_OK(lm_dist_tensor_global_shape(t, gs, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  LM_ASSERT_ALL(v.data == (void *)mine && gs[0] == total_rows() && gs[1] == COLS && off[0] == r0);
  LM_ASSERT_OK(lm_dist_tensor_placements(t, &got, 1));
  LM_ASSERT_ALL(got.kind == LM_RAGGED && got.dim == 0 && extents_are(got.extents, e, NP));
  /* Gathered whole, and resharded to even rows and back to the tensor's own placements. */
  double *full = (double *)calloc((size_t)(total_rows() * COLS + 1), sizeof(double));
  DLTensor dst = {full, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, gs, NULL, 0};
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(t, -1, &dst));
  int ok = 1;
  for (int64_t i = 0; i < gs[0] * COLS; ++i) ok = ok && full[i] == value_at(i / COLS, i % COLS);
  LM_ASSERT_ALL(ok);
  lm_dist_tensor_t s = NULL, back = NULL;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&s, t, mesh, &s0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&back, s, mesh, &got));
  LM_ASSERT_ALL(check_local_values(s) && check_local_values(back));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&s));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&back));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  /* Only where the local shapes meet: the local modes and everything else refuse id 0. */
  int64_t g[2] = {total_rows(), COLS};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, mesh, &local, &p, LM_SHAPE_GIVEN, g,
                                          LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "placements[0]: Ragged shard extents 0");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, mesh, &local, &p, LM_SHAPE_EVEN, NULL,
                                          LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "LM_SHAPE_ALLGATHER");
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, mesh, 2, g, (DLDataType){kDLFloat, 64, 1},
                                     (DLDevice){kDLCPU, 0}, &p),
                LM_ERR_INVALID_ARGUMENT, "LM_EXTENTS_AGREED");
  char buf[64];
  LM_ASSERT_OK(lm_placements_format(&p, 1, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[RS(0, agreed)]") == 0);
  free(full);
  free(mine);
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* Co-sharded on an A x B mesh (B = 2 when NP is even): RS(0, agreed) on mesh dim 0 splits the rows
 * into blocks of rows_of(i0), S(0) on mesh dim 1 splits each block like torch.chunk. Extents
 * that break the chunk rule inside a block are refused on every rank. */
static void test_agreed_coshard(void **state) {
  (void)state;
  const int64_t B = NP % 2 == 0 ? 2 : 1, A = NP / B, i0 = ME / B, i1 = ME % B;
  int64_t shape[2] = {A, B}, blk[64], row0 = 0, total = 0;
  for (int64_t i = 0; i < A; ++i) blk[i] = rows_of((int)i);
  for (int64_t i = 0; i < A; ++i) total += blk[i];
  for (int64_t i = 0; i < i0; ++i) row0 += blk[i];
  int64_t c_off = 0, c_len = 0;
  LM_ASSERT_OK(lm_layout_chunk(blk[i0], B, i1, &c_off, &c_len));
  lm_mesh_t m2 = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m2, lm_test_comm_f(), 2, shape, NULL));
  double *mine = (double *)malloc(sizeof(double) * (size_t)((c_len + 3) * COLS));
  for (int64_t i = 0; i < c_len; ++i)
    for (int64_t j = 0; j < COLS; ++j) mine[i * COLS + j] = value_at(row0 + c_off + i, j);
  int64_t ls[2] = {c_len, COLS};
  DLTensor local = {mine, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, ls, NULL, 0};
  lm_placement_t p[2] = {LM_PLACEMENT_RAGGED(0, LM_EXTENTS_AGREED), LM_PLACEMENT_SHARD(0)}, got[2];
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m2, &local, p, LM_SHAPE_ALLGATHER, NULL, 0));
  int64_t gs[2] = {0, 0}, off[2] = {-1, -1};
  LM_ASSERT_OK(lm_dist_tensor_global_shape(t, gs, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, off, 2));
  LM_ASSERT_OK(lm_dist_tensor_placements(t, got, 2));
  LM_ASSERT_ALL(gs[0] == total && off[0] == row0 + c_off && check_local_values(t));
  LM_ASSERT_ALL(got[0].kind == LM_RAGGED && extents_are(got[0].extents, blk, A));
  LM_ASSERT_ALL(got[1].kind == LM_SHARD && got[1].dim == 0);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  if (B == 2) { /* the second rank of each block holds two rows more: no chunk of any block */
    ls[0] = c_len + 2 * (i1 == 1);
    LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m2, &local, p, LM_SHAPE_ALLGATHER, NULL, 0),
                  LM_ERR_INVALID_ARGUMENT, "do not follow the layout");
    /* RS(0, agreed) on mesh dim 1 with a replicated dim 0: the rows of mesh row 1 disagree. */
    lm_placement_t q[2] = {LM_PLACEMENT_REPLICATE, LM_PLACEMENT_RAGGED(0, LM_EXTENTS_AGREED)};
    ls[0] = i0 == 1 ? 1 + i1 : 2 * i1;
    if (A > 1)
      LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m2, &local, q, LM_SHAPE_ALLGATHER, NULL, 0),
                    LM_ERR_INVALID_ARGUMENT, "mesh rank");
  }
  free(mine);
  LM_ASSERT_OK(lm_mesh_destroy(&m2));
}

/* fn makes this rank's rows (own_rows_of(ME) of them, value_at), with no dist input: a count only
 * known locally, as MoE capacity or a load-balanced partition is. Extents no other test uses, so
 * no cached plan holds them. */
static int64_t own_rows_of(int r) { return rows_of(r) + 2; }
static int64_t own_row0_of(int r) { return row0_of(r) + 2 * r; }
static lm_status_t own_rows(void *user, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                            lm_arg_t *out) {
  (void)user;
  (void)mesh;
  (void)nin;
  (void)in;
  (void)nout;
  DLManagedTensor *y = mt_new(2, own_rows_of(ME), COLS);
  for (int64_t i = 0; i < own_rows_of(ME); ++i)
    for (int64_t j = 0; j < COLS; ++j)
      ((double *)y->dl_tensor.data)[i * COLS + j] = value_at(own_row0_of(ME) + i, j);
  out[0] = lm_arg_managed(y);
  return LM_SUCCESS;
}

/* A local_map output with LM_EXTENTS_AGREED: its extents come from the allgather of local shapes;
 * the record keeps them readable after the output is gone. With out_shapes: refused. */
static void test_agreed_local_map(void **state) {
  (void)state;
  lm_mesh_t mesh = lm_test_world_mesh();
  lm_placement_t rs = LM_PLACEMENT_RAGGED(0, LM_EXTENTS_AGREED), got, rec_pl;
  const lm_placement_t *op[1] = {&rs};
  lm_arg_t out[1];
  lm_local_map_record_t rec = NULL;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.record = &rec;
  LM_ASSERT_OK_ALL(lm_local_map_ex(own_rows, NULL, 0, NULL, NULL, 1, op, NULL, mesh, 0, &opt, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR);
  lm_dist_tensor_t y = (lm_dist_tensor_t)out[0].ptr;
  int64_t e[64], gs[2] = {0, 0}, n = 0;
  for (int r = 0; r < NP; ++r) e[r] = own_rows_of(r);
  int cnt = 0;
  LM_ASSERT_OK(lm_dist_tensor_placements(y, &got, 1));
  LM_ASSERT_OK(lm_local_map_record_placements(rec, LM_RECORD_OUT, 0, 1, &rec_pl, &cnt));
  LM_ASSERT_OK(lm_dist_tensor_global_shape(y, gs, 2));
  LM_ASSERT_ALL(got.kind == LM_RAGGED && extents_are(got.extents, e, NP) && rec_pl.extents == got.extents);
  LM_ASSERT_ALL(gs[0] == own_row0_of(NP) && check_local_values(y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_ALL(extents_are(got.extents, e, NP)); /* the record holds them */
  LM_ASSERT_OK(lm_local_map_record_destroy(&rec));
  LM_EXPECT_ALL(lm_extents_get(got.extents, NULL, 0, &n), LM_ERR_INVALID_ARGUMENT, "not a registered");
  int64_t g[2] = {own_row0_of(NP), COLS};
  const int64_t *shapes[1] = {g};
  LM_EXPECT_ALL(lm_local_map(own_rows, NULL, 0, NULL, NULL, 1, op, shapes, mesh, 0, out),
                LM_ERR_INVALID_ARGUMENT, "out_placements[0][0]: Ragged shard extents 0");
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

/* The extents of rank q's disagreeing registration (the extra row in block q): 2 rows per block
 * but 3 in block q, so every two ranks differ while the sums agree. "RS(0)[2,3,2]" for q = 1 at
 * np 3: what a mismatch message must show for q, written out here from that rule. */
static void skewed_extents(int q, int64_t *e, char *text, size_t cap) {
  size_t n = (size_t)snprintf(text, cap, "RS(0)[");
  for (int r = 0; r < NP; ++r) {
    e[r] = 2 + (r == q);
    n += (size_t)snprintf(text + n, cap - n, r ? ",%lld" : "%lld", (long long)e[r]);
  }
  snprintf(text + n, cap - n, "]");
}

/* Every rank's text in msg (the mismatch lists each distinct value with its ranks, the first
 * four values, in rank order, then "..."). */
static int names_every_rank(const char *msg) {
  int64_t e[64];
  char want[128];
  for (int q = 0; q < NP && q < 4; ++q) {
    skewed_extents(q, e, want, sizeof want);
    if (!strstr(msg, want)) {
      fprintf(stderr, "rank %d: \"%s\" not in the mismatch message: %s\n", ME, want, msg);
      return 0;
    }
  }
  return 1;
}

/* Ranks whose ragged extents differ (each registered its own, with the same sum): the agreement
 * fails with LM_ERR_MISMATCH on every rank, and its message shows the extents that differ, not
 * "[RS(0)]" for every rank. As a source (the tensor's layout) and as target placements. */
static void test_extents_mismatch(void **state) {
  (void)state;
  if (NP < 2) {
    lm_test_skip("needs 2 ranks to disagree (np %d)", NP);
    return;
  }
  lm_mesh_t mesh = lm_test_world_mesh();
  int64_t e[64], g[2] = {2 * NP + 1, COLS};
  char mine[128], msg[1024];
  int32_t id = 0;
  skewed_extents(ME, e, mine, sizeof mine);
  LM_ASSERT_OK(lm_extents_create(&id, e, NP));
  DLDataType f64 = {kDLFloat, 64, 1};
  DLDevice cpu = {kDLCPU, 0};
  lm_placement_t rs = LM_PLACEMENT_RAGGED(0, id), rep = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL, out = NULL;
  LM_ASSERT_OK(lm_dist_tensor_zeros(&t, mesh, 2, g, f64, cpu, &rs)); /* local */
  LM_ASSERT_OK(lm_dist_tensor_zeros(&r, mesh, 2, g, f64, cpu, &rep));
  lm_status_t st = lm_dist_tensor_reshard(&out, t, mesh, &rep);
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  LM_ASSERT_STATUS_ALL(st, LM_ERR_MISMATCH);
  LM_ASSERT_ALL(out == NULL && strstr(msg, "disagree on source placements") != NULL &&
                names_every_rank(msg));
  st = lm_dist_tensor_reshard(&out, r, mesh, &rs);
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  LM_ASSERT_STATUS_ALL(st, LM_ERR_MISMATCH);
  LM_ASSERT_ALL(out == NULL && strstr(msg, "disagree on target placements") != NULL &&
                names_every_rank(msg));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK(lm_extents_destroy(id));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_registry),
    cmocka_unit_test(test_refusals),
    cmocka_unit_test(test_borrow_and_gather),
    cmocka_unit_test(test_partial_into_ragged),
    cmocka_unit_test(test_grouped),
    cmocka_unit_test(test_local_map),
    cmocka_unit_test(test_agreed_from_local),
    cmocka_unit_test(test_agreed_coshard),
    cmocka_unit_test(test_agreed_local_map),
    cmocka_unit_test(test_extents_mismatch),
};

LM_TEST_MAIN(tests)
