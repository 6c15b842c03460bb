#!/usr/bin/env bash
# What the commands read: FIFOs, sockets and devices are refused at once (never opened in a way
# that blocks), a dataset is recognised from its own top-level files only, data problems exit 2
# without the usage hint, and --options keys and --compression names a format does not know
# are usage errors (exit 1) that list the valid ones. Every command that could block runs under
# its own timeout, so a hang fails this test instead of stalling the suite.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=20

no_hint() { if grep -q "try 'pipebench" <<<"$errout"; then fail "$1 (no usage hint expected)"; else pass; fi; }

run "$pb" gen --out "$work/ds" --rows 3 --size 8x8 --formats raw,tiff,ome-zarr,oa-dataset
expect_rc 0 "gen a small dataset"

# ---- FIFOs, sockets and character devices ----------------------------------------------------
mkfifo "$work/fifo"
run timeout $lim "$pb" inspect "$work/fifo"
expect_rc 2 "inspect a FIFO"; expect_err "fifo is a FIFO, not a dataset" "inspect names the FIFO"
run timeout $lim "$pb" inspect "$work/fifo" --format raw
expect_rc 2 "inspect a FIFO as raw"; expect_err "is a FIFO, not a dataset" "raw FIFO message"
run timeout $lim "$pb" convert "$work/fifo" --to raw --out "$work/c.raw"
expect_rc 2 "convert from a FIFO"; expect_err "is a FIFO, not a dataset" "convert FIFO message"
run timeout $lim "$pb" run --data "$work/fifo" --out "$work/r" --tracks 1 --no-peer
expect_rc 2 "run --data FIFO"; expect_err "is a FIFO, not a dataset" "run FIFO message"; no_hint "run FIFO"
run timeout $lim "$pb" revs --config "$work/fifo" --output "$work/revs.csv"
expect_rc 2 "revs --config FIFO"; expect_err "fifo is a FIFO, not a task file" "revs FIFO message"
run timeout $lim "$pb" revs --compare --output "$work/fifo"
expect_rc 2 "revs --compare --output FIFO"; expect_err "fifo" "revs names the results FIFO"
mkdir -p "$work/gf"
mkfifo "$work/gf/manifest.json"
run timeout $lim "$pb" run --data "$work/gf" --out "$work/rg" --tracks 1 --no-peer
expect_rc 2 "a gen folder whose manifest is a FIFO"; expect_err "manifest.json" "the manifest is named"
run timeout $lim "$pb" inspect /dev/null
expect_rc 2 "inspect a character device"; expect_err "/dev/null is a character device, not a dataset" "device message"
if "$py" -c "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$work/sock"; then
  run timeout $lim "$pb" inspect "$work/sock"
  expect_rc 2 "inspect a socket"; expect_err "sock is a socket, not a dataset" "socket message"
fi

# A FIFO inside a dataset: named like a TIFF file beside a good one, as a Zarr group's
# attributes, as a part of an oa-dataset.
mkdir -p "$work/tf"
cp "$work/ds/tiff/img_00000.ome.tif" "$work/tf/"
mkfifo "$work/tf/img_00001.ome.tif"
run timeout $lim "$pb" convert "$work/tf" --to raw --out "$work/tf.raw"
expect_rc 2 "convert a tiff folder holding a FIFO"
expect_err "img_00001.ome.tif is a FIFO, not a TIFF file" "the FIFO in the tiff folder is named"
mkfifo "$work/tf/only.tif"
rm "$work/tf/img_00000.ome.tif" "$work/tf/img_00001.ome.tif"
run timeout $lim "$pb" inspect "$work/tf"
expect_rc 2 "a folder whose only *.tif is a FIFO"; expect_err "not a dataset in any known format" "FIFO-only folder message"
cp -r "$work/ds/ome-zarr/img_00000.zarr" "$work/z.zarr"
rm "$work/z.zarr/.zattrs"; mkfifo "$work/z.zarr/.zattrs"
run timeout $lim "$pb" inspect "$work/z.zarr"
if [[ $rc -eq 1 || $rc -eq 2 ]]; then pass; else fail "a Zarr group whose .zattrs is a FIFO ends with an error"; fi
cp -r "$work/ds/oa-dataset" "$work/oa"
rm "$work/oa/chunks.parquet"; mkfifo "$work/oa/chunks.parquet"
run timeout $lim "$pb" inspect "$work/oa"
expect_rc 2 "an oa-dataset part that is a FIFO"; expect_err "chunks.parquet is a FIFO" "oa-dataset FIFO message"

