// SPDX-License-Identifier: BSD-3-Clause
/// @file localmap.hpp
/// @brief localmap.hpp — a header-only C++17 wrapper over the localmap C API (localmap.h): RAII
/// handles and exceptions. Nothing here adds to the ABI: it only calls the C functions.
///
///     localmap::mesh m = localmap::mesh::world({2, 2}, {"dp", "tp"});
///     auto x = localmap::dist_tensor::from_global(m, full, {localmap::shard(0), localmap::replicate()});
///     auto y = x.reshard({localmap::replicate(), localmap::replicate()});
///
/// Errors throw localmap::error (status() and what(): lm_last_error_message() of the failed C
/// call, or, for an argument refused before any C call, the C++ method, argument and type).
/// Destructors never throw and never communicate (the C destroys are local). The C calls go
/// through localmap_api.hpp, generated from api/localmap.api, which checks each length rule.
#ifndef LOCALMAP_HPP_
#define LOCALMAP_HPP_

#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "localmap.h"

/// The C++ wrapper of localmap.
namespace localmap {

/// One placement per mesh dim.
using placements = std::vector<lm_placement_t>;
/// A shape, extents or coordinate.
using shape = std::vector<int64_t>;
/// The function of localmap::local_map: fn(mesh, inputs, outputs). It may throw: the trampoline
/// turns the exception into LM_ERR_USER with its what() as the message, so nothing unwinds
/// through the C library.
using local_fn = std::function<void(lm_mesh_t, const std::vector<lm_arg_t> &,
                                    std::vector<lm_arg_t> &)>;

/// What every wrapper function throws when the C call fails.
class error : public std::runtime_error {
 public:
  /// An error with the C status and the full message.
  error(lm_status_t status, const std::string &message)
      : std::runtime_error(message), status_(status) {}
  /// The lm_status_t of the failed C call.
  lm_status_t status() const noexcept { return status_; }

 private:
  lm_status_t status_;
};

/// Throws localmap::error when s is not LM_SUCCESS, with lm_status_string(s) and
/// lm_last_error_message() as the message.
inline void check(lm_status_t s) {
  if (s != LM_SUCCESS)
    throw error(s, std::string(lm_status_string(s)) + ": " + lm_last_error_message());
}

namespace detail {
// A refusal of the C++ method `who` ("mesh::dim"), before any C call: LM_ERR_INVALID_ARGUMENT.
[[noreturn]] inline void invalid(const std::string &who, const std::string &message) {
  throw error(LM_ERR_INVALID_ARGUMENT, std::string(lm_status_string(LM_ERR_INVALID_ARGUMENT)) +
                                           ": localmap::" + who + ": " + message);
}
// Refuses an array argument of n elements where its length rule wants `want` (< 0: the rule's
// handle cannot say, and the C call refuses that handle), naming it and its C++ type.
inline void expect_len(const std::string &who, const std::string &name, const char *type,
                       size_t n, int64_t want, const char *unit) {
  if (want >= 0 && n != static_cast<size_t>(want))
    invalid(who, name + " (" + type + ") has " + std::to_string(n) +
                     (n == 1 ? " element" : " elements") + ", want " + std::to_string(want) +
                     ": one per " + unit);
}
// The ndim that a length rule counts (those of the handles: localmap_api.hpp); -1 for NULL.
inline int64_t ndim_of(const DLTensor *t) { return t ? t->ndim : -1; }
inline int64_t ndim_of(const DLManagedTensor *t) { return t ? t->dl_tensor.ndim : -1; }
// The C handles of wrapper objects (still owned by them).
template <class W>
std::vector<decltype(std::declval<const W &>().get())> handles(const std::vector<W> &v) {
  std::vector<decltype(std::declval<const W &>().get())> h;
  for (const W &w : v) h.push_back(w.get());
  return h;
}
// Destroys a C handle (never throws, never communicates: the C destroys are local).
template <class H, lm_status_t (*Destroy)(H *)>
struct destroyer {
  void operator()(H h) const noexcept { (void)Destroy(&h); }
};
// T's DLPack type: bool, float, double, or an integer of 1, 2, 4 or 8 bytes.
template <class T>
constexpr DLDataType dl_type() {
  static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8 &&
                    (std::is_integral<T>::value || sizeof(T) >= 4),
                "a typed view holds bool, float, double or a fixed-width integer");
  const auto bits = static_cast<uint8_t>(8 * sizeof(T));
  if (std::is_same<T, bool>::value) return DLDataType{LM_DL_BOOL, 8, 1};
  if (std::is_floating_point<T>::value) return DLDataType{kDLFloat, bits, 1};
  return DLDataType{static_cast<uint8_t>(std::is_signed<T>::value ? kDLInt : kDLUInt), bits, 1};
}
inline std::string dtype_name(DLDataType t) {  // DLPack's codes: int 0 .. bool 6 (LM_DL_BOOL)
  static const char *const codes[] = {"int", "uint", "float", "ptr", "bfloat", "complex", "bool"};
  return (t.code <= LM_DL_BOOL ? codes[t.code] : "code?") + std::to_string(t.bits) +
         (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
}
// The DLTensor's element type must be T's (a view is never reinterpreted).
template <class T>
void check_dtype(const DLTensor &t, const char *who) {
  const DLDataType w = dl_type<std::remove_cv_t<T>>();
  if (t.dtype.code != w.code || t.dtype.bits != w.bits || t.dtype.lanes != w.lanes)
    invalid(who, "the tensor holds " + dtype_name(t.dtype) + ", not " + dtype_name(w));
}
inline void check_dim(const DLTensor &t, int d, const char *who) {
  if (d < 0 || d >= t.ndim)
    invalid(who, "dim " + std::to_string(d) + " of a tensor of " + std::to_string(t.ndim) +
                     " dims");
}
// The element offset of index idx (ndim entries), checked, through the strides (compact
// row-major when strides is NULL).
inline int64_t element_offset(const DLTensor &t, const int64_t *idx, size_t n) {
  if (n != static_cast<size_t>(t.ndim))
    invalid("local_view::at", std::to_string(n) + " indices for a tensor of " +
                                  std::to_string(t.ndim) + " dims");
  int64_t off = 0, step = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (idx[d] < 0 || idx[d] >= t.shape[d])
      invalid("local_view::at", "index " + std::to_string(idx[d]) + " of dim " +
                                    std::to_string(d) + " is out of range [0, " +
                                    std::to_string(t.shape[d]) + ")");
    off += idx[d] * (t.strides ? t.strides[d] : step);
    step *= t.shape[d];
  }
  return off;
}
// One placements table as the C call reads it (an empty entry: NULL), each entry checked against
// the call's mesh ndim (-1: not known here, a local call).
inline std::vector<const lm_placement_t *> placement_table(const std::vector<placements> &t,
                                                           int64_t ndim, const char *name) {
  std::vector<const lm_placement_t *> r;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].empty())
      expect_len("local_map", std::string(name) + "[" + std::to_string(i) + "]",
                 "localmap::placements", t[i].size(), ndim, "mesh dim");
    r.push_back(t[i].empty() ? nullptr : t[i].data());
  }
  return r;
}
// C linkage, as the library calls it; the name is unique because C names share one namespace.
extern "C" inline lm_status_t localmap_hpp_local_map_trampoline(void *ud, lm_mesh_t m, int nin,
                                                                const lm_arg_t *in, int nout,
                                                                lm_arg_t *out) {
  try {
    std::vector<lm_arg_t> ins(in, in + nin), outs(out, out + nout);
    (*static_cast<local_fn *>(ud))(m, ins, outs);
    for (int j = 0; j < nout && j < static_cast<int>(outs.size()); ++j) out[j] = outs[j];
    return LM_SUCCESS;
  } catch (const error &e) {
    lm_set_error_message(e.what());
    return e.status();
  } catch (const std::exception &e) {
    lm_set_error_message(e.what());
    return LM_ERR_USER;
  } catch (...) {
    lm_set_error_message("unknown C++ exception");
    return LM_ERR_USER;
  }
}
}  // namespace detail
}  // namespace localmap

