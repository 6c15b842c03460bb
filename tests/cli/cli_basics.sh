#!/usr/bin/env bash
# The tool's surface that is not the same from run to run: calibrate's measurements and a failed
# save, and --help for every command the top-level help lists (the fixed texts, usage errors and
# exit codes are golden cases in tests/cli/golden/, run by golden.sh).
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}

# Every command the top-level help lists, including any added later, has --help on stdout
# with exit 0.
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
