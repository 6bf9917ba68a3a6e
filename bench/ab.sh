#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Interleaved before/after runs of one benchmark binary against two builds of the library (the
# binary resolves liblocalmap through RUNPATH, which LD_LIBRARY_PATH overrides): round by round,
# the "before" library then the "after" one, at each np, so that load on a shared machine falls on
# both alike. Writes JSON lines tagged {"lib": "before"|"after", "round": N} to OUT, then prints
# the median of each case (bench/ab_summary.py).
# Usage: BEFORE=dir/lib AFTER=dir/lib [ROUNDS=3] [NPS="2 4"] [OUT=file] bench/ab.sh PROGRAM [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
: "${BEFORE:?BEFORE=<lib dir of the library before>}" "${AFTER:?AFTER=<lib dir of the library after>}"
out=${OUT:-$here/results/ab_$(date -u +%Y-%m-%d).jsonl}
: > "$out"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for np in ${NPS:-2 4}; do
    for lib in before after; do
      dir=$BEFORE
      [ $lib = after ] && dir=$AFTER
      echo "== round $round np $np $lib" >&2
      LD_LIBRARY_PATH=$dir "$top/tools/lm-mpirun" "$np" "$@" |
        sed -n "s/^{\\(.*\\)}\$/{\"lib\": \"$lib\", \"round\": $round, \\1}/p" >> "$out"
    done
  done
done
echo "wrote $out" >&2
python3 "$here/ab_summary.py" "$out"
