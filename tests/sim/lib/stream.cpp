// SPDX-License-Identifier: BSD-3-Clause
// cudasim: streams. Each stream is an ordered queue run by its own worker thread, so device work
// really is asynchronous to the host and to other streams. Order between streams is a list of
// dependencies per operation ("stream S completed its first n operations"): events add them, and
// so do the legacy default stream's rules, taken when an operation is enqueued:
//   - work on the legacy stream waits for all work enqueued before it on every blocking stream
//     of the device;
//   - work on a blocking stream waits for all work enqueued before it on the legacy stream;
//   - cudaStreamNonBlocking streams have no implicit order with the legacy stream.
// A random delay (CUDASIM_JITTER_US) before each operation makes missing waits show.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>

#include "sim.hpp"

namespace cudasim {

namespace {

struct Streams {
  std::mutex mu;
  std::condition_variable cv;
  std::map<const Stream *, StreamRef> live;  // created by cudaStreamCreate*, not destroyed
  StreamRef legacy[64];                      // per device, created on first use
  std::vector<std::weak_ptr<Stream>> all[64];  // every stream of a device (legacy included)
};

Streams &st() {
  static Streams *s = new Streams;  // never destroyed: workers outlive static destructors
  return *s;
}

void jitter() {
  unsigned j = settings().jitter_us;
  if (!j) return;
  thread_local std::minstd_rand rng((unsigned)std::random_device{}() ^ (unsigned)getpid());
  usleep((useconds_t)(rng() % (j + 1)));
}

void execute(Stream &s, Op &op) {
  if (sticky(s.device) != cudaSuccess) return;  // a dead context runs nothing
  if (!op.no_jitter) jitter();
  std::vector<Block *> opened;
  std::string why;
  cudaError_t e = mem_open(op.touches, &opened, &why);
  if (e != cudaSuccess) {
    device_fault(s.device, e, "%s: %s", op.what.c_str(), why.c_str());
    return;
  }
  op.run(op);
  mem_close(&opened);
}

bool deps_done(const Op &op) {
  for (const Dep &d : op.deps)
    if (!dep_done(d)) return false;
  return true;
}

void worker_main(StreamRef s) {
  Streams &g = st();
  std::unique_lock<std::mutex> lk(g.mu);
  for (;;) {
    g.cv.wait(lk, [&] { return !s->queue.empty() || s->dying; });
    if (s->queue.empty()) break;  // destroyed and drained
    Op *op = s->queue.front().get();
    g.cv.wait(lk, [&] { return deps_done(*op); });
    s->running = op->what;
    lk.unlock();
    execute(*s, *op);
    lk.lock();
    s->running.clear();
    s->queue.pop_front();
    s->done.fetch_add(1, std::memory_order_acq_rel);
    g.cv.notify_all();
  }
}

StreamRef make_stream(int device, bool legacy, bool nonblocking) {
  auto s = std::make_shared<Stream>();
  s->device = device;
  s->legacy = legacy;
  s->nonblocking = nonblocking;
  s->worker = std::thread(worker_main, s);
  auto &all = st().all[device];
  for (size_t i = all.size(); i-- > 0;)  // forget destroyed streams
    if (all[i].expired()) all.erase(all.begin() + (long)i);
  all.push_back(s);
  return s;
}

// The implicit dependencies of an operation enqueued on s (stream lock held).
void legacy_deps(const Stream &s, std::vector<Dep> *deps) {
  Streams &g = st();
  if (s.legacy) {
    for (auto &w : g.all[s.device]) {
      StreamRef t = w.lock();
      if (t && !t->legacy && !t->nonblocking && t->done.load() < t->enqueued)
        deps->push_back({t, t->enqueued});
    }
  } else if (!s.nonblocking) {
    StreamRef l = g.legacy[s.device];
    if (l && l->done.load() < l->enqueued) deps->push_back({l, l->enqueued});
  }
}

}  // namespace

std::mutex &stream_lock() { return st().mu; }
std::condition_variable &stream_cv() { return st().cv; }

StreamRef stream_of(cudaStream_t h) {
  Streams &g = st();
  std::lock_guard<std::mutex> lk(g.mu);
  if (h == nullptr || h == cudaStreamLegacy) {
    int d = current_device();
    if (!g.legacy[d]) g.legacy[d] = make_stream(d, true, false);
    return g.legacy[d];
  }
  auto it = g.live.find(reinterpret_cast<const Stream *>(h));
  return it == g.live.end() ? nullptr : it->second;
}

StreamRef stream_create(unsigned flags) {
  Streams &g = st();
  std::lock_guard<std::mutex> lk(g.mu);
  StreamRef s = make_stream(current_device(), false, (flags & cudaStreamNonBlocking) != 0);
  g.live[s.get()] = s;
  return s;
}

void stream_destroy(const StreamRef &s) {
  Streams &g = st();
  std::lock_guard<std::mutex> lk(g.mu);
  g.live.erase(s.get());
  s->dying = true;    // like CUDA: returns at once, queued work still runs
  s->worker.detach();  // the worker holds its own reference
  g.cv.notify_all();
}

uint64_t enqueue(const StreamRef &s, std::unique_ptr<Op> op) {
  Streams &g = st();
  std::lock_guard<std::mutex> lk(g.mu);
  legacy_deps(*s, &op->deps);
  s->queue.push_back(std::move(op));
  uint64_t seq = ++s->enqueued;
  g.cv.notify_all();
  return seq;
}

bool dep_done(const Dep &d) { return d.s->done.load(std::memory_order_acquire) >= d.seq; }

void wait_dep(const Dep &d, const char *what) {
  Streams &g = st();
  std::unique_lock<std::mutex> lk(g.mu);
  const double limit = settings().hang_seconds, t0 = now_seconds();
  while (!dep_done(d)) {
    g.cv.wait_for(lk, std::chrono::milliseconds(100));
    if (!dep_done(d) && now_seconds() - t0 > limit) {
      lk.unlock();
      report("%s has waited %g s (CUDASIM_HANG_TIMEOUT) for stream %p (device %d): a hang; "
             "streams:", what, limit, (void *)d.s.get(), d.s->device);
      report_streams();
      std::abort();
    }
  }
}

std::vector<StreamRef> device_streams(int device) {
  std::lock_guard<std::mutex> lk(st().mu);
  std::vector<StreamRef> v;
  for (auto &w : st().all[device])
    if (StreamRef s = w.lock()) v.push_back(s);
  return v;
}

void report_streams() {
  Streams &g = st();
  std::lock_guard<std::mutex> lk(g.mu);
  for (int d = 0; d < 64; ++d)
    for (auto &w : g.all[d]) {
      StreamRef s = w.lock();
      if (!s || s->done.load() == s->enqueued) continue;
      report("  stream %p (device %d, %s): %llu of %llu ops done; running: %s; next: %s",
             (void *)s.get(), s->device,
             s->legacy ? "legacy" : s->nonblocking ? "non-blocking" : "blocking",
             (unsigned long long)s->done.load(), (unsigned long long)s->enqueued,
             s->running.empty() ? "(waiting for another stream)" : s->running.c_str(),
             s->queue.empty() ? "-" : s->queue.front()->what.c_str());
    }
}

}  // namespace cudasim
