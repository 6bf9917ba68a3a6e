// SPDX-License-Identifier: BSD-3-Clause
// lm_reshard_plan_info: what executing a plan moves, from the plan's own schedule
// (plan/planner.hpp, schedule_traffic) and the rules the transports choose routes by
// (transport/select.hpp: the board exchange, select_node_local_route).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "comm/node.hpp"
#include "common/error.hpp"
#include "common/dtype.hpp"
#include "common/mpi.hpp"
#include "mesh/collective.hpp"
#include "tensor/ops.hpp"
#include "tensor/persistent.hpp"
#include "tensor/tensor.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

constexpr int kSums = 11;  // the int64 fields after `routes`, in declaration order

// This rank's counts for schedule s on comm; board: a blocking execution takes the board exchange.
// ride: the message exchange the execution rides the agreement with (its traffic where other
// than the steps').
void traffic_info(const Schedule &s, MPI_Comm comm, bool board, const FusedExchange *ride,
                  lm_reshard_plan_info_t &out) {
  Traffic t = schedule_traffic(s);
  if (ride) ride->traffic(&t);
  const std::vector<int> node = node_peers(comm);
  std::vector<int> peers;
  for (const Flow &f : t.flows) {  // one per (peer, step, direction)
    peers.push_back(f.peer);
    ++(f.send ? out.flows_sent : out.flows_received);
    (f.send ? out.bytes_sent : out.bytes_received) += (int64_t)f.bytes;
    const bool local = !board && select_node_local_route(node, f.peer, f.bytes);
    if (local) out.bytes_node_local += (int64_t)f.bytes;
    out.routes |= board ? LM_ROUTE_BOARD : local ? LM_ROUTE_NODE_LOCAL : LM_ROUTE_MPI;
  }
  std::sort(peers.begin(), peers.end());
  out.peers = (int64_t)(std::unique(peers.begin(), peers.end()) - peers.begin());
  out.steps = (int64_t)s.steps.size();
  out.bytes_copied = (int64_t)t.bytes_copied;
  out.bytes_reduced = (int64_t)t.bytes_reduced;
  out.work_bytes = (int64_t)t.work_bytes;
  out.staging_bytes_max = (int64_t)std::min<uint64_t>(t.staging_need, staging_bytes());
}

// What an LM_PLAN_INFO_ALL_RANKS call was asked, for the agreement's messages.
struct InfoCall {
  const Layout *src, *dst;
  DLDataType dtype;
};

std::string describe_info(const void *p, int field) {
  const InfoCall &c = *static_cast<const InfoCall *>(p);
  switch (field) {
    case 1: return c.src->desc();
    case 2: return c.dst->desc();
    case 3: {
      std::string r = "[";
      for (size_t i = 0; i < c.src->gshape.size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)c.src->gshape[i]);
      return r + "]";
    }
    case 4: return dl_dtype_name(c.dtype);
  }
  return "?";
}

// The routes bits, each summed as a count (a set bit on any rank: a count above 0), so that one
// sum carries them beside the counts.
constexpr int kRouteBits = 3;

// Every rank's counts summed (routes OR-ed) over the ranks of both meshes (collective over them).
// Like every collective of the library it is agreed first (the operation and the layouts: a rank
// that asks alone meets the others' next call and every rank gets LM_ERR_MISMATCH), and the sum
// itself waits under the call's deadline. call: NULL when this rank's arguments failed (`local`,
// `err`): it still joins the agreement, which fails on every rank.
void sum_over_ranks(lm_mesh_s *sm, lm_mesh_s *dm, AgreeComm **ac, const char *fn,
                    const InfoCall *call, lm_status_t local, const std::string &err,
                    lm_reshard_plan_info_t &out) {
  if (!sm->member && !dm->member) {  // outside both: its own (empty) counts
    if (local != LM_SUCCESS) throw Error(local, err);
    return;
  }
  if (!*ac) *ac = collective_comm(sm, dm);
  Fingerprint fp(fn);
  if (call) {
    fp.add("source placements", hash_placements(call->src->pl.data(), sm->ndim()));
    fp.add("target placements", hash_placements(call->dst->pl.data(), dm->ndim()));
    fp.add("global shape", hash_shape(call->src->gshape.data(), call->src->ndim()));
    fp.add("dtype", hash_dtype(call->dtype));
  }
  agree_call(fn, sm, dm, check_level(sm, dm) >= 1 && call ? &fp : nullptr, describe_info, call,
             local, err);
  // The sums, on the heap: a request given up at the deadline keeps its buffer.
  auto v = std::make_shared<std::vector<int64_t>>(kSums + kRouteBits);
  std::memcpy(v->data(), &out.steps, kSums * sizeof(int64_t));
  for (int b = 0; b < kRouteBits; ++b) (*v)[(size_t)(kSums + b)] = (out.routes >> b) & 1;
  try {
    MPI_Request req;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, v->data(), kSums + kRouteBits, MPI_INT64_T, MPI_SUM,
                             (*ac)->comm, &req),
              strfmt("%s: MPI_Iallreduce", fn).c_str());
    wait_or_abandon(*ac, &req, v, call_timeout(sm, dm), strfmt("%s: the sums", fn).c_str());
  } catch (const Error &e) {  // the channel is unusable now: so are the meshes (as in agree())
    (*ac)->broken = true;
    (*ac)->broken_why = e.message();
    mesh_break(sm, e, dm != sm ? dm : nullptr);
  }
  std::memcpy(&out.steps, v->data(), kSums * sizeof(int64_t));
  out.routes = 0;
  for (int b = 0; b < kRouteBits; ++b)
    if ((*v)[(size_t)(kSums + b)] > 0) out.routes |= 1u << b;
}

