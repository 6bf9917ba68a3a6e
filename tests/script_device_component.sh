#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The device component (issue 41; docs/DESIGN.md, "The component"), in any build:
#  - liblocalmap.so NEEDs no CUDA or NCCL library (readelf -d), liblocalmap.a references no CUDA
#    or NCCL symbol, and localmap.pc / the CMake package name none: a CPU-only user gets no CUDA;
#  - where the build made the component ($BUILD/lib/liblocalmap-cuda.so.N: CUDA=1, auto with the
#    toolkit, sim), it NEEDs the CUDA runtime and NCCL (or the simulator), has its SONAME, and
#    exports lm_device_component_entry and nothing else; lm-info loads it from there and reports
#    the CUDA and NCCL versions;
#  - with LM_DEVICE_COMPONENT naming a missing file, device calls fail with LM_ERR_NOT_SUPPORTED
#    naming the file and dlopen's words (test_device_api, LM_EXPECT_GPU=0) and host tests pass
#    (test_tensor, test_reshard_directed at np 2); lm-info says why it did not load;
#  - a library that is no component (libm), one that offers another interface version, and the
#    component of another localmap version (both built here from a few lines) are refused, each
#    with its reason;
#  - a component beside the library whose own dependency is missing (as a component without its
#    CUDA runtime or NCCL): a device call names that component and the missing library;
#  - a user's program linked with liblocalmap.a in bin/ of an install layout, its RUNPATH
#    $ORIGIN/../lib (a DT_RUNPATH, what -Wl,-rpath gives), finds the component in lib/ while
#    dlopen's caller is another library (a preloaded dlopen interceptor, as ASan's is; in a
#    sanitizer build ASan's own), whose RUNPATH is not the program's.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
py=$(command -v python3 || true)
[ -n "$py" ] || lm_missing_tool "python3 is needed to read lm-info --json"
command -v readelf >/dev/null || lm_missing_tool "readelf is needed (apt-get install binutils)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "script_device_component: FAIL: $*"; exit 1; }
checks=0
CUDA_RE='lib(cudart|cuda|nccl|cudasim)[.-]'

