// SPDX-License-Identifier: BSD-3-Clause
#include "common/error.hpp"
#include "layout/reduce.hpp"
#include "mem/ops.hpp"
#include "mem/pool.hpp"

namespace lm {

namespace {

class HostOps final : public MemOps {
 public:
  void copy(const BoxCopy &c, void *dst, const void *src, int64_t e0, int64_t e1) override {
    boxcopy_range(c, dst, src, e0, e1);
  }
  void reduce(DType t, int op, void *acc, const void *in, int64_t n) override {
    reduce_into(t, op, acc, in, n);
  }
  void reduce_pair(DType t, int op, void *out, const void *a, const void *in, int64_t n,
                   size_t) override {
    reduce_pair_into(t, op, out, a, in, n);
  }
  void scale_avg(DType t, void *acc, int64_t n, int64_t k) override { lm::scale_avg(t, acc, n, k); }
  void fill_identity(DType t, int op, void *buf, int64_t n) override {
    lm::fill_identity(t, op, buf, n);
  }
  void wide_accumulate(DType t, void *acc, const void *in, int64_t n, bool assign) override {
    lm::wide_accumulate(t, static_cast<__int128 *>(acc), in, n, assign);
  }
  void wide_finish_avg(DType t, void *out, const void *acc, int64_t n, int64_t k) override {
    lm::wide_finish_avg(t, out, static_cast<const __int128 *>(acc), n, k);
  }
  void *staging_take(size_t bytes, size_t *cap) override {
    void *p = pool_take(bytes, cap);
    if (!p)
      fail(LM_ERR_OUT_OF_MEMORY, "reshard: could not allocate %zu bytes of staging on rank %d",
           bytes, world_rank_or_minus1());
    return p;
  }
  void staging_give(void *p, size_t cap, size_t bytes) override { pool_give(p, cap, bytes); }
};

}  // namespace

std::unique_ptr<MemOps> host_ops() { return std::make_unique<HostOps>(); }

}  // namespace lm
