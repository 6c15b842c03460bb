#!/usr/bin/env bash
# The http/https backend against nginx, directly and through pipebench-netem's faults: exact
# bytes, many ranges in flight on reused connections, and every failure an error that names the
# URL (credentials masked) and the cause, within the timeout.
# Env: PIPEBENCH_NETEM, PIPEBENCH_REMOTE_CHECK, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
. "$PIPEBENCH_SOURCE_DIR/tests/remote/http_lib.sh"
check=$PIPEBENCH_REMOTE_CHECK
mkdir -p "$work/data/sub"
head -c 3000000 /dev/urandom >"$work/data/blob"
echo hello >"$work/data/sub/a.txt"
http_serve "$work/data"
blob=$work/data/blob

start() { # netem args...: sets purl (the proxy's URL)
  rm -f "$work/port" "$work/stats"
  "$PIPEBENCH_NETEM" --target "$target" --port-file "$work/port" --stats "$work/stats" "$@" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  purl=http://127.0.0.1:$(cat "$work/port")
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null; proxy=; }

# exact bytes, direct and over HTTPS with HTTP/2 (self-signed: --insecure)
run "$check" read "$base/blob" "$blob"
expect_rc 0 "read over http"
run "$check" --insecure read "$sbase/blob" "$blob"
expect_rc 0 "read over https --insecure"
run "$check" read "$sbase/blob" "$blob"
expect_rc 2 "an untrusted certificate is refused"
expect_err "^https://127.0.0.1:[0-9]+/blob: certificate not trusted" "names the URL and the cause"

# through a 20 ms round trip: 16 in flight, on at most 16+1 connections reused for ~190 requests
start --delay 10
run "$check" --in-flight 16 read "$purl/blob" "$blob"
expect_rc 0 "read through the proxy"
expect_out "^ok requests [0-9]+ " "counted requests"
stop
read -r _ conns _ < "$work/stats"
if ((conns > 2 && conns <= 17)); then pass; else fail "connections: $conns (want 3..17: ranges in flight on reused connections)"; fi

# one request in flight: one connection for everything after the HEAD
start
run "$check" --in-flight 1 read "$purl/blob" "$blob"
expect_rc 0 "read with one request in flight"
stop
read -r _ conns _ < "$work/stats"
if ((conns == 2)); then pass; else fail "one in flight used $conns connections (want 2: HEAD, then one reused)"; fi

# neighbouring ranges: one request; ranges 40 KiB apart: one each
run "$check" adjacent "$base/blob" "$blob"
expect_rc 0 "neighbouring ranges read right"
expect_out "^ok requests 9$" "64 neighbours in one request, 8 far ranges in 8"
run "$check" --block 16000 adjacent "$base/blob" "$blob"
expect_out "^ok requests 12$" "joined requests stay within block_size (64000 bytes in 16000-byte requests)"

# listing (nginx's JSON index) and stat
run "$check" list "$base/"
expect_rc 0 "list"
if [[ $out == $'blob\nsub' ]]; then pass; else fail "list gives blob and sub"; fi
run "$check" stat "$base/blob"
expect_out "^file 3000000$" "stat of a file"
run "$check" stat "$base/sub"
expect_out "^dir$" "stat of a folder"
run "$check" stat "$base/nothing"
expect_out "^missing$" "stat of nothing"

# errors: each exits 2 naming the URL and the cause
run "$check" read "http://user:secret@$target/nothing" "$blob"
expect_rc 2 "404"
expect_err "^http://\*\*\*@127.0.0.1:[0-9]+/nothing: not found \(HTTP 404\)" "404 names the URL, credentials masked"
if [[ $errout != *secret* ]]; then pass; else fail "the password was printed"; fi
run "$check" read "$base/_forbidden/x" "$blob"
expect_rc 2 "403"
expect_err "/_forbidden/x: access denied \(HTTP 403\)" "403 names the cause"
run "$check" --retries 1 read "$base/_error/x" "$blob"
expect_rc 2 "500 every time"
expect_err "/_error/x: server error \(HTTP 500\) after repeating" "500 after the retries"
run "$check" read "$base/_loop" "$blob"
expect_rc 2 "redirect loop"
expect_err "/_loop: too many redirects" "a redirect loop is refused"

