// SPDX-License-Identifier: BSD-3-Clause
#include "mesh/device.hpp"

#include "common/error.hpp"
#include "common/mpi.hpp"
#include "transport/select.hpp"

namespace lm {

PairDevice::~PairDevice() {
  device_comm_destroy(&device_comm);
  if (comm != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm);
}

MeshDevice::~MeshDevice() {
  pairs.clear();
  device_comm_destroy(&device_comm);
}

MeshDevice &mesh_device(lm_mesh_s *m) {
  if (!m->dev) m->dev = std::make_shared<MeshDevice>();
  return *m->dev;
}

int device_transport(lm_mesh_s *m, int device_id) {
  MeshDevice &d = mesh_device(m);
  if (d.transport != LM_TRANSPORT_UNDECIDED) return d.transport;
  try {
    d.transport = choose_device_transport(m->comm, (int)m->grid->size(), device_id, "mesh ranks",
                                          &d.transport_why);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  return d.transport;
}

DeviceComm *mesh_device_comm(lm_mesh_s *m, int device_id) {
  MeshDevice &d = mesh_device(m);
  if (device_comm_ready(d.device_comm, device_id, "the mesh's")) return d.device_comm;
  try {
    device_comm_create(&d.device_comm, m->comm, (int)m->grid->size(), (int)m->index, device_id);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  return d.device_comm;
}

// The tag of MPI_Comm_create_group for pair communicators (distinguishes concurrent creations
// on one parent; within MPI's guaranteed MPI_TAG_UB of 32767).
constexpr int kPairCommTag = 31117;

// The union of both meshes' ranks in parent rank order: p.map, p.size, p.rank, and p.comm.
static void make_pair_comm(PairDevice &p, lm_mesh_s *sm, lm_mesh_s *dm, MPI_Comm parent) {
  int wsize = 0;
  mpi_check(MPI_Comm_size(parent, &wsize), "cross-mesh device transport: MPI_Comm_size");
  p.map.assign((size_t)wsize, -1);
  for (lm_mesh_s *m : {sm, dm})
    for (int64_t i = 0; i < m->grid->size(); ++i) p.map[(size_t)m->grid->rank_at_index(i)] = 0;
  std::vector<int> ranks;
  for (int r = 0; r < wsize; ++r)
    if (p.map[(size_t)r] == 0) {
      p.map[(size_t)r] = (int)ranks.size();
      ranks.push_back(r);
    }
  p.size = (int)ranks.size();
  p.rank = p.map[(size_t)sm->world_rank];
  if (p.rank < 0)
    fail(LM_ERR_INTERNAL, "cross-mesh device transport: rank %d is in neither mesh",
         sm->world_rank);
  MPI_Group wg = MPI_GROUP_NULL, ug = MPI_GROUP_NULL;
  mpi_check(MPI_Comm_group(parent, &wg), "cross-mesh device transport: MPI_Comm_group");
  int rc = MPI_Group_incl(wg, p.size, ranks.data(), &ug);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(parent, ug, kPairCommTag, &p.comm);
  MPI_Group_free(&wg);
  if (ug != MPI_GROUP_NULL) MPI_Group_free(&ug);
  mpi_check(rc, "cross-mesh device transport: MPI_Comm_create_group of the two meshes' ranks");
  MPI_Comm_set_errhandler(p.comm, MPI_ERRORS_RETURN);
}

PairDevice &pair_device(lm_mesh_s *sm, lm_mesh_s *dm, MPI_Comm parent, int device_id) {
  lm_mesh_s *lo = sm->local_id < dm->local_id ? sm : dm, *hi = lo == sm ? dm : sm;
  MeshDevice &d = mesh_device(lo);
  auto it = d.pairs.find(hi->local_id);
  if (it != d.pairs.end()) return *it->second;
  auto p = std::make_unique<PairDevice>();
  try {
    make_pair_comm(*p, sm, dm, parent);
    p->transport = choose_device_transport(p->comm, p->size, device_id,
                                           "ranks of the two meshes' union", &p->transport_why);
  } catch (const Error &e) {
    mesh_break(sm, e, dm);
  }
  return *(d.pairs[hi->local_id] = std::move(p));
}

DeviceComm *pair_device_comm(PairDevice &p, lm_mesh_s *sm, lm_mesh_s *dm, int device_id) {
  if (device_comm_ready(p.device_comm, device_id, "the two meshes'")) return p.device_comm;
  try {
    device_comm_create(&p.device_comm, p.comm, p.size, p.rank, device_id);
  } catch (const Error &e) {
    mesh_break(sm, e, dm);
  }
  return p.device_comm;
}

void pair_agree(lm_mesh_s *sm, lm_mesh_s *dm, lm_status_t local, const std::string &err,
                const char *what) {
  lm_mesh_s *lo = sm->local_id < dm->local_id ? sm : dm, *hi = lo == sm ? dm : sm;
  MeshDevice &d = mesh_device(lo);
  auto it = d.pairs.find(hi->local_id);
  if (it == d.pairs.end() || it->second->comm == MPI_COMM_NULL) {
    if (local != LM_SUCCESS) throw Error(local, err);
    return;
  }
  PairDevice &p = *it->second;
  int v = local != LM_SUCCESS ? p.size - p.rank : 0;
  try {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, p.comm), what);
  } catch (const Error &e) {
    mesh_break(sm, e, dm);
  }
  if (local != LM_SUCCESS) throw Error(local, err);
  if (v) {
    const int failed = p.size - v;
    int parent = -1;
    for (size_t r = 0; r < p.map.size(); ++r)
      if (p.map[r] == failed) parent = (int)r;
    fail(LM_ERR_REMOTE, "%s: rank %d failed; this rank %d did not", what, parent, sm->world_rank);
  }
}

void *stage_to_host_agreed(lm_mesh_s *agree, lm_mesh_s *m, const void *dev, size_t bytes) {
  void *h = nullptr;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    if (dev) h = stage_to_host(mesh_mem(m), dev, bytes);
  } catch (const Error &e) {
    if (!agree) throw;
    st = e.status();
    err = e.message();
  }
  if (agree) {
    try {
      mesh_agree(agree, st, err, "device staging");
    } catch (...) {
      stage_release(mesh_mem(m), h);
      throw;
    }
  }
  return h;
}

}  // namespace lm
