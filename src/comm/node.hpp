// SPDX-License-Identifier: BSD-3-Clause
// Node discovery: which ranks of a process set share this node and how they can reach each
// other's memory (Linux cross memory attach: process_vm_readv; mapping each other's arenas).
// Found once per agreement communicator, right after the set agreed on its settings;
// node_attach/node_peers/node_caps carry the answer to the communicators the plans use (an MPI
// attribute). The node-local data path that uses it lives in transport/node/ and the MPI
// transport; the agreement board (comm/board.hpp) is set up here too.
#pragma once

#include <mpi.h>

#include <vector>

namespace lm {

struct AgreeComm;

// What the processes of a node can do to each other's memory, probed separately and agreed per
// node: kernel copies (process_vm_readv/writev: a ptrace ATTACH-mode check, refused under Yama
// ptrace_scope >= 1 or a seccomp filter) and mapping each other's arenas (/proc/<pid>/fd/<fd>: a
// READ-mode check, which Yama scope 1 allows).
struct NodeCaps {
  bool kernel = false, mapped = false;
};

// Collective over ac->comm: fills ac->node_peers (ranks of ac->comm on this node, without this
// rank, whose memory this process can copy from and to; ac->node_kernel and ac->node_mapped say
// how). Each capability holds only when every rank of the node has it with every other (agreed
// per node, so both sides of a pair always agree); the peers are empty when neither does, when
// LM_NODE_LOCAL is off, or when an MPI call fails (then the path is simply not used); and, agreed
// over the set, whether no rank has any (AgreeComm::node_nowhere). Activates
// the shared arena (its test needs it) when the node holds other ranks of the set, then sets up
// the board.
void node_probe(AgreeComm *ac);

// Whether ac's set has ranks on more than one node (real, or simulated by LM_TEST_NODES): the
// same answer on every rank. Collective over the set.
bool set_spans_nodes(const AgreeComm *ac);

// Makes ac's node peers known to `comm` (a communicator over the same processes, e.g. a mesh's
// private one): node_peers(comm) then answers them as ranks of comm, sorted.
void node_attach(MPI_Comm comm, const AgreeComm *ac);
std::vector<int> node_peers(MPI_Comm comm);
// And what they can do (kernel copies, mapping); both false when there are none.
NodeCaps node_caps(MPI_Comm comm);
// Whether no rank of the set attached to `comm` has node peers (the same answer on every rank;
// false for a communicator node_attach never saw).
bool node_path_nowhere(MPI_Comm comm);
// Ranks `ranks[0..n)` of communicator `from` as ranks of `to` (MPI_UNDEFINED where a process is
// not in `to`); empty when an MPI call fails.
std::vector<int> translate_ranks(MPI_Comm from, MPI_Comm to, const int *ranks, int n);
// Every rank of `from` as a rank of `to`; empty when some process of `from` is not in `to` or an
// MPI call fails.
std::vector<int> all_ranks_in(MPI_Comm from, MPI_Comm to);

}  // namespace lm
