#!/usr/bin/env bash
# Every format over HTTP at emulated round trips: one `pipebench gen` folder served by nginx
# (tests/remote/servers.sh) behind pipebench-netem, measured by `pipebench run --data URL`
# (track 1: random single samples; track 2: batches of 16 with 0 and 4 workers, cache none).
# Prints one row per format and round trip: track 1 p50, track 2 images/s, and the storage
# requests and bytes fetched per image that the rows carry (counted by the I/O layer, the same
# requests --trace-requests prints). Model: an image costs requests_per_image round trips once
# its metadata is cached, so track 1 p50 ~= requests_per_image x RTT + transfer, and track 2 with
# W workers ~= W / that.
#   bench/remote_formats.sh [BUILD] [ROWS] [SIZE] [RTTS_MS...]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
rows=${2:-200}
size=${3:-100x100}
shift $(($# < 3 ? $# : 3))
rtts=("$@")
((${#rtts[@]})) || rtts=(0 20)
work=$(mktemp -d)
proxy=
trap '[[ -n $proxy ]] && kill $proxy 2>/dev/null; "$top/tests/remote/servers.sh" http-stop "$work/state"; rm -rf "$work"' EXIT
"$build/pipebench" gen --out "$work/data" --rows "$rows" --size "$size" \
  --formats ome-zarr,ome-parquet,tiff,raw >/dev/null 2>&1
"$build/pipebench" gen --out "$work/data" --rows "$rows" --size "$size" --formats imagefolder \
  >/dev/null 2>&1
chmod -R a+rX "$work"
"$top/tests/remote/servers.sh" http-start "$work/data" "$work/state" >/dev/null
target=127.0.0.1:$(cat "$work/state/http.port")
printf '%-7s %-12s %-10s %-12s %-12s %-11s %-12s\n' rtt_ms format t1_p50_ms t2_img_s_w0 \
  t2_img_s_w4 req_per_img bytes_per_img
for rtt in "${rtts[@]}"; do
  rm -f "$work/port"
  "$build/pipebench-netem" --target "$target" --delay "$(awk "BEGIN{print $rtt/2}")" \
    --port-file "$work/port" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  rm -rf "$work/res"
  "$build/pipebench" run --data "http://127.0.0.1:$(cat "$work/port")" --out "$work/res" \
    --formats ome-zarr,ome-parquet,tiff,raw,imagefolder --tracks 1,2 --repeats 1 --samples 40 \
    --warmup 5 --batches 8 --window-ms 1 --batch-sizes 16 --workers 0,4 --caches none \
    --transforms none --no-peer >/dev/null 2>&1
  python3 - "$work/res/data" "$rtt" <<'PY'
import csv, sys
d, rtt = sys.argv[1], sys.argv[2]
t1 = [r for r in csv.DictReader(open(d + "/pipebench_track1.csv"))
      if r["cache"] == "none" and r["access_pattern"] == "random"]
t2 = list(csv.DictReader(open(d + "/pipebench_track2.csv")))
for r in t1:
    f = r["format"]
    w = {x["num_workers"]: x for x in t2 if x["format"] == f}
    sps = lambda k: float(w[k]["samples_per_sec"]) if k in w else float("nan")
    print(f"{rtt:<7} {f:<12} {float(r['p50']) * 1e3:<10.2f} {sps('0'):<12.0f} {sps('4'):<12.0f} "
          f"{float(r['requests_per_image']):<11.2f} {float(r['fetched_bytes_per_image']):<12.0f}")
PY
  kill "$proxy"; wait "$proxy" 2>/dev/null || true; proxy=
done
