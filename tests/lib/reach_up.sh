#!/usr/bin/env bash
# The layer rule is a build error: a lib/ source that includes a programs header does not compile
# with libpipebench's include path, while the same source compiles with the programs' own.
# Usage: reach_up.sh CC SOURCE_DIR "LIB_INCLUDE_DIRS;..."
set -u
cc=$1 src=$2 dirs=$3
args=()
IFS=';' read -ra list <<<"$dirs"
for d in "${list[@]}"; do [ -n "$d" ] && args+=("-I$d"); done
out=$("$cc" -std=c11 -fsyntax-only "${args[@]}" "$src/tests/lib/reach_up.c" 2>&1)
rc=$?
if [ $rc = 0 ]; then
  echo "FAIL: a lib/ file including tracks/ranks.h compiled with libpipebench's include path:"
  printf '  %s\n' "${args[@]}"
  exit 1
fi
if ! echo "$out" | grep -q 'tracks/ranks.h'; then
  echo "FAIL: the probe failed for another reason:"; echo "$out"; exit 1
fi
"$cc" -std=c11 -fsyntax-only "${args[@]}" -I"$src/programs" "$src/tests/lib/reach_up.c" ||
  { echo "FAIL: the probe does not compile even with programs/ on the path"; exit 1; }
echo "ok: libpipebench's include path refuses a programs header"