#include "localmap_api.hpp"

namespace localmap {

/// MPI for the life of a scope, through localmap: the constructor calls lm_init (which starts
/// MPI unless someone already did) and asks lm_world_rank; the destructor calls lm_finalize if
/// this environment is the one that started MPI (so an environment inside a program that
/// initialised MPI itself, or a nested one, never ends it). Declare it first in main, before any
/// mesh:
///
///     int main(int argc, char **argv) {
///       localmap::environment env(argc, argv);
///       localmap::mesh m = localmap::mesh::world({env.size()});
///       ...
///     }   // m is destroyed, then MPI is finalised
///
/// Neither copyable nor movable. finalize() ends it early and throws on failure.
class environment {
 public:
  /// lm_init(&argc, &argv): MPI may remove its own arguments from argv.
  environment(int &argc, char **&argv) : environment(&argc, &argv) {}
  /// lm_init(NULL, NULL).
  environment() : environment(nullptr, nullptr) {}
  /// lm_finalize when this environment started MPI (errors ignored: a destructor does not
  /// throw).
  ~environment() {
    if (active_) (void)!lm_finalize();
  }
  environment(const environment &) = delete;
  environment &operator=(const environment &) = delete;
  /// This process's rank in MPI_COMM_WORLD.
  int rank() const noexcept { return rank_; }
  /// The number of processes in MPI_COMM_WORLD.
  int size() const noexcept { return size_; }
  /// MPI_COMM_WORLD as a Fortran handle (lm_comm_world), e.g. for localmap::mesh's parent.
  int comm_world() const noexcept { return comm_; }
  /// Whether this environment started MPI (and so ends it).
  bool owns_mpi() const noexcept { return active_; }
  /// lm_finalize now if this environment started MPI (every mesh, tensor and plan should be
  /// gone); throws localmap::error on failure. The destructor then does nothing.
  void finalize() {
    if (std::exchange(active_, false)) detail::finalize();
  }

 private:
  // lm_init, then this process's place (lm_finalize again if that fails and MPI is ours).
  environment(int *argc, char ***argv) : active_(!mpi_running()) {
    detail::init(argc, argv);
    try {
      std::tie(rank_, size_) = detail::world_rank();
      comm_ = detail::comm_world();
    } catch (...) {
      if (active_) (void)!lm_finalize();
      throw;
    }
  }
  // Whether MPI is initialised (and not finalised) already: lm_world_rank answers only then.
  static bool mpi_running() noexcept {
    int r = 0, n = 0;
    return lm_world_rank(&r, &n) == LM_SUCCESS;
  }
  bool active_;
  int rank_ = 0, size_ = 1, comm_ = 0;
};

/// The extents of a ragged shard (lm_extents_create), released when destroyed (move-only).
/// Tensors and plans made from placements naming it keep their own copy.
class extents {
 public:
  /// Registers `lengths` (one per coordinate of the mesh dim that uses them).
  explicit extents(const shape &lengths) : id_(detail::extents_create(lengths)) {}
  /// Takes over another object's reference.
  extents(extents &&o) noexcept : id_(std::exchange(o.id_, 0)) {}
  /// Releases this reference and takes over another's.
  extents &operator=(extents &&o) noexcept {
    extents old(std::move(o));  // released at the end of this call (on self: taken back first)
    std::swap(id_, old.id_);
    return *this;
  }
  /// Releases the reference (lm_extents_destroy).
  ~extents() {
    if (id_) (void)!lm_extents_destroy(id_);
  }
  /// The id lm_placement_t::extents carries.
  int32_t id() const noexcept { return id_; }
  /// The lengths of any live extents id (e.g. from dist_tensor::placement()).
  static shape lengths(int32_t id) {
    const int64_t n = std::get<1>(detail::extents_get(id, 0));
    return std::get<0>(detail::extents_get(id, n));
  }

 private:
  int32_t id_ = 0;
};

/// RaggedShard(dim) with the given extents (see lm_placement_t), with a co-shard order.
inline lm_placement_t ragged(int dim, const extents &e, int order = 0) {
  return {LM_RAGGED, dim, order, 0, e.id(), 0, 0, 0};
}

/// What the wrapper classes share: the C handle H they own (move-only), destroyed with Destroy
/// when they die.
template <class H, lm_status_t (*Destroy)(H *)>
class handle {
 public:
  /// The C handle (still owned here).
  H get() const noexcept { return h_.get(); }
  /// Whether this holds one.
  explicit operator bool() const noexcept { return h_ != nullptr; }

