#!/usr/bin/env bash
# The loader's reads in flight over HTTP, through nginx and pipebench-netem: with N reads in
# flight the proxy sees N requests waiting for their answers at once (its waiting_peak), and
# an image folder costs one GET per image in the first epoch (a fresh handle's size check and
# read share one fetch; the loader's reader handles start with the headers already read).
# Env: PIPEBENCH_CLI, PIPEBENCH_NETEM, PIPEBENCH_TEST_LIBRARY, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
. "$PIPEBENCH_SOURCE_DIR/tests/remote/http_lib.sh"
pb=$PIPEBENCH_CLI
data=$work/data
"$pb" gen --out "$data" --rows 8 --size 20x20 --formats ome-zarr >/dev/null 2>&1 ||
  { echo "gen failed"; exit 1; }
"$pb" gen --out "$data" --rows 6 --size 20x20 --formats imagefolder >/dev/null 2>&1 ||
  { echo "gen imagefolder failed"; exit 1; }

# the run options: a size that is not one is a usage error
run "$pb" run --tracks 2 --bytes-in-flight 12X --out "$work/bad"
expect_rc 1 "--bytes-in-flight 12X"
expect_err "--bytes-in-flight: '12X' is not a size" "names the option and the value"
run "$pb" run --tracks 2 --reads-in-flight -1 --out "$work/bad"
expect_rc 1 "--reads-in-flight -1"

http_serve "$data"

# run --reads-in-flight: track 2's rows say the reads in flight each loader used
run "$pb" run --data "$base/ome-zarr" --tracks 2 --reads-in-flight 4 --bytes-in-flight 64K \
  --repeats 1 --batches 2 --window-ms 1 --batch-sizes 4 --workers 0,2 --caches none --no-peer \
  --out "$work/res"
expect_rc 0 "run --reads-in-flight 4 over http"
run python3 - "$work/res/data/pipebench_track2.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 and all(r["reads_in_flight"] == "4" for r in rows), rows
PY
expect_rc 0 "track 2 rows carry reads_in_flight"


# inspect reads each image through one handle, size check then read: one GET per file
run "$pb" inspect --trace-requests "$base/imagefolder"
expect_rc 0 "inspect an image folder over http"
gets=$(grep -cE "^pipebench: GET $base/imagefolder/class_[0-9]+/img_[0-9]+\.(jpg|png) " <<<"$errout")
if ((gets == 6)); then pass; else fail "inspect: want 6 GETs of image files for 6 images, got $gets"; fi

# The Python binding loads libpipebench into /usr/bin/python3, which a sanitizer build cannot be
# loaded into: there the rest is skipped (the plain build runs it).
if ldd "$PIPEBENCH_TEST_LIBRARY" 2>/dev/null | grep -qE 'lib[at]san'; then
  echo "SKIP: the loader checks (a sanitizer build of $PIPEBENCH_TEST_LIBRARY)"
  finish
  exit
fi
py() { run env PYTHONPATH="$PIPEBENCH_SOURCE_DIR/python" PIPEBENCH_LIBRARY="$PIPEBENCH_TEST_LIBRARY" "$@"; }

# epoch.py URL BATCH READS [BYTES]: one epoch of a loader (no workers, so nothing runs ahead into
# the next): "epoch" on stderr before the first batch, then the trace of its requests, then the
# samples and the reads in flight the loader used
cat >"$work/epoch.py" <<'PY'
import sys, pipebench
url, bs, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cap = int(sys.argv[4]) if len(sys.argv) > 4 else 0
with pipebench.Loader(url, batch_size=bs, reads_in_flight=reads, bytes_in_flight=cap) as l:
    sys.stderr.write("epoch\n"); sys.stderr.flush()
    n = sum(b.shape[0] for b in l)
    sys.stderr.write("samples %d reads %d\n" % (n, l.reads_in_flight)); sys.stderr.flush()
PY

# the image folder's first epoch: each file once (set-up reads them for their sizes before)
py env PIPEBENCH_TRACE_REQUESTS=1 /usr/bin/python3 "$work/epoch.py" "$base/imagefolder" 6 0
expect_rc 0 "an epoch of an image folder over http"
epoch=$(sed -n '/^epoch$/,$p' <<<"$errout")
gets=$(grep -cE "^pipebench: GET $base/imagefolder/class_[0-9]+/img_[0-9]+\.(jpg|png) " <<<"$epoch")
files=$(grep -oE "^pipebench: GET $base/imagefolder/[^ ]+" <<<"$epoch" | sort -u | grep -cE '\.(jpg|png)$')
if ((gets == 6 && files == 6)); then pass; else fail "image folder epoch: want 6 GETs of 6 files, got $gets of $files"; fi
expect_err "^samples 6 reads 6$" "auto over a URL: a batch's 6 reads at once"

# OME-Zarr (one GET per chunk) through a 2 x 10 ms round trip: N reads in flight are N
# requests waiting at the proxy at once (one at a time with 1); bytes_in_flight 2400 holds 8
# reads of 800-byte images to 3. The set-up's scan of the images' metadata, which has its own
# requests in flight (remote_folder_open), goes one image at a time here: the peak is the epoch's.
for c in 1:0:1 8:0:8 8:2400:3; do
  n=${c%%:*} bytes=${c#*:} bytes=${bytes%:*} want=${c##*:}
  proxy_start --delay 10
  py env PIPEBENCH_META_IN_FLIGHT=1 /usr/bin/python3 "$work/epoch.py" "$purl/ome-zarr" 8 "$n" "$bytes"
  proxy_stop
  expect_rc 0 "an epoch of OME-Zarr with $n reads in flight, bytes $bytes"
  expect_err "^samples 8 reads $want$" "the loader says $want reads in flight"
  peak=$(proxy_peak)
  if [[ $peak == "$want" ]]; then pass; else fail "$want reads in flight: the proxy saw $peak requests at once"; fi
done

# the largest object opened is kept per endpoint (what a run measures its data's endpoint on): a
# raw file read at the server and one of another size through the proxy (another host:port) do
# not mix
"$pb" gen --out "$data/r1" --rows 6 --size 40x40 --formats raw >/dev/null 2>&1 &&
  "$pb" gen --out "$data/r2" --rows 2 --size 10x10 --formats raw >/dev/null 2>&1 ||
  { echo "gen raw failed"; exit 1; }
chmod -R a+rX "$data"
proxy_start
py /usr/bin/python3 - "$base" "$purl" "$(stat -c %s "$data/r1/images.pbraw")" "$(stat -c %s "$data/r2/images.pbraw")" <<'PY'
import ctypes, os, sys
import pipebench
base, purl, n1, n2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pipebench.Dataset(base + "/r1/images.pbraw").read(0)
pipebench.Dataset(purl + "/r2/images.pbraw").read(0)
lib = ctypes.CDLL(os.environ["PIPEBENCH_LIBRARY"])
def largest(at):
    loc, n = ctypes.create_string_buffer(4096), ctypes.c_uint64()
    ok = lib.pb_io_largest_object(at.encode(), loc, ctypes.c_size_t(4096), ctypes.byref(n))
    return (loc.value.decode(), n.value) if ok else None
assert largest(base + "/anything") == (base + "/r1/images.pbraw", n1), largest(base + "/x")
assert largest(purl + "/data") == (purl + "/r2/images.pbraw", n2), largest(purl + "/data")
assert largest("http://127.0.0.1:1/nothing") is None
PY
proxy_stop
expect_rc 0 "the largest object opened, per endpoint"

finish
