/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_mesh: versions, status strings, the MPI bootstrap helpers, lm_mesh_* (default, explicit,
 * reversed and subset rank lists, named dims, communicators), lm_layout_chunk,
 * lm_placements_format, and their bad inputs, including arguments that differ between ranks.
 */
#include <limits.h>

#include "lm_test.h"

#include "localmap_mpi.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static int world_size(void) { return lm_test_size(); }
static int world_rank(void) { return lm_test_rank(); }

/* A zeroed buffer, big enough for any handle struct: a foreign (or destroyed-looking) handle. */
static _Alignas(64) unsigned char g_foreign[4096];

static lm_mesh_t make_world_mesh_1d(void) {
  lm_mesh_t m = NULL;
  int64_t shape[1] = {world_size()};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, NULL));
  return m;
}

/* Sum of the world ranks over a mesh dim's communicator, and that communicator's size and rank. */
static void dim_comm_info(lm_mesh_t m, int dim, long *sum, int *size, int *rank) {
  int f = -1;
  MPI_Comm c = MPI_COMM_NULL;
  long mine = world_rank();
  *sum = -1;
  *size = -1;
  *rank = -1;
  if (lm_mesh_dim_comm(m, dim, &f) != LM_SUCCESS) return;
  c = MPI_Comm_f2c((MPI_Fint)f);
  if (c == MPI_COMM_NULL) return;
  MPI_Allreduce(&mine, sum, 1, MPI_LONG, MPI_SUM, c);
  MPI_Comm_size(c, size);
  MPI_Comm_rank(c, rank);
}

/* ---------------------------------------------------------------------------------------------
 * Versions, status strings, errors, bootstrap
 * ------------------------------------------------------------------------------------------- */
static void test_version(void **state) {
  (void)state;
  LM_ASSERT_ALL(lm_get_version() == LM_VERSION_CODE);
  LM_ASSERT_ALL(LM_VERSION_CODE == LM_VERSION_MAJOR * 10000 + LM_VERSION_MINOR * 100 + LM_VERSION_PATCH);
}

static void test_status_strings_distinct(void **state) {
  const char *s[LM_ERR_USER + 1];
  int i, j, ok = 1;
  (void)state;
  for (i = 0; i <= LM_ERR_USER; ++i) {
    s[i] = lm_status_string((lm_status_t)i);
    if (s[i] == NULL || s[i][0] == '\0') ok = 0;
  }
  LM_ASSERT_ALL(ok);
  for (i = 0; i <= LM_ERR_USER; ++i)
    for (j = i + 1; j <= LM_ERR_USER; ++j)
      if (strcmp(s[i], s[j]) == 0) ok = 0;
  LM_ASSERT_ALL(ok);
  LM_ASSERT_ALL(strstr(lm_status_string(LM_ERR_INVALID_ARGUMENT), "LM_ERR_INVALID_ARGUMENT") != NULL);
  LM_ASSERT_ALL(strstr(lm_status_string(LM_SUCCESS), "LM_SUCCESS") != NULL);
  LM_ASSERT_ALL(lm_status_string((lm_status_t)99) != NULL);
  LM_ASSERT_ALL(lm_status_string((lm_status_t)-1) != NULL);
}

static void test_last_error_message_never_null(void **state) {
  int64_t off = 0, len = 0;
  (void)state;
  LM_ASSERT_ALL(lm_last_error_message() != NULL);
  LM_EXPECT_ALL(lm_layout_chunk(-1, 1, 0, &off, &len), LM_ERR_INVALID_ARGUMENT, "n");
  LM_ASSERT_ALL(lm_last_error_message() != NULL && lm_last_error_message()[0] != '\0');
  LM_ASSERT_OK_ALL(lm_layout_chunk(4, 2, 1, &off, &len));
  LM_ASSERT_ALL(lm_last_error_message() != NULL);
  /* The message names the rank when MPI runs. */
  LM_EXPECT_ALL(lm_layout_chunk(4, 0, 0, &off, &len), LM_ERR_INVALID_ARGUMENT, "rank");
}

static void test_init_and_world(void **state) {
  int f = -1, r = -1, n = -1, inited = 0;
  (void)state;
  /* MPI is initialised already: lm_init does nothing; argc/argv may be NULL. */
  LM_ASSERT_OK_ALL(lm_init(NULL, NULL));
  LM_ASSERT_OK_ALL(lm_comm_world(&f));
  LM_ASSERT_ALL(f == (int)MPI_Comm_c2f(MPI_COMM_WORLD));
  LM_ASSERT_ALL(MPI_Comm_f2c((MPI_Fint)f) == MPI_COMM_WORLD);
  LM_ASSERT_OK_ALL(lm_world_rank(&r, &n));
  LM_ASSERT_ALL(r == world_rank() && n == world_size());
  LM_EXPECT_ALL(lm_comm_world(NULL), LM_ERR_INVALID_ARGUMENT, "comm_f");
  LM_EXPECT_ALL(lm_world_rank(NULL, &n), LM_ERR_INVALID_ARGUMENT, "rank");
  LM_EXPECT_ALL(lm_world_rank(&r, NULL), LM_ERR_INVALID_ARGUMENT, "size");
  /* lm_finalize does nothing when lm_init did not initialise MPI. */
  LM_ASSERT_OK_ALL(lm_finalize());
  MPI_Initialized(&inited);
  LM_ASSERT_ALL(inited);
  {
    int fin = 1;
    MPI_Finalized(&fin);
    LM_ASSERT_ALL(!fin);
  }
  {
    int sup = -1;
    LM_ASSERT_OK_ALL(lm_device_supported(kDLCPU, &sup));
    LM_ASSERT_ALL(sup == 1);
    LM_EXPECT_ALL(lm_device_supported(kDLCPU, NULL), LM_ERR_INVALID_ARGUMENT, "supported");
  }
}

