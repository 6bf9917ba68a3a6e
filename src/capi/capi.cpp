// SPDX-License-Identifier: BSD-3-Clause
// The C ABI: a thin extern "C" layer. Every entry point runs its body inside LM_API_GUARD, which
// turns exceptions into a status code and the thread-local message; nothing unwinds across it.
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

#include "common/dtype.hpp"
#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mesh/device.hpp"
#include "localmap/local_map.hpp"
#include "localmap/record.hpp"
#include "tensor/group.hpp"
#include "tensor/persistent.hpp"
#include "mem/pool.hpp"
#include "tensor/ops.hpp"

namespace {

// Every message says which rank it comes from: " (rank N)" unless it already names this rank as
// "rank N" followed by a delimiter (messages about other ranks get the suffix too).
lm_status_t report(lm_status_t st, const std::string &msg) {
  const int r = lm::world_rank_or_minus1();
  bool named = false;
  if (r >= 0) {
    const std::string me = lm::strfmt("rank %d", r);
    for (size_t at = msg.find(me); at != std::string::npos && !named; at = msg.find(me, at + 1)) {
      const size_t end = at + me.size();
      const bool word_start = at == 0 || msg[at - 1] == ' ' || msg[at - 1] == '(';
      named = word_start && (end == msg.size() || !std::isdigit((unsigned char)msg[end]));
    }
  }
  lm::set_last_error(named || r < 0 ? msg : msg + lm::strfmt(" (rank %d)", r));
  return st;
}

template <class F>
lm_status_t guard(F &&f) noexcept {
  try {
    f();
    return LM_SUCCESS;
  } catch (const lm::Error &e) {
    return report(e.status(), e.message());
  } catch (const std::bad_alloc &) {
    return report(LM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return report(LM_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return report(LM_ERR_INTERNAL, "internal error: unknown exception");
  }
}

#define OUT_ARG(p, name, fn) LM_CHECK_ARG((p) != nullptr, "%s: %s is NULL", fn, name)

bool g_we_initialised = false;

}  // namespace

using namespace lm;

extern "C" {

LM_API int lm_get_version(void) { return LM_VERSION_CODE; }

LM_API const char *lm_status_string(lm_status_t status) {
  switch (enum_bits(status)) {
    case LM_SUCCESS: return "LM_SUCCESS: success";
    case LM_ERR_INVALID_ARGUMENT: return "LM_ERR_INVALID_ARGUMENT: invalid argument";
    case LM_ERR_INVALID_USAGE: return "LM_ERR_INVALID_USAGE: invalid usage";
    case LM_ERR_OUT_OF_MEMORY: return "LM_ERR_OUT_OF_MEMORY: out of memory";
    case LM_ERR_NOT_SUPPORTED: return "LM_ERR_NOT_SUPPORTED: not supported";
    case LM_ERR_MISMATCH: return "LM_ERR_MISMATCH: ranks disagree on the arguments";
    case LM_ERR_MPI: return "LM_ERR_MPI: MPI error";
    case LM_ERR_NCCL: return "LM_ERR_NCCL: NCCL error";
    case LM_ERR_CUDA: return "LM_ERR_CUDA: CUDA error";
    case LM_ERR_REMOTE: return "LM_ERR_REMOTE: another rank failed";
    case LM_ERR_INTERNAL: return "LM_ERR_INTERNAL: internal error";
    case LM_ERR_USER: return "LM_ERR_USER: user callback failed";
    case LM_ERR_TIMEOUT: return "LM_ERR_TIMEOUT: other ranks did not arrive in time";
  }
  return "LM_ERR_UNKNOWN: unknown status code";
}

LM_API const char *lm_last_error_message(void) { return last_error(); }

LM_API void lm_set_error_message(const char *message) { set_user_message(message); }

LM_API lm_status_t lm_init(int *argc, char ***argv) {
  return guard([&] {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) fail(LM_ERR_INVALID_USAGE, "lm_init: MPI was already finalized");
    if (init) return;
    int provided = 0;
    mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "lm_init: MPI_Init_thread");
    g_we_initialised = true;
  });
}

LM_API lm_status_t lm_finalize(void) {
  return guard([&] {
    int fin = 0;
    MPI_Finalized(&fin);
    if (g_we_initialised && !fin) mpi_check(MPI_Finalize(), "lm_finalize: MPI_Finalize");
    g_we_initialised = false;
  });
}

LM_API lm_status_t lm_comm_world(int *comm_f) {
  return guard([&] {
    OUT_ARG(comm_f, "comm_f", "lm_comm_world");
    int init = 0;
    MPI_Initialized(&init);
    if (!init) fail(LM_ERR_INVALID_USAGE, "lm_comm_world: MPI is not initialised (call lm_init)");
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) fail(LM_ERR_INVALID_USAGE, "lm_comm_world: MPI was already finalized");
    *comm_f = (int)MPI_Comm_c2f(MPI_COMM_WORLD);
  });
}

LM_API lm_status_t lm_world_rank(int *rank, int *size) {
  return guard([&] {
    OUT_ARG(rank, "rank", "lm_world_rank");
    OUT_ARG(size, "size", "lm_world_rank");
    int init = 0;
    MPI_Initialized(&init);
    if (!init) fail(LM_ERR_INVALID_USAGE, "lm_world_rank: MPI is not initialised (call lm_init)");
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) fail(LM_ERR_INVALID_USAGE, "lm_world_rank: MPI was already finalized");
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
  });
}

