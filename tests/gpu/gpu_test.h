/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_test.h: the harness of the device tests (tests/gpu/), on top of tests/lm_test.h.
 *
 *   LM_GPU_TEST_MAIN(tests)
 *
 * Whether the tests run is decided without the library (expect_gpu.h: LM_EXPECT_GPU, else the
 * CUDA runtime's own device count), and agreed by all ranks:
 *   - no GPU expected: the program skips (lm_test_skip_program: rank 0 prints "LM-SKIP: ...",
 *     exit 77, which tests/run-tests.sh counts as skipped, never as passed; run-tests.sh itself
 *     runs device tests only where LM_EXPECT_GPU=1); but a library that claims a GPU the runtime
 *     does not see fails (exit 1);
 *   - a GPU expected: every device call of the setup must work (cudaGetDeviceCount,
 *     lm_device_supported(kDLCUDA) == 1, cudaSetDevice, the stream): any failure is a FAIL
 *     (exit 1, each failing rank saying why), never a SKIP.
 * Then each rank selects device (local rank % count), creates a non-blocking stream
 * (lm_gpu_stream) and the tests run. Every helper copies in lm_gpu_stream's order (a cudaMemcpy
 * from pageable memory runs on the legacy stream, which a non-blocking stream is not ordered
 * with) and waits for it: test code may synchronize; the library must not.
 * The tests' meshes order their device work on a stream of the test (lm_gpu_mesh_on_stream):
 * lm_gpu_mesh_1d (all ranks, lm_gpu_stream), lm_gpu_mesh_reversed (all ranks, reversed),
 * lm_gpu_mesh_of (given parent ranks, given stream).
 */
#ifndef LM_GPU_TEST_H_
#define LM_GPU_TEST_H_

#include "lm_test.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include "expect_gpu.h"

static int lm_gpu_device = -1;
static cudaStream_t lm_gpu_stream = NULL;

#define LM_CUDA_OK(call)                                                                    \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "rank %d: %s failed: %s (%s:%d)\n", lm_test_rank(), #call,            \
              cudaGetErrorString(e_), __FILE__, __LINE__);                                  \
      fail();                                                                               \
    }                                                                                       \
  } while (0)

static LM_TEST_UNUSED DLDevice lm_gpu_dev(void) {
  DLDevice d = {kDLCUDA, lm_gpu_device};
  return d;
}

/* Copies `bytes` host bytes into device memory in the test stream's order, and waits. */
static LM_TEST_UNUSED void lm_gpu_copy_to(void *dev, const void *host, size_t bytes) {
  if (!bytes) return;
  LM_CUDA_OK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, lm_gpu_stream));
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
}

/* Device copy of `bytes` host bytes (cudaMalloc; 1 byte at least). */
static LM_TEST_UNUSED void *lm_gpu_upload(const void *host, size_t bytes) {
  void *d = NULL;
  LM_CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
  lm_gpu_copy_to(d, host, bytes);
  return d;
}

/* Copies device bytes to the host after the work enqueued so far on `stream`, and waits. */
static LM_TEST_UNUSED void lm_gpu_download_on(void *host, const void *dev, size_t bytes,
                                              cudaStream_t stream) {
  if (bytes) LM_CUDA_OK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  LM_CUDA_OK(cudaStreamSynchronize(stream));
}
static LM_TEST_UNUSED void lm_gpu_download(void *host, const void *dev, size_t bytes) {
  lm_gpu_download_on(host, dev, bytes, lm_gpu_stream);
}

/* Orders mesh m's device work on `stream` (a device config with that stream only). Collective. */
static LM_TEST_UNUSED void lm_gpu_mesh_on_stream(lm_mesh_t m, cudaStream_t stream) {
  lm_device_config_t dc = LM_DEVICE_CONFIG_INIT;
  dc.stream = stream;
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, &dc));
}

/* A 1-D mesh of the `n` parent ranks `ranks` (in that order), its device work on `stream`.
 * Collective over the job. */
static LM_TEST_UNUSED lm_mesh_t lm_gpu_mesh_of(const int *ranks, int n, cudaStream_t stream) {
  int64_t s[1] = {n};
  lm_mesh_config_t c = LM_MESH_CONFIG_INIT;
  c.ranks = ranks;
  c.nranks = n;
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, &c));
  lm_gpu_mesh_on_stream(m, stream);
  return m;
}

/* A 1-D mesh of all ranks in order (no mesh config), its device work on lm_gpu_stream. */
static LM_TEST_UNUSED lm_mesh_t lm_gpu_mesh_1d(void) {
  int64_t s[1] = {lm_test_size()};
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, s, NULL));
  lm_gpu_mesh_on_stream(m, lm_gpu_stream);
  return m;
}

/* A 1-D mesh of all ranks reversed (mesh rank i is job rank np-1-i), on lm_gpu_stream: the other
 * side of a cross-mesh reshard. */
static LM_TEST_UNUSED lm_mesh_t lm_gpu_mesh_reversed(void) {
  int np = lm_test_size(), rev[64];
  for (int i = 0; i < np; ++i) rev[i] = np - 1 - i;
  return lm_gpu_mesh_of(rev, np, lm_gpu_stream);
}

