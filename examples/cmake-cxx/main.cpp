// SPDX-License-Identifier: BSD-3-Clause
// row_norms: the squared norm of each row of a [10, 4] matrix sharded on its rows, with the typed
// C++ local_map, in a C++-only CMake project (see CMakeLists.txt). The lambda returns this rank's
// row norms as a [rows] tensor placed Shard(0), and the rank's largest element as an int64
// scalar; localmap::environment starts MPI and ends it. Checked against a serial computation.
#include <localmap.hpp>

#include <cstdio>
#include <tuple>
#include <vector>

int main(int argc, char **argv) {
  localmap::environment env(argc, argv);
  localmap::mesh mesh = localmap::mesh::world({env.size()});

  const int64_t rows = 10, cols = 4;
  std::vector<double> full(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) full[i] = static_cast<double>(i % 7) - 3;
  int64_t shape[2] = {rows, cols};
  DLTensor g = {full.data(), LM_CPU, 2, LM_FLOAT64, shape, nullptr, 0};
  localmap::dist_tensor x = localmap::dist_tensor::from_global(mesh, &g, {localmap::shard(0)});

  auto norms = [](const localmap::local_view &a, double scale) {
    localmap::local_tensor out = localmap::local_tensor::zeros<double>({a.shape(0)});
    for (int64_t i = 0; i < a.shape(0); ++i)
      for (int64_t j = 0; j < a.shape(1); ++j) out.at<double>(i) += scale * a.at<double>(i, j) * a.at<double>(i, j);
    return std::tuple{std::move(out), a.size()};
  };
  localmap::local_map_result r = localmap::local_map(norms, {x, 2.0}, {{localmap::shard(0)}, {}});

  std::vector<double> got(rows, -1.0);
  int64_t gs[1] = {rows};
  DLTensor gt = {got.data(), LM_CPU, 1, LM_FLOAT64, gs, nullptr, 0};
  r.tensor(0).gather(&gt);
  int bad = !env.owns_mpi();
  bad += r.i64(1) != x.local_shape()[0] * cols;  // the elements this rank's shard holds
  for (int64_t i = 0; i < rows; ++i) {
    double want = 0;
    for (int64_t j = 0; j < cols; ++j) want += 2.0 * full[i * cols + j] * full[i * cols + j];
    bad += got[i] != want;
  }
  if (env.rank() == 0) std::printf("cmake-cxx row_norms: %s (np %d)\n", bad ? "FAIL" : "OK", env.size());
  return bad != 0;
}
