#!/usr/bin/env bash
# pipebench run: bad options fail fast and clearly; a small real run writes every output, and a
# failed run leaves earlier results whole.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}

for args in "--tracks 9" "--cache lukewarm" "--preset huge" "--formats frob" \
            "--tracks 2 --batch-sizes 0" "--tracks 2 --workers -1" "--tracks 1 --transforms sharpen" \
            "--tracks 2 --caches warmish" "--repeats 0" "--bogus"; do
  # shellcheck disable=SC2086
  run "$pb" run $args --out "$work/bad"
  expect_rc 1 "run $args"; expect_err "try 'pipebench run --help'" "run $args hint"
  [[ ! -e $work/bad/data/pipebench_summary.json ]] && pass || fail "run $args wrote results"
done
run "$pb" run --data "$work/missing" --out "$work/bad2"
expect_rc 2 "run with a missing dataset"; expect_err "missing" "missing dataset named"

# A small run over a small dataset: tables, CSV twins, summary, plots and report; infer's
# results already in OUT/data get their section and plot in the run's report.
run "$pb" gen --out "$work/ds" --rows 40 --size 32x32 --formats raw,tiff,ome-zarr
expect_rc 0 "gen for run"
mkdir -p "$work/r/data"
{
  echo "framework,model,device_type,batch_size,latency_p50_ms,throughput_ips"
  for b in 1 2 4 8; do echo "pytorch,resnet50,cpu,$b,$((3 * b)).5,$((400 + b))"; done
} >"$work/r/data/benchmark_results_20260101_000000.csv"
run "$pb" run --data "$work/ds" --out "$work/r" --repeats 1 --samples 10 --warmup 2 --batches 4 \
  --batch-sizes 4 --workers 0,2 --caches none,preload --transforms none --steps 3 --no-peer
expect_rc 0 "small run"
for t in 1 2 3 4; do
  [[ -s $work/r/data/pipebench_track$t.parquet && -s $work/r/data/pipebench_track$t.csv ]] && pass || fail "track $t tables"
  [[ -s $work/r/images/pipebench_track$t.png ]] && pass || fail "track $t plot"
done
[[ -s $work/r/report.md && -s $work/r/report.html ]] && pass || fail "report written"
grep -q '^## Inference' "$work/r/report.md" && pass || fail "run's report has infer's section"
grep -qF "1 \`benchmark_results_*.csv\` file(s) in [\`data\`](data)" "$work/r/report.md" \
  && pass || fail "run's report names OUT/data, not its staging folder"
[[ -s $work/r/images/pipebench_infer.png ]] && pass || fail "run draws infer's plot"
[[ -s $work/r/data/benchmark_results_20260101_000000.csv ]] && pass || fail "infer's CSV left alone"
if "$py" - "$work/r/data" <<'PY'
import csv, json, sys
d = sys.argv[1]
s = json.load(open(d + "/pipebench_summary.json"))
assert s["kind"] == "pipebench.run" and "error" not in s, s.get("error")
assert s["calibration"]["memcpy_gbps"] > 0
rows = list(csv.DictReader(open(d + "/pipebench_track2.csv")))
assert {r["format"] for r in rows} == {"raw", "tiff", "ome-zarr"}
for r in rows:
    assert int(r["num_batches"]) >= 8 * 2 * max(1, int(r["num_workers"])), r   # window rule
    g = int(r["timer_group"])                       # batches per timed interval
    assert g >= 1 and int(r["num_batches"]) == g * int(r["num_intervals"]), r
    assert float(r["samples_per_sec"]) > 0 and float(r["first_batch_time"]) > 0
rows = list(csv.DictReader(open(d + "/pipebench_track1.csv")))
assert all(int(r["num_intervals"]) == 10 for r in rows)
assert all(int(r["num_samples"]) == 10 * int(r["timer_group"]) for r in rows)
assert all(int(r["warmup"]) >= 8 for r in rows)   # the warm-up doubles as the timer's pilot
# A preloaded 32x32 sample takes well under a microsecond: such samples are timed in groups.
assert all(int(r["timer_group"]) > 1 for r in rows if r["cache"] == "preload"), rows
assert {r["cache"] for r in rows} == {"none", "preload"}
rows = list(csv.DictReader(open(d + "/pipebench_track3.csv")))
assert all(0 <= float(r["data_wait_fraction"]) <= 1 for r in rows)
PY
then pass; else fail "run outputs hold what they should"; fi

# A generated dataset lacking an asked format gets it added, the rest is reused.
run "$pb" gen --out "$work/g/dataset-default" --rows 1000 --size 100x100 --formats raw
expect_rc 0 "gen the default dataset as raw"
run "$pb" run --out "$work/g" --tracks 1 --formats raw,tiff --samples 3 --warmup 1 --repeats 1 --transforms none
expect_rc 0 "run adds tiff to the dataset"; expect_err "as tiff into" "only the missing format generated"
"$py" -c 'import json,sys; assert set(json.load(open(sys.argv[1]))["formats"])=={"raw","tiff"}' "$work/g/dataset-default/manifest.json" \
  && pass || fail "manifest lists raw and tiff"

# A run that fails (track 4 with a Python that does not exist) leaves the earlier tables whole.
before=$(md5sum < "$work/r/data/pipebench_track4.parquet")
summary_before=$(md5sum < "$work/r/data/pipebench_summary.json")
run "$pb" run --data "$work/ds" --out "$work/r" --tracks 4 --formats raw --samples 5 --warmup 1 \
  --repeats 1 --python /nonexistent/python
expect_rc 2 "run with a missing Python"; expect_err "nonexistent" "missing Python named"
[[ $(md5sum < "$work/r/data/pipebench_track4.parquet") == "$before" ]] && pass || fail "failed run kept the old track 4 table"
[[ $(md5sum < "$work/r/data/pipebench_summary.json") == "$summary_before" ]] && pass || fail "failed run kept the old summary"
grep -q nonexistent "$work/r/data/pipebench_summary_failed.json" && pass || fail "failed run's summary says why"
finish
