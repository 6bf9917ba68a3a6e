// SPDX-License-Identifier: BSD-3-Clause
// liblocalmap_scalapack: the BLACS seam, the union communicator, the descriptor exchange, the mesh
// cache, the log and the reference lookup (see dropin.hpp).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dropin.hpp"

namespace lmsp {

const Type &type_of(char letter) {
  static const Type types[] = {{'s', {kDLFloat, 32, 1}, 4},
                               {'d', {kDLFloat, 64, 1}, 8},
                               {'c', {kDLComplex, 64, 1}, 8},
                               {'z', {kDLComplex, 128, 1}, 16},
                               {'i', {kDLInt, 32, 1}, 4}};
  for (const Type &t : types)
    if (t.letter == letter) return t;
  return types[1];
}

namespace {
using gridinfo_fn = void (*)(int, int *, int *, int *, int *);
using igsum_fn = void (*)(int, const char *, const char *, int, int, int *, int, int, int);
using pxerbla_fn = void (*)(int *, const char *, int *, size_t);

void *symbol(const char *name) { return dlsym(RTLD_DEFAULT, name); }
}  // namespace

bool blacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol) {
  *nprow = *npcol = *myrow = *mycol = -1;
  static gridinfo_fn fn = reinterpret_cast<gridinfo_fn>(symbol("Cblacs_gridinfo"));
  if (fn == nullptr || ctxt < 0) return false;
  fn(ctxt, nprow, npcol, myrow, mycol);
  return *nprow >= 1 && *npcol >= 1 && *myrow >= 0 && *mycol >= 0 && *myrow < *nprow &&
         *mycol < *npcol;
}

void report(int ictxt, const char *name, int info) {
  static pxerbla_fn fn = reinterpret_cast<pxerbla_fn>(symbol("pxerbla_"));
  int ctxt = ictxt, code = info;
  if (fn != nullptr) {
    fn(&ctxt, name, &code, std::strlen(name));
    return;
  }
  std::fprintf(stderr, "On entry to %s parameter number %d had an illegal value\n", name, info);
}

int numroc(int n, int nb, int iproc, int isrc, int nprocs) {
  int mydist = (nprocs + iproc - isrc) % nprocs;
  int nblocks = n / nb;
  int num = (nblocks / nprocs) * nb;
  int extra = nblocks % nprocs;
  if (mydist < extra)
    num += nb;
  else if (mydist == extra)
    num += n % nb;
  return num;
}

Norm normalize(const int *desc) {
  Norm n;
  if (desc[DTYPE] != 2) {
    std::memcpy(n.desc, desc, sizeof n.desc);
    return n;
  }
  int imb = desc[4], inb = desc[5], mb = desc[6], nb = desc[7];
  n.desc[DTYPE] = 2;
  if (imb >= 1 && inb >= 1 && imb <= mb && inb <= nb) {
    n.desc[DTYPE] = 1;
    n.drow = mb - imb, n.dcol = nb - inb;
  }
  n.desc[CTXT] = desc[1];
  n.desc[M_] = desc[2] < 0 ? desc[2] : desc[2] + n.drow;
  n.desc[N_] = desc[3] < 0 ? desc[3] : desc[3] + n.dcol;
  n.desc[MB] = mb, n.desc[NB] = nb, n.desc[RSRC] = desc[8], n.desc[CSRC] = desc[9];
  n.desc[LLD] = desc[10];
  return n;
}

int local_rows(const Norm &n, int myrow, int nprow) {
  const int *d = n.desc;
  return numroc(d[M_], d[MB], myrow, d[RSRC], nprow) - (myrow == d[RSRC] ? n.drow : 0);
}

int local_cols(const Norm &n, int mycol, int npcol) {
  const int *d = n.desc;
  return numroc(d[N_], d[NB], mycol, d[CSRC], npcol) - (mycol == d[CSRC] ? n.dcol : 0);
}

size_t local_span(const Norm &n, int elem_size) {
  const int *d = n.desc;
  int nprow, npcol, myrow, mycol;
  if (!blacs_gridinfo(d[CTXT], &nprow, &npcol, &myrow, &mycol)) return 0;
  if (d[DTYPE] != 1 || d[MB] < 1 || d[NB] < 1 || d[M_] < 0 || d[N_] < 0) return 0;
  if (d[RSRC] < 0 || d[RSRC] >= nprow || d[CSRC] < 0 || d[CSRC] >= npcol) return 0;
  int locr = local_rows(n, myrow, nprow), locc = local_cols(n, mycol, npcol);
  if (locc <= 0 || locr <= 0 || d[LLD] < locr) return 0;
  size_t elems = static_cast<size_t>(d[LLD]) * static_cast<size_t>(locc - 1) + static_cast<size_t>(locr);
  return elems * static_cast<size_t>(elem_size);
}

