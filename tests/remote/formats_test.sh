#!/usr/bin/env bash
# The commands over http(s):// against nginx: inspect, verify and run --data read OME-Zarr (v2
# and v3 sharded), OME-Parquet, TIFF, raw and an image folder from a URL with the same pixels as
# from the local path; every fault (404, 403, 500, a cut or wrong-length answer, a server that
# stops answering, a redirect loop, an object changed mid-run, an untrusted certificate) exits 2
# naming the URL (credentials masked) and the cause, and earlier results stay as they were.
# Env: PIPEBENCH_CLI, PIPEBENCH_NETEM, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
. "$PIPEBENCH_SOURCE_DIR/tests/remote/http_lib.sh"
pb=$PIPEBENCH_CLI
data=$work/data
"$pb" gen --out "$data" --rows 6 --size 40x30 --formats ome-zarr,ome-parquet,tiff,raw \
  >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
"$pb" gen --out "$data" --rows 6 --size 40x30 --formats imagefolder >/dev/null 2>&1 ||
  { echo "gen imagefolder failed"; exit 1; }
"$pb" convert "$data/images.pbraw" --to ome-zarr --out "$data/v3.zarr" \
  --options zarr=3,shard=1x1x1x2x2 --chunk 1x1x1x20x15 >/dev/null 2>&1 ||
  { echo "convert to sharded Zarr v3 failed"; exit 1; }
http_serve "$data"

start() { # netem args...: sets purl (the proxy's URL)
  rm -f "$work/port"
  "$PIPEBENCH_NETEM" --target "$target" --port-file "$work/port" "$@" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  purl=http://127.0.0.1:$(cat "$work/port")
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null; proxy=; }

