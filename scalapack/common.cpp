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

size_t local_span(const int *desc, int myrow, int mycol, int nprow, int npcol) {
  if (myrow < 0 || desc[MB] < 1 || desc[NB] < 1 || desc[M_] < 0 || desc[N_] < 0) return 0;
  int locc = numroc(desc[N_], desc[NB], mycol, desc[CSRC], npcol);
  int locr = numroc(desc[M_], desc[MB], myrow, desc[RSRC], nprow);
  if (locc == 0 || locr == 0) return 0;
  return static_cast<size_t>(desc[LLD]) * static_cast<size_t>(locc - 1) + static_cast<size_t>(locr);
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

// The communicator of the world ranks `ranks` (sorted copy as the key), made once.
MPI_Comm union_comm(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
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
// [6..9] B's, [10] overlap, [11..19] desca, [20..28] descb.
constexpr int REC = 29;

void fill_grid(Grid *g, const std::vector<int> &all, int nproc, int base, int me) {
  for (int p = 0; p < nproc; ++p) {
    const int *r = &all[static_cast<size_t>(p) * REC];
    if (r[base] == 0) continue;
    if (!g->valid) {
      g->valid = true;
      g->nprow = r[base + 1];
      g->npcol = r[base + 2];
      std::memcpy(g->desc, r + (base == 0 ? 11 : 20), sizeof g->desc);
      g->ranks.assign(static_cast<size_t>(g->nprow) * g->npcol, -1);
    }
    int row = r[base + 3], col = r[base + 4];
    if (row < g->nprow && col < g->npcol) g->ranks[static_cast<size_t>(row) * g->npcol + col] = p;
    if (p == me) g->myrow = row, g->mycol = col;
  }
}

// Whether this process's LLD is below max(1, LOCr) (g: nprow npcol myrow mycol).
bool short_lld(const int *desc, const int *g) {
  if (desc[MB] < 1 || desc[M_] < 0 || desc[RSRC] < 0 || desc[RSRC] >= g[0]) return false;
  return desc[LLD] < std::max(1, numroc(desc[M_], desc[MB], g[2], desc[RSRC], g[0]));
}

bool spans_overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
  if (abytes == 0 || bbytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}
}  // namespace

bool exchange(Call *call, int ictxt, const int *desca, const void *a, size_t abytes,
              const int *descb, const void *b, size_t bbytes) {
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
  rec[10] |= (rec[0] && short_lld(desca, rec + 1)) ? 2 : 0;
  rec[10] |= (rec[5] && short_lld(descb, rec + 6)) ? 4 : 0;
  int nproc, me;
  MPI_Comm_size(call->comm, &nproc);
  MPI_Comm_rank(call->comm, &me);
  std::vector<int> all(static_cast<size_t>(nproc) * REC);
  MPI_Allgather(rec, REC, MPI_INT, all.data(), REC, MPI_INT, call->comm);
  fill_grid(&call->a, all, nproc, 0, me);
  fill_grid(&call->b, all, nproc, 5, me);
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
