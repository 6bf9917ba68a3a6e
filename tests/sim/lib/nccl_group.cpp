// SPDX-License-Identifier: BSD-3-Clause
// cudasim NCCL: the calls that post work. Inside ncclGroupStart/End they collect into the calling
// thread's group; ncclGroupEnd numbers the transfers per pair of ranks (the order NCCL matches
// sends and receives in) and hands the group to its stream as ONE operation (a non-blocking
// communicator returns ncclInProgress and enqueues it a little later, when
// ncclCommGetAsyncError is polled). Collectives expand into point-to-point transfers of the same
// group plus a local reduction. Every call accepted is recorded (nccl_log.cpp: cudasimNcclCalls).
#include <cstring>

#include "nccl_sim.hpp"

using namespace cudasim;
using namespace cudasim::nccl;

namespace {

struct Pending {
  std::unique_ptr<Group> g;
  cudaStream_t handle = nullptr;
};

thread_local int t_depth = 0;
thread_local Pending t_group;
thread_local ncclResult_t t_group_err = ncclSuccess;

// The group this call joins (started here when none), after checking communicator and stream.
ncclResult_t join_group(ncclComm_t comm, cudaStream_t h, const char *call, Group **out) {
  std::shared_ptr<CommState> c = state_of(comm);
  if (!c) return api_error(nullptr, ncclInvalidArgument, "%s: invalid communicator", call);
  int init = c->init.load();
  if (init != ncclSuccess)
    return api_error(c.get(), init == ncclInProgress ? ncclInvalidUsage : (ncclResult_t)init,
                     "%s: communicator not initialised", call);
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (c->async != ncclSuccess) return c->async;  // a failed communicator takes no more work
  }
  StreamRef s = h == cudaStreamPerThread ? nullptr : stream_of(h);
  if (!s) return api_error(c.get(), ncclInvalidArgument, "%s: invalid stream %p", call, (void *)h);
  if (s->device != c->device)
    return api_error(c.get(), ncclInvalidArgument, "%s: stream of device %d, communicator of "
                     "device %d", call, s->device, c->device);
  Pending &p = t_group;
  if (!p.g) {
    p.g = std::make_unique<Group>();
    p.g->comm = c;
    p.g->stream = s;
    p.handle = h;
  } else if (p.g->comm != c) {
    return api_error(c.get(), ncclInvalidUsage, "%s: cudasim runs one communicator per group "
                     "(NCCL allows several)", call);
  } else if (p.handle != h) {
    return api_error(c.get(), ncclInvalidUsage, "%s: cudasim runs one stream per group (NCCL "
                     "allows several)", call);
  }
  *out = p.g.get();
  return ncclSuccess;
}

// A buffer of `bytes` must lie inside device memory of the communicator's device.
ncclResult_t check_buffer(Group &g, const void *p, size_t bytes, const char *call, const char *which) {
  if (bytes == 0) return ncclSuccess;
  Block *b = p ? mem_find(p) : nullptr;
  bool ok = b && b->kind == Kind::Device && b->device == g.comm->device &&
            mem_state(b) != State::Freed && (const char *)p + bytes <= b->base + b->size;
  if (!ok)
    return api_error(g.comm.get(), ncclInvalidArgument, "%s: %s [%p, +%zu) is not inside device "
                     "memory of device %d", call, which, p, bytes, g.comm->device);
  g.touches.push_back({p, bytes, 1});
  return ncclSuccess;
}

void add(Group &g, bool send, int peer, const void *buf, size_t bytes, int type, const char *coll) {
  P2p o;
  o.send = send;
  o.peer = peer;
  o.buf = static_cast<char *>(const_cast<void *>(buf));
  o.bytes = bytes;
  o.type = type;
  o.coll = coll;
  g.ops.push_back(o);
}

// Numbers the group and its transfers, then enqueues it (or defers it: non-blocking).
ncclResult_t end_group(std::unique_ptr<Group> g) {
  CommState &c = *g->comm;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    for (P2p &o : g->ops)
      o.seq = o.send ? c.sends_issued[(size_t)o.peer]++ : c.recvs_issued[(size_t)o.peer]++;
    g->seq = c.groups_issued++;
    if (!c.blocking) {
      c.deferred.push_back(std::move(g));
      c.deferred_ready = now_seconds() + settings().enqueue_us * 1e-6;
      return ncclInProgress;
    }
  }
  enqueue_group(std::move(g));
  return ncclSuccess;
}

