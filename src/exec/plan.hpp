// SPDX-License-Identifier: BSD-3-Clause
// Executable reshard plans: a Schedule (plan/planner.hpp: what this rank does, built by the pure
// planner) plus the communicator of its transfers and the state of its executions. The executor
// (exec/executor.cpp) walks the schedule through a Route (transport/select.hpp: the wire and the
// memory operations), chosen at the first execution from a TransportSpec (host MPI by default;
// device plans set theirs, exec/device_run.hpp). Building a plan allocates no buffer whose size
// depends on the tensor: intermediate step outputs and staging are taken at execution and given
// back when it completes (keep_buffers: persistent plans with LM_PLAN_KEEP_BUFFERS=1 keep them).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "plan/planner.hpp"
#include "transport/select.hpp"

namespace lm {

struct ExecState;

class Plan : public Schedule {
 public:
  Plan();
  ~Plan();
  MPI_Comm comm = MPI_COMM_NULL;  // communicator of the transfers (parent ranks)
  // Unique to this object in the process (never reused, unlike an address): what an executor
  // built over plans (GroupExec) compares to know that they are still the same.
  const uint64_t serial;
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
  // Ends an execution that failed: gives back its buffers (the route's pending work is dropped).
  void abandon();
  // The route of the next executions. A different one replaces the current route and drops the
  // execution state built for it (its buffers go back). Not during an execution.
  void use(const TransportSpec &spec);
  // Host data over MPI on `comm` (the default).
  TransportSpec host_spec() const;
  // Reports failures the route learned of late (NCCL's asynchronous errors): throws.
  void check_errors(const char *what);
  // This plan for padded shards (host; tensor/tensor.hpp): in_pad / out_pad (NULL: compact) are
  // the extents of the arrays that the source and target shards lie in. Returns this plan when
  // both are NULL, else a variant of it for those extents (planner.hpp, schedule_pad), built at
  // the first call and kept for the next ones with the same extents. Where a padded target would
  // be written by a reduce-scatter or a Partial fill in rows shorter than LM_PAD_IN_PLACE_MIN_RUN
  // (schedule_pad refuses it), the variant reads a padded source in place and writes a compact
  // target: *out_compact says so (the caller gives
  // it a compact stand-in of the target); NULL where no variant reads the source either: the
  // caller then runs this plan on compact copies of both.
  // Not during an execution of the variant it replaces.
  Plan *padded(const Shape *in_pad, const Shape *out_pad, bool *out_compact);
  // This plan writing its output through element strides out_str (one per tensor dim of the
  // output box: a transposed array, lm_dist_tensor_transpose) instead of row-major: a variant
  // (planner.hpp, schedule_stride_out) built at the first call and kept for the next ones with
  // the same strides; NULL where the output is written by a reduce-scatter or a Partial fill (the
  // caller then runs this plan and permutes its output). Host; no board exchange.
  // Not during an execution of the variant it replaces.
  Plan *strided_out(const Shape &out_str);
  // The exchange fused with the agreement round of the set ac (the board exchange,
  // transport/select.hpp: select_fused_exchange) for a blocking host execution of this plan, or
  // NULL; decided at the first call from the plan and the agreed settings alone (every rank with
  // the same plan decides alike; a padded variant as its plan, the bytes being the same) and kept.
  // across_meshes: the plan's source and target meshes differ (select_fused_exchange's rule).
  FusedExchange *fused_exchange(const AgreeComm *ac, bool across_meshes = false);

 private:
  TransportSpec spec_;
  Route route_;
  std::unique_ptr<ExecState> ex_;
  // The execution state of the route: one run per step, or per collective (plan/collective.hpp).
  void make_runs(Transport &tp, MemOps &mem);
  // A copy of this plan whose schedule `change` made a variant of (NULL when it returns false).
  std::unique_ptr<Plan> variant(const std::function<bool(Schedule &)> &change) const;
  struct Padded;
  std::unique_ptr<Padded> padded_;  // the last variant asked for
  struct Strided;
  std::unique_ptr<Strided> strided_;  // the last strided variant asked for
  std::unique_ptr<FusedExchange> fused_;
  bool fused_decided_ = false;
};

// Builds this rank's executable plan: the planner's schedule plus the transfers' communicator
// (comm is only stored: no MPI call).
std::unique_ptr<Plan> plan_build(const Layout &src, const Layout &dst, DLDataType dtype,
                                 MPI_Comm comm, int me);

// The staging bound of one reshard step in bytes: LM_STAGING_BYTES (must agree on every rank).
size_t staging_bytes();

// A Partial fill step's identity written into its output at out (st.fill set): the whole
// compact output, or the rows of a padded one (runs: scratch).
void fill_partial(MemOps &mem, const SchedStep &st, DType dt, void *out, std::vector<Run> &runs);

}  // namespace lm
