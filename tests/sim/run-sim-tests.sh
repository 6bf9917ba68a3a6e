#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs the simulator's self-tests from the build tree ($BUILD/sim); `make sim-check` calls it.
#   test_cuda, test_kernels: every case in its own process (sim_test.h).
#   test_nccl SCENARIO under tools/lm-mpirun at several np; the planted bugs must be CAUGHT:
#     with CUDASIM_NCCL_ON_ERROR=error the ranks check the error they got; with the default
#     (abort) the job must die within a bounded time and its output must name the problem.
# Logs: $BUILD/sim/logs/<name>.log. Last line "<N> passed, <N> failed"; exit 1 on any failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
OUT=$BUILD/sim
LOGS=$OUT/logs
MPIRUN=$ROOT/tools/lm-mpirun
mkdir -p "$LOGS"
passed=0
failed=0

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
verdict() {  # verdict OK LABEL T0 LOG
  if [ "$1" = 1 ]; then
    echo "PASS $2 ($(secs "$3")s)"; passed=$((passed + 1))
  else
    echo "FAIL $2 ($(secs "$3")s): see $4"; tail -n 30 "$4" | sed 's/^/    /'; failed=$((failed + 1))
  fi
}

# A single-process program: its own PASS/FAIL lines count.
run_cases() {
  local prog=$1 log="$LOGS/$1.log" t0
  t0=$(now)
  timeout -k 5 600 "$OUT/$prog" >"$log" 2>&1
  local rc=$?
  grep -E '^(PASS|FAIL) ' "$log" | sed "s/^/$prog: /"
  local p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $prog: exit status $rc ($(secs "$t0")s)"; failed=$((failed + 1))
  fi
}

# nccl NP SCENARIO [ENV=VALUE...]: must pass.
nccl() {
  local np=$1 sc=$2; shift 2
  local label="test_nccl $sc np=$np${*:+ $*}" log="$LOGS/nccl.$sc.np$np.log" t0 ok=0
  t0=$(now)
  env "$@" timeout -k 5 120 bash "$MPIRUN" "$np" "$OUT/test_nccl" "$sc" >"$log" 2>&1 && ok=1
  verdict $ok "$label" "$t0" "$log"
}

# nccl_dies NP SCENARIO PATTERN MAXSECS [ENV=VALUE...]: the job must fail (abort) within MAXSECS
# and its output must contain PATTERN.
nccl_dies() {
  local np=$1 sc=$2 pat=$3 max=$4; shift 4
  local label="test_nccl $sc np=$np dies (abort)${*:+ $*}" log="$LOGS/nccl.$sc.np$np.abort.log" t0 ok=0
  t0=$(now)
  if ! env "$@" timeout -k 5 120 bash "$MPIRUN" "$np" "$OUT/test_nccl" "$sc" >"$log" 2>&1; then
    grep -q "$pat" "$log" && awk -v t="$(secs "$t0")" -v m="$max" 'BEGIN { exit !(t < m) }' && ok=1
  fi
  verdict $ok "$label" "$t0" "$log"
}

run_cases test_cuda
run_cases test_kernels
for np in 1 2 4; do
  for sc in p2p collectives nonblocking planted_missing_poll; do nccl "$np" "$sc"; done
done
ERR="CUDASIM_NCCL_ON_ERROR=error CUDASIM_NCCL_TIMEOUT=2"
for np in 2 4; do
  # shellcheck disable=SC2086
  nccl "$np" planted_wrong_group_order $ERR
done
nccl 2 size_mismatch CUDASIM_NCCL_ON_ERROR=error
nccl 3 duplicate_gpu CUDASIM_TOPOLOGY=shared
# shellcheck disable=SC2086
nccl 3 abort_leaves_peer_waiting $ERR
# shellcheck disable=SC2086
nccl 2 planted_abort_in_flight $ERR CUDASIM_NCCL_LATENCY_US=300000
# The call log (CUDASIM_NCCL_LOG): collectives at np 2 write one line per call and rank, with
# this rank's bytes: 2 ranks x (all-gather, reduce-scatter, 2 all-reduces, broadcast, all-to-all).
nccl_log=$LOGS/nccl.calls.log
rm -f "$nccl_log"
t0=$(now) ok=0
if CUDASIM_NCCL_LOG=$nccl_log timeout -k 5 120 bash "$MPIRUN" 2 "$OUT/test_nccl" collectives \
     >"$LOGS/nccl.log.np2.log" 2>&1 && [ "$(grep -c '^cudasim-nccl ' "$nccl_log")" = 12 ] &&
   [ "$(grep -c 'call=ncclAlltoAll count=1000 type=float32 op=-1 peer=-1 bytes=8000$' "$nccl_log")" = 2 ] &&
   [ "$(grep -c 'call=ncclAllReduce' "$nccl_log")" = 4 ]; then ok=1; fi
verdict $ok "test_nccl collectives np=2 CUDASIM_NCCL_LOG (12 lines)" "$t0" "$nccl_log"
nccl_dies 2 planted_wrong_group_order "NCCL watchdog" 30 CUDASIM_NCCL_TIMEOUT=2
nccl_dies 2 size_mismatch "size mismatch" 30

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
