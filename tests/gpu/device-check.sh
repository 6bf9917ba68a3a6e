#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The one script a GPU machine runs for localmap's device path (issues 9 and 18). The GPU machine
# has nvcc, PyTorch, CuPy and the nvidia-nccl-cu13 wheel but no OpenMPI, CMocka or DLPack, no
# network and no apt: everything else comes from the kit that tests/gpu/prepare-kit.sh fills here
# (build-device-kit/, carried along). Phases, each cut to what is left of a total budget
# (LM_DEVICE_CHECK_BUDGET, 420 s, so the whole script ends within 8 minutes; a phase with under
# 15 s left is skipped and counts as failed):
#   0. probe (seconds): the GPU, nvcc, the host compiler, make, MPI, CMocka, DLPack, NCCL (header
#      and library: NCCL_HOME / NCCL_LIB, else CUDA_HOME, else the Python wheel, libnccl.so.2
#      alone is fine), the CUDA runtime; printed as a table;
#   1. build: make CUDA=1 WERROR=0 gpu-progs into build-device/, for the GPU's compute capability
#      (the library, its device component liblocalmap-cuda.so.N, the device tests, lm-info);
#   2. unit_device_ops; the device component (tests/gpu/component-check.sh: the library NEEDs no
#      CUDA/NCCL, lm-info loads the component built here, and the one the kit carries, built by
#      prepare-kit.sh on a machine without a GPU, loads and runs test_gpu_api and
#      test_gpu_collectives at np 2 split); then tests/gpu at np 1, 2, 4 (ranks share the one GPU:
#      host-staged);
#   3. tests/gpu at np 2, 4 with each rank its own NCCL_HOSTID (tests/gpu/split-hosts.sh: real
#      NCCL on one GPU), LM_NCCL_TIMEOUT=60, NCCL_DEBUG=WARN, 40 random cases instead of 150;
#   4. bench_device at np 1, and at np 2 split (localmap next to NCCL's collectives of the same
#      bytes, algbw and busbw as nccl-tests computes them, and the device-to-device copy rate);
#      on request ("sendrecv") np 2 split again with LM_NCCL_COLLECTIVES=0 (localmap's grouped
#      ncclSend/ncclRecv, what it ran before issue 41);
#   5. (only when asked) sanitize: tests/gpu at np 1, 2 with every rank under compute-sanitizer's
#      memcheck (20 random cases).
# LM_DEVICE_CHECK_PHASES picks phases 1-5 by name (the build always runs): default
# "ops,component,shared,split,bench"; a second run in the same lease might ask for
# "split,sanitize,sendrecv" with LM_DEVICE_CHECK_SPLIT_CASES=150 (default 40).
# LM_EXPECT_GPU is set from the probe, so a device test cannot skip where a GPU was seen.
# Output: OUTDIR/device-check.tar.gz (every log, probe.txt, results.jsonl, bench_device.jsonl)
# and OUTDIR/summary.txt, also printed: what ran, passed, failed, skipped, and the bench table.
# Exit status: 0 when every phase passed; 1 when something failed, or a GPU was seen and a device
# test skipped; 2 when no GPU was seen (without --dry-run).
#   --dry-run: where no GPU is seen (CI), probe and package only, and exit 0.
#   LM_DEVICE_CHECK_CUDA=sim: a rehearsal on this machine: every phase against the simulated
#      CUDA runtime and NCCL (CUDA=sim, CUDASIM_TOPOLOGY=shared: one GPU shared by the ranks).
# Usage: tests/gpu/device-check.sh [--dry-run] OUTDIR       (from anywhere)
set -u
DRY=0
if [ "${1:-}" = --dry-run ]; then DRY=1; shift; fi
OUT=${1:?usage: tests/gpu/device-check.sh [--dry-run] OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
SIM=0; [ "${LM_DEVICE_CHECK_CUDA:-}" = sim ] && SIM=1
BUILD=${BUILD:-$([ $SIM = 1 ] && echo build-device-sim || echo build-device)}
KIT=${LM_KIT:-$ROOT/build-device-kit}
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
BUDGET=${LM_DEVICE_CHECK_BUDGET:-420}
PHASES=${LM_DEVICE_CHECK_PHASES:-ops,component,shared,split,bench}
SPLIT_CASES=${LM_DEVICE_CHECK_SPLIT_CASES:-40}
WORK=$ROOT/$BUILD/device-check
rm -rf "$WORK" && mkdir -p "$WORK"
RESULTS=$WORK/results.jsonl SUMMARY=$WORK/summary.txt
: > "$RESULTS"; : > "$SUMMARY"
status=0

note() { echo "[device-check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$SUMMARY"; }

# ------------------------------------------------------------------------------ 0. probe
PROBE=$WORK/probe.txt
row() { printf '%-10s %-4s %s\n' "$1" "$2" "$3" | tee -a "$PROBE"; }
first_line() { "$@" 2>&1 | head -n 1; }

probe_gpu() {
  GPU_SEEN=0 CC_ARCH=""
  if [ $SIM = 1 ]; then GPU_SEEN=1; row gpu yes "simulated (tests/sim, CUDA=sim rehearsal)"; return; fi
  local l="nvidia-smi: not found"
  command -v nvidia-smi >/dev/null && l=$(timeout 15 nvidia-smi -L 2>&1 | head -n 1)
  case $l in GPU*) GPU_SEEN=1 ;; esac
  [ $GPU_SEEN = 0 ] && ls /dev/nvidia[0-9]* >/dev/null 2>&1 && l="$l (/dev/nvidia* present)"
  CC_ARCH=$(timeout 15 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
  row gpu "$([ $GPU_SEEN = 1 ] && echo yes || echo no)" "${l:-nvidia-smi: no output}${CC_ARCH:+, sm_$CC_ARCH}"
  [ $GPU_SEEN = 1 ] && timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$PROBE" 2>&1
}

probe_tools() {
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")}
  row nvcc "$([ -x "$CUDA_HOME/bin/nvcc" ] && echo yes || echo no)" "$CUDA_HOME/bin/nvcc $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*')"
  row c++ "$(command -v c++ >/dev/null && echo yes || echo no)" "$(first_line c++ --version)"
  row make "$(command -v make >/dev/null && echo yes || echo no)" "$(first_line make --version)"
  row python3 "$(command -v python3 >/dev/null && echo yes || echo no)" "$(first_line python3 --version)"
}

probe_mpi() {
  local p; p=$(ls -d "$KIT"/openmpi/openmpi-*.data/data 2>/dev/null | head -n 1)
  if [ -n "$p" ] && [ -x "$p/bin/mpicc" ]; then
    MPICC=$p/bin/mpicc MPICXX=$p/bin/mpicxx MPIRUN=$p/bin/mpirun
  else
    MPICC=$(command -v mpicc || echo mpicc) MPICXX=$(command -v mpicxx || echo mpicxx)
    MPIRUN=$(command -v mpirun || echo mpirun)
  fi
  local v; v=$(first_line "$MPIRUN" --version)
  MPI_OK=0; "$MPICC" --showme:version >/dev/null 2>&1 && [ -n "$v" ] && MPI_OK=1
  row mpi "$([ $MPI_OK = 1 ] && echo yes || echo no)" "$MPICC, $v"
}

probe_headers() {
  SYSROOT=$KIT/sysroot
  CMOCKA_INC="" CMOCKA_LIB="" DLPACK_INC=""
  if [ -f "$SYSROOT/usr/include/cmocka.h" ]; then
    CMOCKA_INC=$SYSROOT/usr/include CMOCKA_LIB=$SYSROOT/usr/lib/x86_64-linux-gnu
  elif [ -f /usr/include/cmocka.h ]; then CMOCKA_INC=/usr/include; fi
  for d in "$SYSROOT/usr/include" /usr/include /usr/local/include; do
    [ -f "$d/dlpack/dlpack.h" ] && { DLPACK_INC=$d; break; }
  done
  row cmocka "$([ -n "$CMOCKA_INC" ] && echo yes || echo no)" "${CMOCKA_INC:-not found (run tests/gpu/prepare-kit.sh and carry the kit)}"
  row dlpack "$([ -n "$DLPACK_INC" ] && echo yes || echo no)" "${DLPACK_INC:-not found}"
}

# NCCL's header and library: NCCL_HOME/NCCL_LIB, CUDA_HOME, the Python wheel (libnccl.so.2,
# maybe no header: then the kit's nccl.h).
probe_nccl() {
  if [ -z "${NCCL_LIB:-}" ]; then
    local h=${NCCL_HOME:-$CUDA_HOME} w
    for d in "$h/lib64" "$h/lib"; do ls "$d"/libnccl.so* >/dev/null 2>&1 && { NCCL_LIB=$d; break; }; done
    if [ -z "${NCCL_LIB:-}" ] && command -v python3 >/dev/null; then
      w=$(timeout 20 python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
for r in roots:
    libs = sorted(glob.glob(os.path.join(r, "nvidia", "**", "libnccl.so*"), recursive=True))
    if libs:
        hdrs = glob.glob(os.path.join(r, "nvidia", "**", "include", "nccl.h"), recursive=True)
        print(os.path.dirname(libs[0]), os.path.dirname(os.path.dirname(hdrs[0])) if hdrs else "")
        break
PY
)
      NCCL_LIB=${w%% *}; [ -z "${NCCL_HOME:-}" ] && NCCL_HOME=${w#* }
    fi
  fi
  NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}
  [ -f "$NCCL_HOME/include/nccl.h" ] || NCCL_HOME=$KIT/nccl
  local ok=no; [ -f "$NCCL_HOME/include/nccl.h" ] && ls "${NCCL_LIB:-/nonexistent}"/libnccl.so* >/dev/null 2>&1 && ok=yes
  row nccl $ok "header $NCCL_HOME/include/nccl.h, library $(ls "${NCCL_LIB:-/nonexistent}"/libnccl.so* 2>/dev/null | head -n 1)"
}

# The CUDA runtime for -lcudart: CUDA_HOME's libcudart.so, else a link to libcudart.so.N there.
probe_cudart() {
  CUDA_LIBDIR=""
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
    [ -e "$d/libcudart.so" ] && { CUDA_LIBDIR=$d; break; }
    local v; v=$(ls "$d"/libcudart.so.[0-9]* 2>/dev/null | head -n 1)
    if [ -n "$v" ]; then mkdir -p "$WORK/lib"; ln -sf "$v" "$WORK/lib/libcudart.so"; CUDA_LIBDIR=$WORK/lib; break; fi
  done
  row cudart "$([ -n "$CUDA_LIBDIR" ] && echo yes || echo no)" "${CUDA_LIBDIR:-no libcudart.so under $CUDA_HOME}"
}

# The device component the kit carries (tests/gpu/prepare-kit.sh: built on a machine without a
# GPU, as a release would be), and what the kit's MANIFEST says it was built with.
probe_component() {
  KIT_COMPONENT=$(ls "$KIT"/component/liblocalmap-cuda.so.* 2>/dev/null | head -n 1)
  local what="none: the kit carries no device component (tests/gpu/prepare-kit.sh builds one)"
  [ -n "$KIT_COMPONENT" ] &&
    what="$KIT_COMPONENT ($(sed -n 's/^component: //p' "$KIT/MANIFEST" 2>/dev/null | head -n 1))"
  row component "$([ -n "$KIT_COMPONENT" ] && echo yes || echo no)" "$what"
}

probe() {
  echo "== probe: what this machine has (kit: $KIT)" | tee "$PROBE"
  probe_gpu; probe_tools; probe_mpi; probe_headers; probe_component
  if [ $SIM = 0 ]; then probe_nccl; probe_cudart; fi
  git log -1 --oneline >> "$PROBE" 2>/dev/null
  BUILDABLE=1
  grep -qE '^(nvcc|c\+\+|make|mpi|cmocka|dlpack|nccl|cudart) +no' "$PROBE" && BUILDABLE=0
  [ $SIM = 1 ] && ! grep -qE '^(c\+\+|make|mpi|cmocka|dlpack) +no' "$PROBE" && BUILDABLE=1
  note "probe: GPU $([ $GPU_SEEN = 1 ] && echo seen || echo 'not seen: no GPU on this machine'), $([ $BUILDABLE = 1 ] && echo buildable || echo 'NOT buildable (see the table)')"
}

# ------------------------------------------------------------------------------ phases
# phase NAME LIMIT LOG COMMAND...: runs with a timeout cut to the budget; records
# {"phase","rc","seconds","passed","failed","skipped","log"} in results.jsonl.
phase() {
  local name=$1 limit=$2 log=$3 t rc line p f s left
  shift 3
  t=$(date +%s); left=$(( BUDGET - (t - T0) ))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "skipped: the budget of ${BUDGET}s is spent" > "$WORK/$log"; rc=124
  else
    timeout -k 5 "$limit" "$@" > "$WORK/$log" 2>&1; rc=$?
  fi
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$WORK/$log" | tail -n 1)
  p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
  f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
  s=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
  printf '{"phase": "%s", "rc": %d, "seconds": %d, "passed": %s, "failed": %s, "skipped": %s, "log": "%s"}\n' \
    "$name" "$rc" $(( $(date +%s) - t )) "${p:-null}" "${f:-null}" "${s:-null}" "$log" >> "$RESULTS"
  note "$name: rc=$rc${line:+, $line} ($log)"
  [ "${s:-0}" != 0 ] && [ $GPU_SEEN = 1 ] && { note "$name: a device test SKIPPED on a machine with a GPU"; rc=1; }
  return $rc
}

make_vars() {
  MAKE_ARGS=(BUILD="$BUILD" WERROR=0 MPICC="$MPICC" MPICXX="$MPICXX" MPIRUN="$MPIRUN"
             DLPACK_INCLUDE_DIR="$DLPACK_INC" CPPFLAGS="-I$CMOCKA_INC"
             LDFLAGS="${CMOCKA_LIB:+-L$CMOCKA_LIB -Wl,-rpath,$CMOCKA_LIB}")
  if [ $SIM = 1 ]; then MAKE_ARGS+=(CUDA=sim); return; fi
  MAKE_ARGS+=(CUDA=1 CUDA_HOME="$CUDA_HOME" CUDA_LIBDIR="$CUDA_LIBDIR" NCCL_HOME="$NCCL_HOME"
              NCCL_LIB="$NCCL_LIB" ${CC_ARCH:+CUDA_ARCHS=$CC_ARCH})
}

# The environment of every run: the kit's launcher, the expectation, no SKIP allowed.
run_env() {
  export BUILD LM_MPIRUN=$MPIRUN LM_MPI_FLAVOR=openmpi LM_EXPECT_GPU=$GPU_SEEN LM_TEST_GPU_ONLY=1
  [ -n "${CMOCKA_LIB:-}" ] && export LD_LIBRARY_PATH=$CMOCKA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [ $SIM = 1 ] && export CUDASIM_TOPOLOGY=shared CUDASIM_DEVICES=1
  return 0
}

wants() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }

# compute-sanitizer's memcheck around every rank of the device tests: np 1 (NCCL) and np 2
# (ranks sharing the GPU: host-staged), fewer random cases (the checker slows each launch).
# Failed API calls are not reported: NCCL probes kernels for other architectures at init
# (cudaErrorNoKernelImageForDevice, 2026-12-04), and test_gpu_api asks for too much memory on
# purpose; memcheck's errors are bad device memory accesses.
phase_sanitize() {
  local cs=$CUDA_HOME/bin/compute-sanitizer
  [ $SIM = 1 ] && { note "sanitize: not on the simulator"; return 0; }
  [ -x "$cs" ] || { note "sanitize: no $cs"; return 1; }
  LM_GPU_TEST_WRAPPER="$cs --tool memcheck --report-api-errors no --error-exitcode 86 --print-limit 100" LM_TEST_TIMEOUT=150 \
    NPS="1 2" LM_GPU_CASES=20 phase sanitize-memcheck 300 sanitize.log bash tests/run-tests.sh 'test_gpu_*'
  local rc=$?
  cp -r "$BUILD/test-logs" "$WORK/test-logs-sanitize" 2>/dev/null
  return $rc
}

run_phases() {
  make_vars; run_env
  if ! phase build 240 build.log make -j"$JOBS" "${MAKE_ARGS[@]}" gpu-progs; then
    tail -n 30 "$WORK/build.log"; status=1; return
  fi
  if wants ops; then
    phase unit_device_ops 30 unit_device_ops.log "$BUILD/tests/unit_device_ops" || status=1
  fi
  if wants component; then
    local kc=$KIT_COMPONENT
    [ $SIM = 1 ] && kc=n/a
    KIT_COMPONENT=$kc LD_LIBRARY_PATH=${CUDA_LIBDIR:+$CUDA_LIBDIR:}${NCCL_LIB:+$NCCL_LIB:}${LD_LIBRARY_PATH:-} \
      LM_TEST_TIMEOUT=90 LM_NCCL_TIMEOUT=60 phase component 120 component.log \
      bash tests/gpu/component-check.sh || status=1
  fi
  if wants shared; then
    LM_TEST_TIMEOUT=90 NPS="1 2 4" phase check-gpu 150 check-gpu.log \
      bash tests/run-tests.sh 'test_gpu_*' || status=1
    cp -r "$BUILD/test-logs" "$WORK/test-logs-shared" 2>/dev/null
  fi
  if wants split; then
    LM_TEST_TIMEOUT=90 NPS="2 4" LM_NCCL_SPLIT_HOSTS=1 LM_NCCL_TIMEOUT=60 NCCL_DEBUG=WARN \
      LM_GPU_CASES=$SPLIT_CASES phase check-gpu-split-hosts 150 check-gpu-split.log \
      bash tests/run-tests.sh 'test_gpu_*' || status=1
    cp -r "$BUILD/test-logs" "$WORK/test-logs-split" 2>/dev/null
  fi
  if wants sanitize; then phase_sanitize || status=1; fi
  wants bench && run_bench
  return 0
}

