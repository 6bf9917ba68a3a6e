// SPDX-License-Identifier: BSD-3-Clause
#include "mesh/agree.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "mesh/mesh.hpp"
#include "transport/node.hpp"

namespace lm {

namespace {

std::mutex g_registry_mutex;
std::map<std::vector<int>, AgreeComm *> *g_registry = nullptr;
int g_free_keyval = MPI_KEYVAL_INVALID;

// Frees the agreement communicators when MPI_COMM_SELF is freed (the first thing MPI_Finalize
// does), so sanitizer runs see no leak and no communicator outlives MPI.
int free_registry(MPI_Comm, int, void *, void *) {
  std::lock_guard<std::mutex> lk(g_registry_mutex);
  if (g_registry) {
    for (auto &kv : *g_registry) {
      if (kv.second->comm != MPI_COMM_NULL) MPI_Comm_free(&kv.second->comm);
      delete kv.second;
    }
    delete g_registry;
    g_registry = nullptr;
  }
  return MPI_SUCCESS;
}

constexpr int kCreateTag = 0x4c4d;  // MPI_Comm_create_group tag of localmap

}  // namespace

AgreeComm *agree_comm_for(MPI_Comm base, MPI_Group group) {
  int n = 0;
  mpi_check(MPI_Group_size(group, &n), "MPI_Group_size");
  std::vector<int> in((size_t)n), out((size_t)n);
  for (int i = 0; i < n; ++i) in[(size_t)i] = i;
  MPI_Group wg;
  mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &wg), "MPI_Comm_group(MPI_COMM_WORLD)");
  int rc = MPI_Group_translate_ranks(group, n, in.data(), wg, out.data());
  bool in_world = rc == MPI_SUCCESS;
  for (int r : out)
    if (r == MPI_UNDEFINED) in_world = false;
  std::vector<int> key = out;
  std::sort(key.begin(), key.end());
  std::lock_guard<std::mutex> lk(g_registry_mutex);
  if (in_world && g_registry) {
    auto it = g_registry->find(key);
    if (it != g_registry->end()) {
      MPI_Group_free(&wg);
      return it->second;
    }
  }
  auto *ac = new AgreeComm();
  if (in_world) {
    MPI_Group sorted;
    MPI_Group_incl(wg, n, key.data(), &sorted);
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, sorted, kCreateTag, &ac->comm);
    MPI_Group_free(&sorted);
  } else {
    // Processes outside MPI_COMM_WORLD (spawned): an unshared communicator of this mesh only.
    rc = MPI_Comm_create_group(base, group, kCreateTag, &ac->comm);
  }
  MPI_Group_free(&wg);
  if (rc != MPI_SUCCESS) {
    delete ac;
    mpi_check(rc, "MPI_Comm_create_group (agreement communicator)");
  }
  MPI_Comm_set_errhandler(ac->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(ac->comm, &ac->rank);
  MPI_Comm_size(ac->comm, &ac->size);
  node_probe(ac);  // collective over the new set, like its creation
  if (!g_registry) {
    g_registry = new std::map<std::vector<int>, AgreeComm *>();
    if (g_free_keyval == MPI_KEYVAL_INVALID)
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_registry, &g_free_keyval, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, g_free_keyval, nullptr);
  }
  if (in_world) {
    (*g_registry)[key] = ac;
  } else {
    // Not shareable: kept under a key no world set can have, freed with the others.
    std::vector<int> k{-1 - (int)g_registry->size()};
    (*g_registry)[k] = ac;
  }
  return ac;
}

bool parse_check_level(const char *s, int *level) {
  if (!s || !*s) {
    *level = 1;
    return true;
  }
  if ((s[0] == '0' || s[0] == '1' || s[0] == '2') && s[1] == '\0') {
    *level = s[0] - '0';
    return true;
  }
  *level = 1;
  return false;
}

bool parse_timeout(const char *s, double *seconds) {
  *seconds = 0;
  if (!s || !*s) return true;
  char *end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= 0) || v > 1e9) return false;  // !(v >= 0): NaN too
  *seconds = v;
  return true;
}

// A value the library cannot read is not silently taken as something else: it is named once on
// stderr (no call is failing, so there is no status to return), and the default applies.
int env_check_level() {
  static const int level = [] {
    const char *s = std::getenv("LM_CHECK");
    int v = 1;
    if (!parse_check_level(s, &v))
      std::fprintf(stderr, "localmap: LM_CHECK=%s is not 0, 1 or 2; using the default 1\n", s);
    return v;
  }();
  return level;
}

double env_timeout() {
  static const double t = [] {
    const char *s = std::getenv("LM_TIMEOUT");
    double v = 0;
    if (!parse_timeout(s, &v))
      std::fprintf(stderr,
                   "localmap: LM_TIMEOUT=%s is not a number of seconds >= 0; no deadline\n", s);
    return v;
  }();
  return t;
}

uint64_t hash_placements(const lm_placement_t *pl, int n) {
  Hasher h;
  if (!pl) {
    h.u64(0x6e756c6cull);
    return h.h;
  }
  h.bytes(pl, sizeof(lm_placement_t) * (size_t)(n > 0 ? n : 0));
  return h.h;
}

