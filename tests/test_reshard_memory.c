/* SPDX-License-Identifier: BSD-3-Clause */
/* Reshard memory: plan creation takes nothing from the buffer pool, and one execution's peak extra
 * memory (the rise of lm_pool_stats' high-water mark) stays within the stated bound:
 *   plan execute into a preallocated target:  <= LM_STAGING_BYTES + intermediates
 *   plain lm_dist_tensor_reshard:             <= target + LM_STAGING_BYTES + intermediates
 * where intermediates are the plan's unfused intermediate outputs (none for these 1-D cases but
 * one, whose size the test computes). A plan into a padded target (a borrow whose rows are 3
 * elements longer) stays within the plan's bound where the target is written in place: always
 * for exchanges, and for reduce-scatters and Partial fills where its rows take at least
 * LM_PAD_IN_PLACE_MIN_RUN bytes (default 1K; below, the target's compact copy counts too), the
 * intermediates counting the reduce-scatter output of P -> R (fused into a compact target); its
 * padding is never written. Everything taken is given back when the execution completes
 * (with LM_PLAN_KEEP_BUFFERS=1: when the persistent plan is destroyed, and a second execution takes
 * nothing new), and the results are exact. Run with a small LM_STAGING_BYTES (tests/script_staging.sh) the
 * tensors are many times the bound, so reductions and exchanges must pipeline chunk by chunk.
 * Positions come from this file's own torch.chunk (docs/DESIGN.md, "Layout math"), not from the
 * library: each shard's offset and shape must equal it, and values are checked there. */
// lm-test-np: 1 2 3 4
#include "lm_oracle.h"
#include "lm_test.h"

#include <localmap.h>
#include <stdlib.h>
#include <string.h>

/* The library's bound: LM_STAGING_BYTES, default 64 MiB, clamped to [256 B, 1 GiB]. */
static int64_t staging_bound(void) {
  const char *e = getenv("LM_STAGING_BYTES");
  int64_t b = e && *e ? strtoll(e, NULL, 10) : (int64_t)64 << 20;
  if (b < 256) b = 256;
  if (b > ((int64_t)1 << 30)) b = (int64_t)1 << 30;
  return b;
}

#define note(...) (lm_test__diag("rank %d: ", lm_test_rank()), lm_test__diag(__VA_ARGS__), lm_test__diag("\n"))

/* This rank's box of a g[0] x g[1] tensor with placement p on the 1-D mesh of every rank; 1 when
 * the library's local offset and shape of t agree with it. */
static int oracle_box(lm_dist_tensor_t t, lm_placement_t p, const int64_t *g, int64_t *off,
                      int64_t *ls) {
  int64_t lo[2], ll[2];
  for (int d = 0; d < 2; ++d) {
    off[d] = 0;
    ls[d] = g[d];
  }
  if (p.kind == LM_SHARD) lm_oracle_chunk(g[p.dim], lm_test_size(), lm_test_rank(), &off[p.dim], &ls[p.dim]);
  LM_ASSERT_OK(lm_dist_tensor_local_offset(t, lo, 2));
  LM_ASSERT_OK(lm_dist_tensor_local_shape(t, ll, 2));
  return lo[0] == off[0] && lo[1] == off[1] && ll[0] == ls[0] && ll[1] == ls[1];
}

static const char *path_name(int path) {
  return path == 1 ? "reshard" : path == 2 ? "plan, padded target" : "plan";
}

static int64_t rup64(int64_t b) { return b == 0 ? 64 : (b + 63) / 64 * 64; }

/* LM_PAD_IN_PLACE_MIN_RUN in bytes (a plain number or with a K suffix, as the scripts set it). */
static int64_t pad_min_run(void) {
  const char *e = getenv("LM_PAD_IN_PLACE_MIN_RUN");
  if (!e || !*e) return 1024;
  char *end = NULL;
  int64_t v = strtoll(e, &end, 10);
  return end && (*end == 'K' || *end == 'k') ? v * 1024 : v;
}

