// SPDX-License-Identifier: BSD-3-Clause
// The header-only C++ wrapper (include/localmap.hpp): RAII handles, exceptions, local_map with a
// lambda (an exception thrown in it on one rank becomes an error on every rank).
// lm-test-np: 1 2 3 4 8
#include "lm_test.h"

#include <localmap.hpp>
// Declarations only (no ScaLAPACK linked): compiles as C++ with -Wpedantic, extern "C" guarded.
#include <localmap_scalapack.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace lmx = localmap;

static_assert(LM_SCALAPACK_DESC_DTYPE == 0 && LM_SCALAPACK_DESC_LLD == LM_SCALAPACK_DLEN - 1,
              "localmap_scalapack.h: the descriptor entries are 0-based C indices of DLEN ints");

static void test_mesh_and_tensor_raii(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n}, {"dp"});
  LM_ASSERT_ALL(m.ndim() == 1 && m.size() == n && m.is_member() && m.dim("dp") == 0);
  LM_ASSERT_ALL(m.coord()[0] == lm_test_rank());
  std::vector<double> full(13 * 3);
  for (size_t i = 0; i < full.size(); ++i) full[i] = (double)i;
  int64_t g[2] = {13, 3};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m, &gt, {lmx::shard(0)});
  lmx::dist_tensor copy = x;  // retains
  lmx::dist_tensor r = copy.reshard({lmx::replicate()});
  LM_ASSERT_ALL(r.global_shape() == lmx::shape({13, 3}) && r.local_shape() == lmx::shape({13, 3}));
  int ok = 1;
  for (int i = 0; i < 39; ++i) ok &= r.local_data<double>()[i] == (double)i;
  LM_ASSERT_ALL(ok);
  LM_ASSERT_ALL(lmx::to_string(x.placement()) == "[S(0)]");
  x = lmx::dist_tensor();  // drop one reference; copy still works
  std::vector<double> back(39, -1);
  DLTensor bt = {back.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  copy.gather(&bt);
  LM_ASSERT_ALL(back[38] == 38.0 && back[0] == 0.0);
  // The transpose [3, 13] in row shards: element (j, i) is full[i * 3 + j].
  lmx::dist_tensor t = copy.transpose({1, 0}, {lmx::shard(0)});
  std::vector<double> tb(39, -1);
  int64_t tg[2] = {3, 13};
  DLTensor tt = {tb.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, tg, nullptr, 0};
  t.gather(&tt);
  ok = t.global_shape() == lmx::shape({3, 13});
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 13; ++i) ok &= tb[(size_t)(j * 13 + i)] == full[(size_t)(i * 3 + j)];
  LM_ASSERT_ALL(ok);
}

static void test_errors_throw(void **) {
  lmx::mesh m = lmx::mesh::world({lm_test_size()});
  int thrown = 0;
  lm_status_t st = LM_SUCCESS;
  try {
    lmx::dist_tensor::zeros(m, {4}, LM_DTYPE(kDLFloat, 32), {lmx::shard(3)});
  } catch (const lmx::error &e) {
    thrown = 1;
    st = e.status();
    LM_ASSERT_ALL(std::strstr(e.what(), "Shard dim 3") != nullptr);
  }
  LM_ASSERT_ALL(thrown && st == LM_ERR_INVALID_ARGUMENT);
}

