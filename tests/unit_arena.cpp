// SPDX-License-Identifier: BSD-3-Clause
// unit_arena: the shared arena of the node-local path (src/mem/arena.hpp) on an arena of 1 MiB and
// its header page (LM_NODE_ARENA_BYTES, set before first use). Blocks are
// page-rounded, first fit, coalesced on free, the arena refuses what does not fit; freed pages go
// back to the kernel (a reused block reads zeros); offsets name blocks. Peers' windows (this
// process mapping its own arena as a peer would): they share the bytes both ways, read-only ones
// cannot be written, an identity that does not match (descriptor, inode, nonce) maps nothing, and
// windows beyond LM_NODE_PEER_MAP_BYTES (set to one window) are unmapped, least recently used
// first, unless pinned. A fork() child reads the parent's arena, its writes stay its own, it hands
// out and frees nothing there (the pool's cached arena buffers dropped), and maps no peer windows.
// No MPI.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mem/arena.hpp"
#include "mem/pool.hpp"
#include "unit_check.hpp"

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kUsable = size_t(1) << 20;
constexpr size_t kArena = kUsable + kPage;  // the header page is not handed out
constexpr size_t kQ = kUsable / 4;

void test_blocks() {
  g_test = "blocks";
  CHECK(lm::arena_activate());
  CHECK(lm::arena_activate());  // idempotent
  CHECK(lm::arena_limits().size == kArena && !lm::arena_limits().as_capped);
  size_t c[5] = {0};
  char *b[5];
  for (int i = 0; i < 4; ++i) {
    b[i] = static_cast<char *>(lm::arena_alloc(kQ - 100, &c[i]));  // rounds up to kQ
    CHECK(b[i] != nullptr && c[i] == kQ);
    std::memset(b[i], 0x11 * (i + 1), kQ);
  }
  CHECK(b[1] == b[0] + kQ && b[3] == b[0] + 3 * kQ);
  CHECK(lm::arena_in_use() == kUsable);
  CHECK(lm::arena_alloc(1, &c[4]) == nullptr);  // full
  CHECK(lm::arena_offset(b[0], kQ) == kPage);     // offsets are the memfd's, after the header
  CHECK(lm::arena_offset(b[2], kQ) == kPage + 2 * kQ);
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
  for (size_t i = 0; i < 2 * kQ; i += kPage) zero &= m[i] == 0;
  CHECK(zero);
  CHECK(b[0][kQ - 1] == 0x11 && b[3][0] == 0x44);  // the neighbours kept their bytes
  // Free everything (out of order): the whole arena is one block again.
  CHECK(lm::arena_free(b[3], c[3]) && lm::arena_free(b[0], c[0]) && lm::arena_free(m, c[4]));
  CHECK(lm::arena_in_use() == 0);
  char *all = static_cast<char *>(lm::arena_alloc(kUsable, &c[4]));
  CHECK(all == b[0]);
  CHECK(lm::arena_free(all, c[4]));
  lm::ArenaReport r = lm::arena_report();
  CHECK(r.active && !r.child && r.mapped == kUsable && r.in_use == 0);
}

// This process's mappings of its own arena's memfd other than its segments: (bytes, writable).
void window_maps(const lm::ArenaId &id, size_t *all, size_t *writable) {
  *all = *writable = 0;
  FILE *f = std::fopen("/proc/self/maps", "r");
  char line[512];
  while (f && std::fgets(line, sizeof line, f)) {
    unsigned long a, b, off, ino;
    char perms[8], dev[16];
    if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu", &a, &b, perms, &off, dev, &ino) != 6 ||
        ino != id.ino || !std::strstr(line, "localmap-arena"))
      continue;
    if (perms[1] == 'w' && !lm::arena_owns((void *)a)) *writable += b - a;
    if (!lm::arena_owns((void *)a)) *all += b - a;
  }
  if (f) std::fclose(f);
}