run_bench() {
  local mib1=1,16,256 mib2=1,16,128
  [ $SIM = 1 ] && mib1=1,16 mib2=1,4  # the simulator copies at a few GB/s: the sizes of a smoke test
  phase bench-np1 45 bench-np1.log bash tools/lm-mpirun 1 "$BUILD/bench/bench_device" --mib $mib1 || status=1
  LM_NCCL_TIMEOUT=60 NCCL_DEBUG=WARN phase bench-np2-split 60 bench-np2-split.log \
    bash tools/lm-mpirun 2 bash tests/gpu/split-hosts.sh "$BUILD/bench/bench_device" --mib $mib2 || status=1
  if wants sendrecv; then
    LM_NCCL_COLLECTIVES=0 LM_NCCL_TIMEOUT=60 NCCL_DEBUG=WARN phase bench-np2-split-sendrecv 60 \
      bench-np2-split-sendrecv.log bash tools/lm-mpirun 2 bash tests/gpu/split-hosts.sh \
      "$BUILD/bench/bench_device" --mib $mib2 || status=1
  fi
  grep -h '^{' "$WORK"/bench-np*.log > "$WORK/bench_device.jsonl" 2>/dev/null
}

# ------------------------------------------------------------------------------ report
bench_table() {
  [ -s "$WORK/bench_device.jsonl" ] || { echo "(no bench results)"; return; }
  python3 - "$WORK/bench_device.jsonl" <<'PY' 2>/dev/null || cat "$WORK/bench_device.jsonl"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("%-10s %2s %8s %-10s %5s %9s %8s %8s %-18s %9s %8s %8s %6s %8s" % ("case", "np", "MiB",
      "transport", "colls", "lm_ms", "lm_alg", "lm_bus", "baseline", "base_ms", "base_alg",
      "base_bus", "ratio", "copy"))
for r in rows:
    print("%-10s %2d %8.1f %-10s %5s %9.3f %8.2f %8.2f %-18s %9.3f %8.2f %8.2f %6.2f %8.1f" % (
          r["case"], r["np"], r["bytes"] / 2**20, r["transport"], r.get("lm_collectives", "?"),
          r["lm_ms"], r["lm_algbw_GBps"], r["lm_busbw_GBps"], r["baseline"], r["baseline_ms"],
          r["baseline_algbw_GBps"], r["baseline_busbw_GBps"], r.get("ratio", 0.0),
          r.get("copy_GBps", 0.0)))
PY
}

