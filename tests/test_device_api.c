/* SPDX-License-Identifier: BSD-3-Clause */
/* The device API as far as a machine without a GPU can exercise it, with and without the device
 * component (liblocalmap-cuda.so.N: a CUDA=0 build has none, and tests/script_device_component.sh
 * runs this program with LM_DEVICE_COMPONENT naming a missing file): lm_device_supported,
 * lm_mesh_transport, lm_mesh_set_device_config / lm_mesh_device_config (defaults, round trip, older
 * smaller structs, bad configs), and the refusal of kDLCUDA tensors where no device can hold them
 * (never a crash or an abort of the CUDA runtime), with the reason this build and machine call for
 * ("no GPU on this machine" with the component on a machine without one; without the component,
 * what is missing and where it was looked for). tests/gpu/ runs the device paths themselves where
 * a GPU is present. */
// lm-test-np: 1 2
#include "lm_test.h"

#include <glob.h>
#include <localmap.h>
#include <stddef.h>
#include <string.h>

#include "gpu/expect_gpu.h"

static int msg_has(const char *word) { return strstr(lm_last_error_message(), word) != NULL; }

/* Whether this machine shows a GPU: an NVIDIA device node, as the Makefile's GPU_SEEN decides
 * (never the library under test). */
static int gpu_node_seen(void) {
  glob_t g;
  memset(&g, 0, sizeof g);
  int seen = glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return seen;
}

/* Without the device component: the message names it, says device support is missing, and
 * where it was looked for: the file LM_DEVICE_COMPONENT names with the loader's own words, or
 * beside the library and on the search path. */
static int names_missing_component(void) {
  const char *env = getenv("LM_DEVICE_COMPONENT");
  if (!msg_has("kDLCUDA is not supported here") || !msg_has("device support is not available"))
    return 0;
  if (env && *env)
    return msg_has("LM_DEVICE_COMPONENT=") && msg_has(env) && msg_has("dlopen of") &&
           msg_has("failed");
  return msg_has("liblocalmap-cuda.so.") && msg_has("was not found: not beside") &&
         msg_has("library search path") && msg_has("CUDA=0");
}

/* The reason of the last refusal of a kDLCUDA tensor, as this build and machine call for (issue
 * 18): without the device component, that it is missing and where it was looked for; with it,
 * that no device is visible and, on a machine that shows no GPU, "no GPU on this machine" (the
 * library's reason, src/device/runtime.cpp; the Makefile's CUDA=auto says the same,
 * tests/script_cuda_auto.sh), never the runtime's "CUDA driver version is insufficient", which
 * would send a user after a driver upgrade. A driver that is there but fails may say what the
 * runtime says. */
static int refusal_reason_pinned(int component) {
  const char *msg = lm_last_error_message();
  int ok = component ? msg_has("no CUDA device is visible") && !msg_has("insufficient") &&
                           (gpu_node_seen() || msg_has("(no GPU on this machine"))
                     : names_missing_component();
  if (!ok)
    lm_test__diag("rank %d: %s device component, %s GPU device node: refusal reason \"%s\"\n",
                  lm_test_rank(), component ? "a" : "no", gpu_node_seen() ? "a" : "no", msg);
  return ok;
}

static lm_mesh_t mesh_1d(void) {
  int64_t shape[1] = {lm_test_size()};
  lm_mesh_t m = NULL;
  LM_ASSERT_OK_ALL(lm_mesh_create(&m, lm_test_comm_f(), 1, shape, NULL));
  return m;
}

static void *fake_alloc(void *ctx, size_t bytes, int dev, void *stream) {
  (void)ctx; (void)bytes; (void)dev; (void)stream;
  return NULL;
}
static void fake_free(void *ctx, void *p, size_t bytes, int dev, void *stream) {
  (void)ctx; (void)p; (void)bytes; (void)dev; (void)stream;
}

