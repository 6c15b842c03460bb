#!/usr/bin/env bash
# What a user reads after a run: every CSV it writes opens in a plain CSV reader (pandas
# read_csv as it is, where pandas is installed) with numbers in their shortest exact form; the
# report links the final folder, never the staging one, and its headlines are the console's
# and pipebench_summary.json's; `pipebench report` still reads what it needs from the CSVs.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}

run "$pb" gen --out "$work/ds" --rows 40 --size 32x32 --formats raw,tiff
expect_rc 0 "gen"
mkdir -p "$work/r/data"
{
  echo "framework,model,device_type,batch_size,latency_p50_ms,throughput_ips"
  echo "pytorch,resnet50,cpu,1,3.5,401"
} >"$work/r/data/benchmark_results_20260101_000000.csv"
run "$pb" run --data "$work/ds" --out "$work/r" --repeats 2 --samples 10 --warmup 2 --batches 4 \
  --batch-sizes 2,4 --workers 0,1 --caches none --transforms none --steps 3 --no-peer --tracks 1,2,3
expect_rc 0 "small run"
console=$errout

# Every CSV: a header first, as many fields in each row, numbers in their shortest form.
if "$py" - "$work/r/data" <<'PY'
import csv, glob, re, sys
files = sorted(glob.glob(sys.argv[1] + "/*.csv"))
assert len(files) >= 3, files
num = re.compile(r"^-?(\d+\.\d*|\d*\.\d+|\d+)(e[-+]\d+)?$")
for path in files:
    with open(path, newline="") as f:
        text = f.read()
    assert not text.startswith("#") and "\n#" not in text, path + ": comment lines"
    rows = list(csv.reader(text.splitlines(True)))
    head = rows[0]
    assert head and all(re.match(r"^[A-Za-z_]", h) for h in head), (path, head)
    for i, r in enumerate(rows[1:], 2):
        assert len(r) == len(head), f"{path}:{i}: {len(r)} fields, header {len(head)}"
        for v in r:
            if num.match(v) and ("." in v or "e" in v):
                assert float(repr(float(v))) == float(v) and repr(float(v)) == v, \
                    f"{path}:{i}: {v} is not the shortest text of {float(v)!r}"
    try:
        import pandas
    except ImportError:
        continue
    df = pandas.read_csv(path)
    assert list(df.columns) == head and len(df) == len(rows) - 1, path
print("csv ok")
PY
then pass; else fail "CSVs read as plain CSV"; fi
[[ -s $work/r/data/pipebench_track1.csv-metadata.json ]] && pass || fail "a CSV's types and metadata sit in its sidecar"

# The report names the folder it lies in; no staging folder anywhere in it.
if ! grep -q 'pbtmp' "$work/r/report.md" "$work/r/report.html"; then pass; else fail "report names the staging folder"; fi
grep -qF 'Table: [`data/pipebench_track2.parquet`](data/pipebench_track2.parquet).' "$work/r/report.md" \
  && pass || fail "report links the table in data/"
grep -qF '<a href="data/pipebench_track2.parquet">' "$work/r/report.html" \
  && pass || fail "report.html links the table in data/"

# One answer in the console, the summary and the report.
if "$py" - "$work/r" "$console" <<'PY'
import json, re, sys
d, console = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/data/pipebench_summary.json"))
md = open(d + "/report.md").read()
t2 = s["tracks"]["2"] if "tracks" in s else s["track2"]
line = re.search(r"track 2: fastest bulk loading from storage: (\S+), (\d+) samples/s at batch size (\d+) with (\d+) workers", console)
assert line, console
rep = re.search(r"\*\*Fastest format for bulk loading: (\S+)\*\* \(track 2, cache none\): (\d+) samples/s at batch size (\d+) with (\d+) workers", md)
assert rep, md
summ = (t2["fastest_bulk_format"], "%.0f" % t2["fastest_bulk_samples_per_sec"],
        "%d" % t2["fastest_bulk_batch_size"], "%d" % t2["fastest_bulk_workers"])
assert line.groups() == rep.groups() == summ, (line.groups(), rep.groups(), summ)
t1 = s["tracks"]["1"] if "tracks" in s else s["track1"]
line = re.search(r"track 1: fastest random single-sample access from storage: (\S+) \(median p50 ([^)]*) per sample\)", console)
rep = re.search(r"\*\*Fastest format for random access: (\S+)\*\* \(track 1: random order, no transform, no cache; median p50 ([^;)]*?) per sample", md)
assert line and rep and line.groups() == rep.groups(), (line and line.groups(), rep and rep.groups())
assert t1["fastest_random_access_format"] == line.group(1)
line = re.search(r"track 3: (The model loop is .*)", console)
assert line, console
assert line.group(1) in md.replace("**", ""), (line.group(1), md)
t3 = s["tracks"]["3"] if "tracks" in s else s["track3"]
assert t3["any_data_bound"] == ("is data-bound" in line.group(1)), t3
print("one answer")
PY
then pass; else fail "console, summary and report say the same"; fi

# With the Parquet files gone, the report is drawn from the CSVs and their sidecars: the
# tables' run (env.timestamp_utc) is still known, so no "another run" warning.
rm -f "$work/r/data/"pipebench_track*.parquet
run "$pb" report "$work/r"
expect_rc 0 "report from the CSVs"
grep -qF 'Table: [`data/pipebench_track1.csv`](data/pipebench_track1.csv).' "$work/r/report.md" \
  && pass || fail "report drew track 1 from its CSV"
if ! grep -q "comes from another run" "$work/r/report.md"; then pass; else fail "CSV metadata lost"; fi
finish
