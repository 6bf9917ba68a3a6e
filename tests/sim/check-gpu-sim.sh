#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu (and a bench_device run) on the simulated CUDA runtime and NCCL of a CUDA=sim build, in
# every topology; `make check-gpu-sim` and `make check CUDA=sim` call it. Each configuration runs
# `tests/run-tests.sh 'test_gpu_*'` at NPS (default "1 2 4"):
#   per-rank  CUDASIM_TOPOLOGY=per-rank: every rank its own GPU (as with CUDA_VISIBLE_DEVICES per
#             rank): the NCCL path;
#   shared:1  one GPU for all ranks: "Duplicate GPU" for NCCL, localmap's host-staged fallback;
#   shared:4  a node of 4 GPUs (device = local rank % 4): NCCL up to np 4; the tests that need
#             several devices per process must run here (test_gpu_reshard other_device_current);
#   staging   per-rank with LM_STAGING_BYTES=512: steps a host transport would pipeline through
#             bounded staging (NCCL must still get each step as one group); the programs on
#             NCCL only (test_gpu_api_staged's 64 MiB through 512-byte pieces would take minutes);
#   no-colls  per-rank with LM_NCCL_COLLECTIVES=0: every step as grouped ncclSend/ncclRecv (the
#             path uneven steps take), test_gpu_collectives and test_gpu_reshard;
# then bench_device at np 2 in per-rank and shared:1 (--mib 1 --reps 3). LM_EXPECT_GPU=1: a
# device test may not skip, so any SKIP fails the run.
# Environment: BUILD (build-sim), SIM_CONFIGS (default "per-rank shared:1 shared:4 staging
# no-colls"),
# NPS, LM_SIM_BENCH=0 (no bench run). Last line "<N> passed, <N> failed, <N> skipped".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build-sim}
CONFIGS=${SIM_CONFIGS:-per-rank shared:1 shared:4 staging no-colls}
export LM_EXPECT_GPU=1 LM_TEST_GPU_ONLY=1 NPS=${NPS:-1 2 4} BUILD
passed=0 failed=0 skipped=0 failures=()

# run LABEL ENV... : one tests/run-tests.sh pass over $only (default all of tests/gpu) with ENV,
# totals added.
only=
run() {
  local label=$1 log line p f s; shift
  log=$BUILD/test-logs/sim-$label.log
  mkdir -p "$BUILD/test-logs"
  echo "== tests/gpu on cudasim: $label ($*)"
  # shellcheck disable=SC2086
  env "$@" bash tests/run-tests.sh ${only:-'test_gpu_*'} 2>&1 | tee "$log" | grep -E '^(PASS|FAIL|SKIP|    \|)'
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -n 1)
  read -r p f s <<<"$(echo "$line" | sed 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 \2 \3/')"
  if [ -z "$line" ]; then p=0 f=1 s=0; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  [ "$f" = 0 ] && [ "$s" = 0 ] || failures+=("$label: $line")
}

# ran LABEL PROGRAM TEXT: a test that needs several devices per process says so and returns
# elsewhere (test_gpu_reshard's other_device_current); where there are several it must have run:
# its line in every np's log of PROGRAM.
ran() {
  local np log
  for np in $NPS; do
    log=$BUILD/test-logs/$2.np$np.log
    [ -f "$log" ] || continue
    grep -q "$3" "$log" && continue
    echo "FAIL $2 np=$np ($1): '$3' did not run"
    failed=$((failed + 1)); failures+=("$1: $2 np=$np did not run '$3'")
  done
}

for cfg in $CONFIGS; do
  case $cfg in
    per-rank) run per-rank CUDASIM_TOPOLOGY=per-rank CUDASIM_DEVICES=1 ;;
    shared:*) run "$cfg" CUDASIM_TOPOLOGY=shared CUDASIM_DEVICES="${cfg#shared:}"
              [ "${cfg#shared:}" -lt 2 ] ||
                ran "$cfg" test_gpu_reshard "other_device_current: device [0-9]* current" ;;
    staging) only="test_gpu_api test_gpu_nccl test_gpu_nccl_fault test_gpu_reshard"
             run staging CUDASIM_TOPOLOGY=per-rank CUDASIM_DEVICES=1 LM_STAGING_BYTES=512
             only="" ;;
    no-colls) only="test_gpu_collectives test_gpu_reshard"
              run no-colls CUDASIM_TOPOLOGY=per-rank CUDASIM_DEVICES=1 LM_NCCL_COLLECTIVES=0
              only="" ;;
    *) echo "check-gpu-sim: unknown configuration '$cfg'"; failed=$((failed + 1)); failures+=("$cfg") ;;
  esac
done

# bench_device: runs to the end (its NCCL baseline fails with "Duplicate GPU" in shared:1, as on
# one real GPU, and localmap stays host-staged there).
if [ "${LM_SIM_BENCH:-1}" != 0 ]; then
  for topo in per-rank shared; do
    log=$BUILD/test-logs/sim-bench-$topo.log
    if CUDASIM_TOPOLOGY=$topo timeout -k 5 300 bash tools/lm-mpirun 2 "$BUILD/bench/bench_device" \
         --mib 1 --reps 3 >"$log" 2>&1 && [ "$(grep -c '^{' "$log")" -ge 4 ]; then
      echo "PASS bench_device np=2 $topo ($(grep -c '^{' "$log") cases; transport $(grep -o '"transport": "[a-z_]*"' "$log" | head -n 1 | cut -d'"' -f4))"
      passed=$((passed + 1))
    else
      echo "FAIL bench_device np=2 $topo (log: $log)"; tail -n 20 "$log" | sed 's/^/    | /'
      failed=$((failed + 1)); failures+=("bench_device $topo")
    fi
  done
fi

if [ ${#failures[@]} -gt 0 ]; then
  echo "== check-gpu-sim: failed or skipped (a device test may not skip on the simulator):"
  printf '   %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