LM_API lm_status_t lm_device_supported(DLDeviceType device_type, int *supported) {
  return guard([&] {
    OUT_ARG(supported, "supported", "lm_device_supported");
    const int t = enum_bits(device_type);
    *supported = t == kDLCPU || (t == kDLCUDA && cuda_device_count() > 0);
  });
}

LM_API lm_status_t lm_placements_format(const lm_placement_t *placements, int n, char *buf,
                                        size_t size) {
  return guard([&] {
    const char *fn = "lm_placements_format";
    LM_CHECK_ARG(n >= 0 && n <= kMaxDims, "%s: n = %d must be in [0, %d]", fn, n, kMaxDims);
    LM_CHECK_ARG(placements || n == 0, "%s: placements is NULL", fn);
    LM_CHECK_ARG(buf || size == 0, "%s: buf is NULL", fn);
    std::string s = format_placements(placements, n);
    if (size) {
      size_t k = std::min(size - 1, s.size());
      std::memcpy(buf, s.data(), k);
      buf[k] = 0;
    }
  });
}

LM_API lm_status_t lm_placements_adjoint(const lm_placement_t *placements, int n,
                                         lm_placement_t *out) {
  return guard([&] {
    const char *fn = "lm_placements_adjoint";
    LM_CHECK_ARG(n >= 0 && n <= kMaxDims, "%s: n = %d must be in [0, %d]", fn, n, kMaxDims);
    LM_CHECK_ARG(placements || n == 0, "%s: placements is NULL", fn);
    LM_CHECK_ARG(out || n == 0, "%s: out is NULL", fn);
    std::vector<lm_placement_t> a = placements_adjoint(placements, n, strfmt("%s: placements", fn).c_str());
    if (n) std::memcpy(out, a.data(), sizeof(lm_placement_t) * (size_t)n);
  });
}

LM_API lm_status_t lm_padded_extents(const DLTensor *view, int64_t *extents, int n) {
  return guard([&] {
    const char *fn = "lm_padded_extents";
    LM_CHECK_ARG(view != nullptr, "%s: view is NULL", fn);
    LM_CHECK_ARG(view->ndim >= 0 && view->ndim <= kMaxDims, "%s: view->ndim = %d (0 .. %d)", fn,
                 view->ndim, kMaxDims);
    LM_CHECK_ARG(view->ndim == 0 || view->shape != nullptr, "%s: view->shape is NULL", fn);
    LM_CHECK_ARG(n == view->ndim, "%s: n = %d, view->ndim = %d (they must be equal)", fn, n,
                 view->ndim);
    LM_CHECK_ARG(n == 0 || extents != nullptr, "%s: extents is NULL", fn);
    for (int i = 0; i < n; ++i)
      LM_CHECK_ARG(view->shape[i] >= 0, "%s: view->shape[%d] = %lld is negative", fn, i,
                   (long long)view->shape[i]);
    Shape pad;
    LM_CHECK_ARG(padded_extents(view, &pad), "%s: view's strides are neither compact nor padded "
                 "(each a multiple of the next, the innermost 1)", fn);
    for (int i = 0; i < n; ++i) extents[i] = pad[(size_t)i];
  });
}

LM_API lm_status_t lm_layout_chunk(int64_t n, int64_t parts, int64_t index, int64_t *offset,
                                   int64_t *length) {
  return guard([&] {
    const char *fn = "lm_layout_chunk";
    LM_CHECK_ARG(n >= 0, "%s: n = %lld must be >= 0", fn, (long long)n);
    LM_CHECK_ARG(parts >= 1, "%s: parts = %lld must be >= 1", fn, (long long)parts);
    LM_CHECK_ARG(index >= 0 && index < parts, "%s: index = %lld must be in [0, parts)", fn,
                 (long long)index);
    OUT_ARG(offset, "offset", fn);
    OUT_ARG(length, "length", fn);
    Range r = chunk(n, parts, index);
    *offset = r.off;
    *length = r.len;
  });
}

LM_API lm_status_t lm_extents_create(int32_t *id, const int64_t *extents, int64_t count) {
  return guard([&] {
    const char *fn = "lm_extents_create";
    OUT_ARG(id, "id", fn);
    *id = 0;
    *id = extents_register(extents, count, fn);
  });
}

LM_API lm_status_t lm_extents_get(int32_t id, int64_t *extents, int64_t capacity,
                                  int64_t *count) {
  return guard([&] {
    const char *fn = "lm_extents_get";
    OUT_ARG(count, "count", fn);
    auto r = extents_find(id);
    LM_CHECK_ARG(r != nullptr, "%s: id %d is not a registered extents id", fn, id);
    if (extents) {
      LM_CHECK_ARG(capacity >= r->count(), "%s: capacity %lld is below the count %lld", fn,
                   (long long)capacity, (long long)r->count());
      for (int64_t i = 0; i < r->count(); ++i) extents[i] = r->len(i);
    }
    *count = r->count();
  });
}

LM_API lm_status_t lm_extents_destroy(int32_t id) {
  return guard([&] {
    if (id == 0) return;
    LM_CHECK_ARG(extents_release(id), "lm_extents_destroy: id %d holds no reference (not created "
                 "by lm_extents_create, or destroyed as often as created)", id);
  });
}

// ----------------------------------------------------------------------------------- mesh
LM_API lm_status_t lm_mesh_create(lm_mesh_t *mesh, int parent_comm, int ndim, const int64_t *shape,
                                  const lm_mesh_config_t *config) {
  return guard([&] {
    if (mesh) *mesh = nullptr;
    lm_mesh_s *m = mesh_create(mesh, parent_comm, ndim, shape, config);
    *mesh = mesh_wrap(m);
  });
}