// The caller's struct may be an older, shorter one: write what it has room for.
void write_info(lm_reshard_plan_info_t out, lm_reshard_plan_info_t *info) {
  const size_t n = std::min(info->size, sizeof out);
  out.size = info->size;
  out.magic = info->magic;
  out.version = info->version;
  std::memcpy(info, &out, n);
}

// An LM_PLAN_INFO_ALL_RANKS estimate whose arguments failed here: where both meshes are valid
// handles this rank joins the others' agreement with its failure (they get LM_ERR_REMOTE, none
// waits); otherwise it can only fail alone. Throws.
[[noreturn]] void join_failed(lm_mesh_t src_mesh, lm_mesh_t dst_mesh, const char *fn,
                              const Error &e) {
  lm_mesh_s *sm = nullptr, *dm = nullptr;
  try {
    sm = mesh_check(src_mesh, fn);
    dm = dst_mesh ? mesh_check(dst_mesh, fn) : sm;
  } catch (const Error &) {
    throw e;
  }
  lm_reshard_plan_info_t unused{};
  AgreeComm *ac = nullptr;
  sum_over_ranks(sm, dm, &ac, fn, nullptr, e.status(), e.message(), unused);
  throw e;  // (sum_over_ranks has thrown: the agreement fails on every rank)
}

lm_reshard_plan_info_t fresh_info() {
  lm_reshard_plan_info_t out{};
  out.size = sizeof out;
  out.magic = LM_RESHARD_PLAN_INFO_MAGIC;
  out.version = LM_RESHARD_PLAN_INFO_VERSION;
  return out;
}

}  // namespace

void plan_info(lm_reshard_plan_s *p, int flags, lm_reshard_plan_info_t *info) {
  static_assert(offsetof(lm_reshard_plan_info_t, staging_bytes_max) ==
                    offsetof(lm_reshard_plan_info_t, steps) + (kSums - 1) * sizeof(int64_t),
                "the summed fields are the int64 ones from steps on");
  lm_reshard_plan_info_t out = fresh_info();
  traffic_info(*p->plan, p->plan->comm, p->plan->involved && plan_takes_board(p), plan_fused(p),
               out);
  if (flags & LM_PLAN_INFO_ALL_RANKS) {
    const char *fn = "lm_reshard_plan_info";
    lm_status_t st = LM_SUCCESS;
    std::string err;
    try {  // a broken mesh joins the agreement with its failure, so that no rank waits for it
      mesh_check_usable(p->src_mesh, fn);
      mesh_check_usable(p->dst_mesh, fn);
    } catch (const Error &e) {
      st = e.status();
      err = e.message();
    }
    const InfoCall call{&p->plan->src, &p->plan->dst, p->plan->dtype};
    sum_over_ranks(p->src_mesh, p->dst_mesh, &p->agree, fn, &call, st, err, out);
  }
  write_info(out, info);
}

void reshard_estimate(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                      const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                      DLDataType dtype, int flags, lm_reshard_plan_info_t *info) {
  const char *fn = "lm_reshard_estimate";
  ReshardArgs a;
  try {
    a = check_reshard_args(src_mesh, src_pl, dst_mesh, dst_pl, ndim, gshape, dtype, fn);
  } catch (const Error &e) {
    if (!(flags & LM_PLAN_INFO_ALL_RANKS)) throw;
    join_failed(src_mesh, dst_mesh, fn, e);
  }
  lm_mesh_s *sm = a.sm, *dm = a.dm;
  MPI_Comm comm = a.comm;
  Schedule s;  // this rank's, in the planner's compressed form (pure; no buffer; O(runs))
  build_schedule(s, a.src, a.dst, dtype, sm->world_rank, ScheduleForm::kCompressed);
  // The fused exchange, decided as plan_fused does for a plan (same mesh only; the mesh's own
  // channel: local): the board's, or the message exchange's (MPI messages: LM_ROUTE_MPI); one
  // round instead of a reduce-scatter and its gather moves other bytes.
  const AgreeComm *set = sm->agree_members;
  std::unique_ptr<FusedExchange> ride;
  if (s.involved && sm == dm &&
      (set->board || (set->by_messages && check_level(sm, dm) > 0 && call_timeout(sm, dm) <= 0)))
    ride = select_fused_exchange(s, comm, set);
  lm_reshard_plan_info_t out = fresh_info();
  traffic_info(s, comm, ride && set->board, ride.get(), out);
  AgreeComm *ac = nullptr;
  const InfoCall call{&a.src, &a.dst, dtype};
  if (flags & LM_PLAN_INFO_ALL_RANKS) sum_over_ranks(sm, dm, &ac, fn, &call, LM_SUCCESS, "", out);
  write_info(out, info);
}

}  // namespace lm
