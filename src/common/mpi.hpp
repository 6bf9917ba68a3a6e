// SPDX-License-Identifier: BSD-3-Clause
// MPI helpers every layer above the pure ones uses: errors and the library's MPI lifetime.
// (The planner and the layout math never include this header: tools/check-layers.py.)
#pragma once

#include <mpi.h>

#include <cstdint>

namespace lm {

// Throws LM_ERR_MPI ("<what> failed on rank R: <MPI error string>") when rc != MPI_SUCCESS.
void mpi_check(int rc, const char *what);
// MPI is initialised and not finalized: destructors may free MPI objects (after MPI_Finalize
// they must not: Python __del__ and Rust Drop run late).
bool mpi_alive();
// Throws LM_ERR_INVALID_USAGE "<what>: MPI is not initialised or was already finalized" unless
// mpi_alive(): every collective checks it before its first MPI call (a call after MPI_Finalize
// must return an error, not abort the process).
void require_mpi(const char *what);

// Frees a communicator of the library, or, when `tainted` (a failed transfer or agreement ran on
// it: messages nobody will receive may be queued on it, at this rank or its peers), keeps it until
// MPI_Finalize (freed when MPI_COMM_SELF is). MPI implementations reuse a freed communicator's
// context id for the next one made over the same processes, and a stale message queued under it
// would then match that communicator's receives (docs/DESIGN.md, "Failure model"). *c becomes
// MPI_COMM_NULL. Nothing after MPI_Finalize.
void comm_release(MPI_Comm *c, bool tainted);

// The epoch of a library communicator: the agreed id of the object it belongs to (the mesh id),
// attached when it is made; 0 when none was. Messages that must not be taken for another
// communicator's that reuses the context id (abort notices) carry it.
void comm_set_epoch(MPI_Comm c, uint64_t epoch);
uint64_t comm_epoch(MPI_Comm c);

}  // namespace lm
