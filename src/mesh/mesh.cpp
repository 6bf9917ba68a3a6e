// SPDX-License-Identifier: BSD-3-Clause
#include "mesh/mesh.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>

#include <atomic>

#include "comm/node.hpp"
#include "common/error.hpp"
#include "common/handle.hpp"
#include "common/settings.hpp"
#include "mesh/device.hpp"

namespace lm {

namespace {
std::atomic<uint64_t> g_mesh_serial{0};  // the highest mesh id this process has seen
std::atomic<uint64_t> g_local_ids{0};

// What lm_mesh_create was asked, once read and checked locally.
struct MeshArgs {
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  Shape shape;
  std::vector<int> ranks;              // config->ranks (empty: all of the parent)
  std::vector<std::string> names;      // config->dim_names ("" each when absent)
  std::vector<int> parent_world;       // world ranks of the parent, in its order
};

std::string describe_create(const void *p, int field) {
  const MeshArgs &c = *static_cast<const MeshArgs *>(p);
  auto ints = [](const std::vector<int> &v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size() && i < 8; ++i) r += strfmt(i ? ", %d" : "%d", v[i]);
    return r + (v.size() > 8 ? ", ...]" : "]");
  };
  switch (field) {
    case 1: return ints(c.parent_world) + " (world ranks of the parent, in its order)";
    case 2: {
      std::string r = strfmt("ndim %zu [", c.shape.size());
      for (size_t i = 0; i < c.shape.size(); ++i)
        r += strfmt(i ? ", %lld" : "%lld", (long long)c.shape[i]);
      return r + "]";
    }
    case 3: return c.ranks.empty() ? std::string("NULL (all ranks)") : ints(c.ranks);
    case 4: {
      std::string r;
      for (auto &n : c.names) r += (r.empty() ? "\"" : ", \"") + n + "\"";
      return r.empty() ? std::string("none") : r;
    }
  }
  return "?";
}

// The parent communicator of an lm_mesh_create call; throws for a handle that is not one.
MPI_Comm open_parent(int parent_comm_f, const char *fn) {
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
  LM_CHECK_ARG(plausible, "%s: parent_comm %d is not a valid communicator handle", fn,
               parent_comm_f);
  return parent;
}

// "mesh shape [2, 3] asks for 6 ranks but the parent communicator has 4".
[[noreturn]] void too_many_ranks(const char *fn, int ndim, const int64_t *shape, int psize) {
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

// config->ranks against the shape's size and the parent's.
void check_ranks(const char *fn, const lm_mesh_config_t &cfg, int64_t total, int psize,
                 std::vector<int> *ranks) {
  if (!cfg.ranks) {
    LM_CHECK_ARG(cfg.nranks == 0, "%s: config->nranks = %d but config->ranks is NULL", fn,
                 cfg.nranks);
    LM_CHECK_ARG(total == psize, "%s: mesh shape has %lld ranks but the parent communicator has "
                 "%d (pass config->ranks to use a subset)", fn, (long long)total, psize);
    return;
  }
  LM_CHECK_ARG(cfg.nranks == total, "%s: config->nranks = %d but the mesh shape has %lld ranks",
               fn, cfg.nranks, (long long)total);
  std::set<int> seen;
  for (int i = 0; i < cfg.nranks; ++i) {
    int r = cfg.ranks[i];
    LM_CHECK_ARG(r >= 0 && r < psize,
                 "%s: config->ranks[%d] = %d is not a rank of the parent (size %d)", fn, i, r, psize);
    LM_CHECK_ARG(seen.insert(r).second, "%s: config->ranks[%d] = %d appears twice", fn, i, r);
    ranks->push_back(r);
  }
}

void check_names(const char *fn, const lm_mesh_config_t &cfg, int ndim,
                 std::vector<std::string> *names) {
  if (!cfg.dim_names) {
    names->assign(static_cast<size_t>(ndim), std::string());
    return;
  }
  std::set<std::string> seen;
  for (int i = 0; i < ndim; ++i) {
    const char *nm = cfg.dim_names[i];
    LM_CHECK_ARG(nm && nm[0], "%s: config->dim_names[%d] is NULL or empty", fn, i);
    LM_CHECK_ARG(std::strlen(nm) <= 63, "%s: config->dim_names[%d] is longer than 63", fn, i);
    LM_CHECK_ARG(seen.insert(nm).second, "%s: config->dim_names[%d] = \"%s\" appears twice", fn,
                 i, nm);
    names->emplace_back(nm);
  }
}

// The local checks of lm_mesh_create's arguments (throws; the caller agrees on the outcome).
void check_create_args(const char *fn, lm_mesh_t *out, int ndim, const int64_t *shape,
                       const lm_mesh_config_t *config, int psize, MeshArgs *a) {
  LM_CHECK_ARG(out != nullptr, "%s: mesh (the output pointer) is NULL", fn);
  if (config) {  // read defensively: min(size, sizeof) bytes
    LM_CHECK_ARG(config->magic == LM_MESH_CONFIG_MAGIC, "%s: config->magic is 0x%x, not "
                 "LM_MESH_CONFIG_MAGIC (initialise the config with LM_MESH_CONFIG_INIT)",
                 fn, config->magic);
    LM_CHECK_ARG(config->size >= offsetof(lm_mesh_config_t, dim_names) + sizeof(void *),
                 "%s: config->size %zu is too small", fn, config->size);
    std::memcpy(&a->cfg, config, std::min(config->size, sizeof a->cfg));
    a->cfg.size = sizeof a->cfg;
  }
  LM_CHECK_ARG(ndim >= 1 && ndim <= kMaxDims, "%s: ndim %d must be in [1, %d]", fn, ndim,
               kMaxDims);
  LM_CHECK_ARG(shape != nullptr, "%s: shape is NULL", fn);
  int64_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    LM_CHECK_ARG(shape[i] >= 1, "%s: shape[%d] = %lld must be >= 1", fn, i, (long long)shape[i]);
    if (shape[i] > (int64_t)psize / total) too_many_ranks(fn, ndim, shape, psize);
    total *= shape[i];
    a->shape.push_back(shape[i]);
  }
  check_ranks(fn, a->cfg, total, psize, &a->ranks);
  LM_CHECK_ARG(a->cfg.check_level >= -1 && a->cfg.check_level <= 2,
               "%s: config->check_level = %d must be -1 (from LM_CHECK), 0, 1 or 2", fn,
               a->cfg.check_level);
  LM_CHECK_ARG(a->cfg.timeout == a->cfg.timeout && a->cfg.timeout < 1e9,
               "%s: config->timeout = %g must be < 0 (from LM_TIMEOUT), 0 (off) or seconds", fn,
               a->cfg.timeout);
  check_names(fn, a->cfg, ndim, &a->names);
}

// The world ranks of the parent in its order, and its agreement communicator (settings agreed):
// the one shared by the parent's processes, or with private channels one of the mesh's own.
AgreeComm *parent_agree_comm(MPI_Comm parent, int psize, const char *fn, double timeout,
                             std::vector<int> *parent_world, bool priv) {
  MPI_Group pgroup, wgroup;
  mpi_check(MPI_Comm_group(parent, &pgroup), "MPI_Comm_group(parent_comm)");
  std::vector<int> idx((size_t)psize);
  parent_world->assign((size_t)psize, MPI_UNDEFINED);
  for (int i = 0; i < psize; ++i) idx[(size_t)i] = i;
  MPI_Comm_group(MPI_COMM_WORLD, &wgroup);
  MPI_Group_translate_ranks(pgroup, psize, idx.data(), wgroup, parent_world->data());
  MPI_Group_free(&wgroup);
  if (priv) {
    MPI_Group_free(&pgroup);
    return private_agree_comm(parent, fn, timeout, true);
  }
  try {
    AgreeComm *ac = agree_comm_for(parent, pgroup, fn, timeout);
    MPI_Group_free(&pgroup);
    return ac;
  } catch (...) {
    MPI_Group_free(&pgroup);
    throw;
  }
}

// One agreement over the parent's processes: the local outcome, the arguments, and the maxima of
// the mesh id, check level and deadline (maxes[0..2], in place).
void agree_create(const char *fn, AgreeComm *ac, const MeshArgs &a, lm_status_t st,
                  const std::string &err, int prank, long long maxes[3]) {
  Fingerprint fp(fn);
  Hasher pw, rk, nm;
  pw.bytes(a.parent_world.data(), a.parent_world.size() * sizeof(int));
  rk.u64(a.ranks.size());
  rk.bytes(a.ranks.data(), a.ranks.size() * sizeof(int));
  for (auto &n : a.names) nm.bytes(n.c_str(), n.size() + 1);
  fp.add("parent communicator", pw.h);
  fp.add("mesh shape", hash_shape(a.shape.data(), (int)a.shape.size()));
  fp.add("config->ranks", rk.h);
  fp.add("config->dim_names", nm.h);
  AgreeArgs aa;
  aa.fn = fn;
  aa.ac = ac;
  aa.fp = &fp;  // mesh creation always agrees on its arguments (it is rare and cheap)
  aa.describe = describe_create;
  aa.ctx = &a;
  aa.local = st;
  aa.err = &err;
  aa.parent_rank = prank;
  aa.maxes = maxes;
  aa.nmax = 3;
  aa.timeout = (double)maxes[2] / 1e6;  // this rank's own: the highest is what is being agreed
  aa.rounds = Rounds::kAlwaysTwo;
  agree(aa);
}

// The mesh's private communicators: world (the parent's processes in its order), comm (the
// members), one per mesh dim; and the members' agreement communicator.
void build_comms(lm_mesh_s *m, AgreeComm *ac, int prank, double timeout, bool priv) {
  // Made from the agreement communicator (not the parent), so that parents over the same
  // processes in the same order give one mesh.
  mpi_check(MPI_Comm_split(ac->comm, 0, prank, &m->world),
            "lm_mesh_create: MPI_Comm_split(parent processes)");
  MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
  comm_set_epoch(m->world, m->id);  // abort notices on world carry it (transport/failure.hpp)
  node_attach(m->world, ac);  // which parent ranks share this node (the plans' transfers run on world)
  int color = m->member ? 0 : MPI_UNDEFINED;
  mpi_check(MPI_Comm_split(m->world, color, static_cast<int>(m->index), &m->comm),
            "lm_mesh_create: MPI_Comm_split(mesh)");
  if (!m->member) return;
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  m->dim_comms.assign(static_cast<size_t>(m->ndim()), MPI_COMM_NULL);
  for (int d = 0; d < m->ndim(); ++d) {
    Shape c = m->coord;
    c[d] = 0;
    int64_t col = m->grid->index_at(c.data());
    mpi_check(MPI_Comm_split(m->comm, static_cast<int>(col), static_cast<int>(m->coord[d]),
                             &m->dim_comms[d]),
              "lm_mesh_create: MPI_Comm_split(dim)");
    MPI_Comm_set_errhandler(m->dim_comms[d], MPI_ERRORS_RETURN);
  }
  if (priv) {
    m->agree_members = private_agree_comm(m->comm, "lm_mesh_create", timeout, false);
    m->own_agree.push_back(m->agree_members);
    return;
  }
  MPI_Group mg;
  mpi_check(MPI_Comm_group(m->comm, &mg), "lm_mesh_create: MPI_Comm_group(mesh)");
  try {
    m->agree_members = agree_comm_for(m->comm, mg, "lm_mesh_create", timeout);
  } catch (...) {
    MPI_Group_free(&mg);
    throw;
  }
  MPI_Group_free(&mg);
}

}  // namespace