report() {
  {
    echo "== device-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname), $JOBS cores, $(( $(date +%s) - T0 )) s, status $status"
    cat "$PROBE"
    echo "== log:"
    sed 's/^/  /' "$SUMMARY"
    echo "== phases (rc, passed / failed / skipped):"
    sed 's/^/  /' "$RESULTS"
    grep -h -E '^(FAIL|SKIP) ' "$WORK"/check-gpu*.log 2>/dev/null | sed 's/^/  /'
    echo "== bench_device (GB/s: algbw, busbw as nccl-tests; ratio: lm_ms / base_ms; colls:"
    echo "   LM_NCCL_COLLECTIVES; copy: device-to-device cudaMemcpyAsync of the same bytes)"
    bench_table
  } > "$OUT/summary.txt"
  cp "$OUT/summary.txt" "$WORK/summary-final.txt"
  tar czf "$OUT/device-check.tar.gz" -C "$ROOT/$BUILD" device-check 2>/dev/null
  cat "$OUT/summary.txt"
  echo "== packaged: $OUT/device-check.tar.gz ($(du -h "$OUT/device-check.tar.gz" | cut -f1)), $OUT/summary.txt"
}

note "start: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $JOBS cores, budget ${BUDGET}s$([ $SIM = 1 ] && echo ', CUDA=sim rehearsal')"
probe
if [ $GPU_SEEN = 0 ]; then
  note "no GPU on this machine: nothing built or run$([ $DRY = 1 ] && echo ' (dry run: probe and packaging only)')"
  [ $DRY = 1 ] || status=2
elif [ $BUILDABLE = 0 ]; then
  note "a GPU, but this machine cannot build localmap (see the probe): nothing run"; status=1
else
  run_phases
fi
note "done in $(( $(date +%s) - T0 ))s, status $status"
report
exit $status
