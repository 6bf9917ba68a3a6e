// SPDX-License-Identifier: BSD-3-Clause
#include "mesh/mesh.hpp"

#include <cstring>
#include <set>

#include "core/error.hpp"
#include "core/handle.hpp"
#include "reshard/plan.hpp"
#include "transport/node.hpp"

namespace lm {

void mpi_check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(LM_ERR_MPI, "%s failed on rank %d: %s", what, world_rank_or_minus1(), msg);
}

bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

namespace {
uint64_t g_mesh_serial = 0;  // the highest mesh id this process has seen

struct CreateCtx {
  int ndim;
  const Shape *shape;
  const std::vector<int> *ranks;
  const std::vector<std::string> *names;
  const std::vector<int> *parent_world;
};

std::string describe_create(const void *p, int field) {
  const CreateCtx &c = *static_cast<const CreateCtx *>(p);
  auto ints = [](const std::vector<int> &v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size() && i < 8; ++i) r += strfmt(i ? ", %d" : "%d", v[i]);
    return r + (v.size() > 8 ? ", ...]" : "]");
  };
  switch (field) {
    case 1: return ints(*c.parent_world) + " (world ranks of the parent, in its order)";
    case 2: {
      std::string r = strfmt("ndim %d [", c.ndim);
      for (size_t i = 0; i < c.shape->size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)(*c.shape)[i]);
      return r + "]";
    }
    case 3: return c.ranks->empty() ? std::string("NULL (all ranks)") : ints(*c.ranks);
    case 4: {
      std::string r;
      for (auto &n : *c.names) r += (r.empty() ? "\"" : ", \"") + n + "\"";
      return r.empty() ? std::string("none") : r;
    }
  }
  return "?";
}
}  // namespace

