#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Packaging check: `make install` into a temporary prefix gives lib/liblocalmap.so.0,
# include/localmap.h and lib/pkgconfig/localmap.pc; the shared library exports lm_* symbols only
# and has SONAME liblocalmap.so.0; a C program built with nothing but
# `pkg-config --cflags --libs localmap` runs under mpirun -np 4; `make uninstall` removes it all.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
lib=$BUILD/lib/liblocalmap.so
if ldd "$lib" | grep -q libasan; then
  echo "script_install: sanitizer build; the packaging check runs in the plain build"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
unset MAKEFLAGS MFLAGS
make -s install PREFIX="$prefix" BUILD="$BUILD" >/dev/null
for f in lib/liblocalmap.so.0 lib/liblocalmap.so lib/liblocalmap.a include/localmap.h \
         include/localmap_mpi.h include/localmap.hpp lib/pkgconfig/localmap.pc; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
bad=$(nm -D --defined-only "$prefix/lib/liblocalmap.so.0" | awk '{print $3}' | grep -v '^lm_' | grep -v '^LOCALMAP_' || true)
[ -z "$bad" ] || { echo "symbols exported outside lm_*:"; echo "$bad"; exit 1; }
readelf -d "$prefix/lib/liblocalmap.so.0" | grep -q 'SONAME.*\[liblocalmap.so.0\]' || { echo "SONAME is not liblocalmap.so.0"; exit 1; }
echo "exports: $(nm -D --defined-only "$prefix/lib/liblocalmap.so.0" | grep -c ' lm_') lm_* symbols, nothing else"

cat > "$tmp/consumer.c" <<'C'
#include <localmap.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int r, n, wf, bad = 0;
  if (lm_init(&argc, &argv) || lm_world_rank(&r, &n) || lm_comm_world(&wf)) return 1;
  lm_mesh_t mesh;
  int64_t shape[2] = {n % 2 ? 1 : 2, n % 2 ? n : n / 2}, g[2] = {5, 3};
  if (lm_mesh_create(&mesh, wf, 2, shape, NULL)) return 2;
  double full[15], back[15];
  for (int i = 0; i < 15; ++i) full[i] = i;
  DLTensor gt = {full, {kDLCPU, 0}, 2, LM_FLOAT64, g, NULL, 0};
  DLTensor bt = {back, {kDLCPU, 0}, 2, LM_FLOAT64, g, NULL, 0};
  lm_placement_t pl[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
  lm_dist_tensor_t t;
  if (lm_dist_tensor_from_global(&t, mesh, &gt, pl, -1) || lm_dist_tensor_gather(t, -1, &bt)) {
    printf("rank %d: %s\n", r, lm_last_error_message());
    return 3;
  }
  for (int i = 0; i < 15; ++i) bad += back[i] != i;
  if (lm_dist_tensor_destroy(&t) || lm_mesh_destroy(&mesh) || lm_finalize()) return 4;
  if (r == 0) printf("consumer: %s (np %d, localmap %d)\n", bad ? "FAIL" : "OK", n, lm_get_version());
  return bad != 0;
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc "$tmp/consumer.c" $(pkg-config --cflags --libs localmap) -Wl,-rpath,"$prefix/lib" -o "$tmp/consumer"
bash tools/lm-mpirun 4 "$tmp/consumer"

make -s uninstall PREFIX="$prefix" BUILD="$BUILD" >/dev/null
left=$(find "$prefix" -type f | head -5)
[ -z "$left" ] || { echo "left after uninstall: $left"; exit 1; }
echo "install, pkg-config consumer at np 4, uninstall: OK"