 protected:
  handle() = default;
  /// Owns h from now on.
  explicit handle(H h) noexcept : h_(h) {}
  std::unique_ptr<std::remove_pointer_t<H>, detail::destroyer<H, Destroy>> h_;  ///< the owner
};

// ----------------------------------------------------------------------------------- mesh
/// A mesh (lm_mesh_t). Move-only: the mesh handle is owned here (tensors and plans keep their own
/// reference).
class mesh : public handle<lm_mesh_t, lm_mesh_destroy>, public mesh_methods<mesh> {
 public:
  mesh() = default;
  /// lm_mesh_create: collective over the parent (a Fortran handle: MPI_Comm_c2f(comm)); ranks and
  /// names fill lm_mesh_config_t when not empty.
  mesh(int parent_comm_f, const shape &extents, const std::vector<int> &ranks = {},
       const std::vector<std::string> &names = {}) {
    if (!names.empty())
      detail::expect_len("mesh", "names", "std::vector<std::string>", names.size(),
                         static_cast<int64_t>(extents.size()), "mesh dim");
    lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
    std::vector<const char *> cnames;
    for (auto &n : names) cnames.push_back(n.c_str());
    cfg.ranks = ranks.empty() ? nullptr : ranks.data();
    cfg.nranks = static_cast<int>(ranks.size());
    cfg.dim_names = names.empty() ? nullptr : cnames.data();
    h_.reset(detail::mesh_create(parent_comm_f, extents, &cfg));
  }
  /// A mesh over MPI_COMM_WORLD (collective over it).
  static mesh world(const shape &extents, const std::vector<std::string> &names = {}) {
    return mesh(detail::comm_world(), extents, {}, names);
  }

