/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lm_test.h: header-only harness for CMocka test suites of localmap under MPI (C or C++).
 * Include it first in a test file (it pulls in the headers CMocka needs, mpi.h and localmap.h).
 *
 *   static void test_x(void **state) { (void)state; LM_ASSERT_ALL(lm_test_size() > 0); }
 *   static const struct CMUnitTest tests[] = { cmocka_unit_test(test_x) };
 *   LM_TEST_MAIN(tests)
 *
 * What the runner gives you:
 *  - MPI_Init (unless already initialised), the CMocka group run on every rank, the failure counts
 *    reduced over MPI_COMM_WORLD; rank 0 prints "<suite>: <N> failed on some rank"; MPI_Finalize.
 *    The exit status is the reduced failure count (capped at 100), the same on every rank.
 *  - Only rank 0's output shows. Other ranks write stdout and stderr into a temporary file, which
 *    is printed (prefixed with the rank) when the rank's failure count differs from rank 0's, or
 *    when the job aborts or times out. The diagnostics of a rank that fails an LM_ASSERT_* always
 *    show at once. LM_TEST_VERBOSE=1: every rank prints everything.
 *  - A local failure with more than one rank ends the whole job at once (CMOCKA_TEST_ABORT=1, then
 *    MPI_Abort), because the other ranks may already wait in a collective. The LM_*_ALL assertions
 *    agree first, so when they fail every rank fails the test together and the suite goes on.
 *    Set CMOCKA_TEST_ABORT=0 yourself to turn that off.
 *  - A per-test timeout: a test running longer than LM_TEST_CASE_TIMEOUT seconds (else
 *    LM_TEST_TIMEOUT, default 120; 0 disables) prints its name and rank and MPI_Aborts the job.
 *
 * Assertions (all take expressions; `expr` of the status ones is evaluated exactly once):
 *  LM_ASSERT_ALL(cond)             collective: fails on every rank if cond is false on any rank
 *  LM_ASSERT_OK(expr)              local: expr == LM_SUCCESS, else prints status + last error
 *  LM_ASSERT_OK_ALL(expr)          collective: expr == LM_SUCCESS on every rank
 *  LM_ASSERT_STATUS(expr, code)    local: expr == code and lm_last_error_message() is not empty
 *  LM_ASSERT_STATUS_ALL(expr, code) collective version of LM_ASSERT_STATUS
 * The collective ones must be reached by every rank of MPI_COMM_WORLD (like any collective).
 * Helpers: lm_test_rank(), lm_test_size(), lm_test_comm_f() (MPI_COMM_WORLD as MPI_Fint),
 *          lm_test_world_mesh() (collective: the 1-D mesh of every world rank).
 *
 * Honest results (tests/README.md): a test that cannot run its checks here skips with a reason,
 * never passes silently.
 *  lm_test_skip("needs 8 ranks")   inside a test: the test is skipped and counted; rank 0 prints
 *                                  "LM-SKIP-TEST: <test>: <reason>", which tests/run-tests.sh
 *                                  reports as its own SKIP line. The condition must be the same
 *                                  on every rank. CMocka's bare skip() is redirected here too
 *                                  (its reason then says only where it was called).
 *  lm_test_skip_program(reason)    before the suite: the whole program skips: rank 0 prints
 *                                  "LM-SKIP: <reason>" and every rank exits 77. A program whose
 *                                  every test skipped does the same. Exit status 77 without that
 *                                  line is a failure count (run-tests.sh reads it as FAIL).
 *  lm_test_expect_gpu()            the answer lm_device_supported(kDLCUDA) must give here, decided
 *                                  outside the library: LM_EXPECT_GPU=0|1 (run-tests.sh sets it);
 *                                  -1 when unset.
 *  lm_test_nodes(), lm_test_node_of(world_rank), lm_test_one_node(ranks, n)
 *                                  the simulated nodes of LM_TEST_NODES=k (world rank r on node
 *                                  r % k; the library's node probe honours the same variable):
 *                                  what a test may expect of the board and the node-local path.
 */
#ifndef LM_TEST_H_
#define LM_TEST_H_

#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" { /* cmocka.h 1.1 has no C++ guards */
#endif
#include <cmocka.h>
#ifdef __cplusplus
}
#endif
#include <mpi.h>

