/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim: the simulator's own entry points (not part of CUDA). The kernel launch layer of
 * cuda_runtime.h calls the first two; tests may call the hooks. */
#ifndef CUDASIM_H_
#define CUDASIM_H_

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pointer argument of a kernel: the launch opens the device allocation it points into for the
 * kernel's run and checks that it is aligned to `align` (the pointee's alignment, as the GPU
 * faults on a misaligned typed access). */
typedef struct {
  const void *ptr;
  size_t align;
} cudasimPointerArg;

/* Queues a kernel on `stream`: the stream's worker opens the pointer arguments' allocations, calls
 * run(ctx) (which runs every block and thread), closes them, then drop(ctx); drop(ctx) also runs
 * when the launch fails at once. A launch error (bad configuration) is returned and becomes the
 * thread's last error, as cudaGetLastError after a real launch tells; a fault inside the kernel
 * is a sticky error of the device, returned by the next call. */
cudaError_t cudasimLaunchKernel(cudaStream_t stream, dim3 grid, dim3 block, size_t shmem,
                                const cudasimPointerArg *ptrs, int nptrs, void (*run)(void *ctx),
                                void *ctx, void (*drop)(void *ctx), const char *name,
                                const char *file, int line);

/* In a kernel: states a `width`-byte access at p. A misaligned p (p % width != 0) is
 * cudaErrorMisalignedAddress, a p outside the allocations the launch opened
 * cudaErrorIllegalAddress: the kernel stops there (C++ exception, caught by the worker) and the
 * device's context is dead (sticky), as on a GPU. Outside a kernel it does nothing. */
void cudasimCheckAccess(const void *p, size_t width);

/* Test hooks. cudasimStreamDelay queues `usec` microseconds of "work" on a stream (a slow kernel).
 * cudasimTopology: 0 one GPU per process ("per-rank"), 1 GPUs shared by processes ("shared").
 * cudasimIsDeviceMemory: 1 for memory of a live cudaMalloc/cudaMallocAsync block. */
cudaError_t cudasimStreamDelay(cudaStream_t stream, unsigned int usec);

/* The NCCL calls of this process, as the simulator accepted them (a call that failed its checks is
 * not counted): how many calls named `call` ("ncclAllGather", "ncclReduceScatter",
 * "ncclAllReduce", "ncclAlltoAll", "ncclBroadcast", "ncclSend", "ncclRecv"; NULL: all of them)
 * and their bytes, this rank's side of each: send and receive buffers for ncclSend / ncclRecv,
 * the send buffer of a collective (ncclAllGather: count, ncclReduceScatter and ncclAlltoAll:
 * nranks * count, ncclAllReduce and ncclBroadcast: count elements). cudasimNcclCallsReset starts
 * the count again. With CUDASIM_NCCL_LOG=<file>, each call is also appended to the file as one
 * line: "cudasim-nccl pid=P rank=R nranks=N call=C count=K type=T op=O peer=Q bytes=B". */
typedef struct {
  unsigned long long calls, bytes;
} cudasimNcclCount;
cudasimNcclCount cudasimNcclCalls(const char *call);
void cudasimNcclCallsReset(void);
int cudasimTopology(void);
int cudasimIsDeviceMemory(const void *p);

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H_ */
