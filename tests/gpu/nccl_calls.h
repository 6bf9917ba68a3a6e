/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nccl_calls.h: the NCCL calls the library makes in a device test's process, counted by the test
 * itself. The library reaches NCCL through its device component (dlopen'ed, RTLD_LOCAL); device
 * tests link NCCL and export their symbols (-rdynamic, the Makefile), so the definitions below
 * come first when the component's calls are bound, count, and forward to NCCL's own (the real
 * one or the simulator's) found with RTLD_NEXT. Include this in ONE program; define _GNU_SOURCE
 * before any include (RTLD_NEXT).
 *
 *   lm_nccl_snapshot(&s)      the counts so far; lm_nccl_since(&a, &b, &d) the difference;
 *   d.calls[k], d.bytes[k]    per kind: LM_NC_SEND, LM_NC_RECV (bytes: count * type size, as
 *                             given), LM_NC_ALLGATHER, LM_NC_REDUCESCATTER, LM_NC_ALLREDUCE;
 *   lm_nccl_collectives(&d)   collective calls in d (ncclAlltoAll included where the simulator
 *                             tells: see below);
 *   lm_nccl_has_alltoall()    the NCCL of this process has ncclAlltoAll (NCCL 2.28 on; the
 *                             simulator has it). It is not interposed (an NCCL without it would
 *                             then seem to have it): where the simulator runs, its own record
 *                             (cudasimNcclCalls) counts it, and lm_nccl_check_sim compares every
 *                             kind the test counted with that record, a second witness.
 * Signatures are NCCL's ABI with plain C types (datatype: int, comm and stream: void *), so that
 * the test needs no nccl.h.
 */
#ifndef LM_NCCL_CALLS_H_
#define LM_NCCL_CALLS_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CUDASIM_VERSION
#include "cudasim.h"
#endif

enum { LM_NC_SEND, LM_NC_RECV, LM_NC_ALLGATHER, LM_NC_REDUCESCATTER, LM_NC_ALLREDUCE,
       LM_NC_ALLTOALL, LM_NC_KINDS };
static LM_TEST_UNUSED const char *const lm_nc_names[LM_NC_KINDS] = {"ncclSend", "ncclRecv", "ncclAllGather",
                                                     "ncclReduceScatter", "ncclAllReduce",
                                                     "ncclAlltoAll"};
typedef struct {
  long calls[LM_NC_KINDS];
  long long bytes[LM_NC_KINDS];
} lm_nccl_counts;
static lm_nccl_counts lm_nc_total;

/* NCCL's type sizes (ncclInt8 .. ncclBfloat16). */
static LM_TEST_UNUSED size_t lm_nc_type_size(int t) {
  static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return t >= 0 && t < 10 ? sz[t] : 0;
}

static LM_TEST_UNUSED void *lm_nc_next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "nccl_calls.h: no %s after the test's own (is NCCL linked?)\n", name);
    abort();
  }
  return f;
}

static LM_TEST_UNUSED void lm_nc_count(int kind, size_t count, int type) {
  ++lm_nc_total.calls[kind];
  lm_nc_total.bytes[kind] += (long long)(count * lm_nc_type_size(type));
}

typedef int (*lm_nc_p2p_fn)(const void *, size_t, int, int, void *, void *);
typedef int (*lm_nc_gather_fn)(const void *, void *, size_t, int, void *, void *);
typedef int (*lm_nc_reduce_fn)(const void *, void *, size_t, int, int, void *, void *);

