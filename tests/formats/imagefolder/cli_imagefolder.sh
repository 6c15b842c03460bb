#!/usr/bin/env bash
# imagefolder through the command line: bad files and trees exit 2 naming the file (never a
# crash or a hang), trees are detected from their top level only, gen/convert write trees that
# inspect and run read, and writer options are checked.
source "$(dirname "$0")/../../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
T="timeout 60"

# good: a tree of two classes (PIL writes the files)
mk() { # mk DIR: two classes of two 24x32 JPEGs each
  mkdir -p "$1/cat" "$1/dog"
  "$py" - "$1" <<'PY'
import sys
from PIL import Image
for cls, col in (("cat", (200, 30, 40)), ("dog", (20, 160, 90))):
    for k in range(2):
        Image.new("RGB", (32, 24), tuple(c + 10 * k for c in col)).save(f"{sys.argv[1]}/{cls}/{k}.jpg")
PY
}
# `cli_imagefolder.sh run`: the run command on trees (a test of its own: the plots' font
# library leaks, so it is kept from the sanitizer builds like the other run tests).
if [[ ${1:-} == run ]]; then
  mk "$work/good"
  run timeout 300 "$pb" run --data "$work/good" --tracks 1 --out "$work/res"
  expect_rc 0 "run --data TREE --tracks 1"
  if grep -q "| imagefolder | random |" "$work/res/report.md"; then pass; else fail "run: imagefolder rows in the report"; fi
  # different sizes (as photograph trees are): every track reads them through the crop, says so
  # and names it in its rows; the torch peer, which needs one size, is left out with a line
  mk "$work/sizes"
  "$py" -c "from PIL import Image; Image.new('RGB', (33, 24)).save('$work/sizes/dog/9.jpg')"
  run timeout 300 "$pb" run --data "$work/sizes" --tracks 1,2,3,4 --repeats 1 --out "$work/res_sizes"
  expect_rc 0 "run on images of different sizes"
  expect_err "imagefolder: images differ in size \(image 4 is 24x33, image 0 24x32\): every track reads them through center_crop_resize to 224x224" \
    "the run says it crops, naming two sizes"
  expect_err "torch DataLoader peer reads one size only and is left out" "the torch peer is left out"
  for k in 1 2 3 4; do
    [[ -f $work/res_sizes/data/pipebench_track$k.parquet ]] || fail "track $k wrote no table on images of different sizes"
  done
  "$py" - "$work/res_sizes/data" <<'PY' || fail "the tracks' rows name the crop and cache none only"
import csv, sys
d = sys.argv[1]
def rows(k):
    with open(f"{d}/pipebench_track{k}.csv") as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))
for k in (1, 2, 4):
    got = {r["transform"] for r in rows(k)}
    assert got == {"center_crop_resize"}, (k, got)
for k in (1, 2, 3):
    got = {r["cache"] for r in rows(k) if r.get("loader", "pipebench") == "pipebench"}
    assert got == {"none"}, (k, got)
PY
  pass
  if grep -q "center_crop_resize (images of different sizes)" "$work/res_sizes/report.md"; then pass; else fail "report: track 1's answer names the crop"; fi
  finish
  exit
fi

mk "$work/good"
run $T "$pb" inspect "$work/good"
expect_rc 0 "inspect a tree"
expect_out "format imagefolder, 4 images" "inspect names the format"
expect_out "dog/1.jpg +uint8 +\[1,3,1,24,32\]" "inspect shows class/file, dtype and shape"

