#!/usr/bin/env bash
# gen and convert replace only what they can prove they wrote (their manifest lists exactly those
# files), put new outputs into place by a journaled commit that a SIGKILL at any step cannot
# break (the next command finishes it), stop cleanly on SIGINT/SIGTERM, and leave no empty
# folder behind when a first gen fails.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
lim=60

mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# same_tree A B WHAT: the two folders hold the same files with the same bytes.
same_tree() {
  if diff -r "$1" "$2" >/dev/null 2>&1; then pass; else rc=0 out=$(diff -r "$1" "$2" 2>&1) errout=""; fail "$3"; fi
}

# ---- gen: a user's files at the output names are never deleted --------------------------------
p=$work/proj
mkdir -p "$p/tiff/holiday"
echo "my notes" >"$p/tiff/notes.txt"
echo "photo" >"$p/tiff/holiday/p1.raw"
echo "a text file" >"$p/images.parquet"
echo '{"tool": "someone else", "files": []}' >"$p/manifest.json"
cp -a "$p" "$work/proj.before"
run timeout $lim "$pb" gen --out "$p" --rows 4 --size 8x8 --formats tiff,ome-parquet
expect_rc 2 "gen over another program's manifest"
expect_err "manifest.json is not a manifest pipebench wrote" "gen names the foreign manifest"
same_tree "$work/proj.before" "$p" "gen refused and left the folder as it was"

rm "$p/manifest.json" "$work/proj.before/manifest.json"
run timeout $lim "$pb" gen --out "$p" --rows 4 --size 8x8 --formats tiff,ome-parquet
expect_rc 2 "gen over a folder of the user's files"
expect_err "tiff holds .*(notes.txt|holiday)" "gen names the file in the way"
same_tree "$work/proj.before" "$p" "gen refused and kept the user's tiff folder"

# --force replaces a file, never a folder of files pipebench did not write
run timeout $lim "$pb" gen --out "$p" --rows 4 --size 8x8 --formats tiff,ome-parquet --force
expect_rc 2 "gen --force over a folder of the user's files"
[[ -f $p/tiff/notes.txt && -f $p/tiff/holiday/p1.raw ]] && pass || fail "gen --force deleted the user's folder"

rm -rf "$p/tiff"
run timeout $lim "$pb" gen --out "$p" --rows 4 --size 8x8 --formats tiff,ome-parquet
expect_rc 2 "gen over a text file at images.parquet"
expect_err "images.parquet exists and no manifest says pipebench wrote it" "gen names the file"
[[ $(cat "$p/images.parquet") == "a text file" ]] && pass || fail "the text file was overwritten"
run timeout $lim "$pb" gen --out "$p" --rows 4 --size 8x8 --formats tiff,ome-parquet --force
expect_rc 0 "gen --force replaces a file"

# gen's own outputs are replaced, again and again, and other files in the folder stay
echo "keep me" >"$p/README.txt"
run timeout $lim "$pb" gen --out "$p" --rows 6 --size 8x8 --formats tiff,ome-parquet,raw
expect_rc 0 "gen over its own outputs"
run timeout $lim "$pb" verify "$p/tiff"
expect_rc 0 "the new tiff folder matches the manifest"
[[ $(cat "$p/README.txt") == "keep me" ]] && pass || fail "gen touched a file that is not an output"
# a file added to gen's own folder later makes it no longer gen's alone
echo "added" >"$p/tiff/added.txt"
run timeout $lim "$pb" gen --out "$p" --rows 6 --size 8x8 --formats tiff
expect_rc 2 "gen over its folder with a file added"
expect_err "added.txt, which pipebench did not write" "gen names the added file"
[[ -f $p/tiff/added.txt ]] && pass || fail "the added file was deleted"
rm "$p/tiff/added.txt"
# a file of gen's changed since: not replaced
echo "rewritten by hand" >"$p/images.pbraw"
run timeout $lim "$pb" gen --out "$p" --rows 6 --size 8x8 --formats raw
expect_rc 2 "gen over a changed file of its own"
expect_err "images.pbraw is [0-9]+ bytes, not the [0-9]+ bytes pipebench wrote" "gen says the file changed"
# an output name that is a link is not gen's
rm "$p/images.pbraw"
ln -s "$work/elsewhere.pbraw" "$p/images.pbraw"
echo "elsewhere" >"$work/elsewhere.pbraw"
run timeout $lim "$pb" gen --out "$p" --rows 6 --size 8x8 --formats raw
expect_rc 2 "gen over a link at an output name"
expect_err "symbolic link" "gen names the link"
[[ -L $p/images.pbraw && $(cat "$work/elsewhere.pbraw") == elsewhere ]] && pass || fail "the link or its target changed"
rm "$p/images.pbraw"

