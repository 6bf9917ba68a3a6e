#!/usr/bin/env bash
# Runs the reshard benchmark at np 2 and 4 and writes bench/results/reshard.jsonl.
# BENCH_NPS overrides the rank counts, BENCH_ARGS adds arguments (e.g. "--n 2048 --reps 20").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-build}
out="$here/results/reshard.jsonl"
mkdir -p "$here/results"
: > "$out.tmp"
for np in ${BENCH_NPS:-2 4}; do
  echo "== reshard benchmark at np $np" >&2
  # shellcheck disable=SC2086
  "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_reshard" ${BENCH_ARGS:-} | tee -a "$out.tmp"
done
mv "$out.tmp" "$out"
echo "wrote $out" >&2
