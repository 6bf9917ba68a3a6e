// SPDX-License-Identifier: BSD-3-Clause
#include "localmap/local_map.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "common/handle.hpp"
#include "common/mpi.hpp"
#include "localmap/record.hpp"
#include "mem/cuda.hpp"
#include "mesh/collective.hpp"
#include "tensor/ops.hpp"

namespace lm {

namespace {

// Stack storage for the common small case, so a call allocates nothing but its outputs.
template <class T, size_t N>
class SmallBuf {
 public:
  explicit SmallBuf(size_t n) : p_(n <= N ? stack_ : (heap_.reset(new T[n]()), heap_.get())) {
    if (n <= N)
      for (size_t i = 0; i < n; ++i) stack_[i] = T();
  }
  T &operator[](size_t i) { return p_[i]; }
  T *data() { return p_; }

 private:
  T stack_[N];
  std::unique_ptr<T[]> heap_;
  T *p_;
};

bool same_placements(const Layout &L, const lm_placement_t *pl) {
  std::vector<lm_placement_t> v(pl, pl + L.mesh_ndim());
  Layout other(L.grid, v, L.gshape);
  return L.equals(other);
}

void release_managed(lm_arg_t &a) {
  if (a.kind == LM_ARG_MANAGED_TENSOR && a.ptr) {
    auto *m = static_cast<DLManagedTensor *>(a.ptr);
    if (m->deleter) m->deleter(m);
  }
  a = lm_arg_t{};
}

// Runs check(what) with a placeholder name, and only when it fails again with the formatted
// argument name: the message names the argument, the success path allocates nothing.
template <class F>
void lazily(F &&check, const char *fmt, int index) {
  try {
    check("");
  } catch (const Error &) {
    check(strfmt(fmt, "lm_local_map", index).c_str());
  }
}

// Clears every output that repeats an earlier output's DLManagedTensor (without running its
// deleter: the earlier one will) and returns the first such index, or -1.
int first_duplicate_output(int nout, lm_arg_t *outputs) {
  int first = -1;
  auto managed = [&](int j) {
    return outputs[j].kind == LM_ARG_MANAGED_TENSOR && outputs[j].ptr != nullptr;
  };
  if (nout <= 16) {
    for (int j = 1; j < nout; ++j)
      for (int k = 0; k < j && managed(j); ++k)
        if (managed(k) && outputs[k].ptr == outputs[j].ptr) {
          if (first < 0) first = j;
          outputs[j] = lm_arg_t{};
        }
    return first;
  }
  std::vector<std::pair<void *, int>> v;
  for (int j = 0; j < nout; ++j)
    if (managed(j)) v.emplace_back(outputs[j].ptr, j);
  std::sort(v.begin(), v.end());
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i].first == v[i - 1].first) {
      outputs[v[i].second] = lm_arg_t{};
      if (first < 0 || v[i].second < first) first = v[i].second;
      v[i].second = v[i - 1].second;  // keep the earliest as the survivor
    }
  return first;
}

const char *kind_name(int32_t k) {
  switch (k) {
    case LM_ARG_NONE: return "NONE";
    case LM_ARG_DIST_TENSOR: return "DIST_TENSOR";
    case LM_ARG_TENSOR: return "TENSOR";
    case LM_ARG_INT64: return "INT64";
    case LM_ARG_DOUBLE: return "DOUBLE";
    case LM_ARG_POINTER: return "POINTER";
    case LM_ARG_MANAGED_TENSOR: return "MANAGED_TENSOR";
  }
  return "?";
}

// "is empty", "is an INT64", "is a TENSOR": what an argument is, as an English predicate.
const char *kind_phrase(int32_t k) {
  switch (k) {
    case LM_ARG_NONE: return "is empty (LM_ARG_NONE)";
    case LM_ARG_DIST_TENSOR: return "is a DIST_TENSOR";
    case LM_ARG_TENSOR: return "is a TENSOR";
    case LM_ARG_INT64: return "is an INT64";
    case LM_ARG_DOUBLE: return "is a DOUBLE";
    case LM_ARG_POINTER: return "is a POINTER";
    case LM_ARG_MANAGED_TENSOR: return "is a MANAGED_TENSOR";
  }
  return "has an unknown kind";
}

// Whether every rank of `out` is a member of `in` (both from one parent communicator): then an
// input living on `in` has a shard on every rank that runs fn. Pure: every rank decides alike.
bool covers(const Grid &in, const Grid &out) {
  for (int64_t i = 0; i < out.size(); ++i)
    if (in.index_of(out.rank_at_index(i)) < 0) return false;
  return true;
}

// The first rank of `out` that is not in `in` (as "mesh rank i (rank r)"), for messages.
std::string first_missing(const Grid &in, const Grid &out) {
  for (int64_t i = 0; i < out.size(); ++i)
    if (in.index_of(out.rank_at_index(i)) < 0)
      return strfmt("mesh rank %lld (rank %d)", (long long)i, out.rank_at_index(i));
  return "none";
}

// What an lm_local_map call was asked (and, after fn, what it produced), for the agreement.
struct AgreeCtx {
  lm_mesh_s *m;
  int nin, nout;
  unsigned flags;
  const lm_arg_t *inputs;
  const lm_placement_t *const *in_pl;
  const lm_placement_t *const *out_pl;
  const int64_t *const *out_shapes;
  const lm_arg_t *outputs;  // NULL before fn
  const Shape *gshapes;     // derived global shapes (after fn)
  lm_dist_tensor_s *const *objs;  // the objects behind dist inputs (nullptr where unchecked)
};

