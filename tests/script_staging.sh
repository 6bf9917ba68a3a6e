#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The reshard executor's staging path (pack/unpack through our own buffers) serves boxes that an
# MPI subarray datatype cannot describe (over 1 GiB, extents past int). Small tests never reach
# it, so run the randomized and directed reshard suites with datatypes turned off.
# Then the staging bound: with a tiny LM_STAGING_BYTES every reduction and exchange of the tests
# is pipelined in many chunks; results must stay exact (randomized suite) and the peak extra
# memory within the bound (test_reshard_memory), at np 1-4, with and without datatypes.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# Under the sanitizers (several times slower) and MPICH (whose waits spin when ranks outnumber
# cores) the same modes run on fewer random cases.
big=3000 small=1500
if ldd "$BUILD/lib/liblocalmap.so" | grep -qE 'libasan|libmpich'; then big=800 small=400; fi
export LM_RESHARD_CASES=${LM_RESHARD_CASES:-$big}
for np in 3 4; do
  LM_RESHARD_DATATYPES=0 bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
  LM_RESHARD_DATATYPES=0 bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_directed"
done
echo "staging path: OK"
for np in 1 2 3 4; do
  for dt in 1 0; do
    LM_STAGING_BYTES=512 LM_RESHARD_DATATYPES=$dt LM_RESHARD_CASES=$small \
      bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
    LM_STAGING_BYTES=512 LM_RESHARD_DATATYPES=$dt bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_memory"
  done
done
LM_STAGING_BYTES=4096 bash tools/lm-mpirun 4 "$BUILD/tests/test_reshard_directed"
LM_STAGING_BYTES=4096 LM_PLAN_KEEP_BUFFERS=1 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_memory"
echo "staging bound (LM_STAGING_BYTES=512, 4096): OK"