lm_mesh_s *mesh_create(lm_mesh_t *out, int parent_comm_f, int ndim, const int64_t *shape,
                       const lm_mesh_config_t *config) {
  const char *fn = "lm_mesh_create";
  if (!mpi_alive())
    fail(LM_ERR_INVALID_USAGE, "%s: MPI is not initialised (call MPI_Init or lm_init first)", fn);
  MPI_Comm parent = MPI_Comm_f2c(static_cast<MPI_Fint>(parent_comm_f));
  // OpenMPI's MPI_Comm_f2c answers a plain NULL (not MPI_COMM_NULL) for an unknown handle.
  // MPICH (and its derivatives) hand the int back unchanged, and an MPI call on a malformed handle
  // aborts through MPI_COMM_WORLD's error handler: check the handle's kind bits first (bits 30-31
  // say builtin/direct/indirect, never 0 for a real handle; bits 26-29 say communicator, 1).
  bool plausible = parent != MPI_COMM_NULL && parent != MPI_Comm();
#if defined(MPICH)
  plausible = plausible && ((unsigned)parent_comm_f >> 30) != 0u &&
              (((unsigned)parent_comm_f >> 26) & 0xfu) == 1u;
#endif
  LM_CHECK_ARG(plausible,
               "%s: parent_comm %d is not a valid communicator handle", fn, parent_comm_f);
  int psize = 0, prank = 0;
  mpi_check(MPI_Comm_size(parent, &psize), "MPI_Comm_size(parent_comm)");
  mpi_check(MPI_Comm_rank(parent, &prank), "MPI_Comm_rank(parent_comm)");

  // Read the config defensively: min(size, sizeof) bytes.
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  std::string local_error;
  lm_status_t local_status = LM_SUCCESS;
  Shape mshape;
  std::vector<int> ranks;
  std::vector<std::string> names;
  try {
    LM_CHECK_ARG(out != nullptr, "%s: mesh (the output pointer) is NULL", fn);
    if (config) {
      LM_CHECK_ARG(config->magic == LM_MESH_CONFIG_MAGIC,
                   "%s: config->magic is 0x%x, not LM_MESH_CONFIG_MAGIC (initialise the config with "
                   "LM_MESH_CONFIG_INIT)",
                   fn, config->magic);
      LM_CHECK_ARG(config->size >= offsetof(lm_mesh_config_t, dim_names) + sizeof(void *),
                   "%s: config->size %zu is too small", fn, config->size);
      std::memcpy(&cfg, config, std::min(config->size, sizeof cfg));
      cfg.size = sizeof cfg;
    }
    LM_CHECK_ARG(ndim >= 1 && ndim <= kMaxDims, "%s: ndim %d must be in [1, %d]", fn, ndim,
                 kMaxDims);
    LM_CHECK_ARG(shape != nullptr, "%s: shape is NULL", fn);
    int64_t total = 1;
    for (int i = 0; i < ndim; ++i) {
      LM_CHECK_ARG(shape[i] >= 1, "%s: shape[%d] = %lld must be >= 1", fn, i, (long long)shape[i]);
      if (shape[i] > (int64_t)psize / total) {  // say what was asked: the shape and its size
        std::string asked;
        int64_t want = 1;
        bool huge = false;
        for (int k = 0; k < ndim; ++k) {
          asked += strfmt("%s%lld", k ? ", " : "", (long long)shape[k]);
          if (shape[k] >= 1 && __builtin_mul_overflow(want, shape[k], &want)) huge = true;
        }
        fail(LM_ERR_INVALID_ARGUMENT, "%s: mesh shape [%s] asks for %s ranks but the parent "
             "communicator has %d", fn, asked.c_str(),
             huge ? "more than 2^63" : strfmt("%lld", (long long)want).c_str(), psize);
      }
      total *= shape[i];
      mshape.push_back(shape[i]);
    }
    if (cfg.ranks) {
      LM_CHECK_ARG(cfg.nranks == total,
                   "%s: config->nranks = %d but the mesh shape has %lld ranks", fn, cfg.nranks,
                   (long long)total);
      std::set<int> seen;
      for (int i = 0; i < cfg.nranks; ++i) {
        int r = cfg.ranks[i];
        LM_CHECK_ARG(r >= 0 && r < psize,
                     "%s: config->ranks[%d] = %d is not a rank of the parent (size %d)", fn, i, r,
                     psize);
        LM_CHECK_ARG(seen.insert(r).second, "%s: config->ranks[%d] = %d appears twice", fn, i, r);
        ranks.push_back(r);
      }
    } else {
      LM_CHECK_ARG(cfg.nranks == 0, "%s: config->nranks = %d but config->ranks is NULL", fn,
                   cfg.nranks);
      LM_CHECK_ARG(total == psize,
                   "%s: mesh shape has %lld ranks but the parent communicator has %d (pass "
                   "config->ranks to use a subset)",
                   fn, (long long)total, psize);
    }
    LM_CHECK_ARG(cfg.check_level >= -1 && cfg.check_level <= 2,
                 "%s: config->check_level = %d must be -1 (from LM_CHECK), 0, 1 or 2", fn,
                 cfg.check_level);
    LM_CHECK_ARG(cfg.timeout == cfg.timeout && cfg.timeout < 1e9,
                 "%s: config->timeout = %g must be < 0 (from LM_TIMEOUT), 0 (off) or seconds", fn,
                 cfg.timeout);
    if (cfg.dim_names) {
      std::set<std::string> seen;
      for (int i = 0; i < ndim; ++i) {
        const char *nm = cfg.dim_names[i];
        LM_CHECK_ARG(nm && nm[0], "%s: config->dim_names[%d] is NULL or empty", fn, i);
        LM_CHECK_ARG(std::strlen(nm) <= 63, "%s: config->dim_names[%d] is longer than 63", fn, i);
        LM_CHECK_ARG(seen.insert(nm).second, "%s: config->dim_names[%d] = \"%s\" appears twice",
                     fn, i, nm);
        names.emplace_back(nm);
      }
    } else {
      names.assign(static_cast<size_t>(ndim), std::string());
    }
  } catch (const Error &e) {
    local_status = e.status();
    local_error = e.message();
  }

  // Agree over the parent's processes on the arguments, the mesh id, the check level and the
  // deadline (one allreduce on the agreement communicator shared by meshes over these processes,
  // so that ranks which passed different parents over the same processes meet and disagree).
  MPI_Group pgroup, wgroup;
  mpi_check(MPI_Comm_group(parent, &pgroup), "MPI_Comm_group(parent_comm)");
  std::vector<int> parent_world((size_t)psize), idx((size_t)psize);
  for (int i = 0; i < psize; ++i) idx[(size_t)i] = i;
  MPI_Comm_group(MPI_COMM_WORLD, &wgroup);
  MPI_Group_translate_ranks(pgroup, psize, idx.data(), wgroup, parent_world.data());
  MPI_Group_free(&wgroup);
  AgreeComm *ac = nullptr;
  try {
    ac = agree_comm_for(parent, pgroup);
  } catch (...) {
    MPI_Group_free(&pgroup);
    throw;
  }
  MPI_Group_free(&pgroup);
  Fingerprint fp(fn);
  fp.add("parent communicator", [&] {
    Hasher x;
    x.bytes(parent_world.data(), parent_world.size() * sizeof(int));
    return x.h;
  }());
  fp.add("mesh shape", hash_shape(mshape.data(), (int)mshape.size()));
  fp.add("config->ranks", [&] { Hasher x; x.u64(ranks.size()); x.bytes(ranks.data(), ranks.size() * sizeof(int)); return x.h; }());
  fp.add("config->dim_names", [&] { Hasher x; for (auto &n : names) x.bytes(n.c_str(), n.size() + 1); return x.h; }());
  int level = cfg.check_level >= 0 ? std::min(cfg.check_level, 2) : env_check_level();
  double tmo = cfg.timeout >= 0 ? cfg.timeout : env_timeout();
  long long maxes[3] = {(long long)g_mesh_serial + 1, level, (long long)(tmo * 1e6)};
  CreateCtx ctx{ndim, &mshape, &ranks, &names, &parent_world};
  AgreeArgs aa;
  aa.fn = fn;
  aa.ac = ac;
  aa.fp = &fp;  // mesh creation always agrees on its arguments (it is rare and cheap)
  aa.describe = describe_create;
  aa.ctx = &ctx;
  aa.local = local_status;
  aa.err = &local_error;
  aa.parent_rank = prank;
  aa.maxes = maxes;
  aa.nmax = 3;
  aa.timeout = tmo;
  agree(aa);
  g_mesh_serial = (uint64_t)maxes[0];

  auto m = std::make_unique<lm_mesh_s>();
  m->id = (uint64_t)maxes[0];
  m->check_level = (int)maxes[1];
  m->timeout = (double)maxes[2] / 1e6;
  m->agree_parent = ac;
  // The private communicator in the parent's rank order, made from the agreement communicator
  // (not the parent), so that parents over the same processes in the same order give one mesh.
  mpi_check(MPI_Comm_split(ac->comm, 0, prank, &m->world),
            "lm_mesh_create: MPI_Comm_split(parent processes)");
  MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
  node_attach(m->world, ac);  // which parent ranks share this node (the plans' transfers run on world)
  m->world_rank = prank;
  m->world_size = psize;
  m->grid = std::make_shared<Grid>(mshape, ranks);
  m->names = names;
  m->index = m->grid->index_of(prank);
  m->member = m->index >= 0;
  m->coord.assign(static_cast<size_t>(ndim), 0);
  if (m->member) m->grid->coord_of(m->index, m->coord.data());
  int color = m->member ? 0 : MPI_UNDEFINED;
  mpi_check(MPI_Comm_split(m->world, color, static_cast<int>(m->index), &m->comm),
            "lm_mesh_create: MPI_Comm_split(mesh)");
  if (m->member) {
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    m->dim_comms.assign(static_cast<size_t>(ndim), MPI_COMM_NULL);
    for (int d = 0; d < ndim; ++d) {
      Shape c = m->coord;
      c[d] = 0;
      int64_t col = m->grid->index_at(c.data());
      mpi_check(MPI_Comm_split(m->comm, static_cast<int>(col), static_cast<int>(m->coord[d]),
                               &m->dim_comms[d]),
                "lm_mesh_create: MPI_Comm_split(dim)");
      MPI_Comm_set_errhandler(m->dim_comms[d], MPI_ERRORS_RETURN);
    }
    MPI_Group mg;
    mpi_check(MPI_Comm_group(m->comm, &mg), "lm_mesh_create: MPI_Comm_group(mesh)");
    try {
      m->agree_members = agree_comm_for(m->comm, mg);
    } catch (...) {
      MPI_Group_free(&mg);
      throw;
    }
    MPI_Group_free(&mg);
  }
  return m.release();
}

}  // namespace lm

