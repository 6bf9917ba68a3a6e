// SPDX-License-Identifier: BSD-3-Clause
// The typed localmap::local_map of include/localmap.hpp: a function over localmap::local_view
// parameters returning localmap::local_tensor and scalar outputs. Each expected value is computed
// here from the global data (the shard of a rank from the torch.chunk rule, tests/README.md):
//  - a masked loss (sum and count as 0-d tensors placed Partial(sum)), labels moved to Shard(0)
//    by LM_LOCAL_MAP_RESHARD_INPUTS, on 11 rows that split unevenly;
//  - a local reshape [b, s, h] -> [b*s, h] that keeps Shard(0), as a dist tensor and as a plain
//    local tensor (empty out placements);
//  - scalar inputs and outputs passed through, the mesh parameter, a strided local DLTensor;
//  - an exception in fn: LM_ERR_USER with its message on every rank (thrown on every rank), or
//    on the rank that threw and LM_ERR_REMOTE elsewhere; a view read as the wrong dtype or out of
//    its bounds, and a run-time output count, likewise LM_ERR_USER; refusals before the call
//    (parameters, output count): LM_ERR_INVALID_ARGUMENT.
// lm-test-np: 1 2 3 4
#include "lm_test.h"

#include <localmap.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace lmx = localmap;

// This rank's rows of n split over p parts (torch.chunk: blocks of ceil(n / p)).
static void chunk_of(int64_t n, int p, int r, int64_t *lo, int64_t *hi) {
  const int64_t b = (n + p - 1) / p;
  *lo = std::min<int64_t>(n, r * b);
  *hi = std::min<int64_t>(n, (r + 1) * b);
}

// Runs f, which must throw localmap::error with status `code` and a message containing want.
template <class F>
static int throws(F f, lm_status_t code, const char *want) {
  try {
    f();
  } catch (const lmx::error &e) {
    if (e.status() == code && std::strstr(e.what(), want)) return 1;
    fprintf(stderr, "rank %d: unexpected error: %s (wanted %s, \"%s\")\n", lm_test_rank(), e.what(),
            lm_status_string(code), want);
    return 0;
  }
  fprintf(stderr, "rank %d: nothing thrown (wanted \"%s\")\n", lm_test_rank(), want);
  return 0;
}

// A double gathered from a 0-d dist tensor (after a reshard to Replicate).
template <class T>
static T value_of(const lmx::dist_tensor &t) {
  lmx::dist_tensor r = t.reshard({lmx::replicate()});
  return *r.local_data<T>();
}

static void test_masked_loss(void **) {
  const int n = lm_test_size(), me = lm_test_rank();
  const int64_t B = 11, C = 5;
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> pred(B * C);
  std::vector<int64_t> labels(B);
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t c = 0; c < C; ++c) pred[i * C + c] = static_cast<double>((i * 7 + c * 3) % 11) - 5;
    labels[i] = i % 4 == 3 ? -100 : (i * 3) % C;
  }
  double want_sum = 0;  // the serial loss: -sum of pred[i, label] over kept rows
  int64_t want_n = 0;
  for (int64_t i = 0; i < B; ++i)
    if (labels[i] != -100) {
      want_sum -= pred[i * C + labels[i]];
      ++want_n;
    }
  int64_t ps[2] = {B, C}, ls[1] = {B};
  DLTensor pg = {pred.data(), LM_CPU, 2, LM_FLOAT64, ps, nullptr, 0};
  DLTensor lg = {labels.data(), LM_CPU, 1, LM_INT64, ls, nullptr, 0};
  lmx::dist_tensor p = lmx::dist_tensor::from_global(m, &pg, {lmx::shard(0)});
  lmx::dist_tensor l = lmx::dist_tensor::from_global(m, &lg, {lmx::replicate()});
  int64_t seen_rows = -1, seen_labels = -1, seen_first = -1;
  auto nll = [&](const lmx::local_view &x, const lmx::local_view &y) {
    seen_rows = x.shape(0);
    seen_labels = y.shape(0);
    seen_first = y.size() ? y.at<int64_t>(0) : -1;
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < y.shape(0); ++i) {
      const int64_t t = y.at<int64_t>(i);
      if (t == -100) continue;
      sum -= x.at<double>(i, t);
      ++cnt;
    }
    return std::tuple{lmx::local_tensor::scalar(sum), lmx::local_tensor::scalar(cnt)};
  };
  lmx::local_map_result r =
      lmx::local_map(nll, {p, lmx::input(l, {lmx::shard(0)})}, {{lmx::partial()}, {lmx::partial()}},
                     {nullptr, LM_LOCAL_MAP_RESHARD_INPUTS});
  int64_t lo, hi;
  chunk_of(B, n, me, &lo, &hi);
  int ok = seen_rows == hi - lo && seen_labels == hi - lo;
  ok &= seen_first == (hi > lo ? labels[lo] : -1);
  ok &= r.tensor(0).ndim() == 0 && lmx::to_string(r.tensor(1).placement()) == "[P(sum)]";
  ok &= r.tensor(1).dtype().code == kDLInt && r.tensor(1).dtype().bits == 64;
  ok &= value_of<double>(r.tensor(0)) == want_sum && value_of<int64_t>(r.tensor(1)) == want_n;
  // Without the flag, labels must already be Shard(0): refused alike on every rank.
  ok &= throws([&] { lmx::local_map(nll, {p, lmx::input(l, {lmx::shard(0)})}, {{lmx::partial()}, {lmx::partial()}}); },
               LM_ERR_INVALID_ARGUMENT, "inputs[1]");
  LM_ASSERT_ALL(ok);
}

