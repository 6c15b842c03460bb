#!/usr/bin/env bash
# Every symbol a pipebench shared library exports is a PB_API function or variable declared in
# include/pipebench/*.h: no pb__ internals, no ifunc resolvers (target_clones), nothing of a
# static dependency. Also: libpipebench leaves no pb_ symbol undefined (it needs nothing of the
# programs). Usage: exports.sh LIB.so [LIB.so ...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
inc="$here/../../include/pipebench"
fail=0
# The declared names: the identifier before the first '(' of each PB_API declaration (which may
# run over several lines), or before ';' for a variable.
declared=$(cat "$inc"/*.h | tr '\n' ' ' | grep -oE 'PB_API[^;{]*[;{]' |
  sed -E 's/\(.*//; s/[;{].*//; s/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*$/\1/' |
  grep -E '^pb_' | sort -u)
if [ "$(echo "$declared" | wc -l)" -lt 50 ]; then
  echo "FAIL: found only $(echo "$declared" | wc -l) PB_API declarations in $inc"; exit 1
fi
for lib in "$@"; do
  [ -f "$lib" ] || { echo "FAIL: $lib: no such library"; fail=1; continue; }
  # Linker-made markers every shared object has are not ours.
  exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' |
    grep -vxE '_init|_fini|__bss_start|_edata|_end' | sort -u)
  [ -n "$exported" ] || { echo "FAIL: $lib exports nothing (nm -D failed?)"; fail=1; continue; }
  extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
  if [ -n "$extra" ]; then
    echo "FAIL: $lib exports symbols that no include/pipebench header declares PB_API:"
    echo "$extra" | sed 's/^/  /'
    fail=1
  else
    echo "ok: $lib exports $(echo "$exported" | wc -l) symbols, all PB_API"
  fi
done
# The core library needs no pb_ symbol from anywhere else (the programs are above it).
core="$1"
undef=$(nm -D --undefined-only "$core" | awk '{print $NF}' | grep -E '^pb_' || true)
if [ -n "$undef" ]; then
  echo "FAIL: $core leaves pipebench symbols undefined (they would come from the programs):"
  echo "$undef" | sed 's/^/  /'
  fail=1
fi
exit $fail
