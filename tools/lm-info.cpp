// SPDX-License-Identifier: BSD-3-Clause
// lm-info: what localmap is, what it runs with, and how it would move data here (like ompi_info,
// ucx_info or NCCL's version banner). Run it alone, or under `lm-mpirun N lm-info` to see each
// node of the job: which ranks share it, whether the node-local path, the agreement board and the
// board exchange are on there and why, and how device data would travel (NCCL or staged through
// host). Then every setting in force with its source. `--json` prints the same as one JSON object.
// It is a tool of the library, not a user of its C API alone: it links the static library and reads
// the internals it reports (the mesh's agreement channel, the settings table).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "common/settings.hpp"
#include "localmap.h"
#include "mem/arena.hpp"
#include "mem/component.hpp"
#include "mem/cuda.hpp"
#include "mesh/device.hpp"
#include "mesh/mesh.hpp"

namespace {

// What one rank reports (fixed size: gathered to rank 0).
struct RankInfo {
  char host[64];
  int world_rank;
  int node_peers;     // ranks of the job on this node it can copy from directly
  int node_kernel;    // ... by kernel copies (process_vm_readv/writev)
  int node_mapped;    // ... through windows on their arenas
  int node_ranks;     // ranks of the job on this node
  int board;          // agreements through shared memory
  int board_exchange; // small plans move data inside the agreement round
  int arena;          // shared arena active
  double arena_gib;   // its bound
  double peer_gib;    // address space for peers' windows
  double as_gib;      // RLIMIT_AS (0: unlimited)
  int as_capped;      // RLIMIT_AS made the arena or the windows smaller than asked
  int devices;
  char device_why[96];
  int transport;      // LM_TRANSPORT_* for device data (UNDECIDED: not asked)
  char transport_why[160];
};

std::string json_str(const std::string &s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if ((unsigned char)c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", (unsigned char)c);
      r += b;
      continue;
    }
    r += c;
  }
  return r + "\"";
}

std::string mpi_built_with() {
#if defined(OMPI_MAJOR_VERSION)
  char b[64];
  std::snprintf(b, sizeof b, "Open MPI %d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                OMPI_RELEASE_VERSION);
  return b;
#elif defined(MPICH_VERSION)
  return std::string("MPICH ") + MPICH_VERSION;
#else
  return "an MPI of standard version " + std::to_string(MPI_VERSION);
#endif
}

std::string mpi_running() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, (size_t)len);
  size_t nl = s.find_first_of("\r\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// "CUDA runtime 13.0, driver 12.4, NCCL 2.28.9", as the device component finds them loaded.
std::string cuda_versions() {
  const lm::ComponentInfo &c = lm::device_component();
  if (!c.api) return "none (no device component loaded)";
  int rt = 0, drv = 0, nccl = 0;
  c.api->versions(&rt, &drv, &nccl);
  char b[160];
  std::snprintf(b, sizeof b, "CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d", rt / 1000,
                (rt % 1000) / 10, drv ? (std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10)).c_str() : "none",
                nccl / 10000, (nccl / 100) % 100, nccl % 100);
  return b;
}

// "loaded from PATH (built with ...)" or "not loaded: WHY".
std::string component_line() {
  const lm::ComponentInfo &c = lm::device_component();
  if (!c.api) return "not loaded: " + c.why;
  return "loaded from " + c.path + " (built with " + c.api->built_with + ")";
}

// The ranks of this node, grouped as the library's node probe groups them (comm/node.cpp): by
// shared memory, or world rank r on node r % k under simulated nodes (LM_TEST_NODES=k).
MPI_Comm node_comm(int world_rank) {
  MPI_Comm node = MPI_COMM_NULL;
  if (int64_t k = lm::setting_int(lm::Setting::TestNodes); k > 1)
    MPI_Comm_split(MPI_COMM_WORLD, (int)(world_rank % k), 0, &node);
  else
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  return node;
}

RankInfo probe(lm_mesh_s *m) {
  RankInfo r{};
  gethostname(r.host, sizeof r.host - 1);
  r.world_rank = m->world_rank;
  if (int64_t k = lm::setting_int(lm::Setting::TestNodes); k > 1) {  // "host/sim1"
    size_t n = std::strlen(r.host);
    std::snprintf(r.host + n, sizeof r.host - n, "/sim%d", (int)(r.world_rank % k));
  }
  const lm::AgreeComm *ac = m->agree_parent;
  r.node_peers = (int)ac->node_peers.size();
  r.node_kernel = ac->node_kernel;
  r.node_mapped = ac->node_mapped;
  r.board = ac->board != nullptr;
  r.board_exchange = !ac->outbox.empty();
  const double gib = (double)(uint64_t(1) << 30);
  const lm::ArenaLimits &lim = lm::arena_limits();
  r.arena = lm::arena_self().fd >= 0;
  r.arena_gib = (double)lim.size / gib;
  r.peer_gib = (double)lim.peer_budget / gib;
  r.as_gib = (double)lim.as_limit / gib;
  r.as_capped = lim.as_capped;
  r.devices = lm::cuda_device_count();
  std::snprintf(r.device_why, sizeof r.device_why, "%s", lm::cuda_absent_reason());
  r.transport = LM_TRANSPORT_UNDECIDED;
  MPI_Comm node = node_comm(r.world_rank);
  MPI_Comm_size(node, &r.node_ranks);
  MPI_Comm_free(&node);
  return r;
}

