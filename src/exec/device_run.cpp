// SPDX-License-Identifier: BSD-3-Clause
#include "exec/device_run.hpp"

#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mesh/device.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

// The stream a cross-mesh plan runs on: the target mesh's where this rank has a target shard.
void *run_stream(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh) {
  return (dst_mesh->member ? mesh_mem(dst_mesh) : mesh_mem(src_mesh)).config.stream;
}

}  // namespace

bool device_nccl_spec(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, MPI_Comm comm, int device_id,
                      TransportSpec *spec) {
  DeviceComm *dc = nullptr;
  void *stream = nullptr;
  std::vector<int> peer_map;
  if (src_mesh == dst_mesh) {
    if (!src_mesh->member || device_transport(src_mesh, device_id) != LM_TRANSPORT_NCCL)
      return false;
    dc = mesh_device_comm(src_mesh, device_id);
    stream = mesh_mem(src_mesh).config.stream;
    peer_map.assign((size_t)src_mesh->world_size, -1);
    for (int64_t i = 0; i < src_mesh->grid->size(); ++i)
      peer_map[(size_t)src_mesh->grid->rank_at_index(i)] = (int)i;
  } else {
    PairDevice &p = pair_device(src_mesh, dst_mesh, comm, device_id);
    if (p.transport != LM_TRANSPORT_NCCL) return false;
    dc = pair_device_comm(p, src_mesh, dst_mesh, device_id);
    stream = run_stream(src_mesh, dst_mesh);
    peer_map = p.map;
  }
  *spec = select_device_spec(comm, dc, stream, device_id, std::move(peer_map));
  return true;
}

void device_join_streams(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, bool before) {
  if (src_mesh == dst_mesh || !src_mesh->member || !dst_mesh->member) return;
  void *src = mesh_mem(src_mesh).config.stream, *run = run_stream(src_mesh, dst_mesh);
  if (before)
    stream_wait(run, src);
  else
    stream_wait(src, run);
}

namespace {

// Sets plan's route to NCCL when the meshes' device transport is NCCL; false: staged.
bool route_on_nccl(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, int device_id) {
  TransportSpec spec;
  if (!device_nccl_spec(src_mesh, dst_mesh, plan.comm, device_id, &spec)) return false;
  plan.use(spec);
  return true;
}

// Host-staged: pinned copies of the source (copied out) and the target, with the failure agreed
// over the mesh, or across meshes over the pair's union, before any data moves.
void stage_agreed(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, const void *in, size_t in_bytes,
                  void *out, size_t out_bytes, void **hin, void **hout) {
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    if (in) *hin = stage_to_host(mesh_mem(src_mesh), in, in_bytes);
    if (out) *hout = stage_host_buffer(mesh_mem(dst_mesh), out_bytes);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  }
  try {
    if (src_mesh == dst_mesh)
      mesh_agree(src_mesh, st, err, "device staging");
    else
      pair_agree(src_mesh, dst_mesh, st, err, "device staging");
  } catch (...) {
    stage_release(mesh_mem(src_mesh), *hin);
    stage_release(mesh_mem(dst_mesh), *hout);
    *hin = *hout = nullptr;
    throw;
  }
}

}  // namespace

void device_run_plan(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh, Plan &plan, const void *in,
                     size_t in_bytes, void *out, size_t out_bytes, int device_id) {
  if (route_on_nccl(src_mesh, dst_mesh, plan, device_id)) {
    CurrentDevice on(device_id);
    try {
      device_join_streams(src_mesh, dst_mesh, true);
      plan.run(in, out);  // device pointers; everything enqueued on the plan's stream
      device_join_streams(src_mesh, dst_mesh, false);
    } catch (...) {
      plan.abandon();  // a cached plan must not stay mid-execution
      throw;
    }
    plan.check_errors("reshard on NCCL");
    return;
  }
  if (src_mesh->member) device_transport(src_mesh, device_id);
  plan.use(plan.host_spec());
  void *hin = nullptr, *hout = nullptr;
  stage_agreed(src_mesh, dst_mesh, in, in_bytes, out, out_bytes, &hin, &hout);
  try {
    plan.run(hin, hout);
  } catch (...) {
    stage_release(mesh_mem(src_mesh), hin);
    stage_release(mesh_mem(dst_mesh), hout);
    throw;
  }
  stage_release(mesh_mem(src_mesh), hin);
  if (out) stage_to_device(mesh_mem(dst_mesh), out, hout, out_bytes);
}

std::unique_ptr<DeviceRequest> device_plan_start(lm_mesh_s *src_mesh, lm_mesh_s *dst_mesh,
                                                 Plan &plan, const void *in, size_t in_bytes,
                                                 void *out, size_t out_bytes, int device_id) {
  auto r = std::make_unique<DeviceRequest>();
  r->src_mesh = src_mesh;
  r->dst_mesh = dst_mesh;
  if (route_on_nccl(src_mesh, dst_mesh, plan, device_id)) {
    r->nccl = true;
    CurrentDevice on(device_id);
    device_join_streams(src_mesh, dst_mesh, true);
    plan.start(in, out);  // enqueued on the plan's stream
    return r;
  }
  plan.use(plan.host_spec());
  r->dev_out = out;
  r->out_bytes = out_bytes;
  // Staging failures are agreed before any data moves, as in the blocking path.
  stage_agreed(src_mesh, dst_mesh, in, in_bytes, out, out_bytes, &r->host_in, &r->host_out);
  try {
    plan.start(r->host_in, r->host_out);
  } catch (...) {
    device_plan_abandon(*r);
    throw;
  }
  return r;
}

void device_plan_finish(DeviceRequest &r, Plan &plan) {
  if (r.nccl) {
    device_join_streams(r.src_mesh, r.dst_mesh, false);
    plan.check_errors("reshard on NCCL");
    return;
  }
  stage_release(mesh_mem(r.src_mesh), r.host_in);
  r.host_in = nullptr;
  void *h = r.host_out;
  r.host_out = nullptr;
  if (r.dev_out) stage_to_device(mesh_mem(r.dst_mesh), r.dev_out, h, r.out_bytes);
}

void device_plan_abandon(DeviceRequest &r) {
  stage_release(mesh_mem(r.src_mesh), r.host_in);
  stage_release(mesh_mem(r.dst_mesh), r.host_out);
  r.host_in = r.host_out = nullptr;
}

}  // namespace lm