/* ---------------------------------------------------------------------------------------------
 * Meshes
 * ------------------------------------------------------------------------------------------- */
static void test_mesh_default_1d(void **state) {
  lm_mesh_t m;
  int nd = -1, sz = -1, mem = -1, mr = -1, pr = -1, csize = -1, crank = -1, f = -1;
  int64_t shape[2] = {-1, -7}, coord[2] = {-1, -7};
  long sum = 0;
  char name[16] = "xx";
  MPI_Comm c;
  (void)state;
  m = make_world_mesh_1d();
  LM_ASSERT_ALL(m != NULL);
  LM_ASSERT_OK_ALL(lm_mesh_ndim(m, &nd));
  LM_ASSERT_ALL(nd == 1);
  LM_ASSERT_OK_ALL(lm_mesh_shape(m, shape, 2));
  LM_ASSERT_ALL(shape[0] == world_size() && shape[1] == -7); /* writes min(n, ndim) */
  LM_ASSERT_OK_ALL(lm_mesh_size(m, &sz));
  LM_ASSERT_ALL(sz == world_size());
  LM_ASSERT_OK_ALL(lm_mesh_is_member(m, &mem));
  LM_ASSERT_ALL(mem == 1);
  LM_ASSERT_OK_ALL(lm_mesh_coord(m, coord, 2));
  LM_ASSERT_ALL(coord[0] == world_rank());
  LM_ASSERT_OK_ALL(lm_mesh_rank(m, &mr));
  LM_ASSERT_ALL(mr == world_rank());
  coord[0] = world_size() - 1;
  LM_ASSERT_OK_ALL(lm_mesh_rank_at(m, coord, 1, &pr));
  LM_ASSERT_ALL(pr == world_size() - 1);
  LM_ASSERT_OK_ALL(lm_mesh_dim_name(m, 0, name, sizeof name));
  LM_ASSERT_ALL(name[0] == '\0'); /* unnamed */
  LM_EXPECT_ALL(lm_mesh_dim_index(m, "dp", &nd), LM_ERR_INVALID_ARGUMENT, "dp");
  LM_EXPECT_ALL(lm_mesh_dim_index(m, "", &nd), LM_ERR_INVALID_ARGUMENT, NULL);
  /* The mesh communicator: all ranks, in row-major order, not MPI_COMM_WORLD itself. */
  LM_ASSERT_OK_ALL(lm_mesh_comm(m, &f));
  c = MPI_Comm_f2c((MPI_Fint)f);
  MPI_Comm_size(c, &csize);
  MPI_Comm_rank(c, &crank);
  LM_ASSERT_ALL(csize == world_size() && crank == world_rank());
  LM_ASSERT_ALL(c != MPI_COMM_WORLD);
  {
    MPI_Comm c2 = MPI_COMM_NULL;
    LM_ASSERT_OK_ALL(lm_mesh_comm_mpi(m, &c2));
    LM_ASSERT_ALL(c2 == c);
  }
  dim_comm_info(m, 0, &sum, &csize, &crank);
  LM_ASSERT_ALL(sum == (long)world_size() * (world_size() - 1) / 2);
  LM_ASSERT_ALL(csize == world_size() && crank == world_rank());
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_ASSERT_ALL(m == NULL);
}