# ---- a dataset is recognised from its own top-level files ------------------------------------
mkdir -p "$work/tree/a/b" "$work/tree/c"
cp -r "$work/ds" "$work/tree/a/b/nested"
cp -r "$work/ds/ome-zarr/img_00001.zarr" "$work/tree/c/deep.zarr"
cp "$work/ds/tiff/img_00002.ome.tif" "$work/tree/c/"
run timeout $lim "$pb" inspect "$work/tree"
expect_rc 2 "a folder with datasets only below it"; expect_err "not a dataset in any known format" "nested datasets are not probed"
run timeout $lim "$pb" run --data "$work/tree" --out "$work/rt" --tracks 1 --no-peer
expect_rc 2 "run on a folder with datasets only below it"; no_hint "run on a tree"
mkdir -p "$work/fake/empty.zarr" "$work/fake/dir.tif"
: > "$work/fake/file.zarr"
run timeout $lim "$pb" inspect "$work/fake"
expect_rc 2 "folders named *.zarr and *.tif without their files"
expect_err "fake: not a dataset in any known format" "names alone do not make a dataset"
run timeout $lim "$pb" run --data / --out "$work/root" --tracks 1 --no-peer
expect_rc 2 "run --data / ends at once"; expect_err "not a dataset" "run --data / says why"
# A folder gen wrote (manifest.json and a dataset per format) is named as one, with its datasets.
run timeout $lim "$pb" inspect "$work/ds"
expect_rc 2 "inspect of a gen folder"
expect_err "ds: a folder .pipebench gen. wrote, holding a dataset per format \(.*tiff.* among them\)" \
  "a gen folder is named as one, with its datasets"
# What is recognised still is: a tiff folder, a zarr folder of image groups, one group.
for d in tiff ome-zarr ome-zarr/img_00000.zarr oa-dataset; do
  run timeout $lim "$pb" inspect "$work/ds/$d"
  expect_rc 0 "inspect $d"
done

# ---- data problems exit 2, usage problems 1 ----------------------------------------------------
# mixed NAME GEN-OPTIONS...: a tiff folder of ds's images and one image gen writes with the options
mixed() {
  local name=$1
  shift
  run "$pb" gen --out "$work/$name-one" --rows 1 --formats tiff "$@"
  expect_rc 0 "gen the odd image ($*)"
  mkdir -p "$work/$name"
  cp "$work/ds/tiff/"*.tif "$work/$name/"
  cp "$work/$name-one/tiff/img_00000.ome.tif" "$work/$name/img_00009.ome.tif"
  run timeout 120 "$pb" run --data "$work/$name" --out "$work/r-$name" --tracks 1 --no-peer --samples 3
}
# two heights and widths: measured through the crop, and said
mixed mixed --size 12x12
expect_rc 0 "run on images of two sizes"
expect_err "tiff: images differ in size .*center_crop_resize to 224x224" "the run says it crops"
# two channel counts cannot be cropped to one shape: the loader's message
mixed mixc --channels 3
expect_rc 2 "run on images of two channel counts"; expect_err "batches need one shape" "mixed shapes message"; no_hint "mixed shapes"
"$py" - "$work/empty.pbraw" <<'PY'
import struct, sys
h = b"PBRAWIMG" + struct.pack("<IIQQQQII Q", 1, 512, 0, 64, 64, 0, 160, 0, 64)
assert len(h) == 64
open(sys.argv[1], "wb").write(h)
PY
run timeout 120 "$pb" run --data "$work/empty.pbraw" --out "$work/re" --tracks 1 --no-peer
expect_rc 2 "run on a dataset without images"; expect_err "has no images" "empty dataset message"; no_hint "empty dataset"
# Two images with one name (a raw file written by hand, docs/format-raw.md): the tiff writer
# cannot name both files, a data problem found after the options were accepted.
"$py" - "$work/dup.pbraw" <<'PY'
import struct, sys
pix, index = [64, 128], 192
recs = b""
for off in pix:
    r = struct.pack("<QQIIQ", off, 4, 0, 0, 0) + struct.pack("<5q", 1, 1, 1, 2, 2)
    r = r.ljust(208, b"\0") + b"same.ome.tif".ljust(256, b"\0")
    recs += r.ljust(512, b"\0")