 private:
  friend class mesh_methods<mesh>;  // its grid() adopts the new handle
  explicit mesh(lm_mesh_t h) noexcept : handle(h) {}
};

namespace detail {
inline lm_mesh_t get(const mesh *m) { return m ? m->get() : nullptr; }
// The call's mesh ndim: m's, else the first dist input's; -1 for a local call.
inline int64_t local_map_ndim(const std::vector<lm_arg_t> &inputs, lm_mesh_t m) {
  if (m) return ndim_of(m);
  for (const lm_arg_t &a : inputs)
    if (a.kind == LM_ARG_DIST_TENSOR) return mesh_ndim_of(static_cast<lm_dist_tensor_t>(a.ptr));
  return -1;
}
}  // namespace detail

// ---------------------------------------------------------------------------- dist_tensor
/// A dist tensor (lm_dist_tensor_t): a shared reference (copies retain, destruction releases), like
/// the C handle's refcount.
class dist_tensor : public handle<lm_dist_tensor_t, lm_dist_tensor_destroy>,
                    public dist_tensor_methods<dist_tensor> {
 public:
  dist_tensor() = default;
  /// Adopts a handle the caller owns (one reference).
  explicit dist_tensor(lm_dist_tensor_t h) noexcept : handle(h) {}
  /// Another reference to o's tensor (lm_dist_tensor_retain).
  dist_tensor(const dist_tensor &o) : handle(retain(o.get())) {}
  /// Drops this reference and takes another to o's tensor.
  dist_tensor &operator=(const dist_tensor &o) {
    h_.reset(retain(o.get()));  // retained before the old reference goes: safe on self
    return *this;
  }
  /// Takes o's reference; o becomes empty.
  dist_tensor(dist_tensor &&o) noexcept = default;
  /// Drops this reference and takes o's; o becomes empty.
  dist_tensor &operator=(dist_tensor &&o) noexcept = default;
  /// ScaLAPACK's descriptor (LM_SCALAPACK_DLEN ints).
  using scalapack_desc_t = std::array<int, LM_SCALAPACK_DLEN>;
  /// Gives up the reference: the caller destroys the returned handle.
  lm_dist_tensor_t release() noexcept { return h_.release(); }
  /// The local shard's data as T* (its first element: a padded borrow's rows are local().strides
  /// apart, not its extents).
  template <class T>
  T *local_data() const { return static_cast<T *>(local().data); }

 private:
  static lm_dist_tensor_t retain(lm_dist_tensor_t h) {
    if (h) detail::dist_tensor_retain(h);
    return h;
  }
};

// --------------------------------------------------------------------------- reshard_plan
/// A persistent reshard plan (lm_reshard_plan_t). Move-only.
class reshard_plan : public handle<lm_reshard_plan_t, lm_reshard_plan_destroy>,
                     public reshard_plan_methods<reshard_plan> {
 public:
  /// lm_reshard_plan_create (local); dst_mesh nullptr: src_mesh.
  reshard_plan(const mesh &src_mesh, const placements &src_placements, const mesh *dst_mesh,
               const placements &dst_placements, const shape &global_shape, DLDataType dtype)
      : handle(detail::reshard_plan_create(src_mesh.get(), src_placements, detail::get(dst_mesh),
                                           dst_placements, global_shape, dtype)) {}
  /// Takes ownership of a C plan handle (e.g. from lm_reshard_plan_adjoint).
  explicit reshard_plan(lm_reshard_plan_t h) noexcept : handle(h) {}
  /// The bytes this rank sends to other ranks per execution: info().bytes_sent
  /// (lm_reshard_plan_info, flags 0: local).
  int64_t bytes_sent() const { return info().bytes_sent; }
};

/// lm_reshard_estimate: what the reshard plan of these arguments would move, without building
/// it (local; all_ranks: summed over both meshes' ranks, collective). dst_mesh nullptr: src_mesh.
inline lm_reshard_plan_info_t reshard_estimate(const mesh &src_mesh,
                                               const placements &src_placements,
                                               const placements &dst_placements,
                                               const shape &global_shape, DLDataType dtype,
                                               const mesh *dst_mesh = nullptr,
                                               bool all_ranks = false) {
  lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
  detail::reshard_estimate(src_mesh.get(), src_placements, detail::get(dst_mesh), dst_placements,
                           global_shape, dtype, all_ranks ? LM_PLAN_INFO_ALL_RANKS : 0, &i);
  return i;
}

// --------------------------------------------------------------------------- reshard_group
/// One entry of a reshard_group: a tensor's global shape, dtype and both placements.
struct reshard_entry {
  shape global;       ///< the tensor's global shape
  DLDataType dtype;   ///< its element type
  placements src;     ///< one per source mesh dim
  placements dst;     ///< one per target mesh dim
};

/// A grouped reshard plan (lm_reshard_group_t): many tensors, one message per peer and step.
/// Move-only.
class reshard_group : public handle<lm_reshard_group_t, lm_reshard_group_destroy>,
                      public reshard_group_methods<reshard_group> {
 public:
  /// lm_reshard_group_create (local); dst_mesh nullptr: src_mesh; bucket_bytes 0: the default.
  reshard_group(const mesh &src_mesh, const std::vector<reshard_entry> &entries,
                const mesh *dst_mesh = nullptr, size_t bucket_bytes = 0)
      : reshard_group("reshard_group", src_mesh.get(), entries, detail::get(dst_mesh),
                      bucket_bytes) {}

 private:
  friend std::vector<dist_tensor> reshard_many(const std::vector<dist_tensor> &,
                                               const std::vector<placements> &, const mesh *);
  // The entries as C reads them, each one's placements checked against its mesh first.
  reshard_group(const char *who, lm_mesh_t src_mesh, const std::vector<reshard_entry> &entries,
                lm_mesh_t dst_mesh, size_t bucket_bytes) {
    const int64_t sn = detail::ndim_of(src_mesh), dn = dst_mesh ? detail::ndim_of(dst_mesh) : sn;
    std::vector<lm_reshard_entry_t> e;
    for (size_t i = 0; i < entries.size(); ++i) {
      const reshard_entry &x = entries[i];
      const std::string at = "entries[" + std::to_string(i) + "].";
      detail::expect_len(who, at + "src", "localmap::placements", x.src.size(), sn, "mesh dim");
      detail::expect_len(who, at + "dst", "localmap::placements", x.dst.size(), dn, "mesh dim");
      e.push_back(lm_reshard_entry_t{static_cast<int>(x.global.size()), x.global.data(), x.dtype,
                                     x.src.data(), x.dst.data()});
    }
    lm_reshard_group_config_t c = LM_RESHARD_GROUP_CONFIG_INIT;
    c.bucket_bytes = bucket_bytes;
    h_.reset(detail::reshard_group_create(src_mesh, dst_mesh, e, &c));
  }
};

/// src[i] with dst[i]'s placements on dst_mesh (nullptr: theirs), as one grouped reshard
/// (collective): a group made from the tensors' entries (lm_reshard_group_create), its targets
/// allocated on src[0]'s device, executed and destroyed. On failure no tensor is left.
inline std::vector<dist_tensor> reshard_many(const std::vector<dist_tensor> &src,
                                             const std::vector<placements> &dst,
                                             const mesh *dst_mesh = nullptr) {
  const char *who = "reshard_many";
  detail::expect_len(who, "dst", "std::vector<localmap::placements>", dst.size(),
                     static_cast<int64_t>(src.size()), "tensor of src");
  if (src.empty()) return {};
  const lm_mesh_t sm = detail::dist_tensor_mesh(src[0].get());
  const int64_t dn = dst_mesh ? dst_mesh->ndim() : detail::ndim_of(sm);
  std::vector<reshard_entry> e;
  for (size_t i = 0; i < src.size(); ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    if (detail::dist_tensor_mesh(src[i].get()) != sm)
      detail::invalid(who, "src" + at + " lives on another mesh than src[0] (one call moves "
                      "tensors of one mesh)");
    detail::expect_len(who, "dst" + at, "localmap::placements", dst[i].size(), dn, "mesh dim");
    e.push_back({src[i].global_shape(), src[i].dtype(), src[i].placement(), dst[i]});
  }
  reshard_group g(who, sm, e, detail::get(dst_mesh), 0);
  std::vector<dist_tensor> out = g.alloc_targets(detail::dist_tensor_device(src[0].get()));
  g.execute(src, out);  // out owns the targets: dropped if this throws
  return out;
}

// ------------------------------------------------------------------------------ local_map
/// An LM_ARG_DIST_TENSOR argument (borrows t).
inline lm_arg_t arg(const dist_tensor &t) { return lm_arg_dist(t.get()); }
/// An LM_ARG_INT64 argument.
inline lm_arg_t arg_i64(int64_t v) { return lm_arg_i64(v); }
/// An LM_ARG_DOUBLE argument.
inline lm_arg_t arg_f64(double v) { return lm_arg_f64(v); }

/** Calls a DLManagedTensor's deleter (once) when the owning pointer dies. */
struct managed_deleter {
  /** Runs m's deleter, if any. */
  void operator()(DLManagedTensor *m) const {
    if (m && m->deleter) m->deleter(m);
  }
};
/** An owned DLManagedTensor (e.g. a local_map output whose out placements were empty). */
using managed_tensor = std::unique_ptr<DLManagedTensor, managed_deleter>;

/// A read-only view of a local tensor (a DLTensor: data, shape, strides, dtype, device), e.g. the
/// shard of a dist tensor that a typed local_map function receives. It borrows: the memory stays
/// its owner's, and a local_map input's view is valid during the call only. Element types are
/// checked: data<T>() and at<T>() throw localmap::error (LM_ERR_INVALID_ARGUMENT) when T is not
/// the tensor's dtype. T is float, double, int8_t .. int64_t, uint8_t .. uint64_t or bool; other
/// dtypes (float16, bfloat16, complex) are read through the untyped data(). Device tensors give
/// their device pointer (at<T> reads host memory only).
class local_view {
 public:
  local_view() = default;
  /// A view of t (its shape and strides arrays are borrowed too).
  explicit local_view(const DLTensor &t) noexcept : t_(t) {}
  /// The DLTensor viewed.
  const DLTensor &dl() const noexcept { return t_; }
  /// The number of dims (0 for a scalar).
  int ndim() const noexcept { return t_.ndim; }
  /// The extent of dim d (0 <= d < ndim(), else throws).
  int64_t shape(int d) const {
    detail::check_dim(t_, d, "local_view::shape");
    return t_.shape[d];
  }
  /// All extents.
  localmap::shape shape() const { return localmap::shape(t_.shape, t_.shape + t_.ndim); }
  /// The stride of dim d in elements (row-major compact when the DLTensor has none).
  int64_t stride(int d) const {
    detail::check_dim(t_, d, "local_view::stride");
    if (t_.strides) return t_.strides[d];
    int64_t s = 1;
    for (int k = d + 1; k < t_.ndim; ++k) s *= t_.shape[k];
    return s;
  }
  /// The number of elements (the product of the extents; 1 for a scalar).
  int64_t size() const noexcept {
    int64_t n = 1;
    for (int d = 0; d < t_.ndim; ++d) n *= t_.shape[d];
    return n;
  }
  /// Whether the elements lie row-major without gaps (size() of them from data()).
  bool is_contiguous() const noexcept {
    if (!t_.strides) return true;
    int64_t s = 1;
    for (int d = t_.ndim - 1; d >= 0; --d) {
      if (t_.shape[d] != 1 && t_.strides[d] != s) return false;
      s *= t_.shape[d];
    }
    return true;
  }
  /// The element type.
  DLDataType dtype() const noexcept { return t_.dtype; }
  /// Where the data lives.
  DLDevice device() const noexcept { return t_.device; }
  /// The first element (byte_offset applied), untyped.
  const void *data() const noexcept { return static_cast<const char *>(t_.data) + t_.byte_offset; }
  /// The first element as const T* (throws unless T is the dtype). Element (i, j, ...) lies at
  /// sum(index * stride(d)) from it.
  template <class T>
  const T *data() const {
    detail::check_dtype<T>(t_, "local_view::data");
    return static_cast<const T *>(data());
  }
  /// Element (idx...) through the strides, bounds- and dtype-checked: one index per dim
  /// (none for a scalar).
  template <class T, class... I>
  const T &at(I... idx) const {
    const int64_t ix[sizeof...(I) + 1] = {static_cast<int64_t>(idx)..., 0};
    return data<T>()[detail::element_offset(t_, ix, sizeof...(I))];
  }