lm_mesh_s::~lm_mesh_s() {
  plan_cache.clear();
  // Freeing a communicator is local in practice (OpenMPI, MPICH); skip after MPI_Finalize so that
  // late destructors (Python __del__, Rust Drop) stay safe.
  if (lm::mpi_alive()) {
    for (auto &c : dim_comms)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
  }
  uint64_t h = handle.load(std::memory_order_acquire);
  if (h && !lm::handle_is_owned(h)) lm::handle_kill(h);  // a borrowed handle dies with the object
  magic = lm::kDeadMagic;
}

namespace lm {

void expect_object(const void *p, const char *what) {
  if (is_handle_value(p))
    fail(LM_ERR_INTERNAL, "%s: a handle reached code that expects an object (a missed unwrap)", what);
}

lm_mesh_s *mesh_check(lm_mesh_t h, const char *what) {
  LM_CHECK_ARG(h != nullptr, "%s: mesh is NULL", what);
  void *m = handle_get(h, HandleKind::Mesh);
  LM_CHECK_ARG(m != nullptr, "%s: mesh is not a live lm_mesh_t (destroyed or foreign)", what);
  return static_cast<lm_mesh_s *>(m);
}

lm_mesh_t mesh_wrap(lm_mesh_s *m) {
  uintptr_t h;
  try {
    h = handle_new(HandleKind::Mesh, m, true);
  } catch (...) {
    mesh_release(m);
    throw;
  }
  uint64_t none = 0;
  m->handle.compare_exchange_strong(none, h);  // the creator's handle is the canonical one
  return handle_as<lm_mesh_s>(h);
}

lm_mesh_t mesh_borrow(lm_mesh_s *m) {
  uint64_t h = m->handle.load(std::memory_order_acquire);
  if (h && handle_get(handle_as<lm_mesh_s>(h), HandleKind::Mesh) == m) return handle_as<lm_mesh_s>(h);
  uint64_t b = handle_new(HandleKind::Mesh, m, false);
  if (!m->handle.compare_exchange_strong(h, b)) {  // another thread made one first
    handle_kill(b);
    return handle_as<lm_mesh_s>(h);
  }
  return handle_as<lm_mesh_s>(b);
}

void mesh_destroy_handle(lm_mesh_t *h, const char *what) {
  void *obj = nullptr;
  LM_CHECK_ARG(*h != nullptr, "%s: mesh is NULL", what);
  switch (handle_drop(*h, HandleKind::Mesh, &obj)) {
    case DropResult::Dead:
      fail(LM_ERR_INVALID_ARGUMENT, "%s: mesh is not a live lm_mesh_t (destroyed or foreign)", what);
    case DropResult::Borrowed:
      fail(LM_ERR_INVALID_ARGUMENT,
           "%s: mesh is a borrowed handle (from lm_dist_tensor_mesh or fn's mesh argument after its "
           "creator destroyed the mesh); only the creator's handle is destroyed",
           what);
    case DropResult::Alive:
      break;
    case DropResult::Died:
      mesh_release(static_cast<lm_mesh_s *>(obj));
      break;
  }
  *h = nullptr;
}

lm_mesh_s *mesh_check_usable(lm_mesh_s *m, const char *what) {
  expect_object(m, what);
  if (m->broken)
    fail(LM_ERR_INVALID_USAGE, "%s: the mesh is broken by an earlier failure (%s)", what,
         m->broken_why.c_str());
  if (m->in_flight)
    fail(LM_ERR_INVALID_USAGE,
         "%s: a nonblocking reshard is in flight on this mesh; wait for it first", what);
  return m;
}

void mesh_retain(lm_mesh_s *m) { m->refs.fetch_add(1, std::memory_order_relaxed); }

void mesh_release(lm_mesh_s *m) {
  if (m && m->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete m;
}

void mesh_agree(lm_mesh_s *m, lm_status_t local, const std::string &err, const char *what) {
  int v = local != LM_SUCCESS ? (int)(m->grid->size() - m->index) : 0;
  try {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, m->comm), what);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  if (local != LM_SUCCESS) throw Error(local, err);
  if (v) {
    int64_t failed = m->grid->size() - v;
    fail(LM_ERR_REMOTE, "%s: rank %d (mesh rank %lld) failed; this rank %d did not", what,
         m->grid->rank_at_index(failed), (long long)failed, m->world_rank);
  }
}

void mesh_break(lm_mesh_s *m, const Error &e) {
  // Transport failures, deadlines and peers that failed during a transfer leave requests or
  // messages behind: the mesh cannot be trusted any more.
  if (e.status() == LM_ERR_MPI || e.status() == LM_ERR_NCCL || e.status() == LM_ERR_TIMEOUT ||
      e.status() == LM_ERR_REMOTE) {
    m->broken = true;
    m->broken_why = e.message();
  }
  throw e;
}

}  // namespace lm
