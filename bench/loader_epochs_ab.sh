#!/usr/bin/env bash
# Two builds of pipebench side by side on Track 3 fed from a small JPEG image folder, where an
# epoch has few batches (by default 4 of 128 for 512 images), so the loader crosses an epoch
# boundary every few steps: images/s from each build (median over alternating rounds) and the
# ratio B/A with each round's. Made to show what running ahead into the next epoch gains over
# draining the pipeline at every epoch's end.
#
# usage: bench/loader_epochs_ab.sh PIPEBENCH_A PIPEBENCH_B [OUT]   (OUT default $TMPDIR/loader_epochs_ab)
# env:   ROUNDS (3), ROWS (512), BATCH (128), WORKERS (2), STEPS (60), EMULATE_MS (1),
#        LIB_A / LIB_B (folders put first on LD_LIBRARY_PATH per build)
# The image folder is written by build A's `gen`, so both builds read the same files.
set -euo pipefail
source "$(dirname "$0")/ab_lib.sh" # ab_setup, run_build
ab_setup loader_epochs_ab "$@"
run_build A gen --out "$out/data" --preset imagenet --rows "${ROWS:-512}" --size 224x224 \
  --options gen:sizes=fixed >"$out/gen.log" 2>&1 || { echo "loader_epochs_ab: gen failed:"; tail -5 "$out/gen.log"; exit 2; }
for ((r = 1; r <= rounds; r++)); do
  for w in A B; do
    run_build "$w" run --tracks 3 --data "$out/data" --formats imagefolder --out "$out/$w-$r" \
      --emulate-ms "${EMULATE_MS:-1}" --t3-batch "${BATCH:-128}" --t3-workers "${WORKERS:-2}" \
      --steps "${STEPS:-60}" --repeats 1 >"$out/$w-$r.log" 2>&1 ||
      { echo "loader_epochs_ab: build $w failed (round $r):"; tail -5 "$out/$w-$r.log"; exit 2; }
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, glob, statistics as st, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(w, r):
    f = glob.glob(f"{out}/{w}-{r}/data/pipebench_track3.csv")
    return list(csv.DictReader(l for l in open(f[0]) if not l.startswith("#"))) if f else []
val = {}
for w in "AB":
    for r in range(1, rounds + 1):
        for x in rows(w, r):
            if x["images_per_sec"]:
                k = (x["format"], x["cache"], x["batch_size"], x["num_workers"])
                val.setdefault(k, {}).setdefault(w, []).append(float(x["images_per_sec"]))
print(f"{'format':11s} {'cache':8s} {'batch':>5s} {'wk':>3s} {'A images/s':>11s} {'B images/s':>11s} {'B/A':>6s}  rounds' B/A")
for k in sorted(val):
    a, b = val[k].get("A", []), val[k].get("B", [])
    if not a or not b: continue
    per = " ".join(f"{y / x:.2f}" for x, y in zip(a, b))
    print(f"{k[0]:11s} {k[1]:8s} {k[2]:>5s} {k[3]:>3s} {st.median(a):11.0f} {st.median(b):11.0f} "
          f"{st.median(b) / st.median(a):6.2f}  {per}")
PY
