#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Doxygen's INPUT_FILTER for the Fortran module (docs/Doxyfile.fortran): the file with each line
# `include "x.inc"` replaced by bindings/fortran/x.inc, so that Doxygen reads the generated parts
# inside the module: their public procedures are documented there, the private ones hidden.
awk '/^ *include "/ { f = $2; gsub(/"/, "", f); while ((getline l < ("bindings/fortran/" f)) > 0) print l; next }
     { print }' "$1"
