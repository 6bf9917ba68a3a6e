// SPDX-License-Identifier: BSD-3-Clause
// cudasim: the CUDA runtime entry points for memory, copies, streams and events. Checks that the
// real runtime makes at the call (arguments, pointer kinds, bounds) return a non-sticky error;
// what goes wrong while work runs (a block freed meanwhile) is a sticky fault of the device.
#include <unistd.h>

#include <cstring>
#include <map>

#include "sim.hpp"

namespace cudasim {

namespace {

struct Event {
  Dep dep;               // the recorded point; dep.s null: never recorded
  unsigned flags = 0;
};

std::mutex g_ev_mu;
std::map<const void *, std::shared_ptr<Event>> *g_events = new std::map<const void *, std::shared_ptr<Event>>;

std::shared_ptr<Event> event_of(cudaEvent_t e) {
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto it = g_events->find(e);
  return it == g_events->end() ? nullptr : it->second;
}

// Where a pointer lives, for copies: device memory, pinned host memory, or plain host memory.
struct Where {
  Block *b = nullptr;  // registered block (device or pinned), else nullptr
  bool device() const { return b && b->kind == Kind::Device; }
};

Where where(const void *p) {
  Where w;
  Block *b = mem_find(p);
  if (b && (const char *)p < b->base + b->size) w.b = b;
  return w;
}

const char *where_name(const Where &w) {
  return w.device() ? "device memory" : w.b ? "pinned host memory" : "host memory";
}

// The bounds and liveness of [p, p+n) in its block, checked at the call.
cudaError_t check_range(const char *call, const char *which, const void *p, size_t n, Where w) {
  if (!w.b) return cudaSuccess;
  bool freed;
  {
    std::lock_guard<std::mutex> g(mem_lock());
    freed = w.b->state == State::Freed || w.b->free_queued;
  }
  if (freed)
    return fail(cudaErrorInvalidValue, "%s: %s %p is in a freed block", call, which, p);
  if ((const char *)p + n > w.b->base + w.b->size)
    return fail(cudaErrorInvalidValue, "%s: %s [%p, +%zu) overruns its block [%p, +%zu)", call,
                which, p, n, (void *)w.b->base, w.b->size);
  return cudaSuccess;
}

// The copy direction given against the one the pointers say (a mismatch is undefined behaviour
// in CUDA: here an error).
cudaError_t check_kind(const char *call, cudaMemcpyKind kind, const Where &dst, const Where &src) {
  bool dd = dst.device(), sd = src.device();
  bool ok;
  switch (kind) {
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    case cudaMemcpyHostToDevice: ok = dd && !sd; break;
    case cudaMemcpyDeviceToHost: ok = !dd && sd; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyDefault: ok = true; break;
    default:
      return fail(cudaErrorInvalidMemcpyDirection, "%s: kind %d", call, (int)kind);
  }
  if (!ok)
    return fail(cudaErrorInvalidValue, "%s: kind %d but dst is %s and src is %s", call, (int)kind,
                where_name(dst), where_name(src));
  return cudaSuccess;
}

// Waits for s to complete what is enqueued on it now. The legacy stream gets a marker first, so
// the wait covers the blocking streams' earlier work too (the legacy stream's order).
void sync_stream(const StreamRef &s, const char *what) {
  uint64_t seq;
  if (s->legacy) {
    auto op = std::make_unique<Op>();
    op->what = what;
    op->run = [](Op &) {};
    op->no_jitter = true;
    seq = enqueue(s, std::move(op));
  } else {
    std::lock_guard<std::mutex> g(stream_lock());
    seq = s->enqueued;
  }
  wait_dep({s, seq}, what);
}

void sync_device(int device, const char *what) {
  for (const StreamRef &s : device_streams(device)) {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> g(stream_lock());
      seq = s->enqueued;
    }
    wait_dep({s, seq}, what);
  }
}

void sync_all_devices(const char *what) {
  for (int d = 0; d < settings().devices; ++d) sync_device(d, what);
}

// The stream of a handle, or the error for an unknown one.
cudaError_t get_stream(const char *call, cudaStream_t h, StreamRef *s) {
  if (h == cudaStreamPerThread)
    return fail(cudaErrorNotSupported, "%s: cudaStreamPerThread is not simulated", call);
  *s = stream_of(h);
  if (!*s) return fail(cudaErrorInvalidResourceHandle, "%s: unknown stream %p", call, (void *)h);
  return cudaSuccess;
}

// stage_src: the source bytes are copied aside now and the op copies from there (the caller
// may reuse its buffer at once).
cudaError_t enqueue_copy(const char *call, void *dst, const void *src, size_t n,
                         cudaMemcpyKind kind, const StreamRef &s, uint64_t *seq,
                         bool stage_src = false) {
  if (!dst || !src) return fail(cudaErrorInvalidValue, "%s: NULL pointer", call);
  Where wd = where(dst), ws = where(src);
  cudaError_t e = check_kind(call, kind, wd, ws);
  if (e == cudaSuccess) e = check_range(call, "dst", dst, n, wd);
  if (e == cudaSuccess) e = check_range(call, "src", src, n, ws);
  if (e != cudaSuccess) return e;
  auto op = std::make_unique<Op>();
  char what[160];
  std::snprintf(what, sizeof what, "%s %zu B %p <- %p", call, n, dst, src);
  op->what = what;
  if (wd.b) op->touches.push_back({dst, n, 1});
  if (ws.b) op->touches.push_back({src, n, 1});
  if (stage_src) {
    auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    op->run = [dst, staged, n](Op &) { std::memcpy(dst, staged->data(), n); };
  } else {
    op->run = [dst, src, n](Op &) { std::memmove(dst, src, n); };
  }
  *seq = enqueue(s, std::move(op));
  return cudaSuccess;
}

cudaError_t enqueue_memset(const char *call, void *p, int value, size_t n, const StreamRef &s,
                           Where *w) {
  if (!p) return fail(cudaErrorInvalidValue, "%s: NULL pointer", call);
  *w = where(p);
  if (!w->b) return fail(cudaErrorInvalidValue, "%s: %p is host memory", call, p);
  cudaError_t e = check_range(call, "dst", p, n, *w);
  if (e != cudaSuccess) return e;
  auto op = std::make_unique<Op>();
  char what[128];
  std::snprintf(what, sizeof what, "%s %zu B at %p", call, n, p);
  op->what = what;
  op->touches.push_back({p, n, 1});
  op->run = [p, value, n](Op &) { std::memset(p, value, n); };
  enqueue(s, std::move(op));
  return cudaSuccess;
}

// The block a free call names: the start of a live allocation of `kind`.
cudaError_t block_to_free(const char *call, void *p, Kind kind, Block **out) {
  Block *b = mem_find(p);
  if (!b || b->base != p || b->kind != kind)
    return fail(cudaErrorInvalidValue, "%s: %p is not the start of a %s allocation", call, p,
                kind == Kind::Device ? "device" : "pinned host");
  {
    std::lock_guard<std::mutex> g(mem_lock());
    if (!b->free_queued) {
      b->free_queued = true;
      *out = b;
      return cudaSuccess;
    }
  }
  return fail(cudaErrorInvalidValue, "%s: %p was freed already (double free)", call, p);
}

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  sync_device(current_device(), "cudaDeviceSynchronize");
  return check_context();
}

