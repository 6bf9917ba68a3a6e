// SPDX-License-Identifier: BSD-3-Clause
#include "comm/agree.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "comm/board.hpp"
#include "comm/node.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "layout/extents.hpp"

namespace lm {

namespace {

std::mutex g_registry_mutex;
std::map<std::vector<int>, AgreeComm *> *g_registry = nullptr;
// Channels with abandoned requests still pending at MPI_Finalize: never freed (never destroyed).
std::vector<AgreeComm *> *g_kept = new std::vector<AgreeComm *>();
int g_free_keyval = MPI_KEYVAL_INVALID;

// Whether the requests of ac's abandoned agreements completed (they are then forgotten).
bool abandoned_done(AgreeComm *ac) {
  if (ac->abandoned.empty()) return true;
  if (!mpi_alive()) return false;
  for (auto &x : ac->abandoned) {
    int flag = 0;
    if (x.req != MPI_REQUEST_NULL && (MPI_Test(&x.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag))
      return false;
  }
  ac->abandoned.clear();
  return true;
}

// Frees the agreement communicators when MPI_COMM_SELF is freed (the first thing MPI_Finalize
// does), so sanitizer runs see no leak and no communicator outlives MPI.
int free_registry(MPI_Comm, int, void *, void *) {
  std::lock_guard<std::mutex> lk(g_registry_mutex);
  if (g_registry) {
    for (auto &kv : *g_registry) {
      AgreeComm *ac = kv.second;
      if (ac->comm != MPI_COMM_NULL && abandoned_done(ac)) MPI_Comm_free(&ac->comm);
      // Kept (reachable, never destroyed): meshes that outlive MPI still point at their channels,
      // and a pending abandoned request may still write into its buffers.
      ac->broken = true;
      ac->broken_why = "MPI was finalized";
      g_kept->push_back(ac);
    }
    delete g_registry;
    g_registry = nullptr;
  }
  return MPI_SUCCESS;
}

constexpr int kCreateTag = 0x4c4d;  // MPI_Comm_create_group tag of localmap

}  // namespace

namespace {

// The world ranks of `group`, sorted (the registry key); false when some process is not in
// MPI_COMM_WORLD (spawned processes: not shareable).
bool world_key(MPI_Group group, std::vector<int> *key) {
  int n = 0;
  mpi_check(MPI_Group_size(group, &n), "MPI_Group_size");
  std::vector<int> in((size_t)n);
  key->assign((size_t)n, MPI_UNDEFINED);
  for (int i = 0; i < n; ++i) in[(size_t)i] = i;
  MPI_Group wg;
  mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &wg), "MPI_Comm_group(MPI_COMM_WORLD)");
  int rc = MPI_Group_translate_ranks(group, n, in.data(), wg, key->data());
  MPI_Group_free(&wg);
  bool in_world = rc == MPI_SUCCESS;
  for (int r : *key)
    if (r == MPI_UNDEFINED) in_world = false;
  std::sort(key->begin(), key->end());
  return in_world;
}

// A new agreement communicator over the set (collective over it), ranks in world order.
AgreeComm *create_agree_comm(MPI_Comm base, MPI_Group group, const std::vector<int> &key,
                             bool in_world) {
  auto ac = std::make_unique<AgreeComm>();
  int rc;
  if (in_world) {
    MPI_Group wg, sorted;
    mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &wg), "MPI_Comm_group(MPI_COMM_WORLD)");
    MPI_Group_incl(wg, (int)key.size(), key.data(), &sorted);
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, sorted, kCreateTag, &ac->comm);
    MPI_Group_free(&sorted);
    MPI_Group_free(&wg);
  } else {
    // Processes outside MPI_COMM_WORLD (spawned): an unshared communicator of this mesh only.
    rc = MPI_Comm_create_group(base, group, kCreateTag, &ac->comm);
  }
  mpi_check(rc, "MPI_Comm_create_group (agreement communicator)");
  MPI_Comm_set_errhandler(ac->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(ac->comm, &ac->rank);
  MPI_Comm_size(ac->comm, &ac->size);
  return ac.release();
}

// Keeps ac for the life of MPI (freed when MPI_COMM_SELF is, at MPI_Finalize). Registry locked.
void register_agree_comm(AgreeComm *ac, const std::vector<int> &key, bool in_world) {
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
}

}  // namespace

