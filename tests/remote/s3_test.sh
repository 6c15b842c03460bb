#!/usr/bin/env bash
# The s3 backend against a real radosgw (one-node Ceph cluster started by servers.sh; slow:
# CTest label s3, `make check-s3`): SigV4-signed reads exact, through the delaying proxy too,
# ListObjectsV2, credentials from the environment and from ~/.aws files, anonymous access to a
# public object, and 403/404 errors that name the location but never a key.
# Env: PIPEBENCH_NETEM, PIPEBENCH_REMOTE_CHECK, PIPEBENCH_SOURCE_DIR.
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
finish
