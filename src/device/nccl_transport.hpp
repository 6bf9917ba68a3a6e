// SPDX-License-Identifier: BSD-3-Clause
// The NCCL transport: device memory, behind the seam of transport/transport.hpp.
//   - messages: ncclSend/ncclRecv (bytes as ncclInt8) on the mesh's communicator and stream,
//     collected between flush() calls and issued as ONE group (ncclGroupStart/End), so every
//     batch the executor posts (all receives and sends of a round) runs concurrently;
//   - done(): a ticket is complete once its group is enqueued: everything after it (copies,
//     reductions, the caller's own work) is ordered behind it on the same stream. Nothing waits;
//   - local work: CUDA kernels on the stream (device/kernels.hpp), box copies through the shared
//     arithmetic of reshard/boxcopy.hpp;
//   - staging: stream-ordered cudaMallocAsync/cudaFreeAsync (never zero-filled).
// Peers arrive as ranks of the plan's communicator (the parent's); `peer_map` turns them into
// ranks of the NCCL communicator: mesh indices for a plan within one mesh, positions in the union
// of both meshes' ranks for a cross-mesh plan (the pair's communicator).
#pragma once

#include <vector>

#include "transport/transport.hpp"

struct lm_mesh_s;

namespace lm {

struct NcclComm;

class NcclTransport : public Transport {
 public:
  // nc: the communicator (owned by the mesh or the pair, which outlive the plan: plans retain
  // their meshes); mesh / mesh2: broken on a NCCL error (mesh2 NULL within one mesh);
  // stream: cudaStream_t; peer_map[parent rank] = NCCL rank (-1: none).
  NcclTransport(NcclComm *nc, lm_mesh_s *mesh, lm_mesh_s *mesh2, void *stream, int device,
                std::vector<int> peer_map);
  ~NcclTransport() override;
  const char *name() const override { return "nccl"; }

  Ticket post_send(const void *p, size_t bytes, int peer, int tag) override;
  Ticket post_recv(void *p, size_t bytes, int peer, int tag) override;
  Ticket post_send_box(const void *buf, const BoxRef &b, int peer, int tag) override;
  Ticket post_recv_box(void *buf, const BoxRef &b, int peer, int tag) override;
  void flush() override;
  bool bounded_staging() const override { return false; }  // one group per step
  bool done(Ticket t, bool block) override;
  Ticket posted() const override { return next_; }
  void reset() override;

  void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) override;
  void reduce(DType t, int op, void *acc, const void *in, int64_t n) override;
  void scale_avg(DType t, void *acc, int64_t n, int64_t k) override;
  void fill_identity(DType t, int op, void *buf, int64_t n) override;
  void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) override;
  void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) override;

  void *staging_take(size_t bytes, size_t *cap) override;
  void staging_give(void *p, size_t cap, size_t bytes) override;

  void *stream() const { return stream_; }
  void *comm() const;
  // nccl_check_async on the communicator (breaks the mesh, or both meshes, on an error).
  void check_async(const char *what);

 private:
  struct Op {
    bool send;
    void *p;
    size_t bytes;
    int peer;  // NCCL rank
  };
  int nccl_rank(int peer) const;
  NcclComm *nc_;
  lm_mesh_s *mesh_, *mesh2_;
  void *stream_;
  int device_;
  std::vector<int> peer_map_;
  std::vector<Op> pending_;
  Ticket issued_ = 0;  // tickets below this are enqueued
  Ticket next_ = 0;
};

}  // namespace lm
