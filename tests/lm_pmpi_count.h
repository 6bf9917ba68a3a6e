/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lm_pmpi_count.h: counts the MPI objects a test program creates and frees, through the MPI
 * profiling interface, so that a destroy that leaks one fails a test (tests/README.md, "MPI
 * objects"). Include it in ONE test file, after lm_test.h; it defines MPI_* functions that count
 * and call PMPI_*: the library's calls resolve to them (the program exports them).
 *
 *   communicators  MPI_Comm_dup / dup_with_info / idup / split / split_type / create /
 *                  create_group, MPI_Intercomm_create / merge, MPI_Cart_create  vs  MPI_Comm_free
 *   groups         MPI_Comm_group, MPI_Group_incl / excl / union / intersection / difference
 *                  vs  MPI_Group_free
 *   datatypes      MPI_Type_contiguous / vector / create_hvector / indexed / create_hindexed /
 *                  create_indexed_block / create_struct / create_subarray / create_resized /
 *                  dup  vs  MPI_Type_free
 *   requests       MPI_Isend / Irecv / Issend / Iallreduce / Iallgather / Ialltoall /
 *                  Ireduce_scatter_block / Ibarrier / Ibcast,
 *                  MPI_Comm_idup  vs  completion by MPI_Test / Testall / Testany / Testsome /
 *                  Wait / Waitall / Waitany / Waitsome, or MPI_Request_free
 *   keyvals        MPI_Comm_create_keyval  vs  MPI_Comm_free_keyval
 *   ops, infos, errhandlers   MPI_Op_create, MPI_Info_create / dup, MPI_Comm_get_info,
 *                  MPI_Comm_create_errhandler / get_errhandler  vs  their frees
 *
 * localmap keeps some objects for the life of the process on purpose (the agreement communicator
 * of each set of processes, made on its first use and freed at MPI_Finalize; the keyvals of its
 * attributes), so absolute counts mean nothing: compare the counts around a create/destroy
 * cycle that already ran once (lm_pmpi_cycle_check). The counts are this rank's; the check agrees.
 * A program including this file cannot define these MPI functions itself.
 */
#ifndef LM_PMPI_COUNT_H_
#define LM_PMPI_COUNT_H_

#include <mpi.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  long comms, groups, types, requests, keyvals, ops, infos, errhandlers;
} lm_pmpi_counts_t;

static lm_pmpi_counts_t lm_pmpi__live; /* created minus freed, per kind, on this rank */

static LM_TEST_UNUSED lm_pmpi_counts_t lm_pmpi_counts(void) { return lm_pmpi__live; }

/* "comms +1 types -2" for the kinds whose counts differ (b - a); "" when none does. */
static LM_TEST_UNUSED int lm_pmpi_diff(const lm_pmpi_counts_t *a, const lm_pmpi_counts_t *b,
                                       char *buf, size_t size) {
  const long d[8] = {b->comms - a->comms,       b->groups - a->groups, b->types - a->types,
                     b->requests - a->requests, b->keyvals - a->keyvals, b->ops - a->ops,
                     b->infos - a->infos,       b->errhandlers - a->errhandlers};
  static const char *const name[8] = {"communicators", "groups", "datatypes", "requests",
                                      "keyvals",       "ops",    "infos",     "errhandlers"};
  size_t used = 0;
  int any = 0;
  buf[0] = '\0';
  for (int i = 0; i < 8; ++i)
    if (d[i] != 0) {
      int w = snprintf(buf + used, size > used ? size - used : 0, "%s%s %+ld", any ? ", " : "",
                       name[i], d[i]);
      if (w > 0) used += (size_t)w;
      any = 1;
    }
  return any;
}

/* Collective over MPI_COMM_WORLD: runs cycle(arg) `warm` times (objects localmap keeps for the
 * life of the process are made there), then `reps` more times, and fails on every rank when
 * those left any MPI object behind on any rank. */
