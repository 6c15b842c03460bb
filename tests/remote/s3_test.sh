#!/usr/bin/env bash
# The s3 backend against a real radosgw (one-node Ceph cluster started by servers.sh; slow:
# CTest label s3, `make check-s3`): SigV4-signed reads exact, through the delaying proxy too,
# ListObjectsV2, credentials from the environment and from ~/.aws files, anonymous access to a
# public object, and 403/404 errors that name the location but never a key; then the commands on
# s3:// URLs: inspect, verify and run --tracks 1 on every format that reads over HTTP (OME-Zarr v2
# and v3 sharded, OME-Parquet, TIFF, raw, an image folder) with the same CRC-32s as locally.
# Env: PIPEBENCH_CLI, PIPEBENCH_NETEM, PIPEBENCH_REMOTE_CHECK, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
servers=$PIPEBENCH_SOURCE_DIR/tests/remote/servers.sh
check=$PIPEBENCH_REMOTE_CHECK
"$servers" s3-start "$work/state" >"$work/s3.out" 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIP: radosgw not installed"; exit 0; fi
[[ $rc -eq 0 ]] || { echo "radosgw did not start:"; tail -20 "$work/s3.out"; exit 1; }
proxy=
trap '[[ -n $proxy ]] && kill $proxy; "$servers" s3-stop "$work/state"; rm -rf "$work"' EXIT
. "$work/state/s3.env"
E=$AWS_ENDPOINT_URL
put() { # curl args...: a signed PUT (curl's SigV4; radosgw wants x-amz-content-sha256)
  curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" >/dev/null
}
mkdir -p "$work/data"
head -c 2000000 /dev/urandom >"$work/data/blob"
echo small >"$work/data/small"
put -X PUT "$E/pbtest" || { echo "cannot create a bucket"; exit 1; }
put -T "$work/data/blob" "$E/pbtest/ds/blob"
put -T "$work/data/small" "$E/pbtest/ds/sub/a%20b.txt"
put -T "$work/data/small" -H "x-amz-acl: public-read" "$E/pbtest/ds/public"

run "$check" --trace read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 0 "signed read of an object, many ranges in flight"
expect_err "^pipebench: GET s3://pbtest/ds/blob bytes=0-1999999 -> 206 HTTP/1.1 " "trace names s3:// and the range"
if [[ $errout != *"$AWS_SECRET_ACCESS_KEY"* && $errout != *"$AWS_ACCESS_KEY_ID"* ]]; then pass; else fail "a key was printed"; fi
run "$check" read "s3://pbtest/ds/sub/a b.txt" "$work/data/small"
expect_rc 0 "a key with a space"
run "$check" list s3://pbtest/ds
if [[ $out == $'blob\npublic\nsub' ]]; then pass; else fail "ListObjectsV2: blob, public, sub"; fi
run "$check" stat s3://pbtest/ds
expect_out "^dir$" "a prefix is a folder"
run "$check" stat s3://pbtest/ds/blob
expect_out "^file 2000000$" "an object is a file"
run "$check" stat s3://pbtest/ds/none
expect_out "^missing$" "nothing there"

run "$check" read s3://pbtest/ds/none "$work/data/blob"
expect_rc 2 "404"
expect_err "^s3://pbtest/ds/none: not found \(HTTP 404\)" "404 names the location"
run env AWS_SECRET_ACCESS_KEY=not-the-secret "$check" read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 2 "a wrong secret"
expect_err "^s3://pbtest/ds/blob: access denied \(HTTP 403\)" "403 names the location"
if [[ $errout != *not-the-secret* ]]; then pass; else fail "the secret was printed"; fi

# anonymous: refused for a private object, allowed for a public one
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work" "$check" read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 2 "anonymous read of a private object"
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work" "$check" read s3://pbtest/ds/public "$work/data/small"
expect_rc 0 "anonymous read of a public object"

# credentials and region from ~/.aws files, by profile
mkdir -p "$work/.aws"
printf '[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n[pb]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
  "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$work/.aws/credentials"
printf '[profile pb]\nregion = %s\n' "$AWS_REGION" >"$work/.aws/config"
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_REGION HOME="$work" AWS_PROFILE=pb "$check" read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 0 "credentials from ~/.aws/credentials (AWS_PROFILE)"
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work" "$check" read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 2 "the default profile's wrong key"

# through a 10 ms round trip
rm -f "$work/port"
"$PIPEBENCH_NETEM" --target "${E#http://}" --delay 5 --port-file "$work/port" >/dev/null &
proxy=$!
for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
run env AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$work/port")" "$check" read s3://pbtest/ds/blob "$work/data/blob"
expect_rc 0 "signed read through the proxy"

kill "$proxy"; wait "$proxy" 2>/dev/null; proxy=

