#!/usr/bin/env bash
# The lance format at s3:// against a real radosgw (servers.sh; slow: CTest label s3, `make
# check-s3`): the Lance helper reads s3://bucket/prefix/NAME.lance through lancedb's own object
# store with pipebench's S3 settings. inspect, verify, run --data, infer and the Python Dataset and
# Loader give the local pixels, with keys from the AWS variables or a profile, or none for a
# public bucket; the keys reach the helper in its environment, never its command line, and no
# result; the engine writes nothing into the bucket; the rows say requests unknown, never 0.
# Bad input (a missing prefix, a wrong secret, a private bucket read anonymously, a name
# without .lance) exits 2 naming the URL, no secret printed.
# --timeout and --retries reach the engine's object store (a stalled server fails in seconds).
# Skips where Node or the Lance engine is not installed, or radosgw is not.
# Env: PIPEBENCH_CLI, PIPEBENCH_TEST_LIBRARY, PIPEBENCH_SOURCE_DIR, PIPEBENCH_NETEM (the proxy).
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
pb=$PIPEBENCH_CLI
servers=$PIPEBENCH_SOURCE_DIR/tests/remote/servers.sh
gen=$work/gen
run timeout 120 "$pb" gen --out "$gen" --rows 6 --size 40x30 --channels 2 --formats lance,raw
if [[ $rc -ne 0 ]] && grep -q "Node.js\|@lancedb/lancedb\|helper .* is missing" <<<"$errout"; then
  echo "SKIP: the Lance engine is not here: $errout"
  exit 0