static void test_local_reshape(void **) {
  const int n = lm_test_size(), me = lm_test_rank();
  const int64_t b = 12, s = 3, h = 2;  // 12 rows split evenly over 1 .. 4 ranks
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<float> full(b * s * h);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i) * 0.5f;
  int64_t g[3] = {b, s, h};
  DLTensor gt = {full.data(), LM_CPU, 3, LM_FLOAT32, g, nullptr, 0};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m, &gt, {lmx::shard(0)});
  auto reshape = [](const lmx::local_view &v) {
    lmx::local_tensor o = lmx::local_tensor::zeros<float>({v.shape(0) * v.shape(1), v.shape(2)});
    for (int64_t i = 0; i < v.shape(0); ++i)
      for (int64_t j = 0; j < v.shape(1); ++j)
        for (int64_t k = 0; k < v.shape(2); ++k) o.at<float>(i * v.shape(1) + j, k) = v.at<float>(i, j, k);
    return o;
  };
  lmx::local_map_result r = lmx::local_map(reshape, {x}, {{lmx::shard(0)}});
  const lmx::dist_tensor &y = r.tensor(0);
  const int64_t rows = b / n * s;
  int ok = y.global_shape() == lmx::shape{b * s, h} && y.local_shape() == lmx::shape{rows, h} &&
           y.local_offset() == lmx::shape{me * rows, 0};
  std::vector<float> back(b * s * h, -1.0f);
  int64_t gs[2] = {b * s, h};
  DLTensor bt = {back.data(), LM_CPU, 2, LM_FLOAT32, gs, nullptr, 0};
  y.gather(&bt);
  ok &= back == full;  // a row-major reshape keeps the element order
  // Empty out placements: this rank's rows come back as a plain local tensor.
  lmx::local_map_result q = lmx::local_map(reshape, {x}, {{}});
  lmx::local_tensor t = q.local(0);
  ok &= t.shape() == lmx::shape{rows, h} && t.size() == rows * h && !q.tensors[0];
  for (int64_t i = 0; ok && i < rows * h; ++i) ok &= t.data<float>()[i] == full[me * rows * h + i];
  ok &= throws([&] { q.local(0); }, LM_ERR_INVALID_ARGUMENT, "output 0 is not a local tensor");
  ok &= throws([&] { r.i64(0); }, LM_ERR_INVALID_ARGUMENT, "output 0 is not an integer");
  LM_ASSERT_ALL(ok);
}

static void test_scalars_and_mesh(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> full(10);
  for (int i = 0; i < 10; ++i) full[i] = i + 1;  // sum 55
  int64_t g[1] = {10};
  DLTensor gt = {full.data(), LM_CPU, 1, LM_FLOAT64, g, nullptr, 0};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m, &gt, {lmx::shard(0)});
  lm_mesh_t seen = nullptr;
  auto scaled = [&seen](lm_mesh_t mm, const lmx::local_view &v, int k, double s) {
    seen = mm;
    double sum = 0;
    for (int64_t i = 0; i < v.size(); ++i) sum += v.data<double>()[i * v.stride(0)];
    return std::tuple{lmx::local_tensor::scalar(sum * s), k + 1, s * 2};
  };
  lmx::local_map_result r = lmx::local_map(scaled, {x, 3, 0.25}, {{lmx::partial()}, {}, {}});
  int ok = seen == m.get() && r.i64(1) == 4 && r.f64(2) == 0.5;
  ok &= r.args[1].kind == LM_ARG_INT64 && r.args[2].kind == LM_ARG_DOUBLE && !r.tensors[1];
  ok &= value_of<double>(r.tensor(0)) == 55.0 * 0.25;
  // An integer input for a double parameter; one scalar output, no tuple.
  auto twice = [](double v) { return 2 * v; };
  ok &= lmx::local_map(twice, {x.ndim() + 20}, {{}}, {&m}).f64(0) == 42.0;
  // A local call (no dist input, no mesh) over a strided DLTensor: the transpose of a 3 x 4
  // matrix, read through its strides.
  std::vector<int32_t> a(12);
  for (int i = 0; i < 12; ++i) a[i] = i * i;
  int64_t ts[2] = {4, 3}, st[2] = {1, 4};
  DLTensor at = {a.data(), LM_CPU, 2, LM_INT32, ts, st, 0};
  auto weigh = [](const lmx::local_view &v) {
    int64_t w = 0;
    for (int64_t i = 0; i < v.shape(0); ++i)
      for (int64_t j = 0; j < v.shape(1); ++j) w += (i * 10 + j) * v.at<int32_t>(i, j);
    return w;
  };
  int64_t want = 0;  // element (i, j) of the transpose is a[j * 4 + i]
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) want += (i * 10 + j) * a[j * 4 + i];
  lmx::local_view av(at);
  ok &= !av.is_contiguous() && av.stride(1) == 4 && av.size() == 12;
  ok &= lmx::local_map(weigh, {at}, {{}}).i64(0) == want;
  // A vector of outputs, its length known at run time.
  auto several = [](const lmx::local_view &v) {
    std::vector<lmx::local_output> o;
    for (int64_t i = 0; i < 3; ++i) o.emplace_back(v.ndim() + i);
    return o;
  };
  lmx::local_map_result v = lmx::local_map(several, {x}, {{}, {}, {}});
  ok &= v.i64(0) == 1 && v.i64(1) == 2 && v.i64(2) == 3;
  // ... and one of the wrong length fails the call on every rank.
  ok &= throws([&] { lmx::local_map(several, {x}, {{}, {}}); }, LM_ERR_USER,
               "fn returned 3 outputs for 2 out_placements");
  // Refused before the call: the parameters do not take the inputs, or fn's output count.
  ok &= throws([&] { lmx::local_map(twice, {x}, {{}}); }, LM_ERR_INVALID_ARGUMENT,
               "inputs[0] is a dist tensor, but fn's parameter for it takes a floating-point value");
  ok &= throws([&] { lmx::local_map(weigh, {1.5}, {{}}); }, LM_ERR_INVALID_ARGUMENT,
               "inputs[0] is a double, but fn's parameter for it takes a localmap::local_view");
  ok &= throws([&] { lmx::local_map(scaled, {x, 3}, {{}, {}, {}}); }, LM_ERR_INVALID_ARGUMENT,
               "fn takes 3 inputs, 2 given");
  ok &= throws([&] { lmx::local_map(scaled, {x, 3, 0.25}, {{lmx::partial()}}); }, LM_ERR_INVALID_ARGUMENT,
               "fn returns 3 outputs, 1 out_placements given");
  LM_ASSERT_ALL(ok);
}

