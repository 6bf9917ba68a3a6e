// SPDX-License-Identifier: BSD-3-Clause
// The agreement board: when every rank of a process set shares this node (and the node-local path,
// mapping each other's arenas and LM_AGREE_BOARD allow: kernel copies are not needed), an
// agreement's first round (a MAX over a few words, comm/agree.cpp) goes through shared memory
// instead of MPI_Allreduce. One block in rank 0's arena (mem/arena.hpp) that every rank maps
// read-write (just its pages, for the life of the process): two banks of one 64-byte slot per rank. A rank
// writes its words into its slot of bank (seq & 1) and publishes seq there (release), then reads
// every slot of that bank once it holds seq (acquire). Two banks suffice: no rank can write round
// seq + 2 before every rank published seq + 1, i.e. finished reading round seq. While it waits a
// rank keeps MPI progressing (MPI_Iprobe: a nonblocking plan of another mesh may need its sends)
// and yields the processor.
//
// The outboxes: with the board, every rank of the set also has an outbox in its arena, two banks
// (by round parity, like the board's) of 2 x ranks x LM_BOARD_EXCHANGE_BYTES plus a header of 16
// bytes per rank, mapped read-only by every other rank (set up with the board, all or nothing).
// The board exchange (transport/node/board_exchange.hpp) packs a small plan's sends there before
// the rank publishes its agreement words; peers copy their blocks out after the round. A bank is
// rewritten two rounds later at the earliest, after every rank published the round in between.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/agree.hpp"

namespace lm {

// Collective over ac->comm, at the end of node_probe (comm/node.hpp): sets ac->board and
// ac->outbox when every rank of the set can (all or nothing); nothing otherwise.
void board_setup(AgreeComm *ac);

// v[0..nv) (nv <= 3 + kMaxAgreeMaxes) becomes the MAX over the ranks. timeout > 0: after that many
// seconds without every rank, throws LM_ERR_TIMEOUT naming `what`. publish (may be NULL) is called
// with this rank's outbox bank of the round right before it publishes its words.
void board_max(AgreeComm *ac, uint64_t seq, long long *v, int nv, double timeout,
               const char *what, void (*publish)(void *, char *) = nullptr,
               void *publish_ctx = nullptr);

// LM_BOARD_EXCHANGE_BYTES (per rank; 0: no outboxes, no board exchange).
size_t board_exchange_bytes();

}  // namespace lm
