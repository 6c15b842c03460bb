#!/usr/bin/env bash
# Native batches (the images' own pixels, for a device that converts them itself) against
# float32 batches and against a plain memcpy of the same bytes, in one run.
#   bench/loader_native.sh [BUILD_DIR] [OUT]     (ROWS, BATCH, ROUNDS override the defaults)
# Makes ROWS 100x100 uint16 images (raw) and runs bench/loader_native.c over them: cache preload
# (batch assembly alone) and none (the raw format's read included), workers 0 and 2.
# Target: native batch assembly from the preload cache at the speed of memcpy of its pixels
# (>= 0.9x, ratio of total times over interleaved rounds).
set -euo pipefail
build=${1:-build}; out=${2:-results/bench-loader-native}
rows=${ROWS:-4000}; batch=${BATCH:-256}; rounds=${ROUNDS:-15}
tool=$build/bench/loader_native; [[ -x $tool ]] || tool=$build/loader_native
mkdir -p "$out"
"$build/pipebench" gen --out "$out/data" --rows "$rows" --size 100x100 --dtype uint16 \
  --formats raw --seed 1 >/dev/null
"$tool" "$out/data/images.pbraw" "$batch" "$rounds"