static int64_t in_use_now(void) {
  int64_t u = 0;
  LM_ASSERT_OK(lm_pool_stats(&u, NULL, 1)); /* and reset the mark to it */
  return u;
}
static int64_t peak_now(void) {
  int64_t p = 0;
  LM_ASSERT_OK(lm_pool_stats(NULL, &p, 0));
  return p;
}

typedef struct {
  const char *name;
  lm_placement_t sp, dp;
  int64_t g[2];
  int int_avg; /* int32 Partial(avg) instead of float64 Partial(sum) */
  int64_t inter_dim; /* >= 0: one intermediate, this rank's chunk of that dim (Shard) */
} mcase;

/* Source value of global element k on this rank (Partial: each rank holds a part). */
static double part_value(const mcase *c, int64_t k, int rank) {
  if (c->sp.kind != LM_PARTIAL) return (double)(k % 1000) + 0.25;
  if (c->int_avg) return (double)(k % 1000 + 2 * rank);
  return (double)(k % 1000) * (rank + 1);
}
static double want_value(const mcase *c, int64_t k, int np, int rank) {
  if (c->dp.kind == LM_PARTIAL) return rank == 0 ? (double)(k % 1000) + 0.25 : 0.0; /* R -> P */
  if (c->sp.kind != LM_PARTIAL) return (double)(k % 1000) + 0.25;
  if (c->int_avg) return (double)(k % 1000 + (np - 1));
  return (double)(k % 1000) * (np * (np + 1) / 2);
}

static int fill(lm_dist_tensor_t t, const mcase *c, int rank) {
  DLTensor v;
  int64_t off[2], ls[2];
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  if (!oracle_box(t, c->sp, c->g, off, ls)) return 0;
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < ls[1]; ++j) {
      int64_t k = (off[0] + i) * c->g[1] + off[1] + j;
      double x = part_value(c, k, rank);
      if (c->int_avg)
        ((int32_t *)v.data)[i * ls[1] + j] = (int32_t)x;
      else
        ((double *)v.data)[i * ls[1] + j] = x;
    }
  return 1;
}

static int check(lm_dist_tensor_t t, const mcase *c, int np, int rank) {
  DLTensor v;
  int64_t off[2], ls[2];
  LM_ASSERT_OK(lm_dist_tensor_local(t, &v));
  if (!oracle_box(t, c->dp, c->g, off, ls)) return 0;
  const int64_t rs = v.strides ? v.strides[0] : ls[1]; /* a padded target's rows */
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < ls[1]; ++j) {
      int64_t k = (off[0] + i) * c->g[1] + off[1] + j;
      double got = c->int_avg ? (double)((int32_t *)v.data)[i * rs + j] : ((double *)v.data)[i * rs + j];
      if (got != want_value(c, k, np, rank)) return 0;
    }
  return 1;
}