size = index + len(recs)
h = b"PBRAWIMG" + struct.pack("<IIQQQQII Q", 1, 512, 2, index, size, 0, 160, 0, size)
body = bytearray(size)
body[:64] = h
body[64:68] = b"\1\2\3\4"
body[128:132] = b"\5\6\7\10"
body[index:] = recs
open(sys.argv[1], "wb").write(bytes(body))
PY
run "$pb" convert "$work/dup.pbraw" --to tiff --out "$work/dup_tiff"
expect_rc 2 "convert of two images with one name"; expect_err "same.ome.tif' was already written" "the clash is named"; no_hint "name clash"
run "$pb" run --data "$work/ds" --cache lukewarm
expect_rc 1 "a bad option value stays a usage error"; expect_err "try 'pipebench run --help'" "usage hint kept"

# ---- --options and --compression a format does not know ---------------------------------------
run "$pb" gen --out "$work/o1" --rows 1 --formats tiff --options x=1
expect_rc 1 "gen tiff with an unknown option"; expect_err "unknown option 'x=1'" "unknown key named"
expect_err "tile=YxX, predictor=1\|2\|3, bigtiff=0\|1" "tiff's keys listed"
[[ ! -e $work/o1/tiff ]] && pass || fail "nothing written after a bad option"
run "$pb" gen --out "$work/o2" --rows 1 --formats tiff,raw --options tiff:x=1
expect_rc 1 "a scoped unknown option"; expect_err "unknown option 'x=1' for tiff" "scoped key named"
run "$pb" gen --out "$work/o3" --rows 1 --formats raw --options tile=16x16
expect_rc 1 "raw with an option"; expect_err "raw takes no options" "raw takes none"
run "$pb" gen --out "$work/o4" --rows 1 --formats oa-dataset --options chunks=2
expect_rc 1 "oa-dataset unknown option"; expect_err "valid: chunks_per_row_group" "oa-dataset keys listed"
run "$pb" convert "$work/ds/images.pbraw" --to ome-parquet --out "$work/o5.parquet" --options colour=red
expect_rc 1 "ome-parquet unknown option"; expect_err "variant=numeric\|bytes" "ome-parquet keys listed"
run "$pb" convert "$work/ds/images.pbraw" --to tiff --out "$work/o6" --options tile
expect_rc 1 "an option without a value"; expect_err "option without a value 'tile'" "bare key named"
run "$pb" convert "$work/ds/images.pbraw" --to raw --out "$work/o7.raw" --compression bogus
expect_rc 1 "convert to raw with an unknown codec"; expect_err "unknown compression 'bogus'" "codec named"
[[ ! -e $work/o7.raw ]] && pass || fail "nothing written after a bad codec"
run "$pb" convert "$work/ds/images.pbraw" --to raw --out "$work/o8.raw" --compression zstd
expect_rc 0 "a codec of another format is accepted by raw (one gen writes them all)"
run "$pb" gen --out "$work/o9" --rows 2 --size 16x16 --formats tiff,ome-zarr \
  --options tiff:tile=16x16,ome-zarr:zarr=3
expect_rc 0 "known scoped options still work"

finish
