#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The node-local path of the MPI transport (src/comm/node.hpp, src/transport/node/, src/transport/mpi/): on one node
# a blocking reshard's large messages are copied once, instead of twice through MPI's shared
# memory: with memcpy where a side's buffer is in its owner's shared arena (arena.hpp), else
# through the kernel (process_vm_readv/writev). The suites that check every byte run in every
# mode: every message node-local and every pool buffer in the arena (LM_NODE_LOCAL_MIN_BYTES=1
# LM_NODE_ARENA_MIN_BYTES=1, also pipelined through tiny staging and with datatypes off, where
# boxes are staged; the tests' own borrowed buffers are never in the arena, so both copy kinds
# and both directions meet), every message through the kernel (the arena off), and the path off
# (LM_NODE_LOCAL=0); the agreement suites with the agreement board off (LM_AGREE_BOARD=0), and
# the reshard suites with the board exchange off (LM_BOARD_EXCHANGE_BYTES=0); then on a restricted
# host (kernel copies refused by a seccomp filter: tests/deny_cma) and under RLIMIT_AS.
# Block-cyclic pieces and grouped rounds in every mode, straight between the buffers where kernel
# copies are allowed.
# Then, where strace is installed, that the kernel copies really run, reading
# and writing, that the arena replaces most of them, and that the path really stays off.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
# Under the sanitizers (several times slower) and MPICH (whose waits spin, slow when ranks
# outnumber cores) the same modes run on fewer cases and rank counts: what they add there is
# memory checking of the copies and the other MPI, not coverage of more layouts.
san=0
lm_lib_links 'libasan|libmpich' && san=1
if [ $san = 1 ]; then nps="3"; cases=400; else nps="2 3 4"; cases=1500; fi
export LM_RESHARD_CASES=${LM_RESHARD_CASES:-$cases}
export LM_NODE_LOCAL_MIN_BYTES=1
# Non-contiguous boxes travel as boxes (descriptor geometry, run lists) at every size, as large
# ones do by default; the tests' small ones would otherwise be staged (LM_DATATYPE_MIN_BYTES).
export LM_DATATYPE_MIN_BYTES=0
ARENA="LM_NODE_ARENA_MIN_BYTES=1"   # every pool buffer in the shared arena
KERNEL="LM_NODE_ARENA_BYTES=0"      # no arena: every copy through the kernel
for np in $nps; do
  env $ARENA bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_random"
  env $ARENA bash tools/lm-mpirun "$np" "$BUILD/tests/test_reshard_directed"
done
env $KERNEL LM_PAD_IN_PLACE_MIN_RUN=1 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random"
env $KERNEL bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_directed"
env $ARENA LM_STAGING_BYTES=512 LM_PAD_IN_PLACE_MIN_RUN=1 \
  bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random"
[ $san = 1 ] || env $ARENA LM_RESHARD_CASES=600 bash tools/lm-mpirun 8 "$BUILD/tests/test_reshard_random"
env $ARENA LM_STAGING_BYTES=512 bash tools/lm-mpirun 4 "$BUILD/tests/test_reshard_memory"
env $ARENA LM_RESHARD_DATATYPES=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random"
env $ARENA bash tools/lm-mpirun 3 "$BUILD/tests/test_local_map"
# Block-cyclic pieces: rows of a page or more move straight between the buffers (one kernel copy,
# or memcpy from the sender's arena; test_cyclic's test_wide_rows), shorter ones packed, every
# message node-local; test_rows_in_place counts the kernel's reads (LM_TEST_EXPECT_PIECES).
export LM_CYCLIC_CASES=${LM_CYCLIC_CASES:-$((cases / 3))}
env $ARENA LM_TEST_EXPECT_PIECES=mapped bash tools/lm-mpirun 3 "$BUILD/tests/test_cyclic"
env $KERNEL LM_TEST_EXPECT_PIECES=kernel bash tools/lm-mpirun 4 "$BUILD/tests/test_cyclic"
# Grouped rounds: a peer's message of many entries' boxes moves straight between their buffers
# (one kernel copy, parts_direct), at every run length with LM_NODE_DIRECT_MIN_RUN=1;
# small runs outside the arena copied by the sender into its arena staging and read from there
# with memcpy (8 KiB shards below a 32K arena floor); test_parts_in_place counts the kernel copies
# (LM_TEST_EXPECT_PARTS: kernel, mapped).
env $ARENA LM_NODE_LOCAL=1 LM_NODE_DIRECT_MIN_RUN=1 bash tools/lm-mpirun 3 "$BUILD/tests/test_group"
env $KERNEL LM_NODE_LOCAL=1 LM_TEST_EXPECT_PARTS=kernel bash tools/lm-mpirun 4 "$BUILD/tests/test_group"
env LM_NODE_ARENA_MIN_BYTES=32K LM_NODE_LOCAL=1 LM_NODE_DIRECT_MIN_RUN=1 LM_TEST_EXPECT_PARTS=mapped \
  bash tools/lm-mpirun 4 "$BUILD/tests/test_group"
