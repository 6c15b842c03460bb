#!/usr/bin/env bash
# calibrate --endpoint against nginx through pipebench-netem (10 ms each way, 4 MB/s a
# connection): the round trip it reports is at least the emulated 20 ms, one stream never beats
# the cap, many streams beat one, credentials in the URL appear nowhere, and a missing object, a
# local path or an untrusted certificate exit 2 naming the URL, leaving the earlier JSON as it was.
# Env: PIPEBENCH_CLI, PIPEBENCH_NETEM, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
. "$PIPEBENCH_SOURCE_DIR/tests/remote/http_lib.sh"
pb=$PIPEBENCH_CLI
mkdir -p "$work/data"
head -c 6000000 /dev/urandom >"$work/data/blob"
http_serve "$work/data"
"$PIPEBENCH_NETEM" --target "$target" --port-file "$work/port" --delay 10 --rate 4000000 >/dev/null &
proxy=$!
for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
purl=http://user:s3cr3t@127.0.0.1:$(cat "$work/port")/blob
small=(--size-mb 2 --rounds 2 --no-matmul --no-gpu --jpeg-images 0)

run timeout 120 "$pb" calibrate "${small[@]}" --out "$work/cal.json" --endpoint "$purl"
expect_rc 0 "calibrate --endpoint through the proxy"
expect_out "^endpoint: http://\*\*\*@127.0.0.1:[0-9]+/blob \(6.0 MB object" "names the endpoint, masked"
"$PIPEBENCH_PYTHON" - "$work/cal.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["endpoint"]
rtt, one, many = e["rtt_ms"]["value"], e["single_stream_mbps"]["value"], e["many_streams_mbps"]["value"]
print("rtt %.1f ms, 1 stream %.2f MB/s, %d streams %.2f MB/s" % (rtt, one, e["streams"], many))
bad = []
if not rtt >= 20.0: bad.append("round trip %.2f ms under the emulated 20 ms" % rtt)
if not one <= 4.0 * 1.05: bad.append("one stream %.2f MB/s above the 4 MB/s cap" % one)
if not many > 1.5 * one: bad.append("%d streams (%.2f MB/s) not above one (%.2f)" % (e["streams"], many, one))
if e["object_bytes"] != 6000000 or e["rtt_ms"]["n"] != 20: bad.append("sizes/counts %r" % e)
for b in bad: print("FAIL", b)
sys.exit(1 if bad else 0)
PY
[[ $? -eq 0 ]] && pass || fail "the endpoint's numbers"
! grep -q s3cr3t "$work/cal.json" && ! grep -q s3cr3t <<<"$out$errout" && pass ||
  fail "the password appears in the output"

cp "$work/cal.json" "$work/before.json"
run timeout 60 "$pb" calibrate "${small[@]}" --out "$work/cal.json" --endpoint "http://$target/nothere"
expect_rc 2 "a missing object"
expect_err "^pipebench calibrate: http://127.0.0.1:[0-9]+/nothere: not found \(HTTP 404\)$" "names the URL and the status"
run timeout 60 "$pb" calibrate "${small[@]}" --out "$work/cal.json" --endpoint "$work/data/blob"
expect_rc 2 "a local path"
expect_err "not a URL" "says it is not a URL"
run timeout 60 "$pb" calibrate "${small[@]}" --out "$work/cal.json" \
  --endpoint "https://127.0.0.1:$(cat "$work/state/https.port")/blob"
expect_rc 2 "an untrusted certificate"
cmp -s "$work/before.json" "$work/cal.json" && pass || fail "a failed calibration wrote over the saved one"
run timeout 60 "$pb" calibrate "${small[@]}" --out "$work/cal.json" --insecure \
  --endpoint "https://127.0.0.1:$(cat "$work/state/https.port")/blob"
expect_rc 0 "https with --insecure"
finish
