// SPDX-License-Identifier: BSD-3-Clause
// unit_boxcopy: the box pack/unpack arithmetic of src/layout/boxcopy.hpp (the code the host
// transport runs and the device kernels compile), checked on the CPU against a naive
// element-by-element reference: box copies (whole and by element ranges, as staging pipelines
// them), per-element locate (a kernel thread's body), contiguity, and splits into sub-boxes.
// No MPI. Prints "<N> passed, <N> failed" last and exits nonzero on any failure.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "layout/boxcopy.hpp"
#include "unit_check.hpp"

namespace {


std::mt19937_64 rng(20261201);
int64_t rnd(int64_t n) { return (int64_t)(rng() % (uint64_t)n); }

struct Case {
  int n;
  int64_t esize;
  int64_t sshape[6], dshape[6], soff[6], doff[6], len[6];
};

Case draw() {
  Case c;
  c.n = 1 + (int)rnd(4);
  const int64_t es[] = {1, 2, 4, 8, 16};
  c.esize = es[rnd(5)];
  for (int i = 0; i < c.n; ++i) {
    c.len[i] = rnd(5) == 0 ? 1 : 1 + rnd(5);
    // Buffers are the box itself (compact) sometimes, larger otherwise.
    c.sshape[i] = c.len[i] + (rnd(3) == 0 ? 0 : rnd(4));
    c.dshape[i] = c.len[i] + (rnd(3) == 0 ? 0 : rnd(4));
    c.soff[i] = rnd(c.sshape[i] - c.len[i] + 1);
    c.doff[i] = rnd(c.dshape[i] - c.len[i] + 1);
  }
  return c;
}

int64_t numel(int n, const int64_t *s) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= s[i];
  return p;
}

// Row-major linear index of box element e (box-relative) inside a buffer of `shape` at `off`.
int64_t naive_index(int n, const int64_t *shape, const int64_t *off, const int64_t *len,
                    int64_t e) {
  int64_t idx[6];
  for (int i = n - 1; i >= 0; --i) {
    idx[i] = e % len[i];
    e /= len[i];
  }
  int64_t lin = 0;
  for (int i = 0; i < n; ++i) lin = lin * shape[i] + off[i] + idx[i];
  return lin;
}

void test_copy_random() {
  g_test = "copy_random";
  int bad = 0;
  for (int t = 0; t < 3000; ++t) {
    Case c = draw();
    int64_t ns = numel(c.n, c.sshape), nd = numel(c.n, c.dshape), nb = numel(c.n, c.len);
    std::vector<unsigned char> src((size_t)(ns * c.esize)), got((size_t)(nd * c.esize)),
        want((size_t)(nd * c.esize));
    for (auto &b : src) b = (unsigned char)rng();
    for (size_t i = 0; i < got.size(); ++i) got[i] = want[i] = (unsigned char)(i * 7);
    lm::BoxCopy bc;
    lm::boxcopy_init(bc, c.n, c.len, c.sshape, c.soff, c.dshape, c.doff, c.esize);
    if (bc.numel != nb) ++bad;
    // A random sub-range, copied in random pieces (how staging pipelines a box).
    int64_t e0 = rnd(nb + 1), e1 = e0 + rnd(nb - e0 + 1);
    for (int64_t e = e0; e < e1; ++e) {
      int64_t s = naive_index(c.n, c.sshape, c.soff, c.len, e);
      int64_t d = naive_index(c.n, c.dshape, c.doff, c.len, e);
      std::memcpy(&want[(size_t)(d * c.esize)], &src[(size_t)(s * c.esize)], (size_t)c.esize);
      int64_t so, dof;
      lm::boxcopy_locate(bc, e, &so, &dof);
      if (so != s || dof != d) ++bad;
    }
    for (int64_t a = e0; a < e1;) {
      int64_t b = a + 1 + rnd(e1 - a);
      lm::boxcopy_range(bc, got.data(), src.data(), a, b);
      a = b;
    }
    if (got != want) ++bad;
    // Per-element copy (a kernel's thread body) gives the same bytes.
    std::vector<unsigned char> got2(want.size());
    for (size_t i = 0; i < got2.size(); ++i) got2[i] = (unsigned char)(i * 7);
    for (int64_t e = e0; e < e1; ++e) lm::boxcopy_element(bc, got2.data(), src.data(), e);
    if (got2 != want) ++bad;
  }
  CHECK(bad == 0);
}

