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
# lines. Honest results (tests/README.md):
#  - SKIP only by the marker protocol: a program or script that cannot run its checks prints one
#    line "LM-SKIP: <reason>" and exits 77 (tests/lm_test.h lm_test_skip_program, tests/lm_test.sh
#    lm_skip). Exit status 77 without that line is a FAIL (a test program's exit status is its
#    failure count), and so is the line with any other status.
#  - A test inside a program that skipped (lm_test_skip, or CMocka's skip()) prints
#    "LM-SKIP-TEST: <test>: <reason>". Once every np of the program has run, each such test is
#    settled: one that ran (passed) at another np of this run is "n/a" there, not a skip (one
#    line "n/a name/test np=1,2 (reason; ran at np 8)", counted apart from the skips); one that
#    ran at no np of this run is one counted SKIP line "name/test np=1,2 (reason)", and is listed
#    again at the end ("never ran"). A program that skipped as a whole (exit 77) at some np and
#    passed at another is settled the same way.
#  - A script test that passed is followed by its inner skips: tests its programs skipped
#    (LM-SKIP-TEST lines) that ran nowhere else in the script or this run, and pytest's skips
#    (SKIPPED lines of pytest -rs), each a counted SKIP "script_x/<test> (reason)"; one that ran
#    elsewhere is an n/a line.
#  - A test whose `// lm-test-np:` counts are all outside NPS is a counted SKIP too.
#  - LM_ONLY_GPU_SKIPS=1 (CI's plain `make check`): any SKIP whose reason is not a GPU's fails
#    the run. A GPU reason: a device test (tests/gpu/), or a reason naming GPU, CUDA, NCCL or a
#    device (as a word).
#  - Device tests (tests/gpu/) run where a GPU is expected: LM_EXPECT_GPU=0|1, decided here
#    outside the library (whether the build made the device component, then `nvidia-smi -L`; set
#    it to override) and exported, so the CPU tests can pin lm_device_supported's answer. LM_EXPECT_GPU=0: each device
#    test is one counted SKIP saying so; 1: they run, and a skip is only what they print.
# The last line is "<N> passed, <N> failed, <N> skipped"; the exit status is nonzero if anything
# failed.
#
# Environment: BUILD (build), NPS, LM_TEST_TIMEOUT (seconds per run, 300), LM_TEST_CASE_TIMEOUT
# (seconds per CMocka test inside a program, see tests/lm_test.h), LM_TEST_VERBOSE=1 (all ranks
# print their reports), LM_MPIRUN (the launcher: mpirun, or mpiexec.mpich under make MPI=mpich),
# LM_MPI (the MPI flavour make was given, for the script tests), LM_MPIRUN_FLAGS (extra launcher
# flags; see tools/lm-mpirun), LM_TEST_GPU_ONLY=1 (device tests only: make check-gpu),
# LM_NCCL_SPLIT_HOSTS=1 (device tests run each rank with its own NCCL_HOSTID and
# NCCL_SOCKET_IFNAME=lo: several NCCL ranks on one GPU), LM_GPU_TEST_WRAPPER (a command each
# rank of a device test runs under, e.g. "compute-sanitizer --error-exitcode 86"), LM_EXPECT_GPU (above), LM_TEST_NODES=k
# (simulated nodes: `make check-multinode`, tests/README.md), LM_ONLY_GPU_SKIPS=1 (above).
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
napp=0
failed_names=()
skip_seen=()
nongpu_skips=()
declare -A skip_why=() ran_seen=()
# What one program's runs left to settle once all its np have run (settle, below): its whole-run
# skips ("label<TAB>np<TAB>reason"), its tests' skips ("label/test<TAB>np<TAB>reason"), the np at
# which it passed.
pend_prog=()
pend_test=()
pass_nps=""
IN_GPU_DIR=0
ONLY_GPU_SKIPS=${LM_ONLY_GPU_SKIPS:-0}
GPU_ONLY=${LM_TEST_GPU_ONLY:-0}
# A command every rank of a device test runs under (words split on spaces), e.g. compute-sanitizer.
GPU_WRAP=${LM_GPU_TEST_WRAPPER:-}
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
RUN_KIND=program