static void test_plan(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  lmx::reshard_plan p(m, {lmx::shard(0)}, nullptr, {lmx::shard(1)}, {7, 5}, LM_DTYPE(kDLInt, 64));
  lmx::dist_tensor src = lmx::dist_tensor::zeros(m, {7, 5}, LM_DTYPE(kDLInt, 64), {lmx::shard(0)});
  lmx::shape off = src.local_offset(), ls = src.local_shape();
  int64_t *d = src.local_data<int64_t>();
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < 5; ++j) d[i * 5 + j] = (off[0] + i) * 5 + j;
  lmx::dist_tensor dst = p.alloc_target();
  p.execute(src, dst);
  lmx::shape o2 = dst.local_offset(), l2 = dst.local_shape();
  int ok = 1;
  const int64_t *e = dst.local_data<int64_t>();
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < l2[1]; ++j) ok &= e[i * l2[1] + j] == i * 5 + o2[1] + j;
  LM_ASSERT_ALL(ok);
  LM_ASSERT_ALL(!p.describe().empty() && p.bytes_sent() >= 0);
  // Every element of the 7 x 5 int64 target is received or copied once, over all ranks.
  const lm_reshard_plan_info_t mine = p.info(), all = p.info(true);
  LM_ASSERT_ALL(mine.bytes_sent == p.bytes_sent() && all.bytes_sent == all.bytes_received &&
                all.bytes_received + all.bytes_copied == 7 * 5 * 8 && all.steps == n);
  // The backward plan runs S(1) -> S(0), and brings the values back.
  lmx::reshard_plan back = p.adjoint();
  lmx::dist_tensor again = back.alloc_target();
  back.execute(dst, again);
  const int64_t *a = again.local_data<int64_t>();
  for (int64_t i = 0; i < ls[0]; ++i)
    for (int64_t j = 0; j < 5; ++j) ok &= a[i * 5 + j] == (off[0] + i) * 5 + j;
  LM_ASSERT_ALL(ok && lmx::to_string(lmx::placements_adjoint({lmx::partial(LM_REDUCE_SUM)})) == "[R]");
}

static int64_t one[1] = {1};
static void drop(DLManagedTensor *m) {
  std::free(m->dl_tensor.data);
  std::free(m);
}

static void test_local_map_lambda(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> full(10);
  for (int i = 0; i < 10; ++i) full[i] = i + 1;  // sum 55
  int64_t g[1] = {10};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, g, nullptr, 0};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m, &gt, {lmx::shard(0)});
  auto sum = [](lm_mesh_t, const std::vector<lm_arg_t> &in, std::vector<lm_arg_t> &out) {
    const DLTensor *t = static_cast<const DLTensor *>(in[0].ptr);
    auto *s = static_cast<double *>(std::calloc(1, sizeof(double)));
    auto *mt = static_cast<DLManagedTensor *>(std::calloc(1, sizeof(DLManagedTensor)));
    for (int64_t i = 0; i < t->shape[0]; ++i) *s += static_cast<const double *>(t->data)[i];
    mt->dl_tensor = DLTensor{s, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, one, nullptr, 0};
    mt->deleter = drop;
    out[0].kind = LM_ARG_MANAGED_TENSOR;
    out[0].ptr = mt;
    out[1] = lmx::arg_i64(t->shape[0]);
  };
  lmx::local_map_result r = lmx::local_map(sum, {lmx::arg(x)}, {{lmx::partial()}, {}});
  LM_ASSERT_ALL(r.tensors[0] && !r.tensors[1] && r.args[1].kind == LM_ARG_INT64);
  {
    // Empty out placements for a tensor output: a plain local tensor, owned by r.locals[0].
    lmx::local_map_result p = lmx::local_map(sum, {lmx::arg(x)}, {{}, {}});
    LM_ASSERT_ALL(!p.tensors[0] && p.locals[0] && p.args[0].kind == LM_ARG_MANAGED_TENSOR &&
                  p.locals[0]->dl_tensor.ndim == 1);
  }
  double total = 0;
  DLTensor tt = {&total, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, one, nullptr, 0};
  r.tensors[0].gather(&tt);
  LM_ASSERT_ALL(total == 55.0);

  // A lambda that throws on the last rank only: every rank gets an error, none hangs.
  const int bad = n - 1;
  auto throws = [bad](lm_mesh_t, const std::vector<lm_arg_t> &, std::vector<lm_arg_t> &) {
    if (lm_test_rank() == bad) throw std::runtime_error("shape check failed in user code");
  };
  lm_status_t st = LM_SUCCESS;
  std::string msg;
  try {
    lmx::local_map(throws, {lmx::arg(x)}, {{}});
  } catch (const lmx::error &e) {
    st = e.status();
    msg = e.what();
  }
  if (lm_test_rank() == bad)
    LM_ASSERT_ALL(st == LM_ERR_USER && msg.find("shape check failed") != std::string::npos);
  else
    LM_ASSERT_ALL(st == LM_ERR_REMOTE);
}

