// SPDX-License-Identifier: BSD-3-Clause
/// @file localmap.hpp
/// @brief localmap.hpp — a header-only C++17 wrapper over the localmap C API (localmap.h): RAII
/// handles and exceptions. Nothing here adds to the ABI: it only calls the C functions.
///
///     localmap::mesh m = localmap::mesh::world({2, 2}, {"dp", "tp"});
///     auto x = localmap::dist_tensor::from_global(m, full, {localmap::shard(0), localmap::replicate()});
///     auto y = x.reshard({localmap::replicate(), localmap::replicate()});
///
/// Errors throw localmap::error (status() and what() = lm_last_error_message()). Destructors never
/// throw and never communicate (the C destroys are local).
#ifndef LOCALMAP_HPP_
#define LOCALMAP_HPP_

#include <array>
#include <cstdint>
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
// A binding-side refusal: the C call would read past the end of a vector (or cut it), so the
// wrapper throws before calling it, with the status and message layout of the C errors.
[[noreturn]] inline void invalid(const std::string &message) {
  throw error(LM_ERR_INVALID_ARGUMENT,
              std::string(lm_status_string(LM_ERR_INVALID_ARGUMENT)) + ": " + message);
}
inline int mesh_ndim(lm_mesh_t m) {
  int n = 0;
  check(lm_mesh_ndim(m, &n));
  return n;
}
inline int tensor_mesh_ndim(lm_dist_tensor_t t) {
  lm_mesh_t m = nullptr;
  check(lm_dist_tensor_mesh(t, &m));
  return mesh_ndim(m);
}
// The C API reads one placement per mesh dim.
inline void check_count(size_t n, int ndim, const char *what) {
  if (n != static_cast<size_t>(ndim))
    invalid(std::string(what) + ": " + std::to_string(n) + " placements for a mesh of " +
            std::to_string(ndim) + " dims (one per mesh dim)");
}
// The C API reads one perm entry per tensor dim.
inline void check_perm(size_t n, int ndim, const char *what) {
  if (n != static_cast<size_t>(ndim))
    invalid(std::string(what) + ": " + std::to_string(n) + " entries for a tensor of " +
            std::to_string(ndim) + " dims");
}
}  // namespace detail

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
  environment(int &argc, char **&argv) : active_(!mpi_running()) {
    check(lm_init(&argc, &argv));
    query();
  }
  /// lm_init(NULL, NULL).
  environment() : active_(!mpi_running()) {
    check(lm_init(nullptr, nullptr));
    query();
  }
  /// lm_finalize when this environment started MPI (errors ignored: a destructor does not
  /// throw).
  ~environment() {
    if (active_) ignore(lm_finalize());
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
    if (!active_) return;
    active_ = false;
    check(lm_finalize());
  }

 private:
  // Whether MPI is initialised (and not finalised) already: lm_world_rank answers only then.
  static bool mpi_running() noexcept {
    int r = 0, n = 0;
    return lm_world_rank(&r, &n) == LM_SUCCESS;
  }
  void query() {
    try {
      check(lm_world_rank(&rank_, &size_));
      check(lm_comm_world(&comm_));
    } catch (...) {
      if (active_) ignore(lm_finalize());
      throw;
    }
  }
  static void ignore(lm_status_t) noexcept {}  // (a (void) cast does not silence nodiscard)
  bool active_;
  int rank_ = 0, size_ = 1, comm_ = 0;
};

/// Shard(dim), with a co-shard order (see lm_placement_t).
inline lm_placement_t shard(int dim, int order = 0) {
  lm_placement_t p = LM_PLACEMENT_SHARD(dim);
  p.order = order;
  return p;
}
/// Replicate.
inline lm_placement_t replicate() { return LM_PLACEMENT_REPLICATE; }
/// Partial(op).
inline lm_placement_t partial(lm_reduce_op_t op = LM_REDUCE_SUM) {
  return LM_PLACEMENT_PARTIAL(op);
}
/// One placement per mesh dim.
using placements = std::vector<lm_placement_t>;
/// A shape, extents or coordinate.
using shape = std::vector<int64_t>;

/// The extents of a ragged shard (lm_extents_create), released when destroyed (move-only).
/// Tensors and plans made from placements naming it keep their own copy.
class extents {
 public:
  /// Registers `lengths` (one per coordinate of the mesh dim that uses them).
  explicit extents(const shape &lengths) {
    check(lm_extents_create(&id_, lengths.data(), static_cast<int64_t>(lengths.size())));
  }
  /// Takes over another object's reference.
  extents(extents &&o) noexcept : id_(o.id_) { o.id_ = 0; }
  /// Releases this reference and takes over another's.
  extents &operator=(extents &&o) noexcept {
    if (this != &o) {
      release();
      id_ = o.id_;
      o.id_ = 0;
    }
    return *this;
  }
  extents(const extents &) = delete;
  extents &operator=(const extents &) = delete;
  /// Releases the reference (lm_extents_destroy).
  ~extents() { release(); }
  /// The id lm_placement_t::extents carries.
  int32_t id() const noexcept { return id_; }
  /// The lengths of any live extents id (e.g. from dist_tensor::placement()).
  static shape lengths(int32_t id) {
    int64_t n = 0;
    check(lm_extents_get(id, nullptr, 0, &n));
    shape v(static_cast<size_t>(n));
    check(lm_extents_get(id, v.data(), n, &n));
    return v;
  }

 private:
  void release() noexcept {
    if (id_) (void)!lm_extents_destroy(id_);
    id_ = 0;
  }
  int32_t id_ = 0;
};

/// RaggedShard(dim) with the given extents (see lm_placement_t), with a co-shard order.
inline lm_placement_t ragged(int dim, const extents &e, int order = 0) {
  lm_placement_t p = LM_PLACEMENT_RAGGED(dim, e.id());
  p.order = order;
  return p;
}

/// RaggedShard(dim) whose extents the ranks' local shapes give (LM_EXTENTS_AGREED): for
/// dist_tensor::from_local with LM_SHAPE_ALLGATHER and local_map outputs without a given shape.
inline lm_placement_t ragged_agreed(int dim, int order = 0) {
  lm_placement_t p = LM_PLACEMENT_RAGGED(dim, LM_EXTENTS_AGREED);
  p.order = order;
  return p;
}

