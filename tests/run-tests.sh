#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs localmap's test suite from the build tree; `make check` calls it after building.
#
# Usage: tests/run-tests.sh [NAME|GLOB ...]     e.g. tests/run-tests.sh test_mesh 'unit_*' demo
#
#  - each $BUILD/tests/unit_* once, directly (no mpirun);
#  - each $BUILD/tests/test_* under mpirun at every np of $NPS (default "1 2 3 4 8"); a test source
#    with a line `// lm-test-np: 1 2 4` runs only at those counts (intersected with $NPS when
#    NPS is set in the environment);
#  - each example listed in tests/examples.list, under mpirun at its np list;
#  - each tests/script_*.sh once (install, exports, packaging checks, bindings);
#  - each $BUILD/tests/gpu/test_* (device tests, CUDA builds) under mpirun like the MPI tests.
# Every run is one unit, passed, failed or skipped, under `timeout -k 5 ${LM_TEST_TIMEOUT:-300}`;
# the full output goes to $BUILD/test-logs/<name>.np<N>.log, and a failure prints its last 60
# lines. A program that exits 77 (automake's SKIP) is skipped, not passed: it prints one line
# saying why (e.g. no GPU), shown after SKIP. Device tests of a CUDA=0 build are skipped too.
# The last line is "<N> passed, <N> failed, <N> skipped"; the exit status is nonzero if anything
# failed.
#
# Environment: BUILD (build), NPS, LM_TEST_TIMEOUT (seconds per run, 300), LM_TEST_CASE_TIMEOUT
# (seconds per CMocka test inside a program, see tests/lm_test.h), LM_TEST_VERBOSE=1 (all ranks
# print their reports), LM_MPIRUN (the launcher: mpirun, or mpiexec.mpich under make MPI=mpich),
# LM_MPI (the MPI flavour make was given, for the script tests), LM_MPIRUN_FLAGS (extra launcher
# flags; see tools/lm-mpirun), LM_TEST_GPU_ONLY=1 (device tests only: make check-gpu),
# LM_NCCL_SPLIT_HOSTS=1 (device tests run each rank with its own NCCL_HOSTID and
# NCCL_SOCKET_IFNAME=lo: several NCCL ranks on one GPU).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
if [ -n "${NPS+x}" ]; then NPS_GIVEN=1; else NPS_GIVEN=0; fi
NPS=${NPS:-"1 2 3 4 8"}
TIMEOUT=${LM_TEST_TIMEOUT:-300}
LOGDIR=$BUILD/test-logs
MPIRUN=$ROOT/tools/lm-mpirun
export CMOCKA_MESSAGE_OUTPUT=${CMOCKA_MESSAGE_OUTPUT:-stdout}

mkdir -p "$LOGDIR"
passed=0
failed=0
skipped=0
failed_names=()
GPU_ONLY=${LM_TEST_GPU_ONLY:-0}
FILTERS=("$@")

selected() {
  local name=$1 f
  [ ${#FILTERS[@]} -eq 0 ] && return 0
  for f in "${FILTERS[@]}"; do
    # shellcheck disable=SC2053
    [[ $name == $f ]] && return 0
  done
  return 1
}

now() { date +%s.%N; }

# run_one LABEL NP COMMAND...
run_one() {
  local label=$1 np=$2; shift 2
  local log="$LOGDIR/$label.np$np.log" t0 t1 secs rc reason
  t0=$(now)
  timeout -k 5 "$TIMEOUT" "$@" </dev/null >"$log" 2>&1
  rc=$?
  t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  if [ $rc -eq 0 ]; then
    echo "PASS $label np=$np (${secs}s)"
    passed=$((passed + 1))
  elif [ $rc -eq 77 ]; then
    reason=$(grep -m 1 -o 'SKIP.*' "$log" | sed 's/^SKIP:* *//')
    echo "SKIP $label np=$np (${reason:-exit status 77})"
    skipped=$((skipped + 1))
  else
    case $rc in
      124|137) reason="timed out after ${TIMEOUT}s" ;;
      *) reason="exit status $rc" ;;
    esac
    echo "FAIL $label np=$np ($reason, ${secs}s; log: $log)"
    tail -n 60 "$log" | sed 's/^/    | /'
    failed=$((failed + 1))
    failed_names+=("$label np=$np")
  fi
}