static LM_TEST_UNUSED void lm_pmpi__cycle_check(void (*cycle)(void *), void *arg, int warm,
                                                int reps, const char *what, const char *file,
                                                int line) {
  for (int i = 0; i < warm; ++i) cycle(arg);
  lm_pmpi_counts_t before = lm_pmpi_counts();
  for (int i = 0; i < reps; ++i) cycle(arg);
  lm_pmpi_counts_t after = lm_pmpi_counts();
  char diff[256];
  int leaked = lm_pmpi_diff(&before, &after, diff, sizeof diff);
  if (leaked)
    lm_test__diag("rank %d/%d: %s: %d create/destroy cycles left MPI objects behind: %s (%s:%d)\n",
                  lm_test_rank(), lm_test_size(), what, reps, diff, file, line);
  lm_test__assert_all(!leaked, what, file, line);
}
#define lm_pmpi_cycle_check(cycle, arg, what) \
  lm_pmpi__cycle_check((cycle), (arg), 1, 2, (what), __FILE__, __LINE__)

/* Non-null entries of a request array (completion turns non-persistent requests to NULL). */
static LM_TEST_UNUSED long lm_pmpi__live_reqs(int n, const MPI_Request *r) {
  long k = 0;
  for (int i = 0; i < n; ++i) k += r[i] != MPI_REQUEST_NULL;
  return k;
}

/* ------------------------------------------------------------------ communicators */
#define LM_PMPI__NEWCOMM(rc, c) \
  do {                          \
    if ((rc) == MPI_SUCCESS && (c) != NULL && *(c) != MPI_COMM_NULL) ++lm_pmpi__live.comms; \
  } while (0)
