// SPDX-License-Identifier: BSD-3-Clause
// lm_reshard_plan_info: what executing a plan moves, from the plan's own schedule
// (plan/planner.hpp, schedule_traffic) and the rules the transports choose routes by
// (transport/select.hpp: the board exchange, select_node_local_route).
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/agree.hpp"
#include "comm/node.hpp"
#include "common/error.hpp"
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
void traffic_info(const Schedule &s, MPI_Comm comm, bool board, lm_reshard_plan_info_t &out) {
  const Traffic t = schedule_traffic(s);
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

// Every rank's counts summed (routes OR-ed) over the ranks of both meshes (collective over them).
void sum_over_ranks(lm_mesh_s *sm, lm_mesh_s *dm, AgreeComm **ac, const char *fn,
                    lm_reshard_plan_info_t &out) {
  mesh_check_usable(sm, fn);
  mesh_check_usable(dm, fn);
  if (!sm->member && !dm->member) return;  // outside both: its own (empty) counts
  if (!*ac) *ac = collective_comm(sm, dm);
  int64_t v[kSums];
  std::memcpy(v, &out.steps, sizeof v);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, kSums, MPI_INT64_T, MPI_SUM, (*ac)->comm),
            strfmt("%s: MPI_Allreduce", fn).c_str());
  std::memcpy(&out.steps, v, sizeof v);
  unsigned r = out.routes;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_UNSIGNED, MPI_BOR, (*ac)->comm),
            strfmt("%s: MPI_Allreduce", fn).c_str());
  out.routes = r;
}

// The caller's struct may be an older, shorter one: write what it has room for.
void write_info(lm_reshard_plan_info_t out, lm_reshard_plan_info_t *info) {
  const size_t n = std::min(info->size, sizeof out);
  out.size = info->size;
  out.version = info->version;
  std::memcpy(info, &out, n);
}

lm_reshard_plan_info_t fresh_info() {
  lm_reshard_plan_info_t out{};
  out.size = sizeof out;
  out.version = LM_RESHARD_PLAN_INFO_VERSION;
  return out;
}

}  // namespace

void plan_info(lm_reshard_plan_s *p, int flags, lm_reshard_plan_info_t *info) {
  static_assert(offsetof(lm_reshard_plan_info_t, staging_bytes_max) ==
                    offsetof(lm_reshard_plan_info_t, steps) + (kSums - 1) * sizeof(int64_t),
                "the summed fields are the int64 ones from steps on");
  lm_reshard_plan_info_t out = fresh_info();
  traffic_info(*p->plan, p->plan->comm, p->plan->involved && plan_takes_board(p), out);
  if (flags & LM_PLAN_INFO_ALL_RANKS)
    sum_over_ranks(p->src_mesh, p->dst_mesh, &p->agree, "lm_reshard_plan_info", out);
  write_info(out, info);
}

void reshard_estimate(lm_mesh_t src_mesh, const lm_placement_t *src_pl, lm_mesh_t dst_mesh,
                      const lm_placement_t *dst_pl, int ndim, const int64_t *gshape,
                      DLDataType dtype, int flags, lm_reshard_plan_info_t *info) {
  const char *fn = "lm_reshard_estimate";
  ReshardArgs a = check_reshard_args(src_mesh, src_pl, dst_mesh, dst_pl, ndim, gshape, dtype, fn);
  lm_mesh_s *sm = a.sm, *dm = a.dm;
  MPI_Comm comm = a.comm;
  Schedule s;  // this rank's, in the planner's compressed form (pure; no buffer; O(runs))
  build_schedule(s, a.src, a.dst, dtype, sm->world_rank, ScheduleForm::kCompressed);
  // The board exchange, decided as for a plan (same mesh only; the mesh's own channel: local).
  const bool board = s.involved && sm == dm && select_fused_exchange(s, comm, sm->agree_members);
  lm_reshard_plan_info_t out = fresh_info();
  traffic_info(s, comm, board, out);
  AgreeComm *ac = nullptr;
  if (flags & LM_PLAN_INFO_ALL_RANKS) sum_over_ranks(sm, dm, &ac, fn, out);
  write_info(out, info);
}

}  // namespace lm
