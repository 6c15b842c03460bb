#!/usr/bin/env bash
# Issue 16, "the strongest peers, on large images": pipebench (bench/regions), tensorstore and
# zarr-python read the same OME-Zarr arrays in one run: whole images (images in index order) and
# random crops of EDGE x EDGE pixels (all channels; the same seeded sequence for every reader),
# with 1 thread and with all cores. Targets, as ratios printed in one table:
#   pipebench's per-image and per-crop p50 <= the peer's at the same thread count;
#   pipebench's multi-threaded whole-image decode of uncompressed chunks >= 50% of the memory-copy
#   bandwidth measured in the same run (pipebench calibrate's function, all cores).
# Sets (generated with `pipebench gen` into BENCH_DIR, a temporary folder unless given; kept
# there between runs when BENCH_DIR is set):
#   microscopy   the `run --preset microscopy` images: 200 x 3x1080x1080 uint16, gen's defaults
#                (Zarr v2, one chunk per plane, blosc-lz4)
#   large-bzstd  IMAGES x 3x4096x4096 uint16 in 512x512 chunks, blosc-zstd (Zarr v2)
#   large-zstd   the same, zstd (Zarr v2)
#   large-none   the same, uncompressed (Zarr v2): the memory-copy target
#   large-v3     the same as large-zstd in Zarr v3, 2x2 chunks per shard (only where tensorstore
#                is installed: zarr-python 2 reads v2 only)
#
# usage: bench/large_images.sh [BUILD_DIR] [IMAGES] [CROPS] [WHOLE_READS]
#   defaults: build 64 1000 (WHOLE_READS 0: max(IMAGES, 4 x threads) at each thread count, so
#   every thread reads several whole images one at a time, as the loader's workers read samples;
#   with each image read once, 12 images on 16 threads left 4 threads idle)
# env: SETS (default: all of the above that apply), THREADS (default 1,<cores>), EDGE (256),
#      PYTHONS (interpreters to look for peers in; default `command -v python3` and
#      /usr/bin/python3), BENCH_DIR; SIZE (4096x4096) and MICRO_ROWS (200) shrink the sets for a
#      quick check of the script itself
set -euo pipefail
build=${1:-build}; images=${2:-64}; crops=${3:-1000}; whole=${4:-0}
here=$(cd "$(dirname "$0")" && pwd)
cores=$(getconf _NPROCESSORS_ONLN)
threads=${THREADS:-1,$cores}
edge=${EDGE:-256}
pb=${PIPEBENCH_CLI:-$build/pipebench}
[[ -x $pb ]] || pb=$(command -v pipebench || true)
regions=$build/bench/regions
[[ -x $regions ]] || regions=$build/regions
[[ -x $pb && -x $regions ]] || { echo "large_images: no pipebench or regions under $build" >&2; exit 2; }

# Which interpreter measures which peer: the first that imports it.
pythons=${PYTHONS:-"$(command -v python3 || true) /usr/bin/python3"}
ts_py=""; zp_py=""; table_py=""
for py in $pythons; do
  [[ -x $py ]] || continue
  [[ -n $table_py ]] || table_py=$py
  [[ -z $ts_py ]] && "$py" -c 'import tensorstore' 2>/dev/null && ts_py=$py
  [[ -z $zp_py ]] && "$py" -c 'import zarr, numcodecs' 2>/dev/null && zp_py=$py
done
[[ -n $table_py ]] || { echo "large_images: no python3 to print the table with" >&2; exit 2; }
echo "peers: tensorstore ${ts_py:-(not installed)}; zarr-python ${zp_py:-(not installed)}"

default_sets="microscopy large-bzstd large-zstd large-none"
[[ -n $ts_py ]] && default_sets="$default_sets large-v3"
sets=${SETS:-$default_sets}
base=${BENCH_DIR:-}
if [[ -z $base ]]; then
  base=$(mktemp -d)
  trap 'rm -rf "$base"' EXIT
fi
mkdir -p "$base"

gen() { # SET
  local d=$base/$1
  [[ -f $d/manifest.json ]] && return 0
  case $1 in
    microscopy) "$pb" gen --out "$d" --rows "${MICRO_ROWS:-200}" --size 1080x1080 --channels 3 --dtype uint16 \
                  --formats ome-zarr ;;
    large-bzstd) set -- blosc-zstd "" ;;
    large-zstd) set -- zstd "" ;;
    large-none) set -- none "" ;;
    large-v3) set -- zstd "ome-zarr:zarr=3,ome-zarr:shard=1x1x1x2x2" ;;
    *) echo "large_images: unknown set $1" >&2; exit 1 ;;
  esac
  if [[ ! -f $d/manifest.json ]]; then
    "$pb" gen --out "$d" --rows "$images" --size "${SIZE:-4096x4096}" --channels 3 --dtype uint16 \
      --formats ome-zarr --chunk 512x512 --compression "$1" ${2:+--options "$2"}
  fi
}

