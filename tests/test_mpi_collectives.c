/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_mpi_collectives: host steps as MPI collectives (LM_MPI_COLLECTIVES=1, set here for every
 * rank before the library reads its settings, with the board exchange off). Through the profiling interface it counts, per
 * reshard, the MPI collectives and point-to-point messages the library posts on the mesh's
 * communicators, and asserts per case the one collective expected (and no message), or messages
 * and no collective where the form does not fit (uneven blocks, uint8 sums, which Open MPI 4.1
 * adds saturating). Values are checked against the global tensor each time, on plain and on
 * padded shards (a padded rank packs through staging into the same collective).
 */
// lm-test-np: 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

static long g_coll[4], g_p2p; /* allgather, alltoall, reduce_scatter_block, allreduce; isend */
static int g_counting;

int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q) {
  g_coll[0] += g_counting;
  return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c, MPI_Request *q) {
  g_coll[1] += g_counting;
  return PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op,
                              MPI_Comm c, MPI_Request *q) {
  g_coll[2] += g_counting;
  return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
  g_coll[3] += g_counting && n > 8; /* (the agreement's own words are a few) */
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c,
              MPI_Request *q) {
  g_p2p += g_counting && !lm_test_agree_words(tag, n, t); /* (agreements by messages) */
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}

static void keep_collectives(void) __attribute__((constructor));
static void keep_collectives(void) {
  setenv("LM_MPI_COLLECTIVES", "1", 1);
  setenv("LM_BOARD_EXCHANGE_BYTES", "0", 1); /* small reshards on one node ride the agreement */
  setenv("LM_MESSAGE_EXCHANGE_BYTES", "0", 1); /* and by messages, their messages */
}

enum { AG, A2A, RS, AR, NONE, NO_REDUCE };

/* One case: a [rows, cols] tensor of dtype dt from placement a to b on the 1-D world mesh, the
 * source padded (rows of cols + 3) on rank 1 only when `pad`. Expect collective `want` (NONE:
 * messages only). Every element of the global tensor is v(i, j) = i * cols + j (a Partial source
 * holds it on rank 0 and zeros elsewhere, so that the sum is it). NO_REDUCE: the reduction as
 * messages, no MPI reduction (the all-gather after it may be one). */
static void run_case(lm_mesh_t m, int64_t rows, int64_t cols, DLDataType dt, lm_placement_t a,
                     lm_placement_t b, int want, int pad) {
  const int me = lm_test_rank(), np = lm_test_size();
  int64_t g[2] = {rows, cols}, off = 0, len[2] = {rows, cols}, st[2] = {cols, 1};
  if (a.kind == LM_SHARD) LM_ASSERT_OK(lm_layout_chunk(g[a.dim], np, me, &off, &len[a.dim]));
  const int padded = pad && me == 1;
  st[0] = len[1] + (padded ? 3 : 0);
  const size_t es = dt.bits / 8;
  char *arr = calloc((size_t)(len[0] * st[0] + 1), es);
  for (int64_t i = 0; i < len[0]; ++i)
    for (int64_t j = 0; j < len[1]; ++j) {
      const int64_t gi = i + (a.kind == LM_SHARD && a.dim == 0 ? off : 0);
      const int64_t gj = j + (a.kind == LM_SHARD && a.dim == 1 ? off : 0);
      const double v = a.kind == LM_PARTIAL && me != 0 ? 0.0 : (double)(gi * cols + gj);
      char *p = arr + (size_t)(i * st[0] + j) * es;
      if (dt.code == kDLFloat) *(double *)p = v;
      else *(unsigned char *)p = (unsigned char)v;
    }
  DLTensor v = {arr, LM_CPU, 2, dt, len, padded ? st : NULL, 0};
  lm_dist_tensor_t s = NULL, d = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&s, m, &v, &a, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  memset(g_coll, 0, sizeof g_coll);
  g_p2p = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  g_counting = 1;
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&d, s, NULL, &b));
  g_counting = 0;
  long colls = 0;
  for (int k = 0; k < 4; ++k) colls += g_coll[k];
  int ok = want == NONE        ? colls == 0 && g_p2p > 0
           : want == NO_REDUCE ? g_coll[RS] + g_coll[AR] == 0 && g_p2p > 0
                               : g_coll[want] == 1 && colls == 1 && g_p2p == 0;
  DLTensor o;
  LM_ASSERT_OK(lm_dist_tensor_local(d, &o));
  int64_t ooff[2] = {0, 0};
  if (b.kind == LM_SHARD) {
    int64_t l = 0;
    LM_ASSERT_OK(lm_layout_chunk(g[b.dim], np, me, &ooff[b.dim], &l));
  }
  for (int64_t i = 0; i < o.shape[0]; ++i)
    for (int64_t j = 0; j < o.shape[1]; ++j) {
      const double e = (double)((i + ooff[0]) * cols + j + ooff[1]);
      const char *p = (const char *)o.data + (size_t)(i * o.shape[1] + j) * es;
      const double got = dt.code == kDLFloat ? *(const double *)p : *(const unsigned char *)p;
      if (got != (dt.code == kDLFloat ? e : (double)((unsigned char)e))) {
        if (ok && getenv("LM_TEST_VERBOSE"))
          lm_test__diag("rank %d: [%lld, %lld] is %g, not %g\n", me, (long long)i, (long long)j, got, e);
        ok = 0;
      }
    }
  if (!ok)
    lm_test__diag("rank %d: %lldx%lld kind %d->%d want %d pad %d: allgather %ld alltoall %ld "
                  "reduce_scatter %ld allreduce %ld isend %ld\n", me, (long long)rows,
                  (long long)cols, a.kind, b.kind, want, pad, g_coll[0], g_coll[1], g_coll[2],
                  g_coll[3], g_p2p);
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&d));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&s));
  free(arr);
}

static void test_forms(void **state) {
  (void)state;
  const int np = lm_test_size();
  lm_mesh_t m = NULL;
  int64_t shape[1] = {np};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, NULL));
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE, P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  const DLDataType f64 = LM_FLOAT64, u8 = {kDLUInt, 8, 1};
  const int64_t n = 12 * np; /* divisible by np */
  for (int pad = 0; pad < 2; ++pad) {
    run_case(m, n, n, f64, S0, R, AG, pad);
    run_case(m, n, n, f64, S0, S1, A2A, pad);
    run_case(m, n, n, f64, S1, S0, A2A, pad);
    run_case(m, n, n, f64, P, S0, RS, pad);
    run_case(m, n, 5, f64, P, R, AR, pad); /* an all-reduce needs no even split */
  }
  run_case(m, n + 1, n, f64, S0, R, NONE, 0); /* uneven blocks: messages */
  run_case(m, n, n, u8, P, R, NO_REDUCE, 0);  /* uint8 sums: the library's own */
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forms),
};

LM_TEST_MAIN(tests)
