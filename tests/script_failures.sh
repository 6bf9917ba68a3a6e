#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The failure-path suites of issue 19 with the node-local machinery off, so that every agreement
# and every message goes through MPI (make check runs them plainly, where agreements on one node
# go through the shared-memory board):
#   test_timeout_late  a late rank fails too; MPI_Finalize survives the abandoned rounds
#   test_timeout_next  after a transfer deadline the next call fails at once
#   test_broken_plan   persistent plans after a transport failure: every rank fails, none hangs
#   test_threads       meshes used from several threads (MPI_THREAD_MULTIPLE)
#   test_buffers       untrusted strides and overlapping borrows; mismatches at LM_CHECK=0
#   test_after_finalize calls after MPI_Finalize return errors
#   test_timeout_one_rank a deadline on one rank only: meshes still created, the highest taken
#   test_plan_info_alone LM_PLAN_INFO_ALL_RANKS on one rank: a mismatch, or its own deadline
# with LM_AGREE_BOARD=0 (the timeout suites) and LM_NODE_LOCAL=0, at np 2 and 3.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
runs=0
run() {  # env np prog
  echo "== $3 $1 np $2"
  local out
  if ! out=$(env "$1" timeout -k 5 120 bash tools/lm-mpirun "$2" "$BUILD/tests/$3" 2>&1); then
    echo "$out" | tail -n 40
    echo "FAILED: $3 $1 np $2"
    exit 1
  fi
  runs=$((runs + 1))
}
for np in 2 3; do
  for prog in test_timeout_late test_timeout_next test_timeout_one_rank test_plan_info_alone; do
    run LM_AGREE_BOARD=0 "$np" "$prog"
    run LM_NODE_LOCAL=0 "$np" "$prog"
  done
  for prog in test_broken_plan test_threads test_buffers test_after_finalize; do
    run LM_NODE_LOCAL=0 "$np" "$prog"
  done
done
echo "failure paths with the node-local machinery off: $runs runs OK"