static void test_supported_and_transport(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  int sup = -1, tr = -1;
  /* Whether the device component is there, told by the file system, not by the library
   * (expect_gpu.h). */
  const int component = lm_device_component_present();
  LM_ASSERT_OK_ALL(lm_device_supported(kDLCUDA, &sup));
  /* The answer the build and machine call for, decided outside the library (LM_EXPECT_GPU). */
  if (lm_test_expect_gpu() < 0) lm_test_skip("LM_EXPECT_GPU is not set (tests/run-tests.sh sets it)");
  if (sup != lm_test_expect_gpu())
    lm_test__diag("rank %d: lm_device_supported(kDLCUDA) = %d, LM_EXPECT_GPU = %d\n", lm_test_rank(),
                  sup, lm_test_expect_gpu());
  LM_ASSERT_ALL(sup == lm_test_expect_gpu());
  LM_ASSERT_OK_ALL(lm_device_supported(kDLROCM, &sup));
  LM_ASSERT_ALL(sup == 0);
  LM_ASSERT_OK_ALL(lm_mesh_transport(m, kDLCPU, &tr));
  LM_ASSERT_ALL(tr == LM_TRANSPORT_MPI);
  lm_status_t st = lm_mesh_transport(m, kDLCUDA, &tr);
  if (component) { /* the component loads: nothing moved yet */
    LM_ASSERT_ALL(st == LM_SUCCESS && tr == LM_TRANSPORT_UNDECIDED);
  } else { /* what is missing, and where it was looked for */
    LM_ASSERT_ALL(st == LM_ERR_NOT_SUPPORTED && names_missing_component());
  }
  LM_EXPECT_ALL(lm_mesh_transport(m, kDLROCM, &tr), LM_ERR_NOT_SUPPORTED, "device_type");
  LM_EXPECT_ALL(lm_mesh_transport(m, kDLCPU, NULL), LM_ERR_INVALID_ARGUMENT, "transport");
  LM_EXPECT_ALL(lm_mesh_transport(NULL, kDLCPU, &tr), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static void test_device_config(void **state) {
  (void)state;
  lm_mesh_t m = mesh_1d();
  lm_device_config_t c = LM_DEVICE_CONFIG_INIT, got = LM_DEVICE_CONFIG_INIT;
  got.stream = (void *)1;
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &got));
  LM_ASSERT_ALL(got.stream == NULL && got.alloc == NULL && got.free == NULL &&
                got.magic == LM_DEVICE_CONFIG_MAGIC && got.size == sizeof got);
  /* Round trip: the stream and allocator are stored (nothing uses them without device work). */
  c.stream = (void *)0x1234;
  c.alloc = fake_alloc;
  c.free = fake_free;
  c.alloc_ctx = &c;
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, &c));
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &got));
  LM_ASSERT_ALL(got.stream == (void *)0x1234 && got.alloc == fake_alloc && got.free == fake_free &&
                got.alloc_ctx == &c);
  /* An older, smaller struct (up to the stream): the allocator goes back to the default. */
  lm_device_config_t old = LM_DEVICE_CONFIG_INIT;
  old.size = offsetof(lm_device_config_t, alloc);
  old.stream = (void *)0x42;
  old.alloc = fake_alloc; /* beyond old.size: not read */
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, &old));
  got = (lm_device_config_t)LM_DEVICE_CONFIG_INIT;
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &got));
  LM_ASSERT_ALL(got.stream == (void *)0x42 && got.alloc == NULL && got.free == NULL);
  /* Reading into an older struct writes its size only. */
  lm_device_config_t small = LM_DEVICE_CONFIG_INIT;
  small.size = offsetof(lm_device_config_t, alloc);
  small.alloc = fake_alloc;
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &small));
  LM_ASSERT_ALL(small.stream == (void *)0x42 && small.alloc == fake_alloc &&
                small.size == offsetof(lm_device_config_t, alloc));
  /* NULL restores the defaults. */
  LM_ASSERT_OK_ALL(lm_mesh_set_device_config(m, NULL));
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &got));
  LM_ASSERT_ALL(got.stream == NULL);
  /* Bad configs: no effect. */
  c = (lm_device_config_t)LM_DEVICE_CONFIG_INIT;
  c.stream = (void *)0x99;
  c.magic = 0;
  LM_EXPECT_ALL(lm_mesh_set_device_config(m, &c), LM_ERR_INVALID_ARGUMENT, "magic");
  c.magic = LM_DEVICE_CONFIG_MAGIC;
  c.size = 4;
  LM_EXPECT_ALL(lm_mesh_set_device_config(m, &c), LM_ERR_INVALID_ARGUMENT, "size");
  c.size = sizeof c;
  c.version = 0;
  LM_EXPECT_ALL(lm_mesh_set_device_config(m, &c), LM_ERR_INVALID_ARGUMENT, "version");
  c.version = LM_DEVICE_CONFIG_VERSION;
  c.alloc = fake_alloc;
  LM_EXPECT_ALL(lm_mesh_set_device_config(m, &c), LM_ERR_INVALID_ARGUMENT, "alloc");
  c.alloc = NULL;
  c.free = fake_free;
  LM_EXPECT_ALL(lm_mesh_set_device_config(m, &c), LM_ERR_INVALID_ARGUMENT, "free");
  LM_EXPECT_ALL(lm_mesh_set_device_config(NULL, &c), LM_ERR_INVALID_ARGUMENT, "mesh");
  LM_EXPECT_ALL(lm_mesh_device_config(m, NULL), LM_ERR_INVALID_ARGUMENT, "config");
  got.size = 3;
  LM_EXPECT_ALL(lm_mesh_device_config(m, &got), LM_ERR_INVALID_ARGUMENT, "size");
  got = (lm_device_config_t)LM_DEVICE_CONFIG_INIT;
  LM_ASSERT_OK_ALL(lm_mesh_device_config(m, &got));
  LM_ASSERT_ALL(got.stream == NULL); /* the refused calls changed nothing */
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

