#!/usr/bin/env bash
# Time and memory bounded by the input's real size: a Zarr grid of millions of missing chunks, a
# chunk or metadata file that is a device or far larger than it can be, a Parquet file of
# thousands of row groups. Every command runs under its own timeout, so a return of the old
# behaviour (minutes, gigabytes) fails here instead of stalling the suite.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
lim=20

crc_of() { awk '$1 == "0" { print $NF }' <<<"$out"; }

run "$pb" gen --out "$work/ds" --rows 2 --size 8x8 --formats ome-zarr,oa-dataset
expect_rc 0 "gen a small dataset"
img=$work/ds/ome-zarr/img_00000.zarr

# ---- a grid of 1x1 chunks with no chunk files ---------------------------------------------------
grid() { # grid NAME Y X: image 0 as an array of YxX 1x1 uint16 chunks, none of them on disk
  rm -rf "${work:?}/$1"
  mkdir -p "$work/$1/0"
  cp "$img/.zattrs" "$img/.zgroup" "$work/$1/"
  printf '{"zarr_format":2,"shape":[1,1,1,%s,%s],"chunks":[1,1,1,1,1],"dtype":"<u2",%s}\n' "$2" "$3" \
    '"compressor":null,"fill_value":0,"order":"C","filters":null,"dimension_separator":"/"' \
    >"$work/$1/0/.zarray"
}
grid huge.zarr 20000 20000
run timeout $lim "$pb" inspect "$work/huge.zarr"
expect_rc 2 "a grid of 4e8 chunks is refused"
expect_err "huge.zarr/0/.zarray: 400000000 chunks in the grid .*more than the 16777216 pipebench reads" \
  "the refusal names the array, the count and the bound"
# 16 million missing chunks (just under the bound): one folder listing, not one failed open()
# each. 2000x2000 took 8.2 s on an idle 2-core VM (16.7 s in the report), so this grid took
# ~33 s; it takes 0.16 s now (0.37 s under ASan), so 8 s is far from both.
grid sparse.zarr 4000 4000
run timeout 8 "$pb" inspect "$work/sparse.zarr"
expect_rc 0 "a sparse grid of 4000x4000 missing chunks reads at once"
expect_out "sparse.zarr +uint16 +\[1,1,1,4000,4000\]" "the sparse grid's image is listed"

# Sparse grids whose present chunks are found by the listing: each key layout, and the same
# pixels as when the missing chunks are files holding the fill value.
for opts in zarr=2 zarr=2,separator=. zarr=3 zarr=3,separator=.; do
  rm -rf "$work/g"
  run "$pb" gen --out "$work/g" --rows 1 --size 40x40 --dtype uint8 --chunk 1x1x1x1x1 \
    --compression none --formats ome-zarr --options "ome-zarr:$opts"
  expect_rc 0 "gen 1x1 chunks ($opts)"
  a=$work/g/ome-zarr/img_00000.zarr
  run "$pb" inspect "$a"
  whole=$(crc_of)
  cp -r "$a" "$work/g/zeros.zarr"
  gone=()
  for ((y = 0; y < 40; y++)); do
    for ((x = 0; x < 40; x++)); do
      (((x * 7 + y) % 3 == 0 && y % 5 != 0)) && continue
      case $opts in
        zarr=2) k=0/0/0/$y/$x ;; zarr=2,separator=.) k=0.0.0.$y.$x ;;
        zarr=3) k=c/0/0/0/$y/$x ;; *) k=c.0.0.0.$y.$x ;;
      esac
      gone+=("$a/0/$k")
      printf '\0' >"$work/g/zeros.zarr/0/$k"
    done
  done
  rm -f "${gone[@]}"
  [[ $opts == zarr=2 ]] && rm -rf "$a/0/0/0/0/5" "$a/0/0/0/0/10" # whole rows: no folder at all
  run timeout $lim "$pb" inspect "$a"
  sparse=$(crc_of)
  run timeout $lim "$pb" inspect "$work/g/zeros.zarr"
  zeros=$(crc_of)
  if [[ -n $sparse && $sparse == "$zeros" && $sparse != "$whole" ]]; then pass; else
    fail "sparse 1x1 chunks ($opts): crc $sparse, with fill files $zeros, whole $whole"
  fi
done

# ---- chunk and metadata files must be regular files of a sensible size --------------------------
chunk=$img/0/0/0/0/0/0
cp -r "$img" "$work/zero.zarr"
ln -sf /dev/zero "$work/zero.zarr/0/0/0/0/0/0"
run timeout $lim "$pb" inspect "$work/zero.zarr"
expect_rc 2 "a chunk linked to /dev/zero"
expect_err "zero.zarr/0/0/0/0/0/0 \(image 0.*(leads outside the array folder|is a character device, not a chunk file)" \
  "the /dev/zero chunk is named, and what it is"
# A device node inside the array folder itself (root: mknod) is no chunk file either.
if [[ $(id -u) -eq 0 ]] && cp -r "$img" "$work/dev.zarr" && rm "$work/dev.zarr/0/0/0/0/0/0" &&
  mknod "$work/dev.zarr/0/0/0/0/0/0" c 1 5 2>/dev/null; then
  run timeout $lim "$pb" inspect "$work/dev.zarr"
  expect_rc 2 "a chunk that is a device node"
  expect_err "dev.zarr/0/0/0/0/0/0 \(image 0, chunk 0/0/0/0/0\) is a character device, not a chunk file" \
    "the device chunk is named, and what it is"
fi
cp -r "$img" "$work/fifo.zarr"
rm "$work/fifo.zarr/0/0/0/0/0/0"
mkfifo "$work/fifo.zarr/0/0/0/0/0/0"
run timeout $lim "$pb" inspect "$work/fifo.zarr"
expect_rc 2 "a chunk that is a FIFO"; expect_err "is a FIFO, not a chunk file" "the FIFO chunk is named"
cp -r "$img" "$work/big.zarr"
truncate -s 1G "$work/big.zarr/0/0/0/0/0/0" # sparse: costs no disk
run timeout $lim "$pb" inspect "$work/big.zarr"
expect_rc 2 "a chunk of 1 GiB where 8x8 uint16 can need a few KiB"
expect_err "chunk file of 1073741824 bytes, more than the [0-9]+ its decoded size can take encoded" \
  "the oversized chunk's size and bound are named"
[[ -f $chunk ]] && pass || fail "the dataset's own chunk is untouched"

cp -r "$img" "$work/attrs.zarr"
truncate -s 3G "$work/attrs.zarr/.zattrs" # valid JSON, then 3 GB of NULs
run timeout $lim "$pb" inspect "$work/attrs.zarr"
expect_rc 2 "a 3 GB .zattrs"
expect_err "attrs.zarr/.zattrs: 3221225472 bytes, more than the 67108864 pipebench reads" \
  "the oversized attributes are named, with the size and the bound"
cp -r "$img" "$work/arr.zarr"
truncate -s 100M "$work/arr.zarr/0/.zarray"
run timeout $lim "$pb" inspect "$work/arr.zarr"
expect_rc 2 "a 100 MB .zarray"; expect_err "arr.zarr/0/.zarray: 104857600 bytes" "the .zarray is named"
cp -r "$work/ds/oa-dataset" "$work/oa"
truncate -s 3G "$work/oa/_ome_arrow_dataset.json"
run timeout $lim "$pb" inspect "$work/oa"
expect_rc 2 "a 3 GB _ome_arrow_dataset.json"
expect_err "_ome_arrow_dataset.json: 3221225472 bytes, more than the 67108864" "the oa manifest is named"

finish
