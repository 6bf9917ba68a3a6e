/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_mpi_objects: a destroy that leaks an MPI object fails (tests/README.md, "MPI objects").
 * Every communicator, group, datatype, request, keyval, op and info the library creates and frees
 * is counted through the MPI profiling interface (tests/lm_pmpi_count.h). Objects the library
 * keeps for the life of the process on purpose (the agreement communicator of each set of
 * processes, freed at MPI_Finalize; its keyvals) are made in a first, warm-up cycle; after it,
 * each create/use/destroy cycle below must leave the counts where they were, on every rank:
 *  - meshes: 1-D, 2-D with dim names, a subset of the ranks with a bystander, and the dim and
 *    mesh communicators handed out;
 *  - tensors: zeros, from_global (root and every rank), from_local ALLGATHER, gather (root and
 *    all), reshards S->R, R->S, S0->S1 (small: the board; 512 KiB: messages or node-local
 *    copies), Partial->Replicate, cross-mesh, and a Replicate view;
 *  - plans: blocking execute, start + test + wait, cross-mesh;
 *  - local_map with resharded inputs;
 *  - failures: an agreed argument mismatch (the second agreement round) and a failing fn.
 * tests/script_node_local.sh runs it again with the node-local path off (every message through
 * MPI, boxes as datatypes); `make check-multinode` with simulated nodes.
 */
// lm-test-np: 1 2 3 4
#include "lm_test.h"
#include "lm_pmpi_count.h"

#define NP lm_test_size()
#define ME lm_test_rank()

/* ----------------------------------------------------------------------------- meshes */
static void mesh_cycle(void *arg) {
  (void)arg;
  lm_mesh_t a = lm_test_world_mesh(), b = NULL, c = NULL;
  int f = 0;
  LM_ASSERT_OK(lm_mesh_comm(a, &f));
  LM_ASSERT_OK(lm_mesh_dim_comm(a, 0, &f));
  if (NP % 2 == 0) {
    int64_t s2[2] = {2, NP / 2};
    const char *names[2] = {"dp", "tp"};
    lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
    cfg.dim_names = names;
    LM_ASSERT_OK_ALL(lm_mesh_create(&b, lm_test_comm_f(), 2, s2, &cfg));
    LM_ASSERT_OK(lm_mesh_dim_comm(b, 1, &f));
  }
  if (NP >= 2) { /* the first NP - 1 ranks; the last one is a bystander */
    int ranks[8];
    int64_t s1[1] = {NP - 1};
    lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
    for (int i = 0; i < NP - 1; ++i) ranks[i] = i;
    cfg.ranks = ranks;
    cfg.nranks = NP - 1;
    LM_ASSERT_OK_ALL(lm_mesh_create(&c, lm_test_comm_f(), 1, s1, &cfg));
  }
  LM_ASSERT_OK(lm_mesh_destroy(&c));
  LM_ASSERT_OK(lm_mesh_destroy(&b));
  LM_ASSERT_OK(lm_mesh_destroy(&a));
}

static void test_mesh_create_destroy(void **state) {
  (void)state;
  lm_pmpi_cycle_check(mesh_cycle, NULL, "mesh create/destroy");
  /* The counts see the library's own calls: a live mesh holds communicators of its own (its
   * private dup of the parent, its members', one per dim), and its destroy frees them. */
  lm_pmpi_counts_t before = lm_pmpi_counts(), live, after;
  lm_mesh_t m = lm_test_world_mesh();
  live = lm_pmpi_counts();
  LM_ASSERT_OK(lm_mesh_destroy(&m));
  after = lm_pmpi_counts();
  if (live.comms < before.comms + 2)
    lm_test__diag("rank %d: a live mesh holds %ld communicators more than none\n", ME,
                  live.comms - before.comms);
  LM_ASSERT_ALL(live.comms >= before.comms + 2 && after.comms == before.comms);
}