/* A 2-D mesh {a, b} with named dims; a = 2 when the world size is even, else 1. */
static void test_mesh_2d_named(void **state) {
  lm_mesh_t m = NULL;
  const int n = world_size(), r = world_rank();
  const int a = (n % 2 == 0) ? 2 : 1, b = n / a;
  int64_t shape[2] = {a, b}, coord[2] = {-1, -1}, got[2];
  const char *names[2] = {"dp", "tp"};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  int d = -1, mr = -1, pr = -1, csize, crank, i, j, ok = 1;
  long sum;
  char buf[64];
  (void)state;
  cfg.dim_names = names;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape, &cfg));
  LM_ASSERT_OK_ALL(lm_mesh_shape(m, got, 2));
  LM_ASSERT_ALL(got[0] == a && got[1] == b);
  LM_ASSERT_OK_ALL(lm_mesh_coord(m, coord, 2));
  LM_ASSERT_ALL(coord[0] == r / b && coord[1] == r % b);
  LM_ASSERT_OK_ALL(lm_mesh_rank(m, &mr));
  LM_ASSERT_ALL(mr == r);
  LM_ASSERT_OK_ALL(lm_mesh_dim_index(m, "dp", &d));
  LM_ASSERT_ALL(d == 0);
  LM_ASSERT_OK_ALL(lm_mesh_dim_index(m, "tp", &d));
  LM_ASSERT_ALL(d == 1);
  LM_EXPECT_ALL(lm_mesh_dim_index(m, "pp", &d), LM_ERR_INVALID_ARGUMENT, "pp");
  LM_ASSERT_OK_ALL(lm_mesh_dim_name(m, 1, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "tp") == 0);
  LM_ASSERT_OK_ALL(lm_mesh_dim_name(m, 0, buf, 2)); /* truncated, NUL-terminated */
  LM_ASSERT_ALL(strcmp(buf, "d") == 0);
  LM_ASSERT_OK_ALL(lm_mesh_dim_name(m, 0, buf, 1));
  LM_ASSERT_ALL(buf[0] == '\0');
  for (i = 0; i < a; ++i)
    for (j = 0; j < b; ++j) {
      int64_t c[2] = {i, j};
      if (lm_mesh_rank_at(m, c, 2, &pr) != LM_SUCCESS || pr != i * b + j) ok = 0;
    }
  LM_ASSERT_ALL(ok);
  /* Along dim 0 ("dp"): ranks with my tp coordinate, ordered by dp. */
  dim_comm_info(m, 0, &sum, &csize, &crank);
  {
    long want = 0;
    for (i = 0; i < a; ++i) want += i * b + coord[1];
    LM_ASSERT_ALL(sum == want && csize == a && crank == coord[0]);
  }
  /* Along dim 1 ("tp"): my row. */
  dim_comm_info(m, 1, &sum, &csize, &crank);
  {
    long want = 0;
    for (j = 0; j < b; ++j) want += coord[0] * b + j;
    LM_ASSERT_ALL(sum == want && csize == b && crank == coord[1]);
  }
  {
    MPI_Comm c = MPI_COMM_NULL;
    int s2 = -1;
    LM_ASSERT_OK_ALL(lm_mesh_dim_comm_mpi(m, 1, &c));
    MPI_Comm_size(c, &s2);
    LM_ASSERT_ALL(s2 == b);
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));

  /* 3-D {1, n, 1} made through the MPI_Comm helper. */
  {
    int64_t s3[3] = {1, n, 1}, c3[3];
    LM_ASSERT_OK_ALL(lm_mesh_create_mpi(&m, MPI_COMM_WORLD, 3, s3, NULL));
    LM_ASSERT_OK_ALL(lm_mesh_coord(m, c3, 3));
    LM_ASSERT_ALL(c3[0] == 0 && c3[1] == r && c3[2] == 0);
    dim_comm_info(m, 2, &sum, &csize, &crank);
    LM_ASSERT_ALL(sum == r && csize == 1 && crank == 0);
    dim_comm_info(m, 1, &sum, &csize, &crank);
    LM_ASSERT_ALL(sum == (long)n * (n - 1) / 2 && csize == n && crank == r);
    LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  }
}

static void test_mesh_explicit_reversed_ranks(void **state) {
  const int n = world_size(), r = world_rank();
  int *ranks = (int *)malloc(sizeof(int) * (size_t)n);
  int64_t shape[1] = {n}, coord[1];
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t m = NULL;
  int i, mr = -1, pr = -1, csize, crank, ok = 1, f;
  long sum;
  (void)state;
  for (i = 0; i < n; ++i) ranks[i] = n - 1 - i;
  cfg.ranks = ranks;
  cfg.nranks = n;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  LM_ASSERT_OK_ALL(lm_mesh_rank(m, &mr));
  LM_ASSERT_ALL(mr == n - 1 - r);
  LM_ASSERT_OK_ALL(lm_mesh_coord(m, coord, 1));
  LM_ASSERT_ALL(coord[0] == n - 1 - r);
  for (i = 0; i < n; ++i) {
    int64_t c[1] = {i};
    if (lm_mesh_rank_at(m, c, 1, &pr) != LM_SUCCESS || pr != n - 1 - i) ok = 0;
  }
  LM_ASSERT_ALL(ok);
  /* The mesh communicator is in mesh (row-major) order. */
  LM_ASSERT_OK_ALL(lm_mesh_comm(m, &f));
  MPI_Comm_rank(MPI_Comm_f2c((MPI_Fint)f), &crank);
  LM_ASSERT_ALL(crank == n - 1 - r);
  dim_comm_info(m, 0, &sum, &csize, &crank);
  LM_ASSERT_ALL(sum == (long)n * (n - 1) / 2 && csize == n && crank == n - 1 - r);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  free(ranks);
}