# the same pixels over HTTP as from the local path, every format
for d in ome-zarr:ome-zarr v3.zarr:ome-zarr images.parquet:ome-parquet tiff:tiff \
         images.pbraw:raw imagefolder:imagefolder; do
  name=${d%%:*} fmt=${d##*:}
  run "$pb" inspect "$data/$name"
  local_out=$(sed 1d <<<"$out")
  run "$pb" inspect "$base/$name"
  expect_rc 0 "inspect $name over http"
  expect_out "^$base/$name: format $fmt, 6 images" "inspect names the URL and the format ($name)"
  if [[ $(sed 1d <<<"$out") == "$local_out" ]]; then pass; else fail "$name: the CRC-32s over http differ from the local ones"; fi
done
for name in ome-zarr images.parquet tiff images.pbraw; do
  run "$pb" verify "$base/$name"
  expect_rc 0 "verify $name over http"
  expect_err "^verify: 6 images of $base/$name match $base/manifest.json" "verify reads the manifest beside it ($name)"
done
run "$pb" verify "$base/v3.zarr"
expect_rc 0 "verify of a converted dataset over http (DST.manifest.json)"

# a server without a folder index: listings come from the manifest gen or convert wrote
for d in ome-zarr:ome-zarr v3.zarr:ome-zarr tiff:tiff imagefolder:imagefolder; do
  name=${d%%:*} fmt=${d##*:}
  run "$pb" inspect "$base/_plain/$name"
  expect_rc 0 "inspect $name without a folder index"
  expect_out "^$base/_plain/$name: format $fmt, 6 images" "found from the manifest ($name)"
done
run "$pb" inspect "$base/_plain/"
expect_rc 2 "a gen folder without a folder index"
expect_err "a folder .pipebench gen. wrote" "is named as one from its manifest"

# convert takes a URL as its source
run "$pb" convert "$base/ome-zarr" --to raw --out "$work/back.pbraw"
expect_rc 0 "convert from a URL"
run "$pb" verify "$work/back.pbraw"
expect_rc 0 "what convert read over http verifies"

# formats read through DuckDB or lancedb are refused with the reason
run "$pb" inspect "$base/images.parquet" --format duckdb
expect_rc 2 "duckdb over a URL"
expect_err "format duckdb, which pipebench reads from local paths only" "names why"
run "$pb" inspect "$base/images.lance" --format lance
expect_rc 2 "lance over http"
expect_err "format lance, which pipebench reads from local paths and s3:// only: its engine, lancedb, has no object store for http" "names why"

# --trace-requests: one line per request; a chunk of a sharded array is one range of its shard
run "$pb" inspect --trace-requests --no-crc "$base/images.pbraw"
expect_rc 0 "inspect --trace-requests"
expect_err "^pipebench: HEAD $base/images.pbraw - -> 200 HTTP/1.1 [0-9.]+ ms$" "trace of the open"
run "$pb" inspect --trace-requests "$base/ome-zarr"
chunks=$(grep -cE "^pipebench: GET $base/ome-zarr/img_0000[0-9].zarr/0/0/0/0/0/0 " <<<"$errout")
heads=$(grep -cE "^pipebench: HEAD $base/ome-zarr/img_0000[0-9].zarr/0/0/" <<<"$errout")
if ((chunks == 6 && heads == 0)); then pass; else fail "a chunk should be one GET ($chunks GETs, $heads HEADs for 6)"; fi
run "$pb" inspect --trace-requests "$base/tiff"
heads=$(grep -cE "^pipebench: HEAD $base/tiff/img_0000[0-9].ome.tif " <<<"$errout")
if ((heads == 6)); then pass; else fail "a TIFF file should be asked for its size once, at its scan ($heads HEADs for 6)"; fi
run "$pb" inspect --trace-requests "$base/v3.zarr"
expect_err "^pipebench: GET $base/v3.zarr/img_00000.zarr/0/c/0/0/0/0/0 - -> 206" "a whole image's shard is one GET"
if ! grep -qE "^pipebench: HEAD $base/v3.zarr/img_0000[0-9].zarr/0/c/" <<<"$errout"; then pass; else fail "a whole shard read asked for its size first"; fi
# The Python checks load libpipebench.so into /usr/bin/python3, which a sanitizer build cannot
# be loaded into (its runtime must come first): under the sanitizers they are skipped, and the
# plain build (make check) runs them.
py_ok=1
if ldd "$PIPEBENCH_TEST_LIBRARY" 2>/dev/null | grep -qE 'lib[at]san'; then
  py_ok=0
  echo "SKIP: the Python checks (a sanitizer build of $PIPEBENCH_TEST_LIBRARY)"
fi
if ((py_ok)); then
# a region inside one inner chunk: the shard's index, then that chunk's range
run env PIPEBENCH_TRACE_REQUESTS=1 /usr/bin/python3 - "$PIPEBENCH_TEST_LIBRARY" "$base/v3.zarr" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
err = ctypes.create_string_buffer(1024)
ds = ctypes.c_void_p()
assert lib.pb_dataset_open(sys.argv[2].encode(), None, ctypes.byref(ds), err) == 0, err.value
region = (ctypes.c_int64 * 10)(0, 0, 0, 0, 0, 1, 1, 1, 10, 10)
buf = ctypes.create_string_buffer(200)
lib.pb_dataset_read_region.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_void_p]
assert lib.pb_dataset_read_region(ds, 0, region, buf, 200, None, err) == 0, err.value
PY
expect_rc 0 "a region of a sharded image over http"
ranges=$(grep -cE "^pipebench: GET $base/v3.zarr/img_00000.zarr/0/c/0/0/0/0/0 bytes=[0-9]+-[0-9]+ -> 206" <<<"$errout")
if ((ranges == 2)); then pass; else fail "a region in one inner chunk: want 2 ranges (index, chunk), got $ranges"; fi
fi

# run --data over http: tracks 1 and 2 measure every format of the folder gen wrote
runargs=(--tracks 1,2 --repeats 1 --samples 4 --warmup 1 --batches 2 --window-ms 1
         --batch-sizes 2 --workers 0 --caches none --transforms none --no-peer)
run "$pb" run --data "$base" --formats ome-zarr,tiff,raw,ome-parquet --out "$work/res" "${runargs[@]}"
expect_rc 0 "run --data over http"
[[ -s $work/res/data/pipebench_track1.parquet ]] && pass || fail "run wrote track 1"
sum1=$(md5sum "$work/res/data/pipebench_track1.parquet" 2>/dev/null)
# rows say where the data came from and what it cost in requests
run python3 - "$work/res/data" <<'PY'
import csv, sys
for track in ("track1", "track2"):
    rows = list(csv.DictReader(open(f"{sys.argv[1]}/pipebench_{track}.csv")))
    assert rows and all(r["endpoint"] == "http" for r in rows), rows
    raw = [r for r in rows if r["format"] == "raw" and r.get("cache", "none") == "none"]
    assert raw and all(float(r["requests_per_image"]) >= 1 for r in raw), raw
    assert all(float(r["fetched_bytes_per_image"]) >= 2400 for r in raw), raw
    # the round trip this run measured to the server, and the loader's requests in flight
    assert all(0 < float(r["endpoint_rtt_ms"]) < 10000 for r in rows), rows
    assert all(float(r["requests_in_flight_mean"]) > 0 for r in raw), raw
    assert track == "track1" or all(r["decode"] == "cpu" for r in rows), rows
import json
ep = json.load(open(f"{sys.argv[1]}/pipebench_summary.json"))["calibration"]["endpoint"]
assert ep["scheme"] == "http" and ep["rtt_ms_p50"] > 0 and ep["object"].startswith("http://"), ep
PY
expect_rc 0 "track 1 and 2 rows carry endpoint, requests and bytes per image, round trip and in flight"
if grep -q 'Remote data.*needs [0-9]* requests in flight to reach' "$work/res/report.md"; then pass
else fail "the report says how many requests in flight each format needs"; fi
if grep -q 'Its data is remote: at the [0-9.]* ms round trip measured in this run, a sample takes [0-9.]* round trips' "$work/res/report.md"
then pass; else fail "the report gives track 1's sample time in round trips"; fi

# infer --data-source and the Python Dataset and Loader take the URL; a password stays out of
# the results
run "$pb" infer --framework pipebench --model embed --batch-sizes 2 --iterations 2 --warmup 1 \
  --device cpu --data-source "http://user:secret@$target" --format raw --output-dir "$work/inf"
expect_rc 0 "infer --data-source over http"
if ! grep -rq secret "$work/inf"; then pass; else fail "infer wrote the password into its results"; fi
if ((py_ok)); then
run env PYTHONPATH="$PIPEBENCH_SOURCE_DIR/python" PIPEBENCH_LIBRARY="$PIPEBENCH_TEST_LIBRARY" /usr/bin/python3 - "$base" <<'PY'
import sys
import pipebench
base = sys.argv[1]
ds = pipebench.Dataset(base + "/ome-zarr")
assert len(ds) == 6, len(ds)
n = sum(b.shape[0] if hasattr(b, "shape") else len(b) for b in
        pipebench.Loader(base + "/tiff", batch_size=2, workers=1, transform="none"))
assert n == 6, n
PY
expect_rc 0 "pipebench.Dataset and Loader over http"
fi

# an array path out of the image group is refused over a URL as it is locally
mkdir -p "$data/escape"
cp -r "$data/ome-zarr/img_00000.zarr" "$data/escape/"
sed -i 's|"path":[[:space:]]*"0"|"path": "../../ome-zarr/img_00001.zarr/0"|' "$data/escape/img_00000.zarr/.zattrs"
chmod -R a+rX "$data/escape"
run "$pb" inspect "$base/escape"
expect_rc 2 "an array path with .. over a URL"
expect_err "(leads outside the image group|no usable first 'path')" "names why"

# --cache cold: a server's page cache is not this host's to drop; the run goes on
run "$pb" run --data "$base/images.pbraw" --out "$work/cold" --cache cold "${runargs[@]}"
expect_rc 0 "run --cache cold over http"

# errors: each exits 2 naming the URL (credentials masked) and the cause
run "$pb" inspect "http://user:secret@$target/nothing"
expect_rc 2 "404"
expect_err "^pipebench inspect: http://\*\*\*@127.0.0.1:[0-9]+/nothing: not found" "404 names the URL, credentials masked"
if [[ $errout != *secret* ]]; then pass; else fail "the password was printed"; fi
mkdir -p "$data/_forbidden"
run "$pb" inspect "$base/_forbidden/images.pbraw"
expect_rc 2 "403"
expect_err "/_forbidden/images.pbraw: access denied \(HTTP 403\)" "403 names the cause"
run "$pb" verify --retries 1 "$base/_error/images.pbraw"
expect_rc 2 "500"
expect_err "/_error/images.pbraw.*server error \(HTTP 500\)" "500 names the cause"
run "$pb" inspect "$base/_loop"
expect_rc 2 "redirect loop"
expect_err "/_loop: too many redirects" "a redirect loop is refused"
run "$pb" inspect "$sbase/images.pbraw"
expect_rc 2 "untrusted certificate"
expect_err "^pipebench inspect: https://127.0.0.1:[0-9]+/images.pbraw: certificate not trusted" "names the URL and the cause"
run "$pb" inspect --insecure "$sbase/images.pbraw"
expect_rc 0 "--insecure accepts it"

# a run that fails leaves the earlier results as they were
run "$pb" run --data "$base/nothing" --out "$work/res" "${runargs[@]}"
expect_rc 2 "run --data of a missing URL"
expect_err "$base/nothing: not found" "run names the URL"
if [[ $(md5sum "$work/res/data/pipebench_track1.parquet" 2>/dev/null) == "$sum1" ]]; then pass; else fail "a failed run changed the earlier results"; fi

# faults through the proxy: the connection cut mid-body, a wrong Content-Length, no answer
start --fault close --after 300 --first 3
run timeout 60 "$pb" inspect --retries 1 "$purl/images.pbraw"
expect_rc 2 "close mid-body"
expect_err "^pipebench inspect: http://127.0.0.1:[0-9]+/images.pbraw: bytes [0-9]+-[0-9]+: (truncated|connection closed)" "names the URL, the range and the cause"
stop
start --fault wrong-length --first 3
run timeout 60 "$pb" verify --retries 0 "$purl/tiff"
expect_rc 2 "wrong Content-Length"
expect_err "^pipebench verify: http://127.0.0.1:[0-9]+/[^ ]+: bytes [0-9]+-[0-9]+: (wrong Content-Length|truncated body)" "names the file, the range and the cause"
stop
start --fault stall --after 0 --first 3
t0=$(date +%s)
run timeout 60 "$pb" inspect --timeout 1 --retries 0 "$purl/ome-zarr"
expect_rc 2 "a server that stops answering"
expect_err "http://127.0.0.1:[0-9]+/ome-zarr.*no answer within the timeout" "timeout names the cause"
if (($(date +%s) - t0 < 20)); then pass; else fail "the timeout did not bound the wait"; fi
stop

# --disk-cache: ranges kept on first read; a second read makes no GET; a changed object (a new
# ETag) is fetched again, never served from the old entry; nothing is written outside the folder
run "$pb" inspect --disk-cache "$work/dc" "$base/images.pbraw"
expect_rc 0 "inspect with a disk cache"
crcs=$(sed 1d <<<"$out")
run "$pb" inspect --disk-cache "$work/dc" --trace-requests "$base/images.pbraw"
expect_rc 0 "inspect from the disk cache"
if ! grep -qE "^pipebench: GET .* bytes=" <<<"$errout"; then pass; else fail "a cached range was fetched again"; fi
if [[ $(sed 1d <<<"$out") == "$crcs" ]]; then pass; else fail "cached pixels differ"; fi
cp "$data/images.pbraw" "$work/orig.pbraw"
"$pb" gen --out "$work/other" --rows 6 --size 40x30 --seed 7 --formats raw >/dev/null 2>&1
cp "$work/other/images.pbraw" "$data/images.pbraw"
touch -d '2002-02-02' "$data/images.pbraw"
run "$pb" inspect --disk-cache "$work/dc" --trace-requests "$base/images.pbraw"
expect_rc 0 "inspect of a changed object with a disk cache"
if grep -qE "^pipebench: GET .* bytes=" <<<"$errout"; then pass; else fail "a changed object was served from the cache"; fi
if [[ $(sed 1d <<<"$out") != "$crcs" ]]; then pass; else fail "the old pixels were served for a changed object"; fi
cp "$work/orig.pbraw" "$data/images.pbraw"
if [[ -z $(find "$work/dc" -type l) ]] && [[ $(find "$work/dc" -type f | grep -vcE "/dc/[0-9a-f]{2}/[0-9a-f]{64}$") == 0 ]]; then pass; else fail "the disk cache holds files other than its entries"; fi
if ((py_ok)); then
run env PYTHONPATH="$PIPEBENCH_SOURCE_DIR/python" PIPEBENCH_LIBRARY="$PIPEBENCH_TEST_LIBRARY" /usr/bin/python3 - "$base" "$work/pydc" <<'PY'
import os, sys
import pipebench
n = sum(len(b.labels) if b.labels is not None else 2 for b in
        pipebench.Loader(sys.argv[1] + "/ome-zarr", batch_size=2, transform="none",
                         cache="disk:" + sys.argv[2]))
assert n == 6, n
assert os.listdir(sys.argv[2]), "the Loader's disk cache is empty"
PY
expect_rc 0 "pipebench.Loader(cache='disk:PATH') over http"
fi

# an object changed while a command reads it: an error, never mixed data
"$pb" gen --out "$work/big" --rows 60 --size 64x64 --formats raw >/dev/null 2>&1
cp "$work/big/images.pbraw" "$data/big.pbraw"
chmod a+r "$data/big.pbraw"
start --delay 15
( sleep 1; touch -d '2001-01-01' "$data/big.pbraw" ) &
toucher=$!
run timeout 60 "$pb" inspect --in-flight 1 "$purl/big.pbraw"
wait $toucher
expect_rc 2 "object changed mid-run"
expect_err "/big.pbraw.*the object changed since it was opened" "changed object names the cause"
stop
finish
