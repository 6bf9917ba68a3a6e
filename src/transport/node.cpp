// SPDX-License-Identifier: BSD-3-Clause
#include "transport/node.hpp"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/env.hpp"
#include "core/error.hpp"
#include "mesh/agree.hpp"
#include "transport/arena.hpp"

namespace lm {

namespace {

// What a peer reads to prove that it can (a word of this process's memory).
constexpr uint64_t kProbeWord = 0x4c4d4e4f44454c43ull;  // "LMNODELC"
volatile uint64_t g_probe = kProbeWord;

std::atomic<int> g_keyval{MPI_KEYVAL_INVALID};  // the attribute carrying an AgreeComm*

// The agreement board (node.hpp): one cache line per rank and bank.
constexpr int kBoardValues = 3 + kMaxAgreeMaxes;
struct alignas(64) BoardSlot {
  uint64_t seq;
  long long v[kBoardValues];
};
static_assert(sizeof(BoardSlot) == 64, "one cache line per slot");

bool board_enabled() {
  static const bool on = [] {
    const char *e = std::getenv("LM_AGREE_BOARD");
    return !(e && e[0] == '0');
  }();
  return on;
}

// Collective over ac->comm, right after the board: every rank's outbox, mapped by all.
void outbox_setup(AgreeComm *ac) {
  if (board_exchange_bytes() == 0) return;
  // A rank sends at most about the whole tensor (S->R: its shard to every peer; twice that
  // covers uneven chunks); a rank whose sends do not fit says so in the round.
  const size_t hdr = ((size_t)ac->size * 16 + 63) / 64 * 64;
  const size_t bank = hdr + 2 * (size_t)ac->size * board_exchange_bytes() + (size_t)ac->size * 64;
  struct Info {
    ArenaId id;
    uint64_t off;
    int32_t ok, pad;
  } me{};
  size_t cap = 0;
  void *mine = arena_alloc(2 * bank, &cap);
  if (mine) {
    me.id = arena_self();
    me.off = arena_offset(mine, 2 * bank);
    me.ok = me.id.fd >= 0 && me.off != UINT64_MAX;
  }
  std::vector<Info> all((size_t)ac->size);
  int ok = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE,
                         ac->comm) == MPI_SUCCESS;
  std::vector<char *> boxes((size_t)ac->size, nullptr);
  for (int r = 0; ok && r < ac->size; ++r) {
    const Info &x = all[(size_t)r];
    if (!x.ok) {
      ok = 0;
    } else if (r == ac->rank) {
      boxes[(size_t)r] = static_cast<char *>(mine);
    } else if (char *peer = arena_peer(x.id)) {
      boxes[(size_t)r] = peer + x.off;
    } else {
      ok = 0;
    }
  }
  int every = 0;
  if (MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, ac->comm) == MPI_SUCCESS && every) {
    ac->outbox = std::move(boxes);
    ac->outbox_bank = bank;
  } else if (mine) {
    arena_free(mine, cap);
  }
}

// Collective over ac->comm, at the end of node_probe. Every rank takes the same branches: the
// node peers are agreed per node, and here every rank of the set is on this one node.
void board_setup(AgreeComm *ac) {
  if (!board_enabled() || ac->size < 2 || (int)ac->node_peers.size() != ac->size - 1) return;
  struct Info {
    ArenaId id;
    uint64_t off;
    int32_t ok, pad;
  } info{};
  const size_t bytes = sizeof(BoardSlot) * 2 * (size_t)ac->size;
  size_t cap = 0;
  void *mine = nullptr;
  if (ac->rank == 0 && (mine = arena_alloc(bytes, &cap)) != nullptr) {
    std::memset(mine, 0, bytes);
    info.id = arena_self();
    info.off = arena_offset(mine, bytes);
    info.ok = info.id.fd >= 0 && info.off != UINT64_MAX;
  }
  if (MPI_Bcast(&info, (int)sizeof info, MPI_BYTE, 0, ac->comm) != MPI_SUCCESS) info.ok = 0;
  char *base = nullptr;
  if (info.ok) {
    if (ac->rank == 0) {
      base = static_cast<char *>(mine);
    } else if (char *peer = arena_peer(info.id)) {
      base = peer + info.off;
    }
  }
  int ok = base != nullptr, all = 0;
  if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, ac->comm) == MPI_SUCCESS && all)
    ac->board = base;
  else if (mine)
    arena_free(mine, cap);
  if (ac->board) outbox_setup(ac);
}

}  // namespace

