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
#include "tensor/persistent.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

constexpr int kSums = 11;  // the int64 fields after `routes`, in declaration order

void local_info(lm_reshard_plan_s *p, lm_reshard_plan_info_t &out) {
  const Traffic t = schedule_traffic(*p->plan);
  const bool board = p->plan->involved && plan_takes_board(p);
  const std::vector<int> node = node_peers(p->plan->comm);
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
  out.steps = (int64_t)p->plan->steps.size();
  out.bytes_copied = (int64_t)t.bytes_copied;
  out.bytes_reduced = (int64_t)t.bytes_reduced;
  out.work_bytes = (int64_t)t.work_bytes;
  out.staging_bytes_max = (int64_t)std::min<uint64_t>(t.staging_need, staging_bytes());
}

// Every rank's counts summed (routes OR-ed) over the ranks of both meshes.
void sum_over_ranks(lm_reshard_plan_s *p, lm_reshard_plan_info_t &out) {
  const char *fn = "lm_reshard_plan_info";
  mesh_check_usable(p->src_mesh, fn);
  mesh_check_usable(p->dst_mesh, fn);
  if (!p->src_mesh->member && !p->dst_mesh->member) return;  // outside both: its own (empty) counts
  if (!p->agree) p->agree = collective_comm(p->src_mesh, p->dst_mesh);
  int64_t v[kSums];
  std::memcpy(v, &out.steps, sizeof v);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, kSums, MPI_INT64_T, MPI_SUM, p->agree->comm),
            "lm_reshard_plan_info: MPI_Allreduce");
  std::memcpy(&out.steps, v, sizeof v);
  unsigned r = out.routes;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_UNSIGNED, MPI_BOR, p->agree->comm),
            "lm_reshard_plan_info: MPI_Allreduce");
  out.routes = r;
}

}  // namespace

void plan_info(lm_reshard_plan_s *p, int flags, lm_reshard_plan_info_t *info) {
  static_assert(offsetof(lm_reshard_plan_info_t, staging_bytes_max) ==
                    offsetof(lm_reshard_plan_info_t, steps) + (kSums - 1) * sizeof(int64_t),
                "the summed fields are the int64 ones from steps on");
  lm_reshard_plan_info_t out{};
  out.size = sizeof out;
  out.version = LM_RESHARD_PLAN_INFO_VERSION;
  local_info(p, out);
  if (flags & LM_PLAN_INFO_ALL_RANKS) sum_over_ranks(p, out);
  // The caller's struct may be an older, shorter one: write what it has room for.
  const size_t n = std::min(info->size, sizeof out);
  out.size = info->size;
  out.version = info->version;
  std::memcpy(info, &out, n);
}

}  // namespace lm
