/* SPDX-License-Identifier: BSD-3-Clause */
/* test_gpu_nccl.c with the library's NCCL init fault hook set for the whole process
 * (LM_NCCL_FAULT_INIT_RANK=0: communicator rank 0 reports a failed init; settings are read once
 * per process): the failure is agreed on every rank and breaks the mesh, or both meshes of a
 * pair; where ranks share a GPU the hook is inert (host-staged). */
// lm-test-np: 1 2 4
#define LM_GPU_NCCL_FAULT 1
#include "test_gpu_nccl.c"