LM_API lm_status_t lm_mesh_create_grid(lm_mesh_t *mesh, int parent_comm, int myrow, int mycol,
                                       const lm_mesh_config_t *config) {
  return guard([&] {
    if (mesh) *mesh = nullptr;
    lm_mesh_s *m = mesh_create_grid(mesh, parent_comm, myrow, mycol, config);
    *mesh = mesh_wrap(m);
  });
}

LM_API lm_status_t lm_mesh_destroy(lm_mesh_t *mesh) {
  return guard([&] {
    if (!mesh || !*mesh) return;
    mesh_destroy_handle(mesh, "lm_mesh_destroy");
  });
}

LM_API lm_status_t lm_mesh_ndim(lm_mesh_t mesh, int *ndim) {
  return guard([&] {
    lm_mesh_s *m = mesh_check(mesh, "lm_mesh_ndim");
    OUT_ARG(ndim, "ndim", "lm_mesh_ndim");
    *ndim = m->ndim();
  });
}

LM_API lm_status_t lm_mesh_shape(lm_mesh_t mesh, int64_t *shape, int n) {
  return guard([&] {
    lm_mesh_s *m = mesh_check(mesh, "lm_mesh_shape");
    OUT_ARG(shape, "shape", "lm_mesh_shape");
    LM_CHECK_ARG(n >= 0, "lm_mesh_shape: n = %d must be >= 0", n);
    for (int i = 0; i < n && i < m->ndim(); ++i) shape[i] = m->grid->shape()[i];
  });
}

LM_API lm_status_t lm_mesh_size(lm_mesh_t mesh, int *size) {
  return guard([&] {
    lm_mesh_s *m = mesh_check(mesh, "lm_mesh_size");
    OUT_ARG(size, "size", "lm_mesh_size");
    *size = (int)m->grid->size();
  });
}

LM_API lm_status_t lm_mesh_is_member(lm_mesh_t mesh, int *is_member) {
  return guard([&] {
    lm_mesh_s *m = mesh_check(mesh, "lm_mesh_is_member");
    OUT_ARG(is_member, "is_member", "lm_mesh_is_member");
    *is_member = m->member;
  });
}

static lm_mesh_s *member_mesh(lm_mesh_t mesh, const char *fn) {
  lm_mesh_s *m = mesh_check(mesh, fn);
  if (!m->member) fail(LM_ERR_INVALID_USAGE, "%s: rank %d is not in the mesh", fn, m->world_rank);
  return m;
}

LM_API lm_status_t lm_mesh_coord(lm_mesh_t mesh, int64_t *coord, int n) {
  return guard([&] {
    const char *fn = "lm_mesh_coord";
    lm_mesh_s *m = mesh_check(mesh, fn);
    OUT_ARG(coord, "coord", fn);
    LM_CHECK_ARG(n >= m->ndim(), "%s: n = %d is less than the mesh ndim %d", fn, n, m->ndim());
    member_mesh(mesh, fn);
    for (int i = 0; i < m->ndim(); ++i) coord[i] = m->coord[i];
  });
}

LM_API lm_status_t lm_mesh_rank(lm_mesh_t mesh, int *mesh_rank) {
  return guard([&] {
    OUT_ARG(mesh_rank, "mesh_rank", "lm_mesh_rank");
    lm_mesh_s *m = member_mesh(mesh, "lm_mesh_rank");
    *mesh_rank = (int)m->index;
  });
}

LM_API lm_status_t lm_mesh_rank_at(lm_mesh_t mesh, const int64_t *coord, int n, int *parent_rank) {
  return guard([&] {
    const char *fn = "lm_mesh_rank_at";
    lm_mesh_s *m = mesh_check(mesh, fn);
    LM_CHECK_ARG(coord != nullptr, "%s: coord is NULL", fn);
    OUT_ARG(parent_rank, "parent_rank", fn);
    LM_CHECK_ARG(n == m->ndim(), "%s: n = %d must equal the mesh ndim %d", fn, n, m->ndim());
    for (int i = 0; i < n; ++i)
      LM_CHECK_ARG(coord[i] >= 0 && coord[i] < m->grid->shape()[i],
                   "%s: coord[%d] = %lld is outside [0, %lld)", fn, i, (long long)coord[i],
                   (long long)m->grid->shape()[i]);
    *parent_rank = m->grid->rank_at_index(m->grid->index_at(coord));
  });
}

LM_API lm_status_t lm_mesh_dim_index(lm_mesh_t mesh, const char *name, int *dim) {
  return guard([&] {
    const char *fn = "lm_mesh_dim_index";
    lm_mesh_s *m = mesh_check(mesh, fn);
    LM_CHECK_ARG(name != nullptr, "%s: name is NULL", fn);
    OUT_ARG(dim, "dim", fn);
    for (int i = 0; i < m->ndim(); ++i)
      if (!m->names[i].empty() && m->names[i] == name) {
        *dim = i;
        return;
      }
    fail(LM_ERR_INVALID_ARGUMENT, "%s: the mesh has no dim named \"%s\"", fn, name);
  });
}

LM_API lm_status_t lm_mesh_dim_name(lm_mesh_t mesh, int dim, char *buf, size_t size) {
  return guard([&] {
    const char *fn = "lm_mesh_dim_name";
    lm_mesh_s *m = mesh_check(mesh, fn);
    LM_CHECK_ARG(dim >= 0 && dim < m->ndim(), "%s: dim %d out of range [0, %d)", fn, dim, m->ndim());
    LM_CHECK_ARG(buf != nullptr && size > 0, "%s: buf is NULL or size is 0", fn);
    const std::string &s = m->names[dim];
    size_t k = std::min(size - 1, s.size());
    std::memcpy(buf, s.data(), k);
    buf[k] = 0;
  });
}

