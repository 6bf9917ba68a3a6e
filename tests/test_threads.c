/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_threads: threads as the header documents them (issue 19 item 3). With MPI_THREAD_MULTIPLE,
 * distinct meshes may be used from distinct threads at once: every mesh agrees on channels of its
 * own (before, all meshes over one process set shared one channel, and two threads resharding on
 * two meshes over the same ranks made every call fail with "ranks disagree on source mesh").
 *  - 2 and 4 threads, each creating its own mesh concurrently (from its own duplicate of
 *    MPI_COMM_WORLD) over the same process set, then resharding S(0) -> R -> S(0) and a
 *    Partial(sum) -> R, checking every element, many times over;
 *  - the same with each thread's mesh over a different pair of ranks (config->ranks) at np >= 3.
 * Failures inside threads are counted and asserted by the main thread.
 */
// lm-test-np: 2 3 4
#include <pthread.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()
#define ROUNDS 20

struct job {
  MPI_Comm parent;
  int index, pairs; /* pairs: the mesh is ranks {index, index + 1} mod NP */
  int failures;
  char why[256];
};

static void note(struct job *j, const char *what, lm_status_t st) {
  if (j->failures++ == 0)
    snprintf(j->why, sizeof j->why, "thread %d: %s: status %d: %s", j->index, what, (int)st,
             st ? lm_last_error_message() : "wrong data");
}

#define CALL(j, x)                        \
  do {                                    \
    lm_status_t s_ = (x);                 \
    if (s_ != LM_SUCCESS) {               \
      note((j), #x, s_);                  \
      goto out;                           \
    }                                     \
  } while (0)

/* One thread: its mesh, then ROUNDS of reshards whose every element is checked. */
static void *run(void *arg) {
  struct job *j = (struct job *)arg;
  lm_mesh_t m = NULL;
  lm_dist_tensor_t t = NULL, r = NULL, back = NULL, p = NULL, pr = NULL;
  int ranks[2] = {j->index % NP, (j->index + 1) % NP};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  int64_t ms[1] = {j->pairs ? 2 : NP}, n = 40 + j->index;
  if (j->pairs) {
    cfg.ranks = ranks;
    cfg.nranks = 2;
  }
  CALL(j, lm_mesh_create(&m, (int)MPI_Comm_c2f(j->parent), 1, ms, &cfg));
  int member = 0;
  CALL(j, lm_mesh_is_member(m, &member));
  if (!member) goto out;
  double *full = malloc(sizeof(double) * (size_t)n), *got = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) full[i] = 1000.0 * j->index + (double)i;
  DLTensor g = {full, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0};
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE,
                 psum = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  for (int round = 0; round < ROUNDS; ++round) {
    CALL(j, lm_dist_tensor_from_global(&t, m, &g, &s0, -1));
    CALL(j, lm_dist_tensor_reshard(&r, t, NULL, &rep));
    CALL(j, lm_dist_tensor_reshard(&back, r, NULL, &s0));
    DLTensor v;
    CALL(j, lm_dist_tensor_local(r, &v));
    if (memcmp(v.data, full, sizeof(double) * (size_t)n) != 0) note(j, "S(0) -> R", LM_SUCCESS);
    CALL(j, lm_dist_tensor_gather(back, -1, &(DLTensor){got, LM_CPU, 1, LM_FLOAT64, &n, NULL, 0}));
    if (memcmp(got, full, sizeof(double) * (size_t)n) != 0) note(j, "R -> S(0)", LM_SUCCESS);
    /* Partial(sum) of the full tensor on every member: R holds (members) x full. */
    CALL(j, lm_dist_tensor_from_local(&p, m, &g, &psum, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_COPY));
    CALL(j, lm_dist_tensor_reshard(&pr, p, NULL, &rep));
    CALL(j, lm_dist_tensor_local(pr, &v));
    for (int64_t i = 0; i < n; ++i)
      if (((double *)v.data)[i] != full[i] * (double)ms[0]) {
        note(j, "P(sum) -> R", LM_SUCCESS);
        break;
      }
    lm_dist_tensor_destroy(&t);
    lm_dist_tensor_destroy(&r);
    lm_dist_tensor_destroy(&back);
    lm_dist_tensor_destroy(&p);
    lm_dist_tensor_destroy(&pr);
  }
  free(full);
  free(got);
out:
  lm_dist_tensor_destroy(&t);
  lm_dist_tensor_destroy(&r);
  lm_dist_tensor_destroy(&back);
  lm_dist_tensor_destroy(&p);
  lm_dist_tensor_destroy(&pr);
  lm_mesh_destroy(&m);
  return NULL;
}

static void run_threads(int nthreads, int pairs) {
  struct job jobs[4];
  pthread_t tid[4];
  for (int k = 0; k < nthreads; ++k) { /* one parent per thread, made in order */
    memset(&jobs[k], 0, sizeof jobs[k]);
    MPI_Comm_dup(MPI_COMM_WORLD, &jobs[k].parent);
    jobs[k].index = k;
    jobs[k].pairs = pairs;
  }
  for (int k = 0; k < nthreads; ++k) pthread_create(&tid[k], NULL, run, &jobs[k]);
  int failures = 0;
  for (int k = 0; k < nthreads; ++k) {
    pthread_join(tid[k], NULL);
    if (jobs[k].failures) fprintf(stderr, "rank %d: %s\n", ME, jobs[k].why);
    failures += jobs[k].failures;
    MPI_Comm_free(&jobs[k].parent);
  }
  LM_ASSERT_ALL(failures == 0);
}

static void test_two_threads_same_set(void **state) { (void)state; run_threads(2, 0); }
static void test_four_threads_same_set(void **state) { (void)state; run_threads(4, 0); }
static void test_threads_different_sets(void **state) {
  (void)state;
  if (NP >= 3) run_threads(NP < 4 ? NP : 4, 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_two_threads_same_set),
    cmocka_unit_test(test_four_threads_same_set),
    cmocka_unit_test(test_threads_different_sets),
};

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    char why[96];
    snprintf(why, sizeof why, "this MPI provides thread level %d, not MPI_THREAD_MULTIPLE", provided);
    lm_test_skip_program(why);
  }
  lm_test_init(&argc, &argv);
  return lm_test_run(tests, sizeof tests / sizeof tests[0], "test_threads");
}
