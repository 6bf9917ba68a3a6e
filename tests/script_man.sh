#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What a reader follows out of the references, and whether the references read without a browser
# are current:
#  - the man pages (make man): every SEE ALSO names pages that exist and at least one besides
#    localmap(3), and every header a page names exists under include/ (tools/check-man.py);
#  - the relative links of every markdown file of the tree resolve (tools/check-md-links.py);
#  - docs/fortran-reference.md is what tools/gen-fortran-ref.py makes of bindings/fortran/ now
#    (`make fortran-ref` rewrites it);
#  - the Python package's public classes, functions, methods and properties have docstrings
#    (tools/check-py-docstrings.py, which imports it: deferred where the Python has no numpy).
# Each checker is also shown a copy with one defect (a SEE ALSO naming a missing page, one naming
# only localmap(3), a missing header, a broken link, a changed Fortran comment, an undocumented
# Python function and method), which it must report.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
MPI=${LM_MPI:-}
unset MAKEFLAGS MFLAGS
command -v python3 >/dev/null 2>&1 || lm_missing_tool "no python3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# must_fail WHAT PATTERN COMMAND...: COMMAND fails and its output matches PATTERN.
must_fail() {
  local what=$1 pat=$2
  shift 2
  if "$@" >"$tmp/out" 2>&1; then cat "$tmp/out"; echo "FAIL: $what: the check passed"; exit 1; fi
  grep -q -- "$pat" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: $what: no '$pat' in the report"; exit 1; }
}