// The C header's value macros and helpers from ISO C++ (this file builds with -Wpedantic
// -Werror): LM_CPU, LM_FLOAT32 ..., LM_PLACEMENT_*, lm_arg_* builders, lm_tensor_alloc.
static lm_status_t c_api_sum(void *, lm_mesh_t, int nin, const lm_arg_t *in, int nout,
                             lm_arg_t *out) {
  if (nin != 2 || nout != 2 || in[1].kind != LM_ARG_INT64) return LM_ERR_INVALID_ARGUMENT;
  const DLTensor *t = static_cast<const DLTensor *>(in[0].ptr);
  DLManagedTensor *s = nullptr;
  lm_status_t st = lm_tensor_alloc(&s, 0, nullptr, LM_FLOAT64, LM_CPU);
  if (st != LM_SUCCESS) return st;
  double *v = static_cast<double *>(s->dl_tensor.data);
  for (int64_t i = 0; i < t->shape[0]; ++i) *v += static_cast<const double *>(t->data)[i];
  *v *= static_cast<double>(in[1].i64);
  out[0] = lm_arg_managed(s);
  out[1] = lm_arg_f64(0.5);
  return LM_SUCCESS;
}

static void test_c_macros_from_cpp(void **) {
  const int n = lm_test_size();
  int comm = 0;
  LM_ASSERT_OK_ALL(lm_comm_world(&comm));
  int64_t ms[1] = {n}, g[1] = {10};
  lm_mesh_t mesh = nullptr;
  LM_ASSERT_OK_ALL(lm_mesh_create(&mesh, comm, 1, ms, nullptr));
  lm_placement_t sh[1] = {LM_PLACEMENT_SHARD(0)}, rep[1] = {LM_PLACEMENT_REPLICATE},
                 psum[1] = {LM_PLACEMENT_PARTIAL(LM_REDUCE_SUM)};
  LM_ASSERT_ALL(sh[0].kind == LM_SHARD && rep[0].kind == LM_REPLICATE && psum[0].reduce_op == LM_REDUCE_SUM);
  DLDataType f32 = LM_FLOAT32, i8 = LM_INT8, b = LM_BOOL;
  LM_ASSERT_ALL(f32.bits == 32 && f32.lanes == 1 && i8.code == kDLInt && b.code == LM_DL_BOOL);
  std::vector<double> full(10);
  for (int i = 0; i < 10; ++i) full[i] = i + 1;  // sum 55
  DLTensor gt = {full.data(), LM_CPU, 1, LM_FLOAT64, g, nullptr, 0};
  lm_dist_tensor_t x = nullptr;
  LM_ASSERT_OK_ALL(lm_dist_tensor_from_global(&x, mesh, &gt, sh, -1));
  lm_arg_t in[2] = {lm_arg_dist(x), lm_arg_i64(2)};
  const lm_placement_t *out_pl[2] = {psum, nullptr};
  lm_arg_t out[2] = {lm_arg_none(), lm_arg_none()};
  LM_ASSERT_OK_ALL(lm_local_map(c_api_sum, nullptr, 2, in, nullptr, 2, out_pl, nullptr, nullptr,
                                0, out));
  LM_ASSERT_ALL(out[0].kind == LM_ARG_DIST_TENSOR && out[1].kind == LM_ARG_DOUBLE &&
                out[1].f64 == 0.5);
  double total = 0;
  DLTensor tt = {&total, LM_CPU, 0, LM_FLOAT64, nullptr, nullptr, 0};
  lm_dist_tensor_t r = static_cast<lm_dist_tensor_t>(out[0].ptr);
  LM_ASSERT_OK_ALL(lm_dist_tensor_gather(r, -1, &tt));
  LM_ASSERT_ALL(total == 110.0);
  lm_arg_t p = lm_arg_ptr(&total), t = lm_arg_tensor(&tt);
  LM_ASSERT_ALL(p.kind == LM_ARG_POINTER && p.ptr == &total && t.kind == LM_ARG_TENSOR);
  LM_ASSERT_OK(lm_dist_tensor_destroy(&r));
  LM_ASSERT_OK(lm_dist_tensor_destroy(&x));
  LM_ASSERT_OK(lm_mesh_destroy(&mesh));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_c_macros_from_cpp),
    cmocka_unit_test(test_mesh_and_tensor_raii),
    cmocka_unit_test(test_errors_throw),
    cmocka_unit_test(test_plan),
    cmocka_unit_test(test_local_map_lambda),
};

LM_TEST_MAIN(tests)
