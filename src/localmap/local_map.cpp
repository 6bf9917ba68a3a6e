// SPDX-License-Identifier: BSD-3-Clause
#include "localmap/local_map.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "common/handle.hpp"
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
      r += (i ? " " : "") + (a && a[i] ? format_placements(a[i], c.m->ndim()) : std::string("NULL"));
    return r;
  };
  if (name == "in_placements") return list(c.in_pl, c.nin);
  if (name == "out_placements") return list(c.out_pl, c.nout);
  if (name == "inputs (kinds, meshes, layouts)") {
    std::string r;
    for (int i = 0; i < c.nin && r.size() < 60; ++i) {
      if (c.inputs[i].kind == LM_ARG_DIST_TENSOR && c.objs && c.objs[i]) {
        lm_dist_tensor_s *t = c.objs[i];
        r += (i ? " " : "") + strfmt("#%llu", (unsigned long long)t->mesh->id) + t->layout.str();
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

}  // namespace

void local_map(lm_local_fn_t fn, void *user_data, int nin, const lm_arg_t *inputs,
               const lm_placement_t *const *in_placements, int nout,
               const lm_placement_t *const *out_placements, const int64_t *const *out_shapes,
               lm_mesh_t mesh, unsigned flags, lm_arg_t *outputs) {
  const char *F = "lm_local_map";
  LM_CHECK_ARG(fn != nullptr, "%s: fn is NULL", F);
  LM_CHECK_ARG(nin >= 0 && nout >= 0, "%s: nin = %d and nout = %d must be >= 0", F, nin, nout);
  LM_CHECK_ARG(nin <= LM_LOCAL_MAP_MAX_ARGS && nout <= LM_LOCAL_MAP_MAX_ARGS,
               "%s: nin = %d and nout = %d must be at most LM_LOCAL_MAP_MAX_ARGS (%d)", F, nin, nout,
               LM_LOCAL_MAP_MAX_ARGS);
  LM_CHECK_ARG(nin == 0 || inputs, "%s: inputs is NULL but nin = %d", F, nin);
  LM_CHECK_ARG(nout == 0 || outputs, "%s: outputs is NULL but nout = %d", F, nout);
  LM_CHECK_ARG(nout == 0 || out_placements,
               "%s: out_placements is NULL but nout = %d (pass an array of nout entries, NULL for "
               "non-tensor outputs)",
               F, nout);
  const unsigned known = LM_LOCAL_MAP_RESHARD_INPUTS | LM_LOCAL_MAP_NO_AGREE | LM_LOCAL_MAP_SHAPES_EVEN;
  LM_CHECK_ARG((flags & ~known) == 0, "%s: unknown flags 0x%x", F, flags & ~known);
  for (int j = 0; j < nout; ++j) outputs[j] = lm_arg_t{};

  // The mesh: given, or the first dist input's.
  lm_mesh_s *m = nullptr;
  if (mesh) {
    m = mesh_check(mesh, strfmt("%s: mesh", F).c_str());  // usable: checked in the agreement
  }
  // The objects behind the dist inputs' handles (unwrapped once, here at the boundary).
  SmallBuf<lm_dist_tensor_s *, 16> objs((size_t)nin);
  for (int i = 0; i < nin; ++i) {
    const lm_arg_t &a = inputs[i];
    LM_CHECK_ARG(a.kind >= LM_ARG_NONE && a.kind <= LM_ARG_POINTER,
                 "%s: inputs[%d].kind = %d is not a valid input kind", F, i, a.kind);
    if (a.kind == LM_ARG_DIST_TENSOR) {
      lm_dist_tensor_s *t = nullptr;
      lazily([&](const char *w) { t = tensor_check(static_cast<lm_dist_tensor_t>(a.ptr), w); },
             "%s: inputs[%d]", i);
      objs[i] = t;
      if (!m) {
        m = t->mesh;  // an object the tensor retains (usable: checked in the agreement)
      }
    } else if (a.kind == LM_ARG_TENSOR) {
      LM_CHECK_ARG(a.ptr != nullptr, "%s: inputs[%d] is a TENSOR with a NULL DLTensor*", F, i);
    }
    if (in_placements && in_placements[i] && a.kind != LM_ARG_DIST_TENSOR)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: in_placements[%d] is set but inputs[%d] %s, not a "
           "dist tensor", F, i, i, kind_phrase(a.kind));
  }
  bool any_tensor_out = false;
  for (int j = 0; j < nout; ++j)
    if (out_placements[j]) any_tensor_out = true;
  if (!m && any_tensor_out)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: an output has placements but there is no mesh (no dist input and mesh is NULL)", F);
  if (m && !m->member)
    fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", F, m->world_rank);

  // Which Shard outputs take their global shape from the allgather: decided from the arguments
  // alone, so every rank picks the same collective whatever happened locally.
  SmallBuf<int, 16> need_gather((size_t)nout);
  int ngather = 0;
  for (int j = 0; j < nout; ++j) {
    const lm_placement_t *pl = out_placements[j];
    if (!m || !pl || (out_shapes && out_shapes[j]) || (flags & LM_LOCAL_MAP_SHAPES_EVEN)) continue;
    bool sharded = false;
    for (int k = 0; k < m->ndim(); ++k)
      if (pl[k].kind == LM_SHARD) sharded = true;
    if (sharded) {
      need_gather[j] = 1;
      ++ngather;
    }
  }
  const bool agree = m && !(flags & LM_LOCAL_MAP_NO_AGREE);

  // Local checks of placements and inputs. From here on an error on one rank still joins the
  // agreement, so that no rank is left waiting in a collective.
  lm_status_t local = LM_SUCCESS;
  std::string err;
  SmallBuf<lm_arg_t, 16> args((size_t)nin);
  SmallBuf<DLTensor, 16> views((size_t)nin);
  SmallBuf<lm_dist_tensor_s *, 16> temps((size_t)nin);
  SmallBuf<char, 16> move((size_t)nin);
  struct TempGuard {
    lm_dist_tensor_s **t;
    int n;
    ~TempGuard() {
      for (int i = 0; i < n; ++i) tensor_release(t[i]);
    }
  } guard{temps.data(), nin};
  bool any_move = false;
  try {
    // A broken mesh (or one with a nonblocking reshard in flight) on one rank fails the call on
    // every rank: the failure joins the agreement.
    if (m) mesh_check_usable(m, "lm_local_map: mesh");
    for (int j = 0; j < nout; ++j)
      if (out_placements[j])
        lazily([&](const char *w) { validate_placements(out_placements[j], m->ndim(), kMaxDims, w); },
               "%s: out_placements[%d]", j);
    for (int i = 0; i < nin; ++i) {
      args[i] = inputs[i];
      if (inputs[i].kind != LM_ARG_DIST_TENSOR) continue;
      lm_dist_tensor_s *t = objs[i];
      const lm_placement_t *want = in_placements ? in_placements[i] : nullptr;
      if (want)
        lazily([&](const char *w) { validate_placements(want, m->ndim(), t->layout.ndim(), w); },
               "%s: in_placements[%d]", i);
      bool other_mesh = t->mesh != m && !t->mesh->grid->same_as(*m->grid);
      // A sibling mesh: an input kept as it is (in_placements[i] NULL) may live on another mesh
      // of the same parent when `mesh` is given and every rank of `mesh` holds a shard of it.
      if (other_mesh && !want && mesh) {
        lazily([&](const char *w) { mesh_check_usable(t->mesh, w); }, "%s: mesh of inputs[%d]", i);
        transfer_comm(t->mesh, m, strfmt("%s: inputs[%d]", F, i).c_str());
        if (covers(*t->mesh->grid, *m->grid)) continue;
        fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh that %s of mesh "
             "is not in, so that rank holds no shard of it; give in_placements[%d] and pass "
             "LM_LOCAL_MAP_RESHARD_INPUTS to move it", F, i,
             first_missing(*t->mesh->grid, *m->grid).c_str(), i);
      }
      bool differs = other_mesh || (want && !same_placements(t->layout, want));
      if (!differs) continue;
      if (!(flags & LM_LOCAL_MAP_RESHARD_INPUTS)) {
        if (other_mesh)
          fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh than %s; pass "
               "`mesh` (an input kept as it is may live on a mesh that every rank of `mesh` is "
               "in), or LM_LOCAL_MAP_RESHARD_INPUTS with in_placements[%d] to move it", F, i,
               mesh ? "mesh" : "inputs' first dist tensor", i);
        fail(LM_ERR_INVALID_ARGUMENT,
             "%s: inputs[%d] has placements %s but fn requires %s; pass "
             "LM_LOCAL_MAP_RESHARD_INPUTS to reshard it",
             F, i, t->layout.str().c_str(), format_placements(want, m->ndim()).c_str());
      }
      if (other_mesh && !want)
        fail(LM_ERR_INVALID_ARGUMENT, "%s: inputs[%d] lives on another mesh and in_placements[%d] "
             "is NULL: give the placements it should have on the target mesh", F, i, i);
      mesh_check_usable(t->mesh, "lm_local_map: the mesh of an input to reshard");
      std::vector<lm_placement_t> w(want ? want : t->layout.pl.data(), (want ? want : t->layout.pl.data()) + m->ndim());
      lazily([&](const char *wh) {
        try {
          check_reshard(t->layout, Layout(m->grid, w, t->layout.gshape), t->dt);
        } catch (const Error &e) {
          if (!*wh) throw;
          throw Error(e.status(), strfmt("%s: %s", wh, e.message().c_str()));
        }
      }, "%s: in_placements[%d]", i);
      move[i] = 1;
      any_move = true;
    }
  } catch (const Error &e) {
    local = e.status();
    err = e.message();
  }
  // Reshards are collectives: with LM_LOCAL_MAP_RESHARD_INPUTS every rank first agrees that all
  // checks passed (one small allreduce, only with that flag).
  AgreeCtx actx{m, nin, nout, flags, inputs, in_placements, out_placements, out_shapes, nullptr,
                nullptr, objs.data()};
  if (agree && (flags & LM_LOCAL_MAP_RESHARD_INPUTS)) {
    // Before any input moves, the ranks agree on what they were asked (LM_CHECK >= 1).
    Fingerprint fp("lm_local_map (before resharding its inputs)");
    if (m->check_level >= 1) fingerprint_local_map(fp, actx, true);
    agree_call("lm_local_map", m, nullptr, m->check_level >= 1 ? &fp : nullptr,
               describe_local_map, &actx, local, err);
  } else if (local != LM_SUCCESS && !agree && ngather == 0) {
    throw Error(local, err);  // no collective follows: nobody waits for this rank
  }
  if (local == LM_SUCCESS && any_move) {
    for (int i = 0; i < nin; ++i) {
      if (!move[i]) continue;
      lm_dist_tensor_s *t = objs[i];
      const lm_placement_t *want = in_placements ? in_placements[i] : t->layout.pl.data();
      temps[i] = tensor_reshard(t, m, want, strfmt("%s: reshard of inputs[%d]", F, i).c_str());
    }
  }
  for (int i = 0; i < nin && local == LM_SUCCESS; ++i) {
    if (inputs[i].kind != LM_ARG_DIST_TENSOR) continue;
    lm_dist_tensor_s *t = temps[i] ? temps[i] : objs[i];
    DLTensor &v = views[i];
    v.data = t->data();
    v.device = t->device;
    v.ndim = t->layout.ndim();
    v.dtype = t->dtype;
    v.shape = t->local.len.data();
    v.strides = nullptr;
    v.byte_offset = 0;
    args[i].kind = LM_ARG_TENSOR;
    args[i].ptr = &v;
  }

  // Call fn (unless a check failed); then check its outputs and what can be known locally of
  // their global shapes.
  if (local == LM_SUCCESS) {
    set_user_message(nullptr);
    lm_status_t st;
    try {
      // fn gets a handle: the caller's, else the one of the inputs' mesh (borrowed: see mesh_borrow).
      st = fn(user_data, mesh ? mesh : m ? mesh_borrow(m) : nullptr, nin, args.data(), nout, outputs);
    } catch (...) {
      st = LM_ERR_USER;
      set_user_message("fn threw a C++ exception (it must not)");
    }
    // The same DLManagedTensor in two outputs would be wrapped (and deleted) twice: keep the
    // first, drop the others without their deleter, and fail.
    int dup = first_duplicate_output(nout, outputs);
    if (dup >= 0 && st == LM_SUCCESS) {
      st = LM_ERR_INVALID_ARGUMENT;
      local = LM_ERR_INVALID_ARGUMENT;
      err = strfmt("%s: outputs[%d] is a DLManagedTensor that fn returned in an earlier output too; "
                   "each output needs its own", F, dup);
    } else if (st != LM_SUCCESS) {
      std::string um = take_user_message();
      local = LM_ERR_USER;
      err = strfmt("%s: fn returned %s on rank %d%s%s", F, lm_status_string(st),
                   m ? m->world_rank : world_rank_or_minus1(), um.empty() ? "" : ": ", um.c_str());
    }
  }
  SmallBuf<Shape, 8> gshapes((size_t)nout);
  if (local == LM_SUCCESS) {
    try {
      for (int j = 0; j < nout; ++j) {
        lm_arg_t &o = outputs[j];
        const lm_placement_t *pl = out_placements[j];
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
            fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d] %s but out_placements[%d] is set",
                 F, j, kind_phrase(o.kind), j);
          continue;
        }
        LM_CHECK_ARG(o.ptr != nullptr, "%s: outputs[%d] is a MANAGED_TENSOR with a NULL pointer", F, j);
        if (!pl) continue;  // a plain local tensor: handed back to the caller as it is
        const DLTensor &lt = static_cast<DLManagedTensor *>(o.ptr)->dl_tensor;
        Shape ls;
        lazily([&](const char *w) { ls = check_shape(lt.ndim, lt.shape, w); }, "%s: outputs[%d]", j);
        lazily([&](const char *w) { dtype_from_dl(lt.dtype, w); }, "%s: outputs[%d].dtype", j);
        lazily([&](const char *w) { check_device(lt.device, w); }, "%s: outputs[%d].device", j);
        lazily([&](const char *w) { validate_placements(pl, m->ndim(), lt.ndim, w); },
               "%s: out_placements[%d]", j);
        lazily([&](const char *w) { check_partial_dtype(pl, m->ndim(), dtype_from_dl(lt.dtype, w), w); },
               "%s: out_placements[%d]", j);
        lazily([&](const char *w) { check_alignment(&lt, dtype_from_dl(lt.dtype, w), w); },
               "%s: outputs[%d]", j);
        LM_CHECK_ARG(is_compact(&lt), "%s: outputs[%d] must be compact row-major", F, j);
        int64_t numel = 1;
        for (int64_t e : ls) numel *= e;
        LM_CHECK_ARG(lt.data != nullptr || numel == 0, "%s: outputs[%d] has NULL data", F, j);
        if (need_gather[j]) continue;
        bool sharded = false;
        for (int k = 0; k < m->ndim(); ++k)
          if (pl[k].kind == LM_SHARD) sharded = true;
        if (out_shapes && out_shapes[j]) {
          gshapes[j] = check_shape(lt.ndim, out_shapes[j], strfmt("%s: out_shapes[%d]", F, j).c_str());
        } else if (!sharded) {
          gshapes[j] = ls;
        } else {  // LM_LOCAL_MAP_SHAPES_EVEN
          gshapes[j] = ls;
          for (int k = 0; k < m->ndim(); ++k)
            if (pl[k].kind == LM_SHARD) gshapes[j][pl[k].dim] *= m->grid->shape()[k];
        }
        lazily([&](const char *w) { check_numel(gshapes[j], w); },
               "%s: the global shape of outputs[%d]", j);
        Layout L(m->grid, std::vector<lm_placement_t>(pl, pl + m->ndim()), gshapes[j]);
        Box b = L.box_at(m->coord.data());
        if (b.len != ls)
          fail(LM_ERR_INVALID_ARGUMENT, "%s: outputs[%d]: the local shape does not match its shard "
               "of global shape with placements %s on rank %d%s", F, j, L.str().c_str(),
               m->world_rank, (flags & LM_LOCAL_MAP_SHAPES_EVEN) ? " (uneven: drop "
               "LM_LOCAL_MAP_SHAPES_EVEN)" : "");
      }
    } catch (const Error &e) {
      local = e.status();
      err = e.message();
    }
  }

  // Agree (one collective): the failure flag travels with the local extents when those are needed.
  int64_t failed_rank = -1;
  std::vector<long long> gathered;
  const int S = kMaxDims + 2;  // per gathered output: ndim, dtype, extents
  const int W = 1 + ngather * S;
  if (m && ngather > 0) {
    if (agree) {
      // The failure and the arguments are agreed first (the failing rank's cause travels with it).
      Fingerprint fp("lm_local_map");
      if (m->check_level >= 1) fingerprint_local_map(fp, actx, true);
      try {
        agree_call("lm_local_map", m, nullptr, m->check_level >= 1 ? &fp : nullptr,
                   describe_local_map, &actx, local, err);
      } catch (...) {
        for (int j = 0; j < nout; ++j) release_managed(outputs[j]);
        throw;
      }
    }
    std::vector<long long> mine((size_t)W, 0);
    mine[0] = local != LM_SUCCESS;
    int slot = 0;
    for (int j = 0; j < nout && local == LM_SUCCESS; ++j) {
      if (!need_gather[j]) continue;
      const DLTensor &lt = static_cast<DLManagedTensor *>(outputs[j].ptr)->dl_tensor;
      long long *e = &mine[(size_t)(1 + slot * S)];
      e[0] = lt.ndim;
      e[1] = (long long)lt.dtype.code << 16 | (long long)lt.dtype.bits << 8 | lt.dtype.lanes;
      for (int d = 0; d < lt.ndim; ++d) e[2 + d] = lt.shape[d];
      ++slot;
    }
    gathered.resize((size_t)W * m->grid->size());
    int rc = MPI_Allgather(mine.data(), W, MPI_LONG_LONG, gathered.data(), W, MPI_LONG_LONG, m->comm);
    if (rc != MPI_SUCCESS) {
      for (int j = 0; j < nout; ++j) release_managed(outputs[j]);
      try {
        mpi_check(rc, "lm_local_map: MPI_Allgather");
      } catch (const Error &e) {
        mesh_break(m, e);
      }
    }
    for (int64_t r = 0; r < m->grid->size(); ++r)
      if (gathered[(size_t)(r * W)] && failed_rank < 0) failed_rank = r;
  } else if (agree) {
    // One allreduce carries the failure (with its cause, on the error path) and the fingerprint:
    // at LM_CHECK >= 1 the arguments, always nin/nout and the outputs' kinds, dtypes and derived
    // global shapes, so ranks that disagree fail together.
    actx.outputs = outputs;
    actx.gshapes = gshapes.data();
    Fingerprint fp("lm_local_map");
    if (local == LM_SUCCESS) fingerprint_local_map(fp, actx, m->check_level >= 1);
    try {
      agree_call("lm_local_map", m, nullptr, &fp, describe_local_map, &actx, local, err);
    } catch (...) {
      for (int j = 0; j < nout; ++j) release_managed(outputs[j]);
      throw;
    }
  }
  if (local != LM_SUCCESS || failed_rank >= 0) {
    for (int j = 0; j < nout; ++j) release_managed(outputs[j]);
    if (local != LM_SUCCESS) throw Error(local, err);
    fail(LM_ERR_REMOTE, "%s: rank %d (mesh rank %lld) failed; this rank %d did not", F,
         m->grid->rank_at_index(failed_rank), (long long)failed_rank, m->world_rank);
  }

  // Global shapes from the gathered extents (every rank checks every rank, so all agree).
  try {
    int slot = 0;
    for (int j = 0; j < nout; ++j) {
      if (!need_gather[j]) continue;
      const lm_placement_t *pl = out_placements[j];
      const DLTensor &lt = static_cast<DLManagedTensor *>(outputs[j].ptr)->dl_tensor;
      size_t base = (size_t)(1 + slot * S);
      const long long my_dtype = gathered[(size_t)(m->index * W) + base + 1];
      for (int64_t r = 0; r < m->grid->size(); ++r) {
        if (gathered[(size_t)(r * W) + base] != lt.ndim)
          fail(LM_ERR_MISMATCH, "%s: outputs[%d] has ndim %d here but %lld on mesh rank %lld", F, j,
               lt.ndim, gathered[(size_t)(r * W) + base], (long long)r);
        if (gathered[(size_t)(r * W) + base + 1] != my_dtype)
          fail(LM_ERR_MISMATCH, "%s: outputs[%d] has dtype %s here but another on mesh rank %lld",
               F, j, dl_dtype_name(lt.dtype).c_str(), (long long)r);
      }
      Shape g = global_shape_from_extents(
          m->grid, pl, lt.ndim, lt.shape,
          [&](int64_t r, int d) { return (int64_t)gathered[(size_t)(r * W) + base + 2 + d]; },
          strfmt("%s: outputs[%d]", F, j).c_str());
      check_numel(g, strfmt("%s: outputs[%d]", F, j).c_str());
      gshapes[j] = g;
      ++slot;
    }
  } catch (...) {
    for (int j = 0; j < nout; ++j) release_managed(outputs[j]);
    throw;
  }

  // Wrap tensor outputs; on any failure undo everything.
  int done = 0;
  try {
    for (; done < nout; ++done) {
      lm_arg_t &o = outputs[done];
      if (o.kind != LM_ARG_MANAGED_TENSOR || !out_placements[done]) continue;
      auto *mt = static_cast<DLManagedTensor *>(o.ptr);
      lm_dist_tensor_s *t;
      try {
        t = tensor_from_local(m, &mt->dl_tensor, out_placements[done], LM_SHAPE_GIVEN,
                              gshapes[done].data(), 0, mt, "lm_local_map: output");
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
    for (int j = 0; j < nout; ++j) {
      if (j < done && outputs[j].kind == LM_ARG_DIST_TENSOR) {
        lm_dist_tensor_t h = static_cast<lm_dist_tensor_t>(outputs[j].ptr);
        if (h) tensor_destroy_handle(&h, "lm_local_map");
        outputs[j] = lm_arg_t{};
      } else {
        release_managed(outputs[j]);
      }
    }
    throw;
  }
}

}  // namespace lm
