#!/usr/bin/env bash
# The tool's surface: help, version, unknown commands and options, calibrate.
. "$(dirname "$0")/lib.sh"
pb=${PB_CLI:?}
py=${PB_PYTHON:-/usr/bin/python3}

run "$pb" --help
expect_rc 0 "--help"; expect_out "usage: pipebench <command>" "--help text"; expect_out "calibrate" "--help lists calibrate"

run "$pb" --version
expect_rc 0 "--version"; expect_out "^pipebench [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]+|unknown" "--version text"

run "$pb"
expect_rc 1 "no command"; expect_err "usage" "no command prints usage on stderr"

run "$pb" frobnicate
expect_rc 1 "unknown command"; expect_err "unknown command 'frobnicate'" "unknown command message"
expect_err "pipebench --help" "unknown command hint"; expect_quiet_out "unknown command"

run "$pb" calibrate --bogus
expect_rc 1 "unknown option"; expect_err "unknown option '--bogus'" "unknown option message"
expect_err "try 'pipebench calibrate --help'" "unknown option hint"; expect_quiet_out "unknown option"

run "$pb" calibrate --rounds zero
expect_rc 1 "bad number"; expect_err "--rounds must be an integer" "bad number message"

run "$pb" calibrate --rounds
expect_rc 1 "missing value"; expect_err "needs a value" "missing value message"

# Every command has --help on stdout with exit 0.
for c in $("$pb" --help | awk '/^commands:/{f=1;next} f&&/^  [a-z]/{print $1} /^$/{if(f)exit}'); do
  run "$pb" "$c" --help
  expect_rc 0 "$c --help"; expect_out "usage: pipebench $c" "$c --help text"
done

# calibrate --json: the JSON has every headline value, and the file is saved.
run "$pb" calibrate --json --size-mb 8 --rounds 2 --no-matmul --out "$work/cal/calibration.json"
expect_rc 0 "calibrate --json"
if "$py" - "$work/out" "$work/cal/calibration.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
assert a == b, "stdout JSON differs from the saved file"
for k in ["memcpy_gbps", "read_warm_gbps", "read_cold_gbps", "zstd_gbps", "blosc_gbps"]:
    v = a[k]["value"]
    assert isinstance(v, float) and v > 0, (k, v)
assert a["timer_overhead_ns"] > 0 and a["timer_resolution_ns"] > 0
assert a["env"]["duckdb_version"].startswith("v1.4"), a["env"]["duckdb_version"]
assert a["env"]["hostname"]
PY
then pass; else fail "calibrate JSON content"; fi

# A failing save (the target is a folder) exits 2 and leaves no partial file.
mkdir -p "$work/isdir"
run "$pb" calibrate --size-mb 2 --rounds 1 --no-matmul --out "$work/isdir"
expect_rc 2 "calibrate save into a folder"; expect_err "isdir" "save error names the path"

finish