int ncclSend(const void *buf, size_t count, int type, int peer, void *comm, void *stream);
int ncclSend(const void *buf, size_t count, int type, int peer, void *comm, void *stream) {
  static lm_nc_p2p_fn next;
  if (!next) *(void **)&next = lm_nc_next("ncclSend");
  lm_nc_count(LM_NC_SEND, count, type);
  return next(buf, count, type, peer, comm, stream);
}
int ncclRecv(void *buf, size_t count, int type, int peer, void *comm, void *stream);
int ncclRecv(void *buf, size_t count, int type, int peer, void *comm, void *stream) {
  static lm_nc_p2p_fn next;
  if (!next) *(void **)&next = lm_nc_next("ncclRecv");
  lm_nc_count(LM_NC_RECV, count, type);
  return next(buf, count, type, peer, comm, stream);
}
int ncclAllGather(const void *s, void *r, size_t count, int type, void *comm, void *stream);
int ncclAllGather(const void *s, void *r, size_t count, int type, void *comm, void *stream) {
  static lm_nc_gather_fn next;
  if (!next) *(void **)&next = lm_nc_next("ncclAllGather");
  lm_nc_count(LM_NC_ALLGATHER, count, type);
  return next(s, r, count, type, comm, stream);
}
int ncclReduceScatter(const void *s, void *r, size_t count, int type, int op, void *comm,
                      void *stream);
int ncclReduceScatter(const void *s, void *r, size_t count, int type, int op, void *comm,
                      void *stream) {
  static lm_nc_reduce_fn next;
  if (!next) *(void **)&next = lm_nc_next("ncclReduceScatter");
  lm_nc_count(LM_NC_REDUCESCATTER, count, type);
  return next(s, r, count, type, op, comm, stream);
}
int ncclAllReduce(const void *s, void *r, size_t count, int type, int op, void *comm, void *stream);
int ncclAllReduce(const void *s, void *r, size_t count, int type, int op, void *comm, void *stream) {
  static lm_nc_reduce_fn next;
  if (!next) *(void **)&next = lm_nc_next("ncclAllReduce");
  lm_nc_count(LM_NC_ALLREDUCE, count, type);
  return next(s, r, count, type, op, comm, stream);
}

static LM_TEST_UNUSED void lm_nccl_snapshot(lm_nccl_counts *s) {
  *s = lm_nc_total;
#ifdef CUDASIM_VERSION
  s->calls[LM_NC_ALLTOALL] = (long)cudasimNcclCalls("ncclAlltoAll").calls;
  s->bytes[LM_NC_ALLTOALL] = (long long)cudasimNcclCalls("ncclAlltoAll").bytes;
#endif
}
static LM_TEST_UNUSED void lm_nccl_since(const lm_nccl_counts *a, const lm_nccl_counts *b, lm_nccl_counts *d) {
  for (int k = 0; k < LM_NC_KINDS; ++k) {
    d->calls[k] = b->calls[k] - a->calls[k];
    d->bytes[k] = b->bytes[k] - a->bytes[k];
  }
}
static LM_TEST_UNUSED long lm_nccl_collectives(const lm_nccl_counts *d) {
  return d->calls[LM_NC_ALLGATHER] + d->calls[LM_NC_REDUCESCATTER] + d->calls[LM_NC_ALLREDUCE] +
         d->calls[LM_NC_ALLTOALL];
}
static LM_TEST_UNUSED int lm_nccl_has_alltoall(void) { return dlsym(RTLD_DEFAULT, "ncclAlltoAll") != NULL; }

/* Under the simulator: every kind the test counted equals the simulator's own record of the
 * process (calls; bytes of sends and receives). 1 elsewhere. */
static LM_TEST_UNUSED int lm_nccl_check_sim(void) {
#ifdef CUDASIM_VERSION
  int ok = 1;
  for (int k = 0; k < LM_NC_ALLTOALL; ++k) {
    cudasimNcclCount n = cudasimNcclCalls(lm_nc_names[k]);
    int same = (long)n.calls == lm_nc_total.calls[k] &&
               (k > LM_NC_RECV || (long long)n.bytes == lm_nc_total.bytes[k]);
    if (!same)
      fprintf(stderr, "nccl_calls.h: %s: the test counted %ld calls, %lld bytes; the simulator "
              "%llu, %llu\n", lm_nc_names[k], lm_nc_total.calls[k], lm_nc_total.bytes[k],
              n.calls, n.bytes);
    ok &= same;
  }
  return ok;
#else
  return 1;
#endif
}

#endif /* LM_NCCL_CALLS_H_ */