/* A mesh of one rank (world rank `who`): every other rank is outside it. */
static void subset_case(int who) {
  const int r = world_rank();
  int ranks[1] = {who};
  int64_t shape[1] = {1}, coord[1] = {-1}, c0[1] = {0};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t m = NULL;
  int mem = -1, sz = -1, mr = -1, pr = -1, f = -1, nd = -1;
  const int member = r == who;
  const lm_status_t nonmember_code = member ? LM_SUCCESS : LM_ERR_INVALID_USAGE;
  cfg.ranks = ranks;
  cfg.nranks = 1;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  LM_ASSERT_ALL(m != NULL);
  LM_ASSERT_OK_ALL(lm_mesh_is_member(m, &mem));
  LM_ASSERT_ALL(mem == member);
  LM_ASSERT_OK_ALL(lm_mesh_size(m, &sz));
  LM_ASSERT_ALL(sz == 1);
  LM_ASSERT_OK_ALL(lm_mesh_ndim(m, &nd));
  LM_ASSERT_ALL(nd == 1);
  LM_ASSERT_OK_ALL(lm_mesh_rank_at(m, c0, 1, &pr));
  LM_ASSERT_ALL(pr == who);
  LM_EXPECT_ALL(lm_mesh_coord(m, coord, 1), nonmember_code, "mesh");
  LM_ASSERT_ALL(!member || coord[0] == 0);
  LM_EXPECT_ALL(lm_mesh_rank(m, &mr), nonmember_code, "mesh");
  LM_ASSERT_ALL(!member || mr == 0);
  LM_EXPECT_ALL(lm_mesh_dim_comm(m, 0, &f), nonmember_code, "mesh");
  LM_EXPECT_ALL(lm_mesh_comm(m, &f), nonmember_code, "mesh");
  int s = 1;
  if (member) MPI_Comm_size(MPI_Comm_f2c((MPI_Fint)f), &s);
  LM_ASSERT_ALL(s == 1);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_mesh_subset_nonmembers(void **state) {
  (void)state;
  subset_case(0);
  subset_case(world_size() - 1);
}

/* Two ranks of a bigger world, in a non-contiguous order: {last, 0}. */
static void test_mesh_subset_two_ranks(void **state) {
  const int n = world_size(), r = world_rank();
  int ranks[2] = {n - 1, 0};
  int64_t shape[1] = {2};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t m = NULL;
  int mem = -1, mr = -1;
  long sum;
  int csize, crank;
  (void)state;
  if (n < 2) {
    /* One rank: {0, 0} repeats a rank. */
    cfg.ranks = ranks;
    cfg.nranks = 2;
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg), LM_ERR_INVALID_ARGUMENT,
               "ranks");
    return;
  }
  cfg.ranks = ranks;
  cfg.nranks = 2;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  LM_ASSERT_OK_ALL(lm_mesh_is_member(m, &mem));
  LM_ASSERT_ALL(mem == (r == 0 || r == n - 1));
  if (mem) {
    LM_ASSERT_OK(lm_mesh_rank(m, &mr));
    assert_int_equal(mr, r == n - 1 ? 0 : 1);
    dim_comm_info(m, 0, &sum, &csize, &crank);
    assert_int_equal(sum, n - 1);
    assert_int_equal(csize, 2);
    assert_int_equal(crank, mr);
  }
  LM_ASSERT_ALL(1);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_mesh_create_bad_inputs(void **state) {
  const int n = world_size();
  const int comm = lm_test_comm_f();
  int64_t shape1[1] = {n}, shape_big[1] = {(int64_t)n + 1}, zero[1] = {0}, neg[1] = {-2};
  int64_t shape2[2] = {1, n};
  int64_t shape33[33];
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t m = (lm_mesh_t)g_foreign; /* must be set to NULL on failure */
  int i;
  (void)state;
  for (i = 0; i < 33; ++i) shape33[i] = 1;
  shape33[0] = n;

  LM_EXPECT_ALL(lm_mesh_create(NULL, comm, 1, shape1, NULL), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, NULL, NULL), LM_ERR_INVALID_ARGUMENT, "shape");
  LM_ASSERT_ALL(m == NULL);
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 0, shape1, NULL), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, -1, shape1, NULL), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 33, shape33, NULL), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, zero, NULL), LM_ERR_INVALID_ARGUMENT, "shape[0]");
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, neg, NULL), LM_ERR_INVALID_ARGUMENT, "shape[0]");
  {
    int64_t s[2] = {n, 0};
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, s, NULL), LM_ERR_INVALID_ARGUMENT, "shape[1]");
  }
  /* Product != world size without a rank list. */
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, shape_big, NULL), LM_ERR_INVALID_ARGUMENT, "shape");
  /* A shape larger than the parent says what was asked and what there is. */
  {
    int64_t s[2] = {2, n};
    char want[96];
    snprintf(want, sizeof want, "mesh shape [2, %d] asks for %d ranks but the parent communicator "
             "has %d", n, 2 * n, n);
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, s, NULL), LM_ERR_INVALID_ARGUMENT, want);
    int64_t h[3] = {INT64_MAX, INT64_MAX, 2};
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 3, h, NULL), LM_ERR_INVALID_ARGUMENT, "more than 2^63");
  }
  if (n > 1) {
    int64_t s[1] = {n - 1};
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, s, NULL), LM_ERR_INVALID_ARGUMENT, "ranks");
  }
  /* A huge shape must not overflow into a "valid" product. */
  {
    int64_t s[3] = {INT64_C(1) << 40, INT64_C(1) << 40, INT64_C(1) << 40};
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 3, s, NULL), LM_ERR_INVALID_ARGUMENT, "shape");
  }
  LM_ASSERT_ALL(m == NULL);

  /* Config: bad magic, too small a size. */
  cfg.magic = 0x12345678u;
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, shape1, &cfg), LM_ERR_INVALID_ARGUMENT, "magic");
  {
    lm_mesh_config_t z;
    memset(&z, 0, sizeof z);
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, shape1, &z), LM_ERR_INVALID_ARGUMENT, "magic");
  }
  cfg.magic = LM_MESH_CONFIG_MAGIC;
  cfg.size = 4;
  LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, shape1, &cfg), LM_ERR_INVALID_ARGUMENT, "size");
  cfg.size = sizeof cfg;

  /* Rank lists: nranks mismatch, duplicates, out of range, nranks without ranks. */
  {
    int ranks[2] = {0, 0};
    int64_t s1[1] = {1}, s2[1] = {2};
    cfg.ranks = ranks;
    cfg.nranks = 2;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, s1, &cfg), LM_ERR_INVALID_ARGUMENT, "nranks");
    if (n >= 2) {
      LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, s2, &cfg), LM_ERR_INVALID_ARGUMENT, "ranks[1]");
    }
    ranks[0] = n;
    cfg.nranks = 1;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, s1, &cfg), LM_ERR_INVALID_ARGUMENT, "ranks[0]");
    ranks[0] = -1;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, s1, &cfg), LM_ERR_INVALID_ARGUMENT, "ranks[0]");
    cfg.ranks = NULL;
    cfg.nranks = n;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 1, shape1, &cfg), LM_ERR_INVALID_ARGUMENT, "nranks");
    cfg.nranks = 0;
  }
  /* Dim names: empty, NULL, duplicate, too long. */
  {
    const char *empty[2] = {"dp", ""};
    const char *null_name[2] = {NULL, "tp"};
    const char *dup[2] = {"x", "x"};
    char longname[80];
    const char *toolong[2] = {"dp", longname};
    memset(longname, 'a', 64);
    longname[64] = '\0';
    cfg.dim_names = empty;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, shape2, &cfg), LM_ERR_INVALID_ARGUMENT, "dim_names[1]");
    cfg.dim_names = null_name;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, shape2, &cfg), LM_ERR_INVALID_ARGUMENT, "dim_names[0]");
    cfg.dim_names = dup;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, shape2, &cfg), LM_ERR_INVALID_ARGUMENT, "dim_names");
    cfg.dim_names = toolong;
    LM_EXPECT_ALL(lm_mesh_create(&m, comm, 2, shape2, &cfg), LM_ERR_INVALID_ARGUMENT, "dim_names[1]");
    longname[63] = '\0'; /* 63 chars: allowed */
    LM_ASSERT_OK_ALL(lm_mesh_create(&m, comm, 2, shape2, &cfg));
    {
      char buf[80];
      LM_ASSERT_OK_ALL(lm_mesh_dim_name(m, 1, buf, sizeof buf));
      LM_ASSERT_ALL(strcmp(buf, longname) == 0);
    }
    LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
    cfg.dim_names = NULL;
  }
  /* After all that, a valid mesh still works (no leftover messages in the parent). */
  m = make_world_mesh_1d();
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Invalid parent communicator handles: INVALID_ARGUMENT, never an MPI abort. Near the end of the
 * suite because a library that hands such a handle to MPI kills the job. */