void fingerprint_local_map(Fingerprint &fp, const AgreeCtx &c, bool full) {
  if (full) {
    fp.add("mesh", c.m->id);
    fp.add("flags", c.flags & ~(unsigned)LM_LOCAL_MAP_NO_AGREE);
  }
  fp.add("nin and nout", (uint64_t)(uint32_t)c.nin << 32 | (uint32_t)c.nout);
  if (full) {
    Hasher meshes, inpl, outpl, outsh;
    for (int i = 0; i < c.nin; ++i) {
      meshes.u64((uint64_t)c.inputs[i].kind);
      if (c.inputs[i].kind == LM_ARG_DIST_TENSOR && c.objs && c.objs[i]) {
        lm_dist_tensor_s *t = c.objs[i];
        {
          meshes.u64(t->mesh->id);
          meshes.u64(hash_placements(t->layout.pl.data(), t->layout.mesh_ndim()));
          meshes.u64(hash_shape(t->layout.gshape.data(), t->layout.ndim()));
        }
      }
      inpl.u64(c.in_pl && c.in_pl[i] ? hash_placements(c.in_pl[i], c.m->ndim()) : 0);
    }
    for (int j = 0; j < c.nout; ++j) {
      const lm_placement_t *pl = c.out_pl ? c.out_pl[j] : nullptr;
      outpl.u64(pl ? hash_placements(pl, c.m->ndim()) : 0);
      outsh.u64(c.out_shapes && c.out_shapes[j] ? (uint64_t)(uintptr_t)1 : 0);
    }
    fp.add("inputs (kinds, meshes, layouts)", meshes.h);
    fp.add("in_placements", inpl.h);
    fp.add("out_placements", outpl.h);
    fp.add("which out_shapes are given", outsh.h);
  }
  if (c.outputs) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ull;
      h *= 1099511628211ull;
    };
    for (int j = 0; j < c.nout; ++j) {
      mix((uint64_t)j << 32 | (uint64_t)c.outputs[j].kind);
      if (c.outputs[j].kind == LM_ARG_MANAGED_TENSOR && c.out_pl && c.out_pl[j]) {  // plain ones may differ
        const DLDataType t = static_cast<DLManagedTensor *>(c.outputs[j].ptr)->dl_tensor.dtype;
        mix((uint64_t)t.code << 16 | (uint64_t)t.bits << 8 | t.lanes);
      }
      for (int64_t e : c.gshapes[j]) mix((uint64_t)e);
    }
    fp.add("outputs of fn (kinds, dtypes, derived global shapes; uneven shards with "
           "LM_LOCAL_MAP_SHAPES_EVEN? drop the flag or pass out_shapes)", h);
  }
}

std::string describe_local_map(const void *p, int field) {
  const AgreeCtx &c = *static_cast<const AgreeCtx *>(p);
  Fingerprint fp("lm_local_map");
  fingerprint_local_map(fp, c, c.m->check_level >= 1);
  std::string name = field < fp.size() ? fp.name(field) : "";
  if (name == "mesh") return mesh_desc(c.m);
  if (name == "flags") return strfmt("0x%x", c.flags);
  if (name == "nin and nout") return strfmt("nin %d, nout %d", c.nin, c.nout);
  auto list = [&](const lm_placement_t *const *a, int n) {
    std::string r;
    for (int i = 0; i < n && r.size() < 60; ++i)
      r += (i ? " " : "") + (a ? placements_desc(a[i], c.m->ndim()) : std::string("NULL"));
    return r;
  };
  if (name == "in_placements") return list(c.in_pl, c.nin);
  if (name == "out_placements") return list(c.out_pl, c.nout);
  if (name == "inputs (kinds, meshes, layouts)") {
    std::string r;
    for (int i = 0; i < c.nin && r.size() < 60; ++i) {
      if (c.inputs[i].kind == LM_ARG_DIST_TENSOR && c.objs && c.objs[i]) {
        lm_dist_tensor_s *t = c.objs[i];
        r += (i ? " " : "") + strfmt("#%llu", (unsigned long long)t->mesh->id) + t->layout.desc();
      } else {
        r += (i ? " " : "") + std::string(kind_name(c.inputs[i].kind));
      }
    }
    return r;
  }
  if (c.outputs && field == fp.size() - 1) {
    std::string r;
    for (int j = 0; j < c.nout && r.size() < 60; ++j) {
      r += strfmt("%s%s[", j ? " " : "", kind_name(c.outputs[j].kind));
      for (size_t d = 0; d < c.gshapes[j].size(); ++d)
        r += strfmt(d ? ",%lld" : "%lld", (long long)c.gshapes[j][d]);
      r += "]";
    }
    return r;
  }
  return "(differs)";
}