size_t board_exchange_bytes() {
  static const size_t v = (size_t)std::min<uint64_t>(
      env_bytes("LM_BOARD_EXCHANGE_BYTES", kNodeLocalDefaultMin), uint64_t(1) << 20);
  return v;
}

void board_max(AgreeComm *ac, uint64_t seq, long long *v, int nv, double timeout,
               const char *what, void (*publish)(void *, char *), void *publish_ctx) {
  if (nv > kBoardValues) fail(LM_ERR_INTERNAL, "%s: %d agreement values (board: %d)", what, nv,
                              kBoardValues);
  BoardSlot *bank = static_cast<BoardSlot *>(ac->board) + (size_t)(seq & 1) * (size_t)ac->size;
  BoardSlot &me = bank[ac->rank];
  if (publish && !ac->outbox.empty())
    publish(publish_ctx, ac->outbox[(size_t)ac->rank] + (size_t)(seq & 1) * ac->outbox_bank);
  for (int i = 0; i < nv; ++i) __atomic_store_n(&me.v[i], v[i], __ATOMIC_RELAXED);
  __atomic_store_n(&me.seq, seq, __ATOMIC_RELEASE);
  std::chrono::steady_clock::time_point t0;
  if (timeout > 0) t0 = std::chrono::steady_clock::now();
  unsigned spins = 0;
  for (int j = 0; j < ac->size; ++j) {
    if (j == ac->rank) continue;
    while (__atomic_load_n(&bank[j].seq, __ATOMIC_ACQUIRE) != seq) {
      if (++spins < 8) continue;
      sched_yield();  // let the peers run (ranks may outnumber cores)
      if ((spins & 63) == 0) {  // keep MPI moving: a nonblocking plan may need this rank's sends
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, ac->comm, &flag, MPI_STATUS_IGNORE);
      }
      if (timeout > 0 && (spins & 255) == 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout)
        fail(LM_ERR_TIMEOUT,
             "%s: agreement: no answer within LM_TIMEOUT = %g s (some rank of the mesh did not "
             "make this call)",
             what, timeout);
    }
    for (int i = 0; i < nv; ++i)
      v[i] = std::max(v[i], __atomic_load_n(&bank[j].v[i], __ATOMIC_RELAXED));
  }
}

bool node_local_enabled() {
  static const bool on = [] {
    const char *e = std::getenv("LM_NODE_LOCAL");
    return !(e && e[0] == '0');
  }();
  return on;
}

size_t node_local_min_bytes() {
  static const size_t v =
      (size_t)std::max(env_bytes("LM_NODE_LOCAL_MIN_BYTES", kNodeLocalDefaultMin), uint64_t(1));
  return v;
}

