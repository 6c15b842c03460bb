#!/usr/bin/env bash
# Raw image reads over HTTP at emulated round trips of 0, 5, 20 and 80 ms: nginx on the loopback
# address (tests/remote/servers.sh) behind pipebench-netem, read by the http backend with 1, 16
# and 64 requests in flight. Prints one row per setting: images/s, MB/s, requests and bytes per
# image (the open's HEAD included). Question: how many requests must be in flight to hide a
# given round trip? Model: images/s ~= in_flight / (RTT + transfer time of one image).
#   bench/remote.sh [BUILD] [IMAGE_BYTES] [IMAGES]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
img=${2:-131072}          # 256 x 256 uint16
images=${3:-256}
count=512                 # images in the file
work=$(mktemp -d)
proxy=
trap '[[ -n $proxy ]] && kill $proxy 2>/dev/null; "$top/tests/remote/servers.sh" http-stop "$work/state"; rm -rf "$work"' EXIT
mkdir -p "$work/data"
head -c $((img * count)) /dev/urandom >"$work/data/images.raw"
chmod -R a+rX "$work"
"$top/tests/remote/servers.sh" http-start "$work/data" "$work/state" >/dev/null
target=127.0.0.1:$(cat "$work/state/http.port")
printf '%-7s %-9s %-9s %-9s %-9s %-12s %-12s\n' rtt_ms in_flight images_s mb_s seconds req_per_img bytes_per_img
for rtt in 0 5 20 80; do
  rm -f "$work/port"
  "$build/pipebench-netem" --target "$target" --delay "$(awk "BEGIN{print $rtt/2}")" \
    --port-file "$work/port" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  for k in 1 16 64; do
    n=$images
    ((k == 1 && rtt >= 20)) && n=$((images / 8))   # one at a time at 80 ms is slow; fewer images
    line=$("$build/remote_read" "http://127.0.0.1:$(cat "$work/port")/images.raw" "$img" "$n" "$k")
    set -- $line
    printf '%-7s %-9s %-9s %-9s %-9s %-12s %-12s\n' "$rtt" "$2" "$8" "${10}" "$6" "${12}" "${14}"
  done
  kill "$proxy"; wait "$proxy" 2>/dev/null || true; proxy=
done
