// SPDX-License-Identifier: BSD-3-Clause
#include "comm/node.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "comm/board.hpp"
#include "common/settings.hpp"
#include "mem/arena.hpp"

namespace lm {

namespace {

// What a peer reads to prove that it can (a word of this process's memory).
constexpr uint64_t kProbeWord = 0x4c4d4e4f44454c43ull;  // "LMNODELC"
volatile uint64_t g_probe = kProbeWord;

std::atomic<int> g_keyval{MPI_KEYVAL_INVALID};  // the attribute carrying an AgreeComm*

}  // namespace

namespace {

// What a rank tells the others of its node.
struct ProbeRec {
  int32_t rank;  // in ac->comm
  int32_t pid;
  uint64_t addr;  // of g_probe
  ArenaId arena;  // fd < 0: none
};

// Whether this process can read a word of every other rank's memory with process_vm_readv.
bool probe_kernel(const std::vector<ProbeRec> &all, int me) {
  for (const ProbeRec &r : all) {
    if (r.rank == me) continue;
    uint64_t v = 0;
    struct iovec l = {&v, sizeof v}, rv = {(void *)(uintptr_t)r.addr, sizeof v};
    if (process_vm_readv((pid_t)r.pid, &l, 1, &rv, 1, 0) != (ssize_t)sizeof v || v != kProbeWord)
      return false;
  }
  return true;
}

// Whether this process has an arena and can open every other rank's (as itself, read-write).
bool probe_mapping(const std::vector<ProbeRec> &all, int me) {
  for (const ProbeRec &r : all)
    if (r.arena.fd < 0 || (r.rank != me && !arena_peer_check(r.arena))) return false;
  return true;
}

}  // namespace

namespace {
// The ranks of ac's set on this rank's node (collective over the set; MPI_COMM_NULL on failure).
MPI_Comm split_node(const AgreeComm *ac) {
  MPI_Comm node = MPI_COMM_NULL;
  int rc;
  // TEST ONLY (tests/README.md, "Simulated nodes"): LM_TEST_NODES=k > 1 splits this machine's
  // ranks into k simulated nodes, world rank r on node r % k, so that one machine runs the paths
  // of a multi-node job (agreements over MPI, remote and node-local peers mixed, a board per node).
  // A must-agree setting: settings_agree has compared it before this runs.
  if (int64_t k = setting_int(Setting::TestNodes); k > 1) {
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    rc = MPI_Comm_split(ac->comm, (int)(wr % k), ac->rank, &node);
  } else {
    rc = MPI_Comm_split_type(ac->comm, MPI_COMM_TYPE_SHARED, ac->rank, MPI_INFO_NULL, &node);
  }
  return rc == MPI_SUCCESS ? node : MPI_COMM_NULL;
}

void probe_peers(AgreeComm *ac) {
  ac->node_peers.clear();
  ac->node_kernel = ac->node_mapped = false;
  MPI_Comm node = split_node(ac);
  if (node == MPI_COMM_NULL) return;
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  int n = 0;
  MPI_Comm_size(node, &n);
  if (n > 1) arena_activate();  // large pool buffers from now on live where peers can map them
  ProbeRec me{ac->rank, (int32_t)getpid(), (uint64_t)(uintptr_t)&g_probe, arena_self()};
  std::vector<ProbeRec> all((size_t)n);
  int ok[2] = {0, 0}, every[2] = {0, 0};
  if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE, node) ==
      MPI_SUCCESS) {
    ok[0] = probe_kernel(all, ac->rank);
    ok[1] = probe_mapping(all, ac->rank);
  }
  // One answer per node and capability: a pair uses one only if both of its sides say so.
  if (n > 1 && MPI_Allreduce(ok, every, 2, MPI_INT, MPI_MIN, node) == MPI_SUCCESS) {
    ac->node_kernel = every[0] != 0;
    ac->node_mapped = every[1] != 0;
    if (ac->node_kernel || ac->node_mapped)
      for (const ProbeRec &r : all)
        if (r.rank != ac->rank) ac->node_peers.push_back(r.rank);
  }
  std::sort(ac->node_peers.begin(), ac->node_peers.end());
  MPI_Comm_free(&node);
}
}  // namespace

void node_probe(AgreeComm *ac) {
  ac->node_nowhere = true;
  if (!setting_on(Setting::NodeLocal) || ac->comm == MPI_COMM_NULL) return;
  probe_peers(ac);
  // Whether any rank of the set has node peers: one answer for all (a failed MPI call says some).
  int mine = !ac->node_peers.empty(), any = 1;
  if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, ac->comm) != MPI_SUCCESS) any = 1;
  ac->node_nowhere = any == 0;
  board_setup(ac);
}

bool set_spans_nodes(const AgreeComm *ac) {
  if (ac->comm == MPI_COMM_NULL) return false;
  MPI_Comm node = split_node(ac);
  if (node == MPI_COMM_NULL) return true;  // (every rank's split fails alike: MPI is broken)
  int n = 0;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n < ac->size;  // the same on every rank: the node splits partition the set
}

void node_attach(MPI_Comm comm, const AgreeComm *ac) {
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

std::vector<int> all_ranks_in(MPI_Comm from, MPI_Comm to) {
  int n = 0;
  if (MPI_Comm_size(from, &n) != MPI_SUCCESS) return {};
  std::vector<int> all((size_t)n);
  for (int i = 0; i < n; ++i) all[(size_t)i] = i;
  std::vector<int> ranks = translate_ranks(from, to, all.data(), n);
  if (ranks.size() != (size_t)n) return {};
  for (int r : ranks)
    if (r == MPI_UNDEFINED) return {};
  return ranks;
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

bool node_path_nowhere(MPI_Comm comm) {
  const int k = g_keyval.load();
  void *v = nullptr;
  int flag = 0;
  if (k == MPI_KEYVAL_INVALID || MPI_Comm_get_attr(comm, k, &v, &flag) != MPI_SUCCESS || !flag ||
      !v)
    return false;
  return static_cast<const AgreeComm *>(v)->node_nowhere;
}

NodeCaps node_caps(MPI_Comm comm) {
  NodeCaps c;
  const int k = g_keyval.load();
  void *v = nullptr;
  int flag = 0;
  if (k == MPI_KEYVAL_INVALID || MPI_Comm_get_attr(comm, k, &v, &flag) != MPI_SUCCESS || !flag ||
      !v)
    return c;
  const AgreeComm *ac = static_cast<const AgreeComm *>(v);
  if (ac->node_peers.empty()) return c;
  c.kernel = ac->node_kernel;
  c.mapped = ac->node_mapped;
  return c;
}

}  // namespace lm
