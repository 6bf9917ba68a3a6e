// SPDX-License-Identifier: BSD-3-Clause
// Kernel launches written once for nvcc and for the simulated runtime of tests/sim (CUDA=sim,
// where g++ compiles device/kernels.cu as host C++ against tests/sim/include):
//   LM_LAUNCH(kernel, grid, block, stream, args...)  kernel<<<grid, block, 0, stream>>>(args...)
//   LM_DEVICE_ACCESS(ptr, width)  states a width-byte access at ptr: nothing under nvcc (the GPU
//       checks alignment itself and faults); under the simulator a misaligned or out-of-bounds
//       access becomes the sticky cudaErrorMisalignedAddress / cudaErrorIllegalAddress a GPU
//       would raise. Put it before every access wider than the pointer's own element type
//       (reinterpret_cast loads and stores); typed pointer arguments are checked by the launch.
// Which one applies is decided by the cuda_runtime.h that is found (the simulator's defines
// CUDASIM_VERSION): no Makefile define. Rules for kernels (tests/sim/README.md): launch only
// through LM_LAUNCH, pass device pointers as direct kernel arguments (not inside structs), no
// __shared__, __syncthreads, warp intrinsics or atomics (the simulator runs a block's threads
// one after another).
#pragma once

#include <cuda_runtime.h>

#if defined(CUDASIM_VERSION)
#define LM_LAUNCH(kernel, grid, block, stream, ...) \
  CUDASIM_LAUNCH(kernel, grid, block, 0, stream, __VA_ARGS__)
#define LM_DEVICE_ACCESS(ptr, width) cudasimCheckAccess((ptr), (width))
#else
#define LM_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define LM_DEVICE_ACCESS(ptr, width) ((void)0)
#endif