static void test_mesh_invalid_parent_comm(void **state) {
  int64_t shape1[1] = {world_size()};
  lm_mesh_t m = (lm_mesh_t)g_foreign;
  (void)state;
  LM_EXPECT_ALL(lm_mesh_create(&m, (int)MPI_Comm_c2f(MPI_COMM_NULL), 1, shape1, NULL),
             LM_ERR_INVALID_ARGUMENT, "parent_comm");
  LM_ASSERT_ALL(m == NULL);
  m = (lm_mesh_t)g_foreign;
  LM_EXPECT_ALL(lm_mesh_create(&m, 12345, 1, shape1, NULL), LM_ERR_INVALID_ARGUMENT, "parent_comm");
  LM_ASSERT_ALL(m == NULL);
  LM_EXPECT_ALL(lm_mesh_create(&m, -1, 1, shape1, NULL), LM_ERR_INVALID_ARGUMENT, "parent_comm");
  m = make_world_mesh_1d();
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_mesh_config_older_size(void **state) {
  /* An older caller whose struct ends after dim_names is fine; a bigger size is read up to ours. */
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  int64_t shape[1] = {world_size()};
  lm_mesh_t m = NULL;
  (void)state;
  cfg.size = sizeof cfg + 64;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, &cfg));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_mesh_bad_handles(void **state) {
  lm_mesh_t m, foreign = (lm_mesh_t)g_foreign, nul = NULL;
  int i = 0, f = 0;
  int64_t s[2] = {0, 0}, c[1] = {0};
  char buf[8];
  (void)state;
  memset(g_foreign, 0, sizeof g_foreign);
  /* Handles: NULL and foreign (a zeroed buffer; also one with the "dead" magic). */
  for (int k = 0; k < 3; ++k) {
    lm_mesh_t h = k == 0 ? nul : foreign;
    if (k == 2) {
      uint32_t dead = 0xdeadbeefu;
      memcpy(g_foreign, &dead, sizeof dead);
    }
    LM_EXPECT_ALL(lm_mesh_ndim(h, &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_shape(h, s, 1), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_size(h, &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_is_member(h, &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_coord(h, s, 2), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_rank(h, &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_rank_at(h, c, 1, &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_dim_index(h, "a", &i), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_dim_name(h, 0, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_dim_comm(h, 0, &f), LM_ERR_INVALID_ARGUMENT, "mesh");
    LM_EXPECT_ALL(lm_mesh_comm(h, &f), LM_ERR_INVALID_ARGUMENT, "mesh");
    if (k > 0) {
      lm_mesh_t copy = h;
      LM_EXPECT_ALL(lm_mesh_destroy(&copy), LM_ERR_INVALID_ARGUMENT, "mesh");
    }
  }
  memset(g_foreign, 0, sizeof g_foreign);
  /* Destroy: NULL pointer and NULL handle are fine. */
  LM_ASSERT_OK_ALL(lm_mesh_destroy(NULL));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&nul));

  /* Bad outputs and arguments on a valid mesh. */
  m = make_world_mesh_1d();
  LM_EXPECT_ALL(lm_mesh_ndim(m, NULL), LM_ERR_INVALID_ARGUMENT, "ndim");
  LM_EXPECT_ALL(lm_mesh_shape(m, NULL, 1), LM_ERR_INVALID_ARGUMENT, "shape");
  LM_EXPECT_ALL(lm_mesh_shape(m, s, -1), LM_ERR_INVALID_ARGUMENT, "n");
  s[0] = -5;
  LM_ASSERT_OK_ALL(lm_mesh_shape(m, s, 0));
  LM_ASSERT_ALL(s[0] == -5);
  LM_EXPECT_ALL(lm_mesh_size(m, NULL), LM_ERR_INVALID_ARGUMENT, "size");
  LM_EXPECT_ALL(lm_mesh_is_member(m, NULL), LM_ERR_INVALID_ARGUMENT, "is_member");
  LM_EXPECT_ALL(lm_mesh_coord(m, NULL, 1), LM_ERR_INVALID_ARGUMENT, "coord");
  LM_EXPECT_ALL(lm_mesh_coord(m, s, 0), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_mesh_rank(m, NULL), LM_ERR_INVALID_ARGUMENT, "mesh_rank");
  LM_EXPECT_ALL(lm_mesh_rank_at(m, NULL, 1, &i), LM_ERR_INVALID_ARGUMENT, "coord");
  LM_EXPECT_ALL(lm_mesh_rank_at(m, c, 1, NULL), LM_ERR_INVALID_ARGUMENT, "parent_rank");
  LM_EXPECT_ALL(lm_mesh_rank_at(m, c, 2, &i), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_mesh_rank_at(m, c, 0, &i), LM_ERR_INVALID_ARGUMENT, "n");
  c[0] = world_size();
  LM_EXPECT_ALL(lm_mesh_rank_at(m, c, 1, &i), LM_ERR_INVALID_ARGUMENT, "coord[0]");
  c[0] = -1;
  LM_EXPECT_ALL(lm_mesh_rank_at(m, c, 1, &i), LM_ERR_INVALID_ARGUMENT, "coord[0]");
  LM_EXPECT_ALL(lm_mesh_dim_index(m, NULL, &i), LM_ERR_INVALID_ARGUMENT, "name");
  LM_EXPECT_ALL(lm_mesh_dim_name(m, 1, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "dim");
  LM_EXPECT_ALL(lm_mesh_dim_name(m, -1, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "dim");
  LM_EXPECT_ALL(lm_mesh_dim_name(m, 0, NULL, 8), LM_ERR_INVALID_ARGUMENT, "buf");
  LM_EXPECT_ALL(lm_mesh_dim_name(m, 0, buf, 0), LM_ERR_INVALID_ARGUMENT, "size");
  LM_EXPECT_ALL(lm_mesh_dim_comm(m, 1, &f), LM_ERR_INVALID_ARGUMENT, "dim");
  LM_EXPECT_ALL(lm_mesh_dim_comm(m, -1, &f), LM_ERR_INVALID_ARGUMENT, "dim");
  LM_EXPECT_ALL(lm_mesh_dim_comm(m, 0, NULL), LM_ERR_INVALID_ARGUMENT, "comm_f");
  LM_EXPECT_ALL(lm_mesh_comm(m, NULL), LM_ERR_INVALID_ARGUMENT, "comm_f");
  /* INVALID_ARGUMENT had no effect: the mesh still works. */
  LM_ASSERT_OK_ALL(lm_mesh_size(m, &i));
  LM_ASSERT_ALL(i == world_size());
  {
    lm_mesh_t copy = m;
    LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
    LM_ASSERT_ALL(m == NULL && copy != NULL);
  }
}

/* Ranks pass different (each valid) arguments: LM_ERR_MISMATCH on every rank. */
static void test_mesh_mismatch_across_ranks(void **state) {
  const int n = world_size(), r = world_rank();
  int64_t shape2[2] = {1, n}, shape1[1] = {n};
  const char *names_a[2] = {"dp", "tp"};
  const char *names_b[2] = {"dq", "tp"};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  lm_mesh_t m = NULL;
  (void)state;
  if (n < 2) {
    lm_test_skip("needs 2 ranks or more (np 1)");
    return;
  }
  cfg.dim_names = r == 0 ? names_b : names_a;
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape2, &cfg), LM_ERR_MISMATCH, NULL);
  LM_ASSERT_ALL(m == NULL);
  /* Names on one rank only. */
  cfg.dim_names = r == n - 1 ? names_a : NULL;
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape2, &cfg), LM_ERR_MISMATCH, NULL);
  /* Different ndim: {n} vs {1, n}. */
  cfg.dim_names = NULL;
  if (r == 0)
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape1, NULL), LM_ERR_MISMATCH, NULL);
  else
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 2, shape2, NULL), LM_ERR_MISMATCH, NULL);
  /* Different rank orders. */
  {
    int *ranks = (int *)malloc(sizeof(int) * (size_t)n);
    int i;
    for (i = 0; i < n; ++i) ranks[i] = r == 1 ? n - 1 - i : i;
    cfg.ranks = ranks;
    cfg.nranks = n;
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape1, &cfg), LM_ERR_MISMATCH, NULL);
    free(ranks);
  }
  LM_ASSERT_ALL(m == NULL);
  m = make_world_mesh_1d();
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* One rank passes an invalid argument: it gets INVALID_ARGUMENT, the others LM_ERR_REMOTE. */
static void test_mesh_one_rank_invalid(void **state) {
  const int n = world_size(), r = world_rank(), bad = n - 1;
  int64_t shape1[1] = {n}, zero[1] = {0};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT, badcfg = LM_MESH_CONFIG_INIT;
  const lm_status_t want = r == bad ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE;
  lm_mesh_t m = NULL;
  (void)state;
  /* the others read the failing rank's status and the start of its message (the cause) */
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, r == bad ? zero : shape1, NULL), want,
             r == bad ? "shape" : "failed: LM_ERR_INVALID_ARGUMENT: lm_mesh_create");
  LM_ASSERT_ALL(m == NULL);
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, r == bad ? NULL : shape1, NULL), want,
             r == bad ? "shape" : "rank");
  badcfg.magic = 0;
  LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape1, r == bad ? &badcfg : &cfg), want,
             r == bad ? "magic" : "failed: LM_ERR_INVALID_ARGUMENT: lm_mesh_create");
  /* Rank 0 fails (the others name it). */
  {
    const lm_status_t want0 = r == 0 ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE;
    LM_EXPECT_ALL(lm_mesh_create(&m, lm_test_comm_f(), r == 0 ? 0 : 1, shape1, NULL), want0,
               r == 0 ? "ndim" : "rank 0");
  }
  LM_ASSERT_ALL(m == NULL);
  m = make_world_mesh_1d();
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* ---------------------------------------------------------------------------------------------
 * lm_layout_chunk, lm_placements_format
 * ------------------------------------------------------------------------------------------- */
