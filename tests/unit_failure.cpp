// SPDX-License-Identifier: BSD-3-Clause
// unit_failure: abort notices carry their communicator's epoch (transport/failure.hpp), on a
// singleton MPI process. A notice of another epoch is what a failed transfer leaves queued under
// a context id that a later communicator reuses (MPICH does at once): it is received and dropped,
// never taken for the new communicator's failure; so is an unreadable one. A notice of this
// epoch is LM_ERR_REMOTE carrying the sender's status and message. Communicators released as
// tainted (common/mpi.hpp, comm_release) are kept until MPI_Finalize, so that no new one gets
// their context id, and the caller's handle is MPI_COMM_NULL either way.
// lm-unit-starts-mpi (MPI_Init on a singleton: LSan needs full stacks, tests/run-tests.sh)
#include <mpi.h>

#include <cstring>
#include <string>

#include "common/mpi.hpp"
#include "transport/failure.hpp"
#include "unit_check.hpp"

namespace {

// Sends `payload` to this rank as a notice would travel (tag kAbortTag on c).
void post_notice(MPI_Comm c, const std::string &payload) {
  static char buf[8][256];  // alive until received
  static int next = 0;
  char *b = buf[next++ % 8];
  std::memset(b, 0, 256);
  std::memcpy(b, payload.data(), payload.size() < 255 ? payload.size() : 255);
  MPI_Request q;
  MPI_Isend(b, 256, MPI_CHAR, 0, lm::kAbortTag, c, &q);
  MPI_Request_free(&q);
}

bool queued(MPI_Comm c) {
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, lm::kAbortTag, c, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

void test_epochs() {
  g_test = "epochs";
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_SELF, &c);
  CHECK(lm::comm_epoch(c) == 0);  // none attached
  lm::comm_set_epoch(c, 7);
  CHECK(lm::comm_epoch(c) == 7);
  lm::AbortNotices notices(c);
  lm::Error e(LM_SUCCESS, "");
  CHECK(!notices.received(&e));  // nothing queued

  // A stale notice (an earlier communicator's epoch) and an unreadable one: dropped.
  post_notice(c, lm::abort_payload(6, LM_ERR_MPI, "MPI_Irecv failed on rank 0: stale"));
  post_notice(c, "not a notice");
  CHECK(!notices.received(&e));
  CHECK(!queued(c));  // both were received, not left to match later

  // This epoch's notice, behind a stale one: LM_ERR_REMOTE naming the sender and its failure.
  post_notice(c, lm::abort_payload(8, LM_ERR_TIMEOUT, "stale too"));
  post_notice(c, lm::abort_payload(7, LM_ERR_MPI, "reshard: MPI_Isend failed on rank 0: x|y"));
  CHECK(notices.received(&e));
  CHECK(e.status() == LM_ERR_REMOTE);
  CHECK(e.cause() == LM_ERR_MPI);
  CHECK(e.message().find("rank 0 failed during the transfer: LM_ERR_MPI: reshard: MPI_Isend "
                         "failed on rank 0: x|y") != std::string::npos);
  CHECK(!queued(c));
  lm::comm_release(&c, true);
  CHECK(c == MPI_COMM_NULL);
}

void test_release() {
  g_test = "release";
  // A tainted communicator stays allocated: a new one over the same process gets another
  // context; an untainted one is freed. (Context ids are not visible; the handle is.)
  MPI_Comm a, b;
  MPI_Comm_dup(MPI_COMM_SELF, &a);
  MPI_Comm_dup(MPI_COMM_SELF, &b);
  lm::comm_set_epoch(a, 1);
  lm::comm_release(&a, true);
  lm::comm_release(&b, false);
  CHECK(a == MPI_COMM_NULL && b == MPI_COMM_NULL);
  MPI_Comm none = MPI_COMM_NULL;
  lm::comm_release(&none, true);  // NULL-safe
  CHECK(none == MPI_COMM_NULL);
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  test_epochs();
  test_release();
  int rc = unit_check_report("unit_failure");
  MPI_Finalize();  // frees the kept communicators (MPI_COMM_SELF's attribute)
  return rc;
}