// ---------------------------------------------------------------------------------------------
// One lm_local_map call, in the phases a reader can name (docs/DESIGN.md, "lm_local_map"):
//   validate (errors return at once: nothing collective has started), find the mesh, decide the
//   allgathers from the arguments alone, check placements and inputs (from here an error is
//   recorded and the rank still joins the agreement), agree before moving inputs (with
//   LM_LOCAL_MAP_RESHARD_INPUTS), move inputs, call fn, check outputs, agree on the outcome,
//   derive gathered global shapes, wrap outputs.
class LocalMapCall {
 public:
  // lm_local_map_ex's options as read (fields the caller's struct does not cover stay NULL).
  struct Options {
    const lm_placement_t *const *in_grad = nullptr;
    lm_local_map_record_t *record = nullptr;
  };
  LocalMapCall(lm_local_fn_t fn, void *user_data, int nin, const lm_arg_t *inputs,
               const lm_placement_t *const *in_pl, int nout, const lm_placement_t *const *out_pl,
               const int64_t *const *out_shapes, lm_mesh_t mesh, unsigned flags,
               const Options &opt, lm_arg_t *outputs)
      : fn_(fn), ud_(user_data), nin_(nin), in_(inputs), in_pl_(in_pl), nout_(nout),
        out_pl_(out_pl), out_shapes_(out_shapes), mesh_(mesh), flags_(flags), opt_(opt),
        out_(outputs),
        objs_((size_t)nin), need_gather_((size_t)nout), args_((size_t)nin), views_((size_t)nin),
        temps_((size_t)nin), move_((size_t)nin), gshapes_((size_t)nout),
        checked_((size_t)nout) {}
  ~LocalMapCall() {
    for (int i = 0; i < nin_; ++i) tensor_release(temps_[i]);
  }

  // Errors here return at once: nothing collective has started (and nothing is allocated yet:
  // the counts are checked before the per-argument buffers exist).
  static void validate(lm_local_fn_t fn, int nin, const lm_arg_t *in, int nout,
                       const lm_placement_t *const *out_pl, unsigned flags, lm_arg_t *out);
  static Options read_options(const lm_local_map_options_t *o);

  void run() {
    for (int j = 0; j < nout_; ++j) out_[j] = lm_arg_t{};
    if (opt_.record) *opt_.record = nullptr;
    find_mesh_and_inputs();
    decide_gathers();
    record([&] { check_inputs(); });
    agree_before_moving_inputs();
    if (ok()) move_inputs();
    if (ok()) call_fn();
    if (ok()) record([&] { check_outputs(); });
    agree_outcome();
    derive_gathered_shapes();
    lm_local_map_record_t rec = opt_.record ? make_record() : nullptr;
    try {
      wrap_outputs();
    } catch (...) {
      if (rec) record_destroy_handle(&rec, F);
      throw;
    }
    if (opt_.record) *opt_.record = rec;
  }

 private:
  static constexpr const char *F = "lm_local_map";
  bool ok() const { return local_ == LM_SUCCESS; }
  // Runs f; an error is recorded (the rank still joins the agreement), not thrown.
  template <class Fn>
  void record(Fn &&f) {
    try {
      f();
    } catch (const Error &e) {
      local_ = e.status();
      err_ = e.message();
    }
  }
  void release_outputs() {
    for (int j = 0; j < nout_; ++j) release_managed(out_[j]);
  }
  void find_mesh_and_inputs();
  void decide_gathers();
  void check_inputs();
  void check_input(int i);
  void agree_before_moving_inputs();
  void move_inputs();
  void call_fn();
  void check_outputs();
  void check_output(int j);
  void agree_outcome();
  void gather_extents();
  void derive_gathered_shapes();
  void wrap_outputs();
  lm_local_map_record_t make_record();
  AgreeCtx agree_ctx(bool with_outputs) {
    return AgreeCtx{m_, nin_, nout_, flags_, in_, in_pl_, out_pl_, out_shapes_,
                    with_outputs ? out_ : nullptr, with_outputs ? gshapes_.data() : nullptr,
                    objs_.data()};
  }

  lm_local_fn_t fn_;
  void *ud_;
  int nin_;
  const lm_arg_t *in_;
  const lm_placement_t *const *in_pl_;
  int nout_;
  const lm_placement_t *const *out_pl_;
  const int64_t *const *out_shapes_;
  lm_mesh_t mesh_;
  unsigned flags_;
  Options opt_;
  lm_arg_t *out_;

  lm_mesh_s *m_ = nullptr;  // the mesh: given, or the first dist input's
  bool agree_ = false;
  int ngather_ = 0;
  bool any_move_ = false;
  lm_status_t local_ = LM_SUCCESS;
  std::string err_;
  int64_t failed_rank_ = -1;             // a rank that failed, from the allgather
  std::vector<long long> gathered_;      // the allgathered extents (W per rank)
  static constexpr int S = kMaxDims + 2;  // per gathered output: ndim, dtype, extents
  SmallBuf<lm_dist_tensor_s *, 16> objs_;  // the objects behind the dist inputs' handles
  SmallBuf<int, 16> need_gather_;
  SmallBuf<lm_arg_t, 16> args_;
  SmallBuf<DLTensor, 16> views_;
  SmallBuf<lm_dist_tensor_s *, 16> temps_;  // resharded inputs (released at the end)
  SmallBuf<char, 16> move_;
  SmallBuf<Shape, 8> gshapes_;
  SmallBuf<Layout, 8> checked_;  // per output: its layout, when check_output checked it all
  std::vector<Layout> gathered_layouts_;  // per output, when some gather: the agreed layout
};

