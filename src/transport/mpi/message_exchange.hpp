// SPDX-License-Identifier: BSD-3-Clause
// The message exchange: a small plan of one exchange or reduce-scatter step on a set that agrees
// by messages (AgreeComm::by_messages, comm/agree_msg.cpp) sends its data inside its agreement
// messages. Each rank packs its block for every agreement rank after the room for its words
// (Ride), or on one node sends a block that is one run of its input apart, right after them
// (Ride::apart); the round carries them, and after a round in which every rank packed, each rank
// copies its blocks out of its own room and does its local copies (an exchange), or reduces its
// chunk's contributions in group order (a reduce-scatter: the same bits as the transport's run).
// The MPI counterpart of the board exchange (transport/node/board_exchange.hpp), chosen by
// transport/select.hpp (select_fused_exchange).
#pragma once

#include <mpi.h>

#include <memory>

#include "transport/transport.hpp"

namespace lm {

struct AgreeComm;
struct Schedule;

// The message exchange of schedule s (plan communicator comm, agreement set ac), or NULL when the
// plan cannot take it: the set does not agree by messages, not one exchange step or one
// reduce-scatter into a compact output, two messages for one peer, or the tensor
// larger than ranks x LM_MESSAGE_EXCHANGE_BYTES (decided from the plan and the agreed settings
// alone: every rank with the same plan decides alike).
std::unique_ptr<FusedExchange> message_exchange_for(const Schedule &s, MPI_Comm comm,
                                                    const AgreeComm *ac);

}  // namespace lm
