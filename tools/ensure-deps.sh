#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Checks the build and test dependencies of localmap; installs them with apt-get when they are
# missing and we are root on a Debian-like system, otherwise stops with the command to run.
# Usage: tools/ensure-deps.sh [-q]
# Environment (make passes them): MPICC, MPICXX, LM_MPIRUN (the MPI's wrappers and launcher; with
# mpicc.mpich the MPICH packages are the ones wanted), DLPACK_INCLUDE_DIR (where dlpack/dlpack.h is).
set -eu

MPICC=${MPICC:-mpicc} MPICXX=${MPICXX:-mpicxx} LM_MPIRUN=${LM_MPIRUN:-mpirun}
case $MPICC in
  *mpich*) MPI_PKGS="libmpich-dev mpich" ;;
  *) MPI_PKGS="libopenmpi-dev openmpi-bin" ;;
esac
PKGS="g++ $MPI_PKGS libcmocka-dev libdlpack-dev pkg-config"
DLPACK_H=${DLPACK_INCLUDE_DIR:-/usr/include}/dlpack/dlpack.h
APT_CMD="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $PKGS"

missing=""
for cmd in g++ "$MPICC" "$MPICXX" "$LM_MPIRUN" pkg-config; do
  command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"
done
for f in /usr/include/cmocka.h "$DLPACK_H"; do
  [ -f "$f" ] || missing="$missing $f"
done

if [ -z "$missing" ]; then
  [ "${1:-}" = "-q" ] || echo "deps: ok ($MPICXX, $LM_MPIRUN, cmocka, dlpack, pkg-config)"
  exit 0
fi

echo "deps: missing:$missing" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ -z "${LM_DEPS_RETRY:-}" ]; then
  echo "deps: installing: $PKGS" >&2
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS >/dev/null
  LM_DEPS_RETRY=1 exec sh "$0" "$@"
fi

echo "deps: please install them, e.g.:" >&2
echo "  sudo sh -c '$APT_CMD'" >&2
exit 1