# 1. The core: no CUDA or NCCL, whatever the build.
core=$BUILD/lib/liblocalmap.so
dyn=$(readelf -d "$core")
needed=$(grep NEEDED <<<"$dyn" | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')
! grep -qE "$CUDA_RE" <<<"$needed" || fail "$core NEEDs a CUDA/NCCL library: $needed"
undef=$(nm -u "$BUILD/lib/liblocalmap.a" | awk '{print $2}' | grep -E '^(cuda|nccl|cudasim)' | sort -u || true)
[ -z "$undef" ] || fail "liblocalmap.a references CUDA/NCCL symbols: $undef"
for f in "$BUILD/localmap.pc" "$BUILD/cmake/localmapConfig.cmake"; do
  ! grep -qE 'cudart|nccl|cudasim' "$f" || fail "$f names CUDA or NCCL: $(grep -E 'cudart|nccl|cudasim' "$f")"
done
checks=$((checks + 3))
echo "core: NEEDED $needed; no CUDA/NCCL symbol in liblocalmap.a, none in localmap.pc or the CMake package"

# 2. The component, where this build made one.
comp=$(ls "$BUILD"/lib/liblocalmap-cuda.so.* 2>/dev/null | head -n 1 || true)
info_json() { env "$@" "$BUILD/bin/lm-info" --json; }
if [ -n "$comp" ]; then
  cdyn=$(readelf -d "$comp")
  grep -q "(SONAME).*\[$(basename "$comp")\]" <<<"$cdyn" || fail "$comp: SONAME is not $(basename "$comp")"
  grep NEEDED <<<"$cdyn" | grep -qE 'lib(cudart|cudasim)' || fail "$comp NEEDs no CUDA runtime"
  grep NEEDED <<<"$cdyn" | grep -qE 'lib(nccl|cudasim)' || fail "$comp NEEDs no NCCL"
  exported=$(nm -D --defined-only "$comp" | awk '$2 == "T" {sub(/@.*/, "", $3); print $3}' | tr '\n' ' ')
  [ "$exported" = "lm_device_component_entry " ] || fail "$comp exports '$exported'"
  "$py" - "$(info_json)" "$(readlink -f "$comp")" <<'PY' || fail "lm-info does not report the component loaded"
import json, sys
d = json.loads(sys.argv[1])["device_component"]
assert d["loaded"] and d["path"] == sys.argv[2] and d["why"] == "", d
assert "CUDA" in d["built_with"] and "NCCL" in d["built_with"], d
PY
  text=$("$BUILD/bin/lm-info")
  grep -q "^device component: loaded from $(readlink -f "$comp") (built with .*CUDA [0-9]" <<<"$text" ||
    fail "lm-info text: $(grep 'device component' <<<"$text")"
  grep -qE '^CUDA: CUDA runtime [0-9]+\.[0-9]+, driver .*, NCCL [0-9]+\.[0-9]+\.[0-9]+' <<<"$text" ||
    fail "lm-info text: $(grep '^CUDA' <<<"$text")"
  checks=$((checks + 4))
  echo "component: $comp (NEEDED $(grep NEEDED <<<"$cdyn" | grep -oE 'lib(cudart|nccl|cudasim)[^]]*' | tr '\n' ' '))"
else
  echo "component: none in this build (a CUDA=0 build makes none)"
fi

# 3. The component unreachable: device calls refused with the reason, host calls unaffected.
missing=$tmp/nowhere/liblocalmap-cuda.so.1
for prog in test_device_api test_tensor test_reshard_directed; do
  out=$(LM_DEVICE_COMPONENT=$missing LM_EXPECT_GPU=0 timeout -k 5 120 \
        bash tools/lm-mpirun 2 "$BUILD/tests/$prog" 2>&1) || { echo "$out" | tail -n 30; fail "$prog at np 2 without the component"; }
done
"$py" - "$(info_json LM_DEVICE_COMPONENT="$missing")" "$missing" <<'PY' || fail "lm-info without the component"
import json, sys
d = json.loads(sys.argv[1])["device_component"]
assert not d["loaded"] and "LM_DEVICE_COMPONENT=" + sys.argv[2] in d["why"], d
assert "No such file or directory" in d["why"], d
PY
checks=$((checks + 4))
echo "LM_DEVICE_COMPONENT=$missing: device calls refused with the reason, host tests pass (np 2)"

# 4. Refused components: no entry point; another interface version; another localmap version.
libm=$(gcc -print-file-name=libm.so.6)
[ -f "$libm" ] || libm=$(ldconfig -p | awk '/libm\.so\.6 / {print $NF; exit}')
fake() {  # fake NAME VERSION_EXPR ENTRY_OFFERS
  cat > "$tmp/$1.cpp" <<CPP
#include "localmap.h"
#include "mem/device_api.hpp"
static lm_device_api_t api = {LM_DEVICE_API_MAGIC, LM_DEVICE_API_VERSION, sizeof(lm_device_api_t),
                              $2, "fake", nullptr};
extern "C" __attribute__((visibility("default"))) const lm_device_api_t *
lm_device_component_entry(uint32_t v) { return $3 ? &api : nullptr; }
CPP
  g++ -std=c++17 -shared -fPIC -Iinclude -Isrc $DLPACK_FLAGS -o "$tmp/$1.so" "$tmp/$1.cpp"
}
DLPACK_FLAGS=""
dl=$(pkg-config --variable=dlpack_includedir "$BUILD/localmap.pc" 2>/dev/null || true)
[ -n "$dl" ] && DLPACK_FLAGS="-I$dl"
fake other_version "LM_VERSION_CODE + 1" 1
fake no_interface "LM_VERSION_CODE" "v == 99"
expect_refused() {  # expect_refused FILE WORDS...
  local file=$1 json; shift
  json=$(info_json LM_DEVICE_COMPONENT="$file")
  "$py" - "$json" "$@" <<'PY' || fail "LM_DEVICE_COMPONENT=$file: not refused with: $*"
import json, sys
d = json.loads(sys.argv[1])["device_component"]
assert not d["loaded"] and all(w in d["why"] for w in sys.argv[2:]), d
PY
  checks=$((checks + 1))
}
expect_refused "$libm" "is no localmap device component" "lm_device_component_entry"
expect_refused "$tmp/no_interface.so" "does not offer version 1 of the device interface"
expect_refused "$tmp/other_version.so" "is the device component of localmap" "install both of one build"
echo "refused: a library without the entry point, another interface version, another localmap version"

# 5. Beside the library, a component that needs a library that is gone: a copy of the core and
# such a component in a folder of their own, a program that asks for kDLCUDA's transport.
mkdir -p "$tmp/lib" "$tmp/dep"
echo 'int lm_missing_dep(void) { return 1; }' > "$tmp/dep/dep.c"
gcc -shared -fPIC -o "$tmp/dep/liblm_missing_dep.so" "$tmp/dep/dep.c"
g++ -std=c++17 -shared -fPIC -Iinclude -Isrc $DLPACK_FLAGS -o "$tmp/lib/$(basename "${comp:-liblocalmap-cuda.so.1}")" \
  "$tmp/other_version.cpp" -Wl,--no-as-needed -L"$tmp/dep" -llm_missing_dep
rm -f "$tmp/dep/liblm_missing_dep.so"
cp "$BUILD/lib/liblocalmap.so.1" "$tmp/lib/liblocalmap.so.1"
cat > "$tmp/why.c" <<'C'
#include <localmap.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int wf = 0, t = -1;
  int64_t one[1] = {1};
  lm_mesh_t m = NULL;
  if (lm_init(&argc, &argv) || lm_comm_world(&wf) || lm_mesh_create(&m, wf, 1, one, NULL)) return 2;
  lm_status_t st = lm_mesh_transport(m, kDLCUDA, &t);
  printf("status %d: %s\n", (int)st, lm_last_error_message());
  int bad = lm_mesh_destroy(&m) || lm_finalize();
  return bad ? 3 : st == LM_ERR_NOT_SUPPORTED ? 0 : 1;
}
C
mpicc=${MPICC:-mpicc${LM_MPI:+.$LM_MPI}}  # the build's MPI (make check passes LM_MPI)
# A sanitizer build's library needs its runtime first: the program is built with the same flags.
san=()
if lm_lib_links 'libasan|libubsan'; then san=(-fsanitize=address -fsanitize=undefined); fi
"$mpicc" "${san[@]}" -Iinclude $DLPACK_FLAGS -o "$tmp/why" "$tmp/why.c" -L"$BUILD/lib" -llocalmap
out=$(LD_LIBRARY_PATH=$tmp/lib "$tmp/why" 2>&1) || fail "a broken component beside the library: $out"
for w in "$tmp/lib/liblocalmap-cuda.so." "liblm_missing_dep.so" "cannot open shared object file"; do
  [[ $out == *"$w"* ]] || fail "a broken component beside the library: '$out' lacks '$w'"