/* Without a usable device, every way to put a tensor on kDLCUDA is refused clearly. */
static void test_refusals_without_device(void **state) {
  (void)state;
  int sup = -1;
  LM_ASSERT_OK_ALL(lm_device_supported(kDLCUDA, &sup));
  if (lm_test_expect_gpu() < 0) lm_test_skip("LM_EXPECT_GPU is not set (tests/run-tests.sh sets it)");
  LM_ASSERT_ALL(sup == lm_test_expect_gpu());
  if (sup) lm_test_skip("a GPU machine: no refusals to check (tests/gpu/ runs the device paths)");
  lm_mesh_t m = mesh_1d();
  lm_placement_t pl[1] = {LM_PLACEMENT_REPLICATE};
  int64_t g[1] = {8};
  DLDevice cuda = {kDLCUDA, 0};
  lm_dist_tensor_t t = NULL;
  LM_EXPECT_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT32, cuda, pl), LM_ERR_NOT_SUPPORTED, "kDLCUDA");
  LM_ASSERT_ALL(t == NULL);
  LM_ASSERT_ALL(refusal_reason_pinned(lm_device_component_present()));
  float buf[8] = {0};
  DLTensor loc = {buf, cuda, 1, LM_FLOAT32, g, NULL, 0};
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &loc, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_BORROW),
                LM_ERR_NOT_SUPPORTED, "kDLCUDA");
  LM_EXPECT_ALL(lm_dist_tensor_from_local(&t, m, &loc, pl, LM_SHAPE_GIVEN, g, LM_FROM_LOCAL_COPY),
                LM_ERR_NOT_SUPPORTED, "kDLCUDA");
  lm_reshard_plan_t p = NULL;
  LM_ASSERT_OK_ALL(lm_reshard_plan_create(&p, m, pl, NULL, pl, 1, g, LM_FLOAT32));
  LM_EXPECT_ALL(lm_reshard_plan_alloc_target(&t, p, cuda), LM_ERR_NOT_SUPPORTED, "kDLCUDA");
  LM_ASSERT_ALL(t == NULL);
  LM_ASSERT_ALL(refusal_reason_pinned(lm_device_component_present()));
  LM_ASSERT_OK_ALL(lm_reshard_plan_destroy(&p));
  /* The mesh still works. */
  LM_ASSERT_OK_ALL(lm_dist_tensor_zeros(&t, m, 1, g, LM_FLOAT32, LM_CPU, pl));
  LM_ASSERT_OK_ALL(lm_dist_tensor_destroy(&t));
  LM_ASSERT_OK_ALL(lm_mesh_destroy(&m));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_supported_and_transport),
    cmocka_unit_test(test_device_config),
    cmocka_unit_test(test_refusals_without_device),
};
LM_TEST_MAIN(tests)
