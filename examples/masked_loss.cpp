// SPDX-License-Identifier: BSD-3-Clause
// masked_loss: a masked cross-entropy and its gradient with the typed C++ local_map
// (localmap.hpp). Logits [13, 6] are sharded on the batch, the labels start replicated and
// local_map moves them to the same rows (LM_LOCAL_MAP_RESHARD_INPUTS); labels of -100 are
// ignored. The lambda reads its shards through localmap::local_view and returns the local loss
// sum and token count as 0-d tensors placed Partial(sum): resharded to Replicate they give the
// serial loss, however unevenly the 13 rows split. A second local_map takes the count as a
// scalar input and returns this rank's rows of the gradient (softmax - onehot) / count, placed
// Shard(0) like the logits. Both are checked against a serial computation on every rank.
//
//   make examples && tools/lm-mpirun 3 build/examples/masked_loss
#include <localmap.hpp>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace lm = localmap;

static const int64_t kRows = 13, kClasses = 6, kIgnore = -100;

// The row's log(sum(exp(x))), shifted by its maximum.
static double logsumexp(const double *x, int64_t n, int64_t stride) {
  double mx = x[0], s = 0;
  for (int64_t c = 1; c < n; ++c) mx = std::fmax(mx, x[c * stride]);
  for (int64_t c = 0; c < n; ++c) s += std::exp(x[c * stride] - mx);
  return mx + std::log(s);
}

int main(int argc, char **argv) {
  lm::environment env(argc, argv);
  lm::mesh mesh = lm::mesh::world({env.size()}, {"dp"});

  // The same global data on every rank, and the serial reference.
  std::vector<double> logits(kRows * kClasses);
  std::vector<int64_t> labels(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t c = 0; c < kClasses; ++c)
      logits[i * kClasses + c] = 0.25 * static_cast<double>((i * 5 + c * 3) % 7) - 0.5;
    labels[i] = i % 5 == 2 ? kIgnore : (i * 7) % kClasses;
  }
  double ref_loss = 0;
  int64_t ref_count = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    if (labels[i] == kIgnore) continue;
    ref_loss += logsumexp(&logits[i * kClasses], kClasses, 1) - logits[i * kClasses + labels[i]];
    ++ref_count;
  }

  int64_t xs[2] = {kRows, kClasses}, ys[1] = {kRows};
  DLTensor xg = {logits.data(), LM_CPU, 2, LM_FLOAT64, xs, nullptr, 0};
  DLTensor yg = {labels.data(), LM_CPU, 1, LM_INT64, ys, nullptr, 0};
  lm::dist_tensor x = lm::dist_tensor::from_global(mesh, &xg, {lm::shard(0)});
  lm::dist_tensor y = lm::dist_tensor::from_global(mesh, &yg, {lm::replicate()});

  // Forward: this rank's loss sum and count; fn sees labels as Shard(0), like the logits.
  auto forward = [](const lm::local_view &xl, const lm::local_view &yl) {
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < yl.shape(0); ++i) {
      const int64_t t = yl.at<int64_t>(i);
      if (t == kIgnore) continue;
      if (t < 0 || t >= xl.shape(1)) throw std::out_of_range("label out of range");
      sum += logsumexp(&xl.at<double>(i, 0), xl.shape(1), xl.stride(1)) - xl.at<double>(i, t);
      ++count;
    }
    return std::tuple{lm::local_tensor::scalar(sum), lm::local_tensor::scalar(count)};
  };
  const lm::placements psum = {lm::partial()};
  lm::local_map_result f = lm::local_map(forward, {x, lm::input(y, {lm::shard(0)})}, {psum, psum},
                                         {nullptr, LM_LOCAL_MAP_RESHARD_INPUTS});
  const double loss_sum = *f.tensor(0).reshard({lm::replicate()}).local_data<double>();
  const int64_t count = *f.tensor(1).reshard({lm::replicate()}).local_data<int64_t>();
  const double loss = loss_sum / static_cast<double>(count);

  // Backward: d loss / d logits = (softmax - onehot) / count, this rank's rows.
  auto backward = [](const lm::local_view &xl, const lm::local_view &yl, int64_t n) {
    lm::local_tensor g = lm::local_tensor::zeros_like(xl);
    for (int64_t i = 0; i < xl.shape(0); ++i) {
      const int64_t t = yl.at<int64_t>(i);
      if (t == kIgnore) continue;  // no gradient through ignored rows
      const double lse = logsumexp(&xl.at<double>(i, 0), xl.shape(1), xl.stride(1));
      for (int64_t c = 0; c < xl.shape(1); ++c)
        g.at<double>(i, c) = (std::exp(xl.at<double>(i, c) - lse) - (c == t)) / static_cast<double>(n);
    }
    return g;
  };
  lm::local_map_result b = lm::local_map(backward, {x, lm::input(y, {lm::shard(0)}), count},
                                         {{lm::shard(0)}}, {nullptr, LM_LOCAL_MAP_RESHARD_INPUTS});
  std::vector<double> grad(kRows * kClasses, -1.0);
  DLTensor gg = {grad.data(), LM_CPU, 2, LM_FLOAT64, xs, nullptr, 0};
  b.tensor(0).gather(&gg);

  double worst = std::fabs(loss - ref_loss / static_cast<double>(ref_count));
  for (int64_t i = 0; i < kRows; ++i) {
    const int64_t t = labels[i];
    const double lse = logsumexp(&logits[i * kClasses], kClasses, 1);
    for (int64_t c = 0; c < kClasses; ++c) {
      const double want = t == kIgnore ? 0.0
                                       : (std::exp(logits[i * kClasses + c] - lse) - (c == t)) /
                                             static_cast<double>(ref_count);
      worst = std::fmax(worst, std::fabs(grad[i * kClasses + c] - want));
    }
  }
  const bool ok = count == ref_count && worst < 1e-12;
  if (env.rank() == 0)
    std::printf("masked_loss (np %d): loss %.12f over %lld tokens, gradient [%lld, %lld]: %s\n",
                env.size(), loss, static_cast<long long>(count), static_cast<long long>(kRows),
                static_cast<long long>(kClasses), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