static int chunk_matches(int64_t n, int64_t parts, const int64_t *lens) {
  int64_t i, off = 0, o = -1, l = -1;
  for (i = 0; i < parts; ++i) {
    if (lm_layout_chunk(n, parts, i, &o, &l) != LM_SUCCESS) return 0;
    if (l != lens[i] || o != (l > 0 ? off : (off < n ? off : n))) return 0;
    off += l;
  }
  return 1;
}

static void test_chunk(void **state) {
  int64_t o = -1, l = -1;
  static const int64_t a[] = {2, 2, 1, 0}, b[] = {1, 0, 0, 0}, c[] = {3, 3, 3, 3, 3, 2, 0, 0},
                       d[] = {4, 4, 4, 1}, e[] = {4, 4, 4, 2}, z[] = {0, 0, 0};
  (void)state;
  LM_ASSERT_ALL(chunk_matches(5, 4, a));
  LM_ASSERT_ALL(chunk_matches(1, 4, b));
  LM_ASSERT_ALL(chunk_matches(17, 8, c));
  LM_ASSERT_ALL(chunk_matches(13, 4, d));
  LM_ASSERT_ALL(chunk_matches(14, 4, e));
  LM_ASSERT_ALL(chunk_matches(0, 3, z));
  LM_ASSERT_OK_ALL(lm_layout_chunk(17, 8, 7, &o, &l));
  LM_ASSERT_ALL(o == 17 && l == 0);
  LM_ASSERT_OK_ALL(lm_layout_chunk(INT64_C(1) << 40, 3, 2, &o, &l));
  LM_ASSERT_ALL(o == 2 * ((INT64_C(1) << 40) + 2) / 3 && o + l == (INT64_C(1) << 40));
  LM_EXPECT_ALL(lm_layout_chunk(-1, 4, 0, &o, &l), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_layout_chunk(5, 0, 0, &o, &l), LM_ERR_INVALID_ARGUMENT, "parts");
  LM_EXPECT_ALL(lm_layout_chunk(5, -2, 0, &o, &l), LM_ERR_INVALID_ARGUMENT, "parts");
  LM_EXPECT_ALL(lm_layout_chunk(5, 4, 4, &o, &l), LM_ERR_INVALID_ARGUMENT, "index");
  LM_EXPECT_ALL(lm_layout_chunk(5, 4, -1, &o, &l), LM_ERR_INVALID_ARGUMENT, "index");
  LM_EXPECT_ALL(lm_layout_chunk(5, 4, 0, NULL, &l), LM_ERR_INVALID_ARGUMENT, "offset");
  LM_EXPECT_ALL(lm_layout_chunk(5, 4, 0, &o, NULL), LM_ERR_INVALID_ARGUMENT, "length");
}

