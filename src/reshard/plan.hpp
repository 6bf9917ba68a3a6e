// SPDX-License-Identifier: BSD-3-Clause
// Reshard plans. A plan is this rank's schedule (reshard/schedule.hpp), built by a pure planner
// from (source layout, target layout, dtype, this rank) in O(peers) time and memory, plus the
// state of its executions. The executor (exec.cpp) walks the schedule through a Transport
// (transport/transport.hpp), chosen at the first execution; the planner never calls MPI.
// Building a plan allocates no buffer whose size depends on the tensor: intermediate step outputs
// and staging are taken from the buffer pool at execution and given back when it completes
// (LM_PLAN_KEEP_BUFFERS=1 lets persistent plans keep them; see docs/DESIGN.md).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "layout/layout.hpp"
#include "mesh/mesh.hpp"
#include "reshard/schedule.hpp"
#include "tensor/tensor.hpp"

namespace lm {

class Transport;
struct ExecState;

class Plan {
 public:
  Plan();
  ~Plan();
  MPI_Comm comm = MPI_COMM_NULL;  // communicator of the transfers (parent ranks)
  int me = -1;                    // this process's parent rank
  Layout src, dst;
  DLDataType dtype{};
  DType dt{};
  size_t esize = 0;
  bool involved = false;  // this rank holds data in the source or the target
  // The schedule.
  std::vector<std::unique_ptr<SchedStep>> steps;
  std::vector<size_t> work_bytes;  // > 0: step i's output is an intermediate buffer of this size
  size_t last_moving = 0;          // index of the last step that is not in place
  std::vector<int64_t> fused;      // >= 0: step i writes into step i+1's output here
  int64_t bytes_sent = 0;
  // Keep intermediate and staging buffers between executions (persistent plans may opt in).
  bool keep_buffers = false;

  // Execution (one at a time).
  bool active = false;
  // blocking: the execution is waited for by this call (run), not by later progress calls.
  void start(const void *in, void *out, bool blocking = false);
  bool progress(bool block);  // true when complete
  void run(const void *in, void *out) {
    start(in, out, true);
    progress(true);
  }
  // Ends an execution that failed: gives back its buffers (the transport is dropped).
  void abandon();
  // Seam addition (device plans): the transport of the next executions, replacing the one chosen
  // by transport_for() (e.g. NCCL for device memory). Drops the execution state built for the old
  // one (its buffers go back to it). Not during an execution. transport(): the current one or NULL.
  void use_transport(std::unique_ptr<Transport> tp);
  Transport *transport() const { return tp_.get(); }
  std::string describe() const;

 private:
  std::unique_ptr<Transport> tp_;
  std::unique_ptr<ExecState> ex_;
};

// Throws when no reshard leads from src to dst (shapes, Partial ops, dtype vs op); every rank,
// involved or not, runs this check so that all agree.
void check_reshard(const Layout &src, const Layout &dst, DType dt);

// Builds this rank's plan. Pure: no MPI call (comm is only stored), so unit tests can plan for
// one rank of a huge mesh. same_mesh: src and dst grids are the same ranks in the same order.
// Throws LM_ERR_INVALID_ARGUMENT / LM_ERR_NOT_SUPPORTED for impossible reshards.
std::unique_ptr<Plan> plan_build(const Layout &src, const Layout &dst, DLDataType dtype,
                                 MPI_Comm comm, int me);

// The staging bound of one reshard step in bytes: LM_STAGING_BYTES (default 64 MiB, at least
// 256 bytes, at most 1 GiB), read once per process. Must be the same on every rank.
size_t staging_bytes();

}  // namespace lm
