// SPDX-License-Identifier: BSD-3-Clause
// What the planner's files share (plan/planner.cpp: shards, reductions; plan/cyclic.cpp:
// block-cyclic pieces). Pure, like the planner.
#pragma once

#include <memory>

#include "common/dtype.hpp"
#include "layout/layout.hpp"
#include "plan/schedule.hpp"

namespace lm {

// The source coordinate a receiver takes replicated data from, per replicated source mesh dim.
struct SourceChooser {
  const Layout &in;
  const Layout &out;
  bool same_mesh;
  std::vector<int> rep;  // source mesh dims that are Replicate
  int64_t rep_span = 1;

  SourceChooser(const Layout &i, const Layout &o, bool s) : in(i), out(o), same_mesh(s) {
    for (int m = 0; m < in.mesh_ndim(); ++m)
      if (in.pl[m].kind == LM_REPLICATE) {
        rep.push_back(m);
        rep_span *= in.grid->shape()[m];
      }
  }
  // Writes the chosen coordinate along each replicated dim into `fixed` (source mesh dims).
  void choose(const int64_t *recv_coord, int recv_rank, Shape &fixed) const {
    if (rep.empty()) return;
    if (same_mesh) {
      for (int m : rep) fixed[m] = recv_coord[m];
      return;
    }
    int64_t idx = in.grid->index_of(recv_rank);
    if (idx >= 0) {  // the receiver holds a replica itself: take it from there
      Shape c(in.grid->shape().size());
      in.grid->coord_of(idx, c.data());
      for (int m : rep) fixed[m] = c[m];
      return;
    }
    int64_t k = out.grid->index_at(recv_coord) % rep_span;  // spread receivers over replicas
    for (auto it = rep.rbegin(); it != rep.rend(); ++it) {
      int64_t ext = in.grid->shape()[*it];
      fixed[*it] = k % ext;
      k /= ext;
    }
  }
};

// A box of n dims with zero offsets and extents (a rank that holds nothing).
Box empty_box(size_t n);

// Replicate -> Partial(op) in place: the identity on every coordinate but 0 of the new Partial
// dims (sum, prod), or nothing (max, min, avg keep the value).
std::unique_ptr<SchedStep> partial_init_step(const Layout &in, const Layout &out, DType dt, int me);

// A Pieces step from `in` to `out` (neither with Partial dims; one of them block-cyclic): this
// rank's messages, one per peer, and its local copy. Replicated source data comes from the
// coordinate SourceChooser picks. O(runs + peers): only the coordinates whose holdings meet this
// rank's are visited (CoordsMeeting), except a cross-mesh Replicate source, which checks every
// target coordinate that meets it.
std::unique_ptr<SchedStep> pieces_step(const Layout &in, const Layout &out, bool same_mesh, int me,
                                       size_t esize, int tag);

}  // namespace lm