lm_mesh_s *mesh_create(lm_mesh_t *out, int parent_comm_f, int ndim, const int64_t *shape,
                       const lm_mesh_config_t *config) {
  const char *fn = "lm_mesh_create";
  MPI_Comm parent = open_parent(parent_comm_f, fn);
  int psize = 0, prank = 0;
  mpi_check(MPI_Comm_size(parent, &psize), "MPI_Comm_size(parent_comm)");
  mpi_check(MPI_Comm_rank(parent, &prank), "MPI_Comm_rank(parent_comm)");
  // 1. Local checks: a failure here still joins the agreement, so that no rank is left waiting.
  MeshArgs a;
  lm_status_t st = LM_SUCCESS;
  std::string err;
  try {
    check_create_args(fn, out, ndim, shape, config, psize, &a);
  } catch (const Error &e) {
    st = e.status();
    err = e.message();
  }
  // 2. Agree over the parent's processes (on the agreement communicator shared by meshes over
  // these processes, so that ranks which passed different parents over the same processes meet
  // and disagree): settings first, then arguments, mesh id, check level and deadline.
  const int level = a.cfg.check_level >= 0 ? std::min(a.cfg.check_level, 2)
                                           : (int)setting_int(Setting::Check);
  const double tmo = a.cfg.timeout >= 0 ? a.cfg.timeout : setting_seconds(Setting::Timeout);
  const bool priv = private_channels();
  AgreeComm *ac = parent_agree_comm(parent, psize, fn, tmo, &a.parent_world, priv);
  std::unique_ptr<AgreeComm, void (*)(AgreeComm *)> owned(priv ? ac : nullptr, free_agree_comm);
  long long maxes[3] = {(long long)g_mesh_serial.load() + 1, level, (long long)(tmo * 1e6)};
  agree_create(fn, ac, a, st, err, prank, maxes);
  for (uint64_t cur = g_mesh_serial.load(); cur < (uint64_t)maxes[0] &&
                                            !g_mesh_serial.compare_exchange_weak(cur, (uint64_t)maxes[0]);) {
  }
  // 3. The mesh and its communicators.
  auto m = std::make_unique<lm_mesh_s>();
  m->id = (uint64_t)maxes[0];
  m->local_id = ++g_local_ids;
  if (priv) m->own_agree.push_back(owned.release());
  m->check_level = (int)maxes[1];
  m->timeout = (double)maxes[2] / 1e6;
  m->agree_parent = ac;
  m->world_rank = prank;
  m->world_size = psize;
  m->grid = std::make_shared<Grid>(a.shape, a.ranks);
  m->names = a.names;
  m->index = m->grid->index_of(prank);
  m->member = m->index >= 0;
  m->coord.assign(static_cast<size_t>(ndim), 0);
  if (m->member) m->grid->coord_of(m->index, m->coord.data());
  build_comms(m.get(), ac, prank, m->timeout, priv);
  return m.release();
}