[ $san = 1 ] || env $KERNEL LM_NODE_LOCAL=1 LM_NODE_DIRECT_MIN_RUN=1 LM_TEST_EXPECT_PARTS=kernel \
  bash tools/lm-mpirun 8 "$BUILD/tests/test_group"
# Held receives: a round's reduce-scatter chunks reduced where their senders keep them (mapped),
# those spanning several of the sender's runs gathered first; every message node-local
# (LM_NODE_LOCAL_MIN_BYTES=1), so that the suite's small chunks take the path too.
for np in 3 4; do
  env $ARENA LM_NODE_LOCAL=1 LM_NODE_DIRECT_MIN_RUN=1 LM_NODE_LOCAL_MIN_BYTES=1 \
    bash tools/lm-mpirun $np "$BUILD/tests/test_group"
done
if [ $san = 0 ]; then  # off: what every other suite's small messages already run
  LM_NODE_LOCAL=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random"
  LM_NODE_LOCAL=0 bash tools/lm-mpirun 4 "$BUILD/tests/test_reshard_directed"
fi
# MPI objects per create/destroy cycle with every message through MPI and boxes as datatypes.
LM_NODE_LOCAL=0 LM_DATATYPE_MIN_BYTES=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_mpi_objects"
# Agreements: through the shared-memory board by default (every rank on this node), through
# MPI_Allreduce with the board off (as on more than one node): the agreement suites both ways.
for np in 3 4; do
  LM_AGREE_BOARD=0 bash tools/lm-mpirun "$np" "$BUILD/tests/test_agree_board"
  LM_AGREE_BOARD=0 bash tools/lm-mpirun "$np" "$BUILD/tests/test_agree"
done
LM_AGREE_BOARD=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_timeout_skip"
LM_AGREE_BOARD=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_timeout_sleep"
LM_NODE_LOCAL=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_agree_board"
# Small plans: through the board by default (the board exchange); the MPI transport with it off.
LM_BOARD_EXCHANGE_BYTES=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_board_exchange"
LM_AGREE_BOARD=0 bash tools/lm-mpirun 4 "$BUILD/tests/test_board_exchange"
LM_BOARD_EXCHANGE_BYTES=0 bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random"
LM_BOARD_EXCHANGE_BYTES=0 bash tools/lm-mpirun 4 "$BUILD/tests/test_reshard_directed"
echo "node-local path: exact in both modes; agreements and small plans with and without the board"

# Restricted hosts: process_vm_readv/writev refused (tests/deny_cma installs a seccomp filter, as
# Yama ptrace_scope 1 or a container's profile refuses them) while mapping peers' arenas works:
# the board (test_agree_board counts no agreement allreduce), the board exchange and memcpy
# through arena windows stay on; bytes that no side can map travel over MPI. With the arena off
# too (LM_NODE_ARENA_BYTES=0) nothing node-local is left, and everything still works.
DENY="$BUILD/tests/deny_cma"
env $ARENA bash tools/lm-mpirun 3 "$DENY" "$BUILD/tests/test_reshard_random"
env $ARENA bash tools/lm-mpirun 2 "$DENY" "$BUILD/tests/test_reshard_directed"
bash tools/lm-mpirun 3 "$DENY" "$BUILD/tests/test_agree_board"
bash tools/lm-mpirun 3 "$DENY" "$BUILD/tests/test_board_exchange"
bash tools/lm-mpirun 4 "$DENY" "$BUILD/tests/test_node_safety"
env $KERNEL bash tools/lm-mpirun 2 "$DENY" "$BUILD/tests/test_reshard_directed"
env $ARENA bash tools/lm-mpirun 3 "$DENY" "$BUILD/tests/test_cyclic"   # no kernel: pieces packed
env $ARENA LM_NODE_LOCAL=1 LM_NODE_DIRECT_MIN_RUN=1 bash tools/lm-mpirun 3 "$DENY" "$BUILD/tests/test_group"  # packed
echo "node-local path: exact with kernel copies refused (mapping only, and neither)"