fi
expect_rc 0 "gen lance,raw (locally)"
"$servers" s3-start "$work/state" >"$work/s3.out" 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIP: radosgw not installed"; exit 0; fi
[[ $rc -eq 0 ]] || { echo "radosgw did not start:"; tail -20 "$work/s3.out"; exit 1; }
trap '"$servers" s3-stop "$work/state"; rm -rf "$work"' EXIT
. "$work/state/s3.env"
E=$AWS_ENDPOINT_URL
s3curl() { # curl args...: a signed request (curl's SigV4; radosgw wants x-amz-content-sha256)
  curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
keys() { s3curl "$E/pblance?list-type=2" | grep -o '<Key>[^<]*</Key>' | sort; }
s3curl -X PUT "$E/pblance" >/dev/null || { echo "cannot create a bucket"; exit 1; }
export -f s3curl
export E
# the dataset gen wrote locally, uploaded file by file
if (cd "$gen" && find . -type f -printf '%P\n' |
    xargs -P 8 -I{} bash -c 's3curl -T "$1" "$E/pblance/ds/$1" >/dev/null' _ {}); then pass; else fail "upload of the gen folder"; fi
before=$(keys)
url=s3://pblance/ds/images.lance

run timeout 120 "$pb" inspect "$gen/images.lance"
local_crcs=$(sed 1d <<<"$out")
# the helper's command line, kept by a node that writes it down first
cat >"$work/node" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$*" >>"$work/argv"
exec $(command -v node) "\$@"
EOF
chmod +x "$work/node"
run timeout 120 env PIPEBENCH_NODE="$work/node" "$pb" inspect "$url"
expect_rc 0 "inspect $url"
expect_out "^$url: format lance, 6 images" "detected as lance from the bucket's listing"
if [[ -n $local_crcs && $(sed 1d <<<"$out") == "$local_crcs" ]]; then pass; else fail "the CRC-32s over s3 differ from the local ones"; fi
if grep -q " serve $url " "$work/argv"; then pass; else fail "the helper was not started on the URL ($(cat "$work/argv"))"; fi
if ! grep -qF -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_ACCESS_KEY_ID" "$work/argv"; then pass; else fail "a key was on the helper's command line"; fi
if [[ $errout != *"$AWS_SECRET_ACCESS_KEY"* ]]; then pass; else fail "inspect printed the secret"; fi

run timeout 120 "$pb" verify "$url"
expect_rc 0 "verify $url"
expect_err "^verify: 6 images of $url match s3://pblance/ds/manifest.json" "verify reads the manifest beside it"

run timeout 240 "$pb" run --data s3://pblance/ds --formats lance --out "$work/res" --tracks 1 \
  --repeats 1 --samples 4 --warmup 1 --transforms none --no-peer
expect_rc 0 "run --data s3://bucket/prefix --formats lance"
run python3 - "$work/res/data/pipebench_track1.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert {r["format"] for r in rows} == {"lance", "lance (engine)"}, rows
assert all(r["endpoint"] == "s3" for r in rows), [r["endpoint"] for r in rows]
# the engine's requests are its own: unknown (empty), never a 0 that reads as free
assert all(r["requests_per_image"] == "" and r["fetched_bytes_per_image"] == "" for r in rows), rows
PY
expect_rc 0 "rows: endpoint s3, requests and bytes per image unknown"
if ! grep -rqF -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_ACCESS_KEY_ID" "$work/res"; then pass; else fail "run wrote a key into its results"; fi

run timeout 120 "$pb" infer --framework pipebench --model embed --batch-sizes 2 --iterations 2 \
  --warmup 1 --device cpu --data-source s3://pblance/ds --format lance --output-dir "$work/inf"
expect_rc 0 "infer --data-source s3://bucket/prefix --format lance"
if ! grep -rqF -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_ACCESS_KEY_ID" "$work/inf"; then pass; else fail "infer wrote a key into its results"; fi

run timeout 120 env PYTHONPATH="$PIPEBENCH_SOURCE_DIR/python" PIPEBENCH_LIBRARY="$PIPEBENCH_TEST_LIBRARY" \
  /usr/bin/python3 - "$url" "$gen/images.lance" <<'PY'
import sys, zlib
import pipebench
far, near = pipebench.Dataset(sys.argv[1]), pipebench.Dataset(sys.argv[2])
assert far.format == "lance" and len(far) == len(near) == 6
for i in range(6):
    assert far.read(i).tobytes() == near.read(i).tobytes(), i
n = sum(len(b.indices) for b in pipebench.Loader(sys.argv[1], batch_size=2, workers=2, dtype="native"))
assert n == 6, n
PY
expect_rc 0 "the Python Dataset and Loader read the same pixels over s3"

# the keys from a profile of ~/.aws/credentials, as pipebench's own reads take them
mkdir -p "$work/home/.aws" "$work/nohome"
printf '[pb]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$AWS_ACCESS_KEY_ID" \
  "$AWS_SECRET_ACCESS_KEY" >"$work/home/.aws/credentials"
run timeout 120 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work/home" AWS_PROFILE=pb \
  "$pb" inspect "$url"
expect_rc 0 "keys from ~/.aws/credentials (AWS_PROFILE)"
if [[ $(sed 1d <<<"$out") == "$local_crcs" ]]; then pass; else fail "the CRC-32s with a profile's keys"; fi
# anonymous: unsigned requests read a public bucket (at its root), not a private one
s3curl -X PUT -H "x-amz-acl: public-read" "$E/pbpublic" >/dev/null || fail "cannot create a public bucket"
if (cd "$gen" && find images.lance -type f -printf '%P\n' |
    xargs -P 8 -I{} bash -c 's3curl -T "images.lance/$1" -H "x-amz-acl: public-read" "$E/pbpublic/images.lance/$1" >/dev/null' _ {}); then pass; else fail "upload into the public bucket"; fi
run timeout 120 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work/nohome" "$pb" inspect s3://pbpublic/images.lance
expect_rc 0 "anonymous read of a public bucket"
if [[ $(sed 1d <<<"$out") == "$local_crcs" ]]; then pass; else fail "the CRC-32s read anonymously"; fi
run timeout 120 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$work/nohome" "$pb" inspect --format lance "$url"
expect_rc 2 "anonymous read of a private bucket"
expect_err "^pipebench inspect: $url: .*403" "names the URL and the 403"

if [[ $(keys) == "$before" ]]; then pass; else fail "the engine wrote into the bucket: $(diff <(echo "$before") <(keys))"; fi

# bad input: exit 2 naming the URL, the secret unprinted
run timeout 120 "$pb" inspect --format lance s3://pblance/none/images.lance
expect_rc 2 "a prefix with no dataset"
expect_err "s3://pblance/none/images.lance: .*no Lance dataset there" "names the URL and the cause"
run timeout 120 "$pb" inspect s3://pblance/none/images.lance
expect_rc 2 "a prefix with no dataset, format detected"
expect_err "s3://pblance/none/images.lance: not found" "detection names the URL"
run timeout 120 env AWS_SECRET_ACCESS_KEY=not-the-secret "$pb" inspect --format lance "$url"
expect_rc 2 "a wrong secret"
expect_err "^pipebench inspect: $url: .*403" "names the URL and the server's 403"
if [[ $errout != *not-the-secret* && $errout != *"$AWS_SECRET_ACCESS_KEY"* ]]; then pass; else fail "a secret was printed"; fi
run timeout 120 "$pb" inspect --format lance s3://pblance/ds
expect_rc 2 "a dataset name without .lance"
expect_err "s3://pblance/ds: over s3:// the engine opens a dataset only at a name ending in .lance" "says how to name it"

# --timeout and --retries reach lancedb's object store: behind a proxy that answers nothing
# (netem's stall), --timeout 2 --retries 0 ends within seconds, exit 2 naming the URL, where
# with lancedb's own limits (long request timeouts, ten retries) the read is still waiting
if [[ -n ${PIPEBENCH_NETEM:-} ]]; then
  "$PIPEBENCH_NETEM" --target "${E#http://}" --fault stall --after 0 --port-file "$work/stall.port" \
    >/dev/null &
  stall=$!
  for _ in $(seq 50); do [[ -s $work/stall.port ]] && break; sleep 0.1; done
  stalled=http://127.0.0.1:$(cat "$work/stall.port")
  t0=$(date +%s)
  run timeout 100 env AWS_ENDPOINT_URL="$stalled" "$pb" inspect --format lance "$url" --timeout 2 \
    --retries 0
  took=$(($(date +%s) - t0))
  expect_rc 2 "a server that answers nothing, --timeout 2 --retries 0"
  expect_err "^pipebench inspect: $url: " "names the URL"
  [[ $took -lt 40 ]] && pass || fail "--timeout 2 --retries 0 took $took s"
  run timeout 20 env AWS_ENDPOINT_URL="$stalled" "$pb" inspect --format lance "$url"
  expect_rc 124 "without them the read is still waiting after 20 s"
  kill "$stall" 2>/dev/null
  wait "$stall" 2>/dev/null
  sleep 1
  left=$(pgrep -f "pb_lance.js serve $url" | wc -l)
  [[ $left -eq 0 ]] && pass || fail "$left Lance helpers left running"
fi
finish
