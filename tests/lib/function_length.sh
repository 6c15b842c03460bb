#!/usr/bin/env bash
# House rule (style.md): no function in lib/ or programs/ over 120 lines. The checker first proves
# it finds a 121-line function and passes a 120-line one in a small tree of its own, then holds
# the repository to the rule.
# usage: function_length.sh PYTHON SOURCE_DIR
set -u
py=$1 src=$2
checker=$src/scripts/check_function_length.py
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fails=0
body() { # NAME LINES: a C function of exactly LINES lines, opening to closing brace
  local i
  printf 'static int %s(int x) {\n' "$1"
  for ((i = 0; i < $2 - 2; i++)); do printf '  x += %d;\n' "$i"; done
  printf '}\n\n'
}
mkdir -p "$work/lib/a" "$work/programs/b"
{ body fits 120; body also_fits 12; } >"$work/lib/a/ok.c"
"$py" "$checker" "$work" >"$work/out" 2>&1
[[ $? -eq 0 ]] && echo "ok   a 120-line function passes" || { echo "FAIL a 120-line function was refused"; cat "$work/out"; fails=1; }
body too_long 121 >"$work/programs/b/long.cu"
"$py" "$checker" "$work" >"$work/out" 2>&1
rc=$?
if [[ $rc -eq 1 ]] && grep -q '^programs/b/long.cu:1: too_long is 121 lines (limit 120)$' "$work/out"; then
  echo "ok   a 121-line function is named, with its file and line"
else
  echo "FAIL a 121-line function (exit $rc):"; cat "$work/out"; fails=1
fi
"$py" "$checker" "$src" && echo "ok   the repository keeps the rule" || fails=1
exit $fails
