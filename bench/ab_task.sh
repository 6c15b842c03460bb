#!/usr/bin/env bash
# One round of bench/ab.sh for one build, as a `pipebench revs` command task: runs a benchmark
# with the build's own programs and writes what it measured to $PIPEBENCH_METRICS, named so
# that revs compares them (times end in _s: lower is better; rates hold per_sec: higher).
#
# usage: bench/ab_task.sh formats BUILD DATA READS     bench_formats: each format's random-read
#                                                      p50 and sequential decode rate
#        bench/ab_task.sh loader  BUILD DATA FORMATS   Track 2 (the loader): samples/s per format,
#                                                      batch size and worker count
set -euo pipefail
kind=${1:?kind}; build=${2:?build}; data=${3:?data}; arg=${4:?}
: "${PIPEBENCH_METRICS:?run through pipebench revs (bench/ab.sh)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $kind in
  formats)
    "$build/bench/bench_formats" "$data" "$arg" >"$tmp/out.jsonl"
    python3 - "$tmp/out.jsonl" "$PIPEBENCH_METRICS" <<'PY'
import json, sys
m = {}
for line in open(sys.argv[1]):
    x = json.loads(line)
    if "format" in x:
        m[x["format"]] = {"random_read_p50_s": x["p50_us"] * 1e-6,
                          "sequential_mb_per_sec": x["seq_mb_per_s"]}
json.dump({"formats": m}, open(sys.argv[2], "w"))
PY
    ;;
  loader)
    "$build/pipebench" run --data "$data" --out "$tmp/run" --tracks 2 --formats "$arg" \
      --batch-sizes 16 --workers 0,2 --caches none,preload --repeats 1 --batches 20 --no-peer \
      >"$tmp/run.log" 2>&1 || { tail -5 "$tmp/run.log" >&2; exit 2; }
    python3 - "$tmp/run/data/pipebench_track2.csv" "$PIPEBENCH_METRICS" <<'PY'
import csv, json, sys
m = {}
for x in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    if x.get("loader", "pipebench") != "pipebench" or not x["samples_per_sec"]:
        continue
    name = f'{x["format"]}_{x["cache"]}_b{x["batch_size"]}_w{x["num_workers"]}'
    m[name] = {"samples_per_sec": float(x["samples_per_sec"])}
json.dump({"loader": m}, open(sys.argv[2], "w"))
PY
    ;;
  *) echo "ab_task.sh: unknown kind $kind" >&2; exit 1 ;;
esac