LM_API lm_status_t lm_mesh_dim_comm(lm_mesh_t mesh, int dim, int *comm_f) {
  return guard([&] {
    const char *fn = "lm_mesh_dim_comm";
    lm_mesh_s *m = mesh_check(mesh, fn);
    OUT_ARG(comm_f, "comm_f", fn);
    LM_CHECK_ARG(dim >= 0 && dim < m->ndim(), "%s: dim %d out of range [0, %d)", fn, dim, m->ndim());
    member_mesh(mesh, fn);
    *comm_f = (int)MPI_Comm_c2f(m->dim_comms[dim]);
  });
}

LM_API lm_status_t lm_mesh_comm(lm_mesh_t mesh, int *comm_f) {
  return guard([&] {
    OUT_ARG(comm_f, "comm_f", "lm_mesh_comm");
    lm_mesh_s *m = member_mesh(mesh, "lm_mesh_comm");
    *comm_f = (int)MPI_Comm_c2f(m->comm);
  });
}

// --------------------------------------------------------------------------------- devices
LM_API lm_status_t lm_mesh_set_device_config(lm_mesh_t mesh, const lm_device_config_t *config) {
  return guard([&] {
    const char *fn = "lm_mesh_set_device_config";
    lm_mesh_s *m = mesh_check(mesh, fn);
    lm_device_config_t c = LM_DEVICE_CONFIG_INIT;
    if (config) {
      LM_CHECK_ARG(config->magic == LM_DEVICE_CONFIG_MAGIC,
                   "%s: config->magic is 0x%x, not LM_DEVICE_CONFIG_MAGIC (use LM_DEVICE_CONFIG_INIT)",
                   fn, (unsigned)config->magic);
      LM_CHECK_ARG(config->version >= 1, "%s: config->version %u is not a version", fn,
                   (unsigned)config->version);
      LM_CHECK_ARG(config->size >= offsetof(lm_device_config_t, stream) + sizeof(void *),
                   "%s: config->size %zu is too small for any lm_device_config_t", fn, config->size);
      std::memcpy(&c, config, std::min(config->size, sizeof c));
      c.size = sizeof c;
      c.version = LM_DEVICE_CONFIG_VERSION;
      LM_CHECK_ARG((c.alloc == nullptr) == (c.free == nullptr),
                   "%s: config->alloc and config->free must be both set or both NULL", fn);
    }
    mesh_mem(m).config = c;
  });
}

LM_API lm_status_t lm_mesh_device_config(lm_mesh_t mesh, lm_device_config_t *config) {
  return guard([&] {
    const char *fn = "lm_mesh_device_config";
    lm_mesh_s *m = mesh_check(mesh, fn);
    OUT_ARG(config, "config", fn);
    LM_CHECK_ARG(config->size >= offsetof(lm_device_config_t, stream) + sizeof(void *),
                 "%s: config->size %zu is too small (initialise with LM_DEVICE_CONFIG_INIT)", fn,
                 config->size);
    size_t n = std::min(config->size, sizeof(lm_device_config_t));
    lm_device_config_t c = mesh_mem(m).config;
    c.size = n;
    std::memcpy(config, &c, n);
  });
}

LM_API lm_status_t lm_mesh_transport(lm_mesh_t mesh, DLDeviceType device_type, int *transport) {
  return guard([&] {
    const char *fn = "lm_mesh_transport";
    lm_mesh_s *m = mesh_check(mesh, fn);
    OUT_ARG(transport, "transport", fn);
    const int t = enum_bits(device_type);
    if (t == kDLCPU) {
      *transport = LM_TRANSPORT_MPI;
      return;
    }
    if (t != kDLCUDA)
      fail(LM_ERR_NOT_SUPPORTED, "%s: device_type %d: tensors live on kDLCPU or kDLCUDA only", fn, t);
    cuda_api(fn);  // LM_ERR_NOT_SUPPORTED: the device component is missing, and why
    *transport = m->dev ? m->dev->transport : LM_TRANSPORT_UNDECIDED;
  });
}

// --------------------------------------------------------------------------------- tensors
LM_API lm_status_t lm_dist_tensor_zeros(lm_dist_tensor_t *out, lm_mesh_t mesh, int ndim,
                                        const int64_t *global_shape, DLDataType dtype,
                                        DLDevice device, const lm_placement_t *placements) {
  return guard([&] {
    OUT_ARG(out, "out", "lm_dist_tensor_zeros");
    *out = nullptr;
    *out = tensor_wrap(tensor_zeros(mesh, ndim, global_shape, dtype, device, placements));
  });
}

LM_API lm_status_t lm_dist_tensor_from_local(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                             const DLTensor *local,
                                             const lm_placement_t *placements,
                                             lm_shape_mode_t shape_mode,
                                             const int64_t *global_shape, unsigned flags) {
  return guard([&] {
    OUT_ARG(out, "out", "lm_dist_tensor_from_local");
    *out = nullptr;
    const char *fn = "lm_dist_tensor_from_local";
    *out = tensor_wrap(tensor_from_local(mesh_check(mesh, fn), local, placements,
                                         enum_bits(shape_mode), global_shape, flags, nullptr, fn));
  });
}