// How the set's agreements run, from its agreed settings and its board (the same on every rank).
static void choose_rounds(AgreeComm *ac) {
  const int64_t most = setting_int(Setting::AgreeMessages);
  ac->by_messages = !ac->board && ac->size >= 2 && ac->size <= most;
  ac->ride = ac->by_messages && setting_u(Setting::MessageExchangeBytes) > 0;
  ac->ride_apart = ac->ride && !set_spans_nodes(ac);
}

AgreeComm *agree_comm_for(MPI_Comm base, MPI_Group group, const char *fn, double timeout) {
  std::vector<int> key;
  const bool in_world = world_key(group, &key);
  std::lock_guard<std::mutex> lk(g_registry_mutex);
  if (in_world && g_registry) {
    auto it = g_registry->find(key);
    if (it != g_registry->end()) return it->second;
  }
  AgreeComm *ac = create_agree_comm(base, group, key, in_world);
  try {
    // Before anything that branches on a setting (the node probe and the board are collectives
    // that only some ranks would enter): the set agrees on its settings.
    settings_agree(ac, fn, timeout);
  } catch (const Error &e) {
    if (!ac->abandoned.empty()) {  // a request given up may still use it: kept, broken
      ac->broken = true;
      ac->broken_why = e.message();
      register_agree_comm(ac, key, false);
      throw;
    }
    if (mpi_alive()) MPI_Comm_free(&ac->comm);
    delete ac;
    throw;
  }
  node_probe(ac);  // collective over the new set, like its creation
  choose_rounds(ac);
  register_agree_comm(ac, key, in_world);
  return ac;
}

bool private_channels() {
  int level = MPI_THREAD_SINGLE;
  return mpi_alive() && MPI_Query_thread(&level) == MPI_SUCCESS && level == MPI_THREAD_MULTIPLE;
}

namespace {
// A new channel: settings (when asked) before the node probe, which branches on them.
AgreeComm *finish_private(AgreeComm *ac, const char *fn, double timeout, bool settings) {
  MPI_Comm_set_errhandler(ac->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(ac->comm, &ac->rank);
  MPI_Comm_size(ac->comm, &ac->size);
  try {
    if (settings) settings_agree(ac, fn, timeout);
  } catch (...) {
    free_agree_comm(ac);
    throw;
  }
  node_probe(ac);
  choose_rounds(ac);
  return ac;
}
}  // namespace

AgreeComm *private_agree_comm(MPI_Comm comm, const char *fn, double timeout, bool settings) {
  auto ac = std::make_unique<AgreeComm>();
  mpi_check(MPI_Comm_dup(comm, &ac->comm), strfmt("%s: MPI_Comm_dup (agreement channel)", fn).c_str());
  return finish_private(ac.release(), fn, timeout, settings);
}

AgreeComm *private_agree_comm_of(MPI_Comm base, MPI_Group group, const char *fn, double timeout) {
  auto ac = std::make_unique<AgreeComm>();
  mpi_check(MPI_Comm_create_group(base, group, kCreateTag, &ac->comm),
            strfmt("%s: MPI_Comm_create_group (agreement channel)", fn).c_str());
  return finish_private(ac.release(), fn, timeout, false);
}

void free_agree_comm(AgreeComm *ac) {
  if (!ac) return;
  if (!abandoned_done(ac)) {  // a request given up may still use it: freed at MPI_Finalize
    std::lock_guard<std::mutex> lk(g_registry_mutex);
    register_agree_comm(ac, {}, false);
    return;
  }
  if (ac->comm != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&ac->comm);
  delete ac;
}

namespace {
// What one rank says of its must-agree settings (settings_agree's second round).
struct SettingsRecord {
  int32_t world_rank;
  uint32_t from_env;  // bit i: setting i came from the environment
  uint64_t value[kMustAgreeCount];
};
}  // namespace

void settings_agree(AgreeComm *ac, const char *fn, double timeout) {
  SettingsRecord mine{};
  mine.world_rank = world_rank_or_minus1();
  Hasher h;
  for (int i = 0; i < kMustAgreeCount; ++i) {
    mine.value[i] = setting_u((Setting)i);
    if (setting((Setting)i).from_env) mine.from_env |= 1u << i;
    h.u64(mine.value[i]);
  }
  long long v[2] = {(long long)(h.h >> 1), -(long long)(h.h >> 1)};
  // Before any deadline is agreed: the same two rounds on every rank (see mpi_max).
  mpi_max(ac, v, 2, timeout, strfmt("%s: settings agreement", fn).c_str(),
          " (some rank of the parent communicator did not make this call)", Rounds::kAlwaysTwo);
  if (v[0] == -v[1]) return;
  std::vector<SettingsRecord> all((size_t)ac->size);
  mpi_check(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine,
                          MPI_BYTE, ac->comm),
            strfmt("%s: MPI_Allgather (settings agreement)", fn).c_str());
  int var = 0;  // the first variable that differs
  for (; var < kMustAgreeCount; ++var) {
    bool same = true;
    for (const SettingsRecord &r : all) same = same && r.value[var] == all[0].value[var];
    if (!same) break;
  }
  if (var == kMustAgreeCount) var = 0;  // hash collision of equal values cannot happen
  const char *name = setting_info((Setting)var).name;
  std::string msg = strfmt("%s: ranks disagree on the setting %s (it changes which collectives run "
                           "or how bytes travel, so every rank needs the same value):", fn, name);
  int listed = 0;
  for (const SettingsRecord &r : all) {
    if (listed == 8) {
      msg += " ...";
      break;
    }
    msg += strfmt("%s world rank %d: %s (%s)", listed ? "," : "", r.world_rank,
                  setting_format((Setting)var, r.value[var]).c_str(),
                  (r.from_env >> var) & 1 ? "environment" : "default");
    ++listed;
  }
  msg += strfmt("; set it alike on every rank (mpirun -x %s, or unset it)", name);
  throw Error(LM_ERR_MISMATCH, msg);
}