ncclResult_t group_end() {
  if (t_depth <= 0) return api_error(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_depth > 0) return ncclSuccess;
  std::unique_ptr<Group> g = std::move(t_group.g);
  ncclResult_t err = t_group_err;
  t_group = Pending{};
  t_group_err = ncclSuccess;
  if (err != ncclSuccess) return err;  // a failed call discards the whole group
  if (!g) return ncclSuccess;
  return end_group(std::move(g));
}

// Runs `body` (which adds to the group) inside a group of its own when no group is open.
template <class F>
ncclResult_t post(ncclComm_t comm, cudaStream_t stream, const char *call, F body) {
  ++t_depth;
  Group *g = nullptr;
  ncclResult_t r = join_group(comm, stream, call, &g);
  if (r == ncclSuccess) r = body(*g);
  if (r != ncclSuccess && t_group_err == ncclSuccess) t_group_err = r;
  ncclResult_t e = group_end();
  return r != ncclSuccess ? r : e;
}

ncclResult_t check_type(CommState &c, int type, const char *call) {
  if (type_size(type)) return ncclSuccess;
  return api_error(&c, ncclInvalidArgument, "%s: data type %d is not simulated", call, type);
}

ncclResult_t check_peer(CommState &c, int peer, const char *call) {
  if (peer >= 0 && peer < c.nranks) return ncclSuccess;
  return api_error(&c, ncclInvalidArgument, "%s: peer %d of %d ranks", call, peer, c.nranks);
}

}  // namespace

extern "C" {

ncclResult_t ncclGroupStart(void) {
  ++t_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) { return group_end(); }

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return post(comm, stream, "ncclSend", [&](Group &g) {
    CommState &c = *g.comm;
    ncclResult_t r = check_type(c, type, "ncclSend");
    if (r == ncclSuccess) r = check_peer(c, peer, "ncclSend");
    size_t bytes = count * type_size(type);
    if (r == ncclSuccess) r = check_buffer(g, buf, bytes, "ncclSend", "sendbuff");
    if (r != ncclSuccess) return r;
    add(g, true, peer, buf, bytes, type, "send");
    record_call("ncclSend", c, count, type, -1, peer, bytes);
    return r;
  });
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return post(comm, stream, "ncclRecv", [&](Group &g) {
    CommState &c = *g.comm;
    ncclResult_t r = check_type(c, type, "ncclRecv");
    if (r == ncclSuccess) r = check_peer(c, peer, "ncclRecv");
    size_t bytes = count * type_size(type);
    if (r == ncclSuccess) r = check_buffer(g, buf, bytes, "ncclRecv", "recvbuff");
    if (r != ncclSuccess) return r;
    add(g, false, peer, buf, bytes, type, "recv");
    record_call("ncclRecv", c, count, type, -1, peer, bytes);
    return r;
  });
}

ncclResult_t ncclAllGather(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return post(comm, stream, "ncclAllGather", [&](Group &g) {
    CommState &c = *g.comm;
    ncclResult_t r = check_type(c, type, "ncclAllGather");
    size_t bytes = count * type_size(type), n = (size_t)c.nranks;
    if (r == ncclSuccess) r = check_buffer(g, sbuf, bytes, "ncclAllGather", "sendbuff");
    if (r == ncclSuccess) r = check_buffer(g, rbuf, n * bytes, "ncclAllGather", "recvbuff");
    if (r != ncclSuccess) return r;
    for (int p = 0; p < c.nranks; ++p) {
      add(g, true, p, sbuf, bytes, type, "allgather");
      add(g, false, p, static_cast<char *>(rbuf) + (size_t)p * bytes, bytes, type, "allgather");
    }
    record_call("ncclAllGather", c, count, type, -1, -1, bytes);
    return r;
  });
}

