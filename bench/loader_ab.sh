#!/usr/bin/env bash
# Two builds of pipebench side by side on Track 2 (the loader), in alternating rounds on one
# dataset, to show that a change kept the loader's speed: samples/s of every configuration from
# each build (median over rounds) and the ratio B/A with the rounds' spread.
#
# usage: bench/loader_ab.sh PIPEBENCH_A PIPEBENCH_B [OUT]       (OUT default $TMPDIR/loader_ab)
# env:   ROUNDS (3), FORMATS (raw,tiff,ome-zarr), WORKERS (0,1,4), CACHES (none,preload),
#        BATCHES (16,64), LIB_A / LIB_B (folders put first on LD_LIBRARY_PATH for each build)
# The dataset is written by build A's `gen` (1000 x 100x100 uint16, the default preset), so both
# builds read the same files whatever their writers do.
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh" # ab_setup, run_build
ab_setup loader_ab "$@"
run_build A gen --out "$out/data" --rows 1000 --size 100x100 --formats "${FORMATS:-raw,tiff,ome-zarr}" >/dev/null
for ((r = 1; r <= rounds; r++)); do
  for w in A B; do
    run_build "$w" run --data "$out/data" --out "$out/$w-$r" --tracks 2 --formats "${FORMATS:-raw,tiff,ome-zarr}" \
      --batch-sizes "${BATCHES:-16,64}" --workers "${WORKERS:-0,1,4}" --caches "${CACHES:-none,preload}" \
      --repeats 1 --no-peer >"$out/$w-$r.log" 2>&1 || { echo "loader_ab: build $w failed (round $r):"; tail -5 "$out/$w-$r.log"; exit 2; }
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, glob, statistics as st, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(w, r):
    f = glob.glob(f"{out}/{w}-{r}/data/pipebench_track2.csv")
    return [x for x in csv.DictReader(l for l in open(f[0]) if not l.startswith("#"))] if f else []
key = lambda x: (x["format"], x["cache"], x["batch_size"], x["num_workers"])
val = {}
for w in "AB":
    for r in range(1, rounds + 1):
        for x in rows(w, r):
            if x.get("loader", "pipebench") == "pipebench" and x["samples_per_sec"]:
                val.setdefault(key(x), {}).setdefault(w, []).append(float(x["samples_per_sec"]))
print(f"{'format':9s} {'cache':8s} {'batch':>5s} {'wk':>3s} {'A samples/s':>12s} {'B samples/s':>12s} {'B/A':>6s}  rounds' B/A")
ratios = []
for k in sorted(val):
    a, b = val[k].get("A", []), val[k].get("B", [])
    if not a or not b: continue
    ra = st.median(b) / st.median(a)
    ratios.append(ra)
    per = " ".join(f"{y / x:.2f}" for x, y in zip(a, b))
    print(f"{k[0]:9s} {k[1]:8s} {k[2]:>5s} {k[3]:>3s} {st.median(a):12.0f} {st.median(b):12.0f} {ra:6.2f}  {per}")
if ratios:
    print(f"median B/A over {len(ratios)} configurations: {st.median(ratios):.3f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
PY
