/* SPDX-License-Identifier: BSD-3-Clause */
/* Device tensors through the public API: zeros on the device (stream-ordered allocation),
 * user allocator callbacks (counted, given the mesh's stream), borrowed and managed device
 * buffers (no copy: same pointer; the deleter runs once), export keeps kDLCUDA, stream order
 * (work the caller enqueued on the mesh's stream before a reshard is seen by it without any
 * synchronization), lm_local_map with device inputs and outputs allocated on the mesh's stream,
 * the transport query (test_gpu_api_staged: all of it with LM_TRANSPORT=mpi, host-staged), and
 * bad inputs: a host pointer labelled kDLCUDA, a device id out of range, a strided device copy. */
// lm-test-np: 1 2 4
#include "gpu_test.h"

#include <stdlib.h>
#include <string.h>

static int msg_has(const char *w) { return strstr(lm_last_error_message(), w) != NULL; }

struct counts {
  int allocs, frees, wrong_stream;
  size_t live;
};

static void *count_alloc(void *ctx, size_t bytes, int dev, void *stream) {
  struct counts *c = (struct counts *)ctx;
  void *p = NULL;
  if (stream != (void *)lm_gpu_stream || dev != lm_gpu_device) c->wrong_stream++;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
  c->allocs++;
  c->live += bytes;
  return p;
}
static void count_free(void *ctx, void *p, size_t bytes, int dev, void *stream) {
  struct counts *c = (struct counts *)ctx;
  (void)dev;
  (void)stream;
  cudaStreamSynchronize(lm_gpu_stream); /* test code may wait; the library never does */
  cudaFree(p);
  c->frees++;
  c->live -= bytes;
}

static void test_zeros_and_allocator(void **state) {
  (void)state;
  lm_mesh_t m = lm_gpu_mesh_1d();
  int np = lm_test_size();
  int64_t g[2] = {(int64_t)np * 3 + 1, 5};
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, r = NULL;
  /* Default allocator: zeros are zero. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, lm_gpu_dev(), &S));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  LM_ASSERT_ALL(v.device.device_type == kDLCUDA && v.device.device_id == lm_gpu_device);
  float buf[64];
  size_t n = (size_t)v.shape[0] * 5;
  memset(buf, 0xff, sizeof buf);
  lm_gpu_download(buf, v.data, n * 4);
  int ok = 1;
  for (size_t i = 0; i < n; ++i) ok &= buf[i] == 0.f;
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* User allocator: every allocation goes through it, with the mesh's stream, and comes back. */
  struct counts c = {0, 0, 0, 0};
  lm_device_config_t dc = LM_DEVICE_CONFIG_INIT;
  dc.stream = lm_gpu_stream;
  dc.alloc = count_alloc;
  dc.free = count_free;
  dc.alloc_ctx = &c;
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, &dc));
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 2, g, LM_FLOAT32, lm_gpu_dev(), &S));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &R));
  /* zeros: one allocation; the reshard's output one more (none when np = 1 makes it a view). */
  LM_ASSERT_ALL(c.allocs >= 1 && c.allocs <= 2 && (np == 1 || c.allocs == 2) && c.wrong_stream == 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(c.frees == c.allocs && c.live == 0);
  /* An allocator that fails: LM_ERR_OUT_OF_MEMORY, nothing leaks, the mesh still works. */
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, NULL));
  int64_t huge[1] = {(int64_t)1 << 50};
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, huge, LM_FLOAT32, lm_gpu_dev(), &R),
                LM_ERR_OUT_OF_MEMORY, "bytes");
  LM_ASSERT_ALL(t == NULL);
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static int g_deleted = 0;
static void managed_deleter(DLManagedTensor *self) {
  cudaFree(self->dl_tensor.data);
  g_deleted++;
  free(self);
}