void LocalMapCall::validate(lm_local_fn_t fn, int nin, const lm_arg_t *in, int nout,
                            const lm_placement_t *const *out_pl, unsigned flags, lm_arg_t *out) {
  LM_CHECK_ARG(fn != nullptr, "%s: fn is NULL", F);
  LM_CHECK_ARG(nin >= 0 && nout >= 0, "%s: nin = %d and nout = %d must be >= 0", F, nin, nout);
  LM_CHECK_ARG(nin <= LM_LOCAL_MAP_MAX_ARGS && nout <= LM_LOCAL_MAP_MAX_ARGS,
               "%s: nin = %d and nout = %d must be at most LM_LOCAL_MAP_MAX_ARGS (%d)", F, nin,
               nout, LM_LOCAL_MAP_MAX_ARGS);
  LM_CHECK_ARG(nin == 0 || in, "%s: inputs is NULL but nin = %d", F, nin);
  LM_CHECK_ARG(nout == 0 || out, "%s: outputs is NULL but nout = %d", F, nout);
  LM_CHECK_ARG(nout == 0 || out_pl,
               "%s: out_placements is NULL but nout = %d (pass an array of nout entries, NULL for "
               "non-tensor outputs)", F, nout);
  const unsigned known =
      LM_LOCAL_MAP_RESHARD_INPUTS | LM_LOCAL_MAP_NO_AGREE | LM_LOCAL_MAP_SHAPES_EVEN;
  LM_CHECK_ARG((flags & ~known) == 0, "%s: unknown flags 0x%x", F, flags & ~known);
}

// The mesh (given, else the first dist input's) and the objects behind the dist inputs' handles
// (unwrapped once, here at the boundary). Errors return at once.
void LocalMapCall::find_mesh_and_inputs() {
  if (mesh_) m_ = mesh_check(mesh_, ArgName(F, "mesh").c_str());  // usable: agreed later
  for (int i = 0; i < nin_; ++i) {
    const lm_arg_t &a = in_[i];
    LM_CHECK_ARG(a.kind >= LM_ARG_NONE && a.kind <= LM_ARG_POINTER,
                 "%s: inputs[%d].kind = %d is not a valid input kind", F, i, a.kind);
    if (a.kind == LM_ARG_DIST_TENSOR) {
      lm_dist_tensor_s *t = nullptr;
      lazily([&](const char *w) { t = tensor_check(static_cast<lm_dist_tensor_t>(a.ptr), w); },
             "%s: inputs[%d]", i);
      objs_[i] = t;
      if (!m_) m_ = t->mesh;  // an object the tensor retains (usable: agreed later)
    } else if (a.kind == LM_ARG_TENSOR) {
      LM_CHECK_ARG(a.ptr != nullptr, "%s: inputs[%d] is a TENSOR with a NULL DLTensor*", F, i);
    }
    if (in_pl_ && in_pl_[i] && a.kind != LM_ARG_DIST_TENSOR)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: in_placements[%d] is set but inputs[%d] %s, not a "
           "dist tensor", F, i, i, kind_phrase(a.kind));
    if (opt_.in_grad && opt_.in_grad[i] && a.kind != LM_ARG_DIST_TENSOR)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: in_grad_placements[%d] is set but inputs[%d] %s, not a "
           "dist tensor", F, i, i, kind_phrase(a.kind));
  }
  bool any_tensor_out = false;
  for (int j = 0; j < nout_; ++j)
    if (out_pl_[j]) any_tensor_out = true;
  if (!m_ && any_tensor_out)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: an output has placements but there is no mesh (no dist input and mesh is NULL)", F);
  if (m_ && !m_->member)
    fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", F, m_->world_rank);
  agree_ = m_ && !(flags_ & LM_LOCAL_MAP_NO_AGREE);
}

// Which Shard outputs take their global shape from the allgather: decided from the arguments
// alone, so every rank picks the same collective whatever happens to it locally.
void LocalMapCall::decide_gathers() {
  for (int j = 0; j < nout_; ++j) {
    const lm_placement_t *pl = out_pl_[j];
    if (!m_ || !pl || (out_shapes_ && out_shapes_[j]) || (flags_ & LM_LOCAL_MAP_SHAPES_EVEN))
      continue;
    for (int k = 0; k < m_->ndim(); ++k)
      if (pl[k].kind == LM_SHARD || pl[k].kind == LM_BLOCK_CYCLIC ||
          (pl[k].kind == LM_RAGGED && pl[k].extents == LM_EXTENTS_AGREED)) {
        need_gather_[j] = 1;
        ++ngather_;
        break;
      }
  }
}

// Placements and inputs. A broken mesh (or one with a nonblocking reshard in flight) on one rank
// fails the call on every rank: the failure joins the agreement.
void LocalMapCall::check_inputs() {
  if (m_) mesh_check_usable(m_, "lm_local_map: mesh");
  for (int j = 0; j < nout_; ++j)
    if (out_pl_[j])
      lazily([&](const char *w) {
        validate_placements(out_pl_[j], m_->ndim(), kMaxDims, w, need_gather_[j]);
      }, "%s: out_placements[%d]", j);
  for (int i = 0; i < nin_; ++i) {
    args_[i] = in_[i];
    if (in_[i].kind == LM_ARG_DIST_TENSOR) check_input(i);
  }
}

