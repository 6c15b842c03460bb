# Sourced by the remote tests: http_serve DIR starts nginx over DIR (tests/remote/servers.sh)
# with its state in $work/state, skips the test (exit 0) where nginx is not installed, stops it
# and removes $work on exit (and a proxy whose pid is in $proxy), and sets target (HOST:PORT),
# base (http://target) and sbase (the https URL).
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