/* ----------------------------------------------------------------------------- tensors */
static void tensor_cycle(void *arg) {
  lm_mesh_t m = (lm_mesh_t)arg;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1), r = LM_PLACEMENT_REPLICATE,
                 p = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  static double full[37 * 5], back[37 * 5];
  int64_t g[2] = {37, 5}, big[2] = {256, 256};
  for (int i = 0; i < 37 * 5; ++i) full[i] = i;
  DLTensor gd = {full, LM_CPU, 2, LM_FLOAT64, g, NULL, 0};
  DLTensor bd = {back, LM_CPU, 2, LM_FLOAT64, g, NULL, 0};
  lm_dist_tensor_t x = NULL, y = NULL, z = NULL, w = NULL, v = NULL, q = NULL, b0 = NULL, b1 = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, m, ME == 0 ? &gd : NULL, &s0, 0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&q, m, &gd, &s1, -1));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, NULL, &r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&z, y, NULL, &s1)); /* R -> S: may be a view */
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(z, -1, &bd));
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(x, 0, ME == 0 ? &bd : NULL));
  DLTensor loc;
  LM_ASSERT_OK(lm_dist_tensor_local(x, &loc));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&w, m, &loc, &s0, LM_SHAPE_ALLGATHER, NULL,
                                             LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&v, m, &gd, &p, -1));
  lm_dist_tensor_destroy(&y);
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, v, NULL, &r)); /* Partial -> Replicate */
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&b0, m, 2, big, LM_FLOAT64, LM_CPU, &s0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&b1, b0, NULL, &s1)); /* 512 KiB */
  lm_dist_tensor_t all[] = {x, y, z, w, v, q, b0, b1};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) LM_ASSERT_OK(lm_dist_tensor_destroy(&all[i]));
}

static void test_tensor_create_destroy(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_pmpi_cycle_check(tensor_cycle, m, "tensors on one mesh");
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* Cross-mesh: a tensor on the whole world resharded onto a mesh over the ranks in reverse. */
static void cross_cycle(void *arg) {
  (void)arg;
  lm_mesh_t a = lm_test_world_mesh(), b = NULL;
  int ranks[8];
  int64_t s[1] = {NP}, g[1] = {1000};
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  for (int i = 0; i < NP; ++i) ranks[i] = NP - 1 - i;
  cfg.ranks = ranks;
  cfg.nranks = NP;
  LM_ASSERT_OK_ALL(lm_mesh_create(&b, lm_test_comm_f(), 1, s, &cfg));
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, a, 1, g, LM_FLOAT32, LM_CPU, &s0));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&y, x, b, &s0));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  lm_reshard_plan_t plan = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, a, &s0, b, &r, 1, g, LM_FLOAT32));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&y, plan, LM_CPU));
  LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
  LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&b));
  LM_ASSERT_OK(lm_mesh_destroy(&a));
}

static void test_cross_mesh(void **state) {
  (void)state;
  lm_pmpi_cycle_check(cross_cycle, NULL, "cross-mesh reshards and plans");
}

/* ----------------------------------------------------------------------------- plans */
static void plan_cycle(void *arg) {
  lm_mesh_t m = (lm_mesh_t)arg;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), s1 = LM_PLACEMENT_SHARD(1);
  int64_t sizes[2][2] = {{24, 16}, {256, 256}}; /* the board exchange; messages */
  for (int k = 0; k < 2; ++k) {
    lm_reshard_plan_t plan = NULL;
    lm_dist_tensor_t x = NULL, y = NULL;
    LM_ASSERT_OK_ALL(lm_reshard_plan_create(&plan, m, &s0, m, &s1, 2, sizes[k], LM_FLOAT64));
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 2, sizes[k], LM_FLOAT64, LM_CPU, &s0));
    LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&y, plan, LM_CPU));
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
    LM_ASSERT_OK_ALL(lm_reshard_plan_execute(plan, x, y));
    lm_request_t req = NULL;
    int done = 0;
    LM_ASSERT_OK_ALL(lm_reshard_plan_start(&req, plan, x, y));
    LM_ASSERT_OK(lm_request_test(&req, &done));
    LM_ASSERT_OK_ALL(lm_request_wait(&req));
    LM_ASSERT_OK(lm_reshard_plan_destroy(&plan));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&y));
    LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  }
}

static void test_plan_create_destroy(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_pmpi_cycle_check(plan_cycle, m, "plans");
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* ----------------------------------------------------------------------------- local_map */
static void free_managed(DLManagedTensor *mt) {
  free(mt->dl_tensor.data);
  free(mt->dl_tensor.shape);
  free(mt);
}
/* A copy of the input shard, handed over as a managed tensor. */
static lm_status_t copy_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  if (!mt) return LM_ERR_OUT_OF_MEMORY;
  int64_t n = x->shape[0];
  mt->dl_tensor = *x;
  mt->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t));
  mt->dl_tensor.shape[0] = n;
  mt->dl_tensor.strides = NULL;
  mt->dl_tensor.data = calloc((size_t)(n ? n : 1), sizeof(float));
  mt->deleter = free_managed;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}
