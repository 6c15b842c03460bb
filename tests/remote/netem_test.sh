#!/usr/bin/env bash
# pipebench-netem between curl and nginx: bytes unchanged, delay and bandwidth cap at least what
# was asked, and each fault mode as the http backend's tests use it.
# Env: PIPEBENCH_NETEM (the proxy), PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
servers=$PIPEBENCH_SOURCE_DIR/tests/remote/servers.sh
mkdir -p "$work/data"
head -c 3000000 /dev/urandom >"$work/data/blob"
chmod 755 "$work" "$work/data"
"$servers" http-start "$work/data" "$work/state" >/dev/null
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIP: nginx not installed"; exit 0; fi
[[ $rc -eq 0 ]] || { echo "nginx did not start"; exit 1; }
trap '"$servers" http-stop "$work/state"; kill $proxy 2>/dev/null; rm -rf "$work"' EXIT
target=127.0.0.1:$(cat "$work/state/http.port")
proxy=

start() { # netem args...
  rm -f "$work/port"
  "$PIPEBENCH_NETEM" --target "$target" --port-file "$work/port" --stats "$work/stats" "$@" >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  url=http://127.0.0.1:$(cat "$work/port")/blob
}
stop() { kill "$proxy"; wait "$proxy" 2>/dev/null; proxy=; }
ms() { echo $(($(date +%s%N) / 1000000)); }
fetch() { # curl args...: sets rc, size, code, took (ms)
  local t0; t0=$(ms)
  rm -f "$work/got"
  code=$(curl -s -o "$work/got" -w '%{http_code}' "$@")
  rc=$?
  took=$(($(ms) - t0))
  size=$(stat -c %s "$work/got" 2>/dev/null || echo 0)
  out="rc=$rc size=$size code=$code took=${took}ms" errout=""
}

start
fetch "$url"
expect_rc 0 "plain fetch through the proxy"
if cmp -s "$work/got" "$work/data/blob"; then pass; else fail "bytes changed through the proxy"; fi
stop
if grep -q '^connections 1 up [0-9]* down 3000[0-9][0-9][0-9]$' "$work/stats"; then pass; else fail "stats: $(cat "$work/stats")"; fi

# one request and its answer cross the delay twice
start --delay 100
fetch -r 0-99 "$url"
expect_rc 0 "delayed fetch"
if ((took >= 200)); then pass; else fail "a 100 ms delay each way took only ${took} ms for one exchange"; fi
stop

# jitter never reorders bytes
start --delay 2 --jitter 10
fetch "$url"
expect_rc 0 "jittered fetch"
if cmp -s "$work/got" "$work/data/blob"; then pass; else fail "jitter reordered bytes"; fi
stop

# 3 MB at 6 MB/s takes at least half a second
start --rate 6000000
fetch "$url"
expect_rc 0 "capped fetch"
if ((took >= 500)) && cmp -s "$work/got" "$work/data/blob"; then pass; else fail "a 6 MB/s cap moved 3 MB in ${took} ms"; fi
stop

# --link-rate is shared: two 3 MB fetches at once through a 12 MB/s link take at least half a
# second together (a cap per connection would let them finish in a quarter)
start --link-rate 12000000
t0=$(ms)
curl -s -o "$work/got1" "$url" &
c1=$!
curl -s -o "$work/got2" "$url"
wait "$c1"
took=$(($(ms) - t0))
if ((took >= 480)) && cmp -s "$work/got1" "$work/data/blob" && cmp -s "$work/got2" "$work/data/blob"
then pass; else fail "a 12 MB/s link moved 2 x 3 MB in ${took} ms"; fi
stop

start --fault close --after 100000
fetch "$url"
if [[ $rc -ne 0 ]] && ((size > 0 && size < 100000)); then pass; else fail "close mid-body"; fi
stop

start --fault stall --after 1000
fetch -m 2 "$url"
expect_rc 28 "a stalled answer times out on the client"
stop

start --fault http500 --faults 1
fetch "$url"
if [[ $code == 500 ]]; then pass; else fail "first connection answered 500"; fi
fetch "$url"
if [[ $code == 200 && $size -eq 3000000 ]]; then pass; else fail "second connection passes through"; fi
stop

start --fault reset
fetch "$url"
expect_rc 56 "reset: the connection is reset"
stop

start --fault wrong-length
fetch "$url"
if [[ $size -eq 2999999 ]]; then pass; else fail "wrong-length: Content-Length one short"; fi
stop
finish