// ------------------------------------------------------------------------------ memory
cudaError_t cudaMalloc(void **p, size_t size) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (!p) return fail(cudaErrorInvalidValue, "cudaMalloc: devPtr is NULL");
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  Block *b = mem_alloc(size, Kind::Device, current_device(), State::Live);
  if (!b) return fail(cudaErrorMemoryAllocation, "cudaMalloc of %zu bytes", size);
  *p = b->base;
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaMallocAsync", h, &s);
  if (e != cudaSuccess) return e;
  if (!p) return fail(cudaErrorInvalidValue, "cudaMallocAsync: devPtr is NULL");
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  // Usable from the point of the stream where it is allocated: before that (another stream
  // not ordered after this point) it is a fault.
  Block *b = mem_alloc(size, Kind::Device, s->device, State::Pending);
  if (!b) return fail(cudaErrorMemoryAllocation, "cudaMallocAsync of %zu bytes", size);
  auto op = std::make_unique<Op>();
  op->what = "cudaMallocAsync " + std::to_string(size) + " B";
  op->no_jitter = true;
  op->run = [b](Op &) { mem_set_state(b, State::Live); };
  enqueue(s, std::move(op));
  *p = b->base;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  cudaError_t e = check_context();
  if (e != cudaSuccess || !p) return e;
  Block *b = nullptr;
  e = block_to_free("cudaFree", p, Kind::Device, &b);
  if (e != cudaSuccess) return e;
  sync_device(b->device, "cudaFree");  // like CUDA: cudaFree synchronizes the device
  mem_poison(b);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaFreeAsync", h, &s);
  if (e != cudaSuccess || !p) return e;
  Block *b = nullptr;
  e = block_to_free("cudaFreeAsync", p, Kind::Device, &b);
  if (e != cudaSuccess) return e;
  auto op = std::make_unique<Op>();
  op->what = "cudaFreeAsync " + std::to_string(b->size) + " B";
  op->no_jitter = true;
  op->run = [b](Op &) { mem_poison(b); };  // stays PROT_NONE: later use faults
  enqueue(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (!p) return fail(cudaErrorInvalidValue, "cudaMallocHost: ptr is NULL");
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  Block *b = mem_alloc(size, Kind::Pinned, current_device(), State::Live);
  if (!b) return fail(cudaErrorMemoryAllocation, "cudaMallocHost of %zu bytes", size);
  *p = b->base;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
  (void)flags;
  return cudaMallocHost(p, size);
}