static lm_status_t fail_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud, (void)mesh, (void)nin, (void)in, (void)nout, (void)out;
  return lm_test_rank() == 0 ? LM_ERR_USER : LM_SUCCESS;
}

static void local_map_cycle(void *arg) {
  lm_mesh_t m = (lm_mesh_t)arg;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {64};
  lm_dist_tensor_t x = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 1, g, LM_FLOAT32, LM_CPU, &s0));
  lm_arg_t in = {LM_ARG_DIST_TENSOR, 0, 0, 0, x}, out = {0};
  const lm_placement_t *inp[1] = {&r}, *outp[1] = {&r};
  LM_ASSERT_OK_ALL(lm_local_map(copy_fn, NULL, 1, &in, inp, 1, outp, NULL, NULL,
                                LM_LOCAL_MAP_RESHARD_INPUTS, &out));
  if (out.kind == LM_ARG_DIST_TENSOR) {
    lm_dist_tensor_t o = (lm_dist_tensor_t)out.ptr;
    LM_ASSERT_OK(lm_dist_tensor_destroy(&o));
  }
  lm_status_t st = lm_local_map(fail_fn, NULL, 0, NULL, NULL, 0, NULL, NULL, m, 0, NULL);
  LM_ASSERT_ALL(st == (ME == 0 ? LM_ERR_USER : LM_ERR_REMOTE));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
}

static void test_local_map(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_pmpi_cycle_check(local_map_cycle, m, "local_map");
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* ----------------------------------------------------------------------------- failures */
/* Ranks ask for different targets: the second agreement round (an allgather of records) runs
 * and every rank fails; nothing of it may stay behind. */
static void mismatch_cycle(void *arg) {
  lm_mesh_t m = (lm_mesh_t)arg;
  lm_placement_t s0 = LM_PLACEMENT_SHARD(0), r = LM_PLACEMENT_REPLICATE;
  int64_t g[1] = {40};
  lm_dist_tensor_t x = NULL, y = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&x, m, 1, g, LM_FLOAT32, LM_CPU, &s0));
  lm_status_t st = lm_dist_tensor_reshard(&y, x, NULL, ME == NP - 1 ? &s0 : &r);
  LM_ASSERT_ALL(NP == 1 ? st == LM_SUCCESS : st == LM_ERR_MISMATCH);
  lm_dist_tensor_destroy(&y);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
}

static void test_agreed_failures(void **state) {
  (void)state;
  lm_mesh_t m = lm_test_world_mesh();
  lm_pmpi_cycle_check(mismatch_cycle, m, "agreed failures");
  LM_ASSERT_OK(lm_mesh_destroy(&m));
}

/* The counter itself: a communicator dup'ed and not freed is seen (this is what the checks above
 * rely on), and freeing it brings the count back. */
static void test_counter_sees_a_leak(void **state) {
  (void)state;
  lm_pmpi_counts_t a = lm_pmpi_counts(), b;
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Request q = MPI_REQUEST_NULL;
  char diff[256];
  int x = 0;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Type_contiguous(2, MPI_INT, &t);
  MPI_Ibarrier(c, &q);
  b = lm_pmpi_counts();
  LM_ASSERT_ALL(lm_pmpi_diff(&a, &b, diff, sizeof diff) && b.comms == a.comms + 1 &&
                b.types == a.types + 1 && b.requests == a.requests + 1);
  MPI_Wait(&q, MPI_STATUS_IGNORE);
  MPI_Type_free(&t);
  MPI_Comm_free(&c);
  (void)x;
  b = lm_pmpi_counts();
  LM_ASSERT_ALL(!lm_pmpi_diff(&a, &b, diff, sizeof diff));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_counter_sees_a_leak),
    cmocka_unit_test(test_mesh_create_destroy),
    cmocka_unit_test(test_tensor_create_destroy),
    cmocka_unit_test(test_cross_mesh),
    cmocka_unit_test(test_plan_create_destroy),
    cmocka_unit_test(test_local_map),
    cmocka_unit_test(test_agreed_failures),
};

LM_TEST_MAIN(tests)
