#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Python binding (bindings/python): the coverage check against include/localmap.h; the package
# installed with pip (offline: --no-build-isolation) from ./bindings/python into a temporary
# directory, leaving nothing (build/, *.egg-info) in the checkout, and everything
# below run against that installed copy: the library lookup tests (serial), the pytest suites
# under mpirun -np 2 and -np 4 (mpi4py initialises MPI first there), a run without mpi4py (localmap
# initialises MPI, and does not import mpi4py), the masked-loss example at np 1, 2 and 4,
# whose loss must equal the one printed by the C example (build/examples/demo), and the plan-info
# example at np 2 and 4 (PASS on every rank).
#
# The interpreter: $LM_PYTHON, else $BUILD/python-venv or build/python-venv (`make python-venv`
# makes it with pip: numpy, mpi4py, pytest, wheel), else python3. Exits 77 (SKIP, with the reason on the
# last line) when that interpreter lacks one of them (or setuptools); a failure instead when
# LM_REQUIRE_BINDINGS=1.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
# LM_REQUIRE_BINDINGS=1 (set by CI) turns a skip into a failure.
. tests/lm_test.sh
skip() { lm_missing_binding "$@"; }
fail() { echo "script_python: FAIL: $*"; exit 1; }
step() { printf '\n--- %s\n' "$*"; }

# The coverage check needs no Python: it runs even when the rest is skipped.
bash tools/check-binding-coverage.sh bindings/python '*.py' || fail "the binding lacks C API functions"

PY=${LM_PYTHON:-}
if [ -z "$PY" ]; then
  for v in "$BUILD/python-venv" build/python-venv; do
    if [ -x "$v/bin/python" ]; then PY=$ROOT/$v/bin/python; break; fi
  done
fi
PY=${PY:-$(command -v python3 || true)}
[ -n "$PY" ] || skip "no python3 (apt-get install python3 python3-venv, then make python-venv)"
# An interpreter that is there but does not start is broken, not missing: a failure.
missing=$("$PY" - <<'P'
import importlib.util
print(" ".join(m for m in ("numpy", "mpi4py", "pytest", "setuptools", "wheel") if importlib.util.find_spec(m) is None))
P
) || fail "$PY is there but does not run"
[ -z "$missing" ] || skip "$PY lacks $missing (make python-venv installs them with pip, or set LM_PYTHON)"
echo "python: $PY ($("$PY" -c 'import sys, numpy, mpi4py, pytest; print(sys.version.split()[0], "numpy", numpy.__version__, "mpi4py", mpi4py.__version__, "pytest", pytest.__version__)'))"

lib=$ROOT/$BUILD/lib/liblocalmap.so.1
[ -e "$lib" ] || fail "no $lib (make lib BUILD=$BUILD)"
demo=$ROOT/$BUILD/examples/demo
[ -x "$demo" ] || fail "no $demo (make examples BUILD=$BUILD)"
# Whether the build made the device component (liblocalmap-cuda.so.N beside the library), decided
# from the build tree as tests/run-tests.sh does (given: kept): test_config.py expects exactly one
# answer of transport("cuda") for it.
if [ -z "${LM_CUDA_BUILD:-}" ]; then
  LM_CUDA_BUILD=0
  compgen -G "$BUILD/lib/liblocalmap-cuda.so.*" >/dev/null && LM_CUDA_BUILD=1
fi
case $LM_CUDA_BUILD in 0|1) ;; *) fail "LM_CUDA_BUILD must be 0 or 1 (got '$LM_CUDA_BUILD')" ;; esac
export LM_CUDA_BUILD
echo "LM_CUDA_BUILD=$LM_CUDA_BUILD (${LM_EXPECT_GPU:+LM_EXPECT_GPU=$LM_EXPECT_GPU})"

# A sanitizer build of the library needs its runtimes loaded before the interpreter starts:
# every Python process below runs under $SAN (an `env` prefix). Python itself leaks by design, so
# leak checks are off there; everything else stays on.
SAN=()
preload=""
for rt in asan ubsan; do
  p=$(ldd "$lib" | awk -v r="lib$rt" '$1 ~ r { print $3; exit }')
  [ -n "$p" ] && preload="${preload:+$preload:}$p"