cudaError_t cudaFreeHost(void *p) {
  cudaError_t e = check_context();
  if (e != cudaSuccess || !p) return e;
  Block *b = nullptr;
  e = block_to_free("cudaFreeHost", p, Kind::Pinned, &b);
  if (e != cudaSuccess) return e;
  sync_all_devices("cudaFreeHost");  // like CUDA's implicit synchronization
  mem_poison(b);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (!a) return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: attributes is NULL");
  std::memset(a, 0, sizeof *a);
  Where w = where(p);
  if (w.b && mem_state(w.b) != State::Freed) {
    a->type = w.device() ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->device = w.b->device;
    a->devicePointer = const_cast<void *>(p);
    a->hostPointer = w.device() ? nullptr : const_cast<void *>(p);
  } else {  // CUDA 11+: unregistered host memory is no error
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->hostPointer = const_cast<void *>(p);
  }
  return cudaSuccess;
}

// ------------------------------------------------------------------------------ copies
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaMemcpyAsync", h, &s);
  if (e != cudaSuccess || n == 0) return e;
  uint64_t seq = 0;
  e = enqueue_copy("cudaMemcpyAsync", dst, src, n, kind, s, &seq);
  if (e == cudaSuccess && !where(dst).b && !where(src).b) {  // host to host: synchronous
    wait_dep({s, seq}, "cudaMemcpyAsync (host to host)");
    return check_context();
  }
  return e;
}

// On the legacy stream (ordered with blocking streams, NOT with non-blocking ones); returns once
// the copy is done, except device to device (at once) and from pageable host memory to the
// device: CUDA returns once the bytes are staged, "the DMA to final destination may not have
// completed", so here the source is copied aside and the device is written later, in the legacy
// stream's order (a non-blocking stream that reads at once sees stale bytes).
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = check_context();
  if (e != cudaSuccess || n == 0) return e;
  StreamRef s = stream_of(nullptr);
  uint64_t seq = 0;
  const Where wd = where(dst), ws = where(src);
  const bool staged = wd.device() && !ws.b;  // pageable host to device
  e = enqueue_copy("cudaMemcpy", dst, src, n, kind, s, &seq, staged);
  if (e != cudaSuccess || staged || (wd.device() && ws.device())) return e;
  wait_dep({s, seq}, "cudaMemcpy");
  return check_context();
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaMemsetAsync", h, &s);
  if (e != cudaSuccess || n == 0) return e;
  Where w;
  return enqueue_memset("cudaMemsetAsync", p, value, n, s, &w);
}

