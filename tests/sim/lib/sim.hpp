// SPDX-License-Identifier: BSD-3-Clause
// cudasim internals: settings, errors, the memory registry, streams and their workers. The CUDA
// entry points (api.cpp), kernel launches (kernel.cpp) and NCCL (nccl_*.cpp) build on these.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

namespace cudasim {

// ------------------------------------------------------------------------------ settings
// Read once from the environment (README.md lists them).
struct Settings {
  int devices = 1;                 // CUDASIM_DEVICES
  bool shared = false;             // CUDASIM_TOPOLOGY=shared (else per-rank)
  unsigned jitter_us = 50;         // CUDASIM_JITTER_US: random delay before each stream op
  size_t device_bytes = 4ull << 30;  // CUDASIM_DEVICE_MEMORY_MB per device and process
  size_t quarantine_bytes = 256ull << 20;  // CUDASIM_QUARANTINE_MB of freed blocks kept poisoned
  double hang_seconds = 120;       // CUDASIM_HANG_TIMEOUT: host waits longer than this abort
  double nccl_seconds = 20;        // CUDASIM_NCCL_TIMEOUT: watchdog of NCCL operations
  bool nccl_abort = true;          // CUDASIM_NCCL_ON_ERROR=abort|error
  size_t ring_bytes = 256 << 10;   // CUDASIM_NCCL_RING_KB per ordered pair of ranks
  unsigned enqueue_us = 200;       // CUDASIM_NCCL_ENQUEUE_DELAY_US of non-blocking communicators
  unsigned latency_us = 1000;      // CUDASIM_NCCL_LATENCY_US: a message's delivery latency
  bool verbose = false;            // CUDASIM_VERBOSE=1: every error returned is printed
  std::string nccl_log;            // CUDASIM_NCCL_LOG: file each NCCL call is appended to
};
const Settings &settings();

// ------------------------------------------------------------------------------ errors
// Returns `e` after making it the calling thread's last error (cudaGetLastError); prints it
// when CUDASIM_VERBOSE=1. For the non-sticky errors a call returns.
cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A fault of device work (illegal or misaligned address, bad launch inside a worker): printed
// always, and sticky: every later call on that device returns it, its queued work is dropped.
void device_fault(int device, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// The device's sticky error (cudaSuccess while its context lives).
cudaError_t sticky(int device);
// The calling thread's current device (cudaSetDevice), 0 by default.
int current_device();
// cudaSuccess, or the error every call on the current device must return first (no device,
// sticky fault), already made the last error.
cudaError_t check_context();
// printf to stderr with the "cudasim[pid]:" prefix, one write.
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double now_seconds();

// ------------------------------------------------------------------------------ memory
enum class Kind { Device, Pinned };
// Pending: cudaMallocAsync not reached in stream order yet; Freed: poisoned (quarantine).
enum class State { Pending, Live, Freed };

struct Block {
  char *base = nullptr;  // what the caller got
  size_t size = 0;
  char *map = nullptr;   // the mapping (ends with a guard page)
  size_t map_len = 0;
  Kind kind = Kind::Device;
  int device = 0;
  State state = State::Live;
  bool free_queued = false;  // cudaFree/cudaFreeAsync called (a second free is an error)
  int opens = 0;         // stream operations running on it (device memory is readable only then)
};

// Allocates (mmap; device memory PROT_NONE) and registers a block; nullptr when out of memory.
Block *mem_alloc(size_t size, Kind kind, int device, State state);
// The registered block containing p (freed ones in quarantine too), or nullptr. The pointer
// stays valid while the block is registered; callers hold no lock afterwards, so only use
// fields that do not change (base, size, kind, device) without mem_lock.
Block *mem_find(const void *p);
// Moves a block to the quarantine (PROT_NONE, never reused until evicted), unregisters it once
// evicted. Pinned blocks too: a stale host pointer then faults.
void mem_poison(Block *b);
void mem_set_state(Block *b, State s);
State mem_state(Block *b);
std::mutex &mem_lock();

// One memory range a stream operation touches: checked and opened before it runs.
struct Touch {
  const void *p;
  size_t bytes;  // 0: the whole block p points into (kernel arguments)
  size_t align;
};
// Validates the ranges (registered, live, in bounds, aligned) and opens device blocks for reading
// and writing. On failure closes what it opened and returns the fault with a message in *why.
cudaError_t mem_open(const std::vector<Touch> &t, std::vector<Block *> *opened, std::string *why);
void mem_close(std::vector<Block *> *opened);

// ------------------------------------------------------------------------------ streams
struct Stream;
using StreamRef = std::shared_ptr<Stream>;

// "Stream s has completed its first `seq` operations."
struct Dep {
  StreamRef s;
  uint64_t seq;
};

struct Op {
  std::string what;             // for hang reports: "cudaMemcpyAsync 4096 B", "kernel k_fill<T>"
  std::vector<Dep> deps;        // cross-stream order (legacy stream rules, events)
  std::vector<Touch> touches;   // memory opened while it runs
  std::function<void(Op &)> run;  // the work; may call device_fault
  bool no_jitter = false;
};

struct Stream {
  int device = 0;
  bool legacy = false;       // the legacy default stream (0 / cudaStreamLegacy) of `device`
  bool nonblocking = false;  // cudaStreamNonBlocking: no implicit order with the legacy stream
  std::deque<std::unique_ptr<Op>> queue;  // guarded by the stream lock (stream_lock)
  uint64_t enqueued = 0;                  // ops ever enqueued (stream lock)
  std::atomic<uint64_t> done{0};          // ops completed, in order
  bool dying = false;                     // cudaStreamDestroy: the worker exits when drained
  std::string running;                    // what the worker runs now (hang reports)
  std::thread worker;
};

std::mutex &stream_lock();
std::condition_variable &stream_cv();  // notified on every enqueue and completion

// The stream a handle names (0 and cudaStreamLegacy: the current device's legacy stream), or
// nullptr for an unknown handle (cudaErrorInvalidResourceHandle).
StreamRef stream_of(cudaStream_t h);
StreamRef stream_create(unsigned flags);
void stream_destroy(const StreamRef &s);
// Appends op to s with the implicit legacy-stream dependencies; returns its sequence number
// (s->done >= seq once it completed).
uint64_t enqueue(const StreamRef &s, std::unique_ptr<Op> op);
// Blocks until d is satisfied; reports and aborts after CUDASIM_HANG_TIMEOUT (`what` names the
// waiting call).
void wait_dep(const Dep &d, const char *what);
bool dep_done(const Dep &d);
// Every stream of a device, for cudaDeviceSynchronize.
std::vector<StreamRef> device_streams(int device);
// Writes the state of every stream (queue heads) to stderr.
void report_streams();

}  // namespace cudasim
