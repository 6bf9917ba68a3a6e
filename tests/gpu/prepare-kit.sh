#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Prepares the kit that tests/gpu/device-check.sh builds from on the GPU machine, which has nvcc,
# PyTorch, CuPy and the nvidia-nccl-cu13 and mpi4py wheels, but no OpenMPI, no CMocka, no DLPack
# headers, no network and no apt. Run it here (it needs pip and apt-get download, no root for
# either); it fills KIT (default build-device-kit/, ignored by git like every build-* folder):
#   openmpi/   the PyPI `openmpi` wheel, unzipped: mpicc, mpicxx, mpirun and mpi.h of a
#              relocatable Open MPI (its programs find their prefix from their own path)
#   sysroot/   Debian's libcmocka0, libcmocka-dev and libdlpack-dev, unpacked with dpkg -x
#   nccl/      this machine's nccl.h, used only when the GPU machine's NCCL wheel has no header
#   component/ liblocalmap-cuda.so.N, the device component built HERE (this machine's nvcc, CUDA
#              runtime and NCCL; sm_80, sm_90 and PTX) from this checkout: what a build machine
#              without a GPU ships; the device check loads it on the GPU machine
#              (tests/gpu/component-check.sh) beside the one it builds there. Required: the
#              script fails where it cannot build it (LM_KIT_COMPONENT=0 leaves it out)
#   MANIFEST   what was fetched and built: names, versions, sha256
# Carry it to the device run (`carry: ["build-device-kit"]`; about 25 MB unpacked) and run
#   bash tests/gpu/device-check.sh OUTDIR     (it finds the kit at build-device-kit/, or LM_KIT)
# Environment: LM_KIT_OPENMPI (the openmpi wheel's version, default 5.0.11), LM_KIT_PYTHON (the
# GPU machine's Python for the wheel tag, default 3.12), NCCL_H (default
# /usr/local/cuda/include/nccl.h), LM_KIT_COMPONENT (1; 0: no component), LM_KIT_JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=${1:-build-device-kit}
OMPI_VERSION=${LM_KIT_OPENMPI:-5.0.11}
PYVER=${LM_KIT_PYTHON:-3.12}
NCCL_H=${NCCL_H:-/usr/local/cuda/include/nccl.h}
DEBS="libcmocka0 libcmocka-dev libdlpack-dev"

rm -rf "$KIT"
mkdir -p "$KIT/dl" "$KIT/openmpi" "$KIT/sysroot" "$KIT/nccl/include"
KIT=$(cd "$KIT" && pwd)
echo "prepare-kit: fetching the openmpi $OMPI_VERSION wheel (PyPI) and $DEBS (apt-get download)"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$KIT/dl" "openmpi==$OMPI_VERSION"
# shellcheck disable=SC2086
(cd "$KIT/dl" && apt-get download $DEBS 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
for d in $DEBS; do ls "$KIT/dl/${d}"_*.deb >/dev/null; done  # every .deb arrived

python3 -m zipfile -e "$KIT"/dl/openmpi-*.whl "$KIT/openmpi"
chmod +x "$KIT"/openmpi/openmpi-*.data/data/bin/*
for f in "$KIT"/dl/*.deb; do dpkg -x "$f" "$KIT/sysroot"; done
rm -rf "$KIT/sysroot/usr/share"
[ -f "$NCCL_H" ] && cp "$NCCL_H" "$KIT/nccl/include/nccl.h"

# The device component, built here from this checkout (its own build tree, then only the .so kept).
component=""
if [ "${LM_KIT_COMPONENT:-1}" != 0 ]; then
  echo "prepare-kit: building the device component (make CUDA=1 device-component)"
  (unset MAKEFLAGS MFLAGS; make -s -j"${LM_KIT_JOBS:-2}" CUDA=1 BUILD="$KIT/build" device-component) ||
    { echo "prepare-kit: cannot build the device component here (nvcc and nccl.h: CUDA_HOME, NCCL_HOME; LM_KIT_COMPONENT=0 leaves it out)"; exit 1; }
  mkdir -p "$KIT/component"
  cp "$KIT"/build/lib/liblocalmap-cuda.so.* "$KIT/component/"
  rm -rf "$KIT/build"
  component=$(ls "$KIT"/component/liblocalmap-cuda.so.*)
fi

{
  echo "# device-check kit, prepared $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  (cd "$KIT/dl" && sha256sum -- *)
  [ -f "$KIT/nccl/include/nccl.h" ] && echo "nccl.h from $NCCL_H: NCCL $(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$NCCL_H")"
  if [ -n "$component" ]; then
    echo "component: $(basename "$component") of localmap $(git log -1 --format=%h 2>/dev/null || echo '?'), nvcc $("${CUDA_HOME:-/usr/local/cuda}"/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2), NEEDED $(readelf -d "$component" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
    (cd "$KIT/component" && sha256sum -- *)
  fi
} > "$KIT/MANIFEST"
rm -rf "$KIT/dl"
echo "prepare-kit: $KIT ($(du -sh "$KIT" | cut -f1)): $(grep -c ' ' "$KIT/MANIFEST") entries in MANIFEST"
