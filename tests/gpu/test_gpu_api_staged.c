/* SPDX-License-Identifier: BSD-3-Clause */
/* test_gpu_api.c with the host-staged transport forced for the whole process (LM_TRANSPORT=mpi;
 * settings are read once per process): the same API tests on pinned host staging in every
 * topology, the transport query says MPI_STAGED, and a staging failure of a nonblocking plan on
 * one rank is agreed (test_staged_start_failure_agreed). */
// lm-test-np: 1 2 4
#define LM_GPU_FORCE_STAGED 1
#include "test_gpu_api.c"
