#!/usr/bin/env bash
# Where outputs go and what a failed write does: empty paths are usage errors; device nodes are
# written in place or refused, never replaced; a full disk fails the command with ENOSPC and
# leaves no truncated file; a killed gen or convert leaves temporaries that the next one removes.
# Device nodes (mknod) and small file systems (tmpfs) need root: without it those parts print a
# skip line; as root, a failing mknod or mount fails the test.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
lim=120

mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# small_fs DIR SIZE: mounts a tmpfs of SIZE on DIR; returns 1 (after a skip line) when not root
# or not permitted, fails the test when root cannot mount.
small_fs() {
  mkdir -p "$1"
  if [[ $(id -u) -ne 0 ]]; then
    echo "skip: $1: mounting a tmpfs needs root"
    return 1
  fi
  local why
  if ! why=$(mount -t tmpfs -o "size=$2" tmpfs "$1" 2>&1); then
    if grep -qiE "permission|not permitted|denied" <<<"$why"; then
      echo "skip: $1: mounting a tmpfs is not permitted here ($why)"
    else
      rc=0 out="" errout=$why
      fail "mount -t tmpfs on $1 failed as root"
    fi
    return 1
  fi
  mounts+=("$1")
}

# no_temporaries DIR WHAT: nothing named like a temporary below DIR.
no_temporaries() {
  local left
  left=$(find "$1" \( -name '*.pbtmp-*' -o -name 'tmp_*' -o -name '.gen-staging*' \) 2>/dev/null)
  if [[ -z $left ]]; then pass; else rc=0 out=$left errout=""; fail "$2: temporaries left"; fi
}

# ---- empty paths: usage errors (exit 1) naming the option, nothing written -----------------
mkdir -p "$work/cwd" && cd "$work/cwd" || exit 1
run "$pb" gen --rows 2 --size 8x8 --formats raw --out ""
expect_rc 1 "gen --out ''"
expect_err "--out: an empty path" "gen names the empty option"
run "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --out ""
expect_rc 1 "calibrate --out ''"
expect_err "--out: an empty path" "calibrate names the empty option"
run "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --dir "" --out "$work/c.json"
expect_rc 1 "calibrate --dir ''"
# ---- calibrate's JPEG set: written into --dir, measured, removed; one a killed calibrate left
# behind is swept by the next ----------------------------------------------------------------
mkdir -p "$work/jd"
run "$pb" calibrate --size-mb 1 --rounds 1 --no-matmul --no-gpu --jpeg-images 8 --dir "$work/jd" \
  --out "$work/jd.json" --json
expect_rc 0 "calibrate --jpeg-images 8"
if python3 - "$work/jd.json" <<'PY'; then pass; else rc=0; fail "calibrate's jpeg entry"; fi
import json, sys
j = json.load(open(sys.argv[1]))["jpeg"]
assert j["images"] == 8 and j["bytes"] > 8 * 20000, j
assert j["cpu_images_per_s"]["value"] > 0 and j["cpu_threads"] >= 1, j
assert j["gpu_images_per_s"]["value"] is None and "--no-gpu" in j["gpu_unavailable"], j
PY
if [[ -z $(ls -A "$work/jd") ]]; then pass; else rc=0 out=$(ls -A "$work/jd"); fail "calibrate left its JPEG set in --dir"; fi
"$pb" calibrate --size-mb 1 --rounds 1 --no-matmul --no-gpu --jpeg-images 400 --dir "$work/jd" \
  --out "$work/jd2.json" >/dev/null 2>&1 &
victim=$!
for _ in $(seq 600); do
  compgen -G "$work/jd/.pipebench-calibrate-jpeg.pbtmp-*" >/dev/null && break
  sleep 0.1
done
kill -9 $victim 2>/dev/null
wait $victim 2>/dev/null
if compgen -G "$work/jd/.pipebench-calibrate-jpeg.pbtmp-*" >/dev/null; then pass; else rc=0; fail "no JPEG set folder while calibrate ran"; fi
run "$pb" calibrate --size-mb 1 --rounds 1 --no-matmul --no-gpu --jpeg-images 2 --dir "$work/jd" \
  --out "$work/jd3.json"
expect_rc 0 "calibrate after a killed one"
expect_out "jpeg: 2 photo-like JPEGs" "calibrate prints its JPEG rows"
if [[ -z $(ls -A "$work/jd") ]]; then pass; else rc=0 out=$(ls -A "$work/jd"); fail "the killed calibrate's JPEG set was not swept"; fi
run "$pb" calibrate --jpeg-images 100001 --out "$work/jd4.json"
expect_rc 1 "calibrate --jpeg-images out of range"
[[ ! -e $work/jd4.json ]] && pass || fail "a refused calibrate wrote its output"