 private:
  DLTensor t_{};
};

/// An owned local tensor (a DLManagedTensor, move-only): what a typed local_map function
/// returns as a tensor output, and what local_map_result::local gives for a tensor output with
/// empty out placements. zeros() allocates with lm_tensor_alloc (compact row-major, zero-filled,
/// localmap's pool, host memory); any DLManagedTensor can be adopted (e.g. a framework's device
/// tensor). The deleter runs once, when the last owner lets it go.
class local_tensor {
 public:
  local_tensor() = default;
  /// Adopts m (its deleter runs when this tensor dies).
  explicit local_tensor(managed_tensor m) noexcept : m_(std::move(m)) {}
  /// Adopts m (its deleter runs when this tensor dies).
  explicit local_tensor(DLManagedTensor *m) noexcept : m_(m) {}
  /// A zero-filled tensor of this shape and dtype (lm_tensor_alloc).
  static local_tensor zeros(const localmap::shape &s, DLDataType dtype,
                            DLDevice device = {kDLCPU, 0}) {
    return local_tensor(detail::tensor_alloc(s, dtype, device));
  }
  /// A zero-filled host tensor of T (float, double, int8_t .. int64_t, uint8_t .. uint64_t,
  /// bool).
  template <class T>
  static local_tensor zeros(const localmap::shape &s) { return zeros(s, detail::dl_type<T>()); }
  /// A host tensor of v's shape and dtype, zero-filled.
  static local_tensor zeros_like(const local_view &v) { return zeros(v.shape(), v.dtype()); }
  /// A 0-d host tensor holding v (a loss, a count: place it Partial to reduce it).
  template <class T>
  static local_tensor scalar(T v) {
    local_tensor t = zeros<T>({});
    *t.data<T>() = v;
    return t;
  }
  /// Whether this owns a tensor.
  explicit operator bool() const noexcept { return static_cast<bool>(m_); }
  /// A read-only view (valid while this tensor lives).
  local_view view() const { return local_view(dl()); }
  /// The DLTensor (throws if empty).
  const DLTensor &dl() const {
    if (!m_) detail::invalid("local_tensor", "empty (moved from?)");
    return m_->dl_tensor;
  }
  /// The number of dims.
  int ndim() const { return dl().ndim; }
  /// The extent of dim d.
  int64_t shape(int d) const { return view().shape(d); }
  /// All extents.
  localmap::shape shape() const { return view().shape(); }
  /// The number of elements.
  int64_t size() const { return view().size(); }
  /// The element type.
  DLDataType dtype() const { return dl().dtype; }
  /// The first element as T* (throws unless T is the dtype).
  template <class T>
  T *data() { return const_cast<T *>(view().data<T>()); }
  /// The first element as const T*.
  template <class T>
  const T *data() const { return view().data<T>(); }
  /// Element (idx...), writable (bounds- and dtype-checked).
  template <class T, class... I>
  T &at(I... idx) { return const_cast<T &>(view().at<T>(idx...)); }
  /// Element (idx...).
  template <class T, class... I>
  const T &at(I... idx) const { return view().at<T>(idx...); }
  /// The DLManagedTensor, still owned here.
  DLManagedTensor *get() const noexcept { return m_.get(); }
  /// Gives up ownership: the caller runs the deleter once.
  DLManagedTensor *release() noexcept { return m_.release(); }