uint64_t hash_placements(const lm_placement_t *pl, int n) {
  Hasher h;
  if (!pl) {
    h.u64(0x6e756c6cull);
    return h.h;
  }
  for (int i = 0; i < n; ++i) {
    lm_placement_t p = pl[i];
    std::shared_ptr<const Extents> r;
    if (p.kind == LM_RAGGED && (r = extents_find(p.extents))) {
      p.extents = 0;  // ranks may hold other ids for the same extents: their offsets count
      h.u64(r->off.size());
      h.bytes(r->off.data(), r->off.size() * sizeof(int64_t));
    }
    h.bytes(&p, sizeof p);
  }
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

std::string status_name(lm_status_t s) {
  std::string full = lm_status_string(s);
  size_t c = full.find(':');
  return c == std::string::npos ? full : full.substr(0, c);
}

void wait_or_abandon(AgreeComm *ac, MPI_Request *req, std::shared_ptr<void> keep, double timeout,
                     const char *what, const char *who) {
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
    if ((++spins & 63) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout) {
      ac->abandoned.push_back({*req, std::move(keep)});
      fail(LM_ERR_TIMEOUT, "%s: no answer within LM_TIMEOUT = %g s%s", what, timeout, who);
    }
  }
}

void mpi_max(AgreeComm *ac, long long *v, int nv, double timeout, const char *what,
             const char *who, Rounds rounds) {
  if (timeout <= 0 && rounds == Rounds::kByDeadline) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, nv, MPI_LONG_LONG, MPI_MAX, ac->comm),
              strfmt("%s: MPI_Allreduce", what).c_str());
    return;
  }
  // The buffers live on the heap: a request this rank gives up keeps them (ac->abandoned).
  auto vals = std::make_shared<std::vector<long long>>(v, v + nv);
  auto gave_up = std::make_shared<long long>(0);
  MPI_Request req;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, vals->data(), nv, MPI_LONG_LONG, MPI_MAX, ac->comm, &req),
            strfmt("%s: MPI_Iallreduce", what).c_str());
  try {
    wait_or_abandon(ac, &req, vals, timeout, what, who);
  } catch (const Error &e) {
    if (e.status() == LM_ERR_TIMEOUT) {  // say so in the second round, and never wait for it
      *gave_up = 1;
      MPI_Request r2;
      if (MPI_Iallreduce(MPI_IN_PLACE, gave_up.get(), 1, MPI_LONG_LONG, MPI_MAX, ac->comm, &r2) ==
          MPI_SUCCESS)
        ac->abandoned.push_back({r2, gave_up});
    }
    throw;
  }
  std::copy(vals->begin(), vals->end(), v);
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, gave_up.get(), 1, MPI_LONG_LONG, MPI_MAX, ac->comm, &req),
            strfmt("%s: MPI_Iallreduce (second round)", what).c_str());
  wait_or_abandon(ac, &req, gave_up, timeout, what, who);
  if (*gave_up && timeout > 0)
    fail(LM_ERR_TIMEOUT, "%s: the other ranks gave up waiting before this rank arrived "
         "(LM_TIMEOUT = %g s); the mesh is unusable now", what, timeout);
  if (*gave_up)  // a round before the deadlines were agreed (Rounds::kAlwaysTwo)
    fail(LM_ERR_TIMEOUT, "%s: some rank gave up waiting at its own deadline (LM_TIMEOUT or "
         "config->timeout; this rank has none) before this rank arrived", what);
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
  throw e;
}

