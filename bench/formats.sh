#!/usr/bin/env bash
# Issue target: random single-image reads (warm cache) of N 100x100 uint16 images per format,
# side by side with tifffile and zarr-python on the same files in the same run, and sequential
# decode as a fraction of the memory-copy limit.
#   bench/formats.sh [BUILD_DIR] [IMAGES] [READS]
set -euo pipefail
build=${1:-build}; images=${2:-10000}; reads=${3:-2000}
py=${PB_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
d=${BENCH_DIR:-$(mktemp -d)/formats}
if [[ ! -f $d/manifest.json ]]; then
  "$build/pipebench" gen --out "$d" --rows "$images" --size 100x100 --dtype uint16 \
    --formats raw,tiff,ome-zarr,oa-dataset,ome-parquet,duckdb
fi
out=$(mktemp)
"$build/bench/bench_formats" "$d" "$reads" | tee "$out"
"$py" "$here/formats_vs_peers.py" "$d" "$reads" | tee -a "$out"
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cal = rows[0]; fm = {r["format"]: r for r in rows if "format" in r}; peers = {r["peer"]: r for r in rows if "peer" in r}
print("\nformat        p50 us   p95 us   images/s   seq MB/s  of memcpy(1 thread)")
for f, r in fm.items():
    print(f"{f:12s} {r['p50_us']:8.1f} {r['p95_us']:8.1f} {r['images_per_s']:10.0f} {r['seq_mb_per_s']:10.1f}  {r['seq_memcpy_fraction']*100:5.1f}%")
for p, r in peers.items():
    print(f"{p:12s} {r['p50_us']:8.1f} {r['p95_us']:8.1f} {r['images_per_s']:10.0f}")
def ratio(a, b):
    return fm[a]["images_per_s"] / peers[b]["images_per_s"] if a in fm and b in peers else float("nan")
print(f"\ntiff vs tifffile:        {ratio('tiff', 'tifffile'):.1f}x  (target >= 10x)")
print(f"ome-zarr vs zarr-python: {ratio('ome-zarr', 'zarr-python'):.1f}x  (target >= 10x)")
for f in ("oa-dataset", "ome-parquet", "duckdb"):
    if f in fm and "tiff" in fm:
        print(f"{f} p50 / tiff p50: {fm[f]['p50_us']/fm['tiff']['p50_us']:.1f}x  (target <= 5x)")
PY
