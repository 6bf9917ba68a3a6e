#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fault injection (issue 8): an allocation or a transport call fails on a chosen rank at the Nth
# call (LM_FAULT, docs/DESIGN.md "Failure model"); test_fault checks that every collective call
# then has the same outcome on every rank, that nothing hangs (timeout) and, in sanitizer builds,
# that nothing leaks.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export LM_TEST_CASE_TIMEOUT=${LM_TEST_CASE_TIMEOUT:-60}
runs=0
for np in 2 4; do
  last=$((np - 1))
  for fault in "alloc:rank=1:nth=1" "alloc:rank=1:nth=2" "alloc:rank=$last:nth=3" \
               "alloc:rank=$last:nth=4" "alloc:rank=0:nth=5" "alloc:rank=$last:nth=6" \
               "transport:rank=0:nth=1" "transport:rank=1:nth=2" "transport:rank=$last:nth=3" \
               "transport:rank=1:nth=6"; do
    echo "== np $np LM_FAULT=$fault"
    out=$(LM_FAULT=$fault timeout -k 5 120 bash tools/lm-mpirun "$np" "$BUILD/tests/test_fault") ||
      { echo "$out"; echo "FAILED: np $np LM_FAULT=$fault"; exit 1; }
    line=$(echo "$out" | grep 'first failing call') || { echo "$out"; echo "FAILED: np $np LM_FAULT=$fault: no summary"; exit 1; }
    echo "$line"
    # Every fault above is placed where a call makes it: a run in which it never fired tests nothing.
    case $line in *"first failing call: 0 of"*) echo "FAILED: np $np LM_FAULT=$fault never fired"; exit 1 ;; esac
    runs=$((runs + 1))
  done
done
echo "fault injection: $runs runs OK"
