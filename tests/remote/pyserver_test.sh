#!/usr/bin/env bash
# bench/http_server.py, the benchmarks' server where nginx is absent (the lent GPU machine):
# pipebench's http backend finds and reads every format through it with the same CRC-32s as
# locally (its JSON folder index, Range answers with Content-Range, HEAD with Content-Length and
# ETag, the redirect of a folder to name/), and the answers follow HTTP's rules for ranges.
# Env: PIPEBENCH_CLI, PIPEBENCH_SOURCE_DIR.
set -u
. "$PIPEBENCH_SOURCE_DIR/tests/cli/lib.sh"
pb=$PIPEBENCH_CLI
data=$work/data
"$pb" gen --out "$data" --rows 4 --size 40x30 --formats ome-zarr,ome-parquet,tiff,raw \
  >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
"$pb" gen --out "$data" --rows 4 --size 40x30 --formats imagefolder >/dev/null 2>&1 ||
  { echo "gen imagefolder failed"; exit 1; }
/usr/bin/python3 "$PIPEBENCH_SOURCE_DIR/bench/http_server.py" "$data" --port-file "$work/port" >/dev/null &
srv=$!
trap 'kill $srv; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.1; done
base=http://127.0.0.1:$(cat "$work/port")

for d in ome-zarr:ome-zarr images.parquet:ome-parquet tiff:tiff images.pbraw:raw imagefolder:imagefolder; do
  name=${d%%:*} fmt=${d##*:}
  run "$pb" inspect "$data/$name"
  local_out=$(sed 1d <<<"$out")
  run "$pb" inspect "$base/$name"
  expect_rc 0 "inspect $name through bench/http_server.py"
  expect_out "^$base/$name: format $fmt, 4 images" "the format found from its listing or first bytes ($name)"
  if [[ -n $local_out && $(sed 1d <<<"$out") == "$local_out" ]]; then pass; else fail "$name: CRC-32s differ from the local ones"; fi
done
run "$pb" verify "$base/ome-zarr"
expect_rc 0 "verify through bench/http_server.py"

size=$(stat -c %s "$data/images.pbraw")
run curl -sS -D - -o "$work/part" -r 10-19 "$base/images.pbraw"
expect_out "^HTTP/1.1 206" "a range is 206"
expect_out "^Content-Range: bytes 10-19/$size" "with its Content-Range"
if cmp -s "$work/part" <(tail -c +11 "$data/images.pbraw" | head -c 10); then pass; else fail "the range's bytes"; fi
run curl -sS -D - -o /dev/null -r "-5" "$base/images.pbraw"
expect_out "^Content-Range: bytes $((size - 5))-$((size - 1))/$size" "a suffix range"
run curl -sS -D - -o /dev/null -r "$size-" "$base/images.pbraw"
expect_out "^HTTP/1.1 416" "a range past the end is 416"
expect_out "^Content-Range: bytes \*/$size" "naming the size"
run curl -sS -I "$base/images.pbraw"
expect_out "^Content-Length: $size" "HEAD gives the size"
expect_out '^ETag: "' "and an ETag"
run curl -sS -D - -o /dev/null "$base/ome-zarr"
expect_out "^HTTP/1.1 301" "a folder without its slash redirects"
expect_out "^Location: /ome-zarr/" "to name/"
run curl -sS "$base/"
if /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert {"name":"images.pbraw","type":"file"}.items() <= [e for e in d if e["name"]=="images.pbraw"][0].items(); assert [e for e in d if e["name"]=="ome-zarr"][0]["type"]=="directory"' "$out"; then pass; else fail "the JSON folder index as nginx writes it"; fi
run curl -sS --path-as-is -o /dev/null -w '%{http_code}' "$base/../../../../etc/passwd"
if [[ $out == 404 ]]; then pass; else fail "a path outside the folder is not served ($out)"; fi
finish
