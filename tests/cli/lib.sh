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

# One small calibration of this machine, saved once in the build folder of the program under test
# and taken by the tests' runs (run --calibration, through PIPEBENCH_CALIBRATION): measuring it in
# every run cost seconds a run. Tests of a run's own calibration unset it; a program outside a
# build folder (the installed tree) measures as a user's run does.
if [[ -z ${PIPEBENCH_CALIBRATION+x} && -n ${PIPEBENCH_CLI:-} && -f ${PIPEBENCH_CLI%/*}/CMakeCache.txt ]]; then
  pb_test_cal=${PIPEBENCH_CLI%/*}/test-calibration.json
  if [[ ! -s $pb_test_cal ]]; then
    "$PIPEBENCH_CLI" calibrate --size-mb 8 --rounds 1 --no-matmul --no-gpu --jpeg-images 0 \
      --out "$pb_test_cal.$$.json" >/dev/null 2>&1 && mv -f "$pb_test_cal.$$.json" "$pb_test_cal"
    rm -f "$pb_test_cal.$$.json"
  fi
  [[ -s $pb_test_cal ]] && export PIPEBENCH_CALIBRATION=$pb_test_cal
fi
