// SPDX-License-Identifier: BSD-3-Clause
#include "common/mpi.hpp"

#include <atomic>
#include <mutex>
#include <vector>

#include "common/error.hpp"

namespace lm {

void mpi_check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(LM_ERR_MPI, "%s failed on rank %d: %s", what, world_rank_or_minus1(), msg);
}

bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void require_mpi(const char *what) {
  if (!mpi_alive())
    fail(LM_ERR_INVALID_USAGE, "%s: MPI is not initialised or was already finalized", what);
}

namespace {
std::mutex g_kept_mutex;
std::vector<MPI_Comm> *g_kept = nullptr;  // tainted communicators, freed at MPI_Finalize
int g_kept_keyval = MPI_KEYVAL_INVALID;
std::atomic<int> g_epoch_keyval{MPI_KEYVAL_INVALID};

int free_kept(MPI_Comm, int, void *, void *) {
  std::lock_guard<std::mutex> lk(g_kept_mutex);
  if (g_kept)
    for (MPI_Comm &c : *g_kept) MPI_Comm_free(&c);
  delete g_kept;
  g_kept = nullptr;
  return MPI_SUCCESS;
}

int free_epoch(MPI_Comm, int, void *v, void *) {
  delete static_cast<uint64_t *>(v);
  return MPI_SUCCESS;
}
}  // namespace

void comm_release(MPI_Comm *c, bool tainted) {
  if (*c == MPI_COMM_NULL || !mpi_alive()) return;
  if (!tainted) {
    MPI_Comm_free(c);
    return;
  }
  std::lock_guard<std::mutex> lk(g_kept_mutex);
  if (!g_kept) {
    if (g_kept_keyval == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_kept, &g_kept_keyval, nullptr) !=
            MPI_SUCCESS) {
      *c = MPI_COMM_NULL;  // no hook at MPI_Finalize: kept for the life of the process
      return;
    }
    g_kept = new std::vector<MPI_Comm>();
    MPI_Comm_set_attr(MPI_COMM_SELF, g_kept_keyval, nullptr);
  }
  g_kept->push_back(*c);
  *c = MPI_COMM_NULL;
}

void comm_set_epoch(MPI_Comm c, uint64_t epoch) {
  static std::once_flag once;  // communicators may be made from several threads
  std::call_once(once, [] {
    int k = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_epoch, &k, nullptr) == MPI_SUCCESS)
      g_epoch_keyval.store(k);
  });
  const int k = g_epoch_keyval.load();
  if (k == MPI_KEYVAL_INVALID) return;
  auto *v = new uint64_t(epoch);
  if (MPI_Comm_set_attr(c, k, v) != MPI_SUCCESS) delete v;
}

uint64_t comm_epoch(MPI_Comm c) {
  const int k = g_epoch_keyval.load();
  void *v = nullptr;
  int flag = 0;
  if (k == MPI_KEYVAL_INVALID || MPI_Comm_get_attr(c, k, &v, &flag) != MPI_SUCCESS || !flag)
    return 0;
  return *static_cast<uint64_t *>(v);
}

}  // namespace lm
