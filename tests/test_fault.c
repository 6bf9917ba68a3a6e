/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_fault: a sequence of collective calls whose outcome must be the same on every rank: all
 * succeed, or all fail (the failing rank with its own error, the others with LM_ERR_REMOTE or a
 * broken-mesh error), and nothing hangs. One exception, the documented one: a rank whose part of
 * a transfer completed before a peer's transport failure returns success, and its next collective
 * call on the mesh fails on every rank (the failed rank's broken mesh joins the agreement). Run plainly by `make check` (everything succeeds) and by
 * tests/script_fault.sh under LM_FAULT (docs/DESIGN.md, "Failure model"), which fails an
 * allocation or a transport call on a chosen rank at the Nth call.
 *
 * Not only agreement: every status is the one the fault calls for (docs/DESIGN.md, "Error model"),
 * read from LM_FAULT by this file. Without a fault every call succeeds. alloc: the rank whose
 * allocation failed returns LM_ERR_OUT_OF_MEMORY, the others LM_ERR_REMOTE naming it, and later
 * calls work again. transport: the failing rank returns LM_ERR_MPI, a rank waiting on it
 * LM_ERR_REMOTE carrying LM_ERR_MPI (both break their mesh), a rank whose part completed returns
 * success; afterwards every call on the mesh fails, LM_ERR_INVALID_USAGE ("broken") on the ranks
 * whose mesh broke and LM_ERR_REMOTE on the others.
 */
// lm-test-np: 1 2 4
#include "lm_test.h"

/* After an injected transport failure MPI keeps failure notices and abandoned messages
 * unreceived, or abandons requests (tests/lm_test.h). */
LM_TEST_ABANDONED_MPI_OK()

#define NP lm_test_size()
#define ME lm_test_rank()

static int g_first_failure = 0, g_op = 0, g_diverged = 0;

/* The injected fault, from LM_FAULT ("kind:rank=R:nth=N", the first one when several). */
enum { F_NONE, F_ALLOC, F_TRANSPORT };
static int g_kind = F_NONE, g_frank = -1;
static int g_broken = 0;     /* this rank's mesh is broken (transport faults) */
static int g_any_broken = 0; /* some rank's is (agreed after each call) */

static void read_fault(void) {
  const char *e = getenv("LM_FAULT");
  char kind[32] = {0};
  int rank = -1;
  g_kind = F_NONE;
  if (e == NULL || !*e || sscanf(e, "%31[a-z]:rank=%d", kind, &rank) < 1) return;
  g_kind = strcmp(kind, "alloc") == 0 ? F_ALLOC : strcmp(kind, "transport") == 0 ? F_TRANSPORT : F_NONE;
  g_frank = rank;
}
static int eligible(void) { return g_frank < 0 || g_frank == ME; }
static int has(const char *msg, const char *w) { return strstr(msg, w) != NULL; }

/* Whether st (with message msg) is a status this rank may return from a collective call now. */
static int code_expected(lm_status_t st, const char *msg) {
  switch (g_kind) {
    case F_ALLOC: {
      char who[32]; /* the others name the failing rank */
      snprintf(who, sizeof who, "rank %d ", g_frank);
      return st == LM_SUCCESS || (st == LM_ERR_OUT_OF_MEMORY && eligible()) ||
             (st == LM_ERR_REMOTE && has(msg, "LM_ERR_OUT_OF_MEMORY") && (g_frank < 0 || has(msg, who)));
    }
    case F_TRANSPORT:
      if (g_broken) return st == LM_ERR_INVALID_USAGE && has(msg, "broken");
      if (g_any_broken) return st == LM_ERR_REMOTE;
      return st == LM_SUCCESS || (st == LM_ERR_MPI && eligible() && has(msg, "LM_FAULT")) ||
             (st == LM_ERR_REMOTE && has(msg, "LM_ERR_MPI"));
    default:
      return st == LM_SUCCESS;
  }
}

/* Collective: the code of every rank is the one the fault calls for, and a failure that is the
 * fault's first shows its own code on some rank (LM_ERR_OUT_OF_MEMORY or LM_ERR_MPI). */
static void expected_codes(lm_status_t st, const char *msg) {
  int ok = code_expected(st, msg), own = 0, any_own = 0, fail = st != LM_SUCCESS, any_fail = 0;
  if (!ok)
    lm_test__diag("rank %d: op %d: status %s is not what LM_FAULT=%s calls for (mesh broken here: "
                  "%d, somewhere: %d): %s\n", ME, g_op, lm_status_string(st),
                  getenv("LM_FAULT") ? getenv("LM_FAULT") : "(none)", g_broken, g_any_broken, msg);
  own = (g_kind == F_ALLOC && st == LM_ERR_OUT_OF_MEMORY) || (g_kind == F_TRANSPORT && st == LM_ERR_MPI);
  MPI_Allreduce(&own, &any_own, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&fail, &any_fail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_fail && !g_any_broken && !any_own) {
    if (ME == 0) lm_test__diag("op %d failed, but no rank returned the injected fault's own code\n", g_op);
    ok = 0;
  }
  if (g_kind == F_TRANSPORT && fail) g_broken = 1;
  MPI_Allreduce(&g_broken, &g_any_broken, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  LM_ASSERT_ALL(ok);
}

/* Collective over the world: every rank got the same verdict (success or failure), or the
 * verdicts differed at the previous call and every rank fails this one. */
static void same_outcome(lm_status_t st) {
  int ok = st == LM_SUCCESS, lo = 0, hi = 0;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", lm_last_error_message());
  ++g_op;
  MPI_Allreduce(&ok, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&ok, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (lo == 0 && !g_first_failure) g_first_failure = g_op; /* the same on every rank */
  if (!ok && getenv("LM_FAULT_VERBOSE"))
    fprintf(stderr, "rank %d: op %d failed: %s\n", ME, g_op, lm_last_error_message());
  int good;
  if (g_diverged) {
    good = hi == 0; /* every rank learns of the failure now */
    g_diverged = 0;
  } else {
    good = 1;
    g_diverged = lo != hi;
  }
  if (!good)
    fprintf(stderr, "rank %d: op %d: status %d (%s), not failed on every rank after a divergence\n",
            ME, g_op, (int)st, lm_last_error_message());
  LM_ASSERT_ALL(good);
  expected_codes(st, msg);
}

static void free_managed(DLManagedTensor *mt) {
  free(mt->dl_tensor.data);
  free(mt->dl_tensor.shape);
  free(mt);
}

static lm_status_t copy_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud; (void)mesh; (void)nin; (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  if (!mt) return LM_ERR_OUT_OF_MEMORY;
  int64_t n = x->shape[0];
  mt->dl_tensor = *x;
  mt->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t));
  mt->dl_tensor.shape[0] = n;
  mt->dl_tensor.strides = NULL;
  mt->dl_tensor.data = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (n) memcpy(mt->dl_tensor.data, x->data, sizeof(double) * (size_t)n);
  mt->deleter = free_managed;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}

static void test_collectives_agree_under_faults(void **state) {
  (void)state;
  read_fault();
  lm_mesh_t m = NULL;
  int64_t ms[1] = {NP}, n = 37;
  same_outcome(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  if (!m) return;
  double full[37], back[37];
  for (int i = 0; i < 37; ++i) full[i] = i;
  DLTensor g = {full, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0};
  DLTensor d = {back, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0};
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE,
                 psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  lm_dist_tensor_t x = NULL, r = NULL, y = NULL, p = NULL, pr = NULL, v = NULL, t = NULL, u = NULL;
  /* After a divergence the ranks hold different handles: one more collective call that needs
   * none of them settles it, and the sequence stops. */
#define STEP(expr)                                                               \
  do {                                                                           \
    same_outcome(expr);                                                          \
    if (g_diverged) {                                                            \
      lm_dist_tensor_t z_ = NULL;                                                \
      same_outcome(lm_dist_tensor_from_global(&z_, m, ME == 0 ? &g : NULL, &s0, 0)); \
      lm_dist_tensor_destroy(&z_);                                               \
      goto done;                                                                 \
    }                                                                            \
  } while (0)
  STEP(lm_dist_tensor_from_global(&x, m, ME == 0 ? &g : NULL, &s0, 0));
  if (x) STEP(lm_dist_tensor_reshard(&r, x, NULL, &rep));
  if (r) STEP(lm_dist_tensor_gather(r, -1, &d));
  if (x) STEP(lm_dist_tensor_gather(x, 0, ME == 0 ? &d : NULL));
  if (x) {
    DLTensor loc;
    LM_ASSERT_OK(lm_dist_tensor_local(x, &loc));
    STEP(lm_dist_tensor_from_local(&y, m, &loc, &s0, LM_SHAPE_ALLGATHER, NULL,
                                           LM_FROM_LOCAL_COPY));
  }
  if (x) {
    lm_arg_t in = {LM_ARG_DIST_TENSOR, 0, 0, 0, x}, out = {0};
    const lm_placement_t *outp[1] = {&s0};
    STEP(lm_local_map(copy_fn, NULL, 1, &in, NULL, 1, outp, NULL, NULL, 0u, &out));
    if (out.kind == LM_ARG_DIST_TENSOR) t = (lm_dist_tensor_t)out.ptr;
  }
  if (x) {
    lm_reshard_plan_t plan = NULL;
    LM_ASSERT_OK(lm_reshard_plan_create(&plan, m, &s0, m, &rep, 1, &n, LM_FLOAT64));
    /* alloc_target is local: a failure there is this rank's alone (no other rank is told), so
     * the test itself agrees before the collective that needs the target. */
    lm_status_t st = lm_reshard_plan_alloc_target(&u, plan, LM_CPU);
    int mine = st == LM_SUCCESS, all = 0;
    /* local: only an allocation fault of this very rank may fail it, with its own code */
    int local_ok = st == LM_SUCCESS || (g_kind == F_ALLOC && eligible() && st == LM_ERR_OUT_OF_MEMORY);
    if (!local_ok)
      lm_test__diag("rank %d: alloc_target: %s: %s\n", ME, lm_status_string(st), lm_last_error_message());
    LM_ASSERT_ALL(local_ok);
    ++g_op;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all && !g_first_failure) g_first_failure = g_op;
    if (all) STEP(lm_reshard_plan_execute(plan, x, u));
    lm_reshard_plan_destroy(&plan);
  }
  if (r) STEP(lm_dist_tensor_reshard(&v, r, NULL, &s0));
  STEP(lm_dist_tensor_from_global(&p, m, ME == 0 ? &g : NULL, &psum, 0));
  if (p) STEP(lm_dist_tensor_reshard(&pr, p, NULL, &rep));
done:
  if (!g_first_failure) {
    int ok = 1;
    for (int i = 0; i < 37; ++i) ok &= back[i] == i || ME != 0;
    LM_ASSERT_ALL(ok);
  }
  if (ME == 0) printf("test_fault: first failing call: %d of %d (0: none)\n", g_first_failure, g_op);
  lm_dist_tensor_t all[] = {x, r, y, p, pr, v, t, u};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) lm_dist_tensor_destroy(&all[i]);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_collectives_agree_under_faults),
};

LM_TEST_MAIN(tests)
