#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Writes the localmap(3) man page: docs/localmap.3.in with @VERSION@ filled in and @FUNCTIONS@
# replaced by every function of the public C headers (each LM_API declaration of localmap.h, each
# static inline helper of localmap_mpi.h), with the first sentence of its Doxygen comment. The list
# is generated from the headers, so it cannot go stale; tests/script_docs.sh checks it against the
# symbols the library exports.
# Usage: tools/gen-manpage.sh VERSION OUTPUT
set -eu
cd "$(dirname "$0")/.."
version=$1 out=$2
tmp=$out.tmp.$$
trap 'rm -f "$tmp" "$tmp.list"' EXIT

# name<TAB>brief for each function of a header.
list_functions() {
  awk '
    function flush_doc() { doc = "" }
    /\/\*\*/ && !in_doc {
      in_doc = 1; text = $0; sub(/.*\/\*\*<?/, "", text)
      if (text ~ /\*\//) { sub(/\*\/.*/, "", text); in_doc = 0; doc = text; next }
      doc = text; next
    }
    in_doc {
      text = $0
      if (text ~ /\*\//) { sub(/\*\/.*/, "", text); in_doc = 0 }
      sub(/^[ \t]*\*[ \t]?/, "", text)
      doc = doc " " text; next
    }
    /LM_API|^static inline/ {
      line = $0
      if (match(line, /lm_[a-z0-9_]+[ \t]*\(/)) {
        name = substr(line, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name)
        b = doc; gsub(/[ \t]+/, " ", b); sub(/^ /, "", b)
        # The first sentence: up to a period followed by a space or the end (not e.g., i.e.).
        gsub(/e\.g\./, "e\001g\001", b); gsub(/i\.e\./, "i\001e\001", b)
        if (match(b, /\.( |$)/)) b = substr(b, 1, RSTART)
        gsub(/\001/, ".", b)
        print name "\t" b
      }
      flush_doc(); next
    }
    /^[ \t]*$/ { next }
    /^[ \t]*\/\*/ { next }
    !/^[ \t]/ { flush_doc() }
  ' "$1"
}

{
  for h in include/localmap.h include/localmap_mpi.h; do
    printf '.SS %s\n' "$(basename "$h")"
    list_functions "$h" | while IFS="$(printf '\t')" read -r name brief; do
      # roff: a backslash is \e; a line must not start with . or '.
      brief=$(printf '%s' "$brief" | sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\\&&/" \
        -e 's/`\([^`]*\)`/\\fI\1\\fP/g')
      printf '.TP\n.B %s\n%s\n' "$name" "${brief:-(undocumented)}"
    done
  done
} > "$tmp.list"

sed -e "s|@VERSION@|$version|g" -e "/^@FUNCTIONS@\$/{
r $tmp.list
d
}" docs/localmap.3.in > "$tmp"
mv "$tmp" "$out"