// Whether writing *p kills a child process (the mapping is read-only).
bool write_faults(char *p) {
  pid_t c = fork();
  if (c == 0) {
    signal(SIGSEGV, SIG_DFL);
    *(volatile char *)p = 'x';
    _exit(0);
  }
  int st = 0;
  return waitpid(c, &st, 0) == c && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

// What a peer sees: windows of the arena (PeerView of this process's own id) share the bytes
// both ways; read-only ones are mapped so (/proc/self/maps); a wrong identity maps nothing.
void test_peer_views() {
  g_test = "peer_views";
  lm::ArenaId id = lm::arena_self();
  CHECK(id.fd >= 0 && id.size == kArena && id.pid == (int32_t)getpid() && id.ino && id.nonce);
  CHECK(lm::arena_peer_check(id));
  size_t cap = 0;
  char *p = static_cast<char *>(lm::arena_alloc(8192, &cap));
  CHECK(p != nullptr);
  const uint64_t off = lm::arena_offset(p, cap);
  std::memcpy(p, "arena", 6);
  // Identities that do not match (a reused pid or descriptor number): another descriptor, inode
  // or nonce. (Windows are cached by identity, so these come first.)
  lm::ArenaId bad = id;
  bad.fd = 987;
  CHECK(!lm::arena_peer_check(bad) && !lm::PeerView(bad, off, false));
  bad = id;
  bad.ino += 1;
  CHECK(!lm::arena_peer_check(bad) && !lm::PeerView(bad, off, false));
  bad = id;
  bad.nonce ^= 1;
  CHECK(!lm::arena_peer_check(bad) && !lm::PeerView(bad, off, false));
  CHECK(lm::arena_report().peer_windows == 0);
  {
    lm::PeerView rd(id, off, false), wr(id, off + 4096, true);
    CHECK(rd && wr && rd.data() != p && rd.avail() == kArena - off);
    CHECK(std::memcmp(rd.data(), "arena", 6) == 0);
    wr.data()[0] = 'x';
    CHECK(p[4096] == 'x');
    lm::PeerView again(id, off, false);
    CHECK(again.data() == rd.data());  // one window, cached
    CHECK(write_faults(rd.data()) && write_faults(wr.data()));  // a fork() child has neither
    size_t all = 0, w = 0;
    window_maps(id, &all, &w);
    CHECK(all == 2 * kArena && w == kArena);  // one read-only, one writable window
  }
  CHECK(!lm::PeerView(id, kArena, false));  // past the end
  CHECK(lm::arena_free(p, cap));
}

// LM_NODE_PEER_MAP_BYTES is one window here: a second window evicts the first once unpinned.
void test_window_budget() {
  g_test = "window_budget";
  lm::ArenaId id = lm::arena_self();
  CHECK(lm::arena_limits().peer_budget == kArena);
  size_t all = 0, w = 0;
  {
    lm::PeerView a(id, kPage, false);
    {
      lm::PeerView b(id, kPage, true);  // both pinned: over the budget for now
      CHECK(a && b);
      window_maps(id, &all, &w);
      CHECK(all == 2 * kArena);
    }
    window_maps(id, &all, &w);  // b unpinned and over the budget: unmapped
    CHECK(all == kArena && w == 0);
    CHECK(lm::arena_report().peer_windows == 1 && lm::arena_report().peer_writable == 0);
  }
  char *pin = lm::arena_peer_pin(id, kPage + 100, 10, false);  // for life, outside the budget
  CHECK(pin != nullptr && lm::arena_report().peer_pinned == kPage);
  lm::PeerView b(id, kPage, true);
  window_maps(id, &all, &w);
  CHECK(all == kArena + kPage && w == kArena);  // the read-only window made room
}

// A fork() child: it reads the parent's arena blocks, writes them privately, hands out and frees
// nothing there (the pool's cached arena buffers dropped), and maps no peer windows.
void test_fork() {
  g_test = "fork";
  size_t pcap = 0;
  void *cached = lm::pool_take(200000, &pcap);  // from the arena (min bytes 1, set in main)
  CHECK(cached != nullptr && lm::arena_owns(cached));
  lm::pool_give(cached, pcap, 200000);  // now cached in the pool
  size_t cap = 0;
  char *p = static_cast<char *>(lm::arena_alloc(8192, &cap));
  CHECK(p != nullptr);
  std::memcpy(p, "parent", 7);
  lm::ArenaId id = lm::arena_self();
  pid_t c = fork();
  if (c == 0) {
    int bad = 0;
    size_t k = 0;
    if (std::memcmp(p, "parent", 7) != 0) bad |= 1;  // reads the parent's bytes
    std::memcpy(p, "child", 6);                       // a private copy
    if (std::memcmp(p, "child", 6) != 0) bad |= 1;
    if (lm::arena_alloc(4096, &k) != nullptr) bad |= 2;
    if (lm::arena_offset(p, cap) != UINT64_MAX || lm::arena_self().fd >= 0) bad |= 2;
    if (!lm::arena_in_child() || !lm::arena_free(p, cap)) bad |= 2;  // frees nothing
    void *q = lm::pool_take(200000, &k);  // the cached arena buffer must not come back here
    if (!q || lm::arena_owns(q)) bad |= 4;
    lm::pool_give(p, cap, cap);  // an arena buffer given to the pool: not cached
    void *q2 = lm::pool_take(cap, &k);
    if (q2 == p) bad |= 4;
    if (lm::PeerView(id, kPage, false)) bad |= 8;  // no peer windows in a child
    _exit(bad);
  }
  int status = -1;
  CHECK(waitpid(c, &status, 0) == c);
  CHECK(WIFEXITED(status));
  if (WIFEXITED(status) && WEXITSTATUS(status))
    std::fprintf(stderr, "  child reported %d (1 read/write, 2 alloc/free, 4 pool, 8 windows)\n",
                 WEXITSTATUS(status));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(std::memcmp(p, "parent", 7) == 0);  // the child's writes and free did not reach here
  CHECK(lm::arena_free(p, cap));
  // The parent's pool still has its cached buffer.
  size_t k = 0;
  void *again = lm::pool_take(200000, &k);
  CHECK(again == cached);
  lm::pool_give(again, k, 200000);
}

}  // namespace

int main() {
  setenv("LM_NODE_ARENA_BYTES", std::to_string(kArena).c_str(), 1);
  setenv("LM_NODE_ARENA_MIN_BYTES", "1", 1);
  setenv("LM_NODE_PEER_MAP_BYTES", std::to_string(kArena).c_str(), 1);
  unsetenv("LM_NODE_LOCAL");
  test_blocks();
  test_peer_views();
  test_window_budget();
  test_fork();
  return unit_check_report("unit_arena");
}