// ScaLAPACK's check of one descriptor and its window: 0, or the failing position (an entry of
// the descriptor as 100 * position + entry, 1-based as Fortran counts them).
int check_window(const Grid &g, int pi, int pj, int pd, int i, int j, int m, int n) {
  if (!g.valid) return pd * 100 + CTXT + 1;
  const int *d = g.desc;
  if (d[DTYPE] != 1) return pd * 100 + DTYPE + 1;
  if (d[M_] < 0) return pd * 100 + M_ + 1;
  if (d[N_] < 0) return pd * 100 + N_ + 1;
  if (d[MB] < 1) return pd * 100 + MB + 1;
  if (d[NB] < 1) return pd * 100 + NB + 1;
  if (d[RSRC] < 0 || d[RSRC] >= g.nprow) return pd * 100 + RSRC + 1;
  if (d[CSRC] < 0 || d[CSRC] >= g.npcol) return pd * 100 + CSRC + 1;
  if (g.short_lld) return pd * 100 + LLD + 1;
  for (int r : g.ranks)
    if (r < 0) return pd * 100 + CTXT + 1;
  if (i < 1) return pi;
  if (j < 1) return pj;
  if (m > 0 && i - 1 + g.drow + m > d[M_]) return pd * 100 + M_ + 1;
  if (n > 0 && j - 1 + g.dcol + n > d[N_]) return pd * 100 + N_ + 1;
  return 0;
}

int64_t window_global(int64_t k, int nb, int me, int s, int p) {
  return ((k / nb) * p + (me - s + p) % p) * nb + k % nb;
}

bool window_aligned(const Grid &g, int i, int j) {
  return (g.nprow == 1 || (i - 1 + g.drow) % g.desc[MB] == 0) &&
         (g.npcol == 1 || (j - 1 + g.dcol) % g.desc[NB] == 0);
}

Window window_layout(const Grid &g, int i, int j, int m, int n) {
  const int *d = g.desc;
  int iv = i + g.drow, jv = j + g.dcol;  // in the matrix with the unstored front
  bool one_row = g.nprow == 1, one_col = g.npcol == 1;
  Window w;
  w.sr = one_row ? 0 : (d[RSRC] + (iv - 1) / d[MB]) % g.nprow;
  w.sc = one_col ? 0 : (d[CSRC] + (jv - 1) / d[NB]) % g.npcol;
  w.pl[0] = LM_PLACEMENT_BLOCK_CYCLIC(1, d[MB], w.sr);
  w.pl[1] = LM_PLACEMENT_BLOCK_CYCLIC(0, d[NB], w.sc);
  w.global[0] = n, w.global[1] = m;
  w.shape[0] = w.shape[1] = 0;
  w.offset = 0;
  if (g.myrow < 0) return w;
  int lr0 = (one_row ? iv - 1 : numroc(iv - 1, d[MB], g.myrow, d[RSRC], g.nprow)) -
            (g.myrow == d[RSRC] ? g.drow : 0);
  int lc0 = (one_col ? jv - 1 : numroc(jv - 1, d[NB], g.mycol, d[CSRC], g.npcol)) -
            (g.mycol == d[CSRC] ? g.dcol : 0);
  w.shape[1] = one_row ? m : numroc(m, d[MB], g.myrow, w.sr, g.nprow);
  w.shape[0] = one_col ? n : numroc(n, d[NB], g.mycol, w.sc, g.npcol);
  w.offset = static_cast<size_t>(lr0) + static_cast<size_t>(lc0) * static_cast<size_t>(g.lld);
  return w;
}

