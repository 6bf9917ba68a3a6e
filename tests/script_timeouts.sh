#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# LM_TIMEOUT on both agreement routes (issue 19 item 1): tests/test_timeout_late.c (a late rank
# fails too; MPI_Finalize survives the abandoned rounds) and test_timeout_next.c (after a transfer
# deadline the next call fails at once) with
# agreements over MPI (LM_AGREE_BOARD=0, and LM_NODE_LOCAL=0) as well as over the board (the
# plain run of make check), at np 2 and 3.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
runs=0
for prog in test_timeout_late test_timeout_next; do
  for env in "LM_AGREE_BOARD=0" "LM_NODE_LOCAL=0"; do
    for np in 2 3; do
      echo "== $prog $env np $np"
      if ! out=$(env "$env" timeout -k 5 120 bash tools/lm-mpirun "$np" "$BUILD/tests/$prog" 2>&1); then
        echo "$out" | tail -n 40
        echo "FAILED: $prog $env np $np"
        exit 1
      fi
      runs=$((runs + 1))
    done
  done
done
echo "timeouts over MPI agreements: $runs runs OK"