LM_API lm_status_t lm_dist_tensor_from_dlpack(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                               DLManagedTensor *local,
                                               const lm_placement_t *placements,
                                               lm_shape_mode_t shape_mode,
                                               const int64_t *global_shape) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_from_dlpack";
    OUT_ARG(out, "out", fn);
    *out = nullptr;
    LM_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
    *out = tensor_wrap(tensor_from_local(mesh_check(mesh, fn), &local->dl_tensor, placements,
                                         enum_bits(shape_mode), global_shape, LM_FROM_LOCAL_BORROW,
                                         local, fn));
  });
}

LM_API lm_status_t lm_dist_tensor_from_global(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                              const DLTensor *global,
                                              const lm_placement_t *placements, int root) {
  return guard([&] {
    OUT_ARG(out, "out", "lm_dist_tensor_from_global");
    *out = nullptr;
    *out = tensor_wrap(tensor_from_global(mesh, global, placements, root));
  });
}

LM_API lm_status_t lm_dist_tensor_from_scalapack(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                                 const int *desc, void *data, DLDataType dtype,
                                                 DLDevice device, unsigned flags) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_from_scalapack";
    OUT_ARG(out, "out", fn);
    *out = nullptr;
    *out = tensor_wrap(tensor_from_scalapack(mesh_check(mesh, fn), desc, data, dtype, device,
                                             flags, fn));
  });
}

LM_API lm_status_t lm_dist_tensor_to_scalapack(lm_dist_tensor_t tensor, int ctxt, int *desc) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_to_scalapack";
    tensor_scalapack_desc(tensor_check(tensor, fn), ctxt, desc, fn);
  });
}

LM_API lm_status_t lm_dist_tensor_gather(lm_dist_tensor_t tensor, int root, DLTensor *dst) {
  return guard([&] { tensor_gather(tensor, root, dst); });
}

#define TENSOR_GETTER(name, type, body)                        \
  LM_API lm_status_t lm_dist_tensor_##name(lm_dist_tensor_t tensor, type *out) { \
    return guard([&] {                                         \
      lm_dist_tensor_s *t = tensor_check(tensor, "lm_dist_tensor_" #name); \
      OUT_ARG(out, #name, "lm_dist_tensor_" #name);            \
      body;                                                    \
    });                                                        \
  }

TENSOR_GETTER(mesh, lm_mesh_t, *out = mesh_borrow(t->mesh))
TENSOR_GETTER(ndim, int, *out = t->layout.ndim())
TENSOR_GETTER(dtype, DLDataType, *out = t->dtype)
TENSOR_GETTER(device, DLDevice, *out = t->device)

LM_API lm_status_t lm_dist_tensor_placements(lm_dist_tensor_t tensor, lm_placement_t *placements,
                                             int n) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_placements";
    lm_dist_tensor_s *t = tensor_check(tensor, fn);
    OUT_ARG(placements, "placements", fn);
    LM_CHECK_ARG(n == t->layout.mesh_ndim(), "%s: n = %d must equal the mesh ndim %d", fn, n,
                 t->layout.mesh_ndim());
    for (int i = 0; i < n; ++i) placements[i] = t->layout.pl[i];
  });
}

static lm_status_t shape_getter(lm_dist_tensor_t tensor, int64_t *out, int n, const char *fn,
                                int which) {
  return guard([&] {
    lm_dist_tensor_s *t = tensor_check(tensor, fn);
    OUT_ARG(out, "shape", fn);
    LM_CHECK_ARG(n == t->layout.ndim(), "%s: n = %d must equal the tensor ndim %d", fn, n,
                 t->layout.ndim());
    const Shape &s = which == 0 ? t->layout.gshape : which == 1 ? t->local.len : t->local.off;
    for (int i = 0; i < n; ++i) out[i] = s[i];
  });
}

LM_API lm_status_t lm_dist_tensor_global_shape(lm_dist_tensor_t t, int64_t *shape, int n) {
  return shape_getter(t, shape, n, "lm_dist_tensor_global_shape", 0);
}
LM_API lm_status_t lm_dist_tensor_local_shape(lm_dist_tensor_t t, int64_t *shape, int n) {
  return shape_getter(t, shape, n, "lm_dist_tensor_local_shape", 1);
}
LM_API lm_status_t lm_dist_tensor_local_offset(lm_dist_tensor_t t, int64_t *offset, int n) {
  return shape_getter(t, offset, n, "lm_dist_tensor_local_offset", 2);
}

LM_API lm_status_t lm_dist_tensor_local(lm_dist_tensor_t tensor, DLTensor *view) {
  return guard([&] {
    lm_dist_tensor_s *t = tensor_check(tensor, "lm_dist_tensor_local");
    OUT_ARG(view, "view", "lm_dist_tensor_local");
    view->data = t->base();
    view->device = t->device;
    view->ndim = t->layout.ndim();
    view->dtype = t->dtype;
    view->shape = t->local.len.data();
    view->strides = t->padded() ? t->pad_strides.data() : nullptr;  // a padded borrow's rows
    view->byte_offset = 0;
  });
}

namespace {
struct ExportCtx {
  DLManagedTensor mt;
  lm_dist_tensor_s *t;
  Shape shape, strides;
};
void export_deleter(DLManagedTensor *self) {
  ExportCtx *c = static_cast<ExportCtx *>(self->manager_ctx);
  tensor_release(c->t);
  delete c;
}
}  // namespace

