// SPDX-License-Identifier: BSD-3-Clause
// The node-local provider: copies between the memory of two processes on one node, each byte
// once. A region of a peer's memory is named by its owner as byte runs (a box of a compact
// buffer: box_runs); the bytes move with memcpy when the peer's shared arena is mapped here
// (mem/arena.hpp: arena_peer) or through the kernel (process_vm_readv / process_vm_writev:
// cma_copy) otherwise. The MPI transport (transport/mpi/) runs its node-local message protocol on
// top of it; nothing here sends a message.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace lm {

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
// addresses of this process (a peer's arena mapped here). Both must cover the same bytes.
void runs_memcpy(const std::vector<Run> &dst, const std::vector<Run> &src);
// Moves every run by (to - from): a peer's addresses to where its arena is mapped here.
void runs_rebase(std::vector<Run> *runs, uint64_t from, uint64_t to);

// A region of one process's memory as its owner describes it to a peer on this node: `bytes`
// contiguous bytes at addr (ndim < 0), or the box (off, len) of a compact buffer of extents
// `shape` at addr. When the buffer lies in the owner's shared arena, where (fd, size, offset),
// so that the peer can map it. Plain data: it travels in a message as it is.
struct Region {
  int32_t pid = 0, ndim = -1;
  int32_t arena_fd = -1;
  uint64_t arena_size = 0;
  uint64_t arena_off = UINT64_MAX;  // UINT64_MAX: not in the arena
  uint64_t addr = 0, bytes = 0, esize = 0;
  int64_t shape[kBoxMaxDims], off[kBoxMaxDims], len[kBoxMaxDims];
};
// This process's region: `bytes` at buf, or (b non-NULL) the box b of the buffer at buf.
void region_describe(Region &r, const void *buf, const BoxRef *b, size_t bytes);
// The byte runs a region names (addresses of its owner).
void region_runs(const Region &r, std::vector<Run> *out);
// Where the owner's arena holding r is mapped in this process (mapped on first use, kept), or
// NULL: r is not in an arena, or it cannot be mapped here (then the kernel copies).
char *region_mapping(const Region &r);
// Who copies a message, decided by the receiver from both sides' regions: true when the
// receiver reads the sender's region (it is mapped here, or neither side is in an arena and the
// sender's side has no more runs than the receiver's); false when the sender writes into the
// receiver's region (the receiver's buffer is in its arena, or the sender's side has more runs).
bool receiver_copies(const Region &sender, const Region &receiver);
// The copies, each byte once: memcpy through the peer's mapped arena, else the kernel
// (process_vm_readv / process_vm_writev). `mine` are this process's runs. "" or why it failed.
std::string copy_from_peer(const Region &peer, const std::vector<Run> &mine);
std::string copy_to_peer(const std::vector<Run> &mine, const Region &peer);

}  // namespace lm