# run_one LABEL NP COMMAND...
run_one() {
  local label=$1 np=$2; shift 2
  local log="$LOGDIR/$label.np$np.log" t0 t1 secs rc reason marker nskip=0 line note=""
  t0=$(now)
  timeout -k 5 "$TIMEOUT" "$@" </dev/null >"$log" 2>&1
  rc=$?
  t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  marker=$(grep -m 1 -a '^LM-SKIP: ' "$log" | sed 's/^LM-SKIP: *//')
  reason=""
  if [ $rc -eq 77 ] && [ -n "$marker" ]; then
    # Settled with the program's other np (settle): a skip, or n/a where it passed at another.
    pend_prog+=("$label"$'\t'"$np"$'\t'"$marker")
    if [ "$RUN_KIND" != script ]; then
      pend_tests_of "$label" "$np" "$log"
      echo "  (skipped at np=$np: $marker; settled below)"
    fi
    return
  elif [ $rc -eq 77 ]; then
    reason="exit status 77 without an LM-SKIP line: a failure count, not a skip"
  elif [ $rc -eq 0 ] && [ -n "$marker" ] && [ "$RUN_KIND" != script ]; then
    reason="printed LM-SKIP ($marker) but exited 0"
  elif [ $rc -eq 0 ]; then
    # Tests skipped inside the program: settled with the program's other np (settle). A script
    # test's inner skips (the programs and pytest runs it made) are reported after its PASS line
    # (script_inner_skips).
    if [ "$RUN_KIND" != script ]; then
      pend_tests_of "$label" "$np" "$log"
      nskip=$pend_added
      while IFS= read -r line; do ran_seen["$label/$line"]+=" $np"; done \
        < <(sed -n 's/^\[       OK \] \([A-Za-z0-9_]*\)$/\1/p' "$log")
      [ "$nskip" -gt 0 ] && note="; $nskip test(s) skipped here, settled below"
    else
      nskip=$(grep -a -c -E '^(LM-SKIP-TEST: |SKIPPED \[[0-9]+\] )' "$log")
      [ "$nskip" -gt 0 ] && note="; $nskip inner skip line(s), settled below"
    fi
    pass_nps="$pass_nps $np"
    echo "PASS $label np=$np (${secs}s$note)"
    passed=$((passed + 1))
    [ "$RUN_KIND" = script ] && script_inner_skips "$label" "$log"
    return
  fi
  if [ -z "$reason" ]; then
    case $rc in
      124|137) reason="timed out after ${TIMEOUT}s" ;;
      *) reason="exit status $rc" ;;
    esac
  fi
  echo "FAIL $label np=$np ($reason, ${secs}s; log: $log)"
  tail -n 60 "$log" | sed 's/^/    | /'
  failed=$((failed + 1))
  failed_names+=("$label np=$np")
}

