// SPDX-License-Identifier: BSD-3-Clause
// Glue between the collective entry points (tensor ops, plans, local_map) and the argument
// agreement of comm/agree.hpp: which communicator a call agrees on, at which check level and
// deadline, and which meshes break when the agreement itself fails.
#pragma once

#include "comm/agree.hpp"
#include "mesh/mesh.hpp"

namespace lm {

// The agreement communicator of a call over `sm` (and `dm` when it differs: the union of both
// meshes' ranks, the parent's processes when that is all of them). Only ranks taking part call it.
AgreeComm *collective_comm(lm_mesh_s *sm, lm_mesh_s *dm);
inline int check_level(const lm_mesh_s *sm, const lm_mesh_s *dm) {
  return dm && dm->check_level > sm->check_level ? dm->check_level : sm->check_level;
}
inline double call_timeout(const lm_mesh_s *sm, const lm_mesh_s *dm) {
  return dm && dm->timeout > sm->timeout ? dm->timeout : sm->timeout;
}
// "mesh #3 [2, 2]" for messages.
std::string mesh_desc(const lm_mesh_s *m);
// agree(a), and when the agreement itself fails (an MPI error or the deadline: a.ac breaks) the
// meshes sm and dm (may be NULL or sm) break too.
void agree_meshes(const AgreeArgs &a, lm_mesh_s *sm, lm_mesh_s *dm);
// Agrees over collective_comm(sm, dm): fp NULL agrees only the failure. See agree().
void agree_call(const char *fn, lm_mesh_s *sm, lm_mesh_s *dm, const Fingerprint *fp,
                DescribeFn describe, const void *ctx, lm_status_t local, const std::string &err,
                long long root = -1);

}  // namespace lm
