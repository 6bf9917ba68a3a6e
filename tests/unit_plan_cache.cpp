// SPDX-License-Identifier: BSD-3-Clause
// unit_plan_cache: lm_dist_tensor_reshard's plan cache (exec/plan_cache.hpp), on a singleton MPI
// process. A reshard caches its plan under the source mesh, keyed by the target mesh too: the same
// placements into two target meshes are two entries, and a repeated call hits (no new entry) and
// finds the checked target layout. A target mesh's destroy drops the plans into it while the
// source mesh keeps its own; the source mesh's destroy drops the rest. Data are checked after
// each reshard, so a hit that brought another mesh's plan would show.
// lm-unit-starts-mpi (MPI_Init on a singleton: LSan needs full stacks, tests/run-tests.sh)
#include <mpi.h>

#include "exec/plan_cache.hpp"
#include "localmap.h"
#include "localmap_mpi.h"
#include "mesh/mesh.hpp"
#include "tensor/tensor.hpp"
#include "unit_check.hpp"

namespace {

lm_mesh_s *obj(lm_mesh_t m) { return lm::mesh_check(m, "unit_plan_cache"); }

// Reshards x to placements pl on mesh to, checks every element against 0..n-1, destroys the copy.
bool reshard_ok(lm_dist_tensor_t x, lm_mesh_t to, const lm_placement_t *pl, int n) {
  lm_dist_tensor_t y = nullptr;
  if (lm_dist_tensor_reshard(&y, x, to, pl) != LM_SUCCESS) return false;
  double got[64] = {0};
  int64_t shape[2] = {n / 4, 4};
  DLTensor g = {got, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, nullptr, 0};
  bool ok = lm_dist_tensor_gather(y, 0, &g) == LM_SUCCESS;
  for (int i = 0; i < n; ++i) ok = ok && got[i] == (double)i;
  return lm_dist_tensor_destroy(&y) == LM_SUCCESS && ok;
}

void test_cross_mesh_entries() {
  g_test = "cross_mesh_entries";
  lm_mesh_t a = nullptr, b = nullptr, c = nullptr;
  const int64_t one[1] = {1}, two[2] = {1, 1};
  CHECK(lm_mesh_create_mpi(&a, MPI_COMM_WORLD, 1, one, nullptr) == LM_SUCCESS);
  CHECK(lm_mesh_create_mpi(&b, MPI_COMM_WORLD, 2, two, nullptr) == LM_SUCCESS);
  CHECK(lm_mesh_create_mpi(&c, MPI_COMM_WORLD, 2, two, nullptr) == LM_SUCCESS);
  double full[32];
  for (int i = 0; i < 32; ++i) full[i] = i;
  int64_t shape[2] = {8, 4};
  DLTensor ft = {full, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, nullptr, 0};
  const lm_placement_t s0 = LM_PLACEMENT_SHARD(0);
  const lm_placement_t to[2] = {LM_PLACEMENT_SHARD(1), LM_PLACEMENT_REPLICATE};
  const uint64_t aid = obj(a)->local_id;
  lm_dist_tensor_t x = nullptr;
  CHECK(lm_dist_tensor_from_global(&x, a, &ft, &s0, -1) == LM_SUCCESS);
  CHECK(lm::cached_plans(aid) == 0);
  CHECK(reshard_ok(x, b, to, 32));
  CHECK(lm::cached_plans(aid) == 1);
  lm_dist_tensor_s *xs = lm::tensor_check(x, "x");
  auto hit = lm::cached_plan_find(obj(a), obj(b), xs->layout, to, xs->dtype, false);
  CHECK(hit && hit->dst.pl.size() == 2 && hit->dst.gshape == xs->layout.gshape);
  CHECK(!lm::cached_plan_find(obj(a), obj(c), xs->layout, to, xs->dtype, false));
  CHECK(reshard_ok(x, b, to, 32));  // a hit: no new entry
  CHECK(lm::cached_plans(aid) == 1);
  CHECK(reshard_ok(x, c, to, 32));  // another target mesh: its own entry
  CHECK(lm::cached_plans(aid) == 2);
  CHECK(reshard_ok(x, nullptr, &s0, 32));  // within a
  CHECK(lm::cached_plans(aid) == 3);
  CHECK(lm_mesh_destroy(&b) == LM_SUCCESS);  // its plans go; a keeps the others
  CHECK(lm::cached_plans(aid) == 2);
  CHECK(lm_mesh_destroy(&c) == LM_SUCCESS);
  CHECK(lm::cached_plans(aid) == 1);
  CHECK(lm_dist_tensor_destroy(&x) == LM_SUCCESS);
  CHECK(lm_mesh_destroy(&a) == LM_SUCCESS);  // the last reference: its plans go
  CHECK(lm::cached_plans(aid) == 0);
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  test_cross_mesh_entries();
  int rc = unit_check_report("unit_plan_cache");
  MPI_Finalize();
  return rc;
}