namespace {

// The grid's ranks in row-major coordinate order from every rank's (myrow, mycol); the same
// verdict on every rank (they all see the same gathered pairs).
std::vector<int> grid_ranks(const std::vector<int> &all, int psize, int64_t shape[2],
                            const char *fn) {
  int nprow = 0, npcol = 0;
  for (int r = 0; r < psize; ++r) {
    const int row = all[(size_t)(2 * r)], col = all[(size_t)(2 * r + 1)];
    if ((row < 0) != (col < 0))
      fail(LM_ERR_INVALID_ARGUMENT, "%s: rank %d passed (myrow, mycol) = (%d, %d): both or "
           "neither must be -1", fn, r, row, col);
    if (row >= psize || col >= psize)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: rank %d passed (myrow, mycol) = (%d, %d): beyond any "
           "grid of the %d processes of parent_comm", fn, r, row, col, psize);
  }
  for (int r = 0; r < psize; ++r) {
    nprow = std::max(nprow, all[(size_t)(2 * r)] + 1);
    npcol = std::max(npcol, all[(size_t)(2 * r + 1)] + 1);
  }
  if (nprow == 0 || npcol == 0 || (int64_t)nprow * npcol > psize)
    fail(LM_ERR_INVALID_ARGUMENT, "%s: the ranks claim grid coordinates up to (%d, %d): not a "
         "grid of at most %d processes (a rank outside the grid passes myrow = mycol = -1)", fn,
         nprow - 1, npcol - 1, psize);
  std::vector<int> ranks((size_t)nprow * npcol, -1);
  for (int r = 0; r < psize; ++r) {
    const int row = all[(size_t)(2 * r)], col = all[(size_t)(2 * r + 1)];
    if (row < 0) continue;  // outside the grid
    int &at = ranks[(size_t)row * npcol + col];
    if (at >= 0)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: ranks %d and %d both claim grid coordinate (%d, %d)",
           fn, at, r, row, col);
    at = r;
  }
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0)
      fail(LM_ERR_INVALID_ARGUMENT, "%s: no rank claims grid coordinate (%d, %d) of the %d x %d "
           "grid", fn, (int)i / npcol, (int)i % npcol, nprow, npcol);
  shape[0] = nprow;
  shape[1] = npcol;
  return ranks;
}

}  // namespace