# each bad file alone in an otherwise good tree
bad() { # bad NAME WHAT PATTERN: inspect exits 2, stderr names the file and matches PATTERN
  run $T "$pb" inspect "$work/$1"
  expect_rc 2 "$2"
  expect_err "$1/cat/.*(jpg|jpeg|png).*$3" "$2: message"
  rm -rf "$work/$1"
}
mk "$work/trunc"
head -c 300 "$work/trunc/cat/0.jpg" >"$work/trunc/cat/zz.jpg"
bad trunc "JPEG truncated in its header" "truncated or corrupt"
mk "$work/trunc"
f="$work/trunc/cat/big.jpg"
"$py" -c "
from PIL import Image
Image.radial_gradient('L').convert('RGB').resize((120, 100)).save('$f', quality=90)"
head -c $(($(stat -c %s "$f") - 40)) "$f" >"$work/trunc/cat/zz.jpg"
bad trunc "JPEG truncated in its pixels" "truncated or corrupt"
mk "$work/trunc"
"$py" -c "from PIL import Image; Image.new('RGB', (64, 64), (1, 2, 3)).save('$work/trunc/cat/zz.png')"
head -c 60 "$work/trunc/cat/zz.png" >"$work/trunc/cat/zy.png"
bad trunc "truncated PNG" "truncated or corrupt PNG"
mk "$work/notjpeg"
echo "hello, not a picture" >"$work/notjpeg/cat/zz.jpg"
bad notjpeg "a .jpg that is no JPEG" "not a JPEG or PNG"
mk "$work/zero"
: >"$work/zero/cat/zz.jpeg"
bad zero "a zero-byte file" "empty file"
mk "$work/huge"
"$py" - "$work/huge/cat/zz.jpg" "$work/huge/cat/0.jpg" <<'PY'
import sys
data = bytearray(open(sys.argv[2], "rb").read())
sof = data.index(b"\xff\xc0")
data[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2
open(sys.argv[1], "wb").write(data)
PY
# 60000 x 60000 x 3 bytes would be 10.8 GB: refused from the header, under a 1 GB limit.
limit="ulimit -v 1000000;"
ldd "$pb" | grep -q libasan && limit="" # ASan reserves terabytes of address space for itself
run bash -c "$limit $T '$pb' inspect '$work/huge'"
expect_rc 2 "a 60000 x 60000 JPEG header"
expect_err "huge/cat/zz.jpg: image header claims 60000 x 60000 pixels" "60000 x 60000: message"
rm -rf "$work/huge"
mk "$work/cmyk"
"$py" -c "from PIL import Image; Image.new('CMYK', (8, 8), (0, 50, 100, 0)).save('$work/cmyk/cat/zz.jpg')"
bad cmyk "CMYK JPEG" "CMYK JPEG is not supported"
mk "$work/fifo"
mkfifo "$work/fifo/cat/zz.jpg"
bad fifo "a FIFO named .jpg does not block" "FIFO"

mk "$work/empty"
mkdir "$work/empty/bird"
echo "notes" >"$work/empty/bird/readme.txt"
run $T "$pb" inspect "$work/empty"
expect_rc 2 "an empty class folder"
expect_err "empty/bird: class folder holds no .jpg, .jpeg or .png" "empty class: message"

# detection: class folders without images, or images at the top, are no image folder
mkdir -p "$work/noimg/a"
echo x >"$work/noimg/a/b.txt"
run $T "$pb" inspect "$work/noimg"
expect_rc 2 "class folders without images are not detected"
expect_err "not a dataset in any known format" "no images: message"
# an image folder named explicitly is read even when detection would pass it by
mk "$work/topimg"
cp "$work/topimg/cat/0.jpg" "$work/topimg/loose.jpg"
run $T "$pb" inspect "$work/topimg"
expect_rc 2 "images at the top level: not detected"
run $T "$pb" inspect --format imagefolder "$work/topimg"
expect_rc 0 "--format imagefolder reads it (the loose file is ignored)"
expect_out "4 images" "--format imagefolder: 4 images"

# gen and convert write trees that inspect and run read
run $T "$pb" gen --out "$work/gen" --formats imagefolder,raw --rows 12 --channels 3 --size 40x48 \
  --options "imagefolder:quality=80,imagefolder:subsampling=444,imagefolder:classes=3"
expect_rc 0 "gen --formats imagefolder"
run $T "$pb" inspect "$work/gen/imagefolder"
expect_out "12 images" "gen: 12 images"
expect_out "class_002/img_00011.jpg +uint8 +\[1,3,1,40,48\]" "gen: 3 classes, uint16 scaled to uint8"
run $T "$pb" convert "$work/gen/images.pbraw" --to imagefolder --out "$work/conv" --options png=1
expect_rc 0 "convert --to imagefolder (png)"
run $T "$pb" inspect "$work/conv"
expect_out "class_009/img_00009.png" "convert: PNG files in 10 default classes"
run $T "$pb" convert "$work/gen/images.pbraw" --to imagefolder --out "$work/conv2" --options subsampling=411
expect_rc 1 "subsampling=411 is a usage error"
expect_err "444, 422 or 420" "subsampling=411: valid values listed"
run $T "$pb" convert "$work/gen/images.pbraw" --to imagefolder --out "$work/conv2" --options tile=8x8
expect_rc 1 "an unknown option is a usage error"
expect_err "valid: quality=1..100, subsampling=444\|422\|420, png=0\|1, classes=N" "unknown option: keys listed"

finish