static void test_memory_bound(void **state) {
  (void)state;
  const int np = lm_test_size(), rank = lm_test_rank();
  const int64_t S = staging_bound();
  const char *ke = getenv("LM_PLAN_KEEP_BUFFERS");
  const int keep = ke && ke[0] == '1'; /* persistent plans keep their buffers */
  lm_mesh_t m = NULL;
  int64_t ms[1] = {np};
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  const lm_placement_t R = LM_PLACEMENT_REPLICATE, S0 = LM_PLACEMENT_SHARD(0),
                       S1 = LM_PLACEMENT_SHARD(1), P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM),
                       PA = LM_PLACEMENT_PARTIAL(LM_REDUCE_AVG);
  /* 96 x 70 float64 = 53 KiB per replica; many times a small LM_STAGING_BYTES. */
  const mcase cases[] = {
      {"S0->R", S0, R, {96, 70}, 0, -1},     {"S0->S1", S0, S1, {96, 70}, 0, -1},
      {"S1->S0", S1, S0, {96, 70}, 0, -1},   {"S1->R", S1, R, {96, 70}, 0, -1},
      {"R->S1", R, S1, {96, 70}, 0, -1},     {"P->S0", P, S0, {96, 70}, 0, -1},
      {"P->S1", P, S1, {96, 70}, 0, -1},     {"P->R", P, R, {96, 70}, 0, -1},
      {"Pavg->S1 int32", PA, S1, {96, 70}, 1, -1},
      {"Pavg->R int32", PA, R, {96, 70}, 1, -1},
      /* largest dim is 1: reduce-scatter over columns, then an allgather into R that cannot take
       * the columns in place: one intermediate of this rank's column chunk */
      {"P->R wide", P, R, {70, 96}, 0, 1},
      {"R->P", R, P, {96, 70}, 0, -1},
  };
  int bad = 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
    const mcase *c = &cases[ci];
    DLDataType dt = c->int_avg ? LM_INT32 : LM_FLOAT64;
    int64_t esize = c->int_avg ? 4 : 8;
    int64_t inter = 0;
    if (c->inter_dim >= 0 && np > 1) {
      int64_t off, len;
      lm_oracle_chunk(c->g[c->inter_dim], np, rank, &off, &len);
      inter = rup64(len * c->g[1 - c->inter_dim] * esize);
    }
    for (int path = 0; path < 3; ++path) {
      lm_dist_tensor_t src = NULL, dst = NULL;
      unsigned char *parr = NULL; /* path 2: the padded target's array */
      size_t pbytes = 0;
      int64_t pls[2] = {0, 0}, pld = 0;
      LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&src, m, 2, c->g, dt, LM_CPU, &c->sp));
      if (!fill(src, c, rank)) {
        note("%s: the source shard is not where torch.chunk puts it", c->name);
        ++bad;
      }
      int64_t before = in_use_now(), extra = 0, target = 0, after = 0;
      if (path == 0) {
        lm_reshard_plan_t plan = NULL;
        LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &c->sp, m, &c->dp, 2, c->g, dt));
        if (in_use_now() != before) {
          note("%s: plan creation took %lld bytes from the pool", c->name,
               (long long)(in_use_now() - before));
          ++bad;
        }
        LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&dst, plan, LM_CPU));
        before = in_use_now();
        LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst));
        extra = peak_now() - before;
        after = in_use_now();
        if (keep) {
          /* a second execution reuses what the plan kept: no new peak */
          LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst));
          if (peak_now() > after) {
            note("%s: LM_PLAN_KEEP_BUFFERS=1 but the second execution took %lld more bytes",
                 c->name, (long long)(peak_now() - after));
            ++bad;
          }
          LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&plan));
          after = in_use_now(); /* the plan gave its buffers back when destroyed */
        } else {
          LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&plan));
        }
      } else if (path == 2) {
        /* A plan into a padded target: this rank's shard in rows 3 elements longer. */
        int64_t poff[2] = {0, 0};
        pls[0] = c->g[0], pls[1] = c->g[1];
        if (c->dp.kind == LM_SHARD)
          lm_oracle_chunk(c->g[c->dp.dim], np, rank, &poff[c->dp.dim], &pls[c->dp.dim]);
        pld = pls[1] + 3;
        pbytes = (size_t)((pls[0] ? pls[0] : 1) * pld * esize);
        parr = malloc(pbytes);
        memset(parr, 0x5a, pbytes);
        int64_t pstr[2] = {pld, 1};
        DLTensor pv = {parr, {kDLCPU, 0}, 2, dt, pls, pstr, 0};
        LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&dst, m, &pv, &c->dp, LM_SHAPE_GIVEN, c->g,
                                                   LM_FROM_LOCAL_BORROW));
        lm_reshard_plan_t plan = NULL;
        LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &c->sp, m, &c->dp, 2, c->g, dt));
        before = in_use_now();
        LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, src, dst));
        extra = peak_now() - before;
        LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&plan)); /* (kept buffers given back) */
        after = in_use_now();
        /* Written by a reduce-scatter or a Partial fill in rows shorter than the setting: the
         * target's compact copy is taken too. */
        const int by_rows = (c->sp.kind == LM_PARTIAL && c->dp.kind == LM_SHARD) ||
                            (c->dp.kind == LM_PARTIAL && c->sp.kind != LM_PARTIAL);
        if (by_rows && pls[1] * esize < pad_min_run()) target = rup64(pls[0] * pls[1] * esize);
        /* P -> R: the reduce-scatter's output (over the largest dim), written straight into its
         * slice of a compact target where it can, is a buffer of its own before a padded one. */
        if (c->sp.kind == LM_PARTIAL && c->dp.kind == LM_REPLICATE) {
          const int d = c->inter_dim >= 0 ? (int)c->inter_dim : 0;
          int64_t off0, len0;
          lm_oracle_chunk(c->g[d], np, rank, &off0, &len0);
          inter = rup64(len0 * c->g[1 - d] * esize);
        }
      } else {
        LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&dst, src, NULL, &c->dp));
        extra = peak_now() - before;
        int64_t ls[2];
        LM_ASSERT_OK(lm_dist_tensor_local_shape(dst, ls, 2));
        target = rup64(ls[0] * ls[1] * esize);
        /* R -> S may be a view of the source (no target allocated) */
        after = in_use_now() - (extra >= target ? target : 0);
      }
      int64_t bound = target + S + inter;
      if (extra > bound) {
        note("%s (%s): peak extra %lld bytes > bound %lld (target %lld + staging %lld + "
             "intermediates %lld) at np %d", c->name, path_name(path), (long long)extra,
             (long long)bound, (long long)target, (long long)S, (long long)inter, np);
        ++bad;
      }
      if (after != before) {
        note("%s (%s): %lld bytes still taken after the execution", c->name,
             path_name(path), (long long)(after - before));
        ++bad;
      }
      if (!check(dst, c, np, rank)) {
        note("%s (%s): wrong position (offset/shape) or values at np %d", c->name,
             path_name(path), np);
        ++bad;
      }
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&dst));
      LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&src));
      if (parr) {
        int64_t written = 0;
        for (int64_t i = 0; i < pls[0]; ++i)
          for (int64_t b = pls[1] * esize; b < pld * esize; ++b) written += parr[i * pld * esize + b] != 0x5a;
        if (written) {
          note("%s (plan, padded target): %lld padding bytes written", c->name, (long long)written);
          ++bad;
        }
        free(parr);
      }
    }
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_ASSERT_ALL(bad == 0);
}

/* The counters themselves: a tensor's storage is counted while it lives, the mark remembers the
 * peak, and a reset brings the mark down to what is in use. */
static void test_pool_stats(void **state) {
  (void)state;
  lm_mesh_t m = NULL;
  int64_t ms[1] = {lm_test_size()}, g[1] = {1000};
  lm_placement_t r = LM_PLACEMENT_REPLICATE;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, ms, NULL));
  int64_t u0 = in_use_now(), u1 = 0, p1 = 0;
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT64, LM_CPU, &r));
  LM_ASSERT_OK(lm_pool_stats(&u1, &p1, 0));
  LM_ASSERT_ALL(u1 - u0 == 8000 && p1 == u1);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK(lm_pool_stats(&u1, &p1, 1));
  LM_ASSERT_ALL(u1 == u0 && p1 == u0 + 8000);
  LM_ASSERT_OK(lm_pool_stats(NULL, &p1, 0));
  LM_ASSERT_ALL(p1 == u0);
  LM_ASSERT_OK(lm_pool_stats(NULL, NULL, 0));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pool_stats),
    cmocka_unit_test(test_memory_bound),
};

LM_TEST_MAIN(tests)