# pend_tests_of LABEL NP LOG: the tests the run skipped inside the program (LM-SKIP-TEST lines),
# kept for settle; pend_added says how many.
pend_tests_of() {
  local line tname
  pend_added=0
  while IFS= read -r line; do
    line=${line#LM-SKIP-TEST: }
    tname=${line%%: *}
    pend_test+=("$1/$tname"$'\t'"$2"$'\t'"${line#*: }")
    pend_added=$((pend_added + 1))
  done < <(grep -a '^LM-SKIP-TEST: ' "$3")
}

# script_inner_skips LABEL LOG: what a script test that passed did not run inside. Its programs'
# skipped tests ("LM-SKIP-TEST: <test>: <reason>") and pytest's skips ("SKIPPED [n] <where>:
# <reason>", pytest -rs; rank 0's, once per location and reason however many runs printed it).
# A program's test that ran elsewhere (an "[       OK ] <test>" line of the same script, or a
# program of this run, ran_seen) was not applicable where it skipped: an n/a line. Every other
# one is a counted SKIP "LABEL/<test> (reason)", listed again at the end when it never ran.
script_inner_skips() {
  local label=$1 log=$2 line tname why where other k
  declare -A seen=()
  while IFS= read -r line; do
    line=${line#LM-SKIP-TEST: }
    tname=${line%%: *}
    why=${line#*: }
    [ -n "${seen[$tname]:-}" ] && continue
    seen[$tname]=1
    other=""
    if grep -a -q -x "\[       OK \] $tname" "$log"; then
      other="ran in another run of this script"
    else
      for k in "${!ran_seen[@]}"; do
        [ "${k##*/}" = "$tname" ] || continue
        other="ran as ${k%/*} at np $(csv "${ran_seen[$k]}")"
        break
      done
    fi
    if [ -n "$other" ]; then
      echo "n/a  $label/$tname ($why; $other)"
      napp=$((napp + 1))
    else
      count_skip "$label/$tname" "$why"
      skip_seen+=("$label/$tname")
      skip_why["$label/$tname"]=$why
    fi
  done < <(grep -a '^LM-SKIP-TEST: ' "$log")
  while IFS= read -r line; do
    line=$(sed -E 's/^SKIPPED \[[0-9]+\] //' <<<"$line")
    [ -n "${seen[$line]:-}" ] && continue
    seen[$line]=1
    where=${line%%: *}
    why=${line#*: }
    count_skip "$label/$where" "pytest: $why"
    skip_seen+=("$label/$where")
    skip_why["$label/$where"]="pytest: $why"
  done < <(grep -a -E '^SKIPPED \[[0-9]+\] ' "$log")
}

# is_gpu_reason REASON: a skip for want of a GPU (the word GPU, CUDA, NCCL or device).
is_gpu_reason() {
  [ "$IN_GPU_DIR" = 1 ] && return 0
  echo "$1" | grep -Eiq '(^|[^A-Za-z0-9_])(GPUs?|CUDA|NCCL|devices?)([^A-Za-z0-9_]|$)'
}

# is_optional_reason REASON: a pytest skip for want of a third-party package that localmap never
# needs (PyTorch, Paddle: side-by-side tests only; CI cannot install them from PyPI in reasonable
# time). Named by the test's own reason, "import torch failed ..."; LM_OPTIONAL_PY_MODULES.
OPTIONAL_PY_MODULES=${LM_OPTIONAL_PY_MODULES:-torch paddle}
is_optional_reason() {
  local m
  for m in $OPTIONAL_PY_MODULES; do
    case $1 in "pytest: import $m failed"*) return 0 ;; esac
  done
  return 1
}

# count_skip WHAT REASON: one counted SKIP line; a reason that is not a GPU's (nor an optional
# package's) is kept for the LM_ONLY_GPU_SKIPS gate.
count_skip() {
  skipped=$((skipped + 1))
  if is_gpu_reason "$2"; then
    echo "SKIP $1 ($2)"
  elif is_optional_reason "$2"; then
    echo "SKIP $1 ($2) [an optional package: allowed under LM_ONLY_GPU_SKIPS]"
  else
    echo "SKIP $1 ($2)"
    nongpu_skips+=("$1 ($2)")
  fi
}

# skip_unit LABEL REASON: a unit that does not run here, counted.
skip_unit() {
  count_skip "$1" "$2"
  skip_seen+=("$1")
  skip_why["$1"]=$2
}

# csv " 1 2 8": "1,2,8".
csv() { local v=${1# }; echo "${v// /,}"; }

# settle_group KIND: the entries of pend_prog (KIND prog) or pend_test (KIND test), grouped by
# name in order: "name<TAB>np,np<TAB>reason" lines, the reason of the first np (of several, less
# its own " (np N)" ending).
settle_group() {
  local -n arr=pend_$1
  [ ${#arr[@]} -gt 0 ] || return 0
  printf '%s\n' "${arr[@]}" | awk -F'\t' '
    !($1 in nps) {
      order[++n] = $1; why[$1] = $3; nps[$1] = $2; k[$1] = 1
      end = " (np " $2 ")"; short[$1] = $3
      if (length($3) > length(end) && substr($3, length($3) - length(end) + 1) == end)
        short[$1] = substr($3, 1, length($3) - length(end))
      next
    }
    { nps[$1] = nps[$1] "," $2; ++k[$1] }
    END {
      for (i = 1; i <= n; ++i) {
        t = order[i]
        print t "\t" nps[t] "\t" (k[t] > 1 ? short[t] : why[t])
      }
    }'
}

# settle: once every np of one program has run. Where it passed at some np, its whole-run skips
# at other np are n/a (not applicable there), and so is each test it skipped at one np and ran
# (passed) at another; a test that ran at no np of this run is a counted SKIP. A program that
# passed at no np: each whole-run skip is a counted SKIP.
settle() {
  local name nps why
  if [ -n "$pass_nps" ]; then
    while IFS=$'\t' read -r name nps why; do
      echo "n/a  $name np=$nps ($why; it passed at np $(csv "$pass_nps"))"
      napp=$((napp + 1))
    done < <(settle_group prog)
    while IFS=$'\t' read -r name nps why; do
      if [ -n "${ran_seen[$name]:-}" ]; then
        echo "n/a  $name np=$nps ($why; ran at np $(csv "${ran_seen[$name]}"))"
        napp=$((napp + 1))
      else
        count_skip "$name np=$nps" "$why"
        skip_seen+=("$name")
        skip_why["$name"]=$why
      fi
    done < <(settle_group test)
  else
    # (the tests of a program that skipped as a whole are in its reason: not counted again)
    while IFS=$'\t' read -r name nps why; do
      count_skip "$name np=$nps" "$why"
      skip_seen+=("$name")
      skip_why["$name"]=$why
    done < <(settle_group prog)
  fi
  pend_prog=()
  pend_test=()
  pass_nps=""
}

# A test's own `// lm-test-np:` counts (empty: none given).
nps_own() {
  local own
  own=$(sed -n 's|^[[:space:]]*//[[:space:]]*lm-test-np:[[:space:]]*||p' "$1" | head -n 1)
  echo "${own//,/ }"
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

# Is a GPU expected here? Decided outside the library under test (tests/README.md).
cuda_build=0
compgen -G "$BUILD/lib/liblocalmap-cuda.so.*" >/dev/null && cuda_build=1
# Whether the build made the device component (liblocalmap-cuda.so.N beside the library: CUDA=1,
# CUDA=auto with the toolkit, CUDA=sim), from the build tree, not from the library: the Python
# tests pin lm_mesh_transport(kDLCUDA)'s answer with it.
export LM_CUDA_BUILD=$cuda_build
gpu_error=""
if [ -n "${LM_EXPECT_GPU:-}" ]; then
  gpu_why="LM_EXPECT_GPU given"
  case $LM_EXPECT_GPU in
    0) ;;
    1) [ $cuda_build = 1 ] || gpu_error="LM_EXPECT_GPU=1, but $BUILD has no device component (a CUDA=0 build)" ;;
    *) gpu_error="LM_EXPECT_GPU must be 0 or 1 (got '$LM_EXPECT_GPU')" ;;
  esac
elif [ $cuda_build = 0 ]; then
  LM_EXPECT_GPU=0 gpu_why="a CUDA=0 build"
elif [ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] || [ "${CUDA_VISIBLE_DEVICES:-}" = "-1" ]; then
  LM_EXPECT_GPU=0 gpu_why="a CUDA build, CUDA_VISIBLE_DEVICES hides every GPU"
elif nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
  LM_EXPECT_GPU=1 gpu_why="a CUDA build, nvidia-smi -L lists a GPU"
else
  LM_EXPECT_GPU=0 gpu_why="a CUDA build, nvidia-smi lists no GPU"
fi
export LM_EXPECT_GPU

echo "== localmap tests: BUILD=$BUILD NPS=\"$NPS\" launcher=${LM_MPIRUN:-mpirun} timeout=${TIMEOUT}s logs=$LOGDIR"
echo "== LM_EXPECT_GPU=$LM_EXPECT_GPU ($gpu_why), LM_CUDA_BUILD=$LM_CUDA_BUILD${LM_TEST_NODES:+; simulated nodes: LM_TEST_NODES=$LM_TEST_NODES}"
if [ -n "$gpu_error" ]; then
  echo "FAIL (setup) $gpu_error"
  failed=$((failed + 1))
  failed_names+=("(LM_EXPECT_GPU)")
fi
case $ONLY_GPU_SKIPS in
  0) ;;
  1) echo "== LM_ONLY_GPU_SKIPS=1: a SKIP for any reason but a GPU fails the run" ;;
  *) echo "FAIL (setup) LM_ONLY_GPU_SKIPS must be 0 or 1 (got '$ONLY_GPU_SKIPS')"
     failed=$((failed + 1))
     failed_names+=("(LM_ONLY_GPU_SKIPS)") ;;
esac

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
  settle
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
  if [ -z "${nps// /}" ]; then skip_unit "$name" "runs at np $(nps_own "$src") only, none of NPS=\"$NPS\""; continue; fi
  for np in $nps; do
    run_one "$name" "$np" bash "$MPIRUN" "$np" "$bin"
  done
  settle
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
    settle
  done < tests/examples.list
fi

# 4. script tests: tests/script_*.sh once each (install, exports, packaging).
for src in tests/script_*.sh; do
  [ "$GPU_ONLY" = 1 ] && break
  [ -e "$src" ] || continue
  name=$(basename "$src" .sh)
  selected "$name" || continue
  RUN_KIND=script run_one "$name" 1 env BUILD="$BUILD" bash "$src"
  settle
done

# 5. device tests: tests/gpu/test_*.c, built in CUDA builds; run where a GPU is expected.
IN_GPU_DIR=1
for src in tests/gpu/test_*.c; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .c)
  selected "$name" || continue
  bin=$BUILD/tests/gpu/$name
  if [ "$LM_EXPECT_GPU" != 1 ]; then
    skip_unit "$name" "device test; LM_EXPECT_GPU=$LM_EXPECT_GPU: $gpu_why"; continue
  fi
  if [ ! -x "$bin" ]; then
    echo "FAIL $name (not built: $bin)"; failed=$((failed + 1)); failed_names+=("$name"); continue
  fi
  nps=$(nps_of_source "$src")
  if [ -z "${nps// /}" ]; then skip_unit "$name" "runs at np $(nps_own "$src") only, none of NPS=\"$NPS\""; continue; fi
  for np in $nps; do
    if [ "${LM_NCCL_SPLIT_HOSTS:-0}" = 1 ]; then
      run_one "$name.split" "$np" bash "$MPIRUN" "$np" bash tests/gpu/split-hosts.sh $GPU_WRAP "$bin"
    else
      run_one "$name" "$np" bash "$MPIRUN" "$np" $GPU_WRAP "$bin"
    fi
  done
  settle
done
IN_GPU_DIR=0

# Tests skipped at every np they had in this run: say so once more, at the end.
never=()
for t in "${skip_seen[@]}"; do
  [ -n "${ran_seen[$t]:-}" ] && continue
  case " ${never[*]} " in *" $t "*) continue ;; esac
  never+=("$t")
done
if [ ${#never[@]} -gt 0 ]; then
  echo "== never ran in this run (skipped at every np of it):"
  for t in "${never[@]}"; do echo "   $t: ${skip_why[$t]}"; done
fi
[ $napp -eq 0 ] || echo "== n/a: $napp test(s) or program(s) not applicable at some np, run at another np of this run (not skips)"

# LM_ONLY_GPU_SKIPS=1: a skip for anything but a GPU fails the run.
if [ "$ONLY_GPU_SKIPS" = 1 ] && [ ${#nongpu_skips[@]} -gt 0 ]; then
  echo "FAIL (LM_ONLY_GPU_SKIPS=1) ${#nongpu_skips[@]} skip(s) for a reason other than a GPU:"
  printf '   %s\n' "${nongpu_skips[@]}"
  failed=$((failed + 1))
  failed_names+=("(LM_ONLY_GPU_SKIPS=1: ${#nongpu_skips[@]} non-GPU skip(s))")
fi

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