run "$pb" train --num-images 16 --metrics-out ""
expect_rc 1 "train --metrics-out ''"
expect_err "--metrics-out: an empty path" "train names the empty option"
run "$pb" infer --framework pipebench --batch-sizes 1 --iterations 1 --output-dir ""
expect_rc 1 "infer --output-dir ''"
run "$pb" convert "" --to raw --out "$work/x"
expect_rc 1 "convert with an empty source"
run "$pb" inspect ""
expect_rc 1 "inspect ''"
run "$pb" report ""
expect_rc 1 "report ''"
run "$pb" revs --config ""
expect_rc 1 "revs --config ''"
run "$pb" gen --out "$work/ds" --rows 4 --size 16x16 --formats raw
expect_rc 0 "gen a small dataset"
run timeout $lim "$pb" run --data "$work/ds" --tracks 1 --samples 3 --no-peer --out ""
expect_rc 1 "run --out ''"
expect_err "--out: an empty path" "run names the empty option"
run timeout $lim "$pb" run --data "" --tracks 1 --samples 3 --no-peer --out "$work/r0"
expect_rc 1 "run --data ''"
run "$pb" convert "$work/ds/images.pbraw" --to tiff --out=
expect_rc 1 "convert --out= (empty after '=')"
if [[ -z $(ls -A "$work/cwd") ]]; then pass; else fail "empty paths wrote into the current folder"; fi
cd "$work" || exit 1

# ---- device nodes: written in place or refused, never replaced ------------------------------
if [[ $(id -u) -ne 0 ]]; then
  echo "skip: device targets need root for mknod"
elif ! mknod "$work/null" c 1 3 || ! mknod "$work/full" c 1 7; then
  rc=0 out="" errout=""
  fail "mknod failed as root"
else
  run "$pb" convert "$work/ds/images.pbraw" --to tiff --out "$work/null"
  expect_rc 2 "convert --out onto a character device is refused"
  expect_err "is a character device" "convert says what the target is"
  run "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --out "$work/null"
  expect_rc 0 "calibrate --out a null device"
  run "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --out "$work/full"
  expect_rc 2 "calibrate --out a full device"
  expect_err "No space left on device" "calibrate reports ENOSPC from the full device"
  run "$pb" train --num-images 16 --metrics-out "$work/full"
  expect_rc 2 "train --metrics-out a full device"
  expect_err "No space left on device" "train reports ENOSPC from the full device"
  run "$pb" train --num-images 16 --metrics-out "$work/null"
  expect_rc 0 "train --metrics-out a null device"
  mkdir -p "$work/devds" && mknod "$work/devds/images.pbraw" c 1 3
  run "$pb" gen --out "$work/devds" --rows 2 --size 8x8 --formats raw
  expect_rc 2 "gen refuses a format file that is a device"
  expect_err "is a character device" "gen says what the target is"
  [[ -c $work/devds/images.pbraw ]] && pass || fail "gen left the device node alone"
  [[ -c $work/null ]] && pass || fail "the null node is still a character device"
  [[ -c $work/full ]] && pass || fail "the full node is still a character device"
fi
mkfifo "$work/fifo"
run timeout 30 "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --out "$work/fifo"
expect_rc 2 "calibrate --out a FIFO is refused (without blocking)"
expect_err "is a FIFO" "calibrate names the FIFO"
[[ -p $work/fifo ]] && pass || fail "the FIFO is still a FIFO"
run timeout 30 "$pb" convert "$work/ds/images.pbraw" --to raw --out "$work/fifo"
expect_rc 2 "convert --out a FIFO is refused"
[[ -p $work/fifo ]] && pass || fail "the FIFO is still a FIFO after convert"

# ---- full file systems ---------------------------------------------------------------------
if small_fs "$work/tiny" 64k; then
  run "$pb" calibrate --size-mb 4 --rounds 1 --no-matmul --jpeg-images 0 --dir "$work/tiny" --out "$work/cal.json"
  expect_rc 2 "calibrate with its scratch file on a full disk"
  expect_err "No space left on device" "calibrate blames the full disk"
  if grep -q "Inappropriate ioctl" <<<"$errout"; then fail "calibrate shows a stale errno"; else pass; fi
fi
# Plots on a full images folder: the command fails, no truncated PNG is left.
if small_fs "$work/res/images" 16k; then
  run timeout $lim "$pb" run --data "$work/ds" --tracks 1 --samples 3 --no-peer --out "$work/res"
  expect_rc 2 "run with a full images folder"
  expect_err "pipebench_track1.png" "run names the plot it could not write"
  if grep -q "wrote [0-9]* plots" <<<"$errout$out"; then fail "run claims plots it did not write"; else pass; fi
  [[ -e $work/res/images/pipebench_track1.png ]] && fail "a partial track 1 PNG was left" || pass
  no_temporaries "$work/res" "run on a full images folder"
  run "$pb" report "$work/res"
  expect_rc 2 "report with a full images folder"
  [[ -e $work/res/images/pipebench_track1.png ]] && fail "report left a partial PNG" || pass