// Every rank receives every rank's contribution (its segment, or all of it) into host memory,
// then reduces them in rank order into recvbuff.
static ncclResult_t reduce_coll(Group &g, const char *call, const void *sbuf, void *rbuf,
                                size_t count, int type, int op, bool scatter) {
  CommState &c = *g.comm;
  ncclResult_t r = check_type(c, type, call);
  if (r == ncclSuccess && (op < 0 || op >= ncclNumOps))
    r = api_error(&c, ncclInvalidArgument, "%s: reduction op %d is not simulated", call, op);
  size_t bytes = count * type_size(type), n = (size_t)c.nranks;
  if (r == ncclSuccess) r = check_buffer(g, sbuf, scatter ? n * bytes : bytes, call, "sendbuff");
  if (r == ncclSuccess) r = check_buffer(g, rbuf, bytes, call, "recvbuff");
  if (r != ncclSuccess) return r;
  g.tmp.emplace_back(new char[n * bytes + 1]);
  char *tmp = g.tmp.back().get(), *dst = static_cast<char *>(rbuf);
  const char *coll = scatter ? "reducescatter" : "allreduce";
  for (int p = 0; p < c.nranks; ++p) {
    add(g, true, p, static_cast<const char *>(sbuf) + (scatter ? (size_t)p * bytes : 0), bytes,
        type, coll);
    add(g, false, p, tmp + (size_t)p * bytes, bytes, type, coll);
  }
  int nr = c.nranks;
  g.post.push_back([=] { reduce_into(type, op, dst, tmp, count, nr); });
  record_call(scatter ? "ncclReduceScatter" : "ncclAllReduce", c, count, type, op, -1,
              scatter ? n * bytes : bytes);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return post(comm, stream, "ncclAllReduce", [&](Group &g) {
    return reduce_coll(g, "ncclAllReduce", sbuf, rbuf, count, type, op, false);
  });
}

ncclResult_t ncclReduceScatter(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return post(comm, stream, "ncclReduceScatter", [&](Group &g) {
    return reduce_coll(g, "ncclReduceScatter", sbuf, rbuf, count, type, op, true);
  });
}

// Block p of sendbuff to rank p, block p of recvbuff from rank p (itself included), as NCCL 2.28's.
ncclResult_t ncclAlltoAll(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                          ncclComm_t comm, cudaStream_t stream) {
  return post(comm, stream, "ncclAlltoAll", [&](Group &g) {
    CommState &c = *g.comm;
    ncclResult_t r = check_type(c, type, "ncclAlltoAll");
    size_t bytes = count * type_size(type), n = (size_t)c.nranks;
    if (r == ncclSuccess) r = check_buffer(g, sbuf, n * bytes, "ncclAlltoAll", "sendbuff");
    if (r == ncclSuccess) r = check_buffer(g, rbuf, n * bytes, "ncclAlltoAll", "recvbuff");
    if (r == ncclSuccess && bytes && sbuf == rbuf)
      r = api_error(&c, ncclInvalidArgument, "ncclAlltoAll: in place (sendbuff == recvbuff) is "
                    "not supported");
    if (r != ncclSuccess) return r;
    for (int p = 0; p < c.nranks; ++p) {
      add(g, true, p, static_cast<const char *>(sbuf) + (size_t)p * bytes, bytes, type, "alltoall");
      add(g, false, p, static_cast<char *>(rbuf) + (size_t)p * bytes, bytes, type, "alltoall");
    }
    record_call("ncclAlltoAll", c, count, type, -1, -1, n * bytes);
    return r;
  });
}

ncclResult_t ncclBroadcast(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return post(comm, stream, "ncclBroadcast", [&](Group &g) {
    CommState &c = *g.comm;
    ncclResult_t r = check_type(c, type, "ncclBroadcast");
    if (r == ncclSuccess) r = check_peer(c, root, "ncclBroadcast (root)");
    size_t bytes = count * type_size(type);
    if (r == ncclSuccess && c.rank == root) r = check_buffer(g, sbuf, bytes, "ncclBroadcast", "sendbuff");
    if (r == ncclSuccess) r = check_buffer(g, rbuf, bytes, "ncclBroadcast", "recvbuff");
    if (r != ncclSuccess) return r;
    if (c.rank == root)
      for (int p = 0; p < c.nranks; ++p) add(g, true, p, sbuf, bytes, type, "broadcast");
    add(g, false, root, rbuf, bytes, type, "broadcast");
    record_call("ncclBroadcast", c, count, type, -1, root, bytes);
    return ncclSuccess;
  });
}

}  // extern "C"
