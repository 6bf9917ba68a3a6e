#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The reshard executor's staging path (pack/unpack through our own buffers) serves boxes that an
# MPI subarray datatype cannot describe (over 1 GiB, extents past int). Small tests never reach
# it, so run the randomized and directed reshard suites with datatypes turned off.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export LM_RESHARD_DATATYPES=0 LM_RESHARD_CASES=${LM_RESHARD_CASES:-3000}
for np in 3 4; do
  bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
  bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_directed"
done
echo "staging path: OK"
