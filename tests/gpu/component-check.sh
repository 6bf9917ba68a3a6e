#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The device component on a GPU machine (tests/gpu/device-check.sh, phase "component"; issue 41):
#   1. the build's liblocalmap.so NEEDs no CUDA or NCCL library, and the build made the component;
#   2. lm-info (this build's) loads that component, reports the CUDA and NCCL versions it found and
#      at least one GPU (where LM_EXPECT_GPU=1);
#   3. KIT_COMPONENT, the component tests/gpu/prepare-kit.sh built on a machine without a GPU and
#      the kit carries (n/a: on the simulator; empty: a FAIL, the kit must carry one): lm-info
#      loads it through LM_DEVICE_COMPONENT, and test_gpu_api and
#      test_gpu_collectives pass with it at np 2 (split hosts: real NCCL on one GPU): the binary a
#      build machine ships works against this machine's driver, CUDA runtime and NCCL.
# Prints one line per check and "<N> passed, <N> failed, <N> skipped" last; exit status 0 when
# nothing failed. Environment: BUILD (build-device), KIT_COMPONENT, LM_EXPECT_GPU, and the
# run-tests.sh environment device-check.sh sets (LM_MPIRUN, ...).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-device}
passed=0 failed=0 skipped=0
ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }

core=$BUILD/lib/liblocalmap.so
if readelf -d "$core" 2>/dev/null | grep NEEDED | grep -qE 'lib(cudart|cuda|nccl|cudasim)[.-]'; then
  bad "$core NEEDs CUDA or NCCL: $(readelf -d "$core" | grep NEEDED | tr -s ' ' | cut -d' ' -f6 | tr '\n' ' ')"
else
  ok "$core NEEDs no CUDA or NCCL library"
fi
comp=$(ls "$BUILD"/lib/liblocalmap-cuda.so.* 2>/dev/null | head -n 1)
[ -n "$comp" ] && ok "the build made $comp" || bad "the build made no device component in $BUILD/lib"

# lm_info LABEL [ENV...]: lm-info loads a component and sees what LM_EXPECT_GPU says.
lm_info() {
  local label=$1 out; shift
  out=$(env "$@" "$BUILD/bin/lm-info" 2>&1)
  echo "$out" | sed -n '1,4p;/GPUs:/p' | sed "s/^/  [$label] /"
  if ! grep -q '^device component: loaded from' <<<"$out"; then bad "$label: lm-info did not load it"; return; fi
  if [ "${LM_EXPECT_GPU:-0}" = 1 ] && ! grep -qE 'GPUs: +[1-9]' <<<"$out"; then
    bad "$label: lm-info sees no GPU"; return
  fi
  ok "$label: lm-info loads it ($(grep '^CUDA:' <<<"$out"))"
}
lm_info "built here"

if [ "${KIT_COMPONENT:-}" = n/a ]; then
  echo "n/a  the kit's prebuilt component (a CUDA build): not on the simulator"
elif [ -z "${KIT_COMPONENT:-}" ]; then
  bad "the kit carries no device component (tests/gpu/prepare-kit.sh builds it where nvcc is)"
elif [ ! -f "$KIT_COMPONENT" ]; then
  bad "KIT_COMPONENT=$KIT_COMPONENT: no such file"
else
  lm_info "kit" LM_DEVICE_COMPONENT="$KIT_COMPONENT"
  log=$BUILD/test-logs/component-kit.log
  mkdir -p "$BUILD/test-logs"
  if LM_DEVICE_COMPONENT=$KIT_COMPONENT NPS=2 LM_NCCL_SPLIT_HOSTS=1 LM_TEST_GPU_ONLY=1 \
       bash tests/run-tests.sh test_gpu_api test_gpu_collectives >"$log" 2>&1; then
    ok "the kit's component: test_gpu_api and test_gpu_collectives at np 2 ($(tail -n 1 "$log"))"
  else
    bad "the kit's component: tests failed ($log):"; grep -E '^(FAIL|    \|)' "$log" | head -n 20
  fi
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