/// BlockCyclic(dim, block, src): blocks of `block` elements of tensor dim `dim` dealt round-robin
/// over the mesh dim from coordinate `src` (ScaLAPACK's MB/NB and RSRC/CSRC; see lm_placement_t).
inline lm_placement_t block_cyclic(int dim, int block, int src = 0) {
  return LM_PLACEMENT_BLOCK_CYCLIC(dim, block, src);
}

/// The placements of a gradient (lm_placements_adjoint): Partial(sum) -> Replicate, the others
/// kept; Partial(avg/max/min/prod) throws.
inline placements placements_adjoint(const placements &p) {
  placements out(p.size());
  check(lm_placements_adjoint(p.data(), static_cast<int>(p.size()), out.data()));
  return out;
}

/// The placements as text, e.g. "[S(0), R, P(sum)]" (lm_placements_format).
inline std::string to_string(const placements &p) {
  char buf[512];
  check(lm_placements_format(p.data(), static_cast<int>(p.size()), buf, sizeof buf));
  return buf;
}

// ----------------------------------------------------------------------------------- mesh
/// A mesh (lm_mesh_t). Move-only: the mesh handle is owned here (tensors and plans keep their own
/// reference).
class mesh {
 public:
  mesh() = default;
  /// lm_mesh_create: collective over the parent (a Fortran handle: MPI_Comm_c2f(comm)); ranks and
  /// names fill lm_mesh_config_t when not empty.
  mesh(int parent_comm_f, const shape &extents, const std::vector<int> &ranks = {},
       const std::vector<std::string> &names = {}) {
    if (!names.empty() && names.size() != extents.size())
      detail::invalid("localmap::mesh: " + std::to_string(names.size()) + " names for " +
                      std::to_string(extents.size()) + " mesh dims");
    lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
    std::vector<const char *> cnames;
    for (auto &n : names) cnames.push_back(n.c_str());
    if (!ranks.empty()) {
      cfg.ranks = ranks.data();
      cfg.nranks = static_cast<int>(ranks.size());
    }
    if (!names.empty()) cfg.dim_names = cnames.data();
    check(lm_mesh_create(&h_, parent_comm_f, static_cast<int>(extents.size()), extents.data(),
                         &cfg));
  }
  /// lm_mesh_create_grid: the 2-D mesh of a process grid (BLACS's, say) from this rank's grid
  /// coordinate (-1, -1 outside the grid). Collective over the parent.
  static mesh grid(int parent_comm_f, int myrow, int mycol) {
    mesh m;
    check(lm_mesh_create_grid(&m.h_, parent_comm_f, myrow, mycol, nullptr));
    return m;
  }
  /// A mesh over MPI_COMM_WORLD (collective over it).
  static mesh world(const shape &extents, const std::vector<std::string> &names = {}) {
    int f = 0;
    check(lm_comm_world(&f));
    return mesh(f, extents, {}, names);
  }
  ~mesh() { lm_mesh_destroy(&h_); }
  /// Takes o's handle; o becomes empty.
  mesh(mesh &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Destroys this handle and takes o's; o becomes empty.
  mesh &operator=(mesh &&o) noexcept {
    if (this != &o) {
      lm_mesh_destroy(&h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  mesh(const mesh &) = delete;
  mesh &operator=(const mesh &) = delete;

  /// The C handle (still owned here).
  lm_mesh_t get() const noexcept { return h_; }
  /// Whether this holds a mesh.
  explicit operator bool() const noexcept { return h_ != nullptr; }
  /// lm_mesh_ndim.
  int ndim() const {
    int n = 0;
    check(lm_mesh_ndim(h_, &n));
    return n;
  }
  /// lm_mesh_shape.
  shape extents() const {
    shape s(static_cast<size_t>(ndim()));
    check(lm_mesh_shape(h_, s.data(), static_cast<int>(s.size())));
    return s;
  }
  /// lm_mesh_size.
  int size() const {
    int n = 0;
    check(lm_mesh_size(h_, &n));
    return n;
  }
  /// lm_mesh_is_member.
  bool is_member() const {
    int m = 0;
    check(lm_mesh_is_member(h_, &m));
    return m != 0;
  }
  /// lm_mesh_coord (throws on a non-member).
  shape coord() const {
    shape c(static_cast<size_t>(ndim()));
    check(lm_mesh_coord(h_, c.data(), static_cast<int>(c.size())));
    return c;
  }
  /// lm_mesh_rank (throws on a non-member).
  int rank() const {
    int r = 0;
    check(lm_mesh_rank(h_, &r));
    return r;
  }
  /// lm_mesh_dim_index: the index of the dim called name.
  int dim(const std::string &name) const {
    int d = 0;
    check(lm_mesh_dim_index(h_, name.c_str(), &d));
    return d;
  }
  /// lm_mesh_dim_comm: the per-dim communicator as a Fortran handle (MPI_Comm_f2c to use it from
  /// C/C++).
  int dim_comm(int d) const {
    int f = 0;
    check(lm_mesh_dim_comm(h_, d, &f));
    return f;
  }

 private:
  lm_mesh_t h_ = nullptr;
};

// ---------------------------------------------------------------------------- dist_tensor
/// A dist tensor (lm_dist_tensor_t): a shared reference (copies retain, destruction releases), like
/// the C handle's refcount.
class dist_tensor {
 public:
  dist_tensor() = default;
  /// Adopts a handle the caller owns (one reference).
  explicit dist_tensor(lm_dist_tensor_t h) noexcept : h_(h) {}
  ~dist_tensor() { lm_dist_tensor_destroy(&h_); }
  /// Another reference to o's tensor (lm_dist_tensor_retain).
  dist_tensor(const dist_tensor &o) : h_(o.h_) {
    if (h_) check(lm_dist_tensor_retain(h_));
  }
  /// Drops this reference and takes another to o's tensor.
  dist_tensor &operator=(const dist_tensor &o) {
    if (this != &o) {
      if (o.h_) check(lm_dist_tensor_retain(o.h_));
      lm_dist_tensor_destroy(&h_);
      h_ = o.h_;
    }
    return *this;
  }
  /// Takes o's reference; o becomes empty.
  dist_tensor(dist_tensor &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Drops this reference and takes o's; o becomes empty.
  dist_tensor &operator=(dist_tensor &&o) noexcept {
    if (this != &o) {
      lm_dist_tensor_destroy(&h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }

  /// lm_dist_tensor_zeros (local).
  static dist_tensor zeros(const mesh &m, const shape &global, DLDataType dtype,
                           const placements &p, DLDevice device = DLDevice{kDLCPU, 0}) {
    detail::check_count(p.size(), m.ndim(), "localmap::dist_tensor::zeros: placements");
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_zeros(&h, m.get(), static_cast<int>(global.size()), global.data(), dtype,
                               device, p.data()));
    return dist_tensor(h);
  }
  /// lm_dist_tensor_from_global. root < 0: every rank passes the full tensor; root >= 0: only that
  /// mesh rank (others nullptr).
  static dist_tensor from_global(const mesh &m, const DLTensor *global, const placements &p,
                                 int root = -1) {
    detail::check_count(p.size(), m.ndim(), "localmap::dist_tensor::from_global: placements");
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_from_global(&h, m.get(), global, p.data(), root));
    return dist_tensor(h);
  }
  /// lm_dist_tensor_from_local; global is read only with LM_SHAPE_GIVEN.
  static dist_tensor from_local(const mesh &m, const DLTensor &local, const placements &p,
                                lm_shape_mode_t mode = LM_SHAPE_ALLGATHER,
                                const shape &global = {}, unsigned flags = LM_FROM_LOCAL_COPY) {
    detail::check_count(p.size(), m.ndim(), "localmap::dist_tensor::from_local: placements");
    if (mode == LM_SHAPE_GIVEN && !global.empty() && global.size() != static_cast<size_t>(local.ndim))
      detail::invalid("localmap::dist_tensor::from_local: global: " + std::to_string(global.size()) +
                      " extents for a local tensor of " + std::to_string(local.ndim) + " dims");
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_from_local(&h, m.get(), &local, p.data(), mode,
                                    global.empty() ? nullptr : global.data(), flags));
    return dist_tensor(h);
  }

  /// ScaLAPACK's descriptor (LM_SCALAPACK_DLEN ints).
  using scalapack_desc_t = std::array<int, LM_SCALAPACK_DLEN>;
  /// lm_dist_tensor_from_scalapack: the tensor [N, M] over the local array `data` of the matrix
  /// that `desc` describes (borrowed by default: `data` must outlive the tensor).
  static dist_tensor from_scalapack(const mesh &m, const scalapack_desc_t &desc, void *data,
                                    DLDataType dtype, DLDevice device = DLDevice{kDLCPU, 0},
                                    unsigned flags = LM_FROM_LOCAL_BORROW) {
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_from_scalapack(&h, m.get(), desc.data(), data, dtype, device, flags));
    return dist_tensor(h);
  }
  /// lm_dist_tensor_to_scalapack: this tensor's layout as a descriptor with context ctxt.
  scalapack_desc_t to_scalapack(int ctxt) const {
    scalapack_desc_t d{};
    check(lm_dist_tensor_to_scalapack(h_, ctxt, d.data()));
    return d;
  }

  /// lm_dist_tensor_reshard. Collective; dst_mesh nullptr: the same mesh.
  dist_tensor reshard(const placements &p, const mesh *dst_mesh = nullptr) const {
    detail::check_count(p.size(), dst_mesh ? dst_mesh->ndim() : detail::tensor_mesh_ndim(h_),
                        "localmap::dist_tensor::reshard: placements");
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_reshard(&h, h_, dst_mesh ? dst_mesh->get() : nullptr, p.data()));
    return dist_tensor(h);
  }
  /// lm_dist_tensor_transpose: the dims permuted (numpy.transpose's perm, ndim entries), laid out
  /// with p (in the result's dims). Collective; dst_mesh nullptr: the same mesh. Host or device.
  dist_tensor transpose(const std::vector<int> &perm, const placements &p,
                        const mesh *dst_mesh = nullptr) const {
    detail::check_count(p.size(), dst_mesh ? dst_mesh->ndim() : detail::tensor_mesh_ndim(h_),
                        "localmap::dist_tensor::transpose: placements");
    detail::check_perm(perm.size(), ndim(), "localmap::dist_tensor::transpose: perm");
    lm_dist_tensor_t h = nullptr;
    check(lm_dist_tensor_transpose(&h, h_, perm.data(), dst_mesh ? dst_mesh->get() : nullptr,
                                   p.data()));
    return dist_tensor(h);
  }
  /// lm_dist_tensor_transpose_into: the dims permuted into dst (global shape this one's permuted,
  /// the same dtype; its mesh and placements, its shard overwritten; a padded borrow keeps its
  /// padding). Collective over both meshes. dst on this tensor's device.
  void transpose_into(dist_tensor &dst, const std::vector<int> &perm) const {
    detail::check_perm(perm.size(), ndim(), "localmap::dist_tensor::transpose_into: perm");
    check(lm_dist_tensor_transpose_into(dst.get(), h_, perm.data()));
  }
  /// lm_dist_tensor_gather. Collective; dst may be nullptr on ranks other than root (root >= 0).
  void gather(DLTensor *dst, int root = -1) const { check(lm_dist_tensor_gather(h_, root, dst)); }

  /// The C handle (the reference stays here).
  lm_dist_tensor_t get() const noexcept { return h_; }
  /// Gives up the reference: the caller destroys the returned handle.
  lm_dist_tensor_t release() noexcept { return std::exchange(h_, nullptr); }
  /// Whether this holds a tensor.
  explicit operator bool() const noexcept { return h_ != nullptr; }

  /// lm_dist_tensor_ndim.
  int ndim() const {
    int n = 0;
    check(lm_dist_tensor_ndim(h_, &n));
    return n;
  }
  /// lm_dist_tensor_dtype.
  DLDataType dtype() const {
    DLDataType t{};
    check(lm_dist_tensor_dtype(h_, &t));
    return t;
  }
  /// lm_dist_tensor_global_shape.
  shape global_shape() const { return shape_of(lm_dist_tensor_global_shape); }
  /// lm_dist_tensor_local_shape.
  shape local_shape() const { return shape_of(lm_dist_tensor_local_shape); }
  /// lm_dist_tensor_local_offset.
  shape local_offset() const { return shape_of(lm_dist_tensor_local_offset); }
  /// lm_dist_tensor_placements: one per mesh dim.
  placements placement() const {
    lm_mesh_t m = nullptr;
    int n = 0;
    check(lm_dist_tensor_mesh(h_, &m));
    check(lm_mesh_ndim(m, &n));
    placements p(static_cast<size_t>(n));
    check(lm_dist_tensor_placements(h_, p.data(), n));
    return p;
  }
  /// lm_dist_tensor_local: a view of the local shard (valid while this tensor lives).
  DLTensor local() const {
    DLTensor v{};
    check(lm_dist_tensor_local(h_, &v));
    return v;
  }
  /// The local shard's data as T* (its first element: a padded borrow's rows are local().strides
  /// apart, not its extents).
  template <class T>
  T *local_data() const {
    return static_cast<T *>(local().data);
  }

 private:
  shape shape_of(lm_status_t (*f)(lm_dist_tensor_t, int64_t *, int)) const {
    shape s(static_cast<size_t>(ndim()));
    check(f(h_, s.data(), static_cast<int>(s.size())));
    return s;
  }
  lm_dist_tensor_t h_ = nullptr;
};

// --------------------------------------------------------------------------- reshard_plan
/// A persistent reshard plan (lm_reshard_plan_t). Move-only.
class reshard_plan {
 public:
  /// lm_reshard_plan_create (local); dst_mesh nullptr: src_mesh.
  reshard_plan(const mesh &src_mesh, const placements &src, const mesh *dst_mesh,
               const placements &dst, const shape &global, DLDataType dtype) {
    detail::check_count(src.size(), src_mesh.ndim(), "localmap::reshard_plan: src placements");
    detail::check_count(dst.size(), (dst_mesh ? *dst_mesh : src_mesh).ndim(),
                        "localmap::reshard_plan: dst placements");
    check(lm_reshard_plan_create(&h_, src_mesh.get(), src.data(),
                                 dst_mesh ? dst_mesh->get() : nullptr, dst.data(),
                                 static_cast<int>(global.size()), global.data(), dtype));
  }
  ~reshard_plan() { lm_reshard_plan_destroy(&h_); }
  /// Takes o's plan; o becomes empty.
  reshard_plan(reshard_plan &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Destroys this plan and takes o's; o becomes empty.
  reshard_plan &operator=(reshard_plan &&o) noexcept {
    if (this != &o) {
      lm_reshard_plan_destroy(&h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  reshard_plan(const reshard_plan &) = delete;
  reshard_plan &operator=(const reshard_plan &) = delete;
  /// Takes ownership of a C plan handle (e.g. from lm_reshard_plan_adjoint).
  explicit reshard_plan(lm_reshard_plan_t h) noexcept : h_(h) {}

  /// lm_reshard_plan_alloc_target (local).
  dist_tensor alloc_target(DLDevice device = DLDevice{kDLCPU, 0}) const {
    lm_dist_tensor_t h = nullptr;
    check(lm_reshard_plan_alloc_target(&h, h_, device));
    return dist_tensor(h);
  }
  /// lm_reshard_plan_execute (collective over both meshes).
  void execute(const dist_tensor &src, const dist_tensor &dst) const {
    check(lm_reshard_plan_execute(h_, src.get(), dst.get()));
  }
  /// The bytes this rank sends to other ranks per execution: info().bytes_sent
  /// (lm_reshard_plan_info, flags 0: local).
  int64_t bytes_sent() const {
    lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
    check(lm_reshard_plan_info(h_, 0, &i));
    return i.bytes_sent;
  }
  /// lm_reshard_plan_adjoint: the backward plan (gradients, target mesh -> source mesh).
  reshard_plan adjoint() const {
    lm_reshard_plan_t a = nullptr;
    check(lm_reshard_plan_adjoint(&a, h_));
    return reshard_plan(a);
  }
  /// lm_reshard_plan_info: this rank's counts (local), or every rank's summed (all_ranks:
  /// collective over both meshes).
  lm_reshard_plan_info_t info(bool all_ranks = false) const {
    lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
    check(lm_reshard_plan_info(h_, all_ranks ? LM_PLAN_INFO_ALL_RANKS : 0, &i));
    return i;
  }
  /// lm_reshard_plan_describe.
  std::string describe() const {
    char buf[2048];
    check(lm_reshard_plan_describe(h_, buf, sizeof buf));
    return buf;
  }
  /// The C handle (still owned here).
  lm_reshard_plan_t get() const noexcept { return h_; }

 private:
  lm_reshard_plan_t h_ = nullptr;
};

/// lm_reshard_estimate: what the reshard plan of these arguments would move, without building
/// it (local; all_ranks: summed over both meshes' ranks, collective). dst_mesh nullptr: src_mesh.
inline lm_reshard_plan_info_t reshard_estimate(const mesh &src_mesh, const placements &src,
                                               const placements &dst, const shape &global,
                                               DLDataType dtype, const mesh *dst_mesh = nullptr,
                                               bool all_ranks = false) {
  detail::check_count(src.size(), src_mesh.ndim(), "localmap::reshard_estimate: src placements");
  detail::check_count(dst.size(), (dst_mesh ? *dst_mesh : src_mesh).ndim(),
                      "localmap::reshard_estimate: dst placements");
  lm_reshard_plan_info_t i = LM_RESHARD_PLAN_INFO_INIT;
  check(lm_reshard_estimate(src_mesh.get(), src.data(), dst_mesh ? dst_mesh->get() : nullptr,
                            dst.data(), static_cast<int>(global.size()), global.data(), dtype,
                            all_ranks ? LM_PLAN_INFO_ALL_RANKS : 0, &i));
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
class reshard_group {
 public:
  /// lm_reshard_group_create (local); dst_mesh nullptr: src_mesh; bucket_bytes 0: the default.
  reshard_group(const mesh &src_mesh, const std::vector<reshard_entry> &entries,
                const mesh *dst_mesh = nullptr, size_t bucket_bytes = 0) {
    std::vector<lm_reshard_entry_t> e;
    e.reserve(entries.size());
    for (const reshard_entry &x : entries) {
      detail::check_count(x.src.size(), src_mesh.ndim(), "localmap::reshard_group: src placements");
      detail::check_count(x.dst.size(), (dst_mesh ? *dst_mesh : src_mesh).ndim(),
                          "localmap::reshard_group: dst placements");
      e.push_back(lm_reshard_entry_t{static_cast<int>(x.global.size()), x.global.data(), x.dtype,
                                     x.src.data(), x.dst.data()});
    }
    lm_reshard_group_config_t c = LM_RESHARD_GROUP_CONFIG_INIT;
    c.bucket_bytes = bucket_bytes;
    check(lm_reshard_group_create(&h_, src_mesh.get(), dst_mesh ? dst_mesh->get() : nullptr,
                                  static_cast<int>(e.size()), e.data(), &c));
  }
  ~reshard_group() { lm_reshard_group_destroy(&h_); }
  /// Takes o's group; o becomes empty.
  reshard_group(reshard_group &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Destroys this group and takes o's; o becomes empty.
  reshard_group &operator=(reshard_group &&o) noexcept {
    if (this != &o) {
      lm_reshard_group_destroy(&h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  reshard_group(const reshard_group &) = delete;
  reshard_group &operator=(const reshard_group &) = delete;

  /// The number of entries (lm_reshard_group_size).
  size_t size() const {
    int n = 0;
    check(lm_reshard_group_size(h_, &n, nullptr));
    return static_cast<size_t>(n);
  }
  /// The number of buckets of an execution (lm_reshard_group_size).
  int buckets() const {
    int b = 0;
    check(lm_reshard_group_size(h_, nullptr, &b));
    return b;
  }
  /// lm_reshard_group_alloc_targets (local).
  std::vector<dist_tensor> alloc_targets(DLDevice device = DLDevice{kDLCPU, 0}) const {
    std::vector<lm_dist_tensor_t> h(size(), nullptr);
    check(lm_reshard_group_alloc_targets(h.data(), h_, device, static_cast<int>(h.size())));
    std::vector<dist_tensor> out;
    out.reserve(h.size());
    for (lm_dist_tensor_t t : h) out.emplace_back(t);
    return out;
  }
  /// lm_reshard_group_execute (collective over both meshes).
  void execute(const std::vector<dist_tensor> &src, const std::vector<dist_tensor> &dst) const {
    std::vector<lm_dist_tensor_t> s = handles(src), d = handles(dst);
    if (s.size() != d.size())
      detail::invalid("localmap::reshard_group::execute: " + std::to_string(s.size()) +
                      " sources for " + std::to_string(d.size()) + " targets");
    check(lm_reshard_group_execute(h_, static_cast<int>(s.size()), s.data(), d.data()));
  }
  /// The C handle (still owned here).
  lm_reshard_group_t get() const noexcept { return h_; }

 private:
  static std::vector<lm_dist_tensor_t> handles(const std::vector<dist_tensor> &v) {
    std::vector<lm_dist_tensor_t> h;
    h.reserve(v.size());
    for (const dist_tensor &t : v) h.push_back(t.get());
    return h;
  }
  lm_reshard_group_t h_ = nullptr;
};

/// src[i] with dst[i]'s placements on dst_mesh (nullptr: theirs), as one grouped reshard
/// (collective): a group made from the tensors' entries (lm_reshard_group_create), its targets
/// allocated on src[0]'s device, executed and destroyed. On failure no tensor is left.
inline std::vector<dist_tensor> reshard_many(const std::vector<dist_tensor> &src,
                                             const std::vector<placements> &dst,
                                             const mesh *dst_mesh = nullptr) {
  if (src.size() != dst.size())
    detail::invalid("localmap::reshard_many: " + std::to_string(src.size()) + " tensors for " +
                    std::to_string(dst.size()) + " placement lists");
  if (src.empty()) return {};
  lm_mesh_t sm = nullptr;
  check(lm_dist_tensor_mesh(src[0].get(), &sm));
  const int ndim = dst_mesh ? dst_mesh->ndim() : detail::tensor_mesh_ndim(src[0].get());
  std::vector<lm_dist_tensor_t> s;
  std::vector<shape> shapes;
  std::vector<placements> from;
  std::vector<lm_reshard_entry_t> e;
  for (size_t i = 0; i < src.size(); ++i) {
    const std::string what = "localmap::reshard_many: src[" + std::to_string(i) + "]";
    lm_mesh_t m = nullptr;
    check(lm_dist_tensor_mesh(src[i].get(), &m));
    if (m != sm)
      detail::invalid(what + " lives on another mesh than src[0] (one call moves tensors of one "
                      "mesh)");
    detail::check_count(dst[i].size(), ndim,
                        ("localmap::reshard_many: dst[" + std::to_string(i) + "]").c_str());
    s.push_back(src[i].get());
    shapes.push_back(src[i].global_shape());
    from.push_back(src[i].placement());
  }
  for (size_t i = 0; i < src.size(); ++i)
    e.push_back(lm_reshard_entry_t{static_cast<int>(shapes[i].size()), shapes[i].data(),
                                   src[i].dtype(), from[i].data(), dst[i].data()});
  struct group_guard {
    lm_reshard_group_t g = nullptr;
    ~group_guard() { lm_reshard_group_destroy(&g); }
  } g;
  check(lm_reshard_group_create(&g.g, sm, dst_mesh ? dst_mesh->get() : nullptr,
                                static_cast<int>(e.size()), e.data(), nullptr));
  DLDevice dev{};
  check(lm_dist_tensor_device(src[0].get(), &dev));
  std::vector<lm_dist_tensor_t> out(src.size(), nullptr);
  check(lm_reshard_group_alloc_targets(out.data(), g.g, dev, static_cast<int>(out.size())));
  std::vector<dist_tensor> r;
  r.reserve(out.size());
  for (lm_dist_tensor_t t : out) r.emplace_back(t);  // owned here: dropped if execute throws
  check(lm_reshard_group_execute(g.g, static_cast<int>(s.size()), s.data(), out.data()));
  return r;
}

// ------------------------------------------------------------------------------ local_map
/// The function of localmap::local_map: fn(mesh, inputs, outputs). It may throw: the trampoline
/// turns the exception into LM_ERR_USER with its what() as the message, so nothing unwinds
/// through the C library.
using local_fn = std::function<void(lm_mesh_t, const std::vector<lm_arg_t> &,
                                    std::vector<lm_arg_t> &)>;

namespace detail {
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

/// An LM_ARG_DIST_TENSOR argument (borrows t).
inline lm_arg_t arg(const dist_tensor &t) {
  lm_arg_t a{};
  a.kind = LM_ARG_DIST_TENSOR;
  a.ptr = t.get();
  return a;
}
/// An LM_ARG_INT64 argument.
inline lm_arg_t arg_i64(int64_t v) {
  lm_arg_t a{};
  a.kind = LM_ARG_INT64;
  a.i64 = v;
  return a;
}
/// An LM_ARG_DOUBLE argument.
inline lm_arg_t arg_f64(double v) {
  lm_arg_t a{};
  a.kind = LM_ARG_DOUBLE;
  a.f64 = v;
  return a;
}

/** Calls a DLManagedTensor's deleter (once) when the owning pointer dies. */
struct managed_deleter {
  /** Runs m's deleter, if any. */
  void operator()(DLManagedTensor *m) const {
    if (m && m->deleter) m->deleter(m);
  }
};
/** An owned DLManagedTensor (e.g. a local_map output whose out placements were empty). */
using managed_tensor = std::unique_ptr<DLManagedTensor, managed_deleter>;

namespace detail {
// A view's element type as DLPack codes it.
template <class T>
struct dl_type;
template <>
struct dl_type<float> {
  static constexpr DLDataType value{kDLFloat, 32, 1};
};
template <>
struct dl_type<double> {
  static constexpr DLDataType value{kDLFloat, 64, 1};
};
template <>
struct dl_type<bool> {
  static constexpr DLDataType value{LM_DL_BOOL, 8, 1};
};
template <class T>
struct dl_int_type {
  static constexpr DLDataType value{
      static_cast<uint8_t>(std::is_signed<T>::value ? kDLInt : kDLUInt),
      static_cast<uint8_t>(8 * sizeof(T)), 1};
};
template <>
struct dl_type<int8_t> : dl_int_type<int8_t> {};
template <>
struct dl_type<int16_t> : dl_int_type<int16_t> {};
template <>
struct dl_type<int32_t> : dl_int_type<int32_t> {};
template <>
struct dl_type<int64_t> : dl_int_type<int64_t> {};
template <>
struct dl_type<uint8_t> : dl_int_type<uint8_t> {};
template <>
struct dl_type<uint16_t> : dl_int_type<uint16_t> {};
template <>
struct dl_type<uint32_t> : dl_int_type<uint32_t> {};
template <>
struct dl_type<uint64_t> : dl_int_type<uint64_t> {};

inline std::string dtype_name(DLDataType t) {
  const char *code = t.code == kDLInt       ? "int"
                     : t.code == kDLUInt    ? "uint"
                     : t.code == kDLFloat   ? "float"
                     : t.code == kDLBfloat  ? "bfloat"
                     : t.code == kDLComplex ? "complex"
                     : t.code == LM_DL_BOOL ? "bool"
                                            : "code?";
  return code + std::to_string(t.bits) + (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
}
// The DLTensor's element type must be T's (a view is never reinterpreted).
template <class T>
void check_dtype(const DLTensor &t, const char *what) {
  using U = std::remove_cv_t<T>;
  const DLDataType w = dl_type<U>::value;
  if (t.dtype.code != w.code || t.dtype.bits != w.bits || t.dtype.lanes != w.lanes)
    invalid(std::string("localmap::") + what + ": the tensor holds " + dtype_name(t.dtype) +
            ", not " + dtype_name(w));
}
// The element offset of index idx (ndim entries), checked, through the strides (compact
// row-major when strides is NULL).
inline int64_t element_offset(const DLTensor &t, const int64_t *idx, size_t n) {
  if (n != static_cast<size_t>(t.ndim))
    invalid("localmap::local_view::at: " + std::to_string(n) + " indices for a tensor of " +
            std::to_string(t.ndim) + " dims");
  int64_t off = 0, step = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (idx[d] < 0 || idx[d] >= t.shape[d])
      invalid("localmap::local_view::at: index " + std::to_string(idx[d]) + " of dim " +
              std::to_string(d) + " is out of range [0, " + std::to_string(t.shape[d]) + ")");
    off += idx[d] * (t.strides ? t.strides[d] : step);
    step *= t.shape[d];
  }
  return off;
}
inline void check_dim(const DLTensor &t, int d, const char *what) {
  if (d < 0 || d >= t.ndim)
    invalid(std::string("localmap::") + what + ": dim " + std::to_string(d) +
            " of a tensor of " + std::to_string(t.ndim) + " dims");
}
}  // namespace detail

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
  const void *data() const noexcept {
    return static_cast<const char *>(t_.data) + t_.byte_offset;
  }
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
                            DLDevice device = DLDevice{kDLCPU, 0}) {
    DLManagedTensor *m = nullptr;
    check(lm_tensor_alloc(&m, static_cast<int>(s.size()), s.empty() ? nullptr : s.data(), dtype,
                          device));
    return local_tensor(m);
  }
  /// A zero-filled host tensor of T (float, double, int8_t .. int64_t, uint8_t .. uint64_t,
  /// bool).
  template <class T>
  static local_tensor zeros(const localmap::shape &s) {
    return zeros(s, detail::dl_type<T>::value);
  }
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
    if (!m_) detail::invalid("localmap::local_tensor: empty (moved from?)");
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
  T *data() {
    return const_cast<T *>(view().data<T>());
  }
  /// The first element as const T*.
  template <class T>
  const T *data() const {
    return view().data<T>();
  }
  /// Element (idx...), writable (bounds- and dtype-checked).
  template <class T, class... I>
  T &at(I... idx) {
    return const_cast<T &>(view().at<T>(idx...));
  }
  /// Element (idx...).
  template <class T, class... I>
  const T &at(I... idx) const {
    return view().at<T>(idx...);
  }
  /// The DLManagedTensor, still owned here.
  DLManagedTensor *get() const noexcept { return m_.get(); }
  /// Gives up ownership: the caller runs the deleter once.
  DLManagedTensor *release() noexcept { return m_.release(); }

 private:
  managed_tensor m_;
};

/// The record of a local_map call (lm_local_map_record_t, owned): what its backward pass needs.
class local_map_record {
 public:
  local_map_record() = default;
  /// Adopts a record handle.
  explicit local_map_record(lm_local_map_record_t h) : h_(h) {}
  ~local_map_record() { lm_local_map_record_destroy(&h_); }
  /// Takes o's record; o becomes empty.
  local_map_record(local_map_record &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  /// Destroys this record and takes o's; o becomes empty.
  local_map_record &operator=(local_map_record &&o) noexcept {
    if (this != &o) {
      lm_local_map_record_destroy(&h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  local_map_record(const local_map_record &) = delete;
  local_map_record &operator=(const local_map_record &) = delete;
  /// Whether this holds a record.
  explicit operator bool() const { return h_ != nullptr; }
  /// The handle (still owned here).
  lm_local_map_record_t get() const { return h_; }
  /// lm_local_map_record_placements: which is an lm_record_which_t (LM_RECORD_IN_GRAD...).
  placements get_placements(int which, int index) const {
    int n = 0;
    lm_status_t st = lm_local_map_record_placements(h_, which, index, 0, nullptr, &n);
    if (st != LM_SUCCESS && n <= 0) check(st);
    placements p(static_cast<size_t>(n));
    check(lm_local_map_record_placements(h_, which, index, n, p.data(), &n));
    return p;
  }
  /// lm_local_map_record_input_grad: grad moved to inputs[index]'s own layout (collective).
  dist_tensor input_grad(int index, const dist_tensor &grad) const {
    lm_dist_tensor_t out = nullptr;
    check(lm_local_map_record_input_grad(&out, h_, index, grad.get()));
    return dist_tensor(out);
  }

 private:
  lm_local_map_record_t h_ = nullptr;
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
      detail::invalid("localmap::local_map_result: output " + std::to_string(j) + " of " +
                      std::to_string(args.size()));
    return args[j].kind;
  }
  [[noreturn]] static void wrong(size_t j, const char *what) {
    detail::invalid("localmap::local_map_result: output " + std::to_string(j) + " is not " + what);
  }
};

namespace detail {
// One placements table as the C call reads it (empty vector: empty table, empty entry: NULL),
// each entry checked against the call's mesh ndim (when known).
inline std::vector<const lm_placement_t *> placement_table(const std::vector<placements> &t,
                                                           int ndim, const char *name) {
  std::vector<const lm_placement_t *> r;
  for (size_t i = 0; i < t.size(); ++i) {
    if (ndim >= 0 && !t[i].empty())
      check_count(t[i].size(), ndim,
                  ("localmap::local_map: " + std::string(name) + "[" + std::to_string(i) + "]").c_str());
    r.push_back(t[i].empty() ? nullptr : t[i].data());
  }
  return r;
}
// The call's mesh ndim: m's, else the first dist input's; -1 for a local call.
inline int local_map_ndim(const std::vector<lm_arg_t> &inputs, const mesh *m) {
  if (m) return m->ndim();
  for (const lm_arg_t &a : inputs)
    if (a.kind == LM_ARG_DIST_TENSOR)
      return tensor_mesh_ndim(static_cast<lm_dist_tensor_t>(a.ptr));
  return -1;
}
}  // namespace detail

/// lm_local_map_ex: local_map with gradient placements for the inputs (one entry per input or
/// none; an empty entry: the placements fn saw) and, when want_record, the call's record in
/// result.record for a hand-written backward pass.
inline local_map_result local_map_ex(local_fn fn, const std::vector<lm_arg_t> &inputs,
                                     const std::vector<placements> &out_placements,
                                     const std::vector<placements> &in_placements,
                                     const std::vector<placements> &in_grad_placements,
                                     bool want_record, const mesh *m = nullptr,
                                     unsigned flags = 0) {
  for (const auto *t : {&in_placements, &in_grad_placements})
    if (!t->empty() && t->size() != inputs.size())
      detail::invalid(std::string("localmap::local_map: ") +
                      (t == &in_placements ? "in_placements: " : "in_grad_placements: ") +
                      std::to_string(t->size()) + " entries for " +
                      std::to_string(inputs.size()) + " inputs");
  const int ndim = detail::local_map_ndim(inputs, m);
  auto inp = detail::placement_table(in_placements, ndim, "in_placements");
  auto gradp = detail::placement_table(in_grad_placements, ndim, "in_grad_placements");
  auto outp = detail::placement_table(out_placements, ndim, "out_placements");
  local_map_result r;
  r.args.resize(out_placements.size());
  lm_local_map_record_t rec = nullptr;
  lm_local_map_options_t opt = LM_LOCAL_MAP_OPTIONS_INIT;
  opt.in_grad_placements = in_grad_placements.empty() ? nullptr : gradp.data();
  opt.record = want_record ? &rec : nullptr;
  check(lm_local_map_ex(detail::localmap_hpp_local_map_trampoline, &fn,
                        static_cast<int>(inputs.size()), inputs.data(),
                        in_placements.empty() ? nullptr : inp.data(),
                        static_cast<int>(r.args.size()), outp.data(), nullptr,
                        m ? m->get() : nullptr, flags, &opt, r.args.data()));
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
  local_output(local_tensor &&t) : arg_(lm_arg_none()), t_(std::move(t)) {  // NOLINT
    arg_.kind = LM_ARG_MANAGED_TENSOR;
  }
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
// What a typed fn's signature is: its return type and parameters.
template <class Sig>
struct fn_traits;
template <class R, class... A>
struct fn_traits<R(A...)> {
  using result = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class R, class... A>
struct fn_traits<R (*)(A...)> : fn_traits<R(A...)> {};
template <class R, class... A>
struct fn_traits<R (*)(A...) noexcept> : fn_traits<R(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_traits<R(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_traits<R(A...)> {};
template <class F, class = void>
struct callable_traits : fn_traits<std::decay_t<F>> {};
template <class F>
struct callable_traits<F, std::void_t<decltype(&std::decay_t<F>::operator())>>
    : fn_traits<decltype(&std::decay_t<F>::operator())> {};

// Whether fn's parameters start with the mesh (lm_mesh_t).
template <class Args>
struct takes_mesh : std::false_type {};
template <class... A>
struct takes_mesh<std::tuple<lm_mesh_t, A...>> : std::true_type {};

// What parameter type P accepts: 1 a view, 2 an integer, 3 a floating-point value, 0 nothing.
template <class P>
constexpr int param_kind() {
  if (std::is_same<P, local_view>::value) return 1;
  if (std::is_integral<P>::value && !std::is_same<P, bool>::value) return 2;
  if (std::is_floating_point<P>::value) return 3;
  return 0;
}
template <class P>
bool accepts(const lm_arg_t &a) {
  switch (param_kind<P>()) {
    case 1: return a.kind == LM_ARG_DIST_TENSOR || a.kind == LM_ARG_TENSOR;
    case 2: return a.kind == LM_ARG_INT64;
    case 3: return a.kind == LM_ARG_INT64 || a.kind == LM_ARG_DOUBLE;
    default: return false;
  }
}
inline const char *param_name(int kind) {
  return kind == 1 ? "a localmap::local_view" : kind == 2 ? "an integer" : "a floating-point value";
}
inline const char *arg_name(int32_t kind) {
  switch (kind) {
    case LM_ARG_DIST_TENSOR: return "a dist tensor";
    case LM_ARG_TENSOR: return "a local tensor";
    case LM_ARG_INT64: return "an integer";
    case LM_ARG_DOUBLE: return "a double";
    default: return "an argument of another kind";
  }
}
// fn's parameter for one input, as fn sees it inside the call.
template <class P>
P param(const lm_arg_t &a) {
  if constexpr (param_kind<P>() == 1)
    return local_view(*static_cast<const DLTensor *>(a.ptr));
  else if constexpr (param_kind<P>() == 2)
    return static_cast<P>(a.i64);
  else
    return a.kind == LM_ARG_INT64 ? static_cast<P>(a.i64) : static_cast<P>(a.f64);
}
// Refuses, before the call and alike on every rank, inputs that fn's parameters do not take.
template <class Args, size_t Skip, size_t... I>
void check_params(const std::vector<input> &in, std::index_sequence<I...>) {
  constexpr size_t n = sizeof...(I);
  static_assert(((param_kind<std::tuple_element_t<Skip + I, Args>>() != 0) && ...),
                "a typed local_map function takes localmap::local_view, integer or floating-point "
                "parameters (after an optional first lm_mesh_t)");
  if (in.size() != n)
    invalid("localmap::local_map: fn takes " + std::to_string(n) + " inputs, " +
            std::to_string(in.size()) + " given");
  const bool ok[n + 1] = {accepts<std::tuple_element_t<Skip + I, Args>>(in[I].c_arg())..., true};
  const int kinds[n + 1] = {param_kind<std::tuple_element_t<Skip + I, Args>>()..., 0};
  for (size_t i = 0; i < n; ++i)
    if (!ok[i])
      invalid("localmap::local_map: inputs[" + std::to_string(i) + "] is " +
              arg_name(in[i].c_arg().kind) + ", but fn's parameter for it takes " +
              param_name(kinds[i]));
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
// fn's result as a list of outputs.
template <class T>
struct is_tuple_like : std::false_type {};
template <class... T>
struct is_tuple_like<std::tuple<T...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <class R>
std::vector<local_output> collect(R &&r) {
  using D = std::decay_t<R>;
  std::vector<local_output> out;
  if constexpr (std::is_same<D, std::vector<local_output>>::value) {
    out = std::move(r);
  } else if constexpr (is_tuple_like<D>::value) {
    std::apply([&out](auto &&...x) { (out.emplace_back(std::move(x)), ...); }, std::move(r));
  } else {
    out.emplace_back(std::move(r));
  }
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
  using traits = detail::callable_traits<F>;
  using Args = typename traits::args;
  constexpr size_t skip = detail::takes_mesh<Args>::value ? 1 : 0;
  using Seq = std::make_index_sequence<std::tuple_size<Args>::value - skip>;
  detail::check_params<Args, skip>(inputs, Seq{});
  constexpr long nres = detail::static_outputs<typename traits::result>();
  if (nres >= 0 && static_cast<size_t>(nres) != out_placements.size())
    detail::invalid("localmap::local_map: fn returns " + std::to_string(nres) + " outputs, " +
                    std::to_string(out_placements.size()) + " out_placements given");
  std::vector<lm_arg_t> args;
  std::vector<placements> in_p, grad_p;
  bool any_in = false, any_grad = false;
  for (const input &i : inputs) {
    args.push_back(i.c_arg());
    in_p.push_back(i.in_placements());
    grad_p.push_back(i.in_grad_placements());
    any_in |= !i.in_placements().empty();
    any_grad |= !i.in_grad_placements().empty();
  }
  auto &f = fn;
  local_fn call = [&f](lm_mesh_t m, const std::vector<lm_arg_t> &in, std::vector<lm_arg_t> &out) {
    std::vector<local_output> res;
    if constexpr (std::is_void<typename traits::result>::value)
      detail::invoke_typed<Args, skip>(f, m, in, Seq{});
    else
      res = detail::collect(detail::invoke_typed<Args, skip>(f, m, in, Seq{}));
    if (res.size() != out.size())
      detail::invalid("localmap::local_map: fn returned " + std::to_string(res.size()) +
                      " outputs for " + std::to_string(out.size()) + " out_placements");
    for (size_t j = 0; j < res.size(); ++j) out[j] = res[j].release();
  };
  return local_map_ex(std::move(call), args, out_placements, any_in ? in_p : std::vector<placements>{},
                      any_grad ? grad_p : std::vector<placements>{}, options.record, options.mesh,
                      options.flags);
}

}  // namespace localmap

#endif  // LOCALMAP_HPP_