void test_zero_d_and_empty() {
  g_test = "zero_d_and_empty";
  lm::BoxCopy bc;
  double a = 3.5, b = 0;
  lm::boxcopy_init(bc, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 8);
  CHECK(bc.numel == 1);
  lm::boxcopy_range(bc, &b, &a, 0, 1);
  CHECK(b == 3.5);
  int64_t len[2] = {3, 0}, shape[2] = {3, 4}, off[2] = {0, 0};
  lm::boxcopy_init(bc, 2, len, shape, off, shape, off, 8);
  CHECK(bc.numel == 0);
  lm::boxcopy_range(bc, &b, &a, 0, 5);  // nothing to do, touches nothing
  lm::BoxSplit sp;
  lm::boxsplit_init(sp, 2, len, 8, 64);
  CHECK(sp.count == 0);
}

void test_contiguous() {
  g_test = "contiguous";
  int bad = 0;
  for (int t = 0; t < 3000; ++t) {
    Case c = draw();
    int64_t off = -1;
    bool got = lm::box_contiguous(c.n, c.sshape, c.soff, c.len, &off);
    // Naive: consecutive box elements are consecutive in the buffer.
    int64_t nb = numel(c.n, c.len);
    bool want = true;
    for (int64_t e = 1; e < nb; ++e)
      if (naive_index(c.n, c.sshape, c.soff, c.len, e) !=
          naive_index(c.n, c.sshape, c.soff, c.len, e - 1) + 1)
        want = false;
    if (nb == 0) continue;  // an empty box is trivially one (empty) run; callers never ask
    if (got != want) ++bad;
    if (got && off != naive_index(c.n, c.sshape, c.soff, c.len, 0)) ++bad;
  }
  CHECK(bad == 0);
}

void test_split() {
  g_test = "split";
  int bad = 0;
  for (int t = 0; t < 3000; ++t) {
    Case c = draw();
    int64_t nb = numel(c.n, c.len);
    int64_t max_bytes = c.esize * (1 + rnd(nb + 3)) + rnd(c.esize);
    lm::BoxSplit sp;
    lm::boxsplit_init(sp, c.n, c.len, c.esize, max_bytes);
    // Sub-boxes tile the box in order: element ranges are consecutive, each a box whose
    // elements are exactly that range, each within the byte bound, each contiguous in a compact
    // buffer of the box.
    int64_t next = 0;
    for (int64_t k = 0; k < sp.count; ++k) {
      int64_t so[6], sl[6], e0, e1;
      lm::boxsplit_get(sp, c.n, c.len, k, so, sl, &e0, &e1);
      if (e0 != next || e1 <= e0) ++bad;
      if ((e1 - e0) * c.esize > max_bytes && e1 - e0 > 1) ++bad;
      if (numel(c.n, sl) != e1 - e0) ++bad;
      int64_t off = -1;
      if (!lm::box_contiguous(c.n, c.len, so, sl, &off) || off != e0) ++bad;
      next = e1;
    }
    if (next != nb) ++bad;
    // Same inputs, same split (sender and receiver agree without talking).
    lm::BoxSplit sp2;
    lm::boxsplit_init(sp2, c.n, c.len, c.esize, max_bytes);
    if (sp2.count != sp.count || sp2.k != sp.k || sp2.step != sp.step) ++bad;
  }
  CHECK(bad == 0);
}

}  // namespace

int main() {
  test_copy_random();
  test_zero_d_and_empty();
  test_contiguous();
  test_split();
  return unit_check_report("unit_boxcopy");
}