// One dist input: kept as it is, moved (marked in move_), or refused.
void LocalMapCall::check_input(int i) {
  lm_dist_tensor_s *t = objs_[i];
  const lm_placement_t *want = in_pl_ ? in_pl_[i] : nullptr;
  if (want)
    lazily([&](const char *w) { validate_placements(want, m_->ndim(), t->layout.ndim(), w); },
           "%s: in_placements[%d]", i);
  if (opt_.in_grad && opt_.in_grad[i])
    lazily([&](const char *w) {
      validate_placements(opt_.in_grad[i], m_->ndim(), t->layout.ndim(), w);
    }, "%s: in_grad_placements[%d]", i);
  const bool other_mesh = t->mesh != m_ && !t->mesh->grid->same_as(*m_->grid);
  // A sibling mesh: an input kept as it is (in_placements[i] NULL) may live on another mesh of
  // the same parent when `mesh` is given and every rank of `mesh` holds a shard of it.
  if (other_mesh && !want && mesh_) {
    lazily([&](const char *w) { mesh_check_usable(t->mesh, w); }, "%s: mesh of inputs[%d]", i);
    transfer_comm(t->mesh, m_, ArgName(F, "inputs", i).c_str());
    if (covers(*t->mesh->grid, *m_->grid)) return;
    fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh that %s of mesh is not "
         "in, so that rank holds no shard of it; give in_placements[%d] and pass "
         "LM_LOCAL_MAP_RESHARD_INPUTS to move it", F, i,
         first_missing(*t->mesh->grid, *m_->grid).c_str(), i);
  }
  if (!other_mesh && !(want && !same_placements(t->layout, want))) return;  // kept as it is
  if (!(flags_ & LM_LOCAL_MAP_RESHARD_INPUTS)) {
    if (other_mesh)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh than %s; pass `mesh` "
           "(an input kept as it is may live on a mesh that every rank of `mesh` is in), or "
           "LM_LOCAL_MAP_RESHARD_INPUTS with in_placements[%d] to move it", F, i,
           mesh_ ? "mesh" : "inputs' first dist tensor", i);
    fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] has placements %s but in_placements[%d] "
         "requires %s; pass LM_LOCAL_MAP_RESHARD_INPUTS to reshard it",
         F, i, t->layout.str().c_str(), i, format_placements(want, m_->ndim()).c_str());
  }
  if (other_mesh && !want)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh and in_placements[%d] is "
         "NULL: give the placements it should have on the target mesh", F, i, i);
  mesh_check_usable(t->mesh, "lm_local_map: the mesh of an input to reshard");
  const lm_placement_t *pl = want ? want : t->layout.pl.data();
  std::vector<lm_placement_t> w(pl, pl + m_->ndim());
  lazily([&](const char *wh) {
    try {
      check_reshard(t->layout, Layout(m_->grid, w, t->layout.gshape), t->dt);
    } catch (const Error &e) {
      if (!*wh) throw;
      throw Error(e.status(), strfmt("%s: %s", wh, e.message().c_str()));
    }
  }, "%s: in_placements[%d]", i);
  move_[i] = 1;
  any_move_ = true;
}

// Reshards are collectives: with LM_LOCAL_MAP_RESHARD_INPUTS every rank first agrees that all
// checks passed and, at LM_CHECK >= 1, on what they were asked (one small allreduce).
void LocalMapCall::agree_before_moving_inputs() {
  if (agree_ && (flags_ & LM_LOCAL_MAP_RESHARD_INPUTS)) {
    AgreeCtx ctx = agree_ctx(false);
    Fingerprint fp("lm_local_map (before resharding its inputs)");
    if (m_->check_level >= 1) fingerprint_local_map(fp, ctx, true);
    agree_call(F, m_, nullptr, m_->check_level >= 1 ? &fp : nullptr, describe_local_map, &ctx,
               local_, err_);
  } else if (!ok() && !agree_ && ngather_ == 0) {
    throw Error(local_, err_);  // no collective follows: nobody waits for this rank
  }
}

// The marked inputs resharded into temporaries; every dist input as a DLTensor view.
void LocalMapCall::move_inputs() {
  for (int i = 0; i < nin_ && any_move_; ++i) {
    if (!move_[i]) continue;
    lm_dist_tensor_s *t = objs_[i];
    const lm_placement_t *want = in_pl_ ? in_pl_[i] : t->layout.pl.data();
    temps_[i] = tensor_reshard(t, m_, want, strfmt("%s: reshard of inputs[%d]", F, i).c_str());
  }
  for (int i = 0; i < nin_; ++i) {
    if (in_[i].kind != LM_ARG_DIST_TENSOR) continue;
    lm_dist_tensor_s *t = temps_[i] ? temps_[i] : objs_[i];
    DLTensor &v = views_[i];
    v.data = t->base();
    v.device = t->device;
    v.ndim = t->layout.ndim();
    v.dtype = t->dtype;
    v.shape = t->local.len.data();
    v.strides = t->padded() ? t->pad_strides.data() : nullptr;  // a padded borrow's rows
    v.byte_offset = 0;
    args_[i].kind = LM_ARG_TENSOR;
    args_[i].ptr = &v;
  }
}

