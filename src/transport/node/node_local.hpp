// SPDX-License-Identifier: BSD-3-Clause
// The node-local provider: copies between the memory of two processes on one node, each byte
// once. A region of a peer's memory is named by its owner as byte runs (a box of a compact
// buffer: box_runs, layout/runs.hpp); the bytes move with memcpy through a window of the peer's
// shared arena mapped here (mem/arena.hpp: PeerView; mapped_copy) or through the kernel
// (process_vm_readv / process_vm_writev: cma_copy). The MPI transport (transport/mpi/) runs its
// node-local message protocol on top of it and moves the bytes itself when neither can; nothing
// here sends a message.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/node.hpp"
#include "mem/arena.hpp"
#include "transport/transport.hpp"

namespace lm {

// The rule of the node-local path for one blocking host message of `bytes` to `peer` (node: the
// sorted node_peers of the communicator): at or above LM_NODE_LOCAL_MIN_BYTES to a peer on this
// node. The MPI transport applies it (cma_peer); lm_reshard_plan_info reports with it.
bool takes_node_local(const std::vector<int> &node, int peer, size_t bytes);

// The runs of a pieces message (transport.hpp, PiecesRef) in a compact buffer of extents `shape`
// at address base: the sender's (offsets `a`) or the receiver's (offsets `b`), pieces in row-major
// order of their runs, each piece's rows in order; adjacent runs merge.
void pieces_runs(uint64_t base, const int64_t *shape, size_t esize, const PieceMsg &m, bool sender,
                 std::vector<Run> *out);
// Copies the bytes of the remote runs (in process pid) into the local runs, in order (write:
// the local runs into the remote ones); both lists must cover the same number of bytes.
// Returns "" or the reason it failed (errno's text).
std::string cma_copy(pid_t pid, const std::vector<Run> &local, const std::vector<Run> &remote,
                     bool write);
// A run of a message of several buffers (Transport::post_*_parts) as its sender lists it: where,
// and its offset in the sender's shared arena (UINT64_MAX: not in the arena).
struct PartRun {
  uint64_t addr, bytes, arena_off;
};
// The runs of a message of several buffers, each with its offset in this process's arena.
void parts_arena_runs(const Run *runs, size_t n, std::vector<PartRun> *out);
// Maps every one of a peer's runs `remote` (in its arena `arena`) here, each within one window,
// pinned in *pins until they are dropped; *view: where each lies here. False (nothing pinned)
// where one is outside the arena or cannot be mapped whole.
bool parts_map(const ArenaId &arena, const std::vector<PartRun> &remote,
               std::vector<PeerView> *pins, std::vector<Run> *view);
// Copies a peer's parts (its runs `remote`, in process pid, whose arena is `arena`) into this
// process's runs `mine` (the same bytes in order): the runs in the peer's arena with memcpy through
// windows of it when `mapped`, the others (and any whose window cannot be mapped) with one kernel
// copy. Returns "" or why it failed.
std::string parts_read(pid_t pid, const ArenaId &arena, const std::vector<PartRun> &remote,
                       const std::vector<Run> &mine, bool mapped);
// A region of one process's memory as its owner describes it to a peer on this node: `bytes`
// contiguous bytes at addr (ndim < 0), or the box (off, len) of a compact buffer of extents
// `shape` at addr. When the buffer lies in the owner's shared arena, which arena (its identity,
// checked before a peer maps any of it) and at what offset. Plain data: it travels in a message
// as it is.
struct Region {
  int32_t pid = 0, ndim = -1;
  ArenaId arena;                    // mem/arena.hpp; fd < 0: not in an arena
  uint64_t arena_off = UINT64_MAX;  // of addr; UINT64_MAX: not in the arena
  uint64_t addr = 0, bytes = 0, esize = 0;
  int64_t shape[kBoxMaxDims], off[kBoxMaxDims], len[kBoxMaxDims];
};
// This process's region: `bytes` at buf, or (b non-NULL) the box b of the buffer at buf.
void region_describe(Region &r, const void *buf, const BoxRef *b, size_t bytes);
// The byte runs a region names (addresses of its owner).
void region_runs(const Region &r, std::vector<Run> *out);
// Whether the region lies in its owner's arena.
inline bool region_in_arena(const Region &r) { return r.arena_off != UINT64_MAX && r.arena.fd >= 0; }

// Copies between this process's runs `mine` and the peer's region through windows of the peer's
// arena mapped here (mem/arena.hpp: PeerView), read-only unless `write` (mine into the peer's).
// False when the region is not in an arena or a window cannot be mapped (nothing is promised of
// the bytes then: the caller copies them all another way).
bool mapped_copy(const Region &peer, const std::vector<Run> &mine, bool write);

// One message, both sides' regions known to the receiver, which decides who copies, each byte
// once: itself, reading the sender's buffer through a read-only window of the sender's arena;
// else the sender, writing into the receiver's buffer when that is in the receiver's arena; else,
// with kernel copies, the side facing fewer runs (the kernel pins the remote side run by run):
// the receiver (process_vm_readv) when the sender's side has no more runs than its own, else the
// sender (process_vm_writev); else nobody: the bytes travel over MPI.
// receiver_copy returns true when the receiver copied (*why: "" or why a kernel copy failed);
// false when the sender is to move the bytes: *push true (write into the receiver's region),
// false (send them over MPI).
bool receiver_copy(const Region &sender, const Region &receiver, const std::vector<Run> &mine,
                   NodeCaps caps, bool *push, std::string *why);
// The sender's part of a push: true when it wrote the receiver's region (through a writable
// window of the receiver's arena, else the kernel; *why as above); false: send over MPI instead.
bool sender_push(const std::vector<Run> &mine, const Region &receiver, NodeCaps caps,
                 std::string *why);

}  // namespace lm