static void test_placements_format(void **state) {
  lm_placement_t pl[3];
  char buf[64];
  (void)state;
  pl[0] = LM_PLACEMENT_SHARD(0);
  pl[1] = LM_PLACEMENT_REPLICATE;
  pl[2] = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 3, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[S(0), R, P(sum)]") == 0);
  {
    lm_placement_t ops[5];
    int k;
    for (k = 0; k < 5; ++k) ops[k] = LM_PLACEMENT_PARTIAL(k);
    LM_ASSERT_OK_ALL(lm_placements_format(ops, 5, buf, sizeof buf));
    LM_ASSERT_ALL(strcmp(buf, "[P(sum), P(avg), P(max), P(min), P(prod)]") == 0);
  }
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 0, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[]") == 0);
  LM_ASSERT_OK_ALL(lm_placements_format(NULL, 0, buf, sizeof buf));
  LM_ASSERT_ALL(strcmp(buf, "[]") == 0);
  /* Truncation: always NUL-terminated; the bytes past size untouched. */
  memset(buf, 'Z', sizeof buf);
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 3, buf, 4));
  LM_ASSERT_ALL(strcmp(buf, "[S(") == 0 && buf[4] == 'Z');
  memset(buf, 'Z', sizeof buf);
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 3, buf, 1));
  LM_ASSERT_ALL(buf[0] == '\0' && buf[1] == 'Z');
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 3, NULL, 0));
  LM_ASSERT_OK_ALL(lm_placements_format(pl, 3, buf, 0));
  LM_EXPECT_ALL(lm_placements_format(pl, -1, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_placements_format(pl, 33, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "n");
  LM_EXPECT_ALL(lm_placements_format(NULL, 1, buf, sizeof buf), LM_ERR_INVALID_ARGUMENT, "placements");
  LM_EXPECT_ALL(lm_placements_format(pl, 1, NULL, 8), LM_ERR_INVALID_ARGUMENT, "buf");
}

/* Last: an output pointer that is NULL on one rank only. lm_mesh_create is collective and "agrees",
 * so the other ranks must get LM_ERR_REMOTE instead of waiting forever. A hang shows as a
 * TIMEOUT of this test after 20 s (which ends the job, hence last). */
static void test_mesh_one_rank_null_out(void **state) {
  const int n = world_size(), r = world_rank(), bad = n - 1;
  int64_t shape1[1] = {n};
  lm_mesh_t m = NULL;
  (void)state;
  if (n < 2) {
    lm_test_skip("needs 2 ranks or more (np 1)");
    return;
  }
  alarm(20);
  LM_EXPECT_ALL(lm_mesh_create(r == bad ? NULL : &m, lm_test_comm_f(), 1, shape1, NULL),
             r == bad ? LM_ERR_INVALID_ARGUMENT : LM_ERR_REMOTE, r == bad ? "mesh" : "rank");
  LM_ASSERT_ALL(m == NULL);
  if (m != NULL) LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* lm_mesh_create_grid: the mesh of a process grid whose ranks are numbered column-major (BLACS's
 * "Col" order; 2 x 2 at np 4, 2 x 4 at np 8, the last rank outside at np 3): each rank's mesh coordinate is
 * the one it claimed; a coordinate claimed twice or by nobody is refused on every rank. */
static void test_mesh_create_grid(void **state) {
  (void)state;
  /* Odd n > 1: the last rank stays outside, so that the grid has an even number of ranks. */
  const int n = world_size(), me = lm_test_rank(), in = n > 1 && n % 2 ? n - 1 : n;
  int rows = 1;
  for (int f = 1; f * f <= in; ++f)
    if (in % f == 0) rows = f;
  const int myrow = me < in ? me % rows : -1, mycol = me < in ? me / rows : -1;
  lm_mesh_t g = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), myrow, mycol, NULL));
  int64_t shape[2] = {0, 0}, coord[2] = {-1, -1};
  int member = -1;
  LM_ASSERT_OK(lm_mesh_shape(g, shape, 2));
  LM_ASSERT_OK(lm_mesh_is_member(g, &member));
  if (member) LM_ASSERT_OK(lm_mesh_coord(g, coord, 2));
  LM_ASSERT_ALL(shape[0] == rows && shape[1] == in / rows && member == (me < in) &&
                (!member || (coord[0] == myrow && coord[1] == mycol)));
  LM_ASSERT_OK(lm_mesh_destroy(&g));
  /* The last rank claims (0, 0) too; or nobody claims (0, 0). */
  if (n > 1) {
    LM_EXPECT_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), me == n - 1 ? 0 : myrow,
                                      me == n - 1 ? 0 : mycol, NULL),
                  LM_ERR_INVALID_ARGUMENT, "both claim");
  }
  if (in > 1)
    LM_EXPECT_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), me == 0 ? -1 : myrow,
                                      me == 0 ? -1 : mycol, NULL),
                  LM_ERR_INVALID_ARGUMENT, "(0, 0)");
  LM_EXPECT_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), -1, -1, NULL), LM_ERR_INVALID_ARGUMENT,
                "not a grid");
  LM_EXPECT_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), me, -1, NULL), LM_ERR_INVALID_ARGUMENT,
                "neither");
  LM_EXPECT_ALL(lm_mesh_create_grid(&g, lm_test_comm_f(), me == 0 ? INT_MAX : myrow, mycol, NULL),
                LM_ERR_INVALID_ARGUMENT, "beyond any grid");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_version),
    cmocka_unit_test(test_status_strings_distinct),
    cmocka_unit_test(test_last_error_message_never_null),
    cmocka_unit_test(test_init_and_world),
    cmocka_unit_test(test_mesh_default_1d),
    cmocka_unit_test(test_mesh_2d_named),
    cmocka_unit_test(test_mesh_explicit_reversed_ranks),
    cmocka_unit_test(test_mesh_subset_nonmembers),
    cmocka_unit_test(test_mesh_subset_two_ranks),
    cmocka_unit_test(test_mesh_create_bad_inputs),
    cmocka_unit_test(test_mesh_config_older_size),
    cmocka_unit_test(test_mesh_bad_handles),
    cmocka_unit_test(test_mesh_mismatch_across_ranks),
    cmocka_unit_test(test_mesh_one_rank_invalid),
    cmocka_unit_test(test_chunk),
    cmocka_unit_test(test_placements_format),
    cmocka_unit_test(test_mesh_invalid_parent_comm),
    cmocka_unit_test(test_mesh_one_rank_null_out),
    cmocka_unit_test(test_mesh_create_grid),
};

LM_TEST_MAIN(tests)
