#!/usr/bin/env bash
# pipebench against its peers over HTTP at an emulated round trip, one run, same server, same
# proxy, same images in the same seeded random order (bench/remote_peers.py):
#  1. random batches of 16 images of a `gen` OME-Zarr folder (100 x 100 uint16, one chunk per
#     image): pipebench.Loader (settings in PB_SETTINGS), zarr-python + fsspec (a loop per batch,
#     and 16 threads per batch), tensorstore's http kvstore + zarr driver (skipped with one line
#     where `import tensorstore` fails). Images/s over the steady window, rounds interleaved,
#     and the ratios pipebench/zarr-python and pipebench/tensorstore (medians of the rounds);
#     open_s: the longest set-up (opening every image's array) of the rounds, outside the window.
#  2. track 1 p50 of ome-zarr and ome-parquet (random single samples, cache none; 200 images), in
#     round trips.
#  3. whole 4096 x 4096 uint16 OME-Zarr images through the proxy with one link capped at
#     --link-rate 125000000 (1 Gbit/s, shared by every connection): pipebench.Dataset.read one
#     image at a time, and pipebench.Loader (batch 1, 2 workers) whose next transfer runs while
#     an image is decompressed; bytes on the wire per second (the consumed images' stored bytes
#     over the time to consume them) as a share of the cap, and the same without the proxy.
#   bench/remote_peers.sh [BUILD] [RTT_MS...]         (default RTT 20)
# BUILD: a build folder, or on the lent machine the unpacked pack ($PIPEBENCH_PACK after
# `. scripts/device_pack.sh --unpack`), there with SERVER=python and tensorstore installed:
#   SERVER=python bench/remote_peers.sh "$PIPEBENCH_PACK" 20
# Env: SERVER=nginx (default) or python (bench/http_server.py, where nginx is absent: the lent
#      GPU machine); IMAGES (1600), BATCHES (30), ROUNDS (2), BIG (8, 0 skips part 3),
#      PARTS (1,2,3), READERS (pipebench,zarr,zarr-threads,tensorstore), PYTHON (/usr/bin/python3),
#      PB_SETTINGS: pipebench.Loader's arguments as "key=value ...", default "workers=32 prefetch=2"
#      (in_flight, timeout, retries, block_size set the I/O layer's PIPEBENCH_* overrides).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
shift $(($# < 1 ? $# : 1))
rtts=("$@")
((${#rtts[@]})) || rtts=(20)
server=${SERVER:-nginx}
images=${IMAGES:-1600}
batches=${BATCHES:-30}
rounds=${ROUNDS:-2}
big=${BIG:-8}
parts=${PARTS:-1,2,3}
py=${PYTHON:-/usr/bin/python3}
settings=${PB_SETTINGS:-workers=32 prefetch=2}
readers=${READERS:-pipebench,zarr,zarr-threads,tensorstore}
pb=$build/pipebench netem=$build/pipebench-netem lib=$build/libpipebench.so
if [[ -x $build/bin/pipebench ]]; then # an unpacked scripts/device_pack.sh (the lent machine)
  pb=$build/bin/pipebench netem=$build/bench/pipebench-netem lib=$build/lib/libpipebench.so
fi
export PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH}
export PIPEBENCH_LIBRARY=${PIPEBENCH_LIBRARY:-$lib}
work=$(mktemp -d)
proxy= srv=
cleanup() {
  [[ -n $proxy ]] && kill "$proxy" 2>/dev/null
  [[ -n $srv ]] && kill "$srv" 2>/dev/null
  [[ $server == nginx ]] && "$top/tests/remote/servers.sh" http-stop "$work/state"
  rm -rf "$work"
}
trap cleanup EXIT

"$pb" gen --out "$work/data" --rows "$images" --size 100x100 --formats ome-zarr >/dev/null 2>&1
# track 1 on a folder of its own: 200 images, as bench/remote_formats.sh (the open of a remote
# OME-Zarr folder reads every image's metadata, 2 round trips each, 32 images at once)
[[ $parts == *2* ]] &&
  "$pb" gen --out "$work/small" --rows 200 --size 100x100 --formats ome-zarr,ome-parquet >/dev/null 2>&1
((big > 0)) && [[ $parts == *3* ]] &&
  "$pb" gen --out "$work/big" --rows "$big" --size 4096x4096 --formats ome-zarr >/dev/null 2>&1
chmod -R a+rX "$work"
if [[ $server == nginx ]]; then
  "$top/tests/remote/servers.sh" http-start "$work" "$work/state" >/dev/null
  target=127.0.0.1:$(cat "$work/state/http.port")
  what="nginx $("$(command -v nginx || echo /usr/sbin/nginx)" -v 2>&1 | sed 's/.*nginx\///')"
elif [[ $server == python ]]; then
  "$py" "$top/bench/http_server.py" "$work" --port-file "$work/srv.port" >/dev/null &
  srv=$!
  for _ in $(seq 50); do [[ -s $work/srv.port ]] && break; sleep 0.1; done
  target=127.0.0.1:$(cat "$work/srv.port")
  what="bench/http_server.py (Python $("$py" -c 'import sys; print(sys.version.split()[0])') ThreadingHTTPServer)"
else
  echo "remote_peers.sh: SERVER is nginx or python, not '$server'" >&2; exit 1
fi
# the commit the program under test was built from (a copied tree's git may say otherwise)
echo "server: $what; $(nproc) cores; $("$pb" --version 2>/dev/null || echo "pipebench ?")"

proxy_start() { # netem args...: sets purl
  rm -f "$work/port"
  "$netem" --target "$target" --port-file "$work/port" --stats "$work/netem.stats" "$@" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  purl=http://127.0.0.1:$(cat "$work/port")
}
proxy_stop() { kill "$proxy"; wait "$proxy" 2>/dev/null || true; proxy=; }

for rtt in "${rtts[@]}"; do
  half=$(awk "BEGIN{print $rtt/2}")
  if [[ $parts == *1* ]]; then
    proxy_start --delay "$half"
    echo
    echo "== random batches of 16, ${rtt} ms round trip, $images images, $batches batches x $rounds rounds"
    echo "   pipebench settings (PB_SETTINGS): $settings"
    "$py" "$top/bench/remote_peers.py" batches "$purl/data/ome-zarr" "$images" \
      --batches "$batches" --rounds "$rounds" --readers "$readers" --pipebench "$settings" >"$work/peers.json"
    proxy_stop
    "$py" - "$work/peers.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["reader"], []).append(r)
sums = {r["checksum"] for r in rows}
print("%-14s %10s %10s %9s  %s" % ("reader", "images/s", "rounds", "open_s", "how"))
med = {}
for name, rs in by.items():
    med[name] = statistics.median(r["images_per_s"] for r in rs)
    print("%-14s %10.1f %10s %9.2f  %s" % (name, med[name], "/".join("%.0f" % r["images_per_s"] for r in rs),
                                          max(r["setup_s"] for r in rs), rs[0]["how"]))
if "pipebench" in med:
    for peer in ("zarr", "zarr-threads", "tensorstore"):
        if peer in med:
            print("pipebench / %-13s %.2fx" % (peer, med["pipebench"] / med[peer]))
rounds = {r["round"] for r in rows}
same = all(len({r["checksum"] for r in rows if r["round"] == k}) == 1 for k in rounds)
print("pixels: %s" % ("every reader read the same pixels (checksums equal per round)" if same
                      else "CHECKSUMS DIFFER between readers"))
PY
  fi
  if [[ $parts == *2* ]]; then
    proxy_start --delay "$half"
    rm -rf "$work/res"
    "$pb" run --data "$purl/small" --formats ome-zarr,ome-parquet --out "$work/res" --tracks 1 \
      --repeats 1 --samples 40 --warmup 5 --transforms none --no-peer >/dev/null 2>&1
    proxy_stop
    echo
    echo "== track 1, random single samples, cache none, ${rtt} ms round trip, 200 images"
    "$py" - "$work/res/data/pipebench_track1.csv" "$rtt" <<'PY'
import csv, sys
rtt = float(sys.argv[2])
print("%-12s %10s %14s %12s" % ("format", "p50_ms", "round_trips", "req/image"))
for r in csv.DictReader(open(sys.argv[1])):
    if r["cache"] == "none" and r["access_pattern"] == "random":
        p = float(r["p50"]) * 1e3
        print("%-12s %10.2f %14s %12.2f" % (r["format"], p, "%.2f" % (p / rtt) if rtt else "-",
                                           float(r["requests_per_image"])))
PY
  fi
  if [[ $parts == *3* ]] && ((big > 0)); then
    rate=125000000
    : >"$work/whole.json"
    for reader in dataset loader; do
      proxy_start --delay "$half" --link-rate "$rate"
      "$py" "$top/bench/remote_peers.py" whole "$purl/big/ome-zarr" "$big" --rounds 2 \
        --whole-reader "$reader" >>"$work/whole.json"
      proxy_stop
      cp "$work/netem.stats" "$work/netem.$reader"
    done
    # the same reads straight from the server: the readers' own limit on this machine
    : >"$work/direct.json"
    for reader in dataset loader; do
      "$py" "$top/bench/remote_peers.py" whole "http://$target/big/ome-zarr" "$big" --rounds 2 \
        --whole-reader "$reader" >>"$work/direct.json"
    done
    echo
    echo "== whole 4096 x 4096 uint16 images, ${rtt} ms round trip, one link capped at $rate bytes/s"
    "$py" - "$work/whole.json" "$work/direct.json" "$rate" "$work/big/ome-zarr" "$big" \
      "$work/netem.dataset" "$work/netem.loader" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
direct = [json.loads(l) for l in open(sys.argv[2])]
rate, big = float(sys.argv[3]), int(sys.argv[5])
stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(sys.argv[4]) for f in fs)
per_image = stored / big  # chunks and metadata: what one image costs on the wire, less headers
forwarded = {}
for path in sys.argv[6:8]:
    st = open(path).read().split()
    forwarded[path.rsplit(".", 1)[1]] = int(st[st.index("down") + 1])
def wire(rs):  # bytes of the images consumed / seconds to consume them
    return sum(r["images"] for r in rs) * per_image / sum(r["seconds"] for r in rs)
print("%-34s %8s %10s %10s %12s" % ("reader", "images", "s/image", "wire MB/s", "share of cap"))
for name in dict.fromkeys(r["reader"] for r in rows):
    rs = [r for r in rows if r["reader"] == name]
    ds = [r for r in direct if r["reader"] == name]
    n = sum(r["images"] for r in rs)
    print("%-34s %8d %10.3f %10.1f %11.1f%%   (no proxy: %.1f MB/s = %.1f%%)"
          % (name, n, sum(r["seconds"] for r in rs) / n, wire(rs) / 1e6, 100 * wire(rs) / rate,
             wire(ds) / 1e6, 100 * wire(ds) / rate))
for k, v in forwarded.items():
    print("proxy forwarded %d bytes for the %s reader (%d stored bytes a pass of %d images)"
          % (v, k, stored, big))
PY
  fi
done