static void test_borrow_managed_export(void **state) {
  (void)state;
  lm_mesh_t m = lm_gpu_mesh_1d();
  int64_t g[1] = {6};
  lm_placement_t R = LM_PLACEMENT_REPLICATE;
  int32_t host[6] = {1, 2, 3, 4, 5, 6}, back[6];
  void *d = lm_gpu_upload(host, sizeof host);
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT32, g, NULL, 0};
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &R, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  LM_ASSERT_ALL(v.data == d); /* no copy */
  DLManagedTensor *ex = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_to_dlpack(t, &ex));
  LM_ASSERT_ALL(ex->dl_tensor.device.device_type == kDLCUDA && ex->dl_tensor.data == d);
  ex->deleter(ex);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* COPY makes its own device buffer with the same values. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &R, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY));
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(t, &v));
  LM_ASSERT_ALL(v.data != d);
  lm_gpu_download(back, v.data, sizeof back);
  LM_ASSERT_ALL(memcmp(back, host, sizeof host) == 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* Managed: ownership passes; the deleter runs once, at the last reference. */
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  mt->dl_tensor = dl;
  mt->dl_tensor.data = lm_gpu_upload(host, sizeof host);
  mt->dl_tensor.shape = g;
  mt->deleter = managed_deleter;
  g_deleted = 0;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_dlpack(&t, m, mt, &R, LM_SHAPE_GIVEN, g));
  LM_ASSERT_ALL(g_deleted == 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_ALL(g_deleted == 1);
  /* Bad inputs: host memory labelled kDLCUDA, a device id out of range, strided device copy. */
  DLTensor bad = {host, lm_gpu_dev(), 1, LM_INT32, g, NULL, 0};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &bad, &R, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "local->data");
  bad.data = d;
  bad.device.device_id = 4096;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &bad, &R, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW),
                LM_ERR_INVALID_ARGUMENT, "device_id");
  int64_t g2[2] = {3, 2}, strides[2] = {1, 3};
  DLTensor str = {d, lm_gpu_dev(), 2, LM_INT32, g2, strides, 0};
  lm_placement_t R2 = LM_PLACEMENT_REPLICATE;
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &str, &R2, LM_SHAPE_GIVEN, g2, LM_FROM_LOCAL_COPY),
                LM_ERR_NOT_SUPPORTED, "strided");
  LM_ASSERT_ALL(t == NULL);
  LM_ASSERT_ALL(msg_has("strided"));
  LM_CUDA_OK(cudaFree(d));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Work enqueued on the mesh's stream before the call is seen by it: a large memset that is
 * still running when the reshard is called decides the result. The zeros before it are in the
 * stream's order too and waited for (a cudaMemset runs on the legacy stream, which the
 * non-blocking test stream is not ordered with: issue 18, the zeros could land last). */
static void test_stream_order(void **state) {
  (void)state;
  lm_mesh_t m = lm_gpu_mesh_1d();
  int np = lm_test_size();
  const int64_t n = (int64_t)1 << 24; /* 64 MiB of int32 per rank */
  int64_t g[1] = {n * np}, ls[1] = {n};
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  void *d = NULL;
  LM_CUDA_OK(cudaMalloc(&d, (size_t)n * 4));
  LM_CUDA_OK(cudaMemsetAsync(d, 0, (size_t)n * 4, lm_gpu_stream));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  LM_CUDA_OK(cudaMemsetAsync(d, 0x01, (size_t)n * 4, lm_gpu_stream)); /* not waited for */
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT32, ls, NULL, 0};
  lm_dist_tensor_t t = NULL, r = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &R));
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(r, &v));
  int32_t *h = (int32_t *)malloc((size_t)g[0] * 4);
  lm_gpu_download(h, v.data, (size_t)g[0] * 4);
  int ok = 1;
  for (int64_t i = 0; i < g[0]; i += 4099) ok &= h[i] == 0x01010101;
  ok &= h[g[0] - 1] == 0x01010101;
  free(h); /* before the assertion, which leaves the test when it fails */
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  LM_CUDA_OK(cudaFree(d));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* local_map: fn gets device views, learns the stream from the mesh, and returns a device output
 * allocated and filled on that stream (x + x, by a copy then a second copy-add on the host side
 * would synchronize: so the output is 2 * input computed as input copied twice into halves). */
