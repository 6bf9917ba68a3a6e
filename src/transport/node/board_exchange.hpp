// SPDX-License-Identifier: BSD-3-Clause
// The board exchange: a small plan of one exchange step whose agreement set shares one node (with
// the agreement board and outboxes of comm/board.hpp) moves its data inside its agreement round,
// with no MPI message. Each rank packs its sends into its outbox bank right before it publishes
// its agreement words (a header of (offset, bytes) per agreement rank, then one 64-byte aligned
// block per destination); after the round each rank copies its blocks straight out of its peers'
// banks. Its buffers have the step's extents (in_ext / out_ext: a padded variant's are the
// arrays'). A reduce-scatter step rides the same way (each rank reduces its chunk out of its peers'
// banks), and so does P -> R as one round (each rank's whole input once in its bank, read by every
// member of its group; transport/fused_reduce.hpp). Chosen by transport/select.hpp
// (select_fused_exchange).
#pragma once

#include <mpi.h>

#include <memory>

#include "transport/transport.hpp"

namespace lm {

struct AgreeComm;
struct Schedule;

// The board exchange of schedule s (plan communicator comm, agreement set ac), or NULL when the
// plan cannot take it: not one exchange or reduce-scatter step nor a one-round P -> R, no
// outboxes, the tensor (for P -> R: the k - 1 inputs a rank reads) larger than ranks x
// LM_BOARD_EXCHANGE_BYTES, or this rank's sends larger than its bank (a rank that cannot says so
// in the round: the caller agrees on whether every rank packed).
std::unique_ptr<FusedExchange> board_exchange_for(const Schedule &s, MPI_Comm comm,
                                                  const AgreeComm *ac);

}  // namespace lm
