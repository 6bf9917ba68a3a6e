/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_mpi_errors: a real MPI error return (not LM_FAULT) during a transfer is LM_ERR_MPI on the
 * rank whose MPI call failed (docs/DESIGN.md, "Error model": MPI_ERRORS_RETURN on the library's
 * communicators), and every other rank learns of it: LM_ERR_REMOTE carrying LM_ERR_MPI, or success
 * when its part had completed, then LM_ERR_REMOTE at its next call on the mesh; the failing
 * rank's mesh is broken (LM_ERR_INVALID_USAGE naming it). The MPI calls fail through the profiling
 * interface: this program's MPI_Isend / MPI_Irecv return MPI_ERR_OTHER once, without posting,
 * on a chosen rank, for the first call on a communicator of the library (not MPI_COMM_WORLD).
 * Each scenario on a mesh of its own (a broken mesh stays broken); a fresh mesh over the same
 * processes works afterwards.
 */
// lm-test-np: 2 3 4
#include <stdlib.h>
#include <string.h>

#include "lm_test.h"

/* MPI keeps failure notices nobody reads unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

static int g_fail_isend = 0, g_fail_irecv = 0; /* armed on this rank: fail the next one */
static int g_failed_calls = 0;

/* Agreement messages (their own tag, LM_TEST_AGREE_MSG_TAG) are the agreement's, not the message
 * path's: they are let through. */
int MPI_Isend(const void *b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c, MPI_Request *q) {
  if (g_fail_isend && c != MPI_COMM_WORLD && tag != LM_TEST_AGREE_MSG_TAG) {
    g_fail_isend = 0;
    ++g_failed_calls;
    *q = MPI_REQUEST_NULL;
    return MPI_ERR_OTHER;
  }
  return PMPI_Isend(b, n, t, dst, tag, c, q);
}
/* The message a failed MPI_Irecv was for is still sent: the test receives it itself into a
 * buffer of its own (drained after the scenario), so that no unmatched message stays in MPI. */
static void *g_drain_buf = NULL;
static MPI_Request g_drain = MPI_REQUEST_NULL;
int MPI_Irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request *q) {
  if (g_fail_irecv && c != MPI_COMM_WORLD && tag != LM_TEST_AGREE_MSG_TAG) {
    MPI_Aint lb = 0, extent = 0;
    g_fail_irecv = 0;
    ++g_failed_calls;
    *q = MPI_REQUEST_NULL;
    MPI_Type_get_extent(t, &lb, &extent);
    g_drain_buf = calloc(1, (size_t)(lb + extent * (n > 0 ? n : 1)) + 64);
    PMPI_Irecv(g_drain_buf, n, t, src, tag, c, &g_drain);
    return MPI_ERR_OTHER;
  }
  return PMPI_Irecv(b, n, t, src, tag, c, q);
}

/* A completion that reports a truncated receive: MPI_Testall completes the requests, then says
 * MPI_ERR_IN_STATUS with the first status MPI_ERR_TRUNCATE (what MPI reports when a message is
 * longer than its receive: the ranks ran different reshards). Armed on one rank, for one call
 * that completes at least one request. */
static int g_truncate = 0;
int MPI_Testall(int n, MPI_Request *q, int *flag, MPI_Status *st) {
  int rc = PMPI_Testall(n, q, flag, st);
  if (g_truncate && rc == MPI_SUCCESS && *flag && n > 0 && st != MPI_STATUSES_IGNORE) {
    g_truncate = 0;
    ++g_failed_calls;
    st[0].MPI_ERROR = MPI_ERR_TRUNCATE;
    return MPI_ERR_IN_STATUS;
  }
  return rc;
}

static int has(const char *msg, const char *w) { return strstr(msg, w) != NULL; }

/* On a fresh mesh: an S(0) -> S(1) reshard of values 256 i + j + round moves every value right
 * (a stale message taken for one of its own would bring another buffer's bytes, or none). */
static void fresh_reshard(lm_mesh_t m, int round) {
  enum { N = 256 };
  int64_t g[2] = {N, N}, shape[2], off[2];
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  double *all = malloc(sizeof(double) * N * N);
  for (int64_t i = 0; i < N * N; ++i) all[i] = (double)(i + round);
  DLTensor gt = {all, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, NULL, 0};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, m, &gt, &s0, -1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, &s1));
  DLTensor v;
  LM_ASSERT_OK(lm_dist_tensor_local(y, &v));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(y, shape, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_offset(y, off, 2));
  int64_t wrong = 0;
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      wrong += ((double *)v.data)[i * shape[1] + j] != all[(off[0] + i) * N + off[1] + j];
  if (wrong) lm_test__diag("rank %d: round %d: %lld values wrong\n", ME, round, (long long)wrong);
  LM_ASSERT_ALL(wrong == 0);
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  free(all);
}

/* A 512 KiB S(0) -> S(1) reshard (above the board exchange: MPI messages, or node-local
 * descriptors sent through MPI) with `bad`'s next call armed by `arm` failing: `bad` returns
 * `code` with a message naming `call`, the others success or LM_ERR_REMOTE naming `code`. */
