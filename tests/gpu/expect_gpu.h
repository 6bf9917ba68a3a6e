/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * expect_gpu.h: whether a test must find a GPU, decided WITHOUT the library under test (issue 23),
 * for the device tests (gpu_test.h) and the CPU tests that pin lm_device_supported's answer.
 *
 *   lm_expect_gpu(why, n)        1 or 0; -1 when LM_EXPECT_GPU is set to neither. From
 *                                LM_EXPECT_GPU=0|1 when set (make sets it: 0 in CUDA=0 builds, 1
 *                                under CUDA=sim; CI and tests/gpu/device-check.sh set it for the
 *                                machine), else from the CUDA runtime's own device count.
 *   lm_device_component_present()  1 when the library's device component (liblocalmap-cuda.so.N,
 *                                the only part of it that links CUDA and NCCL) is where the library
 *                                looks for it: the file LM_DEVICE_COMPONENT names when set, else
 *                                beside liblocalmap (or the program that links it statically), else
 *                                on the library search path; decided from the file system, not by
 *                                asking the library.
 * A CPU test needs no CUDA header or library of its own: where no CUDA runtime is in the process,
 * lm_expect_gpu's fallback loads the component itself (RTLD_LOCAL) and asks the runtime it brings.
 */
#ifndef LM_EXPECT_GPU_H_
#define LM_EXPECT_GPU_H_

#include <dlfcn.h>
#include <localmap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LM_EXPECT_GPU_STR2(x) #x
#define LM_EXPECT_GPU_STR(x) LM_EXPECT_GPU_STR2(x)
#define LM_DEVICE_COMPONENT_NAME "liblocalmap-cuda.so." LM_EXPECT_GPU_STR(LM_VERSION_MAJOR)

/* A function of the CUDA runtime loaded in this process, or NULL. */
static inline void *lm_cuda_runtime_fn(const char *name) {
  void *self = dlopen(NULL, RTLD_LAZY);
  void *f = self ? dlsym(self, name) : NULL;
  if (self) dlclose(self);
  return f;
}

/* Where the library would find its device component: 1 and its path in `path` (n bytes), or 0.
 * Beside liblocalmap: the folder liblocalmap.so is mapped from (/proc/self/maps). */
static inline int lm_device_component_path(char *path, size_t n) {
  const char *env = getenv("LM_DEVICE_COMPONENT");
  path[0] = 0;
  if (env && *env) {
    snprintf(path, n, "%s", env);
    return access(env, R_OK) == 0;
  }
  FILE *maps = fopen("/proc/self/maps", "r"); /* where liblocalmap.so is mapped from */
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) {
    char *file = strchr(line, '/'), *lib = strstr(line, "/liblocalmap.so.");
    if (!file || !lib) continue;
    snprintf(path, n, "%.*s/%s", (int)(lib - file), file, LM_DEVICE_COMPONENT_NAME);
    break;
  }
  if (maps) fclose(maps);
  if (path[0] && access(path, R_OK) == 0) return 1;
  void *h = dlopen(LM_DEVICE_COMPONENT_NAME, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return 0;
  snprintf(path, n, "%s", LM_DEVICE_COMPONENT_NAME);
  dlclose(h);
  return 1;
}

static inline int lm_device_component_present(void) {
  char p[4096];
  return lm_device_component_path(p, sizeof p);
}

/* cudaGetDeviceCount of the runtime in this process, or of the one the device component brings
 * (loaded here, RTLD_LOCAL); NULL when neither is there. */
static inline void *lm_cuda_count_fn(void **clear) {
  void *f = lm_cuda_runtime_fn("cudaGetDeviceCount");
  *clear = lm_cuda_runtime_fn("cudaGetLastError");
  if (f) return f;
  char p[4096];
  if (!lm_device_component_path(p, sizeof p)) return NULL;
  void *h = dlopen(p, RTLD_LAZY | RTLD_LOCAL); /* kept: the runtime stays loaded */
  if (!h) return NULL;
  *clear = dlsym(h, "cudaGetLastError");
  return dlsym(h, "cudaGetDeviceCount");
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
  void *g = NULL, *f = lm_cuda_count_fn(&g);
  memcpy(&count_fn, &f, sizeof f); /* POSIX: a data pointer from dlsym names the function */
  memcpy(&clear_fn, &g, sizeof g);
  if (!count_fn) {
    snprintf(why, n, "no CUDA runtime in this process and no device component (a CUDA=0 build)");
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
