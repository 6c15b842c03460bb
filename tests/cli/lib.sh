# Helpers for CLI tests: run a command, then check exit code, stdout and stderr.
set -u
fails=0
passes=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run CMD...: captures exit code in $rc, stdout in $out, stderr in $errout
run() {
  "$@" >"$work/out" 2>"$work/err"
  rc=$?
  out=$(cat "$work/out")
  errout=$(cat "$work/err")
}
pass() { passes=$((passes + 1)); }
fail() {
  fails=$((fails + 1))
  printf 'FAIL: %s\n  exit: %s\n  stdout: %s\n  stderr: %s\n' "$1" "$rc" "${out:0:2000}" "${errout:0:2000}"
}
expect_rc() { if [[ $rc -eq $1 ]]; then pass; else fail "$2 (expected exit $1)"; fi; }
expect_out() { if grep -qE -- "$1" <<<"$out"; then pass; else fail "$2 (stdout lacks /$1/)"; fi; }
expect_err() { if grep -qE -- "$1" <<<"$errout"; then pass; else fail "$2 (stderr lacks /$1/)"; fi; }
expect_quiet_out() { if [[ -z $out ]]; then pass; else fail "$1 (stdout should be empty)"; fi; }
finish() {
  echo "$passes passed, $fails failed"
  [[ $fails -eq 0 ]]
}