// On the legacy stream and asynchronous to the host (except on pinned host memory).
cudaError_t cudaMemset(void *p, int value, size_t n) {
  cudaError_t e = check_context();
  if (e != cudaSuccess || n == 0) return e;
  StreamRef s = stream_of(nullptr);
  Where w;
  e = enqueue_memset("cudaMemset", p, value, n, s, &w);
  if (e == cudaSuccess && !w.device()) {
    sync_stream(s, "cudaMemset (pinned host memory)");
    return check_context();
  }
  return e;
}

// ------------------------------------------------------------------------------ streams
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *p, unsigned int flags) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (!p || (flags & ~1u)) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags");
  *p = reinterpret_cast<cudaStream_t>(stream_create(flags).get());
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *p) { return cudaStreamCreateWithFlags(p, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t h) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  StreamRef s;
  if (h == nullptr || h == cudaStreamLegacy || (s = stream_of(h)) == nullptr)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p)", (void *)h);
  stream_destroy(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaStreamSynchronize", h, &s);
  if (e != cudaSuccess) return e;
  sync_stream(s, "cudaStreamSynchronize");
  return check_context();
}

// cudaErrorNotReady is a state, not an error: it does not become the last error.
cudaError_t cudaStreamQuery(cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaStreamQuery", h, &s);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> g(stream_lock());
  return s->done.load() >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaStreamWaitEvent", h, &s);
  if (e != cudaSuccess) return e;
  std::shared_ptr<Event> x = event_of(ev);
  if (!x) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown event %p", (void *)ev);
  if (flags) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags %u", flags);
  Dep d;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    d = x->dep;
  }
  if (!d.s) return cudaSuccess;  // never recorded: nothing to wait for
  auto op = std::make_unique<Op>();
  op->what = "cudaStreamWaitEvent";
  op->no_jitter = true;
  op->deps.push_back(d);
  op->run = [](Op &) {};
  enqueue(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudasimStreamDelay(cudaStream_t h, unsigned int usec) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudasimStreamDelay", h, &s);
  if (e != cudaSuccess) return e;
  auto op = std::make_unique<Op>();
  op->what = "cudasimStreamDelay " + std::to_string(usec) + " us";
  op->run = [usec](Op &) { usleep(usec); };
  enqueue(s, std::move(op));
  return cudaSuccess;
}

// ------------------------------------------------------------------------------ events
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *p, unsigned int flags) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (!p || (flags & ~7u)) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags");
  auto x = std::make_shared<Event>();
  x->flags = flags;
  std::lock_guard<std::mutex> g(g_ev_mu);
  (*g_events)[x.get()] = x;
  *p = reinterpret_cast<cudaEvent_t>(x.get());
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *p) { return cudaEventCreateWithFlags(p, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> g(g_ev_mu);
  if (!g_events->erase(ev))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: unknown event %p", (void *)ev);
  return cudaSuccess;  // waits already enqueued keep their own copy of the recorded point
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h) {
  cudaError_t e = check_context();
  StreamRef s;
  if (e == cudaSuccess) e = get_stream("cudaEventRecord", h, &s);
  if (e != cudaSuccess) return e;
  std::shared_ptr<Event> x = event_of(ev);
  if (!x) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event %p", (void *)ev);
  auto op = std::make_unique<Op>();  // a marker: takes the legacy stream's implicit order
  op->what = "cudaEventRecord";
  op->no_jitter = true;
  op->run = [](Op &) {};
  uint64_t seq = enqueue(s, std::move(op));
  std::lock_guard<std::mutex> g(g_ev_mu);
  x->dep = {s, seq};
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  std::shared_ptr<Event> x = event_of(ev);
  if (!x) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: unknown event %p", (void *)ev);
  std::lock_guard<std::mutex> g(g_ev_mu);
  return !x->dep.s || dep_done(x->dep) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  std::shared_ptr<Event> x = event_of(ev);
  if (!x) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: unknown event %p", (void *)ev);
  Dep d;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    d = x->dep;
  }
  if (d.s) wait_dep(d, "cudaEventSynchronize");
  return check_context();
}

}  // extern "C"
