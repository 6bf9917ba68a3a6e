#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Rust bindings (bindings/rust): coverage of the C API, `cargo build --offline` and
# `cargo test --offline` with an empty crate cache (a fresh CARGO_HOME: no third-party crate can
# sneak in), the layout test, then the MPI tests and the masked-loss example under mpirun at np 2
# and 4; the example must print the C demo's loss. Cargo's target dir is $BUILD/rust-target.
# In a sanitizer build the Rust programs run with the ASan runtime preloaded.
# Exits 77 (reported as SKIP with the reason) when cargo is missing; with LM_REQUIRE_BINDINGS=1 (CI)
# that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
. tests/lm_test.sh
skip() { lm_missing_binding "$@"; }

sh tools/check-binding-coverage.sh bindings/rust '*.rs'

CARGO=${CARGO:-$(command -v cargo || true)}
[ -n "$CARGO" ] || { [ -x "$HOME/.cargo/bin/cargo" ] && CARGO=$HOME/.cargo/bin/cargo; } || true
[ -n "$CARGO" ] || { [ -x /root/.cargo/bin/cargo ] && CARGO=/root/.cargo/bin/cargo; } || true
[ -n "$CARGO" ] || skip "cargo not found (PATH, ~/.cargo/bin); install Rust (rustup) to test the Rust bindings"
PATH=$(dirname "$CARGO"):$PATH
"$CARGO" --version
if ldd "$BUILD/lib/liblocalmap.so" | grep -q libasan; then
  # A sanitizer build: the ASan runtime must come first, so the Rust programs (never cargo, rustc
  # or cc) run with it preloaded: through cargo's target runner, and mpirun's -x for the ranks.
  libasan=$(${CC:-cc} -print-file-name=libasan.so)
  [ -f "$libasan" ] || skip "sanitizer build ($BUILD), but no libasan.so to preload"
  host=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
  export "CARGO_TARGET_${host}_RUNNER=env LD_PRELOAD=$libasan"
  export LM_MPIRUN_FLAGS="${LM_MPIRUN_FLAGS:-} -x LD_PRELOAD=$libasan"
  echo "sanitizer build: Rust programs run with LD_PRELOAD=$libasan"
fi

cargo_home=$(mktemp -d)
trap 'rm -rf "$cargo_home"' EXIT
export CARGO_HOME=$cargo_home CARGO_NET_OFFLINE=true
export CARGO_TARGET_DIR=$ROOT/$BUILD/rust-target
export LOCALMAP_LIB_DIR=$ROOT/$BUILD/lib LOCALMAP_INCLUDE_DIR=$ROOT/include
cd bindings/rust
t0=$(date +%s)
"$CARGO" build --offline --all-targets --locked
t1=$(date +%s)
"$CARGO" test --offline --locked            # layout test; MPI tests as a singleton (np 1)
t2=$(date +%s)
echo "cargo build: $((t1 - t0)) s, cargo test: $((t2 - t1)) s"
[ -z "$(ls -A "$cargo_home/registry" 2>/dev/null)" ] || { echo "a crate was fetched into CARGO_HOME"; exit 1; }
mpi_test=$("$CARGO" test --offline --locked --no-run --message-format=json -p localmap --test mpi 2>/dev/null |
           grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4)
[ -x "$mpi_test" ] || { echo "cannot find the mpi test binary"; exit 1; }
cd "$ROOT"

c_loss() { bash tools/lm-mpirun "$1" "$BUILD/examples/demo" | sed -n 's/.*loss = \([0-9.eE+-]*\).*/\1/p'; }
for np in 2 4; do
  bash tools/lm-mpirun "$np" "$mpi_test"
  out=$(bash tools/lm-mpirun "$np" "$CARGO_TARGET_DIR/debug/examples/masked_loss")
  echo "$out"
  rust=$(echo "$out" | sed -n 's/.*loss = \([0-9.eE+-]*\).*/\1/p')
  c=$(c_loss "$np")
  [ -n "$rust" ] && [ "$rust" = "$c" ] || { echo "np $np: Rust masked loss '$rust' != C demo's '$c'"; exit 1; }
  echo "np $np: masked loss $rust, as the C demo"
done
out=$(bash tools/lm-mpirun 3 "$CARGO_TARGET_DIR/debug/examples/hello")
echo "$out"
[ "$(echo "$out" | grep -c 'gathered all 10')" = 3 ] || { echo "README's hello (Rust) failed"; exit 1; }
echo "rust bindings: OK"
