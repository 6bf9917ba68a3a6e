// SPDX-License-Identifier: BSD-3-Clause
// unit_transport_mpi: the MPI transport's choice between moving a non-contiguous box in place as
// a subarray datatype and letting the executor stage (pack) it (MpiTransport::box_direct), on a
// singleton MPI process: boxes below LM_DATATYPE_MIN_BYTES (32 KiB by default) are staged, boxes
// from there up to 1 GiB go as datatypes, and the answer depends on the box's bytes alone (not on
// its offset or the buffer around it), so that sender and receiver agree. Then a box at and below
// the size floor is sent to this same rank through post_send_box / post_recv_box and compared
// element by element with boxcopy_range.
// lm-unit-starts-mpi (MPI_Init on a singleton: LSan needs full stacks, tests/run-tests.sh)
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "comm/agree.hpp"
#include "comm/node.hpp"
#include "layout/boxcopy.hpp"
#include "transport/mpi/mpi.hpp"
#include "unit_check.hpp"

namespace {

lm::BoxRef box(int nd, const int64_t *shape, const int64_t *off, const int64_t *len, size_t esize) {
  lm::BoxRef b;
  b.ndim = nd;
  b.shape = shape;
  b.off = off;
  b.len = len;
  b.esize = esize;
  return b;
}

void test_size_floor() {
  g_test = "size floor";
  lm::MpiTransport tp(MPI_COMM_SELF);
  // A column block of rows x 4096 float64: rows * cols * 8 bytes.
  const int64_t shape[2] = {4096, 4096}, off[2] = {0, 8}, toff[2] = {0, 1};
  const int64_t small[2] = {16, 16};       // 2 KiB
  const int64_t below[2] = {4095, 1};      // 32760 B: one element short of 32 KiB
  const int64_t at[2] = {4096, 1};         // 32 KiB
  const int64_t tall[2] = {1 << 20, 8};
  const int64_t big[2] = {1024, 64};       // 512 KiB
  CHECK(!tp.box_direct(box(2, shape, off, small, 8)));
  CHECK(!tp.box_direct(box(2, tall, toff, below, 8)));
  CHECK(tp.box_direct(box(2, tall, toff, at, 8)));
  CHECK(tp.box_direct(box(2, shape, off, big, 8)));
  // The same bytes in other element sizes and offsets: the same answer.
  const int64_t off2[2] = {100, 0};
  CHECK(tp.box_direct(box(2, tall, off2, at, 8)));
  const int64_t at1[2] = {8192, 4}, below1[2] = {8191, 4};  // 32 KiB of 1-byte elements, and less
  CHECK(tp.box_direct(box(2, tall, toff, at1, 1)));
  CHECK(!tp.box_direct(box(2, tall, toff, below1, 1)));
  // Over 1 GiB: staged whatever the floor.
  const int64_t huge_shape[2] = {1 << 16, 1 << 16}, huge[2] = {1 << 16, 1 << 12};
  CHECK(!tp.box_direct(box(2, huge_shape, off, huge, 8)));
  // An extent past int: staged.
  const int64_t wide_shape[2] = {4, int64_t(1) << 32}, wide[2] = {4, 4096};
  CHECK(!tp.box_direct(box(2, wide_shape, off, wide, 8)));
}

// Where no rank of the set has node peers (the agreed answer attached to the communicator), a
// received box goes as a datatype from LM_DATATYPE_RECV_MIN_BYTES (512 KiB) only; sends keep
// the 32 KiB floor. Without that answer (MPI_COMM_SELF above) both directions keep it.
void test_receive_floor() {
  g_test = "receive floor";
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_SELF, &c);
  lm::AgreeComm ac;
  ac.node_nowhere = true;
  lm::node_attach(c, &ac);
  {
    lm::MpiTransport tp(c);
    const int64_t tall[2] = {1 << 20, 8}, toff[2] = {0, 1}, at[2] = {4096, 1};
    const int64_t rbelow[2] = {65535, 1}, rat[2] = {65536, 1};  // 512 KiB - 8 B, 512 KiB
    CHECK(tp.box_direct(box(2, tall, toff, at, 8), true));
    CHECK(!tp.box_direct(box(2, tall, toff, at, 8), false));
    CHECK(!tp.box_direct(box(2, tall, toff, rbelow, 8), false));
    CHECK(tp.box_direct(box(2, tall, toff, rat, 8), false));
    CHECK(tp.box_direct(box(2, tall, toff, rbelow, 8), true));
  }
  lm::MpiTransport self(MPI_COMM_SELF);
  const int64_t tall[2] = {1 << 20, 8}, toff[2] = {0, 1}, at[2] = {4096, 1};
  CHECK(self.box_direct(box(2, tall, toff, at, 8), false));
  MPI_Comm_free(&c);
}

// Sends box `len` at `off` of a rows x cols float64 buffer to this rank and receives it into a
// box of another buffer; true when every element arrived where boxcopy puts it.
bool self_roundtrip(lm::MpiTransport &tp, int64_t rows, int64_t cols, const int64_t *off,
                    const int64_t *len) {
  const int64_t shape[2] = {rows, cols};
  std::vector<double> src((size_t)(rows * cols)), dst(src.size(), -1.0), want(src.size(), -1.0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = (double)i;
  const int64_t doff[2] = {off[0] / 2, 0};  // the receive box elsewhere in its buffer
  lm::BoxRef s = box(2, shape, off, len, 8), d = box(2, shape, doff, len, 8);
  auto tr = tp.post_recv_box(dst.data(), d, 0, 11);
  auto ts = tp.post_send_box(src.data(), s, 0, 11);
  tp.flush();
  bool ok = tp.done(tr, true) && tp.done(ts, true);
  tp.reset();
  lm::BoxCopy c;
  lm::boxcopy_init(c, 2, len, shape, off, shape, doff, 8);
  lm::boxcopy_range(c, want.data(), src.data(), 0, c.numel);
  return ok && dst == want;
}

void test_self_roundtrip() {
  g_test = "self roundtrip";
  lm::MpiTransport tp(MPI_COMM_SELF);
  const int64_t off[2] = {6, 3};
  const int64_t as_type[2] = {512, 32};  // 128 KiB: a subarray datatype
  CHECK(self_roundtrip(tp, 1024, 64, off, as_type));
  // post_*_box also moves a box box_direct would stage (the executor asks first; the transport
  // still describes it correctly when asked directly).
  const int64_t small[2] = {16, 16};
  CHECK(self_roundtrip(tp, 64, 64, off, small));
}

}  // namespace

int main(int argc, char **argv) {
  // The defaults are under test: settings from the caller's environment would change them.
  unsetenv("LM_DATATYPE_MIN_BYTES");
  unsetenv("LM_RESHARD_DATATYPES");
  MPI_Init(&argc, &argv);
  test_size_floor();
  test_receive_floor();
  test_self_roundtrip();
  int rc = unit_check_report("unit_transport_mpi");
  MPI_Finalize();
  return rc;
}
