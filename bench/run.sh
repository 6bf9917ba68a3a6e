#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs the benchmarks (never part of `make check`):
#   reshard:   bench_reshard at np 2 and 4, also with the node-local path off and over TCP between
#              two simulated nodes (the MPI-only path)  -> bench/results/reshard.jsonl
#   local_map: bench_local_map at np 1 and 2 -> bench/results/local_map.jsonl
#   small:     bench_small at np 2 and 4 (small calls, breakdown) -> bench/results/small.jsonl
#   padded:    bench_padded at np 2 and 4 (padded targets against compact ones)
#              -> bench/results/padded.jsonl
#   plan:      bench_plan (serial: the planner on 2^20-rank meshes) -> bench/results/plan.jsonl
#   scalapack_dropin: bench_scalapack_dropin at np 2 and 4 (the drop-in's pdgemr2d_/pdtran_
#              against Debian's, 1-64 MiB) -> bench/results/scalapack_dropin.jsonl
#   scalapack: bench_scalapack at np 2 and 4 (against pdgemr2d, and COSTA when built with
#              COSTA_DIR; bench/build-costa.sh) -> bench/results/scalapack.jsonl
#   plot:      bench/plot.py (matplotlib, from PyPI; skipped with a note when missing)
#              -> docs/reshard_time_per_byte.png
# BENCH_NPS overrides the reshard rank counts, BENCH_ARGS replaces the reshard arguments
# (default "--sweep": the 32 KiB .. 128 MiB sweep of the plot; e.g. "--n 2048 --reps 20").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-build}
mkdir -p "$here/results"

# run_at_nps NAME NPS DESCRIPTION PROGRAM: PROGRAM at each np of NPS, its JSON lines collected
# into bench/results/NAME.jsonl (replaced only once every run has succeeded).
run_at_nps() {
  local out="$here/results/$1.jsonl" nps=$2 desc=$3 prog=$4 np
  : > "$out.tmp"
  for np in $nps; do
    echo "== $desc at np $np" >&2
    "$top/tools/lm-mpirun" "$np" "$top/$build/bench/$prog" | tee -a "$out.tmp"
  done
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
}

out="$here/results/reshard.jsonl"
: > "$out.tmp"
for np in ${BENCH_NPS:-2 4}; do
  echo "== reshard benchmark at np $np" >&2
  # shellcheck disable=SC2086
  "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_reshard" ${BENCH_ARGS---sweep} | tee -a "$out.tmp"
done
# The same sweep with the node-local path off (lines with "node_local": false), for the plot.
for np in ${BENCH_NPS:-2 4}; do
  echo "== reshard sweep at np $np with LM_NODE_LOCAL=0" >&2
  LM_NODE_LOCAL=0 "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_reshard" --sweep-only | grep '"sweep:' | tee -a "$out.tmp"
done
# The MPI-only path between nodes: two simulated nodes (LM_TEST_NODES=2, tests/README.md) over
# TCP only (lines with "test_nodes": "2"), and the same with even steps as MPI collectives
# (LM_MPI_COLLECTIVES=auto: "mpi_collectives": "auto"), the A/B behind its default.
for np in ${BENCH_NPS:-2 4}; do
  for coll in 0 auto; do
    echo "== reshard sweep at np $np over TCP, two simulated nodes, LM_MPI_COLLECTIVES=$coll" >&2
    LM_TEST_NODES=2 LM_MPI_COLLECTIVES=$coll LM_MPIRUN_FLAGS="--mca btl tcp,self ${LM_MPIRUN_FLAGS:-}" \
      "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_reshard" --sweep-only | grep '"sweep:' | tee -a "$out.tmp"
  done
done
# The cost of the argument agreement (LM_CHECK=1, the default) on the small cases: the same
# cases with the check off (lines with "lm_check": "0").
for np in ${BENCH_NPS:-2 4}; do
  echo "== small reshards at np $np with LM_CHECK=0" >&2
  LM_CHECK=0 "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_reshard" --small-only | tee -a "$out.tmp"
done
mv "$out.tmp" "$out"
echo "wrote $out" >&2

run_at_nps local_map "1 2" "local_map overhead" bench_local_map

run_at_nps group "${BENCH_NPS:-2 4}" "64 tensors at once (grouped, one plan each, one MPI collective)" bench_group

run_at_nps padded "${BENCH_NPS:-2 4}" "reshards into padded targets against compact ones" bench_padded

run_at_nps estimate "${BENCH_NPS:-2 4}" "the cost of a cost estimate (lm_reshard_estimate)" bench_estimate

run_at_nps small "${BENCH_NPS:-2 4}" "small calls against MPI, with the breakdown of the allocating reshard," bench_small

if [ -x "$top/$build/bench/bench_scalapack" ]; then
  out="$here/results/scalapack.jsonl"
  : > "$out.tmp"
  for np in ${BENCH_NPS:-2 4}; do
    echo "== block-cyclic redistribution against pdgemr2d (and COSTA) at np $np" >&2
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_scalapack" | tee -a "$out.tmp"
    # The same arrays allocated with lm_tensor_alloc (in the node's shared arena: memcpy between
    # the ranks of a node, no kernel copies).
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_scalapack" --arena | tee -a "$out.tmp"
    # Small blocks (1 and 8), 1 MiB: where a piece per block would cost a copy per element.
    for b in 1 8; do
      OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_scalapack" --small --block "$b" | tee -a "$out.tmp"
    done
  done
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
else
  echo "== bench_scalapack not built (no ScaLAPACK: apt-get install libscalapack-openmpi-dev)" >&2
fi

if [ -x "$top/$build/bench/bench_scalapack_dropin" ]; then
  out="$here/results/scalapack_dropin.jsonl"
  : > "$out.tmp"
  for np in ${BENCH_NPS:-2 4}; do
    echo "== liblocalmap_scalapack's pdgemr2d_/pdtran_ against Debian's at np $np (1-64 MiB)" >&2
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$top/tools/lm-mpirun" "$np" "$top/$build/bench/bench_scalapack_dropin" | tee -a "$out.tmp"
  done
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
fi

out="$here/results/plan.jsonl"
echo "== planning one rank's part on 2^20-rank meshes (serial)" >&2
"$top/$build/bench/bench_plan" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2

if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 "$here/plot.py" "$here/results/reshard.jsonl" "$top/docs/reshard_time_per_byte.png"
else
  echo "plot skipped: no matplotlib (pip install matplotlib)" >&2
fi