static void out_deleter(DLManagedTensor *self) {
  cudaFree(self->dl_tensor.data);
  free(self->dl_tensor.shape);
  free(self);
}
static lm_status_t fn_copy(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout,
                           lm_arg_t *out) {
  (void)ud;
  (void)nin;
  (void)nout;
  const DLTensor *x = (const DLTensor *)in[0].ptr;
  if (x->device.device_type != kDLCUDA) {
    lm_set_error_message("input is not on the device");
    return LM_ERR_USER;
  }
  lm_device_config_t c = LM_DEVICE_CONFIG_INIT;
  if (lm_mesh_device_config(mesh, &c) != LM_SUCCESS) return LM_ERR_USER;
  cudaStream_t st = (cudaStream_t)c.stream;
  size_t bytes = (size_t)x->shape[0] * 8;
  DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
  mt->dl_tensor = *x;
  mt->dl_tensor.shape = (int64_t *)malloc(sizeof(int64_t));
  mt->dl_tensor.shape[0] = x->shape[0];
  mt->dl_tensor.data = NULL;
  if (cudaMallocAsync(&mt->dl_tensor.data, bytes ? bytes : 1, st) != cudaSuccess ||
      cudaMemcpyAsync(mt->dl_tensor.data, x->data, bytes, cudaMemcpyDeviceToDevice, st) != cudaSuccess) {
    lm_set_error_message("cuda allocation or copy failed");
    return LM_ERR_USER;
  }
  mt->deleter = out_deleter;
  out[0].kind = LM_ARG_MANAGED_TENSOR;
  out[0].ptr = mt;
  return LM_SUCCESS;
}

static void test_local_map_device(void **state) {
  (void)state;
  lm_mesh_t m = lm_gpu_mesh_1d();
  int np = lm_test_size(), me = lm_test_rank();
  int64_t g[1] = {(int64_t)np * 2 + 1};
  int64_t off = 0, len = 0;
  LM_ASSERT_OK(lm_layout_chunk(g[0], np, me, &off, &len));
  int64_t host[64], back[64];
  for (int64_t i = 0; i < len; ++i) host[i] = 1000 + off + i;
  void *d = lm_gpu_upload(host, (size_t)len * 8);
  int64_t ls[1] = {len};
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT64, ls, NULL, 0};
  lm_placement_t S = LM_PLACEMENT_SHARD(0);
  lm_dist_tensor_t t = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  lm_arg_t in[1] = {{LM_ARG_DIST_TENSOR, 0, 0, 0.0, t}}, out[1];
  const lm_placement_t *outp[1] = {&S};
  LM_ASSERT_OK_ALL(lm_local_map(fn_copy, NULL, 1, in, NULL, 1, outp, NULL, m, 0, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR);
  lm_dist_tensor_t o = (lm_dist_tensor_t)out[0].ptr;
  DLDevice dev;
  LM_ASSERT_OK_ALL(lm_dist_tensor_device(o, &dev));
  LM_ASSERT_ALL(dev.device_type == kDLCUDA && dev.device_id == lm_gpu_device);
  int64_t gs[1];
  LM_ASSERT_OK_ALL(lm_dist_tensor_global_shape(o, gs, 1));
  LM_ASSERT_ALL(gs[0] == g[0]);
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(o, &v));
  lm_gpu_download(back, v.data, (size_t)len * 8);
  LM_ASSERT_ALL(memcmp(back, host, (size_t)len * 8) == 0);
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&o));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_CUDA_OK(cudaFree(d));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* lm_local_map_ex on a device input: the record's input_grad moves a device gradient (a
 * Partial(sum) view of a replicated input, each rank's copy of it) back to the input's layout,
 * Replicate: a device all-reduce, np * x on every rank. */