// How device data would move on this mesh (collective): only when some rank sees a device.
void probe_device(lm_mesh_s *m, RankInfo &r) {
  int any = 0;
  MPI_Allreduce(&r.devices, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!lm::device_component_loaded() || any == 0) return;
  r.transport = lm::device_transport(m, 0);
  std::snprintf(r.transport_why, sizeof r.transport_why, "%s",
                lm::mesh_device(m).transport_why.c_str());
}

std::string node_local_why(const RankInfo &r) {
  if (!lm::setting_on(lm::Setting::NodeLocal)) return "off: LM_NODE_LOCAL=0";
  if (r.node_ranks < 2) return "off: no other rank of the job on this node";
  if (r.node_peers == 0)
    return "off: the ranks can neither copy with process_vm_readv nor map each other's arenas "
           "(ptrace policy, seccomp, or no shared arena)";
  if (!r.node_kernel)
    return "on, through mapped arenas only: the kernel refuses process_vm_readv (ptrace policy or "
           "seccomp), so user buffers outside the arena go over MPI";
  if (!r.node_mapped) return "on, through kernel copies only: peers' arenas cannot be mapped";
  return "on: messages of " + std::to_string(lm::setting_u(lm::Setting::NodeLocalMinBytes) >> 10) +
         " KiB and more between ranks of this node are copied once";
}

const char *board_why(const RankInfo &r, int nodes) {
  if (r.board) return "on: agreements through shared memory";
  if (!lm::setting_on(lm::Setting::AgreeBoard)) return "off: LM_AGREE_BOARD=0";
  if (nodes > 1) return "off: the job spans nodes (agreements over MPI)";
  if (r.node_ranks < 2) return "off: one rank (no agreement to make)";
  return "off: needs peers' arenas mapped (the shared arena on every rank of the node)";
}

const char *transport_name(int t) {
  switch (t) {
    case LM_TRANSPORT_NCCL: return "NCCL";
    case LM_TRANSPORT_MPI_STAGED: return "staged through host memory over MPI";
    default: return "not decided (no GPU seen by any rank)";
  }
}

void print_text(const std::vector<RankInfo> &all, int nodes) {
  std::printf("localmap %d.%d.%d (ABI liblocalmap.so.%d)\n", LM_VERSION_MAJOR, LM_VERSION_MINOR,
              LM_VERSION_PATCH, LM_VERSION_MAJOR);
  std::printf("device component: %s\n", component_line().c_str());
  std::printf("MPI: built with %s; running %s\n", mpi_built_with().c_str(), mpi_running().c_str());
  std::printf("CUDA: %s\n", cuda_versions().c_str());
  std::printf("job: %zu rank(s) on %d node(s)\n", all.size(), nodes);
  std::vector<int> shown(all.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) {
    if (shown[i]) continue;
    std::string ranks;
    for (size_t j = i; j < all.size(); ++j)
      if (!shown[j] && !std::strcmp(all[j].host, all[i].host)) {
        shown[j] = 1;
        ranks += (ranks.empty() ? "" : ",") + std::to_string(all[j].world_rank);
      }
    const RankInfo &r = all[i];
    std::printf("node %s (ranks %s):\n", r.host, ranks.c_str());
    std::printf("  node-local path:  %s\n", node_local_why(r).c_str());
    std::printf("  shared arena:     %s", r.arena ? "on" : "off");
    if (r.arena)
      std::printf(" (at most %.1f GiB, mapped as used; peers' windows up to %.1f GiB)", r.arena_gib,
                  r.peer_gib);
    if (r.as_gib > 0)
      std::printf("%s RLIMIT_AS %.2f GiB%s", r.arena ? ";" : ":", r.as_gib,
                  r.as_capped ? " made it smaller than asked" : "");
    std::printf("\n  agreement board:  %s\n", board_why(r, nodes));
    std::printf("  board exchange:   %s\n", r.board_exchange ? "on (small plans)" : "off");
    std::printf("  GPUs:             %d%s%s\n", r.devices, r.devices ? "" : " (",
                r.devices ? "" : (std::string(r.device_why) + ")").c_str());
    std::printf("  device data:      %s%s%s\n", transport_name(r.transport),
                r.transport_why[0] ? ": " : "", r.transport_why);
  }
  std::printf("settings (* must be equal on every rank):\n");
  for (int i = 0; i < lm::kSettingCount; ++i) {
    const lm::SettingInfo &s = lm::setting_info((lm::Setting)i);
    std::printf("  %c %-24s %-28s %s%s\n", s.must_agree ? '*' : ' ', s.name,
                lm::setting_text((lm::Setting)i).c_str(), s.audience == lm::Audience::Test ? "[test hook] " : "",
                s.doc);
  }
}

