#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The documentation's code samples (issue 42): tools/check-samples.py extracts every fenced code
# block of README.md and docs/guide-*.md and every example block of docs/man-examples.txt (the man
# pages' EXAMPLE sections), compiles each against $BUILD (C and C++ with the MPI wrappers, Fortran
# with the module of `make fortran`, Rust as the examples of one crate that depends on
# bindings/rust/localmap by path, offline, Python with the venv's interpreter), runs the whole
# programs under tools/lm-mpirun at their np (2, or the np= of their info string) and checks what
# they print against the page (an `output` block after the sample, `prints:` comments); fragments
# (marked `fragment`) are compiled only. One PASS line per document; a sample that no longer
# compiles or prints something else fails it. Scratch files: $BUILD/samples.
# A language whose toolchain is missing (gfortran, cargo, the Python venv) is not checked: the
# script is then a SKIP naming it, after the other languages passed; with LM_REQUIRE_BINDINGS=1
# (CI) that is a failure. No python3 at all: SKIP (LM_REQUIRE_TOOLS=1: a failure).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
. tests/lm_test.sh

py=$(command -v python3 || true)
[ -n "$py" ] || lm_missing_tool "no python3 to run tools/check-samples.py (apt-get install python3)"
[ -e "$BUILD/lib/liblocalmap.so" ] || { echo "script_samples: no $BUILD/lib/liblocalmap.so (make lib BUILD=$BUILD)"; exit 1; }

out=$("$py" tools/check-samples.py --build "$BUILD" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "script_samples: FAIL (tools/check-samples.py exit status $rc)"; exit 1; }
while IFS= read -r line; do
  lm_defer_missing_binding "${line#LM-SAMPLES-MISSING: }"
done < <(grep '^LM-SAMPLES-MISSING: ' <<<"$out")
lm_finish "documentation samples: $(grep -c '^PASS ' <<<"$out") document(s) PASS"
