// SPDX-License-Identifier: BSD-3-Clause
// A standalone probe (no localmap): how fast one process copies bytes out of another's memory,
// three ways. Linux only. Build and run (docs/PERFORMANCE.md, "Where the defaults come from"):
//   make build/bench/shm_copy && for m in 1 4 16 64 128; do build/bench/shm_copy $m; done
#define _GNU_SOURCE
#include <sys/uio.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/mman.h>
/* Copies n MiB (argv[1], default 64) from a peer process's buffer into a local one, three ways, warm pages, best of 7:
 * memcpy of two local buffers (the floor), process_vm_readv (the node-local path today), and
 * memcpy from the peer's memfd-backed buffer mapped here through /proc/<pid>/fd/<fd> (what a
 * library-allocated shared segment would give). */
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n = (size_t)((argc > 1 ? atof(argv[1]) : 64) * 1048576.0);
  if (n == 0) return 1;
  int fd = memfd_create("lm", 0); if (ftruncate(fd, (off_t)n)) return 1;
  char *src = mmap(NULL, n, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0); memset(src, 3, n);
  int p[2], q[2]; if (pipe(p) || pipe(q)) return 1;
  pid_t parent = getpid();
  pid_t c = fork();
  if (c == 0) {
    char *dst = malloc(n), *loc = malloc(n); memset(dst, 0, n); memset(loc, 5, n);
    void *addr; if (read(p[0], &addr, sizeof addr) != sizeof addr) return 1;
    char path[64]; snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)parent, fd);
    double t0 = now();
    int pfd = open(path, O_RDWR); char *peer = mmap(NULL, n, PROT_READ|PROT_WRITE, MAP_SHARED, pfd, 0);
    close(pfd);
    double tmap = now() - t0;
    double best[3] = {1e9, 1e9, 1e9};
    for (int it = 0; it < 7; ++it) {
      t0 = now(); memcpy(dst, loc, n); double a = now() - t0;
      t0 = now(); struct iovec l = {dst, n}, r = {addr, n}; if (process_vm_readv(parent, &l, 1, &r, 1, 0) != (ssize_t)n) return 2; double b = now() - t0;
      t0 = now(); memcpy(dst, peer, n); double d = now() - t0;
      if (a < best[0]) best[0] = a;
      if (b < best[1]) best[1] = b;
      if (d < best[2]) best[2] = d;
    }
    printf("%8.2f MiB: memcpy local %6.2f GB/s | process_vm_readv %6.2f GB/s (%.2fx memcpy) | memcpy from mapped peer memfd %6.2f GB/s (%.2fx) | first mmap+fault-in %.3f ms\n",
           n / 1048576.0, n / best[0] / 1e9, n / best[1] / 1e9, best[1] / best[0], n / best[2] / 1e9, best[2] / best[0], tmap * 1e3);
    char b = 1; if (write(q[1], &b, 1) != 1) return 1; return 0;
  }
  void *a = src; if (write(p[1], &a, sizeof a) != sizeof a) return 1;
  char b; if (read(q[0], &b, 1) != 1) return 1; waitpid(c, 0, 0); return 0;
}