std::string rank_label(const Record &r, long long root) {
  if (r.mesh_rank >= 0)
    return strfmt("rank %d (mesh rank %lld%s)", r.parent_rank, (long long)r.mesh_rank,
                  r.mesh_rank == root ? ", the root" : "");
  return strfmt("rank %d", r.parent_rank);
}

}  // namespace

namespace {

// By messages: this rank's blocks ride with its words when it has a ride and packs (no deadline).
void msg_round_of(const AgreeArgs &a, long long *v, int nv) {
  const bool packed = a.ride && a.publish && a.timeout <= 0 && a.rounds == Rounds::kByDeadline;
  if (packed) a.publish(a.publish_ctx, nullptr);
  msg_max(a.ac, v, nv, a.timeout, a.fn, " (some rank of the mesh did not make this call)",
          a.rounds, a.ride, packed);
}

// The first round: a MAX over v[0..nv) on the board, by messages or over MPI, with the deadline. An MPI
// failure or a deadline breaks the agreement communicator for good and is rethrown.
void first_round(const AgreeArgs &a, uint64_t seq, long long *v, int nv) {
  AgreeComm *ac = a.ac;
  try {
    if (ac->board)  // every rank of the set on this node: shared memory (comm/board.hpp)
      board_max(ac, seq, v, nv, a.timeout, a.fn, a.publish, a.publish_ctx);
    else if (ac->by_messages)
      msg_round_of(a, v, nv);
    else
      mpi_max(ac, v, nv, a.timeout, strfmt("%s: agreement", a.fn).c_str(),
              " (some rank of the mesh did not make this call)", a.rounds);
  } catch (const Error &e) {
    broken_comm(a, e);
  }
}

// What this rank tells the others in the second round: its outcome, and its fingerprint with
// each field described (the error path only).
void fill_record(const AgreeArgs &a, uint64_t seq, Record &mine) {
  std::memset(&mine, 0, sizeof mine);
  const bool failed = a.local != LM_SUCCESS;
  mine.status = (int32_t)a.local;
  mine.parent_rank = a.parent_rank;
  mine.mesh_rank = a.mesh_rank;
  if (failed && a.err) copy_text(mine.msg, kMsg, *a.err);
  if (!a.fp) return;
  mine.nfields = a.fp->size();
  for (int i = 0; i < a.fp->size(); ++i) mine.hash[i] = a.fp->hash(i);
  mine.hash[a.fp->size()] = seq;
  if (failed) return;
  copy_text(mine.desc[0], kDesc, a.fp->name(0));
  for (int i = 1; i < a.fp->size(); ++i)
    copy_text(mine.desc[i], kDesc, a.describe ? a.describe(a.ctx, i) : std::string("?"));
  copy_text(mine.desc[a.fp->size()], kDesc, std::to_string(seq));
}

// A rank failed: its own error where it failed, LM_ERR_REMOTE naming the lowest failing rank on
// the others. Returns when no rank failed.
void throw_if_failed(const AgreeArgs &a, const std::vector<Record> &all) {
  int lowest = -1, nfailed = 0;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].status != 0) {
      if (lowest < 0) lowest = (int)r;
      ++nfailed;
    }
  if (a.local != LM_SUCCESS) throw Error(a.local, a.err ? *a.err : std::string(a.fn));
  if (lowest < 0) return;
  const Record &f = all[(size_t)lowest];
  std::string msg = strfmt("%s: %s failed: %s: %s", a.fn, rank_label(f, a.root).c_str(),
                           status_name((lm_status_t)f.status).c_str(), f.msg);
  if (nfailed > 1) msg += strfmt(" (and %d other rank%s failed)", nfailed - 1, nfailed > 2 ? "s" : "");
  msg += strfmt("; this rank %d did not", a.parent_rank);
  throw Error(LM_ERR_REMOTE, msg, (lm_status_t)f.status);
}