LM_API lm_status_t lm_dist_tensor_to_dlpack(lm_dist_tensor_t tensor, DLManagedTensor **managed) {
  return guard([&] {
    lm_dist_tensor_s *t = tensor_check(tensor, "lm_dist_tensor_to_dlpack");
    OUT_ARG(managed, "managed", "lm_dist_tensor_to_dlpack");
    auto owner = std::make_unique<ExportCtx>();
    ExportCtx *c = owner.get();
    c->shape = t->local.len;
    c->strides = t->pad_strides;
    c->mt.dl_tensor.data = t->base();
    c->mt.dl_tensor.device = t->device;
    c->mt.dl_tensor.ndim = t->layout.ndim();
    c->mt.dl_tensor.dtype = t->dtype;
    c->mt.dl_tensor.shape = c->shape.data();
    c->mt.dl_tensor.strides = t->padded() ? c->strides.data() : nullptr;
    c->mt.dl_tensor.byte_offset = 0;
    c->mt.manager_ctx = c;
    c->mt.deleter = export_deleter;
    tensor_retain(t);
    c->t = t;
    *managed = &owner.release()->mt;
  });
}

LM_API lm_status_t lm_tensor_alloc(DLManagedTensor **out, int ndim, const int64_t *shape,
                                   DLDataType dtype, DLDevice device) {
  if (out) *out = nullptr;
  return guard([&] {
    OUT_ARG(out, "out", "lm_tensor_alloc");
    *out = tensor_alloc_managed(ndim, shape, dtype, device);
  });
}

LM_API lm_status_t lm_dist_tensor_retain(lm_dist_tensor_t tensor) {
  return guard([&] { tensor_retain_handle(tensor, "lm_dist_tensor_retain"); });
}

LM_API lm_status_t lm_dist_tensor_destroy(lm_dist_tensor_t *tensor) {
  return guard([&] {
    if (!tensor || !*tensor) return;
    tensor_destroy_handle(tensor, "lm_dist_tensor_destroy");
  });
}

// --------------------------------------------------------------------------------- reshard
LM_API lm_status_t lm_dist_tensor_reshard(lm_dist_tensor_t *out, lm_dist_tensor_t src,
                                          lm_mesh_t dst_mesh, const lm_placement_t *placements) {
  return guard([&] {
    OUT_ARG(out, "out", "lm_dist_tensor_reshard");
    *out = nullptr;
    const char *fn = "lm_dist_tensor_reshard";
    lm_dist_tensor_s *t = tensor_check(src, "lm_dist_tensor_reshard: src");
    lm_mesh_s *dm = dst_mesh ? mesh_check(dst_mesh, "lm_dist_tensor_reshard: dst_mesh") : nullptr;
    *out = tensor_wrap(tensor_reshard(t, dm, placements, fn));
  });
}

LM_API lm_status_t lm_dist_tensor_transpose(lm_dist_tensor_t *out, lm_dist_tensor_t src,
                                            const int *perm, lm_mesh_t dst_mesh,
                                            const lm_placement_t *placements) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_transpose";
    OUT_ARG(out, "out", fn);
    *out = nullptr;
    lm_dist_tensor_s *t = tensor_check(src, "lm_dist_tensor_transpose: src");
    lm_mesh_s *dm = dst_mesh ? mesh_check(dst_mesh, "lm_dist_tensor_transpose: dst_mesh") : nullptr;
    *out = tensor_wrap(tensor_transpose(t, perm, dm, placements, fn));
  });
}

LM_API lm_status_t lm_dist_tensor_transpose_into(lm_dist_tensor_t dst, lm_dist_tensor_t src,
                                                 const int *perm) {
  return guard([&] {
    const char *fn = "lm_dist_tensor_transpose_into";
    lm_dist_tensor_s *d = tensor_check(dst, "lm_dist_tensor_transpose_into: dst");
    lm_dist_tensor_s *t = tensor_check(src, "lm_dist_tensor_transpose_into: src");
    tensor_transpose_into(d, t, perm, fn);
  });
}

LM_API lm_status_t lm_reshard_plan_create(lm_reshard_plan_t *plan, lm_mesh_t src_mesh,
                                          const lm_placement_t *src_placements, lm_mesh_t dst_mesh,
                                          const lm_placement_t *dst_placements, int ndim,
                                          const int64_t *global_shape, DLDataType dtype) {
  return guard([&] {
    OUT_ARG(plan, "plan", "lm_reshard_plan_create");
    *plan = nullptr;
    *plan = plan_wrap(plan_create(src_mesh, src_placements, dst_mesh, dst_placements, ndim,
                                  global_shape, dtype));
  });
}

LM_API lm_status_t lm_reshard_plan_alloc_target(lm_dist_tensor_t *out, lm_reshard_plan_t plan,
                                                DLDevice device) {
  return guard([&] {
    lm_reshard_plan_s *p = plan_check(plan, "lm_reshard_plan_alloc_target");
    OUT_ARG(out, "out", "lm_reshard_plan_alloc_target");
    *out = nullptr;
    *out = tensor_wrap(plan_alloc_target(p, device));
  });
}

LM_API lm_status_t lm_reshard_plan_execute(lm_reshard_plan_t plan, lm_dist_tensor_t src,
                                           lm_dist_tensor_t dst) {
  return guard([&] {
    plan_execute(plan_check(plan, "lm_reshard_plan_execute"), src, dst);
  });
}

LM_API lm_status_t lm_reshard_plan_start(lm_request_t *request, lm_reshard_plan_t plan,
                                         lm_dist_tensor_t src, lm_dist_tensor_t dst) {
  return guard([&] {
    lm_reshard_plan_s *p = plan_check(plan, "lm_reshard_plan_start");
    OUT_ARG(request, "request", "lm_reshard_plan_start");
    *request = nullptr;
    lm_request_s *r = plan_start(p, src, dst, "lm_reshard_plan_start");
    if (r) *request = request_wrap(r);
  });
}