void node_probe(AgreeComm *ac) {
  ac->node_peers.clear();
  if (!node_local_enabled() || ac->comm == MPI_COMM_NULL) return;
  MPI_Comm node = MPI_COMM_NULL;
  int rc;
  // TEST ONLY (tests/README.md, "Simulated nodes"): LM_TEST_NODES=k > 1 splits this machine's
  // ranks into k simulated nodes, world rank r on node r % k, so that one machine runs the paths
  // of a multi-node job (agreements over MPI, remote and node-local peers mixed, a board per node).
  // Every rank must see the same value. Keep this hook in node_probe when the file moves.
  const char *sim = std::getenv("LM_TEST_NODES");
  if (sim && std::atoi(sim) > 1) {
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    rc = MPI_Comm_split(ac->comm, wr % std::atoi(sim), ac->rank, &node);
  } else {
    rc = MPI_Comm_split_type(ac->comm, MPI_COMM_TYPE_SHARED, ac->rank, MPI_INFO_NULL, &node);
  }
  if (rc != MPI_SUCCESS || node == MPI_COMM_NULL) return;
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  int n = 0;
  MPI_Comm_size(node, &n);
  struct Rec {
    int rank;  // in ac->comm
    int pid;
    uint64_t addr;
  } me{ac->rank, (int)getpid(), (uint64_t)(uintptr_t)&g_probe};
  std::vector<Rec> all((size_t)n);
  int ok = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE,
                         node) == MPI_SUCCESS;
  if (ok) {
    for (const Rec &r : all) {
      if (r.rank == ac->rank) continue;
      uint64_t v = 0;
      struct iovec l = {&v, sizeof v}, rv = {(void *)(uintptr_t)r.addr, sizeof v};
      if (process_vm_readv((pid_t)r.pid, &l, 1, &rv, 1, 0) != (ssize_t)sizeof v ||
          v != kProbeWord) {
        ok = 0;
        break;
      }
    }
  }
  // One answer per node: a pair uses the path only if both of its sides say so.
  int all_ok = 0;
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node) == MPI_SUCCESS && all_ok)
    for (const Rec &r : all)
      if (r.rank != ac->rank) ac->node_peers.push_back(r.rank);
  std::sort(ac->node_peers.begin(), ac->node_peers.end());
  MPI_Comm_free(&node);
  // Peers that can be read: from now on large pool buffers live in memory they can map.
  if (!ac->node_peers.empty()) arena_activate();
  board_setup(ac);
}

void node_attach(MPI_Comm comm, const AgreeComm *ac) {
  if (ac->node_peers.empty()) return;
  static std::once_flag once;  // meshes may be created from several threads (THREAD_MULTIPLE)
  std::call_once(once, [] {
    int k = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, nullptr) ==
        MPI_SUCCESS)
      g_keyval.store(k);
  });
  const int k = g_keyval.load();
  if (k != MPI_KEYVAL_INVALID) MPI_Comm_set_attr(comm, k, const_cast<AgreeComm *>(ac));
}

std::vector<int> translate_ranks(MPI_Comm from, MPI_Comm to, const int *ranks, int n) {
  std::vector<int> out;
  MPI_Group gf, gt;
  if (MPI_Comm_group(from, &gf) != MPI_SUCCESS) return out;
  if (MPI_Comm_group(to, &gt) != MPI_SUCCESS) {
    MPI_Group_free(&gf);
    return out;
  }
  out.assign((size_t)n, MPI_UNDEFINED);
  if (MPI_Group_translate_ranks(gf, n, ranks, gt, out.data()) != MPI_SUCCESS) out.clear();
  MPI_Group_free(&gf);
  MPI_Group_free(&gt);
  return out;
}

std::vector<int> node_peers(MPI_Comm comm) {
  std::vector<int> out;
  const int k = g_keyval.load();
  if (k == MPI_KEYVAL_INVALID) return out;
  void *v = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(comm, k, &v, &flag) != MPI_SUCCESS || !flag || !v) return out;
  const AgreeComm *ac = static_cast<const AgreeComm *>(v);
  out = translate_ranks(ac->comm, comm, ac->node_peers.data(), (int)ac->node_peers.size());
  out.erase(std::remove(out.begin(), out.end(), MPI_UNDEFINED), out.end());
  std::sort(out.begin(), out.end());
  return out;
}

void box_runs(uint64_t base, int ndim, const int64_t *shape, const int64_t *off, const int64_t *len,
              size_t esize, std::vector<Run> *out) {
  out->clear();
  for (int i = 0; i < ndim; ++i)
    if (len[i] == 0) return;
  if (ndim == 0) {
    out->push_back({base, esize});
    return;
  }
  // Row-major strides in bytes.
  int64_t stride[64];
  stride[ndim - 1] = (int64_t)esize;
  for (int i = ndim - 2; i >= 0; --i) stride[i] = stride[i + 1] * shape[i + 1];
  // The innermost dims a run covers: d..ndim-1 (dims after d whole).
  int d = ndim - 1;
  while (d > 0 && len[d] == shape[d]) --d;
  const uint64_t run = (uint64_t)len[d] * (uint64_t)stride[d];
  int64_t idx[64] = {0};  // odometer over dims 0..d-1
  for (;;) {
    int64_t a = (int64_t)base + off[d] * stride[d];
    for (int i = 0; i < d; ++i) a += (off[i] + idx[i]) * stride[i];
    if (!out->empty() && out->back().addr + out->back().bytes == (uint64_t)a)
      out->back().bytes += run;
    else
      out->push_back({(uint64_t)a, run});
    int i = d - 1;
    for (; i >= 0; --i) {
      if (++idx[i] < len[i]) break;
      idx[i] = 0;
    }
    if (i < 0) break;
  }
}

