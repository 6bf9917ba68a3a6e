/* SPDX-License-Identifier: BSD-3-Clause */
/* NCCL error handling, the transport choice and the release of communicators. With one GPU per
 * rank as NCCL sees it (a machine with several GPUs, `make check-gpu NCCL_SPLIT_HOSTS=1`, the
 * simulator's per-rank topology), device reshards run on NCCL: then a communicator init that
 * fails on one rank (test_gpu_nccl_fault: LM_NCCL_FAULT_INIT_RANK=0, the library's fault hook,
 * for the whole process) must fail the call on EVERY rank with LM_ERR_NCCL and leave the mesh
 * broken (later calls: LM_ERR_INVALID_USAGE), while without the hook (this program) a mesh and a
 * pair of meshes work. Where ranks share a GPU, NCCL must not be tried at all: the same
 * fault hook has no effect, the reshard succeeds host-staged and is correct. Which outcome
 * applies is decided by the test itself (lm_gpu_ranks_share_gpu: host and PCI bus ids, as NCCL
 * decides), and the mesh's transport must match it. A mesh destroyed while a peer still waits
 * for its data must deliver it (issue 18: finalize, not abort). */
// lm-test-np: 1 2 4
#include "gpu_test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* S(0) -> R of 0..n-1 on the device; returns the status and checks the values on success. */
static lm_status_t gather_on_device(lm_mesh_t m, int *values_ok) {
  int np = lm_test_size(), me = lm_test_rank();
  int64_t g[1] = {5 * (int64_t)np + 2}, off = 0, len = 0;
  LM_ASSERT_OK(lm_layout_chunk(g[0], np, me, &off, &len));
  int32_t host[64], back[64];
  for (int64_t i = 0; i < len; ++i) host[i] = (int32_t)(off + i);
  void *d = lm_gpu_upload(host, (size_t)len * 4);
  int64_t ls[1] = {len};
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT32, ls, NULL, 0};
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  lm_status_t st = lm_dist_tensor_reshard(&r, t, NULL, &R);
  *values_ok = 0;
  if (st == LM_SUCCESS) {
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(r, &v));
    lm_gpu_download(back, v.data, (size_t)g[0] * 4);
    *values_ok = 1;
    for (int64_t i = 0; i < g[0]; ++i) *values_ok &= back[i] == (int32_t)i;
  }
  LM_ASSERT_OK(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  LM_CUDA_OK(cudaFree(d));
  return st;
}

/* Every NCCL init of this process fails on communicator rank 0 (test_gpu_nccl_fault.c). */
static LM_TEST_UNUSED void test_nccl_init_failure(void **state) {
  (void)state;
  int np = lm_test_size(), ok = 0, tr = -1;
  const int want = lm_gpu_ranks_share_gpu() ? LM_TRANSPORT_MPI_STAGED : LM_TRANSPORT_NCCL;
  lm_mesh_t m = lm_gpu_mesh_1d();
  lm_status_t st = gather_on_device(m, &ok);
  LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCUDA, &tr));
  LM_ASSERT_ALL(tr == want);
  if (want == LM_TRANSPORT_NCCL) {
    /* every rank failed alike, naming NCCL; the mesh is broken */
    LM_ASSERT_ALL(st == LM_ERR_NCCL && strstr(lm_last_error_message(), "NCCL") != NULL);
    lm_dist_tensor_t t = NULL;
    lm_placement_t R = LM_PLACEMENT_REPLICATE;
    lm_status_t again = lm_dist_tensor_from_global(&t, m, NULL, &R, 0);
    LM_ASSERT_ALL(again == LM_ERR_INVALID_USAGE && strstr(lm_last_error_message(), "broken"));
    if (lm_test_rank() == 0) printf("test_gpu_nccl: NCCL init failure agreed on %d ranks\n", np);
  } else {
    LM_ASSERT_ALL(st == LM_SUCCESS && ok);
    if (lm_test_rank() == 0) printf("test_gpu_nccl: host-staged (NCCL not used), fault hook inert\n");
  }
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Without the fault: a mesh moves device data on the transport the test expects (NCCL where
 * every rank has a GPU of its own), and a cross-mesh reshard (a pair communicator) works too. */
static LM_TEST_UNUSED void test_transport_and_values(void **state) {
  (void)state;
  int np = lm_test_size(), ok = 0, tr = -1;
  const int want = lm_gpu_ranks_share_gpu() ? LM_TRANSPORT_MPI_STAGED : LM_TRANSPORT_NCCL;
  lm_mesh_t m = lm_gpu_mesh_1d();
  LM_ASSERT_ALL(gather_on_device(m, &ok) == LM_SUCCESS && ok);
  LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCUDA, &tr));
  LM_ASSERT_ALL(tr == want);
  int64_t n = 3 * (int64_t)np + 1;
  lm_mesh_t b = lm_gpu_mesh_reversed();
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, &n, LM_INT32, lm_gpu_dev(), &S));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, b, &R));
  int32_t back[256];
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(r, &v));
  lm_gpu_download(back, v.data, (size_t)n * 4);
  ok = 1;
  for (int64_t i = 0; i < n; ++i) ok &= back[i] == 0;
  LM_ASSERT_ALL(ok);
  if (lm_test_rank() == 0)
    printf("test_gpu_nccl: transport %s\n", tr == LM_TRANSPORT_NCCL ? "NCCL" : "MPI_STAGED");
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&b));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* The same for a pair of meshes (a cross-mesh device reshard): the pair gets a communicator of its
 * own over the union of both meshes' ranks, so the fault hook (rank 0 of that union) fails the
 * call on every rank of either mesh and breaks both meshes (the pair's transport is the same
 * check over the same processes). B is A's ranks reversed; with np 1 the union is one rank. */
