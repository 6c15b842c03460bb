# Sourced by the remote tests: http_serve DIR starts nginx over DIR (tests/remote/servers.sh)
# with its state in $work/state, skips the test (exit 0) where nginx is not installed, stops it
# and removes $work on exit (and a proxy whose pid is in $proxy), and sets target (HOST:PORT),
# base (http://target) and sbase (the https URL). proxy_start ARGS... puts pipebench-netem
# ($PIPEBENCH_NETEM) with those arguments in front of it (purl: its URL; counts in $work/stats),
# proxy_stop ends it (writing the counts), proxy_peak prints the most requests it saw at once.
servers=$PIPEBENCH_SOURCE_DIR/tests/remote/servers.sh
proxy=
http_serve() {
  chmod -R a+rX "$work"
  "$servers" http-start "$1" "$work/state" >/dev/null
  local rc=$?
  if [[ $rc -eq 77 ]]; then echo "SKIP: nginx not installed"; exit 0; fi
  [[ $rc -eq 0 ]] || { echo "nginx did not start"; exit 1; }
  trap '[[ -n $proxy ]] && kill $proxy; "$servers" http-stop "$work/state"; rm -rf "$work"' EXIT
  target=127.0.0.1:$(cat "$work/state/http.port")
  base=http://$target
  sbase=https://127.0.0.1:$(cat "$work/state/https.port")
}
proxy_start() {
  rm -f "$work/port" "$work/stats"
  "$PIPEBENCH_NETEM" --target "$target" --port-file "$work/port" --stats "$work/stats" "$@" \
    >/dev/null &
  proxy=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  purl=http://127.0.0.1:$(cat "$work/port")
}
proxy_stop() { kill "$proxy"; wait "$proxy" 2>/dev/null; proxy=; }
proxy_peak() { sed -n 's/^waiting_peak //p' "$work/stats"; }
