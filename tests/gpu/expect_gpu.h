/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * expect_gpu.h: whether a test must find a GPU, decided WITHOUT the library under test (issue 23),
 * for the device tests (gpu_test.h) and the CPU tests that pin lm_device_supported's answer.
 *
 *   lm_expect_gpu(why, n)        1 or 0; -1 when LM_EXPECT_GPU is set to neither. From
 *                                LM_EXPECT_GPU=0|1 when set (make sets it: 0 in CUDA=0 builds, 1
 *                                under CUDA=sim; CI and tests/gpu/device-check.sh set it for the
 *                                machine), else from the CUDA runtime's own device count.
 *   lm_cuda_runtime_loaded()     1 when a CUDA runtime (CUDA's or the simulator's) is in this
 *                                process: the library is a CUDA build.
 * The runtime is found with dlsym in the running process (liblocalmap of a CUDA build brings
 * libcudart or libcudasim along), so a CPU test needs no CUDA header or library of its own.
 */
#ifndef LM_EXPECT_GPU_H_
#define LM_EXPECT_GPU_H_

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A function of the CUDA runtime loaded in this process, or NULL. */
static inline void *lm_cuda_runtime_fn(const char *name) {
  void *self = dlopen(NULL, RTLD_LAZY);
  void *f = self ? dlsym(self, name) : NULL;
  if (self) dlclose(self);
  return f;
}

static inline int lm_cuda_runtime_loaded(void) {
  return lm_cuda_runtime_fn("cudaGetDeviceCount") != NULL;
}

static inline int lm_expect_gpu(char *why, size_t n) {
  const char *e = getenv("LM_EXPECT_GPU");
  if (e && *e) {
    if ((e[0] == '0' || e[0] == '1') && e[1] == 0) {
      snprintf(why, n, "LM_EXPECT_GPU=%s", e);
      return e[0] - '0';
    }
    snprintf(why, n, "LM_EXPECT_GPU=%s is neither 0 nor 1", e);
    return -1;
  }
  int (*count_fn)(int *) = NULL, (*clear_fn)(void) = NULL;
  void *f = lm_cuda_runtime_fn("cudaGetDeviceCount"), *g = lm_cuda_runtime_fn("cudaGetLastError");
  memcpy(&count_fn, &f, sizeof f); /* POSIX: a data pointer from dlsym names the function */
  memcpy(&clear_fn, &g, sizeof g);
  if (!count_fn) {
    snprintf(why, n, "no CUDA runtime in this process (a CUDA=0 build)");
    return 0;
  }
  int count = 0, rc = count_fn(&count);
  if (rc != 0) {
    if (clear_fn) clear_fn();
    snprintf(why, n, "the CUDA runtime's cudaGetDeviceCount failed (error %d): no GPU", rc);
    return 0;
  }
  snprintf(why, n, "the CUDA runtime's cudaGetDeviceCount = %d", count);
  return count > 0;
}

#endif /* LM_EXPECT_GPU_H_ */