int MPI_Comm_dup(MPI_Comm c, MPI_Comm *n) {
  int rc = PMPI_Comm_dup(c, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_dup_with_info(MPI_Comm c, MPI_Info i, MPI_Comm *n) {
  int rc = PMPI_Comm_dup_with_info(c, i, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_idup(MPI_Comm c, MPI_Comm *n, MPI_Request *q) {
  int rc = PMPI_Comm_idup(c, n, q);
  LM_PMPI__NEWCOMM(rc, n);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.requests;
  return rc;
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *n) {
  int rc = PMPI_Comm_split(c, color, key, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info i, MPI_Comm *n) {
  int rc = PMPI_Comm_split_type(c, type, key, i, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_create(MPI_Comm c, MPI_Group g, MPI_Comm *n) {
  int rc = PMPI_Comm_create(c, g, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm *n) {
  int rc = PMPI_Comm_create_group(c, g, tag, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Intercomm_create(MPI_Comm l, int ll, MPI_Comm p, int rl, int tag, MPI_Comm *n) {
  int rc = PMPI_Intercomm_create(l, ll, p, rl, tag, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Intercomm_merge(MPI_Comm c, int high, MPI_Comm *n) {
  int rc = PMPI_Intercomm_merge(c, high, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Cart_create(MPI_Comm c, int nd, const int dims[], const int periods[], int reorder,
                    MPI_Comm *n) {
  int rc = PMPI_Cart_create(c, nd, dims, periods, reorder, n);
  LM_PMPI__NEWCOMM(rc, n);
  return rc;
}
int MPI_Comm_free(MPI_Comm *c) {
  int had = c != NULL && *c != MPI_COMM_NULL;
  int rc = PMPI_Comm_free(c);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.comms;
  return rc;
}

/* ------------------------------------------------------------------ groups */
#define LM_PMPI__NEWGROUP(rc, g) \
  do {                           \
    if ((rc) == MPI_SUCCESS && *(g) != MPI_GROUP_NULL && *(g) != MPI_GROUP_EMPTY) ++lm_pmpi__live.groups; \
  } while (0)
int MPI_Comm_group(MPI_Comm c, MPI_Group *g) {
  int rc = PMPI_Comm_group(c, g);
  LM_PMPI__NEWGROUP(rc, g);
  return rc;
}
int MPI_Group_incl(MPI_Group g, int n, const int r[], MPI_Group *o) {
  int rc = PMPI_Group_incl(g, n, r, o);
  LM_PMPI__NEWGROUP(rc, o);
  return rc;
}
int MPI_Group_excl(MPI_Group g, int n, const int r[], MPI_Group *o) {
  int rc = PMPI_Group_excl(g, n, r, o);
  LM_PMPI__NEWGROUP(rc, o);
  return rc;
}
int MPI_Group_union(MPI_Group a, MPI_Group b, MPI_Group *o) {
  int rc = PMPI_Group_union(a, b, o);
  LM_PMPI__NEWGROUP(rc, o);
  return rc;
}
int MPI_Group_intersection(MPI_Group a, MPI_Group b, MPI_Group *o) {
  int rc = PMPI_Group_intersection(a, b, o);
  LM_PMPI__NEWGROUP(rc, o);
  return rc;
}
int MPI_Group_difference(MPI_Group a, MPI_Group b, MPI_Group *o) {
  int rc = PMPI_Group_difference(a, b, o);
  LM_PMPI__NEWGROUP(rc, o);
  return rc;
}
int MPI_Group_free(MPI_Group *g) {
  int had = g != NULL && *g != MPI_GROUP_NULL && *g != MPI_GROUP_EMPTY;
  int rc = PMPI_Group_free(g);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.groups;
  return rc;
}

/* ------------------------------------------------------------------ datatypes */
#define LM_PMPI__NEWTYPE(rc) \
  do {                       \
    if ((rc) == MPI_SUCCESS) ++lm_pmpi__live.types; \
  } while (0)
int MPI_Type_contiguous(int n, MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_contiguous(n, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_vector(int n, int b, int s, MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_vector(n, b, s, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_hvector(int n, int b, MPI_Aint s, MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_create_hvector(n, b, s, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_indexed(int n, const int b[], const int d[], MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_indexed(n, b, d, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_hindexed(int n, const int b[], const MPI_Aint d[], MPI_Datatype t,
                             MPI_Datatype *o) {
  int rc = PMPI_Type_create_hindexed(n, b, d, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_indexed_block(int n, int b, const int d[], MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_create_indexed_block(n, b, d, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_struct(int n, const int b[], const MPI_Aint d[], const MPI_Datatype t[],
                           MPI_Datatype *o) {
  int rc = PMPI_Type_create_struct(n, b, d, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_subarray(int nd, const int sizes[], const int subs[], const int starts[],
                             int order, MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_create_subarray(nd, sizes, subs, starts, order, t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_create_resized(MPI_Datatype t, MPI_Aint lb, MPI_Aint ext, MPI_Datatype *o) {
  int rc = PMPI_Type_create_resized(t, lb, ext, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_dup(MPI_Datatype t, MPI_Datatype *o) {
  int rc = PMPI_Type_dup(t, o);
  LM_PMPI__NEWTYPE(rc);
  return rc;
}
int MPI_Type_free(MPI_Datatype *t) {
  int had = t != NULL && *t != MPI_DATATYPE_NULL;
  int rc = PMPI_Type_free(t);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.types;
  return rc;
}

/* ------------------------------------------------------------------ requests */
#define LM_PMPI__NEWREQ(rc, q) \
  do {                         \
    if ((rc) == MPI_SUCCESS && *(q) != MPI_REQUEST_NULL) ++lm_pmpi__live.requests; \
  } while (0)
int MPI_Isend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Isend(b, n, t, d, tag, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Issend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Issend(b, n, t, d, tag, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Irecv(void *b, int n, MPI_Datatype t, int s, int tag, MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Irecv(b, n, t, s, tag, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q) {
  int rc = PMPI_Iallreduce(s, r, n, t, op, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op,
                              MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Ibarrier(c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *q) {
  int rc = PMPI_Ibcast(b, n, t, root, c, q);
  LM_PMPI__NEWREQ(rc, q);
  return rc;
}
int MPI_Request_free(MPI_Request *q) {
  int had = q != NULL && *q != MPI_REQUEST_NULL;
  int rc = PMPI_Request_free(q);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.requests;
  return rc;
}
int MPI_Test(MPI_Request *q, int *flag, MPI_Status *s) {
  long had = lm_pmpi__live_reqs(1, q);
  int rc = PMPI_Test(q, flag, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(1, q);
  return rc;
}
int MPI_Wait(MPI_Request *q, MPI_Status *s) {
  long had = lm_pmpi__live_reqs(1, q);
  int rc = PMPI_Wait(q, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(1, q);
  return rc;
}
int MPI_Testall(int n, MPI_Request q[], int *flag, MPI_Status s[]) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Testall(n, q, flag, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}
int MPI_Waitall(int n, MPI_Request q[], MPI_Status s[]) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Waitall(n, q, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}
int MPI_Testany(int n, MPI_Request q[], int *idx, int *flag, MPI_Status *s) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Testany(n, q, idx, flag, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}
int MPI_Waitany(int n, MPI_Request q[], int *idx, MPI_Status *s) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Waitany(n, q, idx, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}
int MPI_Testsome(int n, MPI_Request q[], int *out, int idx[], MPI_Status s[]) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Testsome(n, q, out, idx, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}
int MPI_Waitsome(int n, MPI_Request q[], int *out, int idx[], MPI_Status s[]) {
  long had = lm_pmpi__live_reqs(n, q);
  int rc = PMPI_Waitsome(n, q, out, idx, s);
  lm_pmpi__live.requests -= had - lm_pmpi__live_reqs(n, q);
  return rc;
}

/* ------------------------------------------------------------------ keyvals, ops, infos */
int MPI_Comm_create_keyval(MPI_Comm_copy_attr_function *cp, MPI_Comm_delete_attr_function *del,
                           int *k, void *extra) {
  int rc = PMPI_Comm_create_keyval(cp, del, k, extra);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.keyvals;
  return rc;
}
int MPI_Comm_free_keyval(int *k) {
  int had = k != NULL && *k != MPI_KEYVAL_INVALID;
  int rc = PMPI_Comm_free_keyval(k);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.keyvals;
  return rc;
}
int MPI_Op_create(MPI_User_function *f, int commute, MPI_Op *op) {
  int rc = PMPI_Op_create(f, commute, op);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.ops;
  return rc;
}
int MPI_Op_free(MPI_Op *op) {
  int had = op != NULL && *op != MPI_OP_NULL;
  int rc = PMPI_Op_free(op);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.ops;
  return rc;
}
int MPI_Info_create(MPI_Info *i) {
  int rc = PMPI_Info_create(i);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.infos;
  return rc;
}
int MPI_Info_dup(MPI_Info i, MPI_Info *o) {
  int rc = PMPI_Info_dup(i, o);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.infos;
  return rc;
}
int MPI_Info_free(MPI_Info *i) {
  int had = i != NULL && *i != MPI_INFO_NULL;
  int rc = PMPI_Info_free(i);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.infos;
  return rc;
}
int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function *f, MPI_Errhandler *e) {
  int rc = PMPI_Comm_create_errhandler(f, e);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.errhandlers;
  return rc;
}
int MPI_Comm_get_errhandler(MPI_Comm c, MPI_Errhandler *e) { /* a reference to free */
  int rc = PMPI_Comm_get_errhandler(c, e);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.errhandlers;
  return rc;
}
int MPI_Comm_get_info(MPI_Comm c, MPI_Info *i) { /* a new info object */
  int rc = PMPI_Comm_get_info(c, i);
  if (rc == MPI_SUCCESS) ++lm_pmpi__live.infos;
  return rc;
}
int MPI_Errhandler_free(MPI_Errhandler *e) {
  int had = e != NULL && *e != MPI_ERRHANDLER_NULL;
  int rc = PMPI_Errhandler_free(e);
  if (rc == MPI_SUCCESS && had) --lm_pmpi__live.errhandlers;
  return rc;
}

#endif /* LM_PMPI_COUNT_H_ */
