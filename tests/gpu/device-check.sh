#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The one script a GPU machine runs for localmap's device path (issue 9). It
#   1. builds the library, tests and benchmarks with CUDA=1 into build-device/ (-Werror);
#   2. runs unit_device_ops (kernel arithmetic vs host) and `make check-gpu NPS="1 2 4"`: np 2 and 4
#      share the one GPU, so the mesh must choose the host-staged transport (shared GPU detected);
#   3. runs `make check-gpu NPS="2 4" NCCL_SPLIT_HOSTS=1`: each rank its own NCCL_HOSTID and
#      NCCL_SOCKET_IFNAME=lo, so NCCL sees separate hosts and several ranks run real NCCL on one GPU;
#   4. runs bench_device at np 1 and at np 2 in split-hosts mode (NCCL baseline: whether NCCL
#      accepts two ranks on one GPU with distinct NCCL_HOSTIDs is recorded as a result line);
# writing every log and a JSON-lines summary (results.jsonl) into OUTDIR. Every phase has its own
# timeout, cut to what is left of a total budget (LM_DEVICE_CHECK_BUDGET seconds, default 450), so
# that even a run whose phases all hang ends under 8 minutes; a phase with under 15 s left is
# skipped (recorded as rc 124). The exit status is nonzero when the build or any test failed.
# Usage: tests/gpu/device-check.sh OUTDIR      (from anywhere; works in the repository root)
set -u
OUT=${1:?usage: tests/gpu/device-check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-device}
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
BUDGET=${LM_DEVICE_CHECK_BUDGET:-450}
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
status=0

note() { echo "[device-check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
# phase NAME TIMEOUT LOG COMMAND...: runs, records {"phase","rc","seconds",counts} in results.jsonl.
phase() {
  local name=$1 limit=$2 log=$3 t rc line p f s left
  shift 3
  t=$(date +%s)
  left=$(( BUDGET - (t - T0) ))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "skipped: the budget of ${BUDGET}s is spent" > "$OUT/$log"
    rc=124
  else
    timeout -k 5 "$limit" "$@" > "$OUT/$log" 2>&1
    rc=$?
  fi
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$log" | tail -n 1)
  p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
  f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
  s=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
  printf '{"phase": "%s", "rc": %d, "seconds": %d, "passed": %s, "failed": %s, "skipped": %s, "log": "%s"}\n' \
    "$name" "$rc" $(( $(date +%s) - t )) "${p:-null}" "${f:-null}" "${s:-null}" "$log" >> "$RESULTS"
  note "$name: rc=$rc ${line:-} (log: $log)"
  return $rc
}

note "start: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $JOBS cores"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/gpu.txt" 2>&1
note "GPU: $(head -n 1 "$OUT/gpu.txt")"
git log -1 --oneline > "$OUT/commit.txt" 2>/dev/null

if ! sh tools/ensure-deps.sh -q > "$OUT/deps.log" 2>&1; then
  note "missing build dependencies (see deps.log): this machine cannot build localmap"
  printf '{"phase": "deps", "rc": 1}\n' >> "$RESULTS"
  exit 1
fi

# 1. Build (CUDA required).
if ! phase build 300 build.log make -j"$JOBS" CUDA=1 BUILD="$BUILD" gpu-progs; then
  tail -n 40 "$OUT/build.log"
  exit 1
fi

# 2. Kernel arithmetic (CPU) and device tests with the shared-GPU fallback.
phase unit_device_ops 30 unit_device_ops.log "$BUILD/tests/unit_device_ops" || status=1
LM_TEST_TIMEOUT=100 phase check-gpu 150 check-gpu.log \
  make CUDA=1 BUILD="$BUILD" check-gpu NPS="1 2 4" || status=1
cp -r "$BUILD/test-logs" "$OUT/test-logs-fallback" 2>/dev/null

# 3. Several NCCL ranks on one GPU (NCCL_HOSTID per rank).
LM_TEST_TIMEOUT=100 phase check-gpu-split-hosts 150 check-gpu-split.log \
  make CUDA=1 BUILD="$BUILD" check-gpu NPS="2 4" NCCL_SPLIT_HOSTS=1 || status=1
cp -r "$BUILD/test-logs" "$OUT/test-logs-split" 2>/dev/null

# 4. Benchmarks (JSON lines), never fatal.
phase bench-np1 60 bench-np1.log bash tools/lm-mpirun 1 "$BUILD/bench/bench_device" --mib 1,16,256
phase bench-np2-split 90 bench-np2-split.log \
  bash tools/lm-mpirun 2 bash tests/gpu/split-hosts.sh "$BUILD/bench/bench_device" --mib 1,16,128
grep -h '^{' "$OUT/bench-np1.log" "$OUT/bench-np2-split.log" > "$OUT/bench_device.jsonl" 2>/dev/null
if grep -q '"baseline": "nccl' "$OUT/bench-np2-split.log" 2>/dev/null; then works=true
elif grep -q 'no CUDA device' "$OUT/bench-np2-split.log" 2>/dev/null; then works=null  # no GPU here
else works=false; fi
printf '{"phase": "nccl-split-hosts-probe", "nccl_two_ranks_one_gpu_with_hostid": %s}\n' "$works" >> "$RESULTS"
note "NCCL with NCCL_HOSTID per rank on one GPU: $works"

note "done in $(( $(date +%s) - T0 ))s, status $status; results in $RESULTS"
exit $status