# ---- convert: the same rule ---------------------------------------------------------------------
run timeout $lim "$pb" gen --out "$work/src" --rows 3 --size 8x8 --formats raw,tiff
expect_rc 0 "gen a source"
src=$work/src/images.pbraw
pics=$work/pics
mkdir -p "$pics/sub"
cp "$work/src/tiff/"*.tif "$pics/"
echo "dear diary" >"$pics/diary.txt"
echo "chapter 1" >"$pics/sub/thesis.docx"
cp -a "$pics" "$work/pics.before"
run timeout $lim "$pb" convert "$src" --to tiff --out "$pics"
expect_rc 2 "convert over a folder that merely opens as tiff"
expect_err "pics holds" "convert names what is in the way"
same_tree "$work/pics.before" "$pics" "convert left the folder as it was"
run timeout $lim "$pb" convert "$src" --to tiff --out "$pics" --force
expect_rc 2 "convert --force over a folder of the user's files"
same_tree "$work/pics.before" "$pics" "convert --force left the folder as it was"

mkdir -p "$work/Pictures/2024"
echo "layers" >"$work/Pictures/2024/cat.xcf"
echo "todo" >"$work/Pictures/todo.txt"
run timeout $lim "$pb" convert "$src" --to imagefolder --out "$work/Pictures"
expect_rc 2 "convert --to imagefolder over a photo tree"
[[ -f $work/Pictures/2024/cat.xcf && -f $work/Pictures/todo.txt ]] && pass || fail "the photo tree was deleted"

echo "notes" >"$work/notes.txt"
run timeout $lim "$pb" convert "$src" --to ome-parquet --out "$work/notes.txt"
expect_rc 2 "convert over a text file"
expect_err "notes.txt exists and no manifest says pipebench wrote it" "convert names the text file"
[[ $(cat "$work/notes.txt") == notes ]] && pass || fail "the text file was overwritten"
echo '{"mine": true}' >"$work/other.parquet.manifest.json"
run timeout $lim "$pb" convert "$src" --to ome-parquet --out "$work/other.parquet"
expect_rc 2 "convert over a foreign file at DST.manifest.json"
expect_err "other.parquet.manifest.json is not a manifest pipebench wrote" "convert names the foreign manifest"
[[ $(cat "$work/other.parquet.manifest.json") == '{"mine": true}' ]] && pass || fail "the foreign manifest was overwritten"

run timeout $lim "$pb" convert "$src" --to ome-zarr --out "$work/dst.zarr"
expect_rc 0 "convert to a new place"
run timeout $lim "$pb" convert "$work/src/tiff" --to ome-zarr --out "$work/dst.zarr"
expect_rc 0 "convert over its own earlier output"
touch "$work/dst.zarr/extra"
run timeout $lim "$pb" convert "$src" --to ome-zarr --out "$work/dst.zarr"
expect_rc 2 "convert over its output with a file added"
expect_err "dst.zarr holds extra, which pipebench did not write" "convert names the added file"
rm "$work/dst.zarr/extra"

# killed_at K ARGS...: runs pipebench ARGS, killed by SIGKILL after step K of its commit; $rc.
killed_at() {
  local k=$1
  shift
  (PIPEBENCH_TEST_COMMIT_KILL_AT=$k exec timeout $lim "$pb" "$@" >/dev/null 2>&1)
  rc=$?
} 2>/dev/null

# ---- manifests are one JSON value: trailing data makes one unreadable, and not gen's own -------
run timeout $lim "$pb" gen --out "$work/tg" --rows 2 --size 8x8 --formats raw
expect_rc 0 "gen a dataset whose manifest gets trailing data"
printf '{"kind": "other"}' >>"$work/tg/manifest.json"
run timeout $lim "$pb" verify "$work/tg/images.pbraw"
expect_rc 2 "verify against a manifest with trailing data"
expect_err "manifest.json: trailing data after the JSON value" "verify names the trailing data"
run timeout $lim "$pb" gen --out "$work/tg" --rows 2 --size 8x8 --formats raw
expect_rc 2 "gen over a manifest with trailing data"
expect_err "manifest.json is not a manifest pipebench wrote" "gen does not take it for its own"