static void test_local_map_record_device(void **state) {
  (void)state;
  lm_mesh_t m = lm_gpu_mesh_1d();
  int np = lm_test_size();
  int64_t g[1] = {5}, host[5], back[5];
  for (int64_t i = 0; i < 5; ++i) host[i] = 10 * i - 7;
  void *d = lm_gpu_upload(host, sizeof host);
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT64, g, NULL, 0};
  lm_placement_t R = LM_PLACEMENT_REPLICATE, P = LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM);
  lm_dist_tensor_t x = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&x, m, &dl, &R, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  lm_arg_t in[1] = {{LM_ARG_DIST_TENSOR, 0, 0, 0.0, x}}, out[1];
  const lm_placement_t *outp[1] = {&P}, *gradp[1] = {&P};
  lm_local_map_record_t rec = NULL;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.in_grad_placements = gradp;
  opt.record = &rec;
  LM_ASSERT_OK_ALL(lm_local_map_ex(fn_copy, NULL, 1, in, NULL, 1, outp, NULL, m, 0, &opt, out));
  lm_dist_tensor_t view = (lm_dist_tensor_t)out[0].ptr, dx = NULL;
  LM_ASSERT_OK_ALL(lm_local_map_record_input_grad(&dx, rec, 0, view));
  DLDevice dev;
  lm_placement_t got;
  LM_ASSERT_OK_ALL(lm_dist_tensor_device(dx, &dev));
  LM_ASSERT_OK_ALL(lm_dist_tensor_placements(dx, &got, 1));
  LM_ASSERT_ALL(dev.device_type == kDLCUDA && got.kind == LM_REPLICATE);
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(dx, &v));
  lm_gpu_download(back, v.data, sizeof back);
  int same = 1;
  for (int i = 0; i < 5; ++i) same &= back[i] == np * host[i];
  LM_ASSERT_ALL(same);
  LM_ASSERT_OK_ALL(lm_local_map_record_destroy(&rec));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&dx));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&view));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&x));
  LM_CUDA_OK(cudaFree(d));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* The transport query before and after the first device movement; LM_TRANSPORT=mpi
 * (test_gpu_api_staged) forces the host-staged path; otherwise ranks sharing a GPU (same host or
 * NCCL_HOSTID, same PCI bus id: decided by the test itself) get the host-staged path and ranks
 * with a GPU each get NCCL. */
#ifdef LM_GPU_FORCE_STAGED
static const int kForcedStaged = 1;
#else
static const int kForcedStaged = 0;
#endif
static void test_transport_choice(void **state) {
  (void)state;
  int np = lm_test_size(), share = lm_gpu_ranks_share_gpu(), forced = kForcedStaged;
  {
    lm_mesh_t m = lm_gpu_mesh_1d();
    int tr = -1;
    LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCUDA, &tr));
    LM_ASSERT_ALL(tr == LM_TRANSPORT_UNDECIDED);
    int64_t g[1] = {4 * np};
    lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
    lm_dist_tensor_t t = NULL, r = NULL;
    LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT64, lm_gpu_dev(), &S));
    LM_ASSERT_OK_ALL(lm_dist_tensor_reshard(&r, t, NULL, &R));
    LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCUDA, &tr));
    LM_ASSERT_ALL(tr == LM_TRANSPORT_NCCL || tr == LM_TRANSPORT_MPI_STAGED);
    LM_ASSERT_ALL(tr == (forced || share ? LM_TRANSPORT_MPI_STAGED : LM_TRANSPORT_NCCL));
    LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCPU, &tr));
    LM_ASSERT_ALL(tr == LM_TRANSPORT_MPI);
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&r));
    LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
    LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  }
}

