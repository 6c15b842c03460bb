#!/usr/bin/env bash
# Issue targets for the loader, as ratios measured in one run (track 2 of `pipebench run`):
#   preload, batch 16, 2 workers: >= 50% of the memory-copy limit and >= 10x the torch
#   DataLoader peer on the same cache; on-demand tiff and ome-zarr >= 5x the peer;
#   1 -> 2 workers >= 1.7x where not memory-bound; timer overhead < 1% of the shortest interval.
#   bench/loader.sh [BUILD_DIR] [OUT]      (extra `pipebench run` options via PIPEBENCH_RUN_ARGS)
# Also prints how opening and reading the TIFF files alone scales from 1 to 2 threads
# (bench/files_scaling): the limit for formats with one file per image.
set -euo pipefail
build=${1:-build}; out=${2:-results/bench-loader}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
"$build/pipebench" run --out "$out" --tracks 2 --formats "${PIPEBENCH_FORMATS:-raw,tiff,ome-zarr}" \
  --batch-sizes 16,64 --workers 0,1,2,4 --caches none,preload --repeats 3 --python "$py" ${PIPEBENCH_RUN_ARGS:-}
# The machine's own limit for one file per image: open + read + close of the same TIFF files
# with 1 and 2 threads, no parsing. Its 1 -> 2 ratio is what file-per-image loading can reach.
scaling=$(mktemp)
tool=$build/bench/files_scaling; [[ -x $tool ]] || tool=$build/files_scaling
data=$out/dataset-default/tiff
if [[ -x $tool && -d $data ]]; then "$tool" "$data" 1,2 | tee "$scaling"; fi
"$py" - "$out/data/pipebench_track2.csv" "$scaling" <<'PY'
import csv, json, statistics as st, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
floor = {r["threads"]: r for r in (json.loads(l) for l in open(sys.argv[2]) if l.strip())}
def med(loader, fmt, cache, bs, w, key="samples_per_sec"):
    v = [float(r[key]) for r in rows if r["loader"] == loader and r["format"] == fmt and
         r["cache"] == cache and r["batch_size"] == str(bs) and r["num_workers"] == str(w) and r[key]]
    return st.median(v) if v else float("nan")
def verdict(x, target, more=True):
    ok = x >= target if more else x < target
    return "met" if ok else "MISSED"
fmts = sorted({r["format"] for r in rows})
print("\ntarget                                             value    verdict")
for f in fmts:
    frac = med("pipebench", f, "preload", 16, 2, "memcpy_fraction")
    if frac == frac:
        print(f"preload {f:9s} b16 w2, of memcpy limit        {frac*100:7.1f}%  {verdict(frac, 0.5)} (>= 50%)")
    peer = med("torch-dataloader", f, "preload", 16, 2)
    if peer == peer:
        r = med("pipebench", f, "preload", 16, 2) / peer
        print(f"preload {f:9s} b16 w2 vs torch DataLoader     {r:7.1f}x  {verdict(r, 10)} (>= 10x)")
for f in ("tiff", "ome-zarr"):
    for bs in (16, 64):
        for w in (0, 1, 2, 4):
            peer = med("torch-dataloader", f, "none", bs, w)
            if peer == peer:
                r = med("pipebench", f, "none", bs, w) / peer
                print(f"on-demand {f:8s} b{bs:<3d} w{w} vs torch DataLoader {r:7.1f}x  {verdict(r, 5)} (>= 5x)")
def rounds(f, bs, w):  # samples/s per round (repeat), pipebench, no cache
    return {r["repeat"]: float(r["samples_per_sec"]) for r in rows if r["loader"] == "pipebench" and
            r["format"] == f and r["cache"] == "none" and r["batch_size"] == str(bs) and r["num_workers"] == str(w)}
for f in fmts:
    for bs in (16, 64):
        a, b = rounds(f, bs, 1), rounds(f, bs, 2)
        per = sorted(b[k] / a[k] for k in a if k in b)  # rounds are interleaved: compare within one
        if not per:
            continue
        m = st.median(per)
        print(f"1 -> 2 workers {f:9s} b{bs:<3d}                  {m:7.2f}x  {verdict(m, 1.7)} (>= 1.7x where not memory-bound;"
              f" median of {len(per)} rounds, {per[0]:.2f}-{per[-1]:.2f})")
if 2 in floor:
    print(f"1 -> 2 threads, open+read+close of the tiff files {floor[2]['vs_first']:7.2f}x  (the file-per-image floor's own scaling)")
tof = [float(r["timer_overhead_fraction"]) for r in rows if r.get("timer_overhead_fraction")]
if tof:
    print(f"timer overhead, worst row, of shortest interval  {max(tof)*100:7.3f}%  {verdict(max(tof), 0.01, more=False)} (< 1%)")
PY
rm -f "$scaling"
