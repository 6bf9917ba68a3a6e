// SPDX-License-Identifier: BSD-3-Clause
#include "transport/select.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "comm/agree.hpp"
#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "mem/cuda.hpp"
#include "transport/mpi/message_exchange.hpp"
#include "transport/mpi/mpi.hpp"
#include "transport/nccl/comm.hpp"
#include "transport/node/board_exchange.hpp"
#include "transport/nccl/nccl.hpp"
#include "transport/node/node_local.hpp"

namespace lm {

// The one kind of device communicator.
struct DeviceComm {
  NcclComm nccl;
};

bool TransportSpec::same(const TransportSpec &o) const {
  if (kind != o.kind || comm != o.comm) return false;
  if (kind == kHost) return true;
  return device_comm == o.device_comm && stream == o.stream && device == o.device &&
         peer_map == o.peer_map;
}

TransportSpec select_device_spec(MPI_Comm comm, DeviceComm *dc, void *stream, int device,
                                 std::vector<int> peer_map) {
  TransportSpec spec;
  spec.kind = TransportSpec::kNccl;
  spec.comm = comm;
  spec.device_comm = dc;
  spec.stream = stream;
  spec.device = device;
  spec.peer_map = std::move(peer_map);
  return spec;
}

bool device_comm_ready(const DeviceComm *dc, int device_id, const char *whose) {
  if (!dc || !dc->nccl.comm) return false;
  nccl_check_device(dc->nccl, device_id, whose);
  return true;
}

void device_comm_create(DeviceComm **dc, MPI_Comm c, int n, int rank, int device_id) {
  if (!*dc) *dc = new DeviceComm();
  nccl_init((*dc)->nccl, c, n, rank, device_id);
}

void device_comm_destroy(DeviceComm **dc) {
  if (!*dc) return;
  (*dc)->nccl.release();
  delete *dc;
  *dc = nullptr;
}

Route select_route(const TransportSpec &spec) {
  Route r;
  if (spec.kind == TransportSpec::kHost) {
    r.wire = std::make_unique<MpiTransport>(spec.comm);
    r.mem = host_ops();
    return r;
  }
  r.mem = device_ops(spec.stream, spec.device);  // LM_ERR_NOT_SUPPORTED without the component
  r.wire = std::make_unique<NcclTransport>(&spec.device_comm->nccl, spec.stream, spec.device,
                                           spec.peer_map);
  return r;
}

namespace {
struct GpuId {
  char host[64];
  char bus[32];
};
}  // namespace

int choose_device_transport(MPI_Comm c, int n, int device_id, const char *who, std::string *why) {
  if (setting_u(Setting::Transport) == kTransportMpi) {
    *why = "LM_TRANSPORT=mpi";
    return LM_TRANSPORT_MPI_STAGED;
  }
  if (!device_component_loaded()) {
    *why = std::string("device data is staged through host: ") + cuda_absent_reason();
    return LM_TRANSPORT_MPI_STAGED;
  }
  GpuId mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  if (const char *hid = std::getenv("NCCL_HOSTID"))  // NCCL_SPLIT_HOSTS test mode: NCCL's view
    std::snprintf(mine.host, sizeof mine.host, "%s", hid);
  std::snprintf(mine.bus, sizeof mine.bus, "%s", cuda_pci_bus_id(device_id).c_str());
  std::vector<GpuId> all((size_t)n);
  mpi_check(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine,
                          MPI_BYTE, c),
            "device transport choice: MPI_Allgather of host and PCI bus ids");
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (!std::strcmp(all[i].host, all[j].host) && !std::strcmp(all[i].bus, all[j].bus)) {
        *why = strfmt("%s %zu and %zu share the GPU %s on host %s", who, i, j, all[i].bus,
                      all[i].host);
        return LM_TRANSPORT_MPI_STAGED;
      }
  *why = strfmt("NCCL: each of the %s has its own GPU", who);
  return LM_TRANSPORT_NCCL;
}

std::unique_ptr<FusedExchange> select_fused_exchange(const Schedule &s, MPI_Comm comm,
                                                     const AgreeComm *ac, bool across_meshes) {
  if (!across_meshes) {
    if (ac && ac->by_messages) return message_exchange_for(s, comm, ac);  // (NULL: no ride)
    return board_exchange_for(s, comm, ac);
  }
  if (!ac || !ac->by_messages) return nullptr;
  std::unique_ptr<FusedExchange> fx = message_exchange_for(s, comm, ac);
  return fx && fx->traffic(nullptr) ? nullptr : std::move(fx);
}

bool select_node_local_route(const std::vector<int> &node, int peer, size_t bytes) {
  return takes_node_local(node, peer, bytes);
}

}  // namespace lm
