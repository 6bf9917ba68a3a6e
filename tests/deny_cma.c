/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * deny_cma PROGRAM [ARGS...]: runs PROGRAM with process_vm_readv and process_vm_writev refused
 * (EPERM), as a restricted host refuses them between sibling ranks (Yama ptrace_scope >= 1,
 * Ubuntu's default, or a container's seccomp profile), while opening /proc/<pid>/fd/<fd> still
 * works (a ptrace READ-mode check). A seccomp filter (PR_SET_SECCOMP, SECCOMP_MODE_FILTER) is
 * installed, then PROGRAM is exec'd with it: use it as the rank program of a job,
 *   tools/lm-mpirun 2 build/tests/deny_cma build/tests/test_agree_board
 * MPI's own single-copy mechanisms are turned off too, as lm-mpirun does on such a host (Open
 * MPI's vader CMA; UCX's cma transport), so that only localmap meets the refusal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define DENY_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define DENY_ARCH AUDIT_ARCH_AARCH64
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DENY_ARCH AUDIT_ARCH_PPC64LE
#else
#error "deny_cma: add this architecture's AUDIT_ARCH_*"
#endif

static int install_filter(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, DENY_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* another ABI: not ours to judge */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const char *tls = getenv("UCX_TLS");
  if (!tls || strcmp(tls, "self,sm") == 0) setenv("UCX_TLS", "self,posix,sysv", 1);
  if (install_filter() != 0) {
    fprintf(stderr, "deny_cma: cannot install the seccomp filter: %s\n", strerror(errno));
    return 77; /* the tests' SKIP */
  }
  execvp(argv[1], argv + 1);
  fprintf(stderr, "deny_cma: %s: %s\n", argv[1], strerror(errno));
  return 127;
}
