#!/usr/bin/env bash
# The loader's reads in flight under latency: one `gen` OME-Zarr (one GET per chunk, one chunk
# per image) served by nginx behind pipebench-netem, read by `pipebench run --tracks 2` (batches
# of 16, cache none, 0 and 4 workers) with --reads-in-flight 1, 4, 16, 64. A benchmark, not a
# test: it prints a table and asserts nothing. Model: images/s ~= in flight / (RTT + one image's
# transfer), in flight = min(reads_in_flight, workers' waiting samples: max(workers, 1) x batch).
#
#   bench/loader_flight.sh [BUILD] [ROWS] [SIZE] [RTT_MS] [READS...]
#   defaults: build 200 100x100 20 1 4 16 64
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
rows=${2:-200}
size=${3:-100x100}
rtt=${4:-20}
shift $(($# < 4 ? $# : 4))
reads=("$@")
((${#reads[@]})) || reads=(1 4 16 64)
work=$(mktemp -d)
proxy=
trap '[[ -n $proxy ]] && kill $proxy 2>/dev/null; "$top/tests/remote/servers.sh" http-stop "$work/state"; rm -rf "$work"' EXIT
"$build/pipebench" gen --out "$work/data" --rows "$rows" --size "$size" --formats ome-zarr \
  >/dev/null 2>&1
chmod -R a+rX "$work"
"$top/tests/remote/servers.sh" http-start "$work/data" "$work/state" >/dev/null
target=127.0.0.1:$(cat "$work/state/http.port")
"$build/pipebench-netem" --target "$target" --delay "$(awk "BEGIN{print $rtt/2}")" \
  --port-file "$work/port" >/dev/null &
proxy=$!
for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
printf '%-7s %-16s %-8s %-12s %-11s\n' rtt_ms reads_in_flight workers images_per_s req_per_img
for n in "${reads[@]}"; do
  rm -rf "$work/res"
  "$build/pipebench" run --data "http://127.0.0.1:$(cat "$work/port")/ome-zarr" --out "$work/res" \
    --tracks 2 --repeats 1 --batches 8 --window-ms 1 --batch-sizes 16 --workers 0,4 \
    --caches none --no-peer --reads-in-flight "$n" >/dev/null 2>&1
  python3 - "$work/res/data" "$rtt" <<'PY'
import csv, sys
d, rtt = sys.argv[1], sys.argv[2]
for r in csv.DictReader(open(d + "/pipebench_track2.csv")):
    print(f"{rtt:<7} {r['reads_in_flight']:<16} {r['num_workers']:<8} "
          f"{float(r['samples_per_sec']):<12.0f} {float(r['requests_per_image']):<11.2f}")
PY
done
