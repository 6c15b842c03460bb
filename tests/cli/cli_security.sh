#!/usr/bin/env bash
# Symbolic links planted where pipebench writes or reads. An output is never written through a
# link: the link itself is replaced by the new file and the file it named elsewhere is left as it
# was (a failed run's summary, calibrate --out). An entry a dataset reads (a manifest's entry, a
# TIFF of a folder, a file of an oa-dataset, an image of a folder of OME-Zarr images, an image's
# multiscale array, a chunk) must stay inside the dataset's folder once its links are resolved:
# a link out of it is refused with exit 2, naming the entry.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
small=(--repeats 1 --samples 4 --warmup 1 --batches 2 --batch-sizes 2 --workers 0 --caches none
       --transforms none --python "$py" --no-peer)

# ---- outputs ----------------------------------------------------------------------------------
mkdir -p "$work/elsewhere" "$work/m/data"
printf 'precious' >"$work/elsewhere/victim.json"
ln -s "$work/elsewhere/victim.json" "$work/m/data/pipebench_summary_failed.json"
run "$pb" run --data "$work/missing" --out "$work/m" --tracks 1 "${small[@]}"
expect_rc 2 "run with a missing dataset"
[[ $(cat "$work/elsewhere/victim.json") == precious ]] && pass \
  || fail "a failed run wrote through OUT/data/pipebench_summary_failed.json, a link"
sf=$work/m/data/pipebench_summary_failed.json
[[ -f $sf && ! -L $sf ]] && grep -q missing "$sf" && pass \
  || fail "the failed run's summary replaces the link"

ln -s "$work/elsewhere/victim.json" "$work/cal.json"
run "$pb" calibrate --out "$work/cal.json" --size-mb 1 --rounds 1 --no-matmul --no-gpu --jpeg-images 0 --json
expect_rc 0 "calibrate"
[[ $(cat "$work/elsewhere/victim.json") == precious ]] && pass \
  || fail "calibrate --out wrote through a link"
[[ -f $work/cal.json && ! -L $work/cal.json ]] && grep -q pipebench.calibration "$work/cal.json" \
  && pass || fail "calibrate --out replaces the link with its file"

# ---- entries of datasets ----------------------------------------------------------------------
run "$pb" gen --out "$work/ds" --rows 3 --size 8x8 --formats raw,tiff,ome-zarr,oa-dataset
expect_rc 0 "gen"
run "$pb" gen --out "$work/other" --rows 3 --size 8x8 --formats raw,tiff,ome-zarr,oa-dataset \
  --seed 9
expect_rc 0 "gen of another dataset"
entry() {
  "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["formats"][sys.argv[2]])' \
    "$work/ds/manifest.json" "$1"
}
raw=$(entry raw) tiff=$(entry tiff) zarr=$(entry ome-zarr) oad=$(entry oa-dataset)
# The datasets as written read (so each refusal below is the link's).
for f in "$raw" "$tiff" "$zarr" "$oad"; do
  run "$pb" inspect "$work/ds/$f"
  expect_rc 0 "inspect $f as written"
done

# A manifest entry that is a link to another dataset's file.
cp -a "$work/ds" "$work/m1"
rm "$work/m1/$raw"
ln -s "$work/other/$raw" "$work/m1/$raw"
run "$pb" run --data "$work/m1" --formats raw --out "$work/r1" --tracks 1 "${small[@]}"
expect_rc 2 "run over a manifest whose entry links out of the folder"
expect_err "$raw leads outside the dataset folder" "the entry and the folder are named"
# A link that stays inside the folder is fine.
cp -a "$work/ds" "$work/m2"
mv "$work/m2/$raw" "$work/m2/real.pbraw"
ln -s real.pbraw "$work/m2/$raw"
run "$pb" run --data "$work/m2" --formats raw --out "$work/r2" --tracks 1 "${small[@]}"
expect_rc 0 "run over a manifest whose entry links inside the folder"

# A TIFF of a folder of TIFFs that is a link out of it.
cp -a "$work/ds/$tiff" "$work/t"
first=$(ls "$work/t" | grep -i '\.tif' | head -n 1)
rm "$work/t/$first"
ln -s "$work/other/$tiff/$first" "$work/t/$first"
run "$pb" inspect "$work/t"
expect_rc 2 "inspect a TIFF folder with a link out of it"
expect_err "$first leads outside the dataset folder" "the TIFF is named"

# A file of an oa-dataset that is a link out of it.
cp -a "$work/ds/$oad" "$work/o"
rm "$work/o/chunks.parquet"
ln -s "$work/other/$oad/chunks.parquet" "$work/o/chunks.parquet"
run "$pb" inspect "$work/o"
expect_rc 2 "inspect an oa-dataset with a link out of it"
expect_err "chunks.parquet leads outside the dataset folder" "the file is named"

# An image of a folder of OME-Zarr images that is a link out of it, and an image's array.
cp -a "$work/ds/$zarr" "$work/z"
img=$(ls "$work/z" | grep '\.zarr$' | head -n 1)
rm -r "${work:?}/z/$img"
ln -s "$work/other/$zarr/$img" "$work/z/$img"
run "$pb" inspect "$work/z"
expect_rc 2 "inspect a folder of OME-Zarr images with a link out of it"
expect_err "$img leads outside the dataset folder" "the image is named"
cp -a "$work/ds/$zarr" "$work/z2"
rm -r "${work:?}/z2/$img/0"
ln -s "$work/other/$zarr/$img/0" "$work/z2/$img/0"
run "$pb" inspect "$work/z2"
expect_rc 2 "inspect an OME-Zarr image whose array links out of it"
expect_err "$img/0 leads outside the image group" "the array is named"
# A chunk of an image that is a link to another dataset's chunk.
cp -a "$work/ds/$zarr" "$work/z3"
chunk=$(cd "$work/z3" && find "$img/0" -type f ! -name '.*' | sort | head -n 1)
rm "$work/z3/$chunk"
ln -s "$work/other/$zarr/$chunk" "$work/z3/$chunk"
run "$pb" inspect "$work/z3"
expect_rc 2 "inspect an OME-Zarr image whose chunk links out of it"
expect_err "leads outside the array folder" "the chunk is named"

finish
