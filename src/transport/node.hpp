// SPDX-License-Identifier: BSD-3-Clause
// The node-local path of the MPI transport (issue 12 item 4; docs/DESIGN.md, "Node-local
// copies"). Ranks on one node can read each other's memory with process_vm_readv (Linux cross
// memory attach), so a large message between them can move each byte once: the receiver copies
// straight from the sender's buffer into its own, instead of MPI's shared-memory path copying it
// twice (into a shared segment, then out of it). This file holds what that needs besides the
// transport itself:
//   - which ranks of a process set share this node and can be read (node_probe, collective, run
//     once per agreement communicator; node_attach/node_peers carry the answer to the
//     communicators the plans use, as an MPI attribute);
//   - the copy: the byte runs of a box in a compact buffer (box_runs) and process_vm_readv or
//     process_vm_writev over the runs of both sides (cma_copy).
// LM_NODE_LOCAL=0 turns the path off; LM_NODE_LOCAL_MIN_BYTES (default 32 KiB) is the smallest
// message that takes it (below, MPI's eager copies cost less than the extra acknowledgement:
// measured, docs/PERFORMANCE.md "Small and mid-size exchanges").
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lm {

struct AgreeComm;

// The default of the three size floors of one-node exchanges: the node-local path's smallest
// message (LM_NODE_LOCAL_MIN_BYTES), the arena's smallest buffer (LM_NODE_ARENA_MIN_BYTES) and
// the MPI transport's smallest subarray datatype (LM_DATATYPE_MIN_BYTES). One value: a box of
// that size is then sent as a box (one copy on the node, in place elsewhere), and the buffers it
// lies in are in the arena. Measured crossover on the project's VM: between 8 and 32 KiB per
// message.
constexpr uint64_t kNodeLocalDefaultMin = uint64_t(32) << 10;

// LM_NODE_LOCAL (default on) and LM_NODE_LOCAL_MIN_BYTES, read once.
bool node_local_enabled();
size_t node_local_min_bytes();

// Collective over ac->comm (right after it is created): finds the ranks of ac->comm on this
// node whose memory this process can read, and that can read this one's; fills ac->node_peers
// (ranks of ac->comm, without this rank). Empty when the path is off, when any rank of the node
// cannot read any other (the answer is agreed per node, so both sides of a pair always agree), or
// when an MPI call fails (then the path is simply not used).
void node_probe(AgreeComm *ac);
// The agreement board. When every rank of ac's set shares this node (and the node-local path and
// the arena are on), node_probe also sets up one block of shared memory in rank 0's arena that
// every rank maps (ac->board): two banks of one 64-byte slot per rank. An agreement's first round
// (a MAX over a few words, agree.cpp) then goes through it instead of MPI_Allreduce: each rank
// writes its words into its slot of bank (seq & 1) and publishes seq there (release), then reads
// every slot of that bank once it holds seq (acquire). Two banks suffice: no rank can write round
// seq + 2 before every rank published seq + 1, i.e. finished reading round seq. While it waits a
// rank keeps MPI progressing (MPI_Iprobe: a nonblocking plan of another mesh may need its sends)
// and yields the processor. LM_AGREE_BOARD=0 keeps MPI_Allreduce.
//   board_max: v[0..nv) (nv <= 3 + kMaxAgreeMaxes) becomes the MAX over the ranks. timeout > 0:
//   after that many seconds without every rank, throws LM_ERR_TIMEOUT naming `what` and the ranks
//   not arrived.
void board_max(AgreeComm *ac, uint64_t seq, long long *v, int nv, double timeout,
               const char *what, void (*publish)(void *, char *) = nullptr,
               void *publish_ctx = nullptr);
// The board exchange: with the board, every rank of the set also has an outbox in its arena,
// two banks (by round parity, like the board's) of 2 x ranks x board_exchange_bytes() plus a
// header of 16 bytes per rank, mapped by every other rank (set up with the board, all or
// nothing). A small same-mesh reshard then packs what it sends into its bank before it publishes
// its agreement words, and after the round each rank copies its blocks straight out of its
// peers' banks: no MPI message. A bank is rewritten two rounds later at the earliest, after
// every rank published the round in between, i.e. finished reading. LM_BOARD_EXCHANGE_BYTES
// (default 32 KiB, kNodeLocalDefaultMin; 0: off): a tensor of at most that many bytes per rank
// goes this way (above, its messages take the node-local path's single copy, which wins).
size_t board_exchange_bytes();

// Makes ac's node peers known to `comm` (a communicator over the same processes, e.g. a mesh's
// private one): node_peers(comm) then answers them as ranks of comm, sorted.
void node_attach(MPI_Comm comm, const AgreeComm *ac);
std::vector<int> node_peers(MPI_Comm comm);
// Ranks `ranks[0..n)` of communicator `from` as ranks of `to` (MPI_UNDEFINED where a process is
// not in `to`); empty when an MPI call fails.
std::vector<int> translate_ranks(MPI_Comm from, MPI_Comm to, const int *ranks, int n);

// One contiguous run of bytes.
struct Run {
  uint64_t addr;
  uint64_t bytes;
};
// The runs, in row-major element order, of the box (off, len) of a compact row-major buffer of
// extents `shape` at address base, elements of esize bytes (ndim 0: one element). Adjacent rows
// that are contiguous merge into one run.
void box_runs(uint64_t base, int ndim, const int64_t *shape, const int64_t *off, const int64_t *len,
              size_t esize, std::vector<Run> *out);
// Copies the bytes of the remote runs (in process pid) into the local runs, in order (write:
// the local runs into the remote ones); both lists must cover the same number of bytes.
// Returns "" or the reason it failed (errno's text).
std::string cma_copy(pid_t pid, const std::vector<Run> &local, const std::vector<Run> &remote,
                     bool write);

// Copies the bytes of the runs `src` into the runs `dst`, in order, with memcpy: both lists are
// addresses of this process (a peer's arena mapped here, transport/arena.hpp). Both must cover
// the same number of bytes.
void runs_memcpy(const std::vector<Run> &dst, const std::vector<Run> &src);
// Moves every run by (to - from): a peer's addresses to where its arena is mapped here.
void runs_rebase(std::vector<Run> *runs, uint64_t from, uint64_t to);

}  // namespace lm