# The np counts of a test: its `// lm-test-np:` line, if any, else $NPS.
nps_of_source() {
  local src=$1 own n m out=""
  own=$(sed -n 's|^[[:space:]]*//[[:space:]]*lm-test-np:[[:space:]]*||p' "$src" | head -n 1)
  own=${own//,/ }
  if [ -z "$own" ]; then echo "$NPS"; return; fi
  if [ "$NPS_GIVEN" = 0 ]; then echo "$own"; return; fi
  for n in $own; do
    for m in $NPS; do [ "$n" = "$m" ] && out="$out $n"; done
  done
  echo "$out"
}

echo "== localmap tests: BUILD=$BUILD NPS=\"$NPS\" launcher=${LM_MPIRUN:-mpirun} timeout=${TIMEOUT}s logs=$LOGDIR"

# 1. unit tests: once, directly.
for src in tests/unit_*.cpp; do
  [ "$GPU_ONLY" = 1 ] && break
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  selected "$name" || continue
  bin=$BUILD/tests/$name
  if [ ! -x "$bin" ]; then
    echo "FAIL $name np=1 (not built: $bin)"; failed=$((failed + 1)); failed_names+=("$name"); continue
  fi
  # A unit test that never starts MPI needs no full stacks for LSan (tests/lsan.supp matches
  # OpenMPI's exit leaks through its dlclose()d components): fast unwinding makes it about 10x
  # faster under ASan. One that does start MPI says so with a line `// lm-unit-starts-mpi`.
  if [ -n "${ASAN_OPTIONS:-}" ] && ! grep -q '^// lm-unit-starts-mpi' "$src"; then
    ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=1" run_one "$name" 1 "$bin"
  else
    run_one "$name" 1 "$bin"
  fi
done

# 2. MPI tests: under mpirun at each np.
for src in tests/test_*.c tests/test_*.cpp; do
  [ "$GPU_ONLY" = 1 ] && break
  [ -e "$src" ] || continue
  name=$(basename "$src"); name=${name%.*}
  selected "$name" || continue
  bin=$BUILD/tests/$name
  if [ ! -x "$bin" ]; then
    echo "FAIL $name (not built: $bin)"; failed=$((failed + 1)); failed_names+=("$name"); continue
  fi
  nps=$(nps_of_source "$src")
  if [ -z "${nps// /}" ]; then echo "SKIP $name (no np of its lm-test-np line is in NPS)"; continue; fi
  for np in $nps; do
    run_one "$name" "$np" bash "$MPIRUN" "$np" "$bin"
  done
done

# 3. examples listed in tests/examples.list: <name> <np,list|-> [args...]
if [ -f tests/examples.list ] && [ "$GPU_ONLY" != 1 ]; then
  while read -r name nplist args; do
    case "$name" in ''|'#'*) continue ;; esac
    selected "$name" || continue
    bin=$BUILD/examples/$name
    if [ ! -x "$bin" ]; then
      echo "FAIL $name (not built: $bin)"; failed=$((failed + 1)); failed_names+=("$name"); continue
    fi
    if [ -z "$nplist" ] || [ "$nplist" = "-" ]; then nplist=$NPS; fi
    for np in ${nplist//,/ }; do
      # shellcheck disable=SC2086
      run_one "$name" "$np" bash "$MPIRUN" "$np" "$bin" $args
    done
  done < tests/examples.list
fi

# 4. script tests: tests/script_*.sh once each (install, exports, packaging).
for src in tests/script_*.sh; do
  [ "$GPU_ONLY" = 1 ] && break
  [ -e "$src" ] || continue
  name=$(basename "$src" .sh)
  selected "$name" || continue
  run_one "$name" 1 env BUILD="$BUILD" bash "$src"
done

# 5. device tests: tests/gpu/test_*.c, built in CUDA builds; each skips (exit 77) without a GPU.
cuda_build=0
grep -q 'CUDA=1' "$BUILD/.stamp-cxx" 2>/dev/null && cuda_build=1
for src in tests/gpu/test_*.c; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .c)
  selected "$name" || continue
  bin=$BUILD/tests/gpu/$name
  if [ ! -x "$bin" ]; then
    if [ $cuda_build = 0 ]; then
      echo "SKIP $name (a CUDA=0 build: no device tests)"; skipped=$((skipped + 1)); continue
    fi
    echo "FAIL $name (not built: $bin)"; failed=$((failed + 1)); failed_names+=("$name"); continue
  fi
  nps=$(nps_of_source "$src")
  if [ -z "${nps// /}" ]; then echo "SKIP $name (no np of its lm-test-np line is in NPS)"; continue; fi
  for np in $nps; do
    if [ "${LM_NCCL_SPLIT_HOSTS:-0}" = 1 ]; then
      run_one "$name.split" "$np" bash "$MPIRUN" "$np" bash tests/gpu/split-hosts.sh "$bin"
    else
      run_one "$name" "$np" bash "$MPIRUN" "$np" "$bin"
    fi
  done
done

if [ ${#FILTERS[@]} -gt 0 ] && [ $((passed + failed + skipped)) -eq 0 ]; then
  echo "no test, unit test or listed example matches: ${FILTERS[*]}"
  failed=1
  failed_names+=("(no match)")
fi
if [ $failed -gt 0 ]; then
  echo "== failed:"
  printf '   %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
