// SPDX-License-Identifier: BSD-3-Clause
// cudasim: kernel launches. cuda_runtime.h's cudasim::launch packs the kernel and its arguments
// into a closure; here it becomes a stream operation that opens the allocations its pointer
// arguments point into (checking their alignment), runs the whole grid on the stream's worker,
// and turns a fault raised inside (cudasimCheckAccess) into the device's sticky error.
#include <cinttypes>
#include <cstdio>

#include "sim.hpp"

namespace cudasim {

namespace {

// A fault inside a kernel: unwinds the kernel (the access never happens), caught by the launch.
struct Fault {
  cudaError_t err;
  char msg[256];
};

// The memory the running kernel may touch: the blocks its pointer arguments opened.
struct KernelScope {
  std::vector<std::pair<const char *, const char *>> ranges;
};
thread_local const KernelScope *t_scope = nullptr;

cudaError_t check_config(dim3 g, dim3 b, size_t shmem, char *why, size_t n) {
  unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
  if (!g.x || !g.y || !g.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    std::snprintf(why, n, "grid (%u, %u, %u)", g.x, g.y, g.z);
  else if (!threads || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
    std::snprintf(why, n, "block (%u, %u, %u)", b.x, b.y, b.z);
  else if (shmem)
    std::snprintf(why, n, "%zu bytes of dynamic shared memory (not simulated)", shmem);
  else
    return cudaSuccess;
  return cudaErrorInvalidConfiguration;
}

void run_kernel(const Op &op, int device, void (*run)(void *), void *ctx) {
  KernelScope scope;
  for (const Touch &t : op.touches)
    if (Block *b = mem_find(t.p)) scope.ranges.emplace_back(b->base, b->base + b->size);
  t_scope = &scope;
  try {
    run(ctx);
  } catch (const Fault &f) {
    device_fault(device, f.err, "%s: %s", op.what.c_str(), f.msg);
  }
  t_scope = nullptr;
}

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudasimLaunchKernel(cudaStream_t h, dim3 grid, dim3 block, size_t shmem,
                                const cudasimPointerArg *ptrs, int nptrs, void (*run)(void *),
                                void *ctx, void (*drop)(void *), const char *name,
                                const char *file, int line) {
  std::shared_ptr<void> hold(ctx, drop);  // dropped with the operation, run or not
  cudaError_t e = check_context();
  if (e != cudaSuccess) return e;
  if (h == cudaStreamPerThread)
    return fail(cudaErrorNotSupported, "kernel %s: cudaStreamPerThread is not simulated", name);
  StreamRef s = stream_of(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "kernel %s: unknown stream %p", name, (void *)h);
  // CUDA: "a kernel launch will fail if it is issued to a stream that is not associated to the
  // current device" (copies and event waits across devices are allowed; not a sticky error).
  if (s->device != current_device())
    return fail(cudaErrorInvalidResourceHandle, "kernel %s (%s:%d): stream %p is a stream of "
                "device %d, the current device is %d", name, file, line, (void *)h, s->device,
                current_device());
  char why[128];
  e = check_config(grid, block, shmem, why, sizeof why);
  if (e != cudaSuccess) return fail(e, "kernel %s (%s:%d): %s", name, file, line, why);
  auto op = std::make_unique<Op>();
  char what[256];
  std::snprintf(what, sizeof what, "kernel %s (%s:%d) <<<%u, %u>>>", name, file, line,
                grid.x * grid.y * grid.z, block.x * block.y * block.z);
  op->what = what;
  for (int i = 0; i < nptrs; ++i)
    if (ptrs[i].ptr) op->touches.push_back({ptrs[i].ptr, 0, ptrs[i].align});
  const int device = s->device;
  op->run = [device, run, hold](Op &self) { run_kernel(self, device, run, hold.get()); };
  enqueue(s, std::move(op));
  return cudaSuccess;
}

void cudasimCheckAccess(const void *p, size_t width) {
  const KernelScope *k = t_scope;
  if (!k) return;  // host code: nothing to check
  Fault f{};
  if (width > 1 && (uintptr_t)p % width) {
    f.err = cudaErrorMisalignedAddress;
    std::snprintf(f.msg, sizeof f.msg, "%zu-byte access at %p (%" PRIuPTR " mod %zu)", width, p,
                  (uintptr_t)p % width, width);
    throw f;
  }
  const char *c = static_cast<const char *>(p);
  for (const auto &r : k->ranges)
    if (c >= r.first && c + width <= r.second) return;
  f.err = cudaErrorIllegalAddress;
  std::snprintf(f.msg, sizeof f.msg, "%zu-byte access at %p outside the allocations of the "
                "kernel's pointer arguments", width, p);
  throw f;
}

}  // extern "C"