# ---- a SIGKILL at every step of the commit: the old or the new dataset, whole, never neither ----
run timeout $lim "$pb" gen --out "$work/new" --rows 5 --size 8x8 --formats raw
expect_rc 0 "gen a second source"
for k in 0 1 2 3 4 5; do
  d=$work/k$k
  mkdir -p "$d"
  timeout $lim "$pb" convert "$src" --to ome-zarr --out "$d/dst.zarr" >/dev/null 2>&1
  killed_at $k convert "$work/new/images.pbraw" --to ome-zarr --out "$d/dst.zarr"
  [[ $rc -eq 137 ]] && pass || fail "convert killed at commit step $k (expected exit 137)"
  # A failing convert next (a missing source) must not lose the dataset either.
  run timeout $lim "$pb" convert "$work/missing.pbraw" --to ome-zarr --out "$d/dst.zarr"
  expect_rc 2 "a failing convert after the kill at step $k"
  run timeout $lim "$pb" verify "$d/dst.zarr"
  expect_rc 0 "after a kill at step $k the dataset matches its manifest"
  expect_err "(3|5) images" "after a kill at step $k the dataset is the old or the new one"
  if [[ $k -ge 1 ]]; then expect_err "5 images" "a kill after the journal's folder moved finishes the new one (step $k)"; fi
  left=$(find "$d" -name '.*pbcommit*')
  [[ -z $left ]] && pass || { rc=0 out=$left errout=""; fail "the journal is gone after recovery (step $k)"; }
done

for k in 0 1 2 3 4 5 6 7; do
  d=$work/g$k
  timeout $lim "$pb" gen --out "$d" --rows 3 --size 8x8 --formats raw,ome-zarr >/dev/null 2>&1
  killed_at $k gen --out "$d" --rows 5 --size 8x8 --formats raw,ome-zarr
  [[ $rc -eq 137 ]] && pass || fail "gen killed at commit step $k (expected exit 137)"
  run timeout $lim "$pb" verify "$d/images.pbraw"
  expect_rc 0 "after gen's kill at step $k raw matches the manifest"
  n_raw=$(grep -oE "[0-9]+ images" <<<"$errout")
  run timeout $lim "$pb" verify "$d/ome-zarr"
  expect_rc 0 "after gen's kill at step $k ome-zarr matches the manifest"
  n_zarr=$(grep -oE "[0-9]+ images" <<<"$errout")
  [[ $n_raw == "$n_zarr" ]] && pass || fail "raw ($n_raw) and ome-zarr ($n_zarr) come from one gen (step $k)"
done

# ---- SIGINT / SIGTERM: the earlier dataset stays, nothing half-written, exit 128 + signal ------
run timeout $lim "$pb" gen --out "$work/sig" --rows 3 --size 8x8 --formats ome-zarr
expect_rc 0 "gen a dataset to interrupt over"
cp -a "$work/sig" "$work/sig.before"
# stopped SIG RC WHAT GLOB CMD...: runs CMD in the background, sends SIG once GLOB (its staging
# folder) exists, so the handler is surely in place, and expects exit RC and the message.
stopped() {
  local sig=$1 want=$2 what=$3 glob=$4
  shift 4
  "$@" >/dev/null 2>"$work/sig.err" &
  local pid=$! i
  for i in $(seq 2000); do compgen -G "$glob" >/dev/null && break; sleep 0.01; done
  kill -"$sig" $pid
  timeout 20 tail --pid=$pid -f /dev/null
  wait $pid
  rc=$?
  out="" errout=$(cat "$work/sig.err")
  [[ $rc -eq $want ]] && pass || fail "$what stopped by SIG$sig exits $want"
  expect_err "interrupted by SIG$sig" "$what says it was interrupted"
}
stopped INT 130 gen "$work/sig/.gen-staging*" \
  "$pb" gen --out "$work/sig" --rows 100000 --size 64x64 --formats ome-zarr
same_tree "$work/sig.before" "$work/sig" "an interrupted gen leaves the folder as it was"
run timeout $lim "$pb" gen --out "$work/big" --rows 30000 --size 32x32 --formats raw
expect_rc 0 "gen a source for convert to be stopped in"
stopped TERM 143 convert "$work/sig/.ome-zarr.copy.pbtmp-*" \
  "$pb" convert "$work/big/images.pbraw" --to ome-zarr --out "$work/sig/ome-zarr.copy"
[[ ! -e $work/sig/ome-zarr.copy ]] && pass || fail "an interrupted convert left its output"
[[ -z $(compgen -G "$work/sig/.ome-zarr.copy*") ]] && pass || fail "an interrupted convert left temporaries"

# ---- a first gen into a full disk leaves no empty folder ---------------------------------------
if [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$work/full"
  if mount -t tmpfs -o size=64k tmpfs "$work/full" 2>/dev/null; then
    mounts+=("$work/full")
    run timeout $lim "$pb" gen --out "$work/full/first" --rows 50 --size 64x64 --formats raw
    expect_rc 2 "gen into a full disk"
    [[ ! -e $work/full/first ]] && pass || { out=$(ls -la "$work/full/first"); fail "a failed first gen left its folder"; }
  else
    echo "skip: mounting a tmpfs is not permitted here"
  fi
fi

finish