LM_API lm_status_t lm_request_test(lm_request_t *request, int *done) {
  return guard([&] {
    OUT_ARG(request, "request", "lm_request_test");
    OUT_ARG(done, "done", "lm_request_test");
    if (!*request) {  // a rank without a part in the reshard got no request: complete
      *done = 1;
      return;
    }
    lm_request_s *r = request_check(*request, "lm_request_test");
    *done = 0;
    bool fin;
    try {
      fin = request_progress(r, false);
    } catch (...) {
      request_free_handle(request, r);
      throw;
    }
    if (fin) {
      request_free_handle(request, r);
      *done = 1;
    }
  });
}

LM_API lm_status_t lm_request_wait(lm_request_t *request) {
  return guard([&] {
    OUT_ARG(request, "request", "lm_request_wait");
    if (!*request) return;
    lm_request_s *r = request_check(*request, "lm_request_wait");
    struct Free {
      lm_request_t *h;
      lm_request_s *r;
      ~Free() { request_free_handle(h, r); }
    } free_at_exit{request, r};
    request_progress(r, true);
  });
}

LM_API lm_status_t lm_reshard_plan_adjoint(lm_reshard_plan_t *adjoint, lm_reshard_plan_t plan) {
  return guard([&] {
    const char *fn = "lm_reshard_plan_adjoint";
    lm_reshard_plan_s *p = plan_check(plan, fn);
    OUT_ARG(adjoint, "adjoint", fn);
    *adjoint = nullptr;
    *adjoint = plan_wrap(plan_adjoint(p));
  });
}

// An lm_reshard_plan_info_t argument: non-NULL, its magic, a size and version this library
// knows; flags.
static void check_info_arg(const lm_reshard_plan_info_t *info, int flags, const char *fn) {
  OUT_ARG(info, "info", fn);
  LM_CHECK_ARG(info->magic == LM_RESHARD_PLAN_INFO_MAGIC, "%s: info->magic is 0x%x, not "
               "LM_RESHARD_PLAN_INFO_MAGIC (initialise the lm_reshard_plan_info_t with "
               "LM_RESHARD_PLAN_INFO_INIT)", fn, info->magic);
  const size_t v1 = offsetof(lm_reshard_plan_info_t, staging_bytes_max) + sizeof(int64_t);
  LM_CHECK_ARG(info->size >= v1, "%s: info->size %zu is below the first version's (%zu): "
               "initialise it with LM_RESHARD_PLAN_INFO_INIT", fn, info->size, v1);
  LM_CHECK_ARG(info->version >= 1 && info->version <= LM_RESHARD_PLAN_INFO_VERSION,
               "%s: info->version %u is not one this library knows (1..%u): initialise it with "
               "LM_RESHARD_PLAN_INFO_INIT", fn, info->version, LM_RESHARD_PLAN_INFO_VERSION);
  LM_CHECK_ARG((flags & ~LM_PLAN_INFO_ALL_RANKS) == 0,
               "%s: flags %d has unknown bits (0 or LM_PLAN_INFO_ALL_RANKS)", fn, flags);
}

LM_API lm_status_t lm_reshard_plan_info(lm_reshard_plan_t plan, int flags,
                                        lm_reshard_plan_info_t *info) {
  return guard([&] {
    const char *fn = "lm_reshard_plan_info";
    lm_reshard_plan_s *p = plan_check(plan, fn);
    check_info_arg(info, flags, fn);
    plan_info(p, flags, info);
  });
}

LM_API lm_status_t lm_reshard_estimate(lm_mesh_t src_mesh, const lm_placement_t *src_placements,
                                       lm_mesh_t dst_mesh, const lm_placement_t *dst_placements,
                                       int ndim, const int64_t *global_shape, DLDataType dtype,
                                       int flags, lm_reshard_plan_info_t *info) {
  return guard([&] {
    const char *fn = "lm_reshard_estimate";
    check_info_arg(info, flags, fn);
    reshard_estimate(src_mesh, src_placements, dst_mesh, dst_placements, ndim, global_shape,
                     dtype, flags, info);
  });
}

LM_API lm_status_t lm_pool_stats(int64_t *in_use, int64_t *peak, int reset_peak) {
  return guard([&] {
    size_t u = 0, pk = 0;
    pool_stats(&u, &pk, reset_peak != 0);
    if (in_use) *in_use = (int64_t)u;
    if (peak) *peak = (int64_t)pk;
  });
}

LM_API lm_status_t lm_reshard_plan_describe(lm_reshard_plan_t plan, char *buf, size_t size) {
  return guard([&] {
    lm_reshard_plan_s *p = plan_check(plan, "lm_reshard_plan_describe");
    LM_CHECK_ARG(buf != nullptr && size > 0, "lm_reshard_plan_describe: buf is NULL or size is 0");
    std::string s = p->plan->describe();
    size_t k = std::min(size - 1, s.size());
    std::memcpy(buf, s.data(), k);
    buf[k] = 0;
  });
}

LM_API lm_status_t lm_reshard_plan_destroy(lm_reshard_plan_t *plan) {
  return guard([&] {
    if (!plan || !*plan) return;
    plan_destroy_handle(plan, "lm_reshard_plan_destroy");
  });
}

