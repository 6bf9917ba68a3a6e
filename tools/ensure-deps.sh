#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Checks the build and test dependencies of localmap; installs them with apt-get when they are
# missing and we are root on a Debian-like system, otherwise says what to run.
# Usage: tools/ensure-deps.sh [-q] [--check]
#   (default)  what building and the demo need: g++, the MPI, cmocka, DLPack, pkg-config. Missing
#              ones stop the build (exit 1) unless they could be installed.
#   --check    also what `make check` runs with (make passes it for `make check`): doxygen (the
#              API references), abigail-tools (the ABI check), cmake (the CMake consumers), strace
#              (the node-local path check), gfortran (the Fortran bindings), cargo (the Rust
#              bindings, unless rustup's is in ~/.cargo/bin), python3-venv (the Python venv that
#              `make check` makes with pip), man-db (the man page checks) and, with OpenMPI,
#              libscalapack-openmpi-dev (the ScaLAPACK examples, tests/script_scalapack.sh),
#              scalapack-mpi-test and scalapack-test-common (the PBLAS testers of
#              tests/script_scalapack_dropin.sh).
#              Missing ones that cannot be installed here do not stop anything: the tests that
#              need them say SKIP, and this prints the apt-get line that would add them.
# Environment (make passes them): MPICC, MPICXX, LM_MPIRUN (the MPI's wrappers and launcher; with
# mpicc.mpich the MPICH packages are the ones wanted), DLPACK_INCLUDE_DIR (where dlpack/dlpack.h is),
# PYTHON (the interpreter the venv is made from, /usr/bin/python3).
set -eu

quiet=0 check=0
for a in "$@"; do
  case $a in
    -q) quiet=1 ;;
    --check) check=1 ;;
    *) echo "usage: $0 [-q] [--check]" >&2; exit 2 ;;
  esac
done

MPICC=${MPICC:-mpicc} MPICXX=${MPICXX:-mpicxx} LM_MPIRUN=${LM_MPIRUN:-mpirun}
PYTHON=${PYTHON:-/usr/bin/python3}
case $MPICC in
  *mpich*) MPI_PKGS="libmpich-dev mpich" ;;
  *) MPI_PKGS="libopenmpi-dev openmpi-bin" ;;
esac
PKGS="g++ $MPI_PKGS libcmocka-dev libdlpack-dev pkg-config"
DLPACK_H=${DLPACK_INCLUDE_DIR:-/usr/include}/dlpack/dlpack.h
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {  # packages...
  echo "deps: installing: $*" >&2
  apt-get update -qq
  # shellcheck disable=SC2068
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $@ >/dev/null
}

missing=""
for cmd in g++ "$MPICC" "$MPICXX" "$LM_MPIRUN" pkg-config; do
  command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"
done
for f in /usr/include/cmocka.h "$DLPACK_H"; do
  [ -f "$f" ] || missing="$missing $f"
done

if [ -n "$missing" ]; then
  echo "deps: missing:$missing" >&2
  if can_apt && [ -z "${LM_DEPS_RETRY:-}" ]; then
    apt-get update -qq
    echo "deps: installing: $PKGS" >&2
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS >/dev/null
    LM_DEPS_RETRY=1 exec sh "$0" "$@"
  fi
  echo "deps: please install them, e.g.:" >&2
  echo "  sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $PKGS'" >&2
  exit 1
fi
[ $quiet = 1 ] || echo "deps: ok ($MPICXX, $LM_MPIRUN, cmocka, dlpack, pkg-config)"
[ $check = 1 ] || exit 0

# What `make check` runs with: "tool package" pairs; a tool that is a file test starts with /.
test_tools() {
  echo "doxygen doxygen"
  echo "abidw abigail-tools"
  echo "abidiff abigail-tools"
  echo "cmake cmake"
  echo "strace strace"
  echo "gfortran gfortran"
  echo "man man-db"
  [ -x "$HOME/.cargo/bin/cargo" ] || echo "cargo cargo"
  "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 || echo "/python3-venv python3-venv"
  case $MPICC in *mpich*) ;; *)
    pkg-config --exists scalapack-openmpi 2>/dev/null || echo "/scalapack libscalapack-openmpi-dev"
    # ScaLAPACK's PBLAS testers and their data files (tests/script_scalapack_dropin.sh).
    [ -x /usr/lib/x86_64-linux-gnu/scalapack/openmpi-tests/PBLAS/dpb3tst ] &&
      [ -f /usr/share/scalapack/PBLAS/PDBLAS3TST.dat ] ||
      printf '%s\n' "/pblas-testers scalapack-mpi-test" "/pblas-testers scalapack-test-common" ;;
  esac
}
want=""
for pair in $(test_tools | tr ' ' ':'); do
  tool=${pair%%:*} pkg=${pair#*:}
  case $tool in
    /*) want="$want $pkg" ;;
    *) command -v "$tool" >/dev/null 2>&1 || want="$want $pkg" ;;
  esac
done
want=$(echo $want | tr ' ' '\n' | sort -u | tr '\n' ' ')
want=${want% }
if [ -z "$want" ]; then
  [ $quiet = 1 ] || echo "deps: test tools ok (doxygen, abigail-tools, cmake, strace, gfortran, cargo, python3-venv, man, scalapack, PBLAS testers)"
  exit 0
fi
if can_apt; then
  if apt_install $want; then
    [ $quiet = 1 ] || echo "deps: test tools installed: $want"
    exit 0
  fi
  echo "deps: apt-get could not install $want" >&2
fi
echo "deps: make check will SKIP what needs:$(printf ' %s' $want) (not installed; as root:" >&2
echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $want)" >&2
exit 0