 private:
  managed_tensor m_;
};

/// The record of a local_map call (lm_local_map_record_t, owned): what its backward pass needs.
/// Move-only.
class local_map_record : public handle<lm_local_map_record_t, lm_local_map_record_destroy>,
                         public local_map_record_methods<local_map_record> {
 public:
  local_map_record() = default;
  /// Adopts a record handle.
  explicit local_map_record(lm_local_map_record_t h) : handle(h) {}
  /// lm_local_map_record_placements: which is an lm_record_which_t (LM_RECORD_IN_GRAD...).
  placements get_placements(int which, int index) const {
    int n = 0;
    lm_status_t st = lm_local_map_record_placements(get(), which, index, 0, nullptr, &n);
    if (st != LM_SUCCESS && n <= 0) check(st);
    return std::get<0>(detail::local_map_record_placements(get(), which, index, n));
  }
};

/// What lm_local_map returned.
struct local_map_result {
  std::vector<lm_arg_t> args;          ///< args[j]: output j as the C API gives it
  std::vector<dist_tensor> tensors;    ///< tensors[j]: owns output j's dist tensor (empty if none)
  std::vector<managed_tensor> locals;  ///< locals[j]: owns a plain local tensor output (empty out
                                       ///< placements; args[j].ptr is then a borrowed view of it)
  local_map_record record;             ///< the call's record (local_map_ex with a record asked)
  /// Output j as a dist tensor (throws unless it is one).
  const dist_tensor &tensor(size_t j) const {
    if (kind(j) != LM_ARG_DIST_TENSOR) wrong(j, "a dist tensor");
    return tensors[j];
  }
  /// Output j, a tensor with empty out placements: this rank's local tensor, moved out (throws
  /// unless it is one, or when taken already).
  local_tensor local(size_t j) {
    if (kind(j) != LM_ARG_MANAGED_TENSOR || !locals[j]) wrong(j, "a local tensor still here");
    args[j].ptr = nullptr;
    return local_tensor(std::move(locals[j]));
  }
  /// Output j as an integer (LM_ARG_INT64; throws otherwise).
  int64_t i64(size_t j) const {
    if (kind(j) != LM_ARG_INT64) wrong(j, "an integer");
    return args[j].i64;
  }
  /// Output j as a double (LM_ARG_DOUBLE; throws otherwise).
  double f64(size_t j) const {
    if (kind(j) != LM_ARG_DOUBLE) wrong(j, "a double");
    return args[j].f64;
  }

 private:
  int32_t kind(size_t j) const {
    if (j >= args.size())
      detail::invalid("local_map_result", "output " + std::to_string(j) + " of " +
                                              std::to_string(args.size()));
    return args[j].kind;
  }
  [[noreturn]] static void wrong(size_t j, const char *what) {
    detail::invalid("local_map_result", "output " + std::to_string(j) + " is not " + what);
  }
};

/// lm_local_map_ex: local_map with gradient placements for the inputs (one entry per input or
/// none; an empty entry: the placements fn saw) and, when want_record, the call's record in
/// result.record for a hand-written backward pass.
inline local_map_result local_map_ex(local_fn fn, const std::vector<lm_arg_t> &inputs,
                                     const std::vector<placements> &out_placements,
                                     const std::vector<placements> &in_placements,
                                     const std::vector<placements> &in_grad_placements,
                                     bool want_record, const mesh *m = nullptr,
                                     unsigned flags = 0) {
  if (!in_grad_placements.empty())  // (the generated call checks in_placements' count)
    detail::expect_len("local_map", "in_grad_placements",
                       "std::vector<localmap::placements>", in_grad_placements.size(),
                       static_cast<int64_t>(inputs.size()), "element of inputs");
  const int64_t ndim = detail::local_map_ndim(inputs, detail::get(m));
  auto inp = detail::placement_table(in_placements, ndim, "in_placements");
  auto gradp = detail::placement_table(in_grad_placements, ndim, "in_grad_placements");
  auto outp = detail::placement_table(out_placements, ndim, "out_placements");
  lm_local_map_record_t rec = nullptr;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.in_grad_placements = gradp.empty() ? nullptr : gradp.data();
  opt.record = want_record ? &rec : nullptr;
  local_map_result r;
  r.args = detail::local_map_ex(detail::localmap_hpp_local_map_trampoline, &fn, inputs, inp, outp,
                                {}, detail::get(m), flags, &opt, "local_map");
  r.record = local_map_record(rec);
  r.tensors.resize(r.args.size());
  r.locals.resize(r.args.size());
  for (size_t j = 0; j < r.args.size(); ++j) {
    if (r.args[j].kind == LM_ARG_DIST_TENSOR)
      r.tensors[j] = dist_tensor(static_cast<lm_dist_tensor_t>(r.args[j].ptr));  // adopt
    else if (r.args[j].kind == LM_ARG_MANAGED_TENSOR)
      r.locals[j].reset(static_cast<DLManagedTensor *>(r.args[j].ptr));  // adopt
  }
  return r;
}

/// lm_local_map: runs fn on the local shards (collective over the mesh). out_placements: one entry
/// per output, empty for a non-tensor output. in_placements: empty, or one entry per input (empty:
/// as it is).
inline local_map_result local_map(local_fn fn, const std::vector<lm_arg_t> &inputs,
                                  const std::vector<placements> &out_placements,
                                  const std::vector<placements> &in_placements = {},
                                  const mesh *m = nullptr, unsigned flags = 0) {
  return local_map_ex(std::move(fn), inputs, out_placements, in_placements, {}, false, m, flags);
}

// ------------------------------------------------------------------------ typed local_map
/// One input of a typed local_map: a dist tensor (fn gets a local_view of this rank's shard,
/// optionally in given placements), a local DLTensor (passed as it is), an integer or a
/// floating-point value. Implicit from each, so an input list reads `{x, w, 0.5, 3}`. It borrows:
/// the tensors must live until local_map returns (they do when written in the call).
class input {
 public:
  /// A dist tensor, seen as it is.
  input(const dist_tensor &t) : arg_(arg(t)) {}  // NOLINT: implicit on purpose
  /// A dist tensor that fn must see in placements `in` (moved there with
  /// LM_LOCAL_MAP_RESHARD_INPUTS, else it must already be so); in_grad: its gradient's
  /// placements for local_map_options::record (empty: `in`).
  input(const dist_tensor &t, placements in, placements in_grad = {})
      : arg_(arg(t)), in_(std::move(in)), in_grad_(std::move(in_grad)) {}
  /// A local tensor (LM_ARG_TENSOR), passed to fn as it is on this rank.
  input(const DLTensor &t) : arg_(lm_arg_tensor(const_cast<DLTensor *>(&t))) {}  // NOLINT
  /// An integer (LM_ARG_INT64).
  template <class T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value,
                                      int> = 0>
  input(T v) : arg_(arg_i64(static_cast<int64_t>(v))) {}  // NOLINT
  /// A floating-point value (LM_ARG_DOUBLE).
  template <class T, std::enable_if_t<std::is_floating_point<T>::value, int> = 0>
  input(T v) : arg_(arg_f64(static_cast<double>(v))) {}  // NOLINT
  /// The C argument.
  const lm_arg_t &c_arg() const noexcept { return arg_; }
  /// The placements fn sees (empty: as it is).
  const placements &in_placements() const noexcept { return in_; }
  /// The gradient's placements (empty: those fn sees).
  const placements &in_grad_placements() const noexcept { return in_grad_; }

