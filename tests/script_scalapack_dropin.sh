#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ScaLAPACK's own PBLAS level-3 testers judge liblocalmap_scalapack: Debian's spb3tst, dpb3tst,
# cpb3tst and zpb3tst (scalapack-mpi-test) with their data files P?BLAS3TST.dat as shipped
# (scalapack-test-common; copied, never changed) run at np 4 with
# LD_PRELOAD=liblocalmap_scalapack.so. Every test of every tester must pass (the summary's
# PASSED = TOTAL, FAILED 0, "End of Tests."), and the drop-in's log (LM_SCALAPACK_LOG) must
# show localmap serving the testers' p?geadd_ and p?tradd_ calls: every computational call, none
# falling back (only the error-exit tests' bad arguments go to the reference, for ScaLAPACK's
# own error codes). Skips (lm_missing_tool) without the testers; the MPICH and sanitizer builds
# skip (Debian's testers are linked with OpenMPI; LD_PRELOAD under ASan needs the runtime first).
# First the example driver examples/scalapack/redistribute.c, a plain ScaLAPACK program, at np 2
# and 4 with ScaLAPACK's pdgemr2d_ and with the drop-in preloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
[ "${LM_MPI:-}" != mpich ] || lm_skip "MPICH build: Debian's PBLAS testers are the OpenMPI ones"
deps=$(ldd "$BUILD/lib/liblocalmap.so")
[[ $deps != *libasan* ]] || lm_skip "sanitizer build: the testers run in the plain build"
testers=${LM_PBLAS_TESTERS:-/usr/lib/x86_64-linux-gnu/scalapack/openmpi-tests/PBLAS}
data=${LM_PBLAS_DATA:-/usr/share/scalapack/PBLAS}
[ -x "$testers/dpb3tst" ] && [ -f "$data/PDBLAS3TST.dat" ] ||
  lm_missing_tool "no PBLAS testers (apt-get install scalapack-mpi-test scalapack-test-common)"
lib=$PWD/$BUILD/lib/liblocalmap_scalapack.so
[ -f "$lib" ] || { echo "script_scalapack_dropin: no $lib (make lib)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The example driver (examples/scalapack/redistribute.c), a plain ScaLAPACK program calling
# pdgemr2d_, unchanged: ScaLAPACK's run and the drop-in's (preloaded) must both be right, and the
# log must show localmap serving the call on every process.
if pkg-config --exists scalapack-openmpi 2>/dev/null; then
  # shellcheck disable=SC2046
  mpicc -O2 -Wall -Wextra -Werror examples/scalapack/redistribute.c $(pkg-config --libs scalapack-openmpi) \
    -o "$work/redistribute"
  for np in 2 4; do
    res=$(bash tools/lm-mpirun "$np" "$work/redistribute")
    [[ $res == *"redistribute: OK"* ]] || { echo "$res"; echo "redistribute failed with ScaLAPACK at np $np"; exit 1; }
    res=$(LM_SCALAPACK_LOG=1 LD_PRELOAD="$lib" bash tools/lm-mpirun "$np" "$work/redistribute" 2>&1)
    [[ $res == *"redistribute: OK"* ]] || { echo "$res"; echo "redistribute failed with the drop-in at np $np"; exit 1; }
    served=$(grep -c "pdgemr2d_ localmap" <<<"$res" || true)
    [ "$served" = "$np" ] || { echo "$res"; echo "the drop-in served $served of $np processes' calls"; exit 1; }
    echo "np $np: examples/scalapack/redistribute OK with ScaLAPACK and with the drop-in preloaded (localmap on $served processes)"
  done
else
  lm_defer_skip "examples/scalapack/redistribute: no pkg-config scalapack-openmpi (apt-get install libscalapack-openmpi-dev)"
fi
total=0
for x in s d c z; do
  X=$(tr a-z A-Z <<<"$x")
  mkdir -p "$work/$x"
  cp "$data/P${X}BLAS3TST.dat" "$work/$x/"
  (cd "$work/$x" && LM_SCALAPACK_LOG="$work/$x/log" LD_PRELOAD="$lib" \
    bash "$OLDPWD/tools/lm-mpirun" 4 "$testers/${x}pb3tst" >out.txt 2>&1) ||
    { tail -40 "$work/$x/out.txt"; echo "script_scalapack_dropin: ${x}pb3tst exited nonzero"; exit 1; }
  out=$work/$x/out.txt
  grep -q "End of Tests." "$out" || { tail -40 "$out"; echo "${x}pb3tst did not finish"; exit 1; }
  # Summary rows: "|  PDGEADD  16  16  0  0" (TOTAL PASSED FAILED SKIPPED).
  rows=$(grep -E '^ +\| +P[SDCZ][A-Z0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+' "$out" || true)
  [ -n "$rows" ] || { cat "$out"; echo "${x}pb3tst: no summary"; exit 1; }
  bad=$(awk '$4 != $3 || $5 != 0 || $3 == 0' <<<"$rows")
  [ -z "$bad" ] || { echo "$rows"; echo "script_scalapack_dropin: ${x}pb3tst failed: $bad"; exit 1; }
  passed=$(awk '{s += $4} END {print s}' <<<"$rows")
  total=$((total + passed))
  for r in geadd tradd; do
    grep -q "P${X}${r^^} " <<<"$rows" || { echo "${x}pb3tst did not test P${X}${r^^}"; exit 1; }
    served=$(cat "$work/$x"/log.* | grep -c "p${x}${r}_ localmap" || true)
    [ "$served" -ge 16 ] || { echo "p${x}${r}_: localmap served $served calls (< 16)"; exit 1; }
    fell=$(cat "$work/$x"/log.* | grep "p${x}${r}_ reference" | grep -v -E "argument [0-9]+ is wrong|context is not" || true)
    [ -z "$fell" ] || { echo "p${x}${r}_ fell back: $fell"; exit 1; }
    echo "${x}pb3tst: P${X}${r^^} $(grep "P${X}${r^^} " <<<"$rows" | awk '{print $4 "/" $3}') passed; localmap served $served calls"
  done
  echo "${x}pb3tst: $passed tests passed, none failed"
done
lm_finish "scalapack_dropin: Debian's PBLAS level-3 testers pass with the drop-in preloaded ($total tests): OK"