/* Whether two ranks of the job share a GPU, decided as NCCL does (and independently of the
 * library): the same host (NCCL_HOSTID where set) and the same PCI bus id. Collective. */
static LM_TEST_UNUSED int lm_gpu_ranks_share_gpu(void) {
  enum { kLen = 192 };
  char me[kLen] = {0}, host[96] = {0}, bus[64] = {0};
  const char *hid = getenv("NCCL_HOSTID");
  if (hid) snprintf(host, sizeof host, "%s", hid);
  else gethostname(host, sizeof host - 1);
  if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, lm_gpu_device) != cudaSuccess) {
    cudaGetLastError();
    snprintf(bus, sizeof bus, "?%d", lm_gpu_device);
  }
  snprintf(me, sizeof me, "%s|%s", host, bus);
  int np = lm_test_size(), share = 0;
  char *all = (char *)calloc((size_t)np, kLen);
  MPI_Allgather(me, kLen, MPI_CHAR, all, kLen, MPI_CHAR, MPI_COMM_WORLD);
  for (int i = 0; i < np; ++i)
    for (int j = i + 1; j < np; ++j) share |= strcmp(all + (size_t)i * kLen, all + (size_t)j * kLen) == 0;
  free(all);
  return share;
}

/* This rank's verdict: 1 run, 0 skip, -1 fail; why says why. */
static LM_TEST_UNUSED int lm_gpu_local_setup(char *why, size_t why_size) {
  char src[160];
  int expect = lm_expect_gpu(src, sizeof src), n = 0, sup = -1, lr = 0;
  if (expect < 0) {
    snprintf(why, why_size, "%s", src);
    return -1;
  }
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess) cudaGetLastError();
  lm_status_t st = lm_device_supported(kDLCUDA, &sup);
  if (!expect) {
    int runtime_decided = getenv("LM_EXPECT_GPU") == NULL || !*getenv("LM_EXPECT_GPU");
    if (runtime_decided && st == LM_SUCCESS && sup == 1) {
      snprintf(why, why_size, "lm_device_supported(kDLCUDA) = 1 but %s", src);
      return -1;
    }
    snprintf(why, why_size, "no GPU expected (%s)", src);
    return 0;
  }
  if (ce != cudaSuccess || n < 1) {
    snprintf(why, why_size, "%s but cudaGetDeviceCount: %s, %d devices", src,
             ce != cudaSuccess ? cudaGetErrorString(ce) : "success", n);
    return -1;
  }
  if (st != LM_SUCCESS || sup != 1) {
    snprintf(why, why_size, "%s and the runtime sees %d devices, but lm_device_supported(kDLCUDA) "
             "gives status %d, supported %d: %s", src, n, (int)st, sup, lm_last_error_message());
    return -1;
  }
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &lr);
  MPI_Comm_free(&local);
  lm_gpu_device = lr % n;
  if ((ce = cudaSetDevice(lm_gpu_device)) != cudaSuccess ||
      (ce = cudaStreamCreateWithFlags(&lm_gpu_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    snprintf(why, why_size, "%s but cudaSetDevice(%d) / cudaStreamCreateWithFlags failed: %s", src,
             lm_gpu_device, cudaGetErrorString(ce));
    return -1;
  }
  return 1;
}

/* Collective: 1 run, 0 skip (every rank expects no GPU), -1 fail (some rank failed). */
static LM_TEST_UNUSED int lm_gpu_setup(char *why, size_t why_size) {
  int mine = lm_gpu_local_setup(why, why_size), all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (mine < 0) fprintf(stderr, "FAIL: rank %d: %s\n", lm_test_rank(), why);
  if (all < 0 && mine >= 0) snprintf(why, why_size, "the device setup failed on another rank");
  return all;
}

/* Sets an environment variable before main, on every rank: the library reads each setting once
 * per process, at first use, so a test program that needs one (a fault hook, a forced transport)
 * sets it here, never with setenv between tests. */
#define LM_GPU_TEST_ENV(name, value)                                                  \
  __attribute__((constructor)) static void lm_gpu_test_env_(void) { setenv(name, value, 1); }

#define LM_GPU_TEST_MAIN(tests)                                                                   \
  int main(int argc, char **argv) {                                                              \
    char why_[512];                                                                               \
    lm_test_init(&argc, &argv);                                                                   \
    int setup_ = lm_gpu_setup(why_, sizeof why_);                                                 \
    if (setup_ == 0) lm_test_skip_program(why_); /* "LM-SKIP: ...", exit 77 */                     \
    if (setup_ < 0) {                                                                             \
      if (lm_test_rank() == 0) printf("FAIL: %s: %s\n", lm_test_basename(argv[0]), why_);        \
      fflush(stdout);                                                                             \
      MPI_Finalize();                                                                             \
      return 1;                                                                                   \
    }                                                                                             \
    return lm_test_run((tests), sizeof(tests) / sizeof((tests)[0]), lm_test_basename(argv[0]));   \
  }

#endif /* LM_GPU_TEST_H_ */
