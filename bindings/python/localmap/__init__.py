# SPDX-License-Identifier: BSD-3-Clause
"""localmap: distributed tensors over an MPI process mesh, and local_map, in Python.

A pure-Python binding of liblocalmap's C ABI (ctypes; no compiled extension). The library is
found through $LOCALMAP_LIBRARY (the .so or its directory), the build tree of a source checkout,
`pkg-config --variable=libdir localmap`, or the dynamic loader, in that order.

    import numpy as np
    import localmap as lm

    mesh = lm.Mesh([lm.world_rank()[1]])             # 1-D mesh over MPI_COMM_WORLD
    x = lm.from_global(np.arange(30.).reshape(10, 3), mesh, [lm.Shard(0)])

    @lm.local_map(out_placements=[lm.Partial("sum")])
    def local_sum(shard):                           # a numpy view of this rank's rows
        return np.array([shard.sum()])

    print(local_sum(x).gather())                    # [435.] on every rank

MPI: the first Mesh initialises MPI unless mpi4py (or anyone) already did, and then finalises
it at exit. localmap never imports mpi4py itself; communicators are accepted as mpi4py objects
(anything with py2f()) or Fortran handle ints, and Mesh.comm / dim_comm() import mpi4py only
when called. mpi4py must use the same MPI library as liblocalmap.
"""
from ._core import (ARG_DIST_TENSOR, ARG_DOUBLE, ARG_INT64, ARG_MANAGED_TENSOR, ARG_NONE,
                    ARG_POINTER, ARG_TENSOR, ERR_CUDA, ERR_INTERNAL, ERR_INVALID_ARGUMENT,
                    ERR_INVALID_USAGE, ERR_MISMATCH, ERR_MPI, ERR_NCCL, ERR_NOT_SUPPORTED,
                    ERR_OUT_OF_MEMORY, ERR_REMOTE, ERR_TIMEOUT, ERR_USER, REDUCE_OPS, SUCCESS,
                    CUDAError, TimeoutError,
                    DistTensor, Error, InternalError, InvalidArgumentError, InvalidUsageError,
                    Mesh, MismatchError, MPIError, NCCLError, NotSupportedError,
                    OutOfMemoryError, Partial, Placement, RemoteError, Replicate, Request,
                    RaggedShard, BlockCyclic, ReshardGroup, ReshardPlan, Shard, UserError, chunk, comm_world,
                    device_supported,
                    finalize, format_placements, placements_adjoint, from_dlpack, from_global, from_local, from_scalapack, init,
                    library_path, library_version, local_map, LocalMapRecord, RECORD_INPUT,
                    RECORD_IN, RECORD_IN_GRAD, RECORD_OUT, RECORD_OUT_GRAD, pool_stats,
                    reshard_estimate,
                    reshard_many,
                    status_string,
                    tensor_alloc,
                    world_rank, zeros)
from ._lib import LibraryNotFoundError

__version__ = "1.0.0"

__all__ = [
    "Mesh", "DistTensor", "ReshardPlan", "ReshardGroup", "Request", "Placement", "Shard", "RaggedShard", "BlockCyclic",
    "Replicate", "Partial", "zeros", "from_local", "from_scalapack", "from_global", "from_dlpack", "reshard_many",
    "reshard_estimate",
    "local_map", "LocalMapRecord", "RECORD_INPUT", "RECORD_IN", "RECORD_IN_GRAD", "RECORD_OUT",
    "RECORD_OUT_GRAD", "format_placements", "placements_adjoint",
    "chunk", "tensor_alloc", "pool_stats", "init", "finalize", "comm_world", "world_rank", "device_supported",
    "library_version", "library_path", "status_string", "REDUCE_OPS",
    "Error", "InvalidArgumentError", "InvalidUsageError", "OutOfMemoryError",
    "NotSupportedError", "MismatchError", "MPIError", "NCCLError", "CUDAError", "RemoteError",
    "InternalError", "UserError", "TimeoutError", "LibraryNotFoundError",
    "SUCCESS", "ERR_INVALID_ARGUMENT", "ERR_INVALID_USAGE", "ERR_OUT_OF_MEMORY",
    "ERR_NOT_SUPPORTED", "ERR_MISMATCH", "ERR_MPI", "ERR_NCCL", "ERR_CUDA", "ERR_REMOTE",
    "ERR_INTERNAL", "ERR_USER", "ERR_TIMEOUT",
    "ARG_NONE", "ARG_DIST_TENSOR", "ARG_TENSOR", "ARG_INT64", "ARG_DOUBLE", "ARG_POINTER",
    "ARG_MANAGED_TENSOR",
]
