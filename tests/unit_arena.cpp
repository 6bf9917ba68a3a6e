// SPDX-License-Identifier: BSD-3-Clause
// unit_arena: the shared arena of the node-local path (src/mem/arena.hpp) on a 1 MiB arena
// (LM_NODE_ARENA_BYTES, set before first use). Blocks are page-rounded, first fit, coalesced on
// free, the arena refuses what does not fit; freed pages go back to the kernel (a reused block
// reads zeros); offsets name blocks; a second mapping of the arena (what a node-local peer gets
// from arena_peer) shares its bytes both ways; a fork() child sees the arena off (no blocks
// handed out, no offsets, the pool's cached arena buffers dropped) and can still map the parent's
// arena through /proc/<pid>/fd/<fd>, as a peer does, and write into it. No MPI.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mem/pool.hpp"
#include "mem/arena.hpp"
#include "unit_check.hpp"

namespace {

constexpr size_t kArena = size_t(1) << 20;
constexpr size_t kQ = kArena / 4;

void test_blocks() {
  g_test = "blocks";
  CHECK(lm::arena_activate());
  CHECK(lm::arena_activate());  // idempotent
  size_t c[5] = {0};
  char *b[5];
  for (int i = 0; i < 4; ++i) {
    b[i] = static_cast<char *>(lm::arena_alloc(kQ - 100, &c[i]));  // rounds up to kQ
    CHECK(b[i] != nullptr && c[i] == kQ);
    std::memset(b[i], 0x11 * (i + 1), kQ);
  }
  CHECK(b[1] == b[0] + kQ && b[3] == b[0] + 3 * kQ);
  CHECK(lm::arena_in_use() == kArena);
  CHECK(lm::arena_alloc(1, &c[4]) == nullptr);  // full
  CHECK(lm::arena_offset(b[2], kQ) == 2 * kQ);
  CHECK(lm::arena_offset(b[3] + 1, kQ) == UINT64_MAX);  // runs past the end
  int local = 0;
  CHECK(lm::arena_offset(&local, sizeof local) == UINT64_MAX);
  CHECK(lm::arena_owns(b[3] + kQ - 1) && !lm::arena_owns(&local));
  CHECK(!lm::arena_free(&local, sizeof local));  // not ours: the caller frees it
  // Free the middle two: they coalesce, and a block of both fits there; its pages read zero.
  CHECK(lm::arena_free(b[1], c[1]) && lm::arena_free(b[2], c[2]));
  char *m = static_cast<char *>(lm::arena_alloc(2 * kQ, &c[4]));
  CHECK(m == b[1] && c[4] == 2 * kQ);
  bool zero = true;
  for (size_t i = 0; i < 2 * kQ; i += 4096) zero &= m[i] == 0;
  CHECK(zero);
  CHECK(b[0][kQ - 1] == 0x11 && b[3][0] == 0x44);  // the neighbours kept their bytes
  // Free everything (out of order): the whole arena is one block again.
  CHECK(lm::arena_free(b[3], c[3]) && lm::arena_free(b[0], c[0]) && lm::arena_free(m, c[4]));
  CHECK(lm::arena_in_use() == 0);
  char *all = static_cast<char *>(lm::arena_alloc(kArena, &c[4]));
  CHECK(all == b[0]);
  CHECK(lm::arena_free(all, c[4]));
}

// What a peer sees: a second mapping of the arena (arena_peer of this process's own id) shares
// the bytes both ways.
void test_peer_mapping() {
  g_test = "peer_mapping";
  lm::ArenaId id = lm::arena_self();
  CHECK(id.fd >= 0 && id.size == kArena && id.pid == (int32_t)getpid());
  size_t cap = 0;
  char *p = static_cast<char *>(lm::arena_alloc(8192, &cap));
  CHECK(p != nullptr);
  char *peer = lm::arena_peer(id);
  CHECK(peer != nullptr && peer != p);
  CHECK(lm::arena_peer(id) == peer);  // mapped once
  const uint64_t off = lm::arena_offset(p, cap);
  std::memcpy(p, "arena", 6);
  CHECK(std::memcmp(peer + off, "arena", 6) == 0);
  peer[off + 4096] = 'x';
  CHECK(p[4096] == 'x');
  lm::ArenaId bad = id;
  bad.fd = 987;  // not an open descriptor
  CHECK(lm::arena_peer(bad) == nullptr);
  CHECK(lm::arena_free(p, cap));
}

// A fork() child: the arena is off there, the pool drops its cached arena buffers, and the
// parent's arena can be mapped through /proc as a peer would, with writes the parent sees.
void test_fork() {
  g_test = "fork";
  size_t pcap = 0;
  void *cached = lm::pool_take(200000, &pcap);  // from the arena (min bytes 1, set in main)
  CHECK(cached != nullptr && lm::arena_owns(cached));
  lm::pool_give(cached, pcap, 200000);  // now cached in the pool
  size_t cap = 0;
  char *p = static_cast<char *>(lm::arena_alloc(4096, &cap));
  CHECK(p != nullptr);
  std::memset(p, 0, cap);
  const uint64_t off = lm::arena_offset(p, cap);
  lm::ArenaId id = lm::arena_self();
  pid_t parent = getpid();
  pid_t c = fork();
  if (c == 0) {
    int bad = 0;
    size_t k = 0;
    if (lm::arena_alloc(4096, &k) != nullptr) bad |= 1;
    if (lm::arena_offset(p, cap) != UINT64_MAX || lm::arena_self().fd >= 0) bad |= 2;
    void *q = lm::pool_take(200000, &k);  // the cached arena buffer must not come back here
    if (!q || lm::arena_owns(q)) bad |= 4;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)parent, id.fd);
    int fd = open(path, O_RDWR);
    void *m = fd >= 0 ? mmap(nullptr, id.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (m == MAP_FAILED)
      bad |= 8;
    else
      std::memcpy(static_cast<char *>(m) + off, "child", 6);
    _exit(bad);
  }
  int status = -1;
  CHECK(waitpid(c, &status, 0) == c);
  CHECK(WIFEXITED(status));
  if (WIFEXITED(status) && WEXITSTATUS(status))
    std::fprintf(stderr, "  child reported %d (1 alloc, 2 offset/id, 4 pool, 8 map)\n",
                 WEXITSTATUS(status));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(std::memcmp(p, "child", 6) == 0);
  CHECK(lm::arena_free(p, cap));
  // The parent's pool still has its cached buffer.
  size_t k = 0;
  void *again = lm::pool_take(200000, &k);
  CHECK(again == cached);
  lm::pool_give(again, k, 200000);
}

}  // namespace

int main() {
  setenv("LM_NODE_ARENA_BYTES", "1048576", 1);
  setenv("LM_NODE_ARENA_MIN_BYTES", "1", 1);
  unsetenv("LM_NODE_LOCAL");
  test_blocks();
  test_peer_mapping();
  test_fork();
  return unit_check_report("unit_arena");
}
