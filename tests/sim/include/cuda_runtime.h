/* SPDX-License-Identifier: BSD-3-Clause */
/* cudasim: drop-in cuda_runtime.h for the simulated CUDA runtime (tests/sim, CUDA=sim builds).
 * C: the runtime API. C++ also: the CUDA function qualifiers as empty macros, the built-in index
 * variables, and cudasim::launch, the host replacement of kernel<<<grid, block, shmem, stream>>>
 * (code uses it through a macro that is the real launch under nvcc, see CUDASIM_LAUNCH). */
#ifndef CUDASIM_CUDA_RUNTIME_H_
#define CUDASIM_CUDA_RUNTIME_H_

#include "cuda_runtime_api.h"
#include "cudasim.h"

#ifdef __cplusplus
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

/* Host compilation of device code: qualifiers vanish. Not simulated: __shared__ memory,
 * __syncthreads and warp intrinsics (the threads of a block run one after the other), so code
 * using them does not compile here. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

/* The built-in indices: per worker thread, set by the launch before each simulated thread.
 * Inline variables: each shared object that launches kernels has its own copy, set and read in it. */
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cudasim {

/* One launch: the kernel, its arguments converted to the parameter types (as a call would), the
 * geometry. run() is the whole grid, block after block, thread after thread. */
template <class... P>
struct Kernel {
  void (*fn)(P...);
  std::tuple<std::decay_t<P>...> args;
  dim3 grid, block;

  static void run(void *self) {
    const Kernel *k = static_cast<const Kernel *>(self);
    gridDim = k->grid;
    blockDim = k->block;
    for (unsigned bz = 0; bz < k->grid.z; ++bz)
      for (unsigned by = 0; by < k->grid.y; ++by)
        for (unsigned bx = 0; bx < k->grid.x; ++bx) {
          blockIdx = uint3{bx, by, bz};
          for (unsigned tz = 0; tz < k->block.z; ++tz)
            for (unsigned ty = 0; ty < k->block.y; ++ty)
              for (unsigned tx = 0; tx < k->block.x; ++tx) {
                threadIdx = uint3{tx, ty, tz};
                std::apply(k->fn, k->args);
              }
        }
  }
  static void drop(void *self) { delete static_cast<Kernel *>(self); }
};

/* Pointer arguments are opened by the launch and checked against the pointee's alignment. */
template <class T>
inline void note_pointer(cudasimPointerArg *out, int *n, const T &v) {
  if constexpr (std::is_pointer_v<T>) {
    using E = std::remove_cv_t<std::remove_pointer_t<T>>;
    if constexpr (!std::is_function_v<E>) {
      std::size_t align = 1;
      if constexpr (!std::is_void_v<E>) align = alignof(E);
      out[(*n)++] = cudasimPointerArg{static_cast<const void *>(v), align};
    }
  } else {
    (void)out, (void)n, (void)v;
  }
}

template <class... P, class... A>
inline void launch(const char *name, const char *file, int line, void (*fn)(P...), dim3 grid,
                   dim3 block, std::size_t shmem, cudaStream_t stream, A &&...a) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  auto *k = new Kernel<P...>{fn, std::tuple<std::decay_t<P>...>(std::forward<A>(a)...), grid, block};
  cudasimPointerArg ptrs[sizeof...(P) + 1];
  int n = 0;
  std::apply([&](const auto &...x) { (note_pointer(ptrs, &n, x), ...); }, k->args);
  (void)cudasimLaunchKernel(stream, grid, block, shmem, ptrs, n, &Kernel<P...>::run, k,
                            &Kernel<P...>::drop, name, file, line);
}

}  // namespace cudasim

/* kernel<<<grid, block, shmem, stream>>>(args...) as a statement. Like the real launch it returns
 * nothing; cudaGetLastError() tells a launch error. */
#define CUDASIM_LAUNCH(kernel, grid, block, shmem, stream, ...) \
  ::cudasim::launch(#kernel, __FILE__, __LINE__, kernel, grid, block, shmem, stream, ##__VA_ARGS__)
#endif /* __cplusplus */

#endif /* CUDASIM_CUDA_RUNTIME_H_ */
