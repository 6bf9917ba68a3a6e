// SPDX-License-Identifier: BSD-3-Clause
// The NCCL transport: device memory, behind the seam of transport/transport.hpp, every NCCL call
// through the device component (mem/component.hpp).
//   - messages: ncclSend/ncclRecv (bytes as ncclInt8) on a communicator (transport/nccl/comm.hpp)
//     and stream, collected between flush() calls and issued as ONE group (ncclGroupStart/End),
//     so every batch the executor posts (all receives and sends of a step) runs concurrently;
//   - collectives (post_collective: ncclAllGather, ncclReduceScatter, ncclAllReduce, ncclAlltoAll
//     where the loaded NCCL has it) over the whole communicator, in the same groups, for the
//     steps plan/collective.hpp finds a form for; LM_NCCL_COLLECTIVES=0 offers none;
//   - done(): a ticket is complete once its group is enqueued: everything after it (copies,
//     reductions, the caller's own work) is ordered behind it on the same stream. Nothing waits;
//   - failures: LM_ERR_NCCL (check_errors: asynchronous errors); LM_FAULT's transport faults fire
//     at flush. The caller breaks its meshes.
// Peers arrive as ranks of the plan's communicator (the parent's); `peer_map` turns them into
// ranks of the NCCL communicator: mesh indices for a plan within one mesh, positions in the union
// of both meshes' ranks for a cross-mesh plan (the pair's communicator).
#pragma once

#include <vector>

#include "transport/transport.hpp"

namespace lm {

struct NcclComm;

class NcclTransport : public Transport {
 public:
  // nc: the communicator (owned by the mesh or the pair, which outlive the plan: plans retain
  // their meshes); stream: cudaStream_t; peer_map[parent rank] = NCCL rank (-1: none).
  NcclTransport(NcclComm *nc, void *stream, int device, std::vector<int> peer_map);
  ~NcclTransport() override;
  const char *name() const override { return "nccl"; }

  Ticket post_send(const void *p, size_t bytes, int peer, int tag) override;
  Ticket post_recv(void *p, size_t bytes, int peer, int tag) override;
  Ticket post_send_box(const void *buf, const BoxRef &b, int peer, int tag) override;
  Ticket post_recv_box(void *buf, const BoxRef &b, int peer, int tag) override;
  void flush() override;
  int coll_size() const override { return coll_size_; }
  int coll_rank(int peer) const override;
  bool coll_offers(CollKind k, DType t, int op) const override;
  Ticket post_collective(const CollOp &c) override;
  bool bounded_staging() const override { return false; }  // one group per step
  bool done(Ticket t, bool block) override;
  Ticket posted() const override { return next_; }
  void reset() override;
  void check_errors(const char *what) override;

 private:
  struct Op {
    bool send;
    void *p;
    size_t bytes;
    int peer;    // NCCL rank
    CollOp coll;  // kind != kNone: this collective instead
  };
  int nccl_rank(int peer) const;
  int issue(const Op &o, void *comm);
  NcclComm *nc_;
  void *stream_;
  int device_;
  std::vector<int> peer_map_;
  int coll_size_ = 0;  // ranks of the communicator when collectives are on, else 0
  std::vector<Op> pending_;
  Ticket issued_ = 0;  // tickets below this are enqueued
  Ticket next_ = 0;
};

}  // namespace lm
