#!/usr/bin/env bash
# gen --preset imagenet on a small count: ImageNet-like sizes (mostly 500 on the longer side,
# landscape and portrait, a little smaller now and then), RGB JPEG of about photographs' bytes
# per image, a class folder per image up to 100; gen's own options refused when wrong; and
# inspect's count of the non-image files it passed over.
source "$(dirname "$0")/../../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
T="timeout 120"

run $T "$pb" gen --out "$work/in" --preset imagenet --rows 24
expect_rc 0 "gen --preset imagenet --rows 24"
tree="$work/in/imagefolder"
n=$(find "$tree" -name '*.jpg' | wc -l)
if [[ $n -eq 24 ]]; then pass; else fail "24 JPEG files, not $n"; fi
classes=$(find "$tree" -mindepth 1 -maxdepth 1 -type d | wc -l)
if [[ $classes -eq 24 ]]; then pass; else fail "one class folder per image below 100 images, not $classes"; fi
# Bytes per image: photographs at quality 95 and 4:2:0 average about 100-130 kB at this size.
mean=$(find "$tree" -name '*.jpg' -printf '%s\n' | awk '{s += $1} END {printf "%d", s / NR / 1000}')
if (( mean >= 70 && mean <= 160 )); then pass; else fail "mean JPEG size $mean kB, outside 70..160"; fi

run $T "$pb" inspect "$tree" --json --no-crc
expect_rc 0 "inspect the preset's tree"
sizes=$(grep -oE '"shape":\[1,3,1,[0-9]+,[0-9]+\]' <<<"$out" | sed -E 's/.*,([0-9]+),([0-9]+)\]/\1x\2/' | sort -u)
count=$(wc -l <<<"$sizes")
if (( count >= 3 )); then pass; else fail "sizes vary (got: $sizes)"; fi
bad=0 landscape=0 portrait=0
for s in $sizes; do
  h=${s%x*} w=${s#*x}
  long=$(( h > w ? h : w )) short=$(( h > w ? w : h ))
  (( long <= 500 && long >= 375 && short >= 200 )) || bad=1
  (( w > h )) && landscape=1
  (( h > w )) && portrait=1
done
if [[ $bad -eq 0 ]]; then pass; else fail "sizes within ImageNet's (got: $sizes)"; fi
if [[ $landscape -eq 1 ]]; then pass; else fail "some landscape images (got: $sizes)"; fi
expect_out '"count":24,"images"' "no ignored count when nothing was ignored"

# inspect counts what it passed over: a text file in a class, one at the top, a link to nowhere.
touch "$tree/README.txt" "$tree/class_000/labels.csv"
ln -s "$work/nowhere" "$tree/class_001/gone.jpg"
run $T "$pb" inspect "$tree" --no-crc
expect_rc 0 "inspect a tree with other files"
expect_out "24 images \(3 other files ignored\)" "inspect names the count of ignored files"
run $T "$pb" inspect "$tree" --json --no-crc
expect_out '"count":24,"ignored":3,' "inspect --json gives the count of ignored files"

# gen's own options and the preset's name
run $T "$pb" gen --out "$work/x" --rows 2 --options gen:content=film
expect_rc 1 "an unknown content"
expect_err "content=film: want cells or photo" "the bad content is named"
run $T "$pb" gen --out "$work/x" --rows 2 --options gen:colour=1
expect_rc 1 "an unknown gen option"
expect_err "colour" "the unknown gen option is named"
run $T "$pb" gen --out "$work/x" --preset imagenet21k
expect_rc 1 "an unknown preset"
expect_err "unknown preset 'imagenet21k'" "the unknown preset is named"
# A fixed size with the preset's content: one shape for every image.
run $T "$pb" gen --out "$work/fixed" --preset imagenet --rows 3 --size 64x80 --options gen:sizes=fixed
expect_rc 0 "the preset at a fixed size"
run $T "$pb" inspect "$work/fixed/imagefolder" --json --no-crc
n=$(grep -oE '"shape":\[1,3,1,64,80\]' <<<"$out" | wc -l)
if [[ $n -eq 3 ]]; then pass; else fail "3 images of 64x80, not $n"; fi
finish
