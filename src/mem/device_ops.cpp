// SPDX-License-Identifier: BSD-3-Clause
#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mem/kernels.hpp"
#include "mem/ops.hpp"

#ifdef LM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lm {

#ifdef LM_WITH_CUDA
namespace {

// Every operation enqueues on the stream and returns; nothing synchronizes.
class DeviceOps final : public MemOps {
 public:
  DeviceOps(void *stream, int device) : stream_(stream), device_(device) {}
  void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) override {
    cuda::box_copy(c, dst, src, e0, e1, stream_);
  }
  void reduce(DType t, int op, void *acc, const void *in, int64_t n) override {
    cuda::reduce(t, op, acc, in, n, stream_);
  }
  void scale_avg(DType t, void *acc, int64_t n, int64_t k) override {
    cuda::scale_avg(t, acc, n, k, stream_);
  }
  void fill_identity(DType t, int op, void *buf, int64_t n) override {
    cuda::fill_identity(t, op, buf, n, stream_);
  }
  void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) override {
    cuda::wide_accumulate(t, acc, in, n, assign, stream_);
  }
  void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) override {
    cuda::wide_finish_avg(t, out, acc, n, k, stream_);
  }
  // Stream-ordered, so a buffer given back is reused only after the work that reads it.
  void *staging_take(size_t bytes, size_t *cap) override {
    void *p = nullptr;
    if (bytes == 0) bytes = 1;
    cudaError_t rc = cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream_));
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail(LM_ERR_OUT_OF_MEMORY, "reshard: cudaMallocAsync of %zu staging bytes failed on "
           "device %d (rank %d)", bytes, device_, world_rank_or_minus1());
    }
    if (rc != cudaSuccess) cuda_fail(rc, "cudaMallocAsync (device staging)");
    *cap = bytes;
    return p;
  }
  void staging_give(void *p, size_t, size_t) override {
    if (p && cudaFreeAsync(p, static_cast<cudaStream_t>(stream_)) != cudaSuccess)
      cudaGetLastError();
  }

 private:
  void *stream_;
  int device_;
};

}  // namespace

std::unique_ptr<MemOps> device_ops(void *stream, int device) {
  return std::make_unique<DeviceOps>(stream, device);
}
#else
std::unique_ptr<MemOps> device_ops(void *, int) {
  fail(LM_ERR_NOT_SUPPORTED, "device memory operations: this build has no CUDA backend");
}
#endif

}  // namespace lm