# the commands on s3:// URLs, every format a gen folder holds (uploaded 8 objects at a time)
pb=$PIPEBENCH_CLI
gen=$work/gen
"$pb" gen --out "$gen" --rows 6 --size 40x30 --formats ome-zarr,ome-parquet,tiff,raw >/dev/null 2>&1 &&
  "$pb" gen --out "$gen" --rows 6 --size 40x30 --formats imagefolder >/dev/null 2>&1 &&
  "$pb" convert "$gen/images.pbraw" --to ome-zarr --out "$gen/v3.zarr" \
    --options zarr=3,shard=1x1x1x2x2 --chunk 1x1x1x20x15 >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
put -X PUT "$E/pbgen" || { echo "cannot create a bucket"; exit 1; }
export -f put
export E
if (cd "$gen" && find . -type f -printf '%P\n' |
    xargs -P 8 -I{} bash -c 'put -T "$1" "$E/pbgen/ds/$1"' _ {}); then pass; else fail "upload of the gen folder"; fi
for d in ome-zarr:ome-zarr v3.zarr:ome-zarr images.parquet:ome-parquet tiff:tiff \
         images.pbraw:raw imagefolder:imagefolder; do
  name=${d%%:*} fmt=${d##*:}
  run "$pb" inspect "$gen/$name"
  local_out=$(sed 1d <<<"$out")
  run "$pb" inspect "s3://pbgen/ds/$name"
  expect_rc 0 "inspect $name over s3"
  expect_out "^s3://pbgen/ds/$name: format $fmt, 6 images" "inspect names the URL and the format ($name)"
  if [[ -n $local_out && $(sed 1d <<<"$out") == "$local_out" ]]; then pass; else fail "$name: the CRC-32s over s3 differ from the local ones"; fi
  if [[ $errout != *"$AWS_SECRET_ACCESS_KEY"* ]]; then pass; else fail "inspect printed the secret"; fi
done
# a small object (a chunk, an image file) is one signed GET, without a HEAD first
run "$pb" inspect --trace-requests "s3://pbgen/ds/ome-zarr"
chunks=$(grep -cE "^pipebench: GET s3://pbgen/ds/ome-zarr/img_0000[0-9].zarr/0/0/0/0/0/0 - -> 206" <<<"$errout")
heads=$(grep -cE "^pipebench: HEAD s3://pbgen/ds/ome-zarr/img_0000[0-9].zarr/0/0/" <<<"$errout")
if ((chunks == 6 && heads == 0)); then pass; else fail "a chunk over s3 should be one GET ($chunks GETs, $heads HEADs for 6)"; fi
run "$pb" inspect --trace-requests "s3://pbgen/ds/tiff"
heads=$(grep -cE "^pipebench: HEAD s3://pbgen/ds/tiff/img_0000[0-9].ome.tif " <<<"$errout")
if ((heads == 6)); then pass; else fail "a TIFF object over s3 should be asked for its size once, at its scan ($heads HEADs for 6)"; fi
for name in ome-zarr images.parquet tiff images.pbraw; do
  run "$pb" verify "s3://pbgen/ds/$name"
  expect_rc 0 "verify $name over s3"
  expect_err "^verify: 6 images of s3://pbgen/ds/$name match s3://pbgen/ds/manifest.json" "verify reads the manifest beside it ($name)"
done
run "$pb" verify "s3://pbgen/ds/v3.zarr"
expect_rc 0 "verify of a converted dataset over s3 (DST.manifest.json)"
run "$pb" run --data s3://pbgen/ds --formats ome-zarr,ome-parquet,tiff,raw,imagefolder --out "$work/res" \
  --tracks 1 --repeats 1 --samples 4 --warmup 1 --transforms none --no-peer
expect_rc 0 "run --data s3://bucket/prefix --tracks 1"
run python3 - "$work/res/data/pipebench_track1.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
fmts = {r["format"] for r in rows}
assert fmts == {"ome-zarr", "ome-parquet", "tiff", "raw", "imagefolder"}, fmts
assert all(r["endpoint"] == "s3" for r in rows), {r["endpoint"] for r in rows}
none = [r for r in rows if r["cache"] == "none"]
assert {r["format"] for r in none} == fmts, none
assert all(float(r["requests_per_image"]) > 0 for r in none), none
one = [r for r in none if r["format"] in ("ome-zarr", "imagefolder", "tiff")]
assert all(float(r["requests_per_image"]) == 1 for r in one), one  # one GET per image
PY
expect_rc 0 "track 1 rows of every format, endpoint s3, requests counted (cache none)"
if ! grep -rqF "$AWS_SECRET_ACCESS_KEY" "$work/res"; then pass; else fail "run wrote the secret into its results"; fi
finish
