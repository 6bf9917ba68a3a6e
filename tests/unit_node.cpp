// SPDX-License-Identifier: BSD-3-Clause
// unit_node: the arithmetic of the node-local path (src/transport/node/node_local.hpp) without MPI. The byte
// runs of boxes (box_runs) against the element offsets of the box copy every other path uses
// (layout/boxcopy.hpp), and cma_copy moving a box (read and write) of one buffer into a box of another (of other
// extents) through process_vm_readv on this very process, compared element by element with
// boxcopy_range. Random boxes of 0-4 dims, element sizes 1-16, empty extents included.
// Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "layout/boxcopy.hpp"
#include "transport/node/node_local.hpp"
#include "unit_check.hpp"

namespace {


struct Box {
  int nd;
  int64_t shape[4], off[4], len[4];
};

Box random_box(std::mt19937 &g, int nd, const int64_t *len) {
  Box b;
  b.nd = nd;
  for (int i = 0; i < nd; ++i) {
    b.len[i] = len[i];
    b.shape[i] = len[i] + (int64_t)(g() % 3);
    b.off[i] = (int64_t)(g() % (uint64_t)(b.shape[i] - len[i] + 1));
  }
  return b;
}

int64_t numel(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= s[i];
  return n;
}

void test_runs_and_copy() {
  std::mt19937 g(12345);
  const size_t esizes[] = {1, 2, 4, 8, 16};
  int compared = 0;
  for (int it = 0; it < 3000; ++it) {
    int nd = (int)(g() % 5);
    int64_t len[4];
    for (int i = 0; i < nd; ++i) len[i] = (int64_t)(g() % 5);  // 0: an empty box
    size_t es = esizes[g() % 5];
    Box a = random_box(g, nd, len), b = random_box(g, nd, len);
    std::vector<unsigned char> src((size_t)numel(nd, a.shape) * es + 1),
        dst((size_t)numel(nd, b.shape) * es + 1, 0xee), want(dst);
    for (auto &c : src) c = (unsigned char)g();
    // The runs cover the box's bytes exactly once, in order, and cover nothing else.
    std::vector<lm::Run> ra, rb;
    lm::box_runs((uint64_t)(uintptr_t)src.data(), nd, a.shape, a.off, a.len, es, &ra);
    lm::box_runs((uint64_t)(uintptr_t)dst.data(), nd, b.shape, b.off, b.len, es, &rb);
    uint64_t na = 0, nb = 0;
    for (auto &r : ra) na += r.bytes;
    for (auto &r : rb) nb += r.bytes;
    CHECK(na == (uint64_t)numel(nd, len) * es && nb == na);
    for (size_t i = 1; i < ra.size(); ++i) CHECK(ra[i - 1].addr + ra[i - 1].bytes < ra[i].addr);
    // The reference: boxcopy of the same boxes.
    lm::BoxCopy c;
    lm::boxcopy_init(c, nd, len, a.shape, a.off, b.shape, b.off, (int64_t)es);
    lm::boxcopy_range(c, want.data(), src.data(), 0, c.numel);
    std::string why = lm::cma_copy(getpid(), rb, ra, false);  // read into dst
    CHECK(why.empty());
    CHECK(std::memcmp(dst.data(), want.data(), dst.size()) == 0);
    std::vector<unsigned char> dst2((size_t)numel(nd, b.shape) * es + 1, 0xee);
    std::vector<lm::Run> rb2;
    lm::box_runs((uint64_t)(uintptr_t)dst2.data(), nd, b.shape, b.off, b.len, es, &rb2);
    CHECK(lm::cma_copy(getpid(), ra, rb2, true).empty());  // write src's box into dst2
    CHECK(std::memcmp(dst2.data(), want.data(), dst2.size()) == 0);
    ++compared;
  }
  // Many runs (more than one process_vm_readv batch): 2000 rows of 3 of a [2000, 7] buffer.
  {
    int64_t shape[2] = {2000, 7}, off[2] = {0, 2}, len[2] = {2000, 3};
    std::vector<unsigned char> src(2000 * 7 * 4), dst(2000 * 3 * 4), want(2000 * 3 * 4);
    for (size_t i = 0; i < src.size(); ++i) src[i] = (unsigned char)(i * 7 + 1);
    std::vector<lm::Run> rs, rd;
    lm::box_runs((uint64_t)(uintptr_t)src.data(), 2, shape, off, len, 4, &rs);
    rd.push_back({(uint64_t)(uintptr_t)dst.data(), dst.size()});
    CHECK(rs.size() == 2000);
    CHECK(lm::cma_copy(getpid(), rd, rs, false).empty());
    int64_t zero[2] = {0, 0};
    lm::BoxCopy c;
    lm::boxcopy_init(c, 2, len, shape, off, len, zero, 4);
    lm::boxcopy_range(c, want.data(), src.data(), 0, c.numel);
    CHECK(dst == want);
  }
  // Refusals: unequal byte counts; a bad address reports errno's text.
  {
    unsigned char x[8] = {0}, y[8] = {0};
    std::vector<lm::Run> l = {{(uint64_t)(uintptr_t)x, 8}}, r = {{(uint64_t)(uintptr_t)y, 4}};
    CHECK(!lm::cma_copy(getpid(), l, r, false).empty());
    std::vector<lm::Run> bad = {{8, 8}};  // unmapped
    CHECK(!lm::cma_copy(getpid(), l, bad, false).empty());
    CHECK(!lm::cma_copy(getpid(), l, bad, true).empty());
  }
  std::printf("unit_node: %d random boxes copied and compared\n", compared);
}

}  // namespace

int main() {
  test_runs_and_copy();
  return unit_check_report("unit_node");
}
