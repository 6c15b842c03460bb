#!/usr/bin/env bash
# gen, inspect, convert: the same pixels in every format, and clear failures on bad input.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
d=$work/ds

run "$pb" gen --out "$d" --rows 12 --size 24x31 --channels 2 --z 3 --dtype uint16 --seed 7
expect_rc 0 "gen all formats"
[[ -f $d/manifest.json ]] && pass || fail "gen writes manifest.json"

# Every written format holds the same pixels: inspect's crc32 equals the manifest's.
formats=$("$py" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["formats"]))' "$d/manifest.json")
[[ $formats == *tiff* && $formats == *ome-zarr* && $formats == *raw* ]] && pass || fail "gen wrote tiff, ome-zarr and raw ($formats)"
for f in $formats; do
  p=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["formats"][sys.argv[2]])' "$d/manifest.json" "$f")
  run "$pb" inspect "$d/$p" --json
  expect_rc 0 "inspect $f"
  if "$py" - "$work/out" "$d/manifest.json" "$f" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))
man = json.load(open(sys.argv[2]))
assert got["format"] == sys.argv[3], (got["format"], sys.argv[3])
imgs = got["images"]
assert len(imgs) == man["rows"], (len(imgs), man["rows"])
for i, im in enumerate(imgs):
    assert im["index"] == i
    assert im["dtype"] == "uint16", im
    assert im["shape"] == [1, 2, 3, 24, 31], im["shape"]
    assert im["crc32"] == man["crc32"][i], (i, im["crc32"], man["crc32"][i])
PY
  then pass; else fail "inspect $f: pixels match the manifest"; fi
done

# The inspect table form and --format.
run "$pb" inspect "$d/tiff" --format tiff
expect_rc 0 "inspect --format"; expect_out "format tiff, 12 images" "inspect table header"

# convert: tiff -> ome-zarr keeps every pixel.
run "$pb" convert "$d/tiff" --to ome-zarr --out "$work/conv.zarrs"
expect_rc 0 "convert tiff -> ome-zarr"
run "$pb" inspect "$work/conv.zarrs" --json
"$py" -c 'import json,sys; a=json.load(open(sys.argv[1])); m=json.load(open(sys.argv[2])); assert [i["crc32"] for i in a["images"]]==m["crc32"]' "$work/out" "$d/manifest.json" \
  && pass || fail "convert keeps pixels"

# Bad input (missing paths, unknown formats and dtypes, bad sizes, a refused format, a missing
# --out, a truncated raw file) is checked byte for byte by the golden cases (tests/cli/golden).

# A truncated file: a clear failure naming it, never a crash.
first=$(ls "$d/tiff" | head -1)
cp -r "$d/tiff" "$work/trunc"
truncate -s 100 "$work/trunc/$first"
run "$pb" inspect "$work/trunc"
expect_rc 2 "inspect truncated tiff"; expect_err "$first" "truncated file named"
# Two bad files among good ones: every image gets its row, both bad ones are named, the JSON is
# whole, exit 2.
third=$(ls "$d/tiff" | sed -n 3p)
truncate -s 100 "$work/trunc/$third"
run "$pb" inspect "$work/trunc"
expect_rc 2 "inspect with two truncated TIFFs"
expect_err "$first" "the first bad file named"; expect_err "$third" "the second bad file named"
expect_err "2 of [0-9]+ images could not be read" "inspect counts the failures"
[[ $(grep -c UNREADABLE <<<"$out") -eq 2 ]] && pass || fail "two rows marked UNREADABLE"
[[ $(grep -cE '^ +[0-9]+  ' <<<"$out") -eq $(ls "$d/tiff" | grep -c '\.tif') ]] && pass || fail "a row per image"
run "$pb" inspect "$work/trunc" --json
expect_rc 2 "inspect --json with two truncated TIFFs"
if python3 -c 'import json, sys; j = json.loads(sys.argv[1]); e = [i for i in j["images"] if "error" in i]; assert len(e) == 2 and len(j["images"]) == j["count"], j' "$out"; then pass; else fail "inspect --json: whole, two errors"; fi

# A failed gen leaves an earlier dataset whole.
before=$(cat "$d/manifest.json")
run "$pb" gen --out "$d" --rows 2 --formats tiff --compression nonsense-codec
[[ $rc -ne 0 ]] && pass || fail "gen with a bad compression fails"
[[ $(cat "$d/manifest.json") == "$before" ]] && pass || fail "failed gen keeps the old manifest"
run "$pb" inspect "$d/tiff" --json
expect_rc 0 "old dataset still readable after a failed gen"

# A second gen of the same images into the same folder adds its formats to the manifest (each
# with how it was written); different images replace the manifest.
m=$work/merge
run "$pb" gen --out "$m" --rows 6 --size 16x16 --formats raw,tiff --compression none
expect_rc 0 "gen raw,tiff"
run "$pb" gen --out "$m" --rows 6 --size 16x16 --formats ome-zarr --compression zstd
expect_rc 0 "gen ome-zarr into the same folder"
"$py" -c 'import json,sys; m=json.load(open(sys.argv[1])); assert set(m["formats"])=={"raw","tiff","ome-zarr"}, m["formats"]; assert m["format_write"]["tiff"]["compression"]=="none" and m["format_write"]["ome-zarr"]["compression"]=="zstd", m["format_write"]' "$m/manifest.json" \
  && pass || fail "same images: formats merged in the manifest"
run "$pb" gen --out "$m" --rows 7 --size 16x16 --formats ome-zarr
expect_rc 0 "gen other images into the same folder"
"$py" -c 'import json,sys; m=json.load(open(sys.argv[1])); assert set(m["formats"])=={"ome-zarr"}, m["formats"]' "$m/manifest.json" \
  && pass || fail "other images: the manifest lists only what they were written as"

finish