done
if [ -n "$preload" ]; then
  SAN=(env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
  echo "sanitizer build: Python runs with LD_PRELOAD=$preload"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# mpi4py must run on the library's MPI: two MPIs in one process crash. PyPI's mpi4py wheel picks
# OpenMPI or MPICH at import (MPI4PY_MPIABI) and links MPICH as libmpi.so.12, a name Debian's MPICH
# does not install (it is libmpich.so.12): a symlink of that name to the same file serves it.
mpich=$(ldd "$lib" | awk '$1 ~ /^libmpich\.so/ { print $3; exit }')
if [ -n "$mpich" ]; then
  export MPI4PY_MPIABI=mpich
  cache=$(/sbin/ldconfig -p 2>/dev/null || true)   # (not `| grep -q`: pipefail)
  if ! grep -q 'libmpi\.so\.12 ' <<<"$cache"; then
    mkdir "$tmp/mpiabi" && ln -s "$mpich" "$tmp/mpiabi/libmpi.so.12"
    export LD_LIBRARY_PATH=$tmp/mpiabi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  echo "MPICH build: mpi4py runs with MPI4PY_MPIABI=mpich on $mpich"
fi

step "pip install --no-build-isolation (offline) of ./bindings/python into a temporary target"
# Straight from the checkout, as a user does: the package's build backend works on a copy, so
# nothing (build/, *.egg-info) may appear next to the sources.
before=$(git status --porcelain --ignored bindings/python 2>/dev/null || true)
"$PY" -m pip install -q --no-build-isolation --no-deps --no-index \
  --target "$tmp/site" ./bindings/python || fail "pip install of bindings/python"
after=$(git status --porcelain --ignored bindings/python 2>/dev/null || true)
[ "$before" = "$after" ] || fail "pip install ./bindings/python left files in the checkout: $(diff <(echo "$before") <(echo "$after") | sed -n 's/^> //p' | tr '\n' ' ')"
for d in bindings/python/build bindings/python/*.egg-info; do
  [ ! -e "$d" ] || fail "pip install ./bindings/python left $d"
done
so=$(find "$tmp/site" -name '*.so*' | head -1)
[ -z "$so" ] || fail "the package contains compiled code: $so"
[ -f "$tmp/site/localmap/__init__.py" ] || fail "pip installed no localmap package"

export PYTHONPATH=$tmp/site${PYTHONPATH:+:$PYTHONPATH}
export LOCALMAP_LIBRARY=$lib
export PYTHONDONTWRITEBYTECODE=1
where=$("${SAN[@]}" "$PY" -c 'import localmap; print(localmap.__file__)') || fail "import localmap"
case $where in "$tmp/site/"*) ;; *) fail "imported $where, not the installed copy" ;; esac
# Tests of functions the loaded library lacks skip themselves (test_config.py); that is right only
# for functions this tree's header does not declare yet.
stale=$("${SAN[@]}" "$PY" -c '
import re, sys
from localmap import _lib
hdr = open("include/localmap.h").read()
print(" ".join(n for n in _lib.MISSING if re.search(r"\b%s\s*\(" % n, hdr)))') || fail "reading the binding"
[ -z "$stale" ] || fail "the library in $BUILD lacks functions its header declares: $stale"
PYTEST=("${SAN[@]}" "$PY" -m pytest -q -rs -p no:cacheprovider --color=no)
# Under mpirun only rank 0 prints pytest's report; a failure on any rank prints it to stderr and
# aborts the job (tests/conftest.py).
RANK0_OUT=(bash -c 'if [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 0 ]; then exec "$@"; else exec "$@" >/dev/null; fi' rank0-out)

step "library lookup (serial)"
LM_TEST_SOURCE_ROOT=$ROOT "${PYTEST[@]}" bindings/python/tests-serial || fail "library lookup tests"

for np in 2 4; do
  step "pytest under mpirun -np $np"
  bash tools/lm-mpirun "$np" "${RANK0_OUT[@]}" "${PYTEST[@]}" bindings/python/tests || fail "pytest at np $np"
done

step "without mpi4py: localmap initialises MPI and never imports mpi4py"
bash tools/lm-mpirun 2 "${SAN[@]}" "$PY" -c '
import sys, localmap as lm
r, n = lm.world_rank()
with lm.Mesh([n]) as m:
    assert m.size == n
assert "mpi4py" not in sys.modules, "localmap imported mpi4py"
print("rank", r, "ok without mpi4py")' || fail "run without mpi4py"

step "singleton run without mpirun"
"${SAN[@]}" "$PY" bindings/python/examples/masked_loss.py || fail "masked_loss.py without mpirun"

for mode in "" --mpi4py; do
  step "handles alive at interpreter exit ${mode:-(localmap initialised MPI)}"
  out=$(bash tools/lm-mpirun 2 "${SAN[@]}" "$PY" bindings/python/tests/exit_with_live_handles.py $mode 2>&1) \
    || fail "exit with live handles $mode: $out"
  echo "$out"
  if grep -qiE 'error|exception|warning|traceback' <<<"$out"; then fail "messages at exit: $out"; fi
done

for np in 1 2 4; do
  step "masked-loss example at np $np against examples/demo.c"
  out=$(bash tools/lm-mpirun "$np" "${SAN[@]}" "$PY" bindings/python/examples/masked_loss.py) || fail "masked_loss.py at np $np: $out"
  echo "$out"
  cout=$(bash tools/lm-mpirun "$np" "$demo") || fail "the C demo at np $np: $cout"
  c=$(echo "$cout" | sed -n 's/.*loss = \([-+0-9.eE]*\).*/\1/p' | head -1)
  py=$(echo "$out" | sed -n 's/.*loss = \([-+0-9.eE]*\).*/\1/p' | head -1)
  [ -n "$py" ] && [ "$py" = "$c" ] || fail "np $np: Python printed loss '$py', C printed '$c'"
  echo "same loss as the C demo: $c"
done
for np in 2 4; do
  step "plan-info example at np $np (mpi4py sums the per-rank bytes)"
  out=$(bash tools/lm-mpirun "$np" "${SAN[@]}" "$PY" bindings/python/examples/plan_info.py) || fail "plan_info.py at np $np: $out"
  echo "$out"
  [ "$(grep -o 'plan info and adjoints: PASS' <<<"$out" | wc -l)" = "$np" ] || fail "plan_info.py at np $np: not PASS on every rank"
done
echo "script_python: OK"
