/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim self-tests: a tiny harness. Every case runs in a forked child, so each starts with a
 * fresh simulator (the parent never calls it: fork before any CUDA call), and a case may kill
 * its device context (sticky faults) or crash on purpose without harming the others.
 *   SIM_CHECK(cond)            fails the case (exit 1) with file:line
 *   SIM_CUDA(call)             SIM_CHECK(call == cudaSuccess), printing the error
 *   sim_expect_segv(lo, bytes) the next SIGSEGV/SIGBUS must hit [lo, lo+bytes): the child then
 *                              exits 0 (the fault is what the case checks)
 *   sim_main(cases, n, argc, argv)  runs the cases (argv[1..]: names to run), prints
 *                              PASS/FAIL lines and "<N> passed, <N> failed", returns failures */
#ifndef CUDASIM_SIM_TEST_H_
#define CUDASIM_SIM_TEST_H_

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

typedef struct {
  const char *name;
  void (*fn)(void);
} sim_case;

#define SIM_CHECK(cond)                                                           \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      fflush(stderr);                                                             \
      _exit(1);                                                                   \
    }                                                                             \
  } while (0)

#define SIM_CUDA(call)                                                                   \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
      _exit(1);                                                                          \
    }                                                                                    \
  } while (0)

static uintptr_t sim_segv_lo, sim_segv_hi;

static void sim_segv_handler(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  uintptr_t a = (uintptr_t)si->si_addr;
  static const char ok[] = "fault at the expected address: caught\n";
  static const char bad[] = "fault at an unexpected address\n";
  int hit = a >= sim_segv_lo && a < sim_segv_hi;
  ssize_t w = write(2, hit ? ok : bad, hit ? sizeof ok - 1 : sizeof bad - 1);
  (void)w;
  _exit(hit ? 0 : 3);
}

static inline void sim_expect_segv(const void *lo, size_t bytes) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = sim_segv_handler;
  sa.sa_flags = SA_SIGINFO;
  sim_segv_lo = (uintptr_t)lo;
  sim_segv_hi = (uintptr_t)lo + bytes;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
}

static inline double sim_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int sim_selected(const char *name, int argc, char **argv) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

static inline int sim_main(const sim_case *cases, int n, int argc, char **argv) {
  int passed = 0, failed = 0;
  for (int i = 0; i < n; ++i) {
    if (!sim_selected(cases[i].name, argc, argv)) continue;
    fflush(stdout);
    double t0 = sim_now();
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120); /* a hang fails the case, never the run */
      cases[i].fn();
      fflush(stdout);
      fflush(stderr);
      exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    double secs = sim_now() - t0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      printf("PASS %s (%.2f s)\n", cases[i].name, secs);
      ++passed;
    } else {
      if (WIFSIGNALED(status))
        printf("FAIL %s: killed by signal %d (%.2f s)\n", cases[i].name, WTERMSIG(status), secs);
      else
        printf("FAIL %s: exit status %d (%.2f s)\n", cases[i].name, WEXITSTATUS(status), secs);
      ++failed;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

#endif /* CUDASIM_SIM_TEST_H_ */
