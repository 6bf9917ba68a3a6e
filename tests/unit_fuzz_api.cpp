// SPDX-License-Identifier: BSD-3-Clause
// fuzz/fuzz_api.cpp replayed in the normal suite (see tests/fuzz_replay.h): every public entry
// point with hostile arguments on a singleton MPI process (no mpirun), a fixed-seed stream of
// inputs, so the API fuzzer's invariants (a known status and a message, never a crash) also run
// in `make check` and under the sanitizer build where libFuzzer is missing.
// lm-unit-starts-mpi (the API starts MPI: LSan needs full stacks, tests/run-tests.sh)
#include "../fuzz/fuzz_api.cpp"
#include "fuzz_replay.h"

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  int rc = replay_main("fuzz_api", 4000);
  lm_status_t st = lm_mesh_destroy(&g_mesh);
  if (lm_finalize() != LM_SUCCESS || st != LM_SUCCESS) return 1;
  return rc;
}