// fn gets a mesh handle: the caller's, else the inputs' mesh's (borrowed: see mesh_borrow). A
// C++ exception from fn and any status but LM_SUCCESS become LM_ERR_USER.
void LocalMapCall::call_fn() {
  set_user_message(nullptr);
  lm_status_t st;
  try {
    st = fn_(ud_, mesh_ ? mesh_ : m_ ? mesh_borrow(m_) : nullptr, nin_, args_.data(), nout_, out_);
  } catch (...) {
    st = LM_ERR_USER;
    set_user_message("fn threw a C++ exception (it must not)");
  }
  // The same DLManagedTensor in two outputs would be wrapped (and deleted) twice: keep the
  // first, drop the others without their deleter, and fail.
  int dup = first_duplicate_output(nout_, out_);
  if (dup >= 0 && st == LM_SUCCESS) {
    local_ = LM_ERR_INVALID_ARGUMENT;
    err_ = strfmt("%s: outputs[%d] is a DLManagedTensor that fn returned in an earlier output too; "
                  "each output needs its own", F, dup);
  } else if (st != LM_SUCCESS) {
    std::string um = take_user_message();
    local_ = LM_ERR_USER;
    err_ = strfmt("%s: fn returned %s on rank %d%s%s", F, lm_status_string(st),
                  m_ ? m_->world_rank : world_rank_or_minus1(), um.empty() ? "" : ": ", um.c_str());
  }
}

void LocalMapCall::check_outputs() {
  for (int j = 0; j < nout_; ++j) check_output(j);
}

// One output: its kind, and for a tensor with placements everything that can be known locally
// of its shard and global shape.
void LocalMapCall::check_output(int j) {
  lm_arg_t &o = out_[j];
  const lm_placement_t *pl = out_pl_[j];
  if (o.kind == LM_ARG_DIST_TENSOR)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d] is already a dist tensor; fn must return "
         "local tensors (LM_ARG_MANAGED_TENSOR)", F, j);
  if (o.kind == LM_ARG_TENSOR)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d] is a borrowed TENSOR; fn must hand tensors "
         "over as LM_ARG_MANAGED_TENSOR", F, j);
  LM_CHECK_ARG(o.kind >= LM_ARG_NONE && o.kind <= LM_ARG_MANAGED_TENSOR,
               "%s: outputs[%d].kind = %d is not a valid kind", F, j, o.kind);
  if (o.kind != LM_ARG_MANAGED_TENSOR) {
    if (pl)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d] %s but out_placements[%d] is set", F, j,
           kind_phrase(o.kind), j);
    return;
  }
  LM_CHECK_ARG(o.ptr != nullptr, "%s: outputs[%d] is a MANAGED_TENSOR with a NULL pointer", F, j);
  if (!pl) return;  // a plain local tensor: handed back to the caller as it is
  const DLTensor &lt = static_cast<DLManagedTensor *>(o.ptr)->dl_tensor;
  Shape ls;
  lazily([&](const char *w) { ls = check_shape(lt.ndim, lt.shape, w); }, "%s: outputs[%d]", j);
  lazily([&](const char *w) { dtype_from_dl(lt.dtype, w); }, "%s: outputs[%d].dtype", j);
  lazily([&](const char *w) { check_device(lt.device, w); }, "%s: outputs[%d].device", j);
  lazily([&](const char *w) { validate_placements(pl, m_->ndim(), lt.ndim, w, need_gather_[j]); },
         "%s: out_placements[%d]", j);
  lazily([&](const char *w) { check_partial_dtype(pl, m_->ndim(), dtype_from_dl(lt.dtype, w), w); },
         "%s: out_placements[%d]", j);
  lazily([&](const char *w) { check_alignment(&lt, dtype_from_dl(lt.dtype, w), w); },
         "%s: outputs[%d]", j);
  LM_CHECK_ARG(is_compact(&lt), "%s: outputs[%d] must be compact row-major", F, j);
  int64_t numel = 1;
  for (int64_t e : ls) numel *= e;
  LM_CHECK_ARG(lt.data != nullptr || numel == 0, "%s: outputs[%d] has NULL data", F, j);
  if (need_gather_[j]) return;
  bool sharded = false;
  for (int k = 0; k < m_->ndim(); ++k)
    if (splits(pl[k])) sharded = true;
  gshapes_[j] = ls;  // no Shard: the local shape
  if (out_shapes_ && out_shapes_[j]) {
    gshapes_[j] = check_shape(lt.ndim, out_shapes_[j], ArgName(F, "out_shapes", j).c_str());
  } else if (sharded) {  // LM_LOCAL_MAP_SHAPES_EVEN, or ragged dims only
    gshapes_[j] = even_global_shape(*m_->grid, pl, ls);
  }
  lazily([&](const char *w) { check_numel(gshapes_[j], w); },
         "%s: the global shape of outputs[%d]", j);
  Layout L(m_->grid, std::vector<lm_placement_t>(pl, pl + m_->ndim()), gshapes_[j]);
  check_ragged(L, ArgName(F, "out_placements", j).c_str());
  if (L.box_at(m_->coord.data()).len != ls)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d]: the local shape does not match its shard of "
         "global shape with placements %s on rank %d%s", F, j, L.str().c_str(), m_->world_rank,
         (flags_ & LM_LOCAL_MAP_SHAPES_EVEN) ? " (uneven: drop LM_LOCAL_MAP_SHAPES_EVEN)" : "");
  // Checked as tensor_from_local would check it, except for LM_CHECK=2's collective extents
  // check and a device pointer's memory: wrap_outputs adopts it with this layout.
  if (m_->member && m_->check_level < 2 && !is_device(lt.device)) checked_[j] = std::move(L);
}