lm_mesh_s *mesh_create_grid(lm_mesh_t *out, int parent_comm_f, int myrow, int mycol,
                            const lm_mesh_config_t *config) {
  const char *fn = "lm_mesh_create_grid";
  MPI_Comm parent = open_parent(parent_comm_f, fn);
  int psize = 0;
  mpi_check(MPI_Comm_size(parent, &psize), "MPI_Comm_size(parent_comm)");
  const int mine[2] = {myrow < 0 ? -1 : myrow, mycol < 0 ? -1 : mycol};
  std::vector<int> all((size_t)psize * 2);
  mpi_check(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, parent),
            "lm_mesh_create_grid: MPI_Allgather of grid coordinates");
  int64_t shape[2] = {0, 0};
  const std::vector<int> ranks = grid_ranks(all, psize, shape, fn);
  lm_mesh_config_t cfg = LM_MESH_CONFIG_INIT;
  if (config && config->size >= offsetof(lm_mesh_config_t, ranks))
    std::memcpy(&cfg, config, std::min(config->size, sizeof cfg));
  else if (config)
    cfg.size = config->size;  // (mesh_create names the bad size)
  cfg.ranks = ranks.data();
  cfg.nranks = (int)ranks.size();
  return mesh_create(out, parent_comm_f, 2, shape, &cfg);
}

}  // namespace lm

