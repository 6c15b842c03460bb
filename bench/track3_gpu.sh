#!/bin/sh
# Track 3 on the GPU: ResNet-50 (bfloat16 by default) fed by the loader with raw batches in
# pinned memory, converted on the GPU (pb_engine_forward_native), in one call on one machine:
#   1. the machine's limits (pipebench calibrate: H2D pinned/pageable, D2H, D2D, cuBLASLt peaks);
#   2. a generated dataset (ROWS images of SIZE uint16, the default preset's shape) in raw, TIFF
#      and OME-Zarr;
#   3. Track 3 with workers 1,2,4,8,16 over TIFF and OME-Zarr read on demand (cache none), and
#      from the preload cache; AU, data wait, images/s and the host-to-device copy bandwidth
#      per row;
#   4. a summary: per format the fewest workers reaching AU >= 90% (or the best AU), the
#      preload AU, and the loader's host-to-device copies as a share of the calibrated pinned
#      bandwidth (target >= 80%).
# usage: bench/track3_gpu.sh PIPEBENCH [OUT]         (OUT default results/track3_gpu)
# env:   MODEL (resnet50), DTYPE (bfloat16), BATCH (256), STEPS (40), ROWS (4096),
#        SIZE (100x100), WORKERS ("1 2 4 8 16"), FORMATS (tiff,ome-zarr), DATA (a folder from
#        pipebench gen to use instead of generating)
set -u
PB=${1:?usage: bench/track3_gpu.sh PIPEBENCH [OUT]}
OUT=${2:-results/track3_gpu}
MODEL=${MODEL:-resnet50}
DTYPE=${DTYPE:-bfloat16}
BATCH=${BATCH:-256}
STEPS=${STEPS:-40}
ROWS=${ROWS:-4096}
SIZE=${SIZE:-100x100}
WORKERS=${WORKERS:-1 2 4 8 16}
FORMATS=${FORMATS:-tiff,ome-zarr}
mkdir -p "$OUT" || exit 2

echo "== calibrate"
"$PB" calibrate --size-mb 64 --rounds 3 --out "$OUT/calibration.json" || exit $?

DATA=${DATA:-$OUT/data_gen}
if [ ! -d "$DATA" ]; then
  echo "== gen $ROWS x $SIZE uint16 -> $DATA"
  "$PB" gen --out "$DATA" --rows "$ROWS" --size "$SIZE" --formats "raw,$FORMATS" || exit $?
fi

run3() { # name workers formats
  "$PB" run --tracks 3 --data "$DATA" --formats "$3" --device cuda --model "$MODEL" \
    --dtype "$DTYPE" --t3-batch "$BATCH" --t3-workers "$2" --steps "$STEPS" --repeats 1 \
    --out "$OUT/$1" >"$OUT/$1.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { echo "track 3 ($1) failed, rc $rc:"; tail -n 5 "$OUT/$1.log"; }
  return $rc
}
for w in $WORKERS; do
  echo "== track 3, $FORMATS, $w workers"
  run3 "w$w" "$w" "raw,$FORMATS"
done

python3 - "$OUT" "$WORKERS" <<'PY'
import csv, json, os, sys
out, workers = sys.argv[1], [int(w) for w in sys.argv[2].split()]
cal = json.load(open(os.path.join(out, "calibration.json")))
g = cal.get("cuda", {})
pinned = (g.get("h2d_pinned_gbps") or {}).get("value")
print("GPU:", g.get("name", "?"), "|", g.get("versions", g.get("unavailable", "")))
for k in ("matmul_bf16_gflops", "matmul_tf32_gflops", "h2d_pinned_gbps", "h2d_pageable_gbps",
          "d2h_pinned_gbps", "d2d_gbps"):
    v = (g.get(k) or {}).get("value")
    print(f"  {k:22s} {v:12.1f}" if v is not None else f"  {k:22s} n/a")
rows = []
for w in workers:
    p = os.path.join(out, f"w{w}", "data", "pipebench_track3.csv")
    if os.path.exists(p):
        rows += list(csv.DictReader(l for l in open(p) if not l.startswith("#")))
def f(r, k):
    try: return float(r[k])
    except (KeyError, ValueError): return float("nan")
print(f"\n{'format':12s} {'cache':8s} {'workers':>7s} {'AU':>7s} {'wait':>7s} {'img/s':>9s} {'step ms':>8s} {'GPU ms':>7s} {'h2d GB/s':>9s} {'% pinned':>9s}")
for r in rows:
    h = f(r, "h2d_gbps")
    share = 100 * h / pinned if pinned else float("nan")
    print(f"{r['format']:12s} {r['cache']:8s} {r['num_workers']:>7s} {100*f(r,'accelerator_utilisation'):6.1f}% "
          f"{100*f(r,'data_wait_fraction'):6.1f}% {f(r,'images_per_sec'):9.0f} {1e3*f(r,'step_time_mean'):8.2f} "
          f"{1e3*f(r,'device_time_mean'):7.2f} {h:9.1f} {share:8.1f}%")
print("\nsummary (target: AU >= 90%; host-to-device >= 80% of calibrated pinned)")
for fmt in sorted({r["format"] for r in rows}):
    for cache in ("none", "preload"):
        rs = [r for r in rows if r["format"] == fmt and r["cache"] == cache]
        if not rs: continue
        ok = sorted((int(r["num_workers"]) for r in rs if f(r, "accelerator_utilisation") >= 0.9))
        best = max(rs, key=lambda r: f(r, "accelerator_utilisation"))
        h = [f(r, "h2d_gbps") for r in rs if f(r, "h2d_gbps") == f(r, "h2d_gbps")]
        hs = f", h2d median {sorted(h)[len(h)//2]:.1f} GB/s = {100*sorted(h)[len(h)//2]/pinned:.0f}% of pinned" if h and pinned else ""
        if ok:
            print(f"  {fmt:12s} cache {cache:8s}: AU >= 90% from {ok[0]} workers{hs}")
        else:
            print(f"  {fmt:12s} cache {cache:8s}: best AU {100*f(best,'accelerator_utilisation'):.1f}% "
                  f"with {best['num_workers']} workers{hs}")
PY