 private:
  lm_arg_t arg_;
  placements in_, in_grad_;
};

/// One output of a typed local_map function: a local_tensor (moved in), an integer or a
/// floating-point value. Implicit from each; a std::vector of them returns a number of outputs
/// known only at run time.
class local_output {
 public:
  /// A tensor output (ownership passes to localmap).
  local_output(local_tensor &&t) : arg_(lm_arg_managed(nullptr)), t_(std::move(t)) {}  // NOLINT
  /// An integer output (LM_ARG_INT64).
  template <class T, std::enable_if_t<std::is_integral<T>::value, int> = 0>
  local_output(T v) : arg_(arg_i64(static_cast<int64_t>(v))) {}  // NOLINT
  /// A floating-point output (LM_ARG_DOUBLE).
  template <class T, std::enable_if_t<std::is_floating_point<T>::value, int> = 0>
  local_output(T v) : arg_(arg_f64(static_cast<double>(v))) {}  // NOLINT
  /// The C output; a tensor's ownership passes to the caller.
  lm_arg_t release() {
    if (arg_.kind == LM_ARG_MANAGED_TENSOR) arg_.ptr = t_.release();
    return arg_;
  }

 private:
  lm_arg_t arg_;
  local_tensor t_;
};

/// Options of a typed local_map (positional: `{&mesh, flags, record}`).
struct local_map_options {
  /// The call's mesh; nullptr: the dist inputs' (see lm_local_map).
  const localmap::mesh *mesh = nullptr;
  /// LM_LOCAL_MAP_RESHARD_INPUTS, LM_LOCAL_MAP_NO_AGREE, LM_LOCAL_MAP_SHAPES_EVEN.
  unsigned flags = 0;
  /// Keep the call's record in local_map_result::record (lm_local_map_ex).
  bool record = false;
};

namespace detail {
// A typed fn's result and parameters, as std::function's deduction guides read them (from a
// function, a function pointer, or a class with one operator(): a lambda, a function object);
// skip: 1 when the first parameter is the mesh (lm_mesh_t).
template <class S>
struct signature;
template <class R, class... A>
struct signature<std::function<R(A...)>> {
  using result = R;
  using args = std::tuple<std::decay_t<A>..., void *>;
  static constexpr size_t skip = std::is_same<std::tuple_element_t<0, args>, lm_mesh_t>::value;
  using seq = std::make_index_sequence<sizeof...(A) - skip>;
};
template <class F>
using signature_of = signature<decltype(std::function{std::declval<std::decay_t<F>>()})>;

// What parameter type P takes: 1 a view, 2 an integer, 3 a floating-point value, 0 nothing.
template <class P>
constexpr int param_kind() {
  if (std::is_same<P, local_view>::value) return 1;
  if (std::is_integral<P>::value && !std::is_same<P, bool>::value) return 2;
  return std::is_floating_point<P>::value ? 3 : 0;
}
// fn's parameter for one input, as fn sees it inside the call.
template <class P>
P param(const lm_arg_t &a) {
  if constexpr (param_kind<P>() == 1)
    return local_view(*static_cast<const DLTensor *>(a.ptr));
  else
    return a.kind == LM_ARG_INT64 ? static_cast<P>(a.i64) : static_cast<P>(a.f64);
}
// Refuses, before the call and alike on every rank, an input that fn's parameter P does not take.
template <class P>
void check_param(const input &in, size_t i) {
  static_assert(param_kind<P>() != 0, "a typed local_map function takes localmap::local_view, "
                "integer or floating-point parameters (after an optional first lm_mesh_t)");
  const int32_t k = in.c_arg().kind;
  const int want = param_kind<P>();
  if (want == 1 ? k == LM_ARG_DIST_TENSOR || k == LM_ARG_TENSOR
                : k == LM_ARG_INT64 || (want == 3 && k == LM_ARG_DOUBLE))
    return;
  static const char *const is[] = {"an argument of another kind", "a dist tensor",
                                   "a local tensor", "an integer", "a double"};
  static const char *const takes[] = {"", "a localmap::local_view", "an integer",
                                      "a floating-point value"};
  invalid("local_map", "inputs[" + std::to_string(i) + "] is " + is[k >= 1 && k <= 4 ? k : 0] +
                           ", but fn's parameter for it takes " + takes[want]);
}
template <class Args, size_t Skip, size_t... I>
void check_params(const std::vector<input> &in, std::index_sequence<I...>) {
  if (in.size() != sizeof...(I))
    invalid("local_map", "fn takes " + std::to_string(sizeof...(I)) + " inputs, " +
                             std::to_string(in.size()) + " given (std::vector<localmap::input>)");
  (check_param<std::tuple_element_t<Skip + I, Args>>(in[I], I), ...);
}
// Calls fn with the converted inputs (and the mesh first, if fn takes it).
template <class Args, size_t Skip, class F, size_t... I>
decltype(auto) invoke_typed(F &fn, lm_mesh_t m, const std::vector<lm_arg_t> &in,
                            std::index_sequence<I...>) {
  (void)m;
  (void)in;
  if constexpr (Skip == 1)
    return fn(m, param<std::tuple_element_t<1 + I, Args>>(in[I])...);
  else
    return fn(param<std::tuple_element_t<I, Args>>(in[I])...);
}
// fn's result as a list of outputs: a std::vector of them, a tuple-like of them, or one.
template <class T, class = void>
struct is_tuple_like : std::false_type {};
template <class T>
struct is_tuple_like<T, std::void_t<decltype(std::tuple_size<T>::value)>> : std::true_type {};
template <class R>
std::vector<local_output> collect(R &&r) {
  std::vector<local_output> out;
  if constexpr (std::is_same<std::decay_t<R>, std::vector<local_output>>::value)
    out = std::move(r);
  else if constexpr (is_tuple_like<std::decay_t<R>>::value)
    std::apply([&out](auto &&...x) { (out.emplace_back(std::move(x)), ...); }, std::move(r));
  else
    out.emplace_back(std::move(r));
  return out;
}
// The number of outputs R gives, when the type says (-1: only at run time).
template <class R>
constexpr long static_outputs() {
  using D = std::decay_t<R>;
  if constexpr (std::is_void<D>::value) return 0;
  else if constexpr (std::is_same<D, std::vector<local_output>>::value) return -1;
  else if constexpr (is_tuple_like<D>::value) return static_cast<long>(std::tuple_size<D>::value);
  else return 1;
}
// Whether F is a typed local_map function (and not the raw local_fn).
template <class F>
constexpr bool is_typed_fn = !std::is_convertible<F, local_fn>::value;
}  // namespace detail

/// The typed local_map: runs fn on the local shards, with typed views in and owned local
/// tensors or scalars out. Collective over the mesh and agreed, like lm_local_map:
///
///     // pred [B, C] float64 split on the batch, labels [B] int64 replicated; -100: ignored
///     auto nll = [](const localmap::local_view &pred, const localmap::local_view &labels) {
///       double sum = 0;
///       int64_t n = 0;
///       for (int64_t i = 0; i < labels.shape(0); ++i) {
///         const int64_t y = labels.at<int64_t>(i);
///         if (y == -100) continue;
///         sum -= pred.at<double>(i, y);
///         ++n;
///       }
///       return std::tuple{localmap::local_tensor::scalar(sum), localmap::local_tensor::scalar(n)};
///     };
///     localmap::local_map_result r = localmap::local_map(
///         nll, {pred, localmap::input(labels, {localmap::shard(0)})},
///         {{localmap::partial()}, {localmap::partial()}},   // one entry per output
///         {nullptr, LM_LOCAL_MAP_RESHARD_INPUTS});            // labels moved to Shard(0)
///     // r.tensor(0), r.tensor(1): the loss sum and the count, placed Partial(sum)
///
/// fn's parameters take the inputs one to one: a localmap::local_view for a dist tensor (this
/// rank's shard, read-only) or a local DLTensor, an integer type for an integer, a floating type
/// for a double or an integer. A first parameter of type lm_mesh_t, if any, receives the call's
/// mesh (for collectives inside fn). fn returns nothing, one output, a std::tuple or std::pair of
/// outputs, or a std::vector<localmap::local_output>. An output is a localmap::local_tensor (moved
/// in: with placements in out_placements it becomes a dist tensor, with an empty entry it comes
/// back as this rank's local tensor, local_map_result::local) or an integer or floating-point
/// value (an empty entry; local_map_result::i64, f64).
///
/// Errors: inputs that fn's parameters do not take, or a result count that differs from
/// out_placements', throw localmap::error (LM_ERR_INVALID_ARGUMENT) before the call, alike on
/// every rank. An exception thrown in fn (a localmap::error too, e.g. from a view read as the
/// wrong type) becomes LM_ERR_USER, its what() in the message, on the ranks that threw, and
/// LM_ERR_REMOTE naming the rank on the others; a run-time output count (a std::vector) that
/// differs fails the call the same way.
/// @param fn             a function, lambda or function object (not a generic lambda)
/// @param inputs         the inputs, one per parameter of fn (after its lm_mesh_t, if any)
/// @param out_placements one entry per output: mesh-ndim placements, or empty
/// @param options        the mesh, flags, and whether to keep the call's record
/// @return the outputs (local_map_result::tensor, local, i64, f64) and the record if asked
template <class F, std::enable_if_t<detail::is_typed_fn<F>, int> = 0>
local_map_result local_map(F &&fn, const std::vector<input> &inputs,
                           const std::vector<placements> &out_placements,
                           const local_map_options &options = {}) {
  using sig = detail::signature_of<F>;
  using Args = typename sig::args;
  using Seq = typename sig::seq;
  detail::check_params<Args, sig::skip>(inputs, Seq{});
  constexpr long nres = detail::static_outputs<typename sig::result>();
  if (nres >= 0 && static_cast<size_t>(nres) != out_placements.size())
    detail::invalid("local_map", "fn returns " + std::to_string(nres) + " outputs, " +
                                     std::to_string(out_placements.size()) +
                                     " out_placements given");
  std::vector<lm_arg_t> args;
  std::vector<placements> in_p, grad_p;  // empty entries: as it is, and as fn sees it
  for (const input &i : inputs) {
    args.push_back(i.c_arg());
    in_p.push_back(i.in_placements());
    grad_p.push_back(i.in_grad_placements());
  }
  auto &f = fn;
  local_fn call = [&f](lm_mesh_t m, const std::vector<lm_arg_t> &in, std::vector<lm_arg_t> &out) {
    std::vector<local_output> res;
    if constexpr (std::is_void<typename sig::result>::value)
      detail::invoke_typed<Args, sig::skip>(f, m, in, Seq{});
    else
      res = detail::collect(detail::invoke_typed<Args, sig::skip>(f, m, in, Seq{}));
    if (res.size() != out.size())
      detail::invalid("local_map", "fn returned " + std::to_string(res.size()) +
                                       " outputs for " + std::to_string(out.size()) +
                                       " out_placements");
    for (size_t j = 0; j < res.size(); ++j) out[j] = res[j].release();
  };
  return local_map_ex(std::move(call), args, out_placements, in_p, grad_p, options.record,
                      options.mesh, options.flags);
}

}  // namespace localmap

#endif  // LOCALMAP_HPP_
