#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The settings table (src/common/settings.hpp):
#  - every must-agree variable set differently on one rank, at np 2 and 3: lm_mesh_create returns
#    LM_ERR_MISMATCH naming it on every rank, promptly (tests/test_settings_agree.c; a hang is
#    killed by the timeout and fails);
#  - values that parse to the same setting agree (64MiB and the default 64M; on and 1);
#  - a value that cannot be read gives one warning naming the variable and the default, and the
#    default applies.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
prog=$BUILD/tests/test_settings_agree
runs=0
run_case() {  # np case
  local out
  if ! out=$(LM_TEST_SETTING=$2 timeout -k 5 60 bash tools/lm-mpirun "$1" "$prog" 2>&1); then
    echo "$out" | tail -n 30
    echo "FAILED: np $1 LM_TEST_SETTING=$2"
    exit 1
  fi
  runs=$((runs + 1))
}
for np in 2 3; do
  last=$((np - 1))
  for c in LM_NODE_LOCAL=0 LM_NODE_LOCAL_MIN_BYTES=1 LM_AGREE_BOARD=off \
           LM_BOARD_EXCHANGE_BYTES=0 LM_STAGING_BYTES=512 LM_DATATYPE_MIN_BYTES=0 \
           LM_RESHARD_DATATYPES=false LM_TRANSPORT=mpi LM_TEST_NODES=2 LM_NCCL_COLLECTIVES=0 \
           LM_MPI_COLLECTIVES=1; do
    run_case "$np" "$c@$last:mismatch"
  done
  run_case "$np" "LM_STAGING_BYTES=64MiB@$last:ok"
  run_case "$np" "LM_NODE_LOCAL=on@0:ok"
done
# A refused value: a warning naming the variable and the default (rank 0's output is what the test
# harness shows); the run works.
out=$(LM_STAGING_BYTES=lots timeout -k 5 60 bash tools/lm-mpirun 2 "$prog" 2>&1) ||
  { echo "$out" | tail -n 30; echo "FAILED: LM_STAGING_BYTES=lots"; exit 1; }
n=$(echo "$out" | grep -c "localmap: LM_STAGING_BYTES=lots is not a byte count .*; using the default 64M" || true)
[ "$n" = 1 ] || { echo "$out" | tail -n 30; echo "FAILED: expected one warning from rank 0, saw $n"; exit 1; }
runs=$((runs + 1))
echo "settings: $runs runs OK"
