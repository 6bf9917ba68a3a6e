// SPDX-License-Identifier: BSD-3-Clause
// Node discovery: which ranks of a process set share this node and can read each other's memory
// (Linux cross memory attach: process_vm_readv). Found once per agreement communicator, right
// after the set agreed on its settings; node_attach/node_peers carry the answer to the
// communicators the plans use (an MPI attribute). The node-local data path that uses it lives in
// transport/node/ and the MPI transport; the agreement board (comm/board.hpp) is set up here too.
#pragma once

#include <mpi.h>

#include <vector>

namespace lm {

struct AgreeComm;

// Collective over ac->comm: fills ac->node_peers (ranks of ac->comm on this node whose memory
// this process can read and that can read this one's, without this rank). Empty when
// LM_NODE_LOCAL is off, when any rank of the node cannot read any other (the answer is agreed per
// node, so both sides of a pair always agree), or when an MPI call fails (then the path is simply
// not used). Activates the shared arena when there are peers, then sets up the board.
void node_probe(AgreeComm *ac);

// Makes ac's node peers known to `comm` (a communicator over the same processes, e.g. a mesh's
// private one): node_peers(comm) then answers them as ranks of comm, sorted.
void node_attach(MPI_Comm comm, const AgreeComm *ac);
std::vector<int> node_peers(MPI_Comm comm);
// Ranks `ranks[0..n)` of communicator `from` as ranks of `to` (MPI_UNDEFINED where a process is
// not in `to`); empty when an MPI call fails.
std::vector<int> translate_ranks(MPI_Comm from, MPI_Comm to, const int *ranks, int n);

}  // namespace lm
