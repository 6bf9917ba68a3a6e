// SPDX-License-Identifier: BSD-3-Clause
// NCCL communicators of this rank: bootstrapped over an MPI communicator, checked for
// asynchronous errors, released. Failures throw LM_ERR_NCCL (or LM_ERR_MPI for the bootstrap's
// own MPI calls); the caller breaks its meshes (mesh/device.hpp). No NCCL type crosses this
// header.
#pragma once

#include <mpi.h>

#include <vector>

namespace lm {

// One NCCL communicator: over a mesh's ranks, or over the union of the ranks of two meshes
// (cross-mesh reshards). Created lazily by its owner, released when the owner goes.
struct NcclComm {
  void *comm = nullptr;        // ncclComm_t; NULL: not created yet, or aborted after an error
  int device = -1;             // the CUDA device it was created on
  std::vector<void *> streams;  // every stream NCCL work was enqueued on (cudaStream_t)
  // Notes that NCCL work was enqueued on `stream`.
  void used_on(void *stream);
  // Local and immediate (a mesh destroy must never wait for peers): hands the communicator to
  // its retirement, which drains the streams it used, then finalizes it (ncclCommFinalize:
  // NCCL delivers what was sent and becomes quiescent with its peers) and destroys it; only an
  // error, or LM_NCCL_TIMEOUT after the release, aborts it. Retirement progresses at later
  // NCCL calls of the library and is waited for (bounded) at MPI_Finalize.
  void release();
};

// Advances the retirement of released communicators; wait: until none is left (each bounded by
// its deadline). Thread-safe; never throws.
void nccl_retire_progress(bool wait);

// Creates `out` over the n ranks of `c` (this rank: `rank`) on device_id, collective over c: the
// unique id from rank 0 by MPI_Bcast, non-blocking ncclCommInitRankConfig polled until done or
// the earlier of LM_NCCL_TIMEOUT and the call's deadline (LM_TIMEOUT / config->timeout:
// transport/failure.hpp), one allreduce agreeing on the outcome. Any failure on any rank: every rank
// aborts what it made and throws LM_ERR_NCCL (LM_ERR_MPI for a failed MPI call).
void nccl_init(NcclComm &out, MPI_Comm c, int n, int rank, int device_id);
// After work was posted: waits until NCCL finished enqueuing (non-blocking communicators), at
// most the earlier of LM_NCCL_TIMEOUT and the call's deadline; on an asynchronous error or the
// bound passed, aborts the communicator and throws LM_ERR_NCCL naming the bound.
// Nothing to check when c.comm is NULL.
void nccl_check_async(NcclComm &c, const char *what);
// Throws LM_ERR_INVALID_ARGUMENT when a communicator made on one device meets a tensor of another.
void nccl_check_device(const NcclComm &c, int device_id, const char *whose);

}  // namespace lm