done
checks=$((checks + 1))
echo "a component beside the library without its dependency: $out"

# 6. A static program (liblocalmap.a) in bin/ with the RUNPATH $ORIGIN/../lib, the component in
# lib/ (the other-version one: refused, so the message says which file was found, in any build),
# and dlopen called from a library without that RUNPATH: ASan's interceptor does this; elsewhere a
# preloaded one that forwards to the real dlopen. A bare dlopen of the name would not find lib/.
mkdir -p "$tmp/inst/bin" "$tmp/inst/lib"
cp "$tmp/other_version.so" "$tmp/inst/lib/$(basename "${comp:-liblocalmap-cuda.so.1}")"
"$mpicc" "${san[@]}" -Iinclude $DLPACK_FLAGS -o "$tmp/inst/bin/why" "$tmp/why.c" \
  "$BUILD/lib/liblocalmap.a" -lstdc++ -lm -ldl -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'
readelf -d "$tmp/inst/bin/why" | grep -q '(RUNPATH).*\[\$ORIGIN/\.\./lib\]' ||
  fail "the static program has no RUNPATH \$ORIGIN/../lib: $(readelf -d "$tmp/inst/bin/why" | grep -i path)"
preload=() via="ASan's interceptor"
if [ ${#san[@]} -eq 0 ]; then  # ASan must come first: there its own interceptor is the one
  cat > "$tmp/shim.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
void *dlopen(const char *file, int mode) {
  static void *(*real)(const char *, int);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dlopen");
  return real(file, mode);
}
C
  gcc -shared -fPIC -o "$tmp/shim.so" "$tmp/shim.c" -ldl
  preload=(LD_PRELOAD="$tmp/shim.so") via="a preloaded shim"
fi
out=$(env -u LD_LIBRARY_PATH "${preload[@]}" "$tmp/inst/bin/why" 2>&1) ||
  fail "a static program with RUNPATH \$ORIGIN/../lib, dlopen interposed: $out"
found=$(readlink -f "$tmp/inst/lib")/$(basename "${comp:-liblocalmap-cuda.so.1}")
for w in "$found is the device component of localmap" "install both of one build"; do
  [[ $out == *"$w"* ]] || fail "a static program with RUNPATH \$ORIGIN/../lib, dlopen interposed: '$out' lacks '$w'"
done
checks=$((checks + 2))
echo "a static program in bin/ (RUNPATH \$ORIGIN/../lib), dlopen called from $via: found $found"
echo "script_device_component: $checks checks"
