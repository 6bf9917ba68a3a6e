/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_test.h: the harness of the device tests (tests/gpu/), on top of tests/lm_test.h.
 *
 *   LM_GPU_TEST_MAIN(tests)
 *
 * Like LM_TEST_MAIN, but first every rank asks lm_device_supported(kDLCUDA); unless every rank has
 * a device, rank 0 prints ONE line "SKIP: ..." and the program exits 77, which tests/run-tests.sh
 * counts as skipped (never as passed). Otherwise each rank selects device (local rank % count),
 * creates a non-blocking stream (lm_gpu_stream) and the tests run.
 * Helpers copy between host and device synchronously (test code may synchronize; the library
 * must not).
 */
#ifndef LM_GPU_TEST_H_
#define LM_GPU_TEST_H_

#include "lm_test.h"

#include <cuda_runtime.h>

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

/* Device copy of `bytes` host bytes (cudaMalloc; 1 byte at least). */
static LM_TEST_UNUSED void *lm_gpu_upload(const void *host, size_t bytes) {
  void *d = NULL;
  LM_CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
  if (bytes) LM_CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

/* Waits for the test stream, then copies device bytes to the host. */
static LM_TEST_UNUSED void lm_gpu_download(void *host, const void *dev, size_t bytes) {
  LM_CUDA_OK(cudaStreamSynchronize(lm_gpu_stream));
  if (bytes) LM_CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* Every rank has a device: select it and make the stream. Collective. */
static LM_TEST_UNUSED int lm_gpu_setup(char *why, size_t why_size) {
  int sup = 0, all = 0, n = 0, lr = 0;
  lm_status_t st = lm_device_supported(kDLCUDA, &sup);
  if (st != LM_SUCCESS) sup = 0;
  MPI_Allreduce(&sup, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all) {
    cudaError_t e = cudaGetDeviceCount(&n);
    snprintf(why, why_size, "no CUDA device on %s (lm_device_supported(kDLCUDA) = 0; %s)",
             sup ? "some rank" : "this machine",
             e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 0;
  }
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &lr);
  MPI_Comm_free(&local);
  cudaGetDeviceCount(&n);
  lm_gpu_device = lr % (n > 0 ? n : 1);
  sup = cudaSetDevice(lm_gpu_device) == cudaSuccess &&
        cudaStreamCreateWithFlags(&lm_gpu_stream, cudaStreamNonBlocking) == cudaSuccess;
  MPI_Allreduce(&sup, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all) { /* agreed, so no rank runs the tests alone */
    snprintf(why, why_size, "cudaSetDevice/cudaStreamCreate failed on some rank");
    return 0;
  }
  return 1;
}

#define LM_GPU_TEST_MAIN(tests)                                                                   \
  int main(int argc, char **argv) {                                                              \
    char why_[256];                                                                               \
    lm_test_init(&argc, &argv);                                                                   \
    if (!lm_gpu_setup(why_, sizeof why_)) {                                                       \
      if (lm_test_rank() == 0) printf("SKIP: %s: %s\n", lm_test_basename(argv[0]), why_);        \
      fflush(stdout);                                                                             \
      MPI_Finalize();                                                                             \
      return 77;                                                                                  \
    }                                                                                             \
    return lm_test_run((tests), sizeof(tests) / sizeof((tests)[0]), lm_test_basename(argv[0]));   \
  }

#endif /* LM_GPU_TEST_H_ */
