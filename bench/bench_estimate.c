/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench_estimate: the cost of asking what a layout change costs (issue 22, section 2), as an
 * auto-sharding search asks it thousands of times. Per transition on the world mesh (and a
 * [2, np/2] mesh when np is even and >= 4): lm_reshard_estimate (this rank, local), against
 * lm_reshard_plan_create + lm_reshard_plan_info + lm_reshard_plan_destroy. Microseconds per call,
 * median of 7 rounds of 2000 calls, max over ranks. One JSON line per transition.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "localmap.h"
#include "bench_util.h"

enum { CALLS = 2000, ROUNDS = 7 };
static int rank, size;


typedef struct {
  lm_mesh_t m;
  const lm_placement_t *src, *dst;
  int64_t shape[2];
} case_t;

static void estimate(const case_t *c) {
  lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
  OK(lm_reshard_estimate(c->m, c->src, NULL, c->dst, 2, c->shape, LM_FLOAT32, 0, &i));
}
static void via_plan(const case_t *c) {
  lm_reshard_plan_t p = NULL;
  lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
  OK(lm_reshard_plan_create(&p, c->m, c->src, NULL, c->dst, 2, c->shape, LM_FLOAT32));
  OK(lm_reshard_plan_info(p, 0, &i));
  OK(lm_reshard_plan_destroy(&p));
}

static double per_call_us(void (*fn)(const case_t *), const case_t *c) {
  double t[ROUNDS];
  for (int r = 0; r < ROUNDS; ++r) {
    double t0 = MPI_Wtime();
    for (int k = 0; k < CALLS; ++k) fn(c);
    double us = (MPI_Wtime() - t0) * 1e6 / CALLS;
    MPI_Allreduce(&us, &t[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  qsort(t, ROUNDS, sizeof(double), bench_cmp);
  return t[ROUNDS / 2];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int fcomm = (int)MPI_Comm_c2f(MPI_COMM_WORLD);
  const lm_placement_t S0 = LM_PLACEMENT_SHARD(0), S1 = LM_PLACEMENT_SHARD(1),
                       R = LM_PLACEMENT_REPLICATE, P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  lm_mesh_t m1 = NULL, m2 = NULL;
  int64_t s1[1] = {size}, s2[2] = {2, size / 2};
  OK(lm_mesh_create(&m1, fcomm, 1, s1, NULL));
  const int two_d = size % 2 == 0 && size >= 4;
  if (two_d) OK(lm_mesh_create(&m2, fcomm, 2, s2, NULL));
  struct {
    const char *name;
    int mdim;
    lm_placement_t src[2], dst[2];
  } cases[] = {
      {"S0->R", 1, {S0}, {R}},       {"S0->S1", 1, {S0}, {S1}},   {"P->S0", 1, {P}, {S0}},
      {"P->R", 1, {P}, {R}},         {"R->S1", 1, {R}, {S1}},     {"[S0,S1]->[R,S0]", 2, {S0, S1}, {R, S0}},
      {"[P,S0]->[S0,R]", 2, {P, S0}, {S0, R}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (cases[i].mdim == 2 && !two_d) continue;
    case_t c = {cases[i].mdim == 1 ? m1 : m2, cases[i].src, cases[i].dst, {4096, 1024}};
    const double e = per_call_us(estimate, &c), p = per_call_us(via_plan, &c);
    if (rank == 0)
      printf("{\"bench\": \"estimate\", \"case\": \"%s\", \"np\": %d, \"estimate_us\": %.3f, "
             "\"plan_info_us\": %.3f, \"calls_per_s\": %.0f}\n", cases[i].name, size, e, p, 1e6 / e);
  }
  lm_mesh_destroy(&m2);
  OK(lm_mesh_destroy(&m1));
  MPI_Finalize();
  return 0;
}
