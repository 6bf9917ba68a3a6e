#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What the Makefile says about CUDA=auto (issue 18: never a silent CUDA build), pinned for this
# machine and toolkit: one line on stderr per top-level make,
#  - where nvcc with nccl.h is found (what `make print-cuda` resolves to 1): "CUDA=auto: a CUDA
#    build ...: the device component liblocalmap-cuda links libcudart and libnccl, liblocalmap
#    none", then "a GPU is visible: tests/gpu run" where an NVIDIA
#    device node is (/dev/nvidia<N>, the Makefile's GPU_SEEN) or "no GPU on this machine: tests/gpu
#    skip" where none is (test_device_api pins the library's own "no GPU on this machine");
#  - where they are not: "CUDA=auto: a CPU-only build"; CUDA_HOME pointing nowhere forces this
#    case on every machine;
#  - nothing for CUDA=0, CUDA=1, CUDA=sim, a sub-make, or print-cuda (scripts read its stdout).
# Only the Makefile is parsed (`make -n` into an empty BUILD of its own): nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
command -v make >/dev/null || lm_missing_tool "make is not installed"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
checks=0

# top ARGS...: make as a top-level make (not the sub-make of `make check`), parsing only.
top() { env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make --no-print-directory BUILD="$tmp/b" "$@"; }
# says ARGS...: the "CUDA=auto:" lines that `make -n ARGS lib` prints on stderr.
says() { { top -n "$@" lib 2>&1 >/dev/null || echo "make failed: $*"; } | grep -E '^(CUDA=auto|make failed)' || true; }
bad() { echo "script_cuda_auto: FAIL: $*"; exit 1; }
# expect WHAT GOT PATTERN...: GOT is one line matching every grep -E PATTERN.
expect() {
  local what=$1 got=$2 p; shift 2
  [ "$(printf '%s\n' "$got" | grep -c .)" = 1 ] || bad "$what: expected one line, got: '$got'"
  for p in "$@"; do grep -qE -- "$p" <<<"$got" || bad "$what: '$got' does not match '$p'"; done
  checks=$((checks + 1))
}
silent() {  # silent WHAT ARGS...
  local what=$1 got; shift
  got=$(says "$@")
  [ -z "$got" ] || bad "$what: expected no CUDA=auto line, got: '$got'"
  checks=$((checks + 1))
}

gpu_seen=0
compgen -G '/dev/nvidia[0-9]*' >/dev/null && gpu_seen=1
resolved=$(top -s print-cuda CUDA=auto 2>"$tmp/print.err")
[ ! -s "$tmp/print.err" ] || bad "print-cuda wrote on stderr: $(cat "$tmp/print.err")"
case $resolved in 0 | 1) ;; *) bad "make print-cuda CUDA=auto gave '$resolved'" ;; esac

# This machine, as it is.
got=$(says CUDA=auto)
if [ "$resolved" = 1 ]; then
  gpu='no GPU on this machine: tests/gpu skip'
  [ $gpu_seen = 0 ] || gpu='a GPU is visible: tests/gpu run'
  expect "CUDA=auto here (a CUDA toolkit with NCCL)" "$got" \
    '^CUDA=auto: a CUDA build \(nvcc and nccl\.h under [^)]*\): the device component liblocalmap-cuda links libcudart and libnccl, liblocalmap none; ' \
    "; $gpu \\(CUDA=0: CPU only; CUDA=sim: the device path on the simulator\\)\$"
  silent "CUDA=1" CUDA=1
else
  expect "CUDA=auto here (no CUDA toolkit with NCCL)" "$got" '^CUDA=auto: a CPU-only build \(no nvcc with nccl\.h under CUDA_HOME='
fi

# No toolkit, on any machine.
none=$tmp/no-cuda
got=$(says CUDA=auto CUDA_HOME="$none" NCCL_HOME="$none" NVCC="$none/bin/nvcc" CUDA_LIBDIR=)
expect "CUDA=auto with CUDA_HOME=$none" "$got" \
  "^CUDA=auto: a CPU-only build \\(no nvcc with nccl\\.h under CUDA_HOME=$none; CUDA=1 requires them; CUDA=sim: the device path on the simulator\\)\$"
[ "$(top -s print-cuda CUDA=auto CUDA_HOME="$none" NCCL_HOME="$none" NVCC="$none/bin/nvcc" CUDA_LIBDIR=)" = 0 ] ||
  bad "print-cuda with CUDA_HOME=$none is not 0"

# Said once per top-level make, by CUDA=auto only.
silent "CUDA=0" CUDA=0
silent "CUDA=sim" CUDA=sim
got=$( { env MAKELEVEL=1 make --no-print-directory -n BUILD="$tmp/b" CUDA=auto lib 2>&1 >/dev/null || true; } | grep '^CUDA=auto' || true)
[ -z "$got" ] || bad "a sub-make (MAKELEVEL=1) said: '$got'"
checks=$((checks + 1))

echo "script_cuda_auto: $checks checks (CUDA=auto resolves to $resolved here; GPU device node: $gpu_seen)"
