#!/usr/bin/env bash
# Opening a folder of images over HTTP, through nginx and pipebench-netem: a scan of every
# image's metadata (inspect, the loader's shape check) has many images' requests in flight at
# once (the proxy's waiting_peak), lists the same images as locally, and an image whose metadata
# is missing or corrupt still fails naming its URL. Also train's --reads-in-flight and
# --bytes-in-flight, as run's.
# Env: PIPEBENCH_CLI, PIPEBENCH_NETEM, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
. "$PIPEBENCH_SOURCE_DIR/tests/remote/http_lib.sh"
pb=$PIPEBENCH_CLI
data=$work/data
"$pb" gen --out "$data" --rows 40 --size 8x8 --formats ome-zarr,tiff >/dev/null 2>&1 ||
  { echo "gen failed"; exit 1; }
# copies with one broken image each: no metadata at all (image 5), a .zattrs that is no JSON
# (image 7)
cp -r "$data/ome-zarr" "$data/nometa"
rm "$data/nometa/img_00005.zarr/.zattrs"
cp -r "$data/ome-zarr" "$data/badmeta"
echo '{"multiscales": [' >"$data/badmeta/img_00007.zarr/.zattrs"

# train's loader options, checked as run's: nonsense is a usage error in one line
run "$pb" train --reads-in-flight -1
expect_rc 1 "train --reads-in-flight -1"
expect_err "--reads-in-flight" "names the option"
if [[ $(wc -l <<<"$errout") -le 2 ]]; then pass; else fail "train --reads-in-flight -1: one line and a hint"; fi
run "$pb" train --reads-in-flight lots
expect_rc 1 "train --reads-in-flight lots"
run "$pb" train --bytes-in-flight 12X
expect_rc 1 "train --bytes-in-flight 12X"
expect_err "--bytes-in-flight: '12X' is not a size" "names the option and the value"

http_serve "$data"


# every image's metadata through a 2 x 5 ms round trip: many requests wait at the proxy at once
# (one at a time before), and the images, names and shapes are those of the local folder
for f in ome-zarr tiff; do
  run "$pb" inspect --no-crc "$data/$f"
  local_list=$(tail -n +2 <<<"$out")
  proxy_start --delay 5
  run timeout 60 "$pb" inspect --no-crc "$purl/$f"
  proxy_stop
  expect_rc 0 "inspect $f over http"
  p=$(proxy_peak)
  if ((p > 4)); then pass; else fail "$f: the metadata of 40 images, want more than 4 requests at once at the proxy, got $p"; fi
  if [[ "$(tail -n +2 <<<"$out")" == "$local_list" ]]; then pass; else fail "$f: the images over http differ from the local ones"; fi
done

# PIPEBENCH_META_IN_FLIGHT (pb_read_options.meta_in_flight) bounds the scan: 1 is one image
# after another, 3 three at once
for m in 1 3; do
  proxy_start --delay 5
  run env PIPEBENCH_META_IN_FLIGHT=$m timeout 60 "$pb" inspect --no-crc "$purl/ome-zarr"
  proxy_stop
  expect_rc 0 "inspect with PIPEBENCH_META_IN_FLIGHT=$m"
  p=$(proxy_peak)
  if [[ $p == "$m" ]]; then pass; else fail "PIPEBENCH_META_IN_FLIGHT=$m: the proxy saw $p requests at once"; fi
done

# a missing or corrupt .zattrs still ends the scan at that image, naming its URL (exit 2)
run timeout 60 "$pb" inspect --no-crc "$base/nometa"
expect_rc 2 "inspect a folder with an image without metadata"
expect_err "image 5: $base/nometa/img_00005.zarr/zarr.json: missing \(nor is there a .zattrs beside it\)" "names the image and its URL"
run timeout 60 "$pb" inspect --no-crc "$base/badmeta"
expect_rc 2 "inspect a folder with a corrupt .zattrs"
expect_err "image 7: $base/badmeta/img_00007.zarr/.zattrs" "names the image and its URL"

# the loader's reads in flight bound its set-up's metadata scan too: train --reads-in-flight 3
# has 3 requests at once at the proxy, in the scan and in the epoch alike
proxy_start --delay 5
run timeout 60 "$pb" train --data "$purl/ome-zarr" --batch-size 8 --reads-in-flight 3 \
  --device cpu --threads 1
proxy_stop
expect_rc 0 "train through the proxy with --reads-in-flight 3"
p=$(proxy_peak)
if [[ $p == 3 ]]; then pass; else fail "train --reads-in-flight 3: the proxy saw $p requests at once"; fi

# train hands both to its loader: its metrics say the reads in flight the loader used (8 by
# default: one batch's reads; 3 asked; 2 when 2 images of 128 bytes fill the bytes in flight)
for c in "::8" "3::3" "8:256:2"; do
  n=${c%%:*} bytes=${c#*:} bytes=${bytes%:*} want=${c##*:}
  rm -f "$work/train.json"
  run timeout 60 "$pb" train --data "$base/ome-zarr" --batch-size 8 ${n:+--reads-in-flight $n} \
    ${bytes:+--bytes-in-flight $bytes} --device cpu --threads 1 --metrics-out "$work/train.json"
  expect_rc 0 "train over http, reads in flight '$n', bytes '$bytes'"
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reads_in_flight"])' "$work/train.json" 2>&1)
  if [[ $got == "$want" ]]; then pass; else fail "train: reads in flight '$n', bytes '$bytes': want $want, the loader used $got"; fi
done
finish
