#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Rust bindings (bindings/rust): coverage of the C API, `cargo build --offline` and
# `cargo test --offline` with an empty crate cache (a fresh CARGO_HOME: no third-party crate can
# sneak in), the layout test, then the MPI tests and the masked-loss example under mpirun at np 2
# and 4 (the example must print the C demo's loss), the plan-info example at np 2 and 4 (PASS on
# every rank). Cargo's target dir is $BUILD/rust-target.
# Then a consumer crate outside the workspace, depending on `localmap` by path, built against a
# `make install` prefix with nothing but PKG_CONFIG_PATH set: it links liblocalmap statically
# (nothing of the prefix or the checkout at run time) and runs at np 3; without PKG_CONFIG_PATH
# its build warns that it links the checkout's build tree; with LOCALMAP_LINK=dynamic and the
# one-line build.rs the README shows, it runs against the prefix's liblocalmap.so.
# In a sanitizer build the Rust programs run with the ASan runtime preloaded, linked dynamically,
# and the consumer check is left to the plain build: the script is then a SKIP naming it.
# Exits 77 (reported as SKIP with the reason) when cargo is missing; with LM_REQUIRE_BINDINGS=1 (CI)
# that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
. tests/lm_test.sh
skip() { lm_missing_binding "$@"; }

# The safe crate: localmap-sys's declarations are generated from api/localmap.api (all of them).
sh tools/check-binding-coverage.sh bindings/rust/localmap/src '*.rs'

CARGO=${CARGO:-$(command -v cargo || true)}
[ -n "$CARGO" ] || { [ -x "$HOME/.cargo/bin/cargo" ] && CARGO=$HOME/.cargo/bin/cargo; } || true
[ -n "$CARGO" ] || { [ -x /root/.cargo/bin/cargo ] && CARGO=/root/.cargo/bin/cargo; } || true
[ -n "$CARGO" ] || skip "cargo not found (PATH, ~/.cargo/bin); install Rust (rustup) to test the Rust bindings"
PATH=$(dirname "$CARGO"):$PATH
"$CARGO" --version
# (ldd's output in a variable: `ldd | grep -q` fails under pipefail when grep exits first.)
lib_deps=$(ldd "$BUILD/lib/liblocalmap.so")
if [[ $lib_deps == *libasan* ]]; then
  # A sanitizer build: the ASan runtime must come first, so the Rust programs (never cargo, rustc
  # or cc) run with it preloaded: through cargo's target runner, and mpirun's -x for the ranks.
  libasan=$(${CC:-cc} -print-file-name=libasan.so)
  [ -f "$libasan" ] || skip "sanitizer build ($BUILD), but no libasan.so to preload"
  host=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
  export "CARGO_TARGET_${host}_RUNNER=env LD_PRELOAD=$libasan"
  export LM_MPIRUN_FLAGS="${LM_MPIRUN_FLAGS:-} -x LD_PRELOAD=$libasan"
  # The ASan-instrumented liblocalmap.a cannot go into a binary that preloads the runtime.
  export LOCALMAP_LINK=dynamic
  san=1
  echo "sanitizer build: Rust programs run with LD_PRELOAD=$libasan, linked to liblocalmap.so"
fi

if [[ $lib_deps == *libasan* || $lib_deps == *libubsan* ]]; then
  export LOCALMAP_LINK=dynamic san=1   # instrumented objects need the sanitizer runtimes linked
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
# Plan info and adjoints (examples/plan_info.rs): its own byte counts and data checks, PASS per
# rank (counted with grep -o: lines of different ranks may run together).
for np in 2 4; do
  out=$(bash tools/lm-mpirun "$np" "$CARGO_TARGET_DIR/debug/examples/plan_info")
  echo "$out"
  [ "$(grep -o 'plan info and adjoints: PASS' <<<"$out" | wc -l)" = "$np" ] || { echo "plan_info (Rust) failed at np $np"; exit 1; }
done
out=$(bash tools/lm-mpirun 3 "$CARGO_TARGET_DIR/debug/examples/hello")
echo "$out"
[ "$(echo "$out" | grep -c 'gathered all 10')" = 3 ] || { echo "the Rust guide's hello failed"; exit 1; }