uint64_t hash_shape(const int64_t *s, int n) {
  Hasher h;
  h.u64((uint64_t)n);
  if (!s) {
    h.u64(0x6e756c6cull);
    return h.h;
  }
  if (n > 0 && n <= 64) h.bytes(s, sizeof(int64_t) * (size_t)n);
  return h.h;
}

uint64_t hash_dtype(DLDataType d) {
  return (uint64_t)d.code << 24 | (uint64_t)d.bits << 16 | d.lanes;
}

Fingerprint::Fingerprint(const char *op) {
  Hasher h;
  h.bytes(op, std::strlen(op));
  add("operation", h.h);
  names_[0] = op;  // field 0 describes itself
}

uint64_t Fingerprint::total() const {
  Hasher h;
  for (int i = 0; i < n_; ++i) h.u64(hashes_[i]);
  return h.h;
}

namespace {
thread_local double t_transfer_timeout = 0;
}
double transfer_timeout() { return t_transfer_timeout; }
TimeoutScope::TimeoutScope(double seconds) : saved_(t_transfer_timeout) {
  t_transfer_timeout = seconds;
}
TimeoutScope::~TimeoutScope() { t_transfer_timeout = saved_; }

std::string status_name(lm_status_t s) {
  std::string full = lm_status_string(s);
  size_t c = full.find(':');
  return c == std::string::npos ? full : full.substr(0, c);
}

void wait_deadline(MPI_Request *req, double timeout, const char *what, const char *who) {
  if (timeout <= 0) {
    mpi_check(MPI_Wait(req, MPI_STATUS_IGNORE), what);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  int flag = 0;
  unsigned spins = 0;
  for (;;) {
    mpi_check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), what);
    if (flag) return;
    if ((++spins & 63) == 0) {
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el > timeout)
        fail(LM_ERR_TIMEOUT, "%s: no answer within LM_TIMEOUT = %g s%s", what, timeout, who);
    }
  }
}

namespace {

constexpr int kMsg = 200, kDesc = 72;

struct Record {
  int32_t status;
  int32_t parent_rank;
  int64_t mesh_rank;
  int32_t nfields;
  int32_t pad;
  uint64_t hash[kMaxFields + 1];  // + the sequence number
  char msg[kMsg + 8];
  char desc[kMaxFields + 1][kDesc];
};

void copy_text(char *dst, size_t cap, const std::string &s) {
  size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
  if (s.size() > cap - 1 && cap > 4) std::memcpy(dst + cap - 4, "...", 4);
}

[[noreturn]] void broken_comm(const AgreeArgs &a, const Error &e) {
  a.ac->broken = true;
  a.ac->broken_why = e.message();
  if (a.m2 && a.m2 != a.m1 && (e.status() == LM_ERR_MPI || e.status() == LM_ERR_TIMEOUT)) {
    a.m2->broken = true;
    a.m2->broken_why = e.message();
  }
  if (a.m1) mesh_break(a.m1, e);
  throw e;
}

std::string rank_label(const Record &r, long long root) {
  if (r.mesh_rank >= 0)
    return strfmt("rank %d (mesh rank %lld%s)", r.parent_rank, (long long)r.mesh_rank,
                  r.mesh_rank == root ? ", the root" : "");
  return strfmt("rank %d", r.parent_rank);
}

}  // namespace