// One collective decides the outcome: the allgather of extents when some output needs it (after
// the agreement of failure and arguments), else one allreduce carrying the failure (with its
// cause, on the error path) and the fingerprint: at LM_CHECK >= 1 the arguments, always nin/nout
// and the outputs' kinds, dtypes and derived global shapes, so ranks that disagree fail together.
void LocalMapCall::agree_outcome() {
  try {
    if (m_ && ngather_ > 0) {
      if (agree_) {
        AgreeCtx ctx = agree_ctx(false);
        Fingerprint fp("lm_local_map");
        if (m_->check_level >= 1) fingerprint_local_map(fp, ctx, true);
        agree_call(F, m_, nullptr, m_->check_level >= 1 ? &fp : nullptr, describe_local_map,
                   &ctx, local_, err_);
      }
      gather_extents();
    } else if (agree_) {
      AgreeCtx ctx = agree_ctx(true);
      Fingerprint fp("lm_local_map");
      if (ok()) fingerprint_local_map(fp, ctx, m_->check_level >= 1);
      agree_call(F, m_, nullptr, &fp, describe_local_map, &ctx, local_, err_);
    }
  } catch (...) {
    release_outputs();
    throw;
  }
  if (!ok() || failed_rank_ >= 0) {
    release_outputs();
    if (!ok()) throw Error(local_, err_);
    fail(LM_ERR_REMOTE, "%s: rank %d (mesh rank %lld) failed; this rank %d did not", F,
         m_->grid->rank_at_index(failed_rank_), (long long)failed_rank_, m_->world_rank);
  }
}

// The allgather of every gathered output's (ndim, dtype, extents), with the failure flag first.
void LocalMapCall::gather_extents() {
  require_mpi(F);
  const int W = 1 + ngather_ * S;
  std::vector<long long> mine((size_t)W, 0);
  mine[0] = !ok();
  int slot = 0;
  for (int j = 0; j < nout_ && ok(); ++j) {
    if (!need_gather_[j]) continue;
    const DLTensor &lt = static_cast<DLManagedTensor *>(out_[j].ptr)->dl_tensor;
    long long *e = &mine[(size_t)(1 + slot * S)];
    e[0] = lt.ndim;
    e[1] = (long long)lt.dtype.code << 16 | (long long)lt.dtype.bits << 8 | lt.dtype.lanes;
    for (int d = 0; d < lt.ndim; ++d) e[2 + d] = lt.shape[d];
    ++slot;
  }
  gathered_.resize((size_t)W * m_->grid->size());
  int rc = MPI_Allgather(mine.data(), W, MPI_LONG_LONG, gathered_.data(), W, MPI_LONG_LONG,
                         m_->comm);
  if (rc != MPI_SUCCESS) {
    try {
      mpi_check(rc, "lm_local_map: MPI_Allgather");
    } catch (const Error &e) {
      mesh_break(m_, e);
    }
  }
  for (int64_t r = 0; r < m_->grid->size(); ++r)
    if (gathered_[(size_t)(r * W)] && failed_rank_ < 0) failed_rank_ = r;
}

// Global shapes from the gathered extents (every rank checks every rank's, so all agree).
void LocalMapCall::derive_gathered_shapes() {
  if (ngather_ == 0) return;
  const int W = 1 + ngather_ * S;
  try {
    gathered_layouts_.resize((size_t)nout_);
    int slot = 0;
    for (int j = 0; j < nout_; ++j) {
      if (!need_gather_[j]) continue;
      const DLTensor &lt = static_cast<DLManagedTensor *>(out_[j].ptr)->dl_tensor;
      const size_t base = (size_t)(1 + slot++ * S);
      const long long my_dtype = gathered_[(size_t)(m_->index * W) + base + 1];
      for (int64_t r = 0; r < m_->grid->size(); ++r) {
        if (gathered_[(size_t)(r * W) + base] != lt.ndim)
          fail(LM_ERR_MISMATCH, "%s: outputs[%d] has ndim %d here but %lld on mesh rank %lld", F,
               j, lt.ndim, gathered_[(size_t)(r * W) + base], (long long)r);
        if (gathered_[(size_t)(r * W) + base + 1] != my_dtype)
          fail(LM_ERR_MISMATCH, "%s: outputs[%d] has dtype %s here but another on mesh rank %lld",
               F, j, dl_dtype_name(lt.dtype).c_str(), (long long)r);
      }
      gathered_layouts_[j] = layout_from_extents(
          m_->grid, out_pl_[j], lt.ndim, lt.shape,
          [&](int64_t r, int d) { return (int64_t)gathered_[(size_t)(r * W) + base + 2 + d]; },
          ArgName(F, "outputs", j).c_str());
      gshapes_[j] = gathered_layouts_[j].gshape;
      check_numel(gshapes_[j], ArgName(F, "outputs", j).c_str());
    }
  } catch (...) {
    release_outputs();
    throw;
  }
}

