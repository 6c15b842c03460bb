#!/bin/sh
# Every OME-Arrow layout of ome-parquet, both ways between pipebench and pyarrow, on a machine
# that has pyarrow (the lent GPU machine: pyarrow 25; pipebench's own machines have none).
# pipebench -> pyarrow: each layout written by `pipebench gen`, read and checked by pyarrow;
# pyarrow -> pipebench: each shape the ome-arrow package writes, built with pyarrow, read by
# `pipebench inspect` and its CRC-32s checked. One line per check; exit 0 when all pass.
#
# usage, from the repository root, with a pack made by scripts/device_pack.sh BUILD .devpack:
#   sh bench/oa_layouts_device.sh [PACK_DIR]          (PACK_DIR default .devpack)
# or against a build here:   PIPEBENCH=build/pipebench sh bench/oa_layouts_device.sh
set -u
if [ -z "${PIPEBENCH:-}" ] && [ -n "${PIPEBENCH_PACK:-}" ] && [ -x "$PIPEBENCH_PACK/bin/pipebench" ]; then
  PIPEBENCH="$PIPEBENCH_PACK/bin/pipebench" # a pack unpacked already
elif [ -z "${PIPEBENCH:-}" ]; then
  # a POSIX shell passes no arguments to `.`: the unpacking script reads them from $@
  set -- --unpack "${1:-.devpack}" /tmp/pbpack
  . scripts/device_pack.sh || { echo "oa_layouts: cannot unpack" >&2; exit 2; }
  PIPEBENCH="$PIPEBENCH_PACK/bin/pipebench"
fi
# /usr/bin/python3 may lack numpy there: the first python3 on PATH that has numpy and pyarrow
PY=""
for p in "$(command -v python3)" /usr/local/bin/python3 /opt/conda/bin/python3 /usr/bin/python3; do
  [ -x "$p" ] && "$p" -c 'import numpy, pyarrow' 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "oa_layouts: no python3 with numpy and pyarrow" >&2; exit 2; }
work=$(mktemp -d /tmp/pb-oa-layouts-XXXXXX) || exit 2
trap 'rm -rf "$work"' EXIT INT TERM
echo "pipebench: $("$PIPEBENCH" --version 2>&1 | head -n 1); python: $PY"
"$PY" bench/oa_layouts_pyarrow.py "$work" "$PIPEBENCH"