static void one_scenario(int bad, int *arm, lm_status_t code, const char *call, int call_after) {
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, g[2] = {256, 256};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  lm_dist_tensor_t x = NULL, y = NULL, z = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, g, LM_FLOAT64, LM_CPU, &s0));
  MPI_Barrier(MPI_COMM_WORLD);
  g_failed_calls = 0;
  if (ME == bad) *arm = 1;
  lm_status_t st = lm_dist_tensor_reshard(&y, x, NULL, &s1);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  g_fail_isend = g_fail_irecv = g_truncate = 0;
  int fired = 0;
  MPI_Allreduce(&g_failed_calls, &fired, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  LM_ASSERT_ALL(fired == 1); /* the reshard made the call that was to fail */
  const char *code_name = code == LM_ERR_MPI ? "LM_ERR_MPI" : "LM_ERR_MISMATCH";
  int ok = ME == bad ? st == code && has(msg, call) && y == NULL
                     : st == LM_SUCCESS ||
                           (st == LM_ERR_REMOTE && has(msg, code_name) && y == NULL);
  if (!ok) lm_test__diag("rank %d: %s failing on rank %d: %s: %s\n", ME, call, bad, lm_status_string(st), msg);
  LM_ASSERT_ALL(ok);
  /* Next call on the mesh: fails on every rank; broken meshes say so, the others hear it. */
  if (call_after) {
    int broken = st != LM_SUCCESS;
    st = lm_dist_tensor_reshard(&z, x, NULL, &s1);
    snprintf(msg, sizeof msg, "%s", lm_last_error_message());
    ok = broken ? st == LM_ERR_INVALID_USAGE && has(msg, "broken") : st == LM_ERR_REMOTE;
    if (!ok) lm_test__diag("rank %d: the call after: %s: %s\n", ME, lm_status_string(st), msg);
    LM_ASSERT_ALL(ok && z == NULL);
  }
  lm_dist_tensor_destroy(&y);
  lm_dist_tensor_destroy(&x);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
  /* The peer posted its send before it heard of the failure; it arrives (a generous bound in
   * case it does not: then the receive is cancelled). */
  double t0 = MPI_Wtime();
  int drained = g_drain == MPI_REQUEST_NULL;
  while (!drained && MPI_Wtime() - t0 < 60) PMPI_Test(&g_drain, &drained, MPI_STATUS_IGNORE);
  if (!drained) {
    PMPI_Cancel(&g_drain);
    PMPI_Wait(&g_drain, MPI_STATUS_IGNORE);
  }
  free(g_drain_buf);
  g_drain_buf = NULL;
  /* A fresh mesh over the same processes works. Its communicators may get the context ids of
   * the broken mesh's when those are freed (MPICH reuses them at once), and the failed transfer
   * left messages nobody received (the failing rank's sends, the peers' descriptors, notices):
   * given time to arrive first, they would be taken for the fresh mesh's unless the library
   * keeps a broken mesh's communicators (and checks the epoch of notices). */
  MPI_Barrier(MPI_COMM_WORLD);
  for (double t1 = MPI_Wtime(); MPI_Wtime() - t1 < 0.2;) {
    int flag = 0; /* progress, so that the messages in flight land */
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
  }
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  for (int round = 1; round <= 2; ++round) fresh_reshard(m, round);
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

static void test_isend_error_is_lm_err_mpi(void **state) {
  (void)state;
  one_scenario(NP - 1, &g_fail_isend, LM_ERR_MPI, "MPI_Isend", 1);
}

static void test_irecv_error_is_lm_err_mpi(void **state) {
  (void)state;
  one_scenario(0, &g_fail_irecv, LM_ERR_MPI, "MPI_Irecv", 1);
}

/* A truncated receive (MPI_ERR_TRUNCATE) means the ranks ran different reshards: LM_ERR_MISMATCH
 * saying so (src/transport/mpi/mpi.cpp, in_status), not LM_ERR_MPI. Only the multi-node mode met
 * one before (a real message longer than its receive); here the completion call says it. The
 * transfer was cut short, so the failing rank's mesh breaks as the peers' do (mesh_break): the
 * call after fails at once everywhere (it used to wait on the failing rank for peers that
 * refused it at once). */
static void test_truncate_is_lm_err_mismatch(void **state) {
  (void)state;
  one_scenario(NP - 1, &g_truncate, LM_ERR_MISMATCH, "MPI_ERR_TRUNCATE", 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_isend_error_is_lm_err_mpi),
    cmocka_unit_test(test_irecv_error_is_lm_err_mpi),
    cmocka_unit_test(test_truncate_is_lm_err_mismatch),
};

/* The MPI_Isend/MPI_Irecv failures are the message path's; where even steps run as MPI
 * collectives (LM_MPI_COLLECTIVES=auto or 1), or a small plan's data rides its agreement messages
 * (LM_MESSAGE_EXCHANGE_BYTES), a reshard posts none, so this suite keeps the message path unless
 * told otherwise. */
static void keep_messages(void) __attribute__((constructor));
static void keep_messages(void) {
  setenv("LM_MPI_COLLECTIVES", "0", 0);
  setenv("LM_MESSAGE_EXCHANGE_BYTES", "0", 0);
}

LM_TEST_MAIN(tests)
