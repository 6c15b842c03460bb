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
run "$pb" calibrate --json --size-mb 8 --rounds 2 --no-matmul --jpeg-images 0 --out "$work/cal/calibration.json"
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
# the GPU is measured unless --no-gpu: its figures, or one line why not
assert "name" in a["cuda"] or a["cuda"]["unavailable"], a.get("cuda")
PY
then pass; else fail "calibrate JSON content"; fi

# run --calibration FILE takes the saved limits instead of measuring them, and says so; one
# measured on another machine, a missing file and one that is not a calibration exit 2 naming
# the file, and the earlier results stay as they were.
"$pb" gen --out "$work/ds" --rows 8 --size 16x16 --formats raw >/dev/null 2>&1
one=(--data "$work/ds" --tracks 1 --repeats 1 --samples 4 --warmup 1 --no-peer --out "$work/res")
run env -u PIPEBENCH_CALIBRATION "$pb" run "${one[@]}" --calibration "$work/cal/calibration.json"
expect_rc 0 "run --calibration"
expect_err "^run: machine: memory copy [0-9.]+ GB/s .* \\(saved in $work/cal/calibration.json at 20[0-9-]+T" \
  "the run says where its machine limits come from"
"$py" - "$work/res/data/pipebench_summary.json" "$work/cal/calibration.json" <<'PY' && pass ||
import json, sys
s, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
k = s["calibration"]
assert k["memcpy_gbps"] == c["memcpy_gbps"]["value"], (k, c["memcpy_gbps"])
assert k["saved_in"] == sys.argv[2] and k["measured_utc"] == c["env"]["timestamp_utc"], k
PY
  fail "the summary carries the saved calibration's values"
before=$(md5sum "$work/res/data/pipebench_track1.parquet")
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["env"]["hostname"]="elsewhere"; json.dump(d, open(sys.argv[2], "w"))' \
  "$work/cal/calibration.json" "$work/other.json"
echo '{"kind": "something else"}' >"$work/notcal.json"
for bad in "other.json:was measured on elsewhere .*not on this machine" \
           "nowhere.json:nowhere.json: No such file" "notcal.json:not a pipebench calibration file"; do
  run env PIPEBENCH_CALIBRATION="$work/${bad%%:*}" "$pb" run "${one[@]}"
  expect_rc 2 "a bad calibration ${bad%%:*}"
  expect_err "^pipebench run: calibration.*${bad#*:}" "${bad%%:*}: says why, naming the file"
  [[ $(md5sum "$work/res/data/pipebench_track1.parquet") == "$before" ]] && pass ||
    fail "${bad%%:*}: the earlier results were written over"
done

# A failing save (the target is a folder) exits 2 and leaves no partial file.
mkdir -p "$work/isdir"
run "$pb" calibrate --size-mb 2 --rounds 1 --no-matmul --jpeg-images 0 --out "$work/isdir"
expect_rc 2 "calibrate save into a folder"; expect_err "isdir" "save error names the path"

finish
