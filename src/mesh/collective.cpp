// SPDX-License-Identifier: BSD-3-Clause
#include "mesh/collective.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.hpp"

namespace lm {

AgreeComm *collective_comm(lm_mesh_s *sm, lm_mesh_s *dm) {
  if (!dm || dm == sm || sm->agree_members == dm->agree_members)
    return sm->agree_members;
  std::set<int> u;
  for (int64_t i = 0; i < sm->grid->size(); ++i) u.insert(sm->grid->rank_at_index(i));
  for (int64_t i = 0; i < dm->grid->size(); ++i) u.insert(dm->grid->rank_at_index(i));
  if ((int)u.size() == sm->world_size) return sm->agree_parent;
  // The union's channel: the set's shared one, or with private channels the pair's own, kept by
  // the mesh of the smaller local id (both meshes are in every call that uses it).
  lm_mesh_s *lo = sm->local_id < dm->local_id ? sm : dm, *hi = lo == sm ? dm : sm;
  const bool priv = !sm->own_agree.empty();
  if (priv) {
    auto it = lo->union_agree.find(hi->local_id);
    if (it != lo->union_agree.end()) return it->second;
  }
  std::vector<int> r(u.begin(), u.end());
  MPI_Group wg, g;
  mpi_check(MPI_Comm_group(sm->world, &wg), "MPI_Comm_group");
  MPI_Group_incl(wg, (int)r.size(), r.data(), &g);
  MPI_Group_free(&wg);
  AgreeComm *ac = nullptr;
  try {
    if (priv)
      ac = lo->union_agree[hi->local_id] =
          private_agree_comm_of(sm->world, g, "cross-mesh call", call_timeout(sm, dm));
    else
      ac = agree_comm_for(sm->world, g, "cross-mesh call", call_timeout(sm, dm));
  } catch (...) {
    MPI_Group_free(&g);
    throw;
  }
  MPI_Group_free(&g);
  return ac;
}

std::string mesh_desc(const lm_mesh_s *m) {
  std::string r = strfmt("mesh #%llu [", (unsigned long long)m->id);
  for (int i = 0; i < m->ndim(); ++i)
    r += strfmt(i ? ", %lld" : "%lld", (long long)m->grid->shape()[(size_t)i]);
  return r + "]";
}

void agree_call(const char *fn, lm_mesh_s *sm, lm_mesh_s *dm, const Fingerprint *fp,
                DescribeFn describe, const void *ctx, lm_status_t local, const std::string &err,
                long long root) {
  require_mpi(fn);  // after MPI_Finalize the channels are gone: fail before looking them up
  AgreeArgs a;
  a.fn = fn;
  a.ac = collective_comm(sm, dm);
  a.fp = fp;
  a.describe = describe;
  a.ctx = ctx;
  a.local = local;
  a.err = &err;
  a.parent_rank = sm->world_rank;
  a.mesh_rank = (!dm || dm == sm) ? sm->index : -1;
  a.timeout = call_timeout(sm, dm);
  a.root = root;
  agree_meshes(a, sm, dm);
}

void agree_meshes(const AgreeArgs &a, lm_mesh_s *sm, lm_mesh_s *dm) {
  try {
    agree(a);
  } catch (const Error &e) {
    if (a.ac->broken) mesh_break(sm, e, dm != sm ? dm : nullptr);
    throw;
  }
}

}  // namespace lm