// ---- Grouped reshards
LM_API lm_status_t lm_reshard_group_create(lm_reshard_group_t *group, lm_mesh_t src_mesh,
                                           lm_mesh_t dst_mesh, int n,
                                           const lm_reshard_entry_t *entries,
                                           const lm_reshard_group_config_t *config) {
  return guard([&] {
    OUT_ARG(group, "group", "lm_reshard_group_create");
    *group = nullptr;
    *group = group_wrap(group_create(src_mesh, dst_mesh, n, entries, config));
  });
}

LM_API lm_status_t lm_reshard_group_alloc_targets(lm_dist_tensor_t *out, lm_reshard_group_t group,
                                                  DLDevice device, int n) {
  return guard([&] {
    const char *fn = "lm_reshard_group_alloc_targets";
    lm_reshard_group_s *g = group_check(group, fn);
    // An empty group (n = 0) takes NULL arrays, as lm_reshard_group_create/_execute/_start do.
    LM_CHECK_ARG(n <= 0 || out != nullptr, "%s: out is NULL with n = %d", fn, n);
    std::vector<lm_dist_tensor_s *> t = group_alloc_targets(g, device, n);
    int i = 0;
    try {
      for (; i < n; ++i) {
        lm_dist_tensor_s *x = t[(size_t)i];
        t[(size_t)i] = nullptr;
        out[i] = tensor_wrap(x);  // releases x on failure
      }
    } catch (...) {
      for (auto *x : t)
        if (x) tensor_release(x);
      for (int j = 0; j < i; ++j) tensor_destroy_handle(&out[j], fn);
      throw;
    }
  });
}

LM_API lm_status_t lm_reshard_group_execute(lm_reshard_group_t group, int n,
                                            const lm_dist_tensor_t *src,
                                            const lm_dist_tensor_t *dst) {
  return guard([&] {
    group_execute(group_check(group, "lm_reshard_group_execute"), n, src, dst);
  });
}

LM_API lm_status_t lm_reshard_group_start(lm_request_t *request, lm_reshard_group_t group, int n,
                                          const lm_dist_tensor_t *src,
                                          const lm_dist_tensor_t *dst) {
  return guard([&] {
    lm_reshard_group_s *g = group_check(group, "lm_reshard_group_start");
    OUT_ARG(request, "request", "lm_reshard_group_start");
    *request = nullptr;
    lm_request_s *r = group_start(g, n, src, dst);
    if (r) *request = request_wrap(r);
  });
}

LM_API lm_status_t lm_reshard_group_size(lm_reshard_group_t group, int *n, int *buckets) {
  return guard([&] {
    lm_reshard_group_s *g = group_check(group, "lm_reshard_group_size");
    if (n) *n = (int)g->entries.size();
    if (buckets) *buckets = g->entries.empty() ? 0 : (int)group_bucket_count(g);
  });
}

LM_API lm_status_t lm_reshard_group_destroy(lm_reshard_group_t *group) {
  return guard([&] {
    if (!group || !*group) return;
    group_destroy_handle(group, "lm_reshard_group_destroy");
  });
}

// ------------------------------------------------------------------------------- local_map
LM_API lm_status_t lm_local_map(lm_local_fn_t fn, void *user_data, int nin, const lm_arg_t *inputs,
                                const lm_placement_t *const *in_placements, int nout,
                                const lm_placement_t *const *out_placements,
                                const int64_t *const *out_shapes, lm_mesh_t mesh, unsigned flags,
                                lm_arg_t *outputs) {
  return guard([&] {
    local_map(fn, user_data, nin, inputs, in_placements, nout, out_placements, out_shapes, mesh,
              flags, nullptr, outputs);
  });
}

LM_API lm_status_t lm_local_map_ex(lm_local_fn_t fn, void *user_data, int nin,
                                   const lm_arg_t *inputs,
                                   const lm_placement_t *const *in_placements, int nout,
                                   const lm_placement_t *const *out_placements,
                                   const int64_t *const *out_shapes, lm_mesh_t mesh, unsigned flags,
                                   const lm_local_map_options_t *options, lm_arg_t *outputs) {
  return guard([&] {
    local_map(fn, user_data, nin, inputs, in_placements, nout, out_placements, out_shapes, mesh,
              flags, options, outputs);
  });
}

LM_API lm_status_t lm_local_map_record_placements(lm_local_map_record_t record, int which,
                                                  int index, int capacity,
                                                  lm_placement_t *placements, int *n) {
  return guard([&] {
    const char *fn = "lm_local_map_record_placements";
    if (n) *n = 0;  // defined on every failure too (a Fortran intent(out) count is read after)
    record_placements(record_check(record, fn), which, index, capacity, placements, n, fn);
  });
}

LM_API lm_status_t lm_local_map_record_input_grad(lm_dist_tensor_t *out,
                                                  lm_local_map_record_t record, int index,
                                                  lm_dist_tensor_t grad) {
  return guard([&] {
    const char *fn = "lm_local_map_record_input_grad";
    LM_CHECK_ARG(out != nullptr, "%s: out is NULL", fn);
    *out = nullptr;
    lm_local_map_record_s *r = record_check(record, fn);
    lm_dist_tensor_s *g = tensor_check(grad, strfmt("%s: grad", fn).c_str());
    *out = tensor_wrap(record_input_grad(r, index, g, fn));
  });
}

LM_API lm_status_t lm_local_map_record_destroy(lm_local_map_record_t *record) {
  return guard([&] {
    if (!record || !*record) return;
    record_destroy_handle(record, "lm_local_map_record_destroy");
  });
}

}  // extern "C"