# 1. Man pages.
make -s man BUILD="$BUILD" MPI="$MPI" >/dev/null
python3 tools/check-man.py "$BUILD/docs/localmap.3" "$BUILD/docs/man3"
mkdir -p "$tmp/man"
cp "$BUILD/docs/localmap.3" "$BUILD"/docs/man3/*.3 "$tmp/man/"
cp "$tmp/man/lm_mesh_create.3" "$tmp/keep.3"
sed -i 's/^\.SH SEE ALSO$/&\n.BR lm_no_such_function (3),/' "$tmp/man/lm_mesh_create.3"
must_fail "a SEE ALSO naming a page that is not there" 'lm_no_such_function(3), which is not a page' \
  python3 tools/check-man.py "$tmp/man"
cp "$tmp/keep.3" "$tmp/man/lm_mesh_create.3"
sed -i '/^\.SH SEE ALSO$/,$d' "$tmp/man/lm_mesh_create.3"
printf '.SH SEE ALSO\n.BR localmap (3)\n' >>"$tmp/man/lm_mesh_create.3"
must_fail "a SEE ALSO naming only localmap(3)" 'lm_mesh_create(3): SEE ALSO names only the overview' \
  python3 tools/check-man.py "$tmp/man"
sed -i '/^\.SH SEE ALSO$/,$d' "$tmp/man/lm_mesh_create.3"
must_fail "a page without SEE ALSO" 'lm_mesh_create(3): no SEE ALSO' python3 tools/check-man.py "$tmp/man"
cp "$tmp/keep.3" "$tmp/man/lm_mesh_create.3"
sed -i 's/^\.SH DESCRIPTION$/&\nSee localmap_nothing.h./' "$tmp/man/lm_mesh_create.3"
must_fail "a page naming a header that is not there" 'names the header localmap_nothing.h' \
  python3 tools/check-man.py "$tmp/man"
echo "check-man: reports a missing page, an empty SEE ALSO and a missing header in copies"

# 2. Markdown links.
python3 tools/check-md-links.py
mkdir -p "$tmp/md/sub"
touch "$tmp/md/sub/there.md"
printf '# t\n[ok](sub/there.md) [anchor only](#t) [web](https://example.org/x.md)\n```\n[in code](none.md)\n```\n[broken](sub/no-such-guide.md#intro)\n' \
  >"$tmp/md/probe.md"
must_fail "a broken relative link" 'probe.md:6: link to sub/no-such-guide.md#intro: no such file' \
  python3 tools/check-md-links.py --root "$tmp/md" "$tmp/md/probe.md"
grep -q '1 broken link(s) of 2 in 1 files' "$tmp/out" || { cat "$tmp/out"; echo "FAIL: check-md-links miscounted"; exit 1; }
echo "check-md-links: reports a broken link (and only it) in a probe file"

# 3. The Fortran reference.
python3 tools/gen-fortran-ref.py --check
mkdir -p "$tmp/f/tools" "$tmp/f/bindings" "$tmp/f/docs" "$tmp/f/include"
cp tools/gen-fortran-ref.py "$tmp/f/tools/"
cp include/localmap.h "$tmp/f/include/"
cp -a bindings/fortran "$tmp/f/bindings/"
cp docs/fortran-reference.md "$tmp/f/docs/"
python3 "$tmp/f/tools/gen-fortran-ref.py" --check >/dev/null
sed -i '0,/^  !> /s//  !> (changed) /' "$tmp/f/bindings/fortran/localmap.f90"
grep -q '!> (changed)' "$tmp/f/bindings/fortran/localmap.f90" || { echo "could not edit the copy"; exit 1; }
must_fail "a stale docs/fortran-reference.md" 'is stale: run `make fortran-ref`' \
  python3 "$tmp/f/tools/gen-fortran-ref.py" --check
echo "gen-fortran-ref: a copy with one changed comment is stale"

# 4. Python docstrings. The check imports localmap (numpy, the library), so it runs with the
# interpreter tests/script_python.sh picks: $LM_PYTHON, else $BUILD/python-venv or
# build/python-venv (`make python-venv`), else python3. One without numpy defers the check (a
# failure under LM_REQUIRE_BINDINGS=1, as for script_python).
PY=${LM_PYTHON:-}
if [ -z "$PY" ]; then
  for v in "$BUILD/python-venv" build/python-venv; do
    if [ -x "$v/bin/python" ]; then PY=$PWD/$v/bin/python; break; fi
  done
fi
PY=${PY:-python3}
lib=$PWD/$BUILD/lib/liblocalmap.so.1
if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
  why="Python docstrings (tools/check-py-docstrings.py imports localmap): $PY has no numpy"
  why="$why (make python-venv BUILD=$BUILD, or set LM_PYTHON)"
  if [ "${LM_REQUIRE_BINDINGS:-0}" = 1 ]; then
    echo "script_man: FAIL (LM_REQUIRE_BINDINGS=1): $why"; exit 1
  fi
  lm_defer_skip "$why"
else
  [ -e "$lib" ] || { echo "FAIL: no $lib (make lib BUILD=$BUILD)"; exit 1; }
  # A sanitizer build of the library needs its runtimes loaded before the interpreter starts
  # (tests/script_python.sh does the same); Python leaks by design: no leak checks.
  san=()
  preload=""
  for rt in asan ubsan; do
    p=$(ldd "$lib" | awk -v r="lib$rt" '$1 ~ r { print $3; exit }')
    [ -n "$p" ] && preload="${preload:+$preload:}$p"
  done
  [ -z "$preload" ] ||
    san=(env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
  LOCALMAP_LIBRARY=$PWD/$BUILD/lib PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH} \
    ${san[@]+"${san[@]}"} "$PY" tools/check-py-docstrings.py
fi
# A fake package named localmap, built as the real one is (__all__ a sum of lists, a method made
# at import), which imports without numpy: 2 of its 5 items have no docstring, and what its
# class inherits from Exception is not counted.
mkdir -p "$tmp/py/localmap"
cat >"$tmp/py/localmap/__init__.py" <<'EOF'
from . import _core
from ._core import *  # noqa: F401,F403
N = 1
__all__ = _core.__all__ + ["N"]
EOF
cat >"$tmp/py/localmap/_core.py" <<'EOF'
__all__ = ["f", "g", "C"]


def f():
    """Doc."""


def g():
    pass


class _B:
    """Doc."""


for _name in ["m"]:  # made at import, as _wrappers.py's methods are made from tables
    setattr(_B, _name, lambda self: None)


class C(_B, Exception):
    """Doc."""

    @property
    def p(self):
        """Doc."""
EOF
must_fail "undocumented Python API" '2 of 5 without a docstring' \
  python3 tools/check-py-docstrings.py "$tmp/py/localmap"
grep -q 'localmap.g$' "$tmp/out" && grep -q 'localmap.C.m (from _B)' "$tmp/out" &&
  [ "$(grep -c '^  localmap\.' "$tmp/out")" = 2 ] ||
  { cat "$tmp/out"; echo "FAIL: check-py-docstrings named the wrong items"; exit 1; }
echo "check-py-docstrings: reports a fake package's undocumented function and inherited method"

lm_finish "man pages' SEE ALSO and headers, markdown links, docs/fortran-reference.md, Python docstrings: OK"
