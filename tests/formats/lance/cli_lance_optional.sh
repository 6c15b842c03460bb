#!/usr/bin/env bash
# Lance tables written by other lancedb programs: an OME-Arrow struct without its optional
# fields (id, version, image_type, chunk_grid, masks) opens and reads, in the planes and the
# chunks layout; one without a size the pixels need is refused naming the field. Skips (77)
# where Node or the engine is not installed.
source "${PIPEBENCH_SOURCE_DIR:?}/tests/cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
modules="$PIPEBENCH_SOURCE_DIR/third_party/lance/node_modules"
if ! command -v node >/dev/null || [[ ! -f $modules/@lancedb/lancedb/package.json ]]; then
  echo "skipped: Node.js or @lancedb/lancedb (scripts/setup.sh) is not here"
  exit 77
fi
make() { NODE_PATH="$modules" timeout 120 node "$PIPEBENCH_SOURCE_DIR/tests/formats/lance/make_optional.js" "$@"; }
want="9270c965 3944e4eb 29fc798c" # zlib CRC-32 of each image's 12 bytes (40 i + k)
crcs() { /usr/bin/python3 -c 'import json,sys; print(" ".join(i["crc32"] for i in json.load(sys.stdin)["images"]))' 2>/dev/null; }

for layout in planes chunks; do
  make "$work/$layout" "$layout" || { fail "make the $layout table"; continue; }
  ds="$work/$layout/images.lance"
  run timeout 120 "$pb" inspect "$ds" --json
  expect_rc 0 "inspect a $layout table without id or version"
  expect_out '"name":"img1"' "names from the struct's name field"
  [[ $(crcs <<<"$out") == "$want" ]] && pass || fail "$layout pixels read right"
  run timeout 120 "$pb" convert "$ds" --to raw --out "$work/$layout.pbraw"
  expect_rc 0 "convert a $layout table without id or version to raw"
done

make "$work/nosize" nosize || fail "make the nosize table"
run timeout 120 "$pb" inspect "$work/nosize/images.lance"
expect_rc 2 "a struct without size_x is refused"
expect_err "nosize/images.lance.*pixels_meta has no size_x" "names the dataset and the missing field"
finish
