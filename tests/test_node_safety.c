/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_node_safety: what the node-local machinery (docs/DESIGN.md, "Node-local machinery, by
 * role") costs and exposes a process, seen from outside through /proc, with the path on (every
 * rank of this job shares one node).
 *  - fork: a child reads tensors the library allocated in the parent (large ones live in the
 *    shared arena), with the parent's values; its writes stay in the child; destroying them in the
 *    child gives nothing back that the parent holds; the parent's tensors are unchanged after.
 *  - address space: VmSize grows by far less over reshards of a few MiB at every rank count than
 *    mapping every peer's whole arena cost (about 1 TiB per process at 4 ranks before); the
 *    library's mappings of peers' arenas stay within LM_NODE_PEER_MAP_BYTES, and exist (the
 *    path is on; tests/script_node_local.sh also runs this under RLIMIT_AS and seccomp).
 *  - privilege: a peer's arena is mapped here read-only, but for the agreement board's slots (a
 *    few pages in rank 0's arena), and only in windows, never whole.
 * The arena's memfd is named "localmap-arena.<pid>" (/proc/<pid>/maps shows whose it is).
 */
// lm-test-np: 1 2 4
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lm_test.h"

#define NP lm_test_size()
#define ME lm_test_rank()

static double value(int64_t i, int round) { return (double)(i * 3 + round) + 0.25; }

/* A [n] float64 tensor sharded on dim 0 holding value(i, round), and its replica (a reshard
 * output the library allocated, written by the peers' copies). */
static void make_pair(lm_mesh_t m, int64_t n, int round, lm_dist_tensor_t *s, lm_dist_tensor_t *r) {
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), rep = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {n}, off[1], ls[1];
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(s, m, 1, g, LM_FLOAT64, LM_CPU, &s0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(*s, &v));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_offset(*s, off, 1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local_shape(*s, ls, 1));
  for (int64_t i = 0; i < ls[0]; ++i) ((double *)v.data)[i] = value(off[0] + i, round);
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(r, *s, NULL, &rep));
}

/* Whether t's local data holds value(first + i, round) for every i. */
static int holds(lm_dist_tensor_t t, int64_t first, int round) {
  DLTensor v;
  int64_t ls[1] = {0};
  if (lm_dist_tensor_local(t, &v) != LM_SUCCESS || lm_dist_tensor_local_shape(t, ls, 1))
    return 0;
  for (int64_t i = 0; i < ls[0]; ++i)
    if (((double *)v.data)[i] != value(first + i, round)) return 0;
  return 1;
}

static int64_t local_first(lm_dist_tensor_t t) {
  int64_t off[1] = {0};
  return lm_dist_tensor_local_offset(t, off, 1) == LM_SUCCESS ? off[0] : -1;
}

/* The child: reads, writes, destroys, allocates; exit status bits say what went wrong. */
static int child_work(lm_mesh_t m, lm_dist_tensor_t s, lm_dist_tensor_t r, int64_t n) {
  int bad = 0;
  if (!holds(s, local_first(s), 0)) bad |= 1;  /* the parent's own shard */
  if (!holds(r, 0, 0)) bad |= 2;               /* written by the peers' copies */
  DLTensor v;
  if (lm_dist_tensor_local(r, &v) == LM_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) ((double *)v.data)[i] = value(i, 7);
    if (!holds(r, 0, 7)) bad |= 4;             /* the child sees its own writes */
  }
  lm_dist_tensor_destroy(&r);                  /* gives nothing of the parent's back */
  lm_placement_t rep = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {n};
  lm_dist_tensor_t z = NULL;
  if (lm_dist_tensor_zeros(&z, m, 1, g, LM_FLOAT64, LM_CPU, &rep) != LM_SUCCESS) {
    bad |= 8;
  } else if (lm_dist_tensor_local(z, &v) == LM_SUCCESS) {
    for (int64_t i = 0; i < n; ++i)
      if (((double *)v.data)[i] != 0) bad |= 16;
    for (int64_t i = 0; i < n; ++i) ((double *)v.data)[i] = -1;
  }
  return bad;
}