void print_json(const std::vector<RankInfo> &all, int nodes) {
  const lm::ComponentInfo &dc = lm::device_component();
  std::printf("{\"version\": \"%d.%d.%d\", \"abi\": \"liblocalmap.so.%d\", \"cuda_built\": %s,\n",
              LM_VERSION_MAJOR, LM_VERSION_MINOR, LM_VERSION_PATCH, LM_VERSION_MAJOR,
              dc.api ? "true" : "false");
  std::printf(" \"device_component\": {\"name\": %s, \"loaded\": %s, \"path\": %s, "
              "\"built_with\": %s, \"why\": %s},\n", json_str(lm::device_component_name()).c_str(),
              dc.api ? "true" : "false", json_str(dc.path).c_str(),
              json_str(dc.api ? dc.api->built_with : "").c_str(), json_str(dc.why).c_str());
  std::printf(" \"mpi\": {\"built_with\": %s, \"running\": %s},\n", json_str(mpi_built_with()).c_str(),
              json_str(mpi_running()).c_str());
  std::printf(" \"cuda\": %s, \"ranks\": %zu, \"nodes\": %d,\n \"per_rank\": [", json_str(cuda_versions()).c_str(),
              all.size(), nodes);
  for (size_t i = 0; i < all.size(); ++i) {
    const RankInfo &r = all[i];
    std::printf("%s\n  {\"rank\": %d, \"host\": %s, \"node_ranks\": %d, \"node_local\": %s, "
                "\"node_local_why\": %s, \"board\": %s, \"board_why\": %s, \"board_exchange\": %s, "
                "\"node_kernel\": %s, \"node_mapped\": %s, "
                "\"arena\": %s, \"arena_gib\": %.2f, \"peer_map_gib\": %.2f, \"rlimit_as_gib\": %.2f, \"gpus\": %d, \"gpus_why\": %s, "
                "\"device_transport\": %s, \"device_transport_why\": %s}",
                i ? "," : "", r.world_rank, json_str(r.host).c_str(), r.node_ranks,
                r.node_peers ? "true" : "false", json_str(node_local_why(r)).c_str(),
                r.board ? "true" : "false", json_str(board_why(r, nodes)).c_str(),
                r.board_exchange ? "true" : "false", r.node_kernel ? "true" : "false",
                r.node_mapped ? "true" : "false", r.arena ? "true" : "false", r.arena_gib, r.peer_gib, r.as_gib,
                r.devices, json_str(r.device_why).c_str(), json_str(transport_name(r.transport)).c_str(),
                json_str(r.transport_why).c_str());
  }
  std::printf("\n ],\n \"settings\": [");
  for (int i = 0; i < lm::kSettingCount; ++i) {
    const lm::SettingInfo &s = lm::setting_info((lm::Setting)i);
    const lm::SettingValue &v = lm::setting((lm::Setting)i);
    std::string text = lm::setting_text((lm::Setting)i);
    text = text.substr(0, text.rfind(" ("));
    std::printf("%s\n  {\"name\": %s, \"value\": %s, \"source\": \"%s\", \"must_agree\": %s, "
                "\"audience\": \"%s\"}", i ? "," : "", json_str(s.name).c_str(),
                json_str(text).c_str(), v.from_env ? "environment" : "default",
                s.must_agree ? "true" : "false",
                s.audience == lm::Audience::User ? "user" : s.audience == lm::Audience::Expert ? "expert" : "test");
  }
  std::printf("\n ]}\n");
}

}  // namespace

int main(int argc, char **argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--json]   (under an MPI launcher: lm-mpirun N %s)\n",
                   argv[0], argv[0]);
      return !!std::strcmp(argv[i], "--help") && std::strcmp(argv[i], "-h");
    }
  }
  if (lm_init(&argc, &argv) != LM_SUCCESS) {
    std::fprintf(stderr, "lm-info: %s\n", lm_last_error_message());
    return 1;
  }
  int comm = 0, np = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  lm_mesh_t mesh = nullptr;
  int64_t shape[1] = {np};
  if (lm_comm_world(&comm) != LM_SUCCESS || lm_mesh_create(&mesh, comm, 1, shape, nullptr) != LM_SUCCESS) {
    std::fprintf(stderr, "lm-info: %s\n", lm_last_error_message());
    return 1;
  }
  RankInfo mine = probe(lm::mesh_check(mesh, "lm-info"));
  probe_device(lm::mesh_check(mesh, "lm-info"), mine);
  std::vector<RankInfo> all((size_t)np);
  MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine, MPI_BYTE, 0,
             MPI_COMM_WORLD);
  int node_leader = 0, nodes = 0;
  MPI_Comm node = node_comm(me);
  int nrank = 0;
  MPI_Comm_rank(node, &nrank);
  MPI_Comm_free(&node);
  node_leader = nrank == 0;
  MPI_Allreduce(&node_leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) (json ? print_json : print_text)(all, nodes);
  int rc = lm_mesh_destroy(&mesh) != LM_SUCCESS;
  rc |= lm_finalize() != LM_SUCCESS;
  return rc;
}