/* Issue 18: a staging failure of lm_reshard_plan_start on one rank (host-staged path) is agreed
 * before any data moves: the failing rank gets its error, every other one LM_ERR_REMOTE, none
 * waits for the others; then a fresh mesh starts and completes the same plan. Injected through
 * the simulator (CUDA=sim builds only; on a GPU a freed pointer may kill the context): the last
 * rank frees its borrowed source buffer, so the copy to host staging fails (cudaErrorInvalidValue,
 * not sticky). Run by test_gpu_api_staged (LM_TRANSPORT=mpi: the staged path in every
 * topology). */
static LM_TEST_UNUSED void test_staged_start_failure_agreed(void **state) {
  (void)state;
#ifndef CUDASIM_VERSION
  if (lm_test_rank() == 0) printf("test_gpu_api: staged start failure: simulator builds only\n");
#else
  int np = lm_test_size(), me = lm_test_rank();
  lm_mesh_t m = lm_gpu_mesh_1d();
  int64_t g[1] = {4 * (int64_t)np}, ls[1] = {4};
  int32_t host[4] = {1, 2, 3, 4};
  void *d = lm_gpu_upload(host, sizeof host);
  DLTensor dl = {d, lm_gpu_dev(), 1, LM_INT32, ls, NULL, 0};
  lm_placement_t S = LM_PLACEMENT_SHARD(0), R = LM_PLACEMENT_REPLICATE;
  lm_dist_tensor_t t = NULL, out = NULL;
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &S, NULL, &R, 1, g, LM_INT32));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&out, p, lm_gpu_dev()));
  if (me == np - 1) LM_CUDA_OK(cudaFree(d)); /* the injected fault */
  lm_request_t req = NULL;
  lm_status_t st = lm_reshard_plan_start(&req, p, t, out);
  LM_ASSERT_ALL(req == NULL && st == (me == np - 1 ? LM_ERR_CUDA : LM_ERR_REMOTE));
  LM_ASSERT_ALL(me == np - 1 || strstr(lm_last_error_message(), "staging") != NULL);
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  /* Agreed before any data moved: the mesh is not broken on any rank (the failing rank's CUDA
   * error and the others' REMOTE leave it alike), so the same mesh runs the plan with a valid
   * buffer on every rank. */
  if (me == np - 1) d = lm_gpu_upload(host, sizeof host);
  dl.data = d;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_local(&t, m, &dl, &S, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW));
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, &S, NULL, &R, 1, g, LM_INT32));
  LM_ASSERT_OK_ALL(lm_reshard_plan_alloc_target(&out, p, lm_gpu_dev()));
  LM_ASSERT_OK_ALL(lm_reshard_plan_start(&req, p, t, out));
  LM_ASSERT_OK_ALL(lm_request_wait(&req));
  int32_t back[256];
  DLTensor v;
  LM_ASSERT_OK_ALL(lm_dist_tensor_local(out, &v));
  lm_gpu_download(back, v.data, (size_t)g[0] * 4);
  int ok = 1;
  for (int64_t i = 0; i < g[0]; ++i) ok &= back[i] == host[i % 4];
  LM_ASSERT_ALL(ok);
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&out));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  LM_CUDA_OK(cudaFree(d));
  if (me == 0) printf("test_gpu_api: staged start failure on rank %d agreed by %d ranks\n", np - 1, np);
#endif
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_zeros_and_allocator),
    cmocka_unit_test(test_borrow_managed_export),
    cmocka_unit_test(test_stream_order),
    cmocka_unit_test(test_local_map_device),
    cmocka_unit_test(test_local_map_record_device),
    cmocka_unit_test(test_transport_choice),
#ifdef LM_GPU_FORCE_STAGED
    cmocka_unit_test(test_staged_start_failure_agreed),
#endif
};
#ifdef LM_GPU_FORCE_STAGED
LM_GPU_TEST_ENV("LM_TRANSPORT", "mpi")
#endif
LM_GPU_TEST_MAIN(tests)
