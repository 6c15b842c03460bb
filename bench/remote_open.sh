#!/usr/bin/env bash
# Opening a remote folder of OME-Zarr images: one `gen` folder (IMAGES images of 100 x 100
# uint16) served by nginx behind pipebench-netem, and for each build given, in interleaved
# rounds: `pipebench inspect --no-crc URL` (every image's metadata, in index order) and the set-up
# of `pipebench.Loader(URL, workers=32)` (the loader checks every image's dtype and shape), wall
# seconds each, with the most requests the proxy saw waiting at once (netem --stats).
#   bench/remote_open.sh [BUILD...]          (default: build)
# Env: IMAGES (1600), DELAY_MS (10: the proxy's delay each way, a 20 ms round trip), ROUNDS (2),
#      FORMAT (ome-zarr; tiff works too).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
builds=("$@")
((${#builds[@]})) || builds=("$top/build")
images=${IMAGES:-1600} delay=${DELAY_MS:-10} rounds=${ROUNDS:-2} fmt=${FORMAT:-ome-zarr}
netem=${builds[-1]}/pipebench-netem
work=$(mktemp -d)
proxy=
cleanup() {
  [[ -n $proxy ]] && kill "$proxy" 2>/dev/null
  "$top/tests/remote/servers.sh" http-stop "$work/state" || true
  rm -rf "$work"
}
trap cleanup EXIT
"${builds[0]}/pipebench" gen --out "$work/data" --rows "$images" --size 100x100 --formats "$fmt" \
  >/dev/null 2>&1
chmod -R a+rX "$work"
"$top/tests/remote/servers.sh" http-start "$work/data" "$work/state" >/dev/null
target=127.0.0.1:$(cat "$work/state/http.port")

start() {
  rm -f "$work/port" "$work/stats"
  "$netem" --target "$target" --delay "$delay" --port-file "$work/port" --stats "$work/stats" \
    >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  url=http://127.0.0.1:$(cat "$work/port")/$fmt
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null || true; proxy=; }
now() { date +%s.%N; }

echo "# $images $fmt images, netem --delay $delay (round trip $((2 * delay)) ms), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
echo "round,build,what,seconds,waiting_peak"
for ((r = 1; r <= rounds; r++)); do
  for b in "${builds[@]}"; do
    start
    t0=$(now)
    "$b/pipebench" inspect --no-crc "$url" >/dev/null
    t1=$(now)
    stop
    echo "$r,$b,inspect --no-crc,$(echo "$t1 - $t0" | bc),$(sed -n 's/^waiting_peak //p' "$work/stats")"
    # the binding of the build's own source tree (its structs are checked against its library)
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$b/CMakeCache.txt" 2>/dev/null)
    start
    s=$(PYTHONPATH=${src:-$top}/python PIPEBENCH_LIBRARY=$b/libpipebench.so /usr/bin/python3 - "$url" <<'PY'
import sys, time, pipebench
t0 = time.monotonic()
l = pipebench.Loader(sys.argv[1], batch_size=16, workers=32)
print("%.3f" % (time.monotonic() - t0))
l.close()
PY
)
    stop
    echo "$r,$b,Loader set-up,$s,$(sed -n 's/^waiting_peak //p' "$work/stats")"
  done
done
