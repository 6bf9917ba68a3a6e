// SPDX-License-Identifier: BSD-3-Clause
#include "common/mpi.hpp"

#include "common/error.hpp"

namespace lm {

void mpi_check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(LM_ERR_MPI, "%s failed on rank %d: %s", what, world_rank_or_minus1(), msg);
}

bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void require_mpi(const char *what) {
  if (!mpi_alive())
    fail(LM_ERR_INVALID_USAGE, "%s: MPI is not initialised or was already finalized", what);
}

}  // namespace lm
