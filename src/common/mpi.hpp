// SPDX-License-Identifier: BSD-3-Clause
// MPI helpers every layer above the pure ones uses: errors and the library's MPI lifetime.
// (The planner and the layout math never include this header: tools/check-layers.py.)
#pragma once

#include <mpi.h>

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

}  // namespace lm
