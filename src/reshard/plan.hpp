// SPDX-License-Identifier: BSD-3-Clause
// Reshard plans. A plan is a chain of steps between layouts, built by a pure planner from
// (source layout, target layout, dtype, this rank) in O(peers) time, then executed on MPI:
//   ReduceScatter  Partial(op) on mesh dim m -> Shard(d) innermost on m (pairwise, fused reduce)
//   Exchange       any layout without pending reductions -> any other (point-to-point boxes,
//                  contiguous boxes sent/received in place, the rest through pooled staging)
//   PartialInit    Replicate -> Partial(op) in place (identity fill on non-zero coordinates)
// Buffers are sized at plan time, so executing a plan allocates nothing.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "layout/layout.hpp"
#include "mesh/mesh.hpp"
#include "tensor/tensor.hpp"

namespace lm {

class Step {
 public:
  virtual ~Step() = default;
  // Posts the step's communication and does what local work it can.
  virtual void start(const void *in, void *out) = 0;
  // Makes progress; true when the step is complete. block: wait instead of test.
  virtual bool progress(bool block) = 0;
  virtual std::string describe() const = 0;
  virtual bool in_place() const { return false; }
  // True when, on this rank, the output is a contiguous slice of the input at *byte_off and the
  // step moves nothing (Replicate -> Shard): the caller may alias instead of copying.
  virtual bool alias_offset(size_t *byte_off) const {
    (void)byte_off;
    return false;
  }
  // True when this rank's whole input is a local copy into one contiguous region of the output
  // at *byte_off: then the step before may write straight there (fuse_input) and no copy is made.
  virtual bool input_lands_contiguously(size_t *byte_off) const {
    (void)byte_off;
    return false;
  }
  virtual void fuse_input() {}
  int64_t bytes_sent = 0;
  Layout out_layout;  // the layout this step produces
};

class Plan {
 public:
  MPI_Comm comm = MPI_COMM_NULL;  // communicator of the transfers (parent ranks)
  int me = -1;                    // this process's parent rank
  Layout src, dst;
  DLDataType dtype{};
  DType dt{};
  size_t esize = 0;
  bool involved = false;  // this rank holds data in the source or the target
  std::vector<std::unique_ptr<Step>> steps;
  std::vector<std::shared_ptr<Storage>> work;  // work[i]: output of step i when intermediate
  size_t last_moving = 0;                      // index of the last step that is not in place
  std::vector<int64_t> fused;                  // >= 0: step i writes into step i+1's output here
  int64_t bytes_sent = 0;

  // Execution state (one execution at a time).
  bool active = false;
  size_t cur = 0;
  const void *in0 = nullptr;
  void *out_final = nullptr;

  void start(const void *in, void *out);
  bool progress(bool block);  // true when complete
  void run(const void *in, void *out) {
    start(in, out);
    progress(true);
  }
  std::string describe() const;
  void *out_of(size_t i) const;
  const void *in_of(size_t i) const;
};

// Throws when no reshard leads from src to dst (shapes, Partial ops, dtype vs op); every rank,
// involved or not, runs this check so that all agree.
void check_reshard(const Layout &src, const Layout &dst, DType dt);

// Builds this rank's plan. Pure: no MPI call (comm is only stored), so unit tests can plan for
// one rank of a huge mesh. same_mesh: src and dst grids are the same ranks in the same order.
// Throws LM_ERR_INVALID_ARGUMENT / LM_ERR_NOT_SUPPORTED for impossible reshards.
std::unique_ptr<Plan> plan_build(const Layout &src, const Layout &dst, DLDataType dtype,
                                 MPI_Comm comm, int me);

}  // namespace lm
