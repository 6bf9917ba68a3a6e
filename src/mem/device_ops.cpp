// SPDX-License-Identifier: BSD-3-Clause
#include "common/error.hpp"
#include "mem/cuda.hpp"
#include "mem/ops.hpp"

namespace lm {

namespace {

// Every operation enqueues on the stream, through the device component's kernels, and returns;
// nothing synchronizes.
class DeviceOps final : public MemOps {
 public:
  DeviceOps(const lm_device_api_t &api, void *stream, int device)
      : api_(api), stream_(stream), device_(device) {}
  void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) override {
    check(api_.box_copy(&c, dst, src, e0, e1, stream_), "box copy kernel launch");
  }
  void reduce(DType t, int op, void *acc, const void *in, int64_t n) override {
    check(api_.reduce((int)t, op, acc, in, n, stream_), "reduce kernel launch");
  }
  void scale_avg(DType t, void *acc, int64_t n, int64_t k) override {
    check(api_.scale_avg((int)t, acc, n, k, stream_), "scale_avg kernel launch");
  }
  void fill_identity(DType t, int op, void *buf, int64_t n) override {
    check(api_.fill_identity((int)t, op, buf, n, stream_), "fill_identity kernel launch");
  }
  void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) override {
    check(api_.wide_accumulate((int)t, acc, in, n, assign, stream_), "wide_accumulate kernel launch");
  }
  void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) override {
    check(api_.wide_finish_avg((int)t, out, acc, n, k, stream_), "wide_finish_avg kernel launch");
  }
  // Stream-ordered, so a buffer given back is reused only after the work that reads it.
  void *staging_take(size_t bytes, size_t *cap) override {
    void *p = nullptr;
    if (bytes == 0) bytes = 1;
    int rc = api_.malloc_async(&p, bytes, stream_);
    if (rc == LMD_NO_MEMORY)
      fail(LM_ERR_OUT_OF_MEMORY, "reshard: cudaMallocAsync of %zu staging bytes failed on "
           "device %d (rank %d)", bytes, device_, world_rank_or_minus1());
    cuda_check(rc, "cudaMallocAsync (device staging)");
    *cap = bytes;
    return p;
  }
  void staging_give(void *p, size_t, size_t) override {
    if (p) api_.free_async(p, stream_);
  }

 private:
  static void check(int st, const char *what) { cuda_check(st, what); }
  const lm_device_api_t &api_;
  void *stream_;
  int device_;
};

}  // namespace

std::unique_ptr<MemOps> device_ops(void *stream, int device) {
  return std::make_unique<DeviceOps>(cuda_api("device memory operations"), stream, device);
}

}  // namespace lm
