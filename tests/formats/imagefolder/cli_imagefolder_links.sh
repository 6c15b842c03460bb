#!/usr/bin/env bash
# Links in an image folder: a class folder linking to itself (two and three times) is walked
# once, so opening ends at once and counts each file once; links that stay inside the dataset
# are followed, a folder or image linked from outside it is refused naming the link, and links
# to nothing or to non-image files are passed over.
source "$(dirname "$0")/../../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}

mk() { # mk DIR: classes cat and dog, two 24x32 JPEGs each
  mkdir -p "$1/cat" "$1/dog"
  "$py" - "$1" <<'PY'
import sys
from PIL import Image
for cls, col in (("cat", (200, 30, 40)), ("dog", (20, 160, 90))):
    for k in range(2):
        Image.new("RGB", (32, 24), tuple(c + 10 * k for c in col)).save(f"{sys.argv[1]}/{cls}/{k}.jpg")
PY
}

# loops: a class folder holding two, then three links to itself (16 levels deep, that was
# 2^17 - 1 copies of each file, and 3^16 folders that never finished)
for links in 2 3; do
  t="$work/loop$links"
  mk "$t"
  for k in $(seq 1 "$links"); do ln -s . "$t/cat/self$k"; done
  ln -s .. "$t/dog/up" # and one to the folder above, the dataset itself
  run timeout 20 "$pb" inspect "$t"
  expect_rc 0 "a class folder with $links links to itself opens"
  expect_out "format imagefolder, 4 images" "each file counted once with $links self-links"
  run timeout 20 "$pb" convert "$t" --to raw --out "$work/loop$links.pbraw"
  expect_rc 0 "converting a tree with $links self-links"
done

# links that stay inside the dataset are followed: a file linked from one class to another,
# a sub-folder of a class reached through a link; links to nothing and non-image links pass
t="$work/inside"
mk "$t"
mkdir -p "$t/dog/sub" "$t/cat/deep"
cp "$t/dog/0.jpg" "$t/cat/deep/9.jpg"
ln -s ../dog/1.jpg "$t/cat/x.jpg"
ln -s deep "$t/cat/again" # the same folder as cat/deep: read once
ln -s /nonexistent/a.jpg "$t/dog/gone.jpg"
ln -s /etc/passwd "$t/dog/notes.txt"
run timeout 20 "$pb" inspect "$t"
expect_rc 0 "links inside the dataset are followed"
expect_out "format imagefolder, 6 images \(3 other files ignored\)" "linked file counted, linked folder once, dangling and non-image links ignored"

# a folder or an image linked from outside the dataset: refused, naming the link
mkdir -p "$work/outside"
cp "$t/cat/0.jpg" "$work/outside/o.jpg"
t="$work/outdir"
mk "$t"
ln -s "$work/outside" "$t/cat/ext"
run timeout 20 "$pb" inspect "$t"
expect_rc 2 "a folder linked from outside is refused"
expect_err "outdir/cat/ext: a link to .*outside, outside the dataset's folder" "names the link and its target"
t="$work/outfile"
mk "$t"
ln -s "$work/outside/o.jpg" "$t/dog/o.jpg"
run timeout 20 "$pb" inspect "$t"
expect_rc 2 "an image linked from outside is refused"
expect_err "outfile/dog/o.jpg: a link to .*outside/o.jpg, outside the dataset's folder" "names the link and its target"
t="$work/outclass"
mk "$t"
ln -s "$work/outside" "$t/bird"
run timeout 20 "$pb" inspect "$t"
expect_rc 2 "a class folder linked from outside is refused"
expect_err "outclass/bird: a link to .*outside" "names the class link"
# ... and a link up out of the dataset through ..
t="$work/updir"
mk "$t"
ln -s ../../outside "$t/cat/up"
run timeout 20 "$pb" inspect "$t"
expect_rc 2 "a relative link leaving the dataset is refused"

# the dataset given through a link of its own is read as usual
ln -s "$work/inside" "$work/via"
run timeout 20 "$pb" inspect "$work/via"
expect_rc 0 "a dataset reached through a link"
expect_out "6 images" "the same images through the link"

# a class folder that is another class's folder (a link): each folder is read once
t="$work/twin"
mk "$t"
ln -s cat "$t/kitten"
run timeout 20 "$pb" inspect "$t"
expect_rc 2 "a class linking to another class is refused"
expect_err "twin/kitten: class folder is the same folder as another class" "names the class"
finish