# A consumer crate against an installed prefix (plain builds only).
if [ "${san:-0}" = 1 ]; then
  # Not a pass: the consumer check did not run (a skip naming it, after the checks above passed).
  lm_defer_skip_build "consumer crate against a make install prefix (static and dynamic linking): sanitizer build ($BUILD), it runs in the plain build"
  lm_finish "rust bindings: OK"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$cargo_home" "$tmp"' EXIT
prefix=$tmp/prefix
(unset MAKEFLAGS MFLAGS; make -s install PREFIX="$prefix" BUILD="$BUILD" MPI="${LM_MPI:-}" >/dev/null)
mk_consumer() {  # DIR [extra Cargo.toml lines]
  mkdir -p "$1/src"
  cp bindings/rust/localmap/examples/hello.rs "$1/src/main.rs"
  printf '[package]\nname = "consumer"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nlocalmap = { path = "%s" }\n%s' \
    "$ROOT/bindings/rust/localmap" "${2:-}" > "$1/Cargo.toml"
}
consumer_build() {  # DIR, then env assignments
  local dir=$1; shift
  (cd "$dir" && env -u LOCALMAP_LIB_DIR -u LOCALMAP_INCLUDE_DIR -u LOCALMAP_LINK -u PKG_CONFIG_PATH \
     CARGO_TARGET_DIR="$tmp/target" "$@" "$CARGO" build --offline 2>&1)
}
run3() {  # the Rust guide's hello at np 3, with no LD_LIBRARY_PATH
  local out
  out=$(env -u LD_LIBRARY_PATH bash tools/lm-mpirun 3 "$1")
  echo "$out"
  [ "$(echo "$out" | grep -c 'gathered all 10')" = 3 ] || { echo "the consumer $1 failed"; exit 1; }
}
mk_consumer "$tmp/c1"
consumer_build "$tmp/c1" PKG_CONFIG_PATH="$prefix/lib/pkgconfig" > "$tmp/c1.log" || { cat "$tmp/c1.log"; echo "consumer build failed"; exit 1; }
bin=$tmp/target/debug/consumer
grep -rqs "lib_dir=$prefix/lib" "$tmp/target/debug/build/"localmap-sys-*/output ||
  { cat "$tmp/c1.log"; echo "the consumer did not use the installed prefix"; exit 1; }
deps=$(ldd "$bin")
dyn=$(readelf -d "$bin")
if [[ $deps == *liblocalmap* ]] || [[ $dyn == *"$ROOT"* ]]; then
  echo "$deps"; readelf -d "$bin" | grep -i path || true
  echo "the consumer needs liblocalmap or the checkout at run time"; exit 1
fi
mv "$prefix" "$tmp/moved"   # nothing of the prefix is needed at run time
run3 "$bin"
mv "$tmp/moved" "$prefix"
echo "consumer crate: built against the prefix (PKG_CONFIG_PATH only), liblocalmap linked statically, runs at np 3"
consumer_build "$tmp/c1" > "$tmp/c1b.log" || { cat "$tmp/c1b.log"; echo "consumer build without PKG_CONFIG_PATH failed"; exit 1; }
grep -q "links the source tree's build" "$tmp/c1b.log" ||
  { cat "$tmp/c1b.log"; echo "no warning when the checkout's build tree is linked"; exit 1; }
echo "without PKG_CONFIG_PATH: $(grep -m1 -o "no installed localmap found[^;]*" "$tmp/c1b.log")"
# Dynamic linking with the Rust guide's one-line build.rs (it reads DEP_LOCALMAP_LIB_DIR).
mk_consumer "$tmp/c2" 'localmap-sys = { path = "'"$ROOT"'/bindings/rust/localmap-sys" }
'
printf 'fn main() { println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::env::var("DEP_LOCALMAP_LIB_DIR").unwrap()); }\n' > "$tmp/c2/build.rs"
consumer_build "$tmp/c2" PKG_CONFIG_PATH="$prefix/lib/pkgconfig" LOCALMAP_LINK=dynamic > "$tmp/c2.log" ||
  { cat "$tmp/c2.log"; echo "dynamic consumer build failed"; exit 1; }
deps=$(ldd "$bin")
[[ $deps == *"$prefix/lib/liblocalmap.so.1"* ]] || { echo "$deps"; echo "the dynamic consumer does not load the prefix's liblocalmap.so.1"; exit 1; }
run3 "$bin"
echo "consumer crate, LOCALMAP_LINK=dynamic + build.rs: loads $prefix/lib/liblocalmap.so.1, runs at np 3"
lm_finish "rust bindings: OK"
