// SPDX-License-Identifier: BSD-3-Clause
#include "tensor/collective.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/error.hpp"

namespace lm {

AgreeComm *collective_comm(lm_mesh_s *sm, lm_mesh_s *dm) {
  if (!dm || dm == sm || sm->agree_members == dm->agree_members)
    return sm->agree_members;
  std::set<int> u;
  for (int64_t i = 0; i < sm->grid->size(); ++i) u.insert(sm->grid->rank_at_index(i));
  for (int64_t i = 0; i < dm->grid->size(); ++i) u.insert(dm->grid->rank_at_index(i));
  if ((int)u.size() == sm->world_size) return sm->agree_parent;
  std::vector<int> r(u.begin(), u.end());
  MPI_Group wg, g;
  mpi_check(MPI_Comm_group(sm->world, &wg), "MPI_Comm_group");
  MPI_Group_incl(wg, (int)r.size(), r.data(), &g);
  MPI_Group_free(&wg);
  AgreeComm *ac = nullptr;
  try {
    ac = agree_comm_for(sm->world, g);
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
  a.m1 = sm;
  a.m2 = dm;
  a.timeout = call_timeout(sm, dm);
  a.root = root;
  agree(a);
}

void check_replicas(lm_dist_tensor_s *t, const char *fn) {
  lm_mesh_s *m = t->mesh;
  if (!m->member) return;
  bool any = false;
  for (int k = 0; k < m->ndim(); ++k)
    if (t->layout.pl[(size_t)k].kind == LM_REPLICATE && m->grid->shape()[(size_t)k] > 1) any = true;
  if (!any) return;
  Hasher h;
  if (t->data()) h.bytes(t->data(), t->local_bytes());
  unsigned long long mine = h.h;
  std::vector<unsigned long long> all((size_t)m->grid->size());
  try {
    mpi_check(MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1,
                            MPI_UNSIGNED_LONG_LONG, m->comm),
              strfmt("%s: MPI_Allgather (LM_CHECK=2 replica hashes)", fn).c_str());
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  // Ranks whose coordinates differ only along Replicate dims must agree.
  std::map<Shape, int64_t> first;
  Shape c((size_t)m->ndim());
  for (int64_t r = 0; r < m->grid->size(); ++r) {
    m->grid->coord_of(r, c.data());
    for (int k = 0; k < m->ndim(); ++k)
      if (t->layout.pl[(size_t)k].kind == LM_REPLICATE) c[(size_t)k] = 0;
    auto it = first.emplace(c, r).first;
    if (all[(size_t)it->second] != all[(size_t)r])
      fail(LM_ERR_MISMATCH,
           "%s: ranks disagree on the data of a Replicate tensor (LM_CHECK=2): mesh rank %lld "
           "(rank %d) and mesh rank %lld (rank %d) hold different values for placements %s",
           fn, (long long)it->second, m->grid->rank_at_index(it->second), (long long)r,
           m->grid->rank_at_index(r), t->layout.str().c_str());
  }
}

}  // namespace lm