void agree(const AgreeArgs &a) {
  AgreeComm *ac = a.ac;
  if (ac->broken)
    fail(LM_ERR_INVALID_USAGE, "%s: the mesh is broken by an earlier failure (%s)", a.fn,
         ac->broken_why.c_str());
  if (a.nmax < 0 || a.nmax > kMaxAgreeMaxes)
    fail(LM_ERR_INTERNAL, "%s: %d agreement values (at most %d)", a.fn, a.nmax, kMaxAgreeMaxes);
  const uint64_t seq = ++ac->seq;
  const bool failed = a.local != LM_SUCCESS;
  uint64_t h = 0;
  if (a.fp) {
    Hasher hh;
    hh.u64(a.fp->total());
    hh.u64(seq);
    h = hh.h;
  }
  const int nv = 3 + a.nmax;
  long long v[3 + kMaxAgreeMaxes];
  v[0] = failed ? (long long)(ac->size - ac->rank) : 0;
  v[1] = (long long)(h >> 1);
  v[2] = -(long long)(h >> 1);
  for (int i = 0; i < a.nmax; ++i) v[3 + i] = a.maxes[i];
  try {
    if (ac->board) {  // every rank of the set on this node: shared memory (transport/node.hpp)
      board_max(ac, seq, v, nv, a.timeout, a.fn, a.publish, a.publish_ctx);
    } else if (a.timeout > 0) {
      MPI_Request req;
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, v, nv, MPI_LONG_LONG, MPI_MAX, ac->comm, &req),
                strfmt("%s: MPI_Iallreduce (agreement)", a.fn).c_str());
      wait_deadline(&req, a.timeout, strfmt("%s: agreement", a.fn).c_str(),
                    " (some rank of the mesh did not make this call)");
    } else {
      int rc = MPI_Allreduce(MPI_IN_PLACE, v, nv, MPI_LONG_LONG, MPI_MAX, ac->comm);
      if (rc != MPI_SUCCESS) mpi_check(rc, strfmt("%s: MPI_Allreduce (agreement)", a.fn).c_str());
    }
  } catch (const Error &e) {
    broken_comm(a, e);
  }
  for (int i = 0; i < a.nmax; ++i) a.maxes[i] = v[3 + i];
  if (v[0] == 0 && v[1] == -v[2]) return;  // the common case: one small allreduce

  // Second round: every rank's record.
  std::vector<Record> all((size_t)ac->size);
  Record mine;
  std::memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)a.local;
  mine.parent_rank = a.parent_rank;
  mine.mesh_rank = a.mesh_rank;
  if (failed && a.err) copy_text(mine.msg, kMsg, *a.err);
  if (a.fp) {
    mine.nfields = a.fp->size();
    for (int i = 0; i < a.fp->size(); ++i) mine.hash[i] = a.fp->hash(i);
    mine.hash[a.fp->size()] = seq;
    if (!failed) {
      copy_text(mine.desc[0], kDesc, a.fp->name(0));
      for (int i = 1; i < a.fp->size(); ++i)
        copy_text(mine.desc[i], kDesc, a.describe ? a.describe(a.ctx, i) : std::string("?"));
      copy_text(mine.desc[a.fp->size()], kDesc, std::to_string(seq));
    }
  }
  try {
    MPI_Request req;
    mpi_check(MPI_Iallgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine,
                             MPI_BYTE, ac->comm, &req),
              strfmt("%s: MPI_Iallgather (agreement)", a.fn).c_str());
    wait_deadline(&req, a.timeout, strfmt("%s: agreement", a.fn).c_str());
  } catch (const Error &e) {
    broken_comm(a, e);
  }
  int lowest = -1, nfailed = 0;
  for (int r = 0; r < ac->size; ++r)
    if (all[(size_t)r].status != 0) {
      if (lowest < 0) lowest = r;
      ++nfailed;
    }
  if (failed) throw Error(a.local, a.err ? *a.err : std::string(a.fn));
  if (lowest >= 0) {
    const Record &f = all[(size_t)lowest];
    std::string msg = strfmt("%s: %s failed: %s: %s", a.fn, rank_label(f, a.root).c_str(),
                             status_name((lm_status_t)f.status).c_str(), f.msg);
    if (nfailed > 1) msg += strfmt(" (and %d other rank%s failed)", nfailed - 1, nfailed > 2 ? "s" : "");
    msg += strfmt("; this rank %d did not", a.parent_rank);
    throw Error(LM_ERR_REMOTE, msg);
  }
  // Mismatch: the first field whose hash differs (fields both sides have), the sequence number
  // when the field lists are the same, else the operation.
  int field = -1;
  const Record &r0 = all[0];
  int common = r0.nfields;
  bool same_count = true;
  for (int r = 1; r < ac->size; ++r) {
    common = std::min(common, (int)all[(size_t)r].nfields);
    if (all[(size_t)r].nfields != r0.nfields) same_count = false;
  }
  for (int i = 0; i < common + (same_count ? 1 : 0) && field < 0; ++i)
    for (int r = 1; r < ac->size; ++r)
      if (all[(size_t)r].hash[i] != r0.hash[i]) {
        field = i;
        break;
      }
  const char *fname = "operation";
  if (field == r0.nfields && same_count)
    fname = "call sequence number (a rank skipped or repeated a call)";
  else if (field > 0)
    fname = a.fp->name(field);
  if (field < 0) field = 0;  // only the field lists differ: report the operation
  std::string msg = strfmt("%s: ranks disagree on %s:", a.fn, fname);
  // Distinct values, each with the ranks that hold it (first four values).
  std::vector<int> done((size_t)ac->size, 0);
  int groups = 0;
  for (int r = 0; r < ac->size; ++r) {
    if (done[(size_t)r]) continue;
    const Record &x = all[(size_t)r];
    std::string who;
    int cnt = 0;
    for (int q = r; q < ac->size; ++q) {
      const Record &y = all[(size_t)q];
      bool same = y.hash[field] == x.hash[field];
      if (done[(size_t)q] || !same) continue;
      done[(size_t)q] = 1;
      if (cnt < 3) who += strfmt("%s%d", cnt ? "," : "", y.parent_rank);
      ++cnt;
    }
    if (cnt > 3) who += strfmt(",... (%d ranks)", cnt);
    if (groups < 4)
      msg += strfmt("%s rank%s %s %s", groups ? "," : "", cnt > 1 ? "s" : "", who.c_str(),
                    x.desc[field]);
    else if (groups == 4)
      msg += ", ...";
    ++groups;
  }
  throw Error(LM_ERR_MISMATCH, msg);
}

}  // namespace lm