lm_status_t window_tensor(lm_dist_tensor_t *out, lm_mesh_t mesh, const Grid &g, const Window &w,
                          void *data, int lld, const Type &t) {
  DLTensor local = {};
  local.ndim = 2;
  local.dtype = t.dtype;
  local.device = {kDLCPU, 0};
  int64_t shape[2] = {w.shape[0], w.shape[1]}, strides[2] = {lld, 1};
  local.shape = shape;
  if (g.myrow >= 0) {
    local.data = lld > 0 ? static_cast<char *>(data) + w.offset * t.size : data;
    local.strides = lld > 0 && shape[0] > 0 && shape[1] > 0 ? strides : nullptr;
  }
  lm_placement_t pl[2] = {w.pl[0], w.pl[1]};
  int64_t global[2] = {w.global[0], w.global[1]};
  return lm_dist_tensor_from_local(out, mesh, &local, pl, LM_SHAPE_GIVEN, global,
                                   LM_FROM_LOCAL_BORROW);
}

namespace {
// The world ranks of the processes of context ictxt, row-major over its grid, from one BLACS
// sum over "All" (exact whatever the grid's order or the system context it came from).
std::vector<int> context_ranks(int ictxt, int nprow, int npcol, int myrow, int mycol) {
  static igsum_fn fn = reinterpret_cast<igsum_fn>(symbol("Cigsum2d"));
  std::vector<int> ranks(static_cast<size_t>(nprow) * npcol, 0);
  if (fn == nullptr) return {};
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  ranks[static_cast<size_t>(myrow) * npcol + mycol] = world + 1;
  fn(ictxt, "All", " ", static_cast<int>(ranks.size()), 1, ranks.data(),
     static_cast<int>(ranks.size()), -1, -1);
  for (int &r : ranks) r -= 1;
  return ranks;
}

std::mutex cache_mutex;
std::map<std::vector<int>, MPI_Comm> comm_cache;
std::map<std::pair<MPI_Comm, std::vector<int>>, lm_mesh_t> mesh_cache;

// Frees the cached meshes and communicators when MPI finalizes: MPI_Finalize deletes
// MPI_COMM_SELF's attributes first, the latest set first, so this runs before localmap's own
// teardown (whose attribute was set at its initialisation, before any call reached here).
int release_caches(MPI_Comm, int, void *, void *) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (auto &m : mesh_cache) (void)lm_mesh_destroy(&m.second);
  mesh_cache.clear();
  for (auto &c : comm_cache)
    if (c.second != MPI_COMM_NULL) MPI_Comm_free(&c.second);
  comm_cache.clear();
  return MPI_SUCCESS;
}

// Hooks release_caches to MPI_Finalize, once (called with cache_mutex held).
void release_at_finalize() {
  static bool hooked = false;
  if (hooked) return;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release_caches, &key, nullptr) != MPI_SUCCESS)
    return;
  if (MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) == MPI_SUCCESS) hooked = true;
  MPI_Comm_free_keyval(&key);  // the attribute keeps it until MPI_COMM_SELF's are deleted
}

// The communicator of the world ranks `ranks` (sorted copy as the key), made once.
MPI_Comm union_comm(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  release_at_finalize();
  auto it = comm_cache.find(ranks);
  if (it != comm_cache.end()) return it->second;
  MPI_Group world_group, group;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Comm_create_group(MPI_COMM_WORLD, group, 0x4c4d, &comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  comm_cache.emplace(ranks, comm);
  return comm;
}

// Exchange record of one process: [0] in A, [1..4] A's nprow npcol myrow mycol, [5] in B,
// [6..9] B's, [10] flags (overlap, A's LLD short, B's), [11..19] desca, [20..28] descb,
// [29..30] A's drow dcol, [31..32] B's.
constexpr int REC = 33;

void fill_grid(Grid *g, const std::vector<int> &all, int nproc, int base, int me) {
  for (int p = 0; p < nproc; ++p) {
    const int *r = &all[static_cast<size_t>(p) * REC];
    if (r[base] == 0) continue;
    if (!g->valid) {
      g->valid = true;
      g->nprow = r[base + 1];
      g->npcol = r[base + 2];
      std::memcpy(g->desc, r + (base == 0 ? 11 : 20), sizeof g->desc);
      g->drow = r[base == 0 ? 29 : 31], g->dcol = r[base == 0 ? 30 : 32];
      g->ranks.assign(static_cast<size_t>(g->nprow) * g->npcol, -1);
    }
    int row = r[base + 3], col = r[base + 4];
    if (row < g->nprow && col < g->npcol) g->ranks[static_cast<size_t>(row) * g->npcol + col] = p;
    if (p == me) g->myrow = row, g->mycol = col;
  }
}

// Whether this process's LLD is below max(1, LOCr) (g: nprow npcol myrow mycol).
bool short_lld(const Norm &n, const int *g) {
  const int *d = n.desc;
  if (d[MB] < 1 || d[M_] < 0 || d[RSRC] < 0 || d[RSRC] >= g[0]) return false;
  return d[LLD] < std::max(1, local_rows(n, g[2], g[0]));
}

bool spans_overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
  if (abytes == 0 || bbytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}
}  // namespace

