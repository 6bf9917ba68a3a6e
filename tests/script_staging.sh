#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The reshard executor moves a non-contiguous box either through its own staging (pack/unpack:
# boxes below LM_DATATYPE_MIN_BYTES, default 32 KiB, and those a subarray datatype cannot
# describe) or in place as an MPI subarray datatype. The tests' tensors are small, so the default
# runs stage nearly every box: run the randomized and directed reshard suites once more with
# datatypes at every size (LM_DATATYPE_MIN_BYTES=0), and once with datatypes off.
# Then the staging bound: with a tiny LM_STAGING_BYTES every reduction and exchange of the tests
# is pipelined in many chunks; results must stay exact (randomized suite) and the peak extra
# memory within the bound (test_reshard_memory), at np 1-4, with and without datatypes; and
# transposes (test_transpose) at np 3. Padded targets that a reduce-scatter or a Partial fill
# writes are written row by row in place here at every row length (LM_PAD_IN_PLACE_MIN_RUN=1;
# the default runs of make check take the compact copy for the tests' short rows).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
# Under the sanitizers (several times slower) and MPICH (whose waits spin when ranks outnumber
# cores) the same modes run on fewer random cases and ranks (np 3, and 2-3 for the staging bound;
# the plain build runs them all at np 1-4).
big=3000 small=1500 nps_dt="3 4" nps_staging="1 2 3 4" np_big=4
if lm_lib_links 'libasan|libmpich'; then big=800 small=400 nps_dt=3 nps_staging="2 3" np_big=3; fi
export LM_RESHARD_CASES=${LM_RESHARD_CASES:-$big}
export LM_PAD_IN_PLACE_MIN_RUN=1
# dt=1: subarray datatypes for every non-contiguous box; dt=0: none (every such box staged).
dt_env() { if [ "$1" = 1 ]; then echo LM_DATATYPE_MIN_BYTES=0; else echo LM_RESHARD_DATATYPES=0; fi; }
for np in $nps_dt; do
  for dt in 1 0; do
    env "$(dt_env $dt)" bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
    env "$(dt_env $dt)" bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_directed"
  done
done
echo "datatype and staging paths: OK"
for np in $nps_staging; do
  for dt in 1 0; do
    env "$(dt_env $dt)" LM_STAGING_BYTES=512 LM_RESHARD_CASES=$small \
      bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
    env "$(dt_env $dt)" LM_STAGING_BYTES=512 bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_memory"
  done
done
LM_STAGING_BYTES=4096 bash tools/lm-mpirun $np_big "$BUILD/tests/test_reshard_directed"
# A transposition fused into its reshard unpacks every receive through permuted strides: in
# pipelined chunks too.
LM_STAGING_BYTES=512 LM_TRANSPOSE_CASES=60 bash tools/lm-mpirun 3 "$BUILD/tests/test_transpose"
LM_STAGING_BYTES=4096 LM_PLAN_KEEP_BUFFERS=1 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_memory"
echo "staging bound (LM_STAGING_BYTES=512, 4096): OK"