#include "localmap.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LM_TEST_UNUSED __attribute__((unused))
#else
#define LM_TEST_UNUSED
#endif

/* ---------------------------------------------------------------------------------------------
 * State of the running suite (one per test program: the header is included by one .c file).
 * ------------------------------------------------------------------------------------------- */
struct lm_test__record {
  const struct CMUnitTest *orig;
};

static const char *volatile lm_test__current = "(no test)";
static const char *volatile lm_test__suite = "(suite)";
static volatile int lm_test__rank = 0;
static volatile int lm_test__size = 1;
static int lm_test__abort_mode = 0; /* 1: a local failure aborts the job (size > 1) */
static unsigned lm_test__timeout = 120;

static LM_TEST_UNUSED int lm_test_rank(void) { return lm_test__rank; }
static LM_TEST_UNUSED int lm_test_size(void) { return lm_test__size; }
static LM_TEST_UNUSED int lm_test_comm_f(void) { return (int)MPI_Comm_c2f(MPI_COMM_WORLD); }

/* Ranks > 0 send stdout and stderr into a temporary file (capture_fd) while the suite runs;
 * real_stderr is the original stderr then, -1 otherwise. */
static int lm_test__capture_fd = -1;
static int lm_test__real_stderr = -1;

static LM_TEST_UNUSED void lm_test__write_fd(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
}

static LM_TEST_UNUSED void lm_test__write_err(const char *s) {
  lm_test__write_fd(lm_test__real_stderr >= 0 ? lm_test__real_stderr : 2, s, strlen(s));
}

/* Copies this rank's captured output to the real stderr (signal handlers use it too). */
static LM_TEST_UNUSED void lm_test__dump_capture(void) {
  char buf[4096];
  off_t off = 0;
  ssize_t r;
  if (lm_test__capture_fd < 0 || lm_test__real_stderr < 0) return;
  fflush(stdout);
  snprintf(buf, sizeof buf, "----- output of rank %d -----\n", lm_test__rank);
  lm_test__write_err(buf);
  while ((r = pread(lm_test__capture_fd, buf, sizeof buf, off)) > 0) {
    lm_test__write_fd(lm_test__real_stderr, buf, (size_t)r);
    off += r;
  }
  snprintf(buf, sizeof buf, "----- end of output of rank %d -----\n", lm_test__rank);
  lm_test__write_err(buf);
}

/* A diagnostic of a rank that fails a check: always reaches the real stderr. */
static LM_TEST_UNUSED void lm_test__diag(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static LM_TEST_UNUSED void lm_test__diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (lm_test__real_stderr >= 0) {
    vdprintf(lm_test__real_stderr, fmt, ap);
  } else {
    vfprintf(stderr, fmt, ap);
  }
  va_end(ap);
}

/* ---------------------------------------------------------------------------------------------
 * Skips (see the top of this file)
 * ------------------------------------------------------------------------------------------- */
static int lm_test__nskipped = 0;     /* tests of this suite skipped on this rank */
static char lm_test__first_skip[256]; /* the first skip's "<test>: <reason>" */