# gen writes one image at a time: the sets are written side by side, one process each
pids=()
for s in $sets; do
  gen "$s" > "$base/$s.gen.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do
  wait "$p" || { cat "$base"/*.gen.log >&2; echo "large_images: gen failed" >&2; exit 2; }
done

out=$(mktemp)
for s in $sets; do
  d=$base/$s/ome-zarr
  echo "== $s: $(du -sh "$d" | cut -f1) in $d" >&2
  floor=0
  [[ $s == large-none ]] && floor=1 # uncompressed: also the floor of merely reading the files
  "$regions" "$d" --threads "$threads" --crops "$crops" --whole "$whole" --crop "$edge" \
    --floor "$floor" |
    sed "s/^{/{\"set\":\"$s\",/" | tee -a "$out"
  for peer in tensorstore zarr-python; do
    py=$ts_py; skip=zarr-python
    [[ $peer == zarr-python ]] && { py=$zp_py; skip=tensorstore; }
    [[ -n $py ]] || continue
    "$py" "$here/large_images_peers.py" "$d" --threads "$threads" --crops "$crops" \
      --whole "$whole" --crop "$edge" --skip "$skip" | sed "s/^{/{\"set\": \"$s\", /" | tee -a "$out"
  done
done

"$table_py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cal = {r["set"]: r for r in rows if "memcpy_gbps" in r}
pb = {(r["set"], r["op"], r["threads"]): r for r in rows if r.get("tool") == "pipebench"}
floors = {(r["set"], r["threads"]): r for r in rows if r.get("tool") == "file-floor"}
peers = [r for r in rows if r.get("tool", "pipebench") not in ("pipebench", "file-floor")
         and r["op"] != "open"]
opens = [r for r in rows if r.get("op") == "open"]
print("\nratios pipebench / peer at the same thread count (p50: lower is better, target <= 1.00;")
print("throughput: higher is better)")
print(f"{'set':12s} {'op':5s} {'thr':>3s} {'peer':26s} {'pb p50 us':>10s} {'peer p50':>10s} "
      f"{'p50 ratio':>9s} {'target':>7s} {'pb/s':>8s} {'peer/s':>8s} {'x thrpt':>7s}")
fails = 0
for r in peers:
    p = pb.get((r["set"], r["op"], r["threads"]))
    if p is None:
        continue
    ratio = p["p50_us"] / r["p50_us"]
    ok = ratio <= 1.0
    fails += not ok
    print(f"{r['set']:12s} {r['op']:5s} {r['threads']:3d} {r['tool']:26s} {p['p50_us']:10.0f} "
          f"{r['p50_us']:10.0f} {ratio:9.2f} {'<=1 ' + ('ok' if ok else 'MISS'):>7s} "
          f"{p['ops_per_s']:8.1f} {r['ops_per_s']:8.1f} {p['ops_per_s'] / r['ops_per_s']:7.2f}")
for s, c in cal.items():
    for (s2, op, t), p in pb.items():
        if s2 != s or op != "whole" or s != "large-none" or t == 1:
            continue
        f = p["mb_per_s"] / 1e3 / c["memcpy_mt_gbps"]
        ok = f >= 0.5
        fails += not ok
        print(f"{s:12s} whole {t:3d} {'memory copy (calibrate)':26s} {p['mb_per_s']:8.0f} MB/s of "
              f"{c['memcpy_mt_gbps'] * 1e3:8.0f} MB/s ({c['memcpy_threads']} threads): "
              f"{f * 100:5.1f}%  target >= 50% {'ok' if ok else 'MISS'}")
for (s, t), fl in floors.items():
    p = pb.get((s, "whole", t))
    if p:
        print(f"{s:12s} whole {t:3d} {'reading the chunk files':26s} {p['mb_per_s']:8.0f} MB/s of "
              f"{fl['mb_per_s']:8.0f} MB/s merely opening and reading the same files: "
              f"{p['mb_per_s'] / fl['mb_per_s'] * 100:5.1f}% (context, no target)")
for r in opens:
    print(f"{r['set']:12s} open  {r['threads']:3d} {r['tool']:26s} {r['per_array_us']:.0f} us per "
          f"array (opened before timing; not in the p50s)")
compared = sum(1 for r in peers if (r["set"], r["op"], r["threads"]) in pb)
if not compared:
    print("\nno peer measured: nothing to compare with")
print(f"\n{fails} target(s) missed" if fails else "\nall targets met" if compared else "")
PY
rm -f "$out"
