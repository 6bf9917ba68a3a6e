// SPDX-License-Identifier: BSD-3-Clause
#include "localmap/record.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/handle.hpp"
#include "tensor/ops.hpp"
#include "tensor/tensor.hpp"

lm_local_map_record_s::~lm_local_map_record_s() {
  for (Input &i : in) lm::mesh_release(i.own_mesh);
  magic = lm::kDeadMagic;
}

namespace lm {

lm_local_map_record_s *record_check(lm_local_map_record_t h, const char *what) {
  return handle_object<lm_local_map_record_s>(h, HandleKind::Record, what, "record", "lm_local_map_record_t");
}

void record_keep_extents(lm_local_map_record_s *r) {
  auto keep = [r](const std::vector<lm_placement_t> &pl) {
    for (const lm_placement_t &p : pl)
      if (p.kind == LM_RAGGED)
        if (auto e = extents_find(p.extents)) r->keep.push_back(std::move(e));
  };
  for (const auto &in : r->in) {
    keep(in.own);
    keep(in.seen);
    keep(in.grad);
  }
  for (const auto &out : r->out) keep(out);
}

lm_local_map_record_t record_wrap(lm_local_map_record_s *r) {
  return handle_wrap_owned(r, HandleKind::Record);
}

void record_destroy_handle(lm_local_map_record_t *h, const char *what) {
  record_check(*h, what);
  void *obj = nullptr;
  if (handle_drop(*h, HandleKind::Record, &obj) != DropResult::Died)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: record is not a live lm_local_map_record_t", what);
  *h = nullptr;
  delete static_cast<lm_local_map_record_s *>(obj);
}

namespace {

const lm_local_map_record_s::Input &dist_input(const lm_local_map_record_s *r, int index,
                                               const char *fn) {
  LM_CHECK_ARG(index >= 0 && index < (int)r->in.size(),
               "%s: index %d is out of range (the call had %zu inputs)", fn, index, r->in.size());
  const lm_local_map_record_s::Input &in = r->in[(size_t)index];
  LM_CHECK_ARG(in.own_mesh != nullptr, "%s: inputs[%d] of the call was not a dist tensor", fn,
               index);
  return in;
}

}  // namespace

void record_placements(const lm_local_map_record_s *r, int which, int index, int capacity,
                       lm_placement_t *placements, int *n, const char *fn) {
  LM_CHECK_ARG(n != nullptr, "%s: n is NULL", fn);
  LM_CHECK_ARG(capacity >= 0, "%s: capacity is %d", fn, capacity);
  LM_CHECK_ARG(placements != nullptr || capacity == 0, "%s: placements is NULL but capacity is %d",
               fn, capacity);
  std::vector<lm_placement_t> pl;
  switch (which) {
    case LM_RECORD_INPUT: pl = dist_input(r, index, fn).own; break;
    case LM_RECORD_IN: pl = dist_input(r, index, fn).seen; break;
    case LM_RECORD_IN_GRAD: pl = dist_input(r, index, fn).grad; break;
    case LM_RECORD_OUT:
    case LM_RECORD_OUT_GRAD: {
      LM_CHECK_ARG(index >= 0 && index < (int)r->out.size(),
                   "%s: index %d is out of range (the call had %zu outputs)", fn, index,
                   r->out.size());
      pl = r->out[(size_t)index];
      LM_CHECK_ARG(!pl.empty(), "%s: outputs[%d] of the call is not a dist tensor", fn, index);
      if (which == LM_RECORD_OUT_GRAD)
        pl = placements_adjoint(pl.data(), (int)pl.size(),
                                strfmt("%s: the placements of outputs[%d]", fn, index).c_str());
      break;
    }
    default:
      fail(LM_ERR_INVALID_ARGUMENT, "%s: which = %d is not an lm_record_which_t (0..4)", fn, which);
  }
  *n = (int)pl.size();
  LM_CHECK_ARG(capacity >= *n, "%s: capacity %d is below the %d placements", fn, capacity, *n);
  std::copy(pl.begin(), pl.end(), placements);
}

lm_dist_tensor_s *record_input_grad(const lm_local_map_record_s *r, int index,
                                    lm_dist_tensor_s *grad, const char *fn) {
  const lm_local_map_record_s::Input &in = dist_input(r, index, fn);
  if (grad->layout.gshape != in.gshape)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: grad has global shape %s but inputs[%d] had %s", fn,
         shape_str(grad->layout.gshape).c_str(), index, shape_str(in.gshape).c_str());
  std::vector<lm_placement_t> want = placements_adjoint(
      in.own.data(), (int)in.own.size(), strfmt("%s: the placements of inputs[%d]", fn, index).c_str());
  return tensor_reshard(grad, in.own_mesh, want.data(),
                        strfmt("%s: the reshard of inputs[%d]'s gradient", fn, index).c_str());
}

}  // namespace lm