namespace lm {
namespace {
std::atomic<void (*)(uint64_t)> g_destroy_hooks[4];
}  // namespace

void mesh_on_destroy(void (*hook)(uint64_t id)) {
  for (auto &h : g_destroy_hooks) {
    void (*none)(uint64_t) = nullptr;
    if (h.load() == hook || h.compare_exchange_strong(none, hook)) return;
  }
  fail(LM_ERR_INTERNAL, "mesh_on_destroy: too many hooks");
}
}  // namespace lm

lm_mesh_s::~lm_mesh_s() {
  for (auto &h : lm::g_destroy_hooks)
    if (auto *f = h.load()) f(local_id);
  dev.reset();
  for (lm::AgreeComm *ac : own_agree) lm::free_agree_comm(ac);
  for (auto &kv : union_agree) lm::free_agree_comm(kv.second);
  // Freeing a communicator is local in practice (OpenMPI, MPICH); skipped after MPI_Finalize so
  // that late destructors (Python __del__, Rust Drop) stay safe. A broken mesh's are kept until
  // MPI_Finalize: a failed transfer leaves messages on them that nobody receives, which a new
  // mesh reusing their context ids would otherwise receive (common/mpi.hpp, comm_release).
  for (auto &c : dim_comms) lm::comm_release(&c, broken);
  lm::comm_release(&comm, broken);
  lm::comm_release(&world, broken);
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
  require_mpi(what);
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
  require_mpi(what);
  int v = local != LM_SUCCESS ? (int)(m->grid->size() - m->index) : 0;
  try {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, m->comm), what);
  } catch (const Error &e) {
    mesh_break(m, e);
  }
  if (local != LM_SUCCESS) throw Error(local, err).mark_agreed();
  if (v) {
    int64_t failed = m->grid->size() - v;
    throw Error(LM_ERR_REMOTE, strfmt("%s: rank %d (mesh rank %lld) failed; this rank %d did not",
                                      what, m->grid->rank_at_index(failed), (long long)failed,
                                      m->world_rank)).mark_agreed();
  }
}

void mesh_break(lm_mesh_s *m, const Error &e, lm_mesh_s *m2) {
  // Transport failures, deadlines, peers that failed during a transfer and a mismatch found by
  // the transfer itself (a truncated message: the ranks ran different reshards at LM_CHECK=0)
  // leave requests or messages behind: the mesh cannot be trusted any more, on the failing rank
  // as on the peers that heard of it (LM_ERR_REMOTE), so that no rank's next call waits for
  // ranks that refuse theirs at once. A failure every rank agreed on before any data moved
  // (mesh_agree) leaves nothing behind.
  if (e.agreed()) throw e;
  if (e.status() == LM_ERR_MPI || e.status() == LM_ERR_NCCL || e.status() == LM_ERR_TIMEOUT ||
      e.status() == LM_ERR_REMOTE || e.status() == LM_ERR_MISMATCH) {
    for (lm_mesh_s *x : {m, m2}) {
      if (!x) continue;
      x->broken = true;
      x->broken_why = e.message();
      // A deadline (here, or another rank's that it told this one about) means some rank is
      // unresponsive: the next call must not wait for it again, so the mesh's agreements fail at
      // once too (INVALID_USAGE, naming this cause), on every rank that learned of it.
      if (e.cause() != LM_ERR_TIMEOUT) continue;
      for (AgreeComm *ac : {x->agree_members, x->agree_parent})
        if (ac && !ac->broken) {
          ac->broken = true;
          ac->broken_why = e.message();
        }
    }
  }
  throw e;
}

}  // namespace lm