static LM_TEST_UNUSED void lm_test__skip_at(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static LM_TEST_UNUSED void lm_test__skip_at(const char *file, int line, const char *fmt, ...) {
  char why[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  for (char *c = why; *c; ++c)
    if (*c == '\n') *c = ' ';
  if (lm_test__nskipped++ == 0)
    snprintf(lm_test__first_skip, sizeof lm_test__first_skip, "%s: %s", lm_test__current, why);
  if (lm_test__rank == 0) {
    printf("LM-SKIP-TEST: %s: %s\n", lm_test__current, why);
    fflush(stdout);
  }
  _skip(file, line);
}
#define lm_test_skip(...) lm_test__skip_at(__FILE__, __LINE__, __VA_ARGS__)
/* CMocka's own skip() gives no reason: it is still counted and reported, with its place. */
#undef skip
#define skip() lm_test__skip_at(__FILE__, __LINE__, "skip() at %s:%d gave no reason", __FILE__, __LINE__)

/* The whole program skips (call it before the suite, on every rank): rank 0 prints the marker
 * tests/run-tests.sh looks for, MPI is finalised, and the exit status is 77. */
static LM_TEST_UNUSED void lm_test_skip_program(const char *reason) {
  int inited = 0, finalized = 0, rank = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    printf("LM-SKIP: %s\n", reason);
    fflush(stdout);
  }
  if (inited && !finalized) MPI_Finalize();
  exit(77);
}

/* LM_EXPECT_GPU=0|1: whether lm_device_supported(kDLCUDA) must say yes here; -1 when unset or
 * not 0/1. Decided outside the library (tests/run-tests.sh: the build's CUDA switch and the
 * machine), so that a regressed answer fails instead of turning tests into skips. */
static LM_TEST_UNUSED int lm_test_expect_gpu(void) {
  const char *e = getenv("LM_EXPECT_GPU");
  if (e == NULL || (strcmp(e, "0") != 0 && strcmp(e, "1") != 0)) return -1;
  return e[0] == '1';
}

/* Simulated nodes (LM_TEST_NODES=k, tests/README.md "multinode"): world rank r is on node r % k. */
static LM_TEST_UNUSED int lm_test_nodes(void) {
  const char *e = getenv("LM_TEST_NODES");
  int k = e != NULL ? atoi(e) : 1;
  return k > 1 ? k : 1;
}
static LM_TEST_UNUSED int lm_test_node_of(int world_rank) { return world_rank % lm_test_nodes(); }
/* Whether the world ranks ranks[0..n) (NULL: all of MPI_COMM_WORLD) share one node. */
static LM_TEST_UNUSED int lm_test_one_node(const int *ranks, int n) {
  int i;
  if (ranks == NULL) n = lm_test__size;
  for (i = 1; i < n; ++i)
    if (lm_test_node_of(ranks ? ranks[i] : i) != lm_test_node_of(ranks ? ranks[0] : 0)) return 0;
  return 1;
}

static LM_TEST_UNUSED void lm_test__on_alarm(int sig) {
  char buf[512];
  (void)sig;
  snprintf(buf, sizeof buf,
           "\nlm_test: TIMEOUT: suite %s, test %s on rank %d of %d ran past %u s; aborting the job\n",
           lm_test__suite, lm_test__current, lm_test__rank, lm_test__size, lm_test__timeout);
  lm_test__dump_capture();
  lm_test__write_err(buf);
  MPI_Abort(MPI_COMM_WORLD, 2);
  _exit(2);
}

static LM_TEST_UNUSED void lm_test__on_abort(int sig) {
  char buf[512];
  (void)sig;
  snprintf(buf, sizeof buf,
           "\nlm_test: rank %d of %d: test %s (suite %s) failed a local assertion or aborted; "
           "aborting the whole job so that no rank hangs (use LM_ASSERT_ALL / LM_ASSERT_OK_ALL "
           "for checks that may differ between ranks)\n",
           lm_test__rank, lm_test__size, lm_test__current, lm_test__suite);
  lm_test__dump_capture();
  lm_test__write_err(buf);
  signal(SIGABRT, SIG_DFL);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

/* An agreed failure (every rank fails the same check): let CMocka go on with the next test. The
 * next test's setup turns abort mode back on. */
static LM_TEST_UNUSED void lm_test__agreed_failure(void) {
  if (lm_test__abort_mode) setenv("CMOCKA_TEST_ABORT", "0", 1);
}

static const struct lm_test__record *lm_test__cur_rec = NULL;
static void *lm_test__group_state = NULL;
static CMFixtureFunction lm_test__user_group_setup = NULL;
static CMFixtureFunction lm_test__user_group_teardown = NULL;

static LM_TEST_UNUSED int lm_test__setup(void **state) {
  const struct lm_test__record *rec = (const struct lm_test__record *)*state;
  lm_test__cur_rec = rec;
  lm_test__current = rec->orig->name;
  *state = rec->orig->initial_state != NULL ? rec->orig->initial_state : lm_test__group_state;
  if (lm_test__abort_mode) setenv("CMOCKA_TEST_ABORT", "1", 1);
  if (lm_test__timeout > 0) alarm(lm_test__timeout);
  if (rec->orig->setup_func != NULL) return rec->orig->setup_func(state);
  return 0;
}

static LM_TEST_UNUSED int lm_test__teardown(void **state) {
  int rc = 0;
  if (lm_test__cur_rec != NULL && lm_test__cur_rec->orig->teardown_func != NULL)
    rc = lm_test__cur_rec->orig->teardown_func(state);
  alarm(0);
  lm_test__current = "(between tests)";
  return rc;
}

static LM_TEST_UNUSED int lm_test__group_setup(void **state) {
  int rc = 0;
  lm_test__current = "(group setup)";
  if (lm_test__timeout > 0) alarm(lm_test__timeout);
  if (lm_test__user_group_setup != NULL) rc = lm_test__user_group_setup(state);
  alarm(0);
  lm_test__group_state = *state;
  return rc;
}

static LM_TEST_UNUSED int lm_test__group_teardown(void **state) {
  int rc = 0;
  lm_test__current = "(group teardown)";
  if (lm_test__timeout > 0) alarm(lm_test__timeout);
  if (lm_test__user_group_teardown != NULL) rc = lm_test__user_group_teardown(state);
  alarm(0);
  return rc;
}

static LM_TEST_UNUSED const char *lm_test_basename(const char *path) {
  const char *slash = path != NULL ? strrchr(path, '/') : NULL;
  return slash != NULL ? slash + 1 : (path != NULL ? path : "tests");
}

/* MPI_Init unless MPI is initialised already; records rank and size. Idempotent. */
static LM_TEST_UNUSED void lm_test_init(int *argc, char ***argv) {
  int inited = 0, rank = 0, size = 1;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  lm_test__rank = rank;
  lm_test__size = size;
}

static LM_TEST_UNUSED int lm_test__env_true(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Runs the group on every rank (see the top of this file); returns the failure count summed over
 * all ranks (capped at 100), the same on every rank. Finalises MPI. */
static LM_TEST_UNUSED int lm_test_run_group(const struct CMUnitTest *tests, size_t n, const char *suite,
                                            CMFixtureFunction group_setup,
                                            CMFixtureFunction group_teardown) {
  struct CMUnitTest *wrapped;
  struct lm_test__record *recs;
  const char *env;
  size_t i;
  int local_failed, total_failed = 0, rank0_failed = 0, finalized = 0;
  int quiet, saved_stdout = -1, saved_stderr = -1;
  FILE *capture = NULL;

  lm_test_init(NULL, NULL);
  lm_test__suite = suite != NULL ? suite : "tests";
  lm_test__user_group_setup = group_setup;
  lm_test__user_group_teardown = group_teardown;

  env = getenv("LM_TEST_CASE_TIMEOUT");
  if (env == NULL || env[0] == '\0') env = getenv("LM_TEST_TIMEOUT");
  lm_test__timeout = (env != NULL && env[0] != '\0') ? (unsigned)strtoul(env, NULL, 10) : 120u;
  lm_test__abort_mode = lm_test__size > 1 && getenv("CMOCKA_TEST_ABORT") == NULL;
  signal(SIGALRM, lm_test__on_alarm);
  signal(SIGABRT, lm_test__on_abort);

  wrapped = (struct CMUnitTest *)calloc(n > 0 ? n : 1, sizeof *wrapped);
  recs = (struct lm_test__record *)calloc(n > 0 ? n : 1, sizeof *recs);
  if (wrapped == NULL || recs == NULL) {
    fprintf(stderr, "lm_test: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  for (i = 0; i < n; i++) {
    recs[i].orig = &tests[i];
    wrapped[i].name = tests[i].name;
    wrapped[i].test_func = tests[i].test_func;
    wrapped[i].setup_func = lm_test__setup;
    wrapped[i].teardown_func = lm_test__teardown;
    wrapped[i].initial_state = &recs[i];
  }

  /* Ranks other than 0 write their report into a temporary file. */
  quiet = lm_test__rank != 0 && !lm_test__env_true("LM_TEST_VERBOSE");
  if (quiet) {
    fflush(stdout);
    fflush(stderr);
    capture = tmpfile();
    saved_stdout = dup(1);
    saved_stderr = dup(2);
    if (capture != NULL && saved_stdout >= 0 && saved_stderr >= 0) {
      dup2(fileno(capture), 1);
      dup2(fileno(capture), 2);
      lm_test__capture_fd = fileno(capture);
      lm_test__real_stderr = saved_stderr;
    } else {
      quiet = 0;
    }
  }

  local_failed = _cmocka_run_group_tests(lm_test__suite, wrapped, n, lm_test__group_setup,
                                         lm_test__group_teardown);
  if (lm_test__abort_mode) setenv("CMOCKA_TEST_ABORT", "0", 1);
  alarm(0);
  lm_test__current = "(after the suite)";

  if (quiet) {
    fflush(stdout);
    fflush(stderr);
    dup2(saved_stdout, 1);
    dup2(saved_stderr, 2);
    lm_test__capture_fd = -1;
    lm_test__real_stderr = -1;
    close(saved_stdout);
    close(saved_stderr);
  }

  MPI_Allreduce(&local_failed, &total_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  rank0_failed = local_failed;
  MPI_Bcast(&rank0_failed, 1, MPI_INT, 0, MPI_COMM_WORLD);

  if (capture != NULL) {
    if (local_failed != rank0_failed) {
      char line[1024];
      rewind(capture);
      while (fgets(line, sizeof line, capture) != NULL) fprintf(stderr, "[rank %d] %s", lm_test__rank, line);
      fflush(stderr);
    }
    fclose(capture);
  }
  if (lm_test__rank == 0 && total_failed != 0) {
    printf("%s: %d failed on some rank (%d ranks)\n", lm_test__suite, total_failed, lm_test__size);
    fflush(stdout);
  }
  /* Skips: counted on rank 0 (the conditions are the same on every rank). A suite whose every
   * test skipped ran no check: it skips as a whole (exit 77 with the marker). */
  if (lm_test__rank == 0 && lm_test__nskipped > 0) {
    printf("LM-SKIPPED-TESTS: %d of %zu\n", lm_test__nskipped, n);
    if (total_failed == 0 && (size_t)lm_test__nskipped == n)
      printf("LM-SKIP: every test of %s skipped (first: %s)\n", lm_test__suite, lm_test__first_skip);
    fflush(stdout);
  }
  {
    int all_skipped = n > 0 && (size_t)lm_test__nskipped == n && total_failed == 0;
    MPI_Bcast(&all_skipped, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(wrapped);
    free(recs);
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    if (all_skipped) return 77;
  }
  /* The exit status is the failure count; 77 only ever means a skip with its marker line. */
  if (total_failed == 77) total_failed = 78;
  return total_failed > 100 ? 100 : total_failed;
}

static LM_TEST_UNUSED int lm_test_run(const struct CMUnitTest *tests, size_t n, const char *suite) {
  return lm_test_run_group(tests, n, suite, NULL, NULL);
}

/* A main() that runs `tests` (an array of struct CMUnitTest) as the suite named after the program. */
#define LM_TEST_MAIN(tests)                                                                       \
  int main(int argc, char **argv) {                                                              \
    lm_test_init(&argc, &argv);                                                                   \
    return lm_test_run((tests), sizeof(tests) / sizeof((tests)[0]), lm_test_basename(argv[0]));   \
  }

/* The same, with one more test that belongs to the suite only where the environment variable
 * `env` is set (a script that runs the suite in the mode the test needs sets it; elsewhere the
 * test is not part of the suite rather than a skip, which CI's LM_ONLY_GPU_SKIPS would count). */
#define LM_TEST_MAIN_WITH(tests, env, extra)                                                      \
  int main(int argc, char **argv) {                                                              \
    lm_test_init(&argc, &argv);                                                                   \
    struct CMUnitTest all_[sizeof(tests) / sizeof((tests)[0]) + 1];                               \
    size_t n_ = sizeof(tests) / sizeof((tests)[0]);                                               \
    memcpy(all_, (tests), sizeof(tests));                                                         \
    if (getenv(env)) all_[n_++] = (struct CMUnitTest)cmocka_unit_test(extra);                     \
    return lm_test_run(all_, n_, lm_test_basename(argv[0]));                                      \
  }

/* A program that abandons MPI traffic on purpose (a rank that skips a call, so messages stay
 * unreceived; an agreement that timed out, whose nonblocking collective MPI cannot cancel; failure
 * notices nobody reads) says so with this line at file scope: under LeakSanitizer, what MPI
 * allocates for such messages while it progresses (opal_progress: OpenMPI's unexpected-message
 * buffers), the requests of abandoned nonblocking collectives, and the agreement communicator they
 * were on (MPI_Finalize frees it, but OpenMPI keeps a communicator with a pending collective) are
 * then not reported, for this program only. Everything else still is: a leaked mesh or plan
 * communicator is allocated where it is created (tests/lsan.supp), and tests/test_mpi_objects.c
 * counts requests and communicators per cycle. */
#define LM_TEST_ABANDONED_MPI_OK()                                                      \
  __attribute__((used)) const char *__lsan_default_suppressions(void);                \
  __attribute__((used)) const char *__lsan_default_suppressions(void) {               \
    return "leak:opal_progress\nleak:PMPI_Iallreduce\nleak:PMPI_Iallgather\n"         \
           "leak:lm::agree_comm_for\n";                                                 \
  }

/* Agreement messages (src/comm/agree.hpp, kAgreeMsgTag): a set of up to LM_AGREE_MESSAGES ranks
 * without an agreement board agrees by one message from each rank to every other, on the set's
 * agreement communicator, with this tag: 64 bytes of the agreement's words, then, where a small
 * plan's data rides them (LM_MESSAGE_EXCHANGE_BYTES), the sender's block for the receiver.
 * lm_test_agree_words: whether a send is such a message with no block (tests that count data
 * messages leave those out). */
#define LM_TEST_AGREE_MSG_TAG 0x7f4c
static LM_TEST_UNUSED int lm_test_agree_words(int tag, int n, MPI_Datatype t) {
  int size = 0;
  if (tag != LM_TEST_AGREE_MSG_TAG || PMPI_Type_size(t, &size) != MPI_SUCCESS) return 0;
  return (long long)n * size <= 64;
}

/* ---------------------------------------------------------------------------------------------
 * Assertions
 * ------------------------------------------------------------------------------------------- */
/* A copy of lm_last_error_message(): later localmap calls (lm_status_string) may reuse its buffer. */
static char lm_test__msgbuf[1024];
static LM_TEST_UNUSED const char *lm_test__last_message(void) {
  const char *m = lm_last_error_message();
  snprintf(lm_test__msgbuf, sizeof lm_test__msgbuf, "%s", m != NULL ? m : "");
  return lm_test__msgbuf;
}

/* Everyone learns whether any rank failed, how many and the first one. Collective. */
static LM_TEST_UNUSED int lm_test__agree(int ok, int *nbad, int *first_bad) {
  int all_ok = 1, in[2], out[2];
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (all_ok) return 1;
  in[0] = ok ? 0 : 1;
  in[1] = ok ? INT_MAX : lm_test__rank;
  MPI_Allreduce(&in[0], &out[0], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&in[1], &out[1], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  *nbad = out[0];
  *first_bad = out[1];
  return 0;
}

static LM_TEST_UNUSED void lm_test__assert_all(int ok, const char *expr, const char *file,
                                               int line) {
  int nbad = 0, first = 0;
  if (lm_test__agree(ok, &nbad, &first)) return;
  if (ok) {
    print_error("rank %d/%d: LM_ASSERT_ALL(%s) failed on %d rank(s), first rank %d; here it is true\n",
                lm_test__rank, lm_test__size, expr, nbad, first);
  } else {
    lm_test__diag("rank %d/%d: LM_ASSERT_ALL(%s) failed on %d rank(s), first rank %d; here it is FALSE"
                  " (%s:%d)\n", lm_test__rank, lm_test__size, expr, nbad, first, file, line);
  }
  lm_test__agreed_failure();
  _fail(file, line);
}

static LM_TEST_UNUSED void lm_test__print_status(const char *what, const char *expr, int status,
                                                 const char *message) {
  lm_test__diag("rank %d/%d: %s(%s) returned %s: %s\n", lm_test__rank, lm_test__size, what, expr,
              lm_status_string((lm_status_t)status), message[0] != '\0' ? message : "(no message)");
}

static LM_TEST_UNUSED void lm_test__assert_ok(int status, const char *expr, const char *file,
                                              int line) {
  if (status == LM_SUCCESS) return;
  lm_test__print_status("LM_ASSERT_OK", expr, status, lm_test__last_message());
  _fail(file, line);
}

static LM_TEST_UNUSED void lm_test__assert_ok_all(int status, const char *expr, const char *file,
                                                  int line) {
  int nbad = 0, first = 0;
  const char *message = lm_test__last_message();
  if (lm_test__agree(status == LM_SUCCESS, &nbad, &first)) return;
  if (status != LM_SUCCESS) {
    lm_test__print_status("LM_ASSERT_OK_ALL", expr, status, message);
  } else {
    print_error("rank %d/%d: LM_ASSERT_OK_ALL(%s) succeeded here but failed on %d rank(s), "
                "first rank %d\n", lm_test__rank, lm_test__size, expr, nbad, first);
  }
  lm_test__agreed_failure();
  _fail(file, line);
}

/* 1 if status == expected with a non-empty message; prints why not otherwise. */
static LM_TEST_UNUSED int lm_test__check_status(const char *what, int status, int expected,
                                                const char *expr) {
  const char *message = lm_test__last_message();
  if (status != expected) {
    lm_test__diag("rank %d/%d: %s(%s): expected %s, got %s: %s\n", lm_test__rank, lm_test__size,
                what, expr, lm_status_string((lm_status_t)expected),
                lm_status_string((lm_status_t)status), message[0] != '\0' ? message : "(no message)");
    return 0;
  }
  if (expected != LM_SUCCESS && message[0] == '\0') {
    lm_test__diag("rank %d/%d: %s(%s): returned %s as expected but lm_last_error_message() is empty\n",
                lm_test__rank, lm_test__size, what, expr, lm_status_string((lm_status_t)status));
    return 0;
  }
  return 1;
}

static LM_TEST_UNUSED void lm_test__assert_status(int status, int expected, const char *expr,
                                                  const char *file, int line) {
  if (lm_test__check_status("LM_ASSERT_STATUS", status, expected, expr)) return;
  _fail(file, line);
}

static LM_TEST_UNUSED void lm_test__assert_status_all(int status, int expected, const char *expr,
                                                      const char *file, int line) {
  int nbad = 0, first = 0;
  int ok = lm_test__check_status("LM_ASSERT_STATUS_ALL", status, expected, expr);
  if (lm_test__agree(ok, &nbad, &first)) return;
  if (ok) {
    print_error("rank %d/%d: LM_ASSERT_STATUS_ALL(%s) held here but failed on %d rank(s), "
                "first rank %d\n", lm_test__rank, lm_test__size, expr, nbad, first);
  }
  lm_test__agreed_failure();
  _fail(file, line);
}

#define LM_ASSERT_ALL(cond) lm_test__assert_all((cond) ? 1 : 0, #cond, __FILE__, __LINE__)
#define LM_ASSERT_OK(expr) lm_test__assert_ok((int)(expr), #expr, __FILE__, __LINE__)
#define LM_ASSERT_OK_ALL(expr) lm_test__assert_ok_all((int)(expr), #expr, __FILE__, __LINE__)
#define LM_ASSERT_STATUS(expr, code) \
  lm_test__assert_status((int)(expr), (int)(code), #expr, __FILE__, __LINE__)
#define LM_ASSERT_STATUS_ALL(expr, code) \
  lm_test__assert_status_all((int)(expr), (int)(code), #expr, __FILE__, __LINE__)

/* Collective: the 1-D mesh of every world rank (config NULL). */
static LM_TEST_UNUSED lm_mesh_t lm_test_world_mesh(void) {
  lm_mesh_t m = NULL;
  int64_t shape[1] = {lm_test_size()};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, NULL));
  return m;
}

/* Collective: every rank checks that `msg` names `needle` (NULL: only that it is non-empty). */
static LM_TEST_UNUSED void lm_test__check_msg_all(int status, const char *msg, const char *needle,
                                                  const char *expr, const char *file, int line) {
  int ok = status == LM_SUCCESS ||
           (msg != NULL && msg[0] != '\0' && (needle == NULL || strstr(msg, needle) != NULL));
  if (!ok)
    fprintf(stderr, "rank %d: %s:%d: %s: message \"%s\" does not mention \"%s\"\n", lm_test__rank,
            file, line, expr, msg != NULL ? msg : "(null)", needle != NULL ? needle : "");
  lm_test__assert_all(ok, "message mentions the argument", file, line);
}

/* Collective: expr returns `code` (which may differ per rank) with a message naming `needle`. */
#define LM_EXPECT_ALL(expr, code, needle)                                          \
  do {                                                                             \
    lm_status_t s_ = (expr);                                                       \
    char m_[1024];                                                                 \
    snprintf(m_, sizeof m_, "%s", lm_last_error_message());                        \
    LM_ASSERT_STATUS_ALL(s_, (code));                                              \
    lm_test__check_msg_all((int)(code), m_, (needle), #expr, __FILE__, __LINE__); \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* LM_TEST_H_ */
