#!/usr/bin/env bash
# lib/ reaches nothing of programs/: no #include of a programs header (the library's include
# path has no programs/ folder, so the build would fail too) and no path into programs/ in its
# code (a helper it runs lives under lib/). Usage: layers.sh SOURCE_DIR
set -u
src=$1
fail=0
inc=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](\.\./)*(programs/|tracks/|infer/|revs/|report/|tools/|cli/)' \
  "$src/lib" "$src/include" --include='*.[ch]' --include='*.cu' --include='*.cuh' || true)
if [ -n "$inc" ]; then
  echo "FAIL: lib/ or include/ includes a programs header:"; echo "$inc"; fail=1
fi
# A string naming programs/ (a path built at compile time); comments may mention the folder.
path=$(grep -rnE '"[^"]*programs/' "$src/lib" --include='*.[ch]' --include='*.cu' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(\*|/\*|//)' || true)
if [ -n "$path" ]; then
  echo "FAIL: lib/ names a path under programs/:"; echo "$path"; fail=1
fi
[ $fail = 0 ] && echo "ok: lib/ names nothing of programs/"
exit $fail
