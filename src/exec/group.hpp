// SPDX-License-Identifier: BSD-3-Clause
// Grouped executions (lm_reshard_group_t): the plans of N reshards on one communicator, run so
// that each step moves all entries' bytes for a peer in one message, not one round per tensor.
//
// Buckets. Entries are dealt in order into buckets of consecutive entries whose global sizes
// (shape x dtype, the same on every rank) sum to at most `bucket_bytes`; an entry larger than
// that or than `alone_bytes` is a bucket of its own and runs through its own plan (the executor of exec/plan.hpp, with
// its pipelined staging and node-local path). Buckets run one after the other, so an execution
// holds the staging of one bucket at a time.
//
// Rounds. In a bucket of several entries, round r runs step r of every entry that has one (steps
// of different entries are independent; an entry's step r+1 reads its step r). For each peer the
// round packs every entry's box for that peer (exchange boxes, reduce-scatter chunks) into one
// message, in entry order, and receives one message from it; then it unpacks the boxes, reduces
// the reduce-scatter contributions in group order (0, 1, ..., k-1, as the single-plan executor
// does, so the results are the same bits) and does the local copies. Sender and receiver derive a
// message's parts from the same schedules, so both agree on its bytes; tags are per round. Where
// the transport can move a message of several buffers (Transport::parts_direct: node-local kernel
// copies), neither side packs: the receiver reads the senders' boxes straight into the entries'
// outputs (reduce-scatter chunks into the receive region), and only those are unpacked.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "exec/plan.hpp"

namespace lm {

struct GroupBucket;
struct GroupPart;
struct GroupPeerMsg;
struct GroupWhere;

class GroupExec {
 public:
  // plans: the entries' plans (not owned; all on `comm`). bucket_bytes, alone_bytes >= 1.
  GroupExec(std::vector<Plan *> plans, MPI_Comm comm, size_t bucket_bytes, size_t alone_bytes);
  ~GroupExec();
  // One execution at a time: in[i] / out[i] are entry i's local source and target shards (NULL
  // where this rank holds none). blocking: run() waits for it (node-local copies may be used).
  void start(std::vector<const void *> in, std::vector<void *> out, bool blocking);
  bool progress(bool block);  // true when complete
  void run(std::vector<const void *> in, std::vector<void *> out) {
    start(std::move(in), std::move(out), true);
    progress(true);
  }
  void abandon();  // after a failure: buffers back, pending work dropped
  // The route of the next executions (default: host data over MPI on the group's communicator);
  // a device route (select_device_spec) runs the rounds on device memory and NCCL, enqueued on
  // its stream, and the entries that run alone on their plans with the same route. Not during an
  // execution.
  void use(const TransportSpec &spec);
  TransportSpec host_spec() const;
  // Reports failures the route learned of late (NCCL's asynchronous errors): throws.
  void check_errors(const char *what);
  bool active() const { return active_; }
  size_t bucket_count() const { return buckets_.size(); }

 private:
  void begin_bucket();
  bool bucket_progress(bool block);
  void end_bucket();
  void start_round();
  void finish_round();
  bool direct_parts(GroupPeerMsg &m, bool send);
  bool receives_readable(bool block);
  void held_sources(const GroupPeerMsg &m, size_t k, char *rreg);
  void reduce_round();
  char *at(const GroupWhere &w) const;  // a buffer of this execution (GroupWhere)

  std::vector<Plan *> plans_;
  MPI_Comm comm_;
  TransportSpec spec_;
  std::vector<std::unique_ptr<GroupBucket>> buckets_;
  Route route_;
  std::vector<const void *> in_;
  std::vector<void *> out_;
  bool active_ = false, blocking_ = false;
  size_t b_ = 0, r_ = 0;
  // The current bucket's buffers: staging (scratch, sends, receives) and intermediate outputs.
  char *stage_ = nullptr;
  size_t stage_cap_ = 0, stage_bytes_ = 0;
  std::vector<std::vector<void *>> work_;       // [entry][step]
  std::vector<std::vector<size_t>> work_cap_;
  std::vector<Run> runs_;        // one peer message's runs (direct_parts)
  std::vector<Run> out_runs_;    // an entry's output rows (a padded target's fill or reduction)
  std::vector<char> direct_;     // per receive of the round: 0 packed, 1 in place, 2 held
  std::vector<Transport::Ticket> recv_t_;          // per receive of the round: its ticket
  std::vector<std::vector<const char *>> held_src_;  // per held receive: where its parts lie
  std::vector<const char *> src_;                  // one reduction's contributions
  bool reduced_ = false;                           // this round's reductions are done
};

}  // namespace lm
