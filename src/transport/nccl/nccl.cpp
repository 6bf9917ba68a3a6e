// SPDX-License-Identifier: BSD-3-Clause
#include "transport/nccl/nccl.hpp"

#include "common/error.hpp"
#include "common/settings.hpp"
#include "mem/component.hpp"
#include "transport/failure.hpp"
#include "transport/nccl/comm.hpp"

namespace lm {

namespace {
// The component's table: a transport exists only over a communicator the component made.
const lm_device_api_t &api() { return *device_component().api; }
}  // namespace

NcclTransport::NcclTransport(NcclComm *nc, void *stream, int device, std::vector<int> peer_map)
    : nc_(nc), stream_(stream), device_(device), peer_map_(std::move(peer_map)) {
  int n = 0;
  for (int r : peer_map_) n += r >= 0;
  coll_size_ = setting_on(Setting::NcclCollectives) ? n : 0;
}

void NcclTransport::check_errors(const char *what) { nccl_check_async(*nc_, what); }

NcclTransport::~NcclTransport() = default;

int NcclTransport::nccl_rank(int peer) const {
  if (peer < 0 || peer >= (int)peer_map_.size() || peer_map_[(size_t)peer] < 0)
    fail(LM_ERR_INTERNAL, "NCCL transport: rank %d of the plan is not in the mesh", peer);
  return peer_map_[(size_t)peer];
}

int NcclTransport::coll_rank(int peer) const {
  return peer >= 0 && peer < (int)peer_map_.size() ? peer_map_[(size_t)peer] : -1;
}

bool NcclTransport::coll_offers(CollKind k, DType t, int op) const {
  if (!coll_size_) return false;
  switch (k) {
    case CollKind::kAllGather: return true;
    case CollKind::kReduceScatter:
    case CollKind::kAllReduce: return api().nccl_reduces((int)t, op) != 0;
    case CollKind::kAllToAll: return api().nccl_has_all_to_all() != 0;
    default: return false;
  }
}

Transport::Ticket NcclTransport::post_send(const void *p, size_t bytes, int peer, int tag) {
  (void)tag;  // pairs match in posting order within one communicator, as the seam requires
  pending_.push_back({true, const_cast<void *>(p), bytes, nccl_rank(peer), CollOp{}});
  return next_++;
}

Transport::Ticket NcclTransport::post_recv(void *p, size_t bytes, int peer, int tag) {
  (void)tag;
  pending_.push_back({false, p, bytes, nccl_rank(peer), CollOp{}});
  return next_++;
}

Transport::Ticket NcclTransport::post_collective(const CollOp &c) {
  if (!coll_offers(c.kind, c.dt, c.op))
    fail(LM_ERR_INTERNAL, "NCCL transport: %s of dtype %d op %d is not offered", coll_name(c.kind),
         (int)c.dt, c.op);
  pending_.push_back({false, nullptr, 0, -1, c});
  return next_++;
}

Transport::Ticket NcclTransport::post_send_box(const void *, const BoxRef &, int, int) {
  fail(LM_ERR_INTERNAL, "NCCL transport: box_direct() is false, post_send_box must not be called");
}
Transport::Ticket NcclTransport::post_recv_box(void *, const BoxRef &, int, int) {
  fail(LM_ERR_INTERNAL, "NCCL transport: box_direct() is false, post_recv_box must not be called");
}

// One posted operation into the open group.
int NcclTransport::issue(const Op &o, void *comm) {
  const lm_device_api_t &a = api();
  const CollOp &c = o.coll;
  switch (c.kind) {
    case CollKind::kNone:
      return o.send ? a.nccl_send(o.p, o.bytes, o.peer, comm, stream_)
                    : a.nccl_recv(o.p, o.bytes, o.peer, comm, stream_);
    case CollKind::kAllGather: return a.nccl_all_gather(c.in, c.out, c.bytes, comm, stream_);
    case CollKind::kReduceScatter:
      return a.nccl_reduce_scatter(c.in, c.out, c.count, (int)c.dt, c.op, comm, stream_);
    case CollKind::kAllReduce:
      return a.nccl_all_reduce(c.in, c.out, c.count, (int)c.dt, c.op, comm, stream_);
    case CollKind::kAllToAll: return a.nccl_all_to_all(c.in, c.out, c.bytes, comm, stream_);
  }
  return LMD_FAILED;
}

void NcclTransport::flush() {
  if (pending_.empty()) return;
  void *c = nc_->comm;
  if (!c) {  // aborted after an earlier error (the mesh is broken; calls are refused before this)
    pending_.clear();
    fail(LM_ERR_NCCL, "NCCL transport: the communicator was aborted after an earlier error");
  }
  if (transport_fault_here()) {
    pending_.clear();
    fail(LM_ERR_NCCL, "%s", injected_fault_message("ncclGroupEnd").c_str());
  }
  nc_->used_on(stream_);
  const lm_device_api_t &a = api();
  int rc = a.nccl_group_start();
  std::string err;
  for (const Op &o : pending_) {
    if (rc != LMD_OK && rc != LMD_NOT_READY) break;
    rc = issue(o, c);
  }
  if (rc != LMD_OK && rc != LMD_NOT_READY) err = a.error();
  const int end = a.nccl_group_end();
  if (err.empty() && end != LMD_OK && end != LMD_NOT_READY) err = a.error();
  pending_.clear();
  issued_ = next_;
  if (!err.empty()) {
    // The async state tells the cause; nccl_check_async aborts, breaks the mesh and throws.
    nccl_check_async(*nc_, "NCCL transport: ncclSend/ncclRecv group");
    fail(LM_ERR_NCCL, "NCCL transport: NCCL group failed: %s", err.c_str());
  }
  nccl_check_async(*nc_, "NCCL transport: ncclGroupEnd");  // until enqueued
}

bool NcclTransport::done(Ticket t, bool block) {
  (void)block;
  if (t >= issued_) flush();
  return true;  // enqueued: later work on the stream is ordered behind it
}

void NcclTransport::reset() {
  pending_.clear();
  issued_ = next_ = 0;
}

}  // namespace lm