# Address space: under an RLIMIT_AS of 3 GiB (ulimit -v, as batch schedulers set) the arena and
# peers' windows shrink, one line on stderr says so, and the path stays on (the board in
# test_agree_board; peers' windows in test_node_safety). Not under ASan (its shadow memory alone
# is terabytes of address space).
if ! lm_lib_links libasan; then
  limited() { (ulimit -v $((3 << 20)) && env "$@"); }
  out=$(limited $ARENA bash tools/lm-mpirun 3 "$BUILD/tests/test_reshard_random" 2>&1) ||
    { echo "$out" | tail -n 30; echo "script_node_local: FAILED under RLIMIT_AS"; exit 1; }
  grep -q "localmap: RLIMIT_AS (3.00 GiB, .*): shared arena of at most" <<<"$out" ||
    { echo "$out" | tail -n 30; echo "script_node_local: no note of the smaller arena"; exit 1; }
  limited bash tools/lm-mpirun 3 "$BUILD/tests/test_agree_board"
  limited bash tools/lm-mpirun 4 "$BUILD/tests/test_node_safety"
  echo "node-local path: exact and on under RLIMIT_AS = 3 GiB"
fi

if [ $san = 1 ]; then
  lm_skip "the suites passed in every mode; the strace check of the path runs in the plain OpenMPI build only (ptrace under ASan, MPICH's spinning waits)"
fi
if ! command -v strace >/dev/null; then
  lm_missing_tool "the suites passed in every mode, but the path check needs strace (apt-get install strace)"
fi
calls() {  # "readv writev" calls of one run of test_reshard_directed at np 2
  local log r w
  log=$(mktemp)
  # On one real node (simulated nodes, LM_TEST_NODES, would leave np 2 without node-local peers);
  # Open MPI's own single copy (CMA, where lm-mpirun finds the kernel allows it) would be counted too.
  env -u LM_TEST_NODES OMPI_MCA_btl_vader_single_copy_mechanism=none "$@" strace -f -qq -c -e trace=process_vm_readv,process_vm_writev -o "$log" \
    bash tools/lm-mpirun 2 "$BUILD/tests/test_reshard_directed" >/dev/null 2>&1 || { rm -f "$log"; echo "-1 -1"; return; }
  r=$(awk '$NF == "process_vm_readv" { print $4; exit }' "$log")
  w=$(awk '$NF == "process_vm_writev" { print $4; exit }' "$log")
  rm -f "$log"
  echo "${r:-0} ${w:-0}"
}
# (Without an arena there is no agreement board: small plans would ride the agreement's MPI
# messages rather than take the node-local path, LM_MESSAGE_EXCHANGE_BYTES; here every plan takes it.)
read -r on_r on_w <<< "$(calls $KERNEL LM_MESSAGE_EXCHANGE_BYTES=0)"
read -r ar_r ar_w <<< "$(calls $ARENA)"
read -r off_r off_w <<< "$(calls LM_NODE_LOCAL=0)"
echo "process_vm_readv/writev calls: $on_r/$on_w through the kernel only, $ar_r/$ar_w with every pool buffer in the arena, $off_r/$off_w with LM_NODE_LOCAL=0"
# Both directions run: receivers read (the sender's side has no more runs), senders write (theirs has more).
[ "$on_r" -gt 100 ] 2>/dev/null && [ "$on_w" -gt 10 ] 2>/dev/null ||
  { echo "script_node_local: the node-local path did not run both ways"; exit 1; }
# With the arena, the copies between library buffers are memcpys: at most half remain kernel copies.
[ "$ar_r" -ge 0 ] 2>/dev/null && [ $(( 2 * (ar_r + ar_w) )) -le $(( on_r + on_w )) ] ||
  { echo "script_node_local: the shared arena did not replace the kernel copies"; exit 1; }
[ "$off_r" = 0 ] && [ "$off_w" = 0 ] || { echo "script_node_local: LM_NODE_LOCAL=0 did not turn the path off"; exit 1; }
echo "script_node_local: OK"