// Tensor outputs with placements become dist tensors (ownership passes); on any failure every
// output made so far is destroyed and the remaining deleters run.
void LocalMapCall::wrap_outputs() {
  int done = 0;
  try {
    for (; done < nout_; ++done) {
      lm_arg_t &o = out_[done];
      if (o.kind != LM_ARG_MANAGED_TENSOR || !out_pl_[done]) continue;
      auto *mt = static_cast<DLManagedTensor *>(o.ptr);
      lm_dist_tensor_s *t;
      try {
        // A gathered output's placements name the extents agreed for LM_EXTENTS_AGREED.
        const lm_placement_t *pl =
            need_gather_[done] ? gathered_layouts_[done].pl.data() : out_pl_[done];
        t = checked_[done].grid && !need_gather_[done]
                ? tensor_adopt_checked(m_, std::move(checked_[done]), mt)
                : tensor_from_local(m_, &mt->dl_tensor, pl, LM_SHAPE_GIVEN,
                                    gshapes_[done].data(), 0, mt, "lm_local_map: output");
      } catch (const Error &e) {  // name the output as the caller knows it
        std::string msg = e.message(), from = "lm_local_map: output";
        if (msg.compare(0, from.size(), from) == 0)
          msg = strfmt("%s: outputs[%d]", F, done) + msg.substr(from.size());
        throw Error(e.status(), msg);
      }
      o.kind = LM_ARG_DIST_TENSOR;
      o.ptr = nullptr;
      o.ptr = tensor_wrap(t);  // releases t if it throws
    }
  } catch (...) {
    for (int j = 0; j < nout_; ++j) {
      if (j < done && out_[j].kind == LM_ARG_DIST_TENSOR) {
        lm_dist_tensor_t h = static_cast<lm_dist_tensor_t>(out_[j].ptr);
        if (h) tensor_destroy_handle(&h, "lm_local_map");
        out_[j] = lm_arg_t{};
      } else {
        release_managed(out_[j]);
      }
    }
    throw;
  }
}

// The fields the caller's size covers (the first version's at least).
LocalMapCall::Options LocalMapCall::read_options(const lm_local_map_options_t *o) {
  Options r;
  if (!o) return r;
  LM_CHECK_ARG(o->magic == LM_LOCAL_MAP_OPTIONS_MAGIC, "%s: options->magic is 0x%x, not "
               "LM_LOCAL_MAP_OPTIONS_MAGIC (initialise the lm_local_map_options_t with "
               "LM_LOCAL_MAP_OPTIONS_INIT)", F, o->magic);
  const size_t v1 = offsetof(lm_local_map_options_t, record) + sizeof(void *);
  LM_CHECK_ARG(o->size >= v1, "%s: options->size is %zu, at least %zu expected (set it to "
               "sizeof(lm_local_map_options_t) or use LM_LOCAL_MAP_OPTIONS_INIT)", F, o->size, v1);
  LM_CHECK_ARG(o->version >= 1 && o->version <= LM_LOCAL_MAP_OPTIONS_VERSION,
               "%s: options->version is %u; this library knows versions 1..%u", F, o->version,
               LM_LOCAL_MAP_OPTIONS_VERSION);
  r.in_grad = o->in_grad_placements;
  r.record = o->record;
  return r;
}

// The record of a call that succeeded so far (outputs checked and agreed, not yet wrapped): a
// new handle. On failure the outputs' deleters run.
lm_local_map_record_t LocalMapCall::make_record() {
  try {
    std::unique_ptr<lm_local_map_record_s> r(new lm_local_map_record_s);
    r->in.resize((size_t)nin_);
    r->out.resize((size_t)nout_);
    for (int i = 0; i < nin_; ++i) {
      if (in_[i].kind != LM_ARG_DIST_TENSOR) continue;
      const lm_dist_tensor_s *t = objs_[i];
      lm_local_map_record_s::Input &in = r->in[(size_t)i];
      const int n = m_->ndim();  // (an input kept on a sibling mesh: fn saw its own layout)
      in.own = t->layout.pl;
      if (in_pl_ && in_pl_[i]) in.seen.assign(in_pl_[i], in_pl_[i] + n);
      else in.seen = in.own;
      if (opt_.in_grad && opt_.in_grad[i]) in.grad.assign(opt_.in_grad[i], opt_.in_grad[i] + n);
      else in.grad = in.seen;
      in.gshape = t->layout.gshape;
      mesh_retain(t->mesh);
      in.own_mesh = t->mesh;
    }
    for (int j = 0; j < nout_; ++j)
      if (out_[j].kind == LM_ARG_MANAGED_TENSOR && out_pl_[j])
        r->out[(size_t)j] = need_gather_[j]
                                ? gathered_layouts_[(size_t)j].pl
                                : std::vector<lm_placement_t>(out_pl_[j], out_pl_[j] + m_->ndim());
    record_keep_extents(r.get());
    return record_wrap(r.release());
  } catch (...) {
    release_outputs();
    throw;
  }
}

}  // namespace

void local_map(lm_local_fn_t fn, void *user_data, int nin, const lm_arg_t *inputs,
               const lm_placement_t *const *in_placements, int nout,
               const lm_placement_t *const *out_placements, const int64_t *const *out_shapes,
               lm_mesh_t mesh, unsigned flags, const lm_local_map_options_t *options,
               lm_arg_t *outputs) {
  LocalMapCall::validate(fn, nin, inputs, nout, out_placements, flags, outputs);
  const LocalMapCall::Options opt = LocalMapCall::read_options(options);
  LocalMapCall(fn, user_data, nin, inputs, in_placements, nout, out_placements, out_shapes, mesh,
               flags, opt, outputs)
      .run();
}

}  // namespace lm