static LM_TEST_UNUSED void test_pair_init_failure(void **state) {
  (void)state;
  int np = lm_test_size();
  const int want = lm_gpu_ranks_share_gpu() ? LM_TRANSPORT_MPI_STAGED : LM_TRANSPORT_NCCL;
  lm_mesh_t a = lm_gpu_mesh_1d(), b = lm_gpu_mesh_reversed();
  int64_t n = 3 * (int64_t)np + 1;
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, a, 1, &n, LM_INT32, lm_gpu_dev(), &S));
  lm_status_t st = lm_dist_tensor_reshard(&r, t, b, &R);
  if (want == LM_TRANSPORT_NCCL) {
    LM_ASSERT_ALL(st == LM_ERR_NCCL && strstr(lm_last_error_message(), "NCCL") != NULL);
    lm_dist_tensor_t u = NULL;
    lm_status_t sa = lm_dist_tensor_from_global(&u, a, NULL, &R, 0);
    lm_status_t sb = lm_dist_tensor_from_global(&u, b, NULL, &R, 0);
    LM_ASSERT_ALL(sa == LM_ERR_INVALID_USAGE && sb == LM_ERR_INVALID_USAGE);
    if (lm_test_rank() == 0) printf("test_gpu_nccl: pair NCCL init failure agreed on %d ranks, both meshes broken\n", np);
  } else {
    LM_ASSERT_ALL(st == LM_SUCCESS);
    if (lm_test_rank() == 0) printf("test_gpu_nccl: pair host-staged (NCCL not used), fault hook inert\n");
  }
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&b));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&a));
  LM_CUDA_OK(cudaDeviceSynchronize());
}

/* Issue 18 (2.2): a mesh destroyed while a peer still waits for its data. After a first reshard
 * (the transport chosen, the communicator made), every rank but the last reshards S(0) -> R of
 * np - 1 elements (the last rank's shard is empty: it only receives) and destroys its tensors and
 * the mesh at once, without waiting for its stream; the last rank comes 300 ms later. The others'
 * sends can complete only once it posts its receives, and their data is then in flight: the
 * release of the communicator must deliver it (drain, ncclCommFinalize), not drop it
 * (ncclCommAbort as soon as the streams drained), or the last rank waits forever (the simulator
 * holds each message CUDASIM_NCCL_LATENCY_US in flight, drops it on abort, and its watchdog
 * names the receive left waiting). Host-staged meshes pass trivially. */
static LM_TEST_UNUSED void test_release_with_lagging_peer(void **state) {
  (void)state;
  int np = lm_test_size(), me = lm_test_rank(), ok = 0;
  lm_mesh_t m = lm_gpu_mesh_1d();
  LM_ASSERT_ALL(gather_on_device(m, &ok) == LM_SUCCESS && ok);
  int64_t n = np > 1 ? np - 1 : 1, off = 0, len = 0;
  LM_ASSERT_OK(lm_layout_chunk(n, np, me, &off, &len));
  LM_ASSERT_ALL(np == 1 || me != np - 1 || len == 0);
  int32_t host[256], back[256];
  for (int64_t i = 0; i < len; ++i) host[i] = 3 * (int32_t)(off + i) + 1;
  void *d = lm_gpu_upload(host, (size_t)len * 4);
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT32, &len, NULL, 0};
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, &n, LM_FROM_LOCAL_BORROW));
  if (me == np - 1 && np > 1) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  LM_ASSERT_OK(lm_dist_tensor_reshard(&r, t, NULL, &R));
  ok = 1;
  if (me == np - 1) { /* the lagging rank reads what the others sent before they released */
    DLTensor v;
    LM_ASSERT_OK(lm_dist_tensor_local(r, &v));
    lm_gpu_download(back, v.data, (size_t)n * 4);
    for (int64_t i = 0; i < n; ++i) ok &= back[i] == 3 * (int32_t)i + 1;
  }
  LM_ASSERT_OK(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK(lm_mesh_destroy(&m)); /* local: returns without waiting for the peers */
  LM_ASSERT_ALL(ok);
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  LM_CUDA_OK(cudaFree(d));
  if (me == 0) printf("test_gpu_nccl: release with a lagging peer: its data arrived\n");
}

#ifdef LM_GPU_NCCL_FAULT
LM_GPU_TEST_ENV("LM_NCCL_FAULT_INIT_RANK", "0")
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_nccl_init_failure),
    cmocka_unit_test(test_pair_init_failure),
};
#else
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_transport_and_values),
    cmocka_unit_test(test_release_with_lagging_peer),
};
#endif
LM_GPU_TEST_MAIN(tests)