static void test_exceptions(void **) {
  const int n = lm_test_size(), me = lm_test_rank();
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> full(8, 1.0);
  int64_t g[1] = {8};
  DLTensor gt = {full.data(), LM_CPU, 1, LM_FLOAT64, g, nullptr, 0};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m, &gt, {lmx::shard(0)});
  // Thrown on every rank: LM_ERR_USER with the message everywhere.
  auto all = [](const lmx::local_view &) -> lmx::local_tensor {
    throw std::runtime_error("label 7 is out of range");
  };
  int ok = throws([&] { lmx::local_map(all, {x}, {{lmx::partial()}}); }, LM_ERR_USER,
                  "label 7 is out of range");
  // Thrown on the last rank only: LM_ERR_USER there, LM_ERR_REMOTE naming it elsewhere.
  const int bad = n - 1;
  auto one = [bad](const lmx::local_view &v) {
    if (lm_test_rank() == bad) throw std::runtime_error("shape check failed in user code");
    return lmx::local_tensor::scalar(v.size());
  };
  const std::string rank_word = "rank " + std::to_string(bad);
  if (me == bad)
    ok &= throws([&] { lmx::local_map(one, {x}, {{lmx::partial()}}); }, LM_ERR_USER,
                 "shape check failed in user code");
  else
    ok &= throws([&] { lmx::local_map(one, {x}, {{lmx::partial()}}); }, LM_ERR_REMOTE, rank_word.c_str());
  // A view read as the wrong type, or out of its bounds: the view's localmap::error fails fn, so
  // LM_ERR_USER with its message (and its own status named in it) on every rank.
  auto wrong = [](const lmx::local_view &v) { return static_cast<double>(v.data<float>()[0]); };
  ok &= throws([&] { lmx::local_map(wrong, {x}, {{}}); }, LM_ERR_USER,
               "LM_ERR_INVALID_ARGUMENT: invalid argument: localmap::local_view::data: the tensor holds float64, not float32");
  auto outside = [](const lmx::local_view &v) { return v.at<double>(v.shape(0)); };
  int64_t lo, hi;  // every rank holds rows here (8 over 1 .. 4 ranks)
  chunk_of(8, n, me, &lo, &hi);
  const std::string range = "index " + std::to_string(hi - lo) + " of dim 0 is out of range [0, " +
                            std::to_string(hi - lo) + ")";
  ok &= throws([&] { lmx::local_map(outside, {x}, {{}}); }, LM_ERR_USER, range.c_str());
  // The calls after work.
  auto count = [](const lmx::local_view &v) { return lmx::local_tensor::scalar(v.size()); };
  ok &= value_of<int64_t>(lmx::local_map(count, {x}, {{lmx::partial()}}).tensor(0)) == 8;
  LM_ASSERT_ALL(ok);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_masked_loss),
    cmocka_unit_test(test_local_reshape),
    cmocka_unit_test(test_scalars_and_mesh),
    cmocka_unit_test(test_exceptions),
};

LM_TEST_MAIN(tests)