# 500 once, then the answer: repeated after a backoff
start --fault http500 --faults 1
run "$check" read "$purl/blob" "$blob"
expect_rc 0 "500 then success"
expect_out "retries 1$" "one retry"
stop
# a reset on a range's connection: repeated
start --fault reset --first 2 --faults 1
run "$check" read "$purl/blob" "$blob"
expect_rc 0 "reset then success"
expect_out "retries [1-9]" "the reset range was repeated"
stop

# truncated: the connection closes mid-body (no retries left)
start --fault close --after 1000 --first 2
run "$check" --retries 0 --in-flight 1 read "$purl/blob" "$blob"
expect_rc 2 "close mid-body"
expect_err "^http://127.0.0.1:[0-9]+/blob: bytes [0-9]+-[0-9]+: (truncated|connection closed)" "close mid-body names the range and the cause"
stop
# ... and with retries, every connection cut: still an error, never short data
start --fault close --after 1000 --first 2
run "$check" --retries 2 --in-flight 4 --block 100000 read "$purl/blob" "$blob"
expect_rc 2 "every connection cut mid-body"
expect_err "bytes [0-9]+-[0-9]+: (truncated|connection closed).*after repeating" "the cause after retries"
stop

# a wrong Content-Length on a range's answer
start --fault wrong-length --first 2
run "$check" --retries 0 --in-flight 1 read "$purl/blob" "$blob"
expect_rc 2 "wrong Content-Length"
expect_err "/blob: bytes [0-9]+-[0-9]+: (wrong Content-Length|truncated body)" "wrong Content-Length names the cause"
stop

# no answer: bounded by the timeout, no hang (HEAD answered, ranges never)
start --fault stall --after 0 --first 2
t0=$(date +%s)
run timeout 30 "$check" --timeout 1 --retries 0 read "$purl/blob" "$blob"
expect_rc 2 "a server that stops answering"
expect_err "/blob: bytes [0-9]+-[0-9]+: no answer within the timeout" "timeout names the cause"
stop
start --fault stall --after 0
run timeout 30 "$check" --timeout 1 read "$purl/blob" "$blob"
expect_rc 2 "no answer to open"
expect_err "^http://127.0.0.1:[0-9]+/blob: no answer within the timeout" "open's timeout"
stop

# an object changed after open: an error, never mixed data
cp "$blob" "$work/data/changing"
touch -d '2020-01-01' "$work/data/changing"
run "$check" changed "$base/changing" "$work/data/changing"
expect_rc 2 "object changed mid-run"
expect_err "/changing: the object changed since it was opened \(ETag" "changed object names the cause"

# a server that ignores Range (Python's http.server answers 200 with the whole file): refused
pyport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
(cd "$work/data" && exec python3 -m http.server "$pyport" --bind 127.0.0.1 >/dev/null 2>&1) &
pyserver=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$pyport) 2>/dev/null && break; sleep 0.1; done
run "$check" --retries 0 read "http://127.0.0.1:$pyport/blob" "$blob"
expect_rc 2 "a server that ignores Range"
expect_err "/blob: bytes [0-9]+-[0-9]+: the server ignored the range \(HTTP 200\)" "ignored range names the cause"
kill $pyserver; wait $pyserver 2>/dev/null

# --trace-requests: method, URL, range, status, time
run "$check" --trace read "$base/blob" "$blob"
expect_err "^pipebench: HEAD http://127.0.0.1:[0-9]+/blob - -> 200 HTTP/1.1 [0-9.]+ ms$" "trace of open"
expect_err "^pipebench: GET http://127.0.0.1:[0-9]+/blob bytes=0-2999999 -> 206 HTTP/1.1 [0-9.]+ ms$" "trace of a range"
# HTTPS: HTTP/2 where the server offers it
run "$check" --insecure --trace read "$sbase/blob" "$blob"
expect_err "^pipebench: GET https://127.0.0.1:[0-9]+/blob bytes=0-2999999 -> 206 HTTP/2 [0-9.]+ ms$" "HTTP/2 over TLS"
finish
