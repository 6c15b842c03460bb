#!/usr/bin/env bash
# The lance format from the command line: gen and convert write both layouts through the Lance
# engine, inspect reads them with the manifest's CRC-32s, convert reads them back out, probe
# detects them, a short run measures tracks 1 and 2 inside the engine, and bad datasets exit 2
# naming the dataset. Skips (77) where Node or the engine is not installed.
source "${PIPEBENCH_SOURCE_DIR:?}/tests/cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=/usr/bin/python3
crcs() { "$py" -c 'import json,sys; print(" ".join(i["crc32"] for i in json.load(sys.stdin)["images"]))'; }

run timeout 120 "$pb" gen --out "$work/probe" --rows 1 --size 4x4 --formats lance
if [[ $rc -ne 0 ]] && grep -q "Node.js\|@lancedb/lancedb\|helper .* is missing" <<<"$errout"; then
  echo "skipped: $errout"
  exit 77
fi

d="$work/ds"
run timeout 300 "$pb" gen --out "$d" --rows 12 --size 40x50 --channels 2 --z 3 --formats raw,lance,ome-parquet --chunk 16x32
expect_rc 0 "gen raw,lance,ome-parquet"
want=$("$py" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["crc32"]))' "$d/manifest.json")
[[ -d $d/images.lance/_versions ]] && pass || fail "gen writes images.lance with _versions/"

# inspect, the format detected from the folder
run timeout 120 "$pb" inspect "$d/images.lance" --json
expect_rc 0 "inspect lance"; expect_out '"format":"lance"' "detected as lance"
[[ $(crcs <<<"$out") == "$want" ]] && pass || fail "lance (chunks) CRC-32s equal the manifest's"

# convert to each layout and back out; pixels stay the same
for layout in chunks planes bytes; do
  run timeout 300 "$pb" convert "$d/images.pbraw" --to lance --out "$work/$layout.lance" --options "layout=$layout"
  expect_rc 0 "convert raw -> lance layout=$layout"
  run timeout 120 "$pb" inspect "$work/$layout.lance" --json
  expect_rc 0 "inspect lance layout=$layout"
  [[ $(crcs <<<"$out") == "$want" ]] && pass || fail "lance $layout CRC-32s equal the manifest's"
  run timeout 300 "$pb" convert "$work/$layout.lance" --to ome-parquet --out "$work/$layout.parquet"
  expect_rc 0 "convert lance layout=$layout -> ome-parquet"
  run timeout 120 "$pb" inspect "$work/$layout.parquet" --json
  [[ $(crcs <<<"$out") == "$want" ]] && pass || fail "round trip through lance $layout"
done
run timeout 60 "$pb" convert "$d/images.pbraw" --to lance --out "$work/x.lance" --options layout=rows
expect_rc 1 "unknown layout is a usage error"; expect_err "layout=rows" "names the bad layout"
[[ ! -e $work/x.lance ]] && pass || fail "nothing written for a usage error"

# bad datasets: exit 2 naming the dataset and the problem
cp -r "$work/bytes.lance" "$work/nodata.lance"; rm -f "$work/nodata.lance"/data/*.lance
run timeout 120 "$pb" inspect "$work/nodata.lance"
expect_rc 2 "missing data file"; expect_err "nodata.lance.*Not found" "names the dataset and the missing file"
cp -r "$work/bytes.lance" "$work/garbage.lance"
for f in "$work/garbage.lance"/_versions/*; do echo garbage >"$f"; done
run timeout 120 "$pb" inspect "$work/garbage.lance"
expect_rc 2 "garbage in _versions"; expect_err "garbage.lance: cannot open it" "names the dataset"

# a short run: lance through pipebench's loader and inside its engine, for tracks 1 and 2
run timeout 500 "$pb" run --data "$d" --formats lance,ome-parquet --out "$work/r" --tracks 1,2 --repeats 1 \
  --samples 40 --warmup 8 --batches 6 --batch-sizes 4 --workers 0 --caches none --transforms none --no-peer
expect_rc 0 "run tracks 1,2 with lance"
expect_err "lance inside lancedb-node [0-9.]+: random takeOffsets p50" "track 1 engine rows reported"
expect_err "lance inside lancedb-node [0-9.]+: batch 4" "track 2 engine rows reported"
"$py" - "$work/r/data" <<'PY' && pass || fail "engine rows in the tables"
import csv, sys
def rows(name):
    with open(f"{sys.argv[1]}/{name}") as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))
t1 = [r for r in rows("pipebench_track1.csv") if r["engine"].startswith("lancedb-node ")]
assert {r["access_pattern"] for r in t1} == {"sequential", "random"}, t1
assert all(r["format"] == "lance (engine)" and int(r["num_samples"]) == 40 and float(r["p50"]) > 0 for r in t1)
t2 = [r for r in rows("pipebench_track2.csv") if r["engine"].startswith("lancedb-node ")]
assert len(t2) == 1 and t2[0]["loader"] == "lancedb-node" and int(t2[0]["num_batches"]) == 6, t2
assert float(t2[0]["samples_per_sec"]) > 0
own = [r for r in rows("pipebench_track2.csv") if r["format"] == "lance" and r["loader"] == "pipebench"]
assert own and not own[0]["engine"], own
PY
finish