bool exchange(Call *call, int ictxt, const Norm &na, const void *a, size_t abytes,
              const Norm &nb, const void *b, size_t bbytes) {
  const int *desca = na.desc, *descb = nb.desc;
  int nprow, npcol, myrow, mycol;
  if (!blacs_gridinfo(ictxt, &nprow, &npcol, &myrow, &mycol)) return false;
  std::vector<int> ranks = context_ranks(ictxt, nprow, npcol, myrow, mycol);
  if (ranks.empty()) return false;
  call->comm = union_comm(ranks);
  int rec[REC] = {0};
  int g[4];
  rec[0] = blacs_gridinfo(desca[CTXT], &g[0], &g[1], &g[2], &g[3]);
  if (rec[0]) std::memcpy(rec + 1, g, sizeof g), std::memcpy(rec + 11, desca, DLEN * sizeof(int));
  rec[5] = blacs_gridinfo(descb[CTXT], &g[0], &g[1], &g[2], &g[3]);
  if (rec[5]) std::memcpy(rec + 6, g, sizeof g), std::memcpy(rec + 20, descb, DLEN * sizeof(int));
  rec[10] = (rec[0] && rec[5] && spans_overlap(a, abytes, b, bbytes)) ? 1 : 0;
  rec[10] |= (rec[0] && short_lld(na, rec + 1)) ? 2 : 0;
  rec[10] |= (rec[5] && short_lld(nb, rec + 6)) ? 4 : 0;
  rec[29] = na.drow, rec[30] = na.dcol, rec[31] = nb.drow, rec[32] = nb.dcol;
  int nproc, me;
  MPI_Comm_size(call->comm, &nproc);
  MPI_Comm_rank(call->comm, &me);
  std::vector<int> all(static_cast<size_t>(nproc) * REC);
  MPI_Allgather(rec, REC, MPI_INT, all.data(), REC, MPI_INT, call->comm);
  fill_grid(&call->a, all, nproc, 0, me);
  fill_grid(&call->b, all, nproc, 5, me);
  call->a.lld = rec[0] ? desca[LLD] : 0;  // this process's own leading dimensions
  call->b.lld = rec[5] ? descb[LLD] : 0;
  for (int p = 0; p < nproc; ++p) {
    int flags = all[static_cast<size_t>(p) * REC + 10];
    call->overlap = call->overlap || (flags & 1) != 0;
    call->a.short_lld = call->a.short_lld || (flags & 2) != 0;
    call->b.short_lld = call->b.short_lld || (flags & 4) != 0;
  }
  return true;
}

lm_mesh_t mesh_of(const Call &call, const Grid &g) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  release_at_finalize();
  std::vector<int> key = g.ranks;
  key.push_back(g.nprow);
  auto it = mesh_cache.find({call.comm, key});
  if (it != mesh_cache.end()) return it->second;
  lm_mesh_config_t config = LM_MESH_CONFIG_INIT;
  config.ranks = g.ranks.data();
  config.nranks = static_cast<int>(g.ranks.size());
  int64_t shape[2] = {g.nprow, g.npcol};
  lm_mesh_t mesh = nullptr;
  if (lm_mesh_create(&mesh, static_cast<int>(MPI_Comm_c2f(call.comm)), 2, shape, &config) !=
      LM_SUCCESS)
    return nullptr;
  mesh_cache.emplace(std::make_pair(call.comm, key), mesh);
  return mesh;
}

void log_call(const char *routine, const char *path, const char *why) {
  const char *env = std::getenv("LM_SCALAPACK_LOG");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  FILE *out = stderr;
  if (std::strcmp(env, "1") != 0) {
    char name[4096];
    std::snprintf(name, sizeof name, "%s.%d", env, world);
    out = std::fopen(name, "a");
    if (out == nullptr) return;
  }
  std::fprintf(out, "lm_scalapack[%d]: %s %s%s%s\n", world, routine, path, *why ? ": " : "", why);
  if (out != stderr) std::fclose(out);
}

void *reference(const char *symbol_name) { return dlsym(RTLD_NEXT, symbol_name); }

}  // namespace lmsp
