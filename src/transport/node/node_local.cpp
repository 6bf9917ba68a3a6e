// SPDX-License-Identifier: BSD-3-Clause
#include "transport/node/node_local.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/settings.hpp"
#include "mem/arena.hpp"

namespace lm {

bool takes_node_local(const std::vector<int> &node, int peer, size_t bytes) {
  return bytes >= (size_t)setting_u(Setting::NodeLocalMinBytes) &&
         std::binary_search(node.begin(), node.end(), peer);
}

namespace {
// A position in a run list: run index and bytes of that run already taken.
struct Cursor {
  const std::vector<Run> *runs;
  size_t i = 0;
  uint64_t off = 0;
  bool end() const { return i >= runs->size(); }
  // Bytes in the next `max` runs from here.
  uint64_t ahead(int max) const {
    uint64_t b = 0;
    for (size_t k = i; k < runs->size() && k < i + (size_t)max; ++k)
      b += (*runs)[k].bytes - (k == i ? off : 0);
    return b;
  }
  // Fills v with iovecs covering the next `bytes` bytes; returns their count.
  int take(uint64_t bytes, struct iovec *v) {
    int n = 0;
    while (bytes) {
      const Run &r = (*runs)[i];
      uint64_t k = std::min(bytes, r.bytes - off);
      v[n].iov_base = (void *)(uintptr_t)(r.addr + off);
      v[n].iov_len = (size_t)k;
      ++n;
      bytes -= k;
      if ((off += k) == r.bytes) ++i, off = 0;
    }
    return n;
  }
};
}  // namespace

void pieces_runs(uint64_t base, const int64_t *shape, size_t esize, const PieceMsg &m, bool sender,
                 std::vector<Run> *out) {
  out->clear();
  const int n = (int)m.dims.size();
  for (int d = 0; d < n; ++d)
    if (m.dims[(size_t)d].empty()) return;
  int64_t idx[kBoxMaxDims] = {0};
  for (;;) {  // each piece, in message order: its contiguous runs from the box copy's walk
    BoxCopy c;
    piece_boxcopy(c, m, idx, shape, sender, nullptr, false, (int64_t)esize);
    const int64_t L = c.len[c.n - 1];
    for (int64_t e = 0; L > 0 && e < c.numel; e += L) {
      int64_t so = 0, dof = 0;
      boxcopy_locate(c, e, &so, &dof);
      const Run r{base + (uint64_t)so * esize, (uint64_t)L * esize};
      if (!out->empty() && out->back().addr + out->back().bytes == r.addr)
        out->back().bytes += r.bytes;
      else
        out->push_back(r);
    }
    int d = n - 1;
    while (d >= 0 && ++idx[d] == (int64_t)m.dims[(size_t)d].size()) idx[d--] = 0;
    if (d < 0) return;
  }
}

// The two lists go to the kernel as they are (not cut into matching pairs): it pins the remote
// pages run by run, up to 16 pages at a time, and fills the local runs as a stream, so a strided
// side costs one iovec per run and a contiguous side one iovec in all.
std::string cma_copy(pid_t pid, const std::vector<Run> &local, const std::vector<Run> &remote,
                     bool write) {
  constexpr int kMax = 1024;  // IOV_MAX on Linux
  struct iovec lv[kMax], rv[kMax];
  Cursor lc{&local}, rc{&remote};
  while (!lc.end() && !rc.end()) {
    uint64_t bytes = std::min(lc.ahead(kMax), rc.ahead(kMax));
    if (bytes == 0) break;
    int nl = lc.take(bytes, lv), nr = rc.take(bytes, rv);
    // The kernel may stop early only on a fault: what it did not copy is an error.
    ssize_t got = write ? process_vm_writev(pid, lv, (unsigned long)nl, rv, (unsigned long)nr, 0)
                        : process_vm_readv(pid, lv, (unsigned long)nl, rv, (unsigned long)nr, 0);
    if (got < 0) return std::strerror(errno);
    if ((uint64_t)got != bytes) return "short read";
  }
  auto rest = [](const Cursor &c) {
    uint64_t b = 0;
    for (size_t k = c.i; k < c.runs->size(); ++k) b += (*c.runs)[k].bytes - (k == c.i ? c.off : 0);
    return b;
  };
  if (rest(lc) || rest(rc)) return "the two sides cover different byte counts";
  return "";
}

void region_describe(Region &r, const void *buf, const BoxRef *b, size_t bytes) {
  r.addr = (uint64_t)(uintptr_t)buf;
  r.bytes = bytes;
  r.pid = (int32_t)getpid();
  r.ndim = -1;
  size_t span = bytes;  // the bytes of the buffer the runs lie in
  if (b) {
    r.ndim = b->ndim;
    r.esize = b->esize;
    span = b->esize;
    for (int i = 0; i < b->ndim; ++i) {
      r.shape[i] = b->shape[i];
      r.off[i] = b->off[i];
      r.len[i] = b->len[i];
      span *= (size_t)b->shape[i];
    }
  }
  r.arena_off = arena_offset(buf, span);
  r.arena = r.arena_off != UINT64_MAX ? arena_self() : ArenaId{};
}

void region_runs(const Region &r, std::vector<Run> *out) {
  out->clear();
  if (r.ndim < 0)
    out->push_back({r.addr, r.bytes});
  else
    box_runs(r.addr, r.ndim, r.shape, r.off, r.len, (size_t)r.esize, out);
}

// Walks both run lists in step, one window of the peer's arena at a time (a window is pinned only
// while its bytes are copied, so a copy of any size needs one window of address space).
bool mapped_copy(const Region &peer, const std::vector<Run> &mine, bool write) {
  if (!region_in_arena(peer)) return false;
  std::vector<Run> remote;
  region_runs(peer, &remote);
  PeerView v;
  uint64_t vstart = 0, vend = 0;  // the arena offsets v maps
  size_t i = 0, j = 0;
  uint64_t oi = 0, oj = 0;
  while (i < mine.size() && j < remote.size()) {
    const uint64_t roff = remote[j].addr - peer.addr + peer.arena_off + oj;
    if (!v || roff < vstart || roff >= vend) {
      v = PeerView(peer.arena, roff, write);
      if (!v) return false;
      vstart = roff;
      vend = roff + v.avail();
    }
    const uint64_t k = std::min({mine[i].bytes - oi, remote[j].bytes - oj, vend - roff});
    char *there = v.data() + (roff - vstart), *here = (char *)(uintptr_t)(mine[i].addr + oi);
    if (write)
      std::memcpy(there, here, (size_t)k);
    else
      std::memcpy(here, there, (size_t)k);
    if ((oi += k) == mine[i].bytes) ++i, oi = 0;
    if ((oj += k) == remote[j].bytes) ++j, oj = 0;
  }
  return true;
}

void parts_arena_runs(const Run *runs, size_t n, std::vector<PartRun> *out) {
  out->resize(n);
  for (size_t i = 0; i < n; ++i)
    (*out)[i] = PartRun{runs[i].addr, runs[i].bytes,
                        arena_offset((const void *)(uintptr_t)runs[i].addr, runs[i].bytes)};
}

bool parts_map(const ArenaId &arena, const std::vector<PartRun> &remote,
               std::vector<PeerView> *pins, std::vector<Run> *view) {
  pins->clear();
  view->clear();
  for (const PartRun &p : remote) {
    PeerView v = p.arena_off == UINT64_MAX || arena.fd < 0 ? PeerView()
                                                           : PeerView(arena, p.arena_off, false);
    if (!v || v.avail() < p.bytes) {
      pins->clear();
      view->clear();
      return false;
    }
    view->push_back({(uint64_t)(uintptr_t)v.data(), p.bytes});
    pins->push_back(std::move(v));
  }
  return true;
}

std::string parts_read(pid_t pid, const ArenaId &arena, const std::vector<PartRun> &remote,
                       const std::vector<Run> &mine, bool mapped) {
  std::vector<Run> kl, kr;  // what the kernel copies
  PeerView v;
  uint64_t vstart = 0, vend = 0;  // the arena offsets v maps
  size_t i = 0;
  uint64_t oi = 0;  // in mine
  for (const PartRun &p : remote) {
    bool map = mapped && arena.fd >= 0 && p.arena_off != UINT64_MAX;
    for (uint64_t done = 0; done < p.bytes;) {
      if (i >= mine.size()) return "the two sides cover different byte counts";
      uint64_t k = std::min(mine[i].bytes - oi, p.bytes - done);
      const uint64_t here = mine[i].addr + oi, roff = p.arena_off + done;
      if (map && (!v || roff < vstart || roff >= vend)) {
        v = PeerView(arena, roff, false);
        vstart = roff;
        vend = v ? roff + v.avail() : roff;
        map = (bool)v;
      }
      if (map) {
        k = std::min(k, vend - roff);
        std::memcpy((void *)(uintptr_t)here, v.data() + (roff - vstart), (size_t)k);
      } else {
        append_run(kl, here, k);
        append_run(kr, p.addr + done, k);
      }
      done += k;
      if ((oi += k) == mine[i].bytes) ++i, oi = 0;
    }
  }
  if (i != mine.size()) return "the two sides cover different byte counts";
  return kl.empty() ? std::string() : cma_copy(pid, kl, kr, false);
}

bool receiver_copy(const Region &sender, const Region &receiver, const std::vector<Run> &mine,
                   NodeCaps caps, bool *push, std::string *why) {
  why->clear();
  if (caps.mapped && mapped_copy(sender, mine, false)) return true;
  *push = true;
  if (caps.mapped && region_in_arena(receiver)) return false;  // the sender memcpys into it
  if (!caps.kernel) {
    *push = false;  // neither side is mapped: MPI moves the bytes
    return false;
  }
  std::vector<Run> s;
  region_runs(sender, &s);
  if (s.size() > mine.size()) return false;  // the sender writes: fewer remote runs for it
  *why = cma_copy((pid_t)sender.pid, mine, s, false);
  return true;
}

bool sender_push(const std::vector<Run> &mine, const Region &receiver, NodeCaps caps,
                 std::string *why) {
  why->clear();
  if (caps.mapped && mapped_copy(receiver, mine, true)) return true;
  if (!caps.kernel) return false;
  std::vector<Run> remote;
  region_runs(receiver, &remote);
  *why = cma_copy((pid_t)receiver.pid, mine, remote, true);
  return true;
}

}  // namespace lm