fi
if small_fs "$work/inf/images" 16k; then
  run timeout $lim "$pb" infer --framework pipebench --batch-sizes 1 --iterations 2 --warmup 0 \
    --output-dir "$work/inf/raw"
  expect_rc 2 "infer with a full images folder"
  expect_err "pipebench_infer.png" "infer names the plot it could not write"
  [[ -e $work/inf/images/pipebench_infer.png ]] && fail "a partial infer PNG was left" || pass
  no_temporaries "$work/inf" "infer on a full images folder"
fi

# ---- kill -9 mid-write: the next gen / convert into the same place removes the leftovers ----
# wait_for PATTERN: up to 20 s for a path matching PATTERN (a glob) to appear.
wait_for() {
  for _ in $(seq 2000); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.01
  done
  return 1
}
"$pb" gen --out "$work/big" --rows 200 --size 256x256 --formats ome-zarr --compression zstd \
  --level 19 >/dev/null 2>&1 &
pid=$!
if wait_for "$work/big/.gen-staging*"; then
  kill -9 $pid
  wait $pid 2>/dev/null
  [[ -n $(compgen -G "$work/big/.gen-staging*") ]] && pass || fail "a killed gen leaves its staging folder"
  run "$pb" gen --out "$work/big" --rows 2 --size 8x8 --formats raw
  expect_rc 0 "gen again into the same folder"
  no_temporaries "$work/big" "gen after a killed gen"
else
  kill -9 $pid 2>/dev/null
  rc=0 out="" errout=""
  fail "gen never made its staging folder"
fi

run "$pb" gen --out "$work/src" --rows 200 --size 256x256 --formats raw
expect_rc 0 "gen a source to convert"
"$pb" convert "$work/src/images.pbraw" --to ome-zarr --compression zstd --level 19 \
  --out "$work/conv.zarr" >/dev/null 2>&1 &
pid=$!
if wait_for "$work/.conv.zarr.*tmp-*"; then
  kill -9 $pid
  wait $pid 2>/dev/null
  [[ -n $(compgen -G "$work/.conv.zarr.*tmp-*") ]] && pass || fail "a killed convert leaves its temporary"
  run "$pb" convert "$work/src/images.pbraw" --to ome-zarr --out "$work/conv.zarr"
  expect_rc 0 "convert again to the same target"
  [[ -z $(compgen -G "$work/.conv.zarr.*tmp-*") ]] && pass || fail "the killed convert's temporary is still there"
  [[ -d $work/conv.zarr ]] && pass || fail "the second convert wrote its dataset"
else
  kill -9 $pid 2>/dev/null
  rc=0 out="" errout=""
  fail "convert never made its temporary"
fi

# ---- convert's output and its manifest come together or not at all ----
# A file system that holds the converted file but not always its manifest too: at every size
# either both are there (exit 0) or neither is (exit 2), and at one size the manifest is what
# did not fit.
run "$pb" gen --out "$work/csrc" --rows 20 --size 32x32 --formats raw
expect_rc 0 "gen a small source"
manifest_failed=0
for kb in 44 48 52 56 60 64 68 72; do
  small_fs "$work/cfs$kb" "${kb}k" || break
  run "$pb" convert "$work/csrc/images.pbraw" --to raw --out "$work/cfs$kb/d.pbraw"
  if [[ $rc -eq 0 ]]; then
    [[ -s $work/cfs$kb/d.pbraw && -s $work/cfs$kb/d.pbraw.manifest.json ]] && pass \
      || fail "convert on ${kb}k: exit 0 with both files"
  else
    expect_rc 2 "convert on ${kb}k"
    expect_err "No space left" "convert on ${kb}k says the disk is full"
    [[ ! -e $work/cfs$kb/d.pbraw && ! -e $work/cfs$kb/d.pbraw.manifest.json ]] && pass \
      || fail "convert on ${kb}k failed but left $(ls "$work/cfs$kb")"
    grep -q "manifest.json" <<<"$errout" && manifest_failed=1
  fi
  no_temporaries "$work/cfs$kb" "convert on ${kb}k"
done
if [[ $(id -u) -eq 0 && ${#mounts[@]} -gt 0 ]]; then
  [[ $manifest_failed -eq 1 ]] && pass || fail "no size made the manifest the part that did not fit"
fi

# A manifest path that is a folder: refused before anything is written.
mkdir -p "$work/mf/d.pbraw.manifest.json/x"
run "$pb" convert "$work/csrc/images.pbraw" --to raw --out "$work/mf/d.pbraw"
expect_rc 2 "convert onto a manifest that is a folder"
expect_err "d.pbraw.manifest.json is a folder" "the folder is named"
[[ ! -e $work/mf/d.pbraw ]] && pass || fail "convert wrote its output without a manifest"

finish