// The first field whose hash differs (fields both sides have), the sequence number when the
// field lists are the same, else the operation.
int differing_field(const std::vector<Record> &all, const char **fname, const Fingerprint *fp) {
  int field = -1;
  const Record &r0 = all[0];
  int common = r0.nfields;
  bool same_count = true;
  for (size_t r = 1; r < all.size(); ++r) {
    common = std::min(common, (int)all[r].nfields);
    if (all[r].nfields != r0.nfields) same_count = false;
  }
  for (int i = 0; i < common + (same_count ? 1 : 0) && field < 0; ++i)
    for (size_t r = 1; r < all.size(); ++r)
      if (all[r].hash[i] != r0.hash[i]) {
        field = i;
        break;
      }
  *fname = "operation";
  if (field == r0.nfields && same_count)
    *fname = "call sequence number (a rank skipped or repeated a call)";
  else if (field > 0)
    *fname = fp->name(field);
  return field < 0 ? 0 : field;  // only the field lists differ: report the operation
}

// LM_ERR_MISMATCH: the differing field's distinct values, each with the ranks that hold it.
[[noreturn]] void throw_mismatch(const AgreeArgs &a, const std::vector<Record> &all) {
  const char *fname = "operation";
  const int field = differing_field(all, &fname, a.fp);
  std::string msg = strfmt("%s: ranks disagree on %s:", a.fn, fname);
  std::vector<int> done(all.size(), 0);
  int groups = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (done[r]) continue;
    const Record &x = all[r];
    std::string who;
    int cnt = 0;
    for (size_t q = r; q < all.size(); ++q) {
      if (done[q] || all[q].hash[field] != x.hash[field]) continue;
      done[q] = 1;
      if (cnt < 3) who += strfmt("%s%d", cnt ? "," : "", all[q].parent_rank);
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

}  // namespace

void agree(const AgreeArgs &a) {
  require_mpi(a.fn);
  AgreeComm *ac = a.ac;
  if (ac->broken)
    fail(LM_ERR_INVALID_USAGE, "%s: the mesh is broken by an earlier failure (%s)", a.fn,
         ac->broken_why.c_str());
  if (a.nmax < 0 || a.nmax > kMaxAgreeMaxes)
    fail(LM_ERR_INTERNAL, "%s: %d agreement values (at most %d)", a.fn, a.nmax, kMaxAgreeMaxes);
  const uint64_t seq = ++ac->seq;
  uint64_t h = 0;
  if (a.fp) {
    Hasher hh;
    hh.u64(a.fp->total());
    hh.u64(seq);
    h = hh.h;
  }
  const int nv = 3 + a.nmax;
  long long v[3 + kMaxAgreeMaxes];
  v[0] = a.local != LM_SUCCESS ? (long long)(ac->size - ac->rank) : 0;
  v[1] = (long long)(h >> 1);
  v[2] = -(long long)(h >> 1);
  for (int i = 0; i < a.nmax; ++i) v[3 + i] = a.maxes[i];
  first_round(a, seq, v, nv);
  for (int i = 0; i < a.nmax; ++i) a.maxes[i] = v[3 + i];
  if (v[0] == 0 && v[1] == -v[2]) return;  // the common case: one small allreduce
  // Second round: every rank's record (on the heap: a request given up keeps its buffers).
  struct Records {
    Record mine;
    std::vector<Record> all;
  };
  auto rec = std::make_shared<Records>();
  rec->all.resize((size_t)ac->size);
  fill_record(a, seq, rec->mine);
  try {
    MPI_Request req;
    mpi_check(MPI_Iallgather(&rec->mine, (int)sizeof(Record), MPI_BYTE, rec->all.data(),
                             (int)sizeof(Record), MPI_BYTE, ac->comm, &req),
              strfmt("%s: MPI_Iallgather (agreement)", a.fn).c_str());
    wait_or_abandon(ac, &req, rec, a.timeout, strfmt("%s: agreement", a.fn).c_str());
  } catch (const Error &e) {
    broken_comm(a, e);
  }
  throw_if_failed(a, rec->all);
  throw_mismatch(a, rec->all);
}

}  // namespace lm
