#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Makes the Python environment the binding's tests run in (tests/script_python.sh): a venv from
# PYTHON with PACKAGES installed by pip from the package index.
# Usage: tools/python-venv.sh [--auto] PYTHON VENV PACKAGE...
#   (default)  `make python-venv`: any failure fails (exit 1).
#   --auto     `make check`: does nothing when the venv is there already, when LM_PYTHON names an
#              interpreter, or when PYTHON has the packages itself; otherwise tries, and when it
#              cannot (no venv module, package index not reachable, pip failing) says why in one
#              line and exits 0: the Python tests then say SKIP with the same reason.
# The package index is PIP_INDEX_URL, else pip's configured index-url, else https://pypi.org/simple.
set -u
auto=0
if [ "${1:-}" = --auto ]; then auto=1; shift; fi
[ $# -ge 3 ] || { echo "usage: $0 [--auto] PYTHON VENV PACKAGE..." >&2; exit 2; }
PY=$1 VENV=$2
shift 2
say() { echo "python-venv: $*"; }
give_up() {  # reason
  if [ $auto = 1 ]; then
    say "$1"
    say "the Python binding's tests will be SKIPPED (make python-venv retries; LM_PYTHON=<python> uses another interpreter)"
    exit 0
  fi
  say "$1" >&2
  exit 1
}

if [ $auto = 1 ]; then
  [ -f "$VENV/.stamp" ] && exit 0
  [ -z "${LM_PYTHON:-}" ] || exit 0
  "$PY" -c 'import numpy, mpi4py, pytest, setuptools, wheel' >/dev/null 2>&1 && exit 0
fi
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 ||
  give_up "$PY cannot make a venv (Debian: apt-get install python3-venv; make check installs it as root)"

# Is the index reachable? (A clear answer in seconds, rather than pip's retries.)
index=${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || true)}
index=${index:-https://pypi.org/simple}
if ! "$PY" - "$index" <<'P' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/pip/", timeout=15).read(1)
P
then
  give_up "the package index $index is not reachable from here (no network, or a proxy: set PIP_INDEX_URL / https_proxy): cannot install $*"
fi

rm -rf "$VENV"
"$PY" -m venv "$VENV" || give_up "$PY -m venv $VENV failed"
log=$VENV/pip.log
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 "$@" >"$log" 2>&1; then
  tail -n 5 "$log" | sed 's/^/  pip: /'
  rm -rf "$VENV"
  give_up "pip install $* from $index failed (its last lines above)"
fi
"$VENV/bin/python" -c 'import numpy, mpi4py, pytest; print("python-venv: '"$VENV"':", "numpy", numpy.__version__, "mpi4py", mpi4py.__version__, "pytest", pytest.__version__)' ||
  give_up "the venv $VENV does not import numpy, mpi4py and pytest"
touch "$VENV/.stamp"