namespace {
// A position in a run list: run index and bytes of that run already taken.
struct Cursor {
  const std::vector<Run> *runs;
  size_t i = 0;
  uint64_t off = 0;
  bool end() const { return i >= runs->size(); }
  // Bytes in the next `max` runs from here.
  uint64_t ahead(int max) const {
    uint64_t b = 0;
    for (size_t k = i; k < runs->size() && k < i + (size_t)max; ++k)
      b += (*runs)[k].bytes - (k == i ? off : 0);
    return b;
  }
  // Fills v with iovecs covering the next `bytes` bytes; returns their count.
  int take(uint64_t bytes, struct iovec *v) {
    int n = 0;
    while (bytes) {
      const Run &r = (*runs)[i];
      uint64_t k = std::min(bytes, r.bytes - off);
      v[n].iov_base = (void *)(uintptr_t)(r.addr + off);
      v[n].iov_len = (size_t)k;
      ++n;
      bytes -= k;
      if ((off += k) == r.bytes) ++i, off = 0;
    }
    return n;
  }
};
}  // namespace

// The two lists go to the kernel as they are (not cut into matching pairs): it pins the remote
// pages run by run, up to 16 pages at a time, and fills the local runs as a stream, so a strided
// side costs one iovec per run and a contiguous side one iovec in all.
std::string cma_copy(pid_t pid, const std::vector<Run> &local, const std::vector<Run> &remote,
                     bool write) {
  constexpr int kMax = 1024;  // IOV_MAX on Linux
  struct iovec lv[kMax], rv[kMax];
  Cursor lc{&local}, rc{&remote};
  while (!lc.end() && !rc.end()) {
    uint64_t bytes = std::min(lc.ahead(kMax), rc.ahead(kMax));
    if (bytes == 0) break;
    int nl = lc.take(bytes, lv), nr = rc.take(bytes, rv);
    // The kernel may stop early only on a fault: what it did not copy is an error.
    ssize_t got = write ? process_vm_writev(pid, lv, (unsigned long)nl, rv, (unsigned long)nr, 0)
                        : process_vm_readv(pid, lv, (unsigned long)nl, rv, (unsigned long)nr, 0);
    if (got < 0) return std::strerror(errno);
    if ((uint64_t)got != bytes) return "short read";
  }
  auto rest = [](const Cursor &c) {
    uint64_t b = 0;
    for (size_t k = c.i; k < c.runs->size(); ++k) b += (*c.runs)[k].bytes - (k == c.i ? c.off : 0);
    return b;
  };
  if (rest(lc) || rest(rc)) return "the two sides cover different byte counts";
  return "";
}

void runs_memcpy(const std::vector<Run> &dst, const std::vector<Run> &src) {
  size_t i = 0, j = 0;
  uint64_t oi = 0, oj = 0;
  while (i < dst.size() && j < src.size()) {
    const uint64_t k = std::min(dst[i].bytes - oi, src[j].bytes - oj);
    std::memcpy((char *)(uintptr_t)(dst[i].addr + oi), (const char *)(uintptr_t)(src[j].addr + oj),
                (size_t)k);
    if ((oi += k) == dst[i].bytes) ++i, oi = 0;
    if ((oj += k) == src[j].bytes) ++j, oj = 0;
  }
}

void runs_rebase(std::vector<Run> *runs, uint64_t from, uint64_t to) {
  for (Run &r : *runs) r.addr = r.addr - from + to;
}

}  // namespace lm