static void test_fork_child_reads_parent_tensors(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  const int64_t n = (int64_t)NP << 16; /* 512 KiB per rank: in the arena when NP > 1 */
  lm_dist_tensor_t s = NULL, r = NULL;
  make_pair(m, n, 0, &s, &r);
  fflush(NULL);
  pid_t c = fork();
  if (c == 0) { /* CMocka's handlers would report (and abort the job) from the child */
    signal(SIGSEGV, SIG_DFL), signal(SIGBUS, SIG_DFL), signal(SIGABRT, SIG_DFL);
    _exit(child_work(m, s, r, n));
  }
  int st = -1, ok = c > 0 && waitpid(c, &st, 0) == c;
  if (!ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    lm_test__diag("rank %d: fork child: %s %d (1 shard, 2 replica, 4 own writes, 8 alloc, 16 zeros)\n",
                  ME, ok && WIFSIGNALED(st) ? "killed by signal" : "exit status",
                  ok && WIFSIGNALED(st) ? WTERMSIG(st) : ok ? WEXITSTATUS(st) : -1);
    ok = 0;
  }
  LM_ASSERT_ALL(ok);
  /* The parent's data is as it was, and the path still works after the fork. */
  LM_ASSERT_ALL(holds(s, local_first(s), 0) && holds(r, 0, 0));
  lm_dist_tensor_t s2 = NULL, r2 = NULL;
  make_pair(m, n, 1, &s2, &r2);
  LM_ASSERT_ALL(holds(r2, 0, 1) && holds(r, 0, 0));
  lm_dist_tensor_destroy(&s2);
  lm_dist_tensor_destroy(&r2);
  lm_dist_tensor_destroy(&s);
  lm_dist_tensor_destroy(&r);
  lm_mesh_destroy(&m);
}

static int env_off(const char *name) {
  const char *v = getenv(name);
  return v && (v[0] == '0' || v[0] == 'n' || v[0] == 'f');
}

/* Whether reshards here copy through windows of peers' arenas. */
static int path_expected(void) {
  int peer = 0; /* another rank on this rank's node (simulated nodes: LM_TEST_NODES) */
  for (int r = 0; r < NP; ++r) peer |= r != ME && lm_test_node_of(r) == lm_test_node_of(ME);
  return peer && !env_off("LM_NODE_LOCAL") && !env_off("LM_NODE_ARENA_BYTES");
}

/* /proc/self/status's VmSize in bytes. */
static unsigned long long vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb << 10;
}

/* Bytes of this process's mappings of other processes' arenas: all, and writable ones. */
static void peer_mappings(unsigned long long *all, unsigned long long *writable) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  *all = *writable = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long long a, b;
    char perms[8];
    const char *name = strstr(line, "localmap-arena.");
    if (!name || sscanf(line, "%llx-%llx %7s", &a, &b, perms) != 3) continue;
    if (atoi(name + strlen("localmap-arena.")) == (int)getpid()) continue; /* our own */
    *all += b - a;
    if (perms[1] == 'w') *writable += b - a;
  }
  if (f) fclose(f);
}

static void test_address_space_and_privilege(void **state) {
  (void)state;
  const unsigned long long vm0 = vm_size(); /* before the first mesh (ASan's shadow is in it) */
  lm_mesh_t m = lm_test_world_mesh();
  for (int round = 0; round < 4; ++round) {
    lm_dist_tensor_t s = NULL, r = NULL;
    make_pair(m, (int64_t)NP << (17 + round % 2), round, &s, &r); /* 1-2 MiB per rank */
    LM_ASSERT_ALL(holds(r, 0, round));
    lm_dist_tensor_destroy(&s);
    lm_dist_tensor_destroy(&r);
  }
  unsigned long long vm = vm_size(), all = 0, wr = 0;
  peer_mappings(&all, &wr);
  lm_test__diag("rank %d of %d: VmSize %.2f GiB (%.2f before the first mesh); peers' arenas "
                "mapped here: %llu KiB, %llu KiB writable\n", ME, NP, (double)vm / (1 << 30),
                (double)vm0 / (1 << 30), all >> 10, wr >> 10);
  /* Before: every peer's whole arena (256 GiB each) was mapped read-write. */
  int ok = vm - vm0 < (8ull << 30);
  ok &= all <= (4ull << 30);  /* LM_NODE_PEER_MAP_BYTES' default, plus the board's pages */
  ok &= wr <= (64ull << 10);  /* the board's slots only */
  ok &= !path_expected() || all > 0; /* and the path is on: receivers read peers' buffers */
  if (!ok) lm_test__diag("rank %d: too much mapped\n", ME);
  LM_ASSERT_ALL(ok);
  lm_mesh_destroy(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_address_space_and_privilege), /* first: VmSize before any mesh */
    cmocka_unit_test(test_fork_child_reads_parent_tensors),
};

LM_TEST_MAIN(tests)
