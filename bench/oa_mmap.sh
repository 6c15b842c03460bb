#!/usr/bin/env bash
# Direct page reads of OME-Arrow files, mapped (PB_OA_MMAP=1) against pread (the default), side
# by side in one process per dataset (bench/oa_mmap.c): every ome-parquet layout (planes, chunks,
# chunk-bytes) with uncompressed and zstd Parquet pages, and oa-dataset with zstd and
# uncompressed pages; warm cache, seeded random single-image reads in interleaved rounds.
# Prints one line per dataset: p50 per read both ways, pread/mapped with its 99% interval, and
# the verdict (factor 1.1).
#
# usage: bench/oa_mmap.sh BUILD_DIR [OUT]          (OUT default $TMPDIR/oa_mmap)
#        BUILD_DIR may also be an unpacked device pack (scripts/device_pack.sh: bin/, bench/).
# env:   ROWS (3000), SIZE (100x100), READS (1000 per round and mode), ROUNDS (5),
#        SLOW_READS (100: for numeric layouts with zstd pages, where each read decompresses a
#        page of many images whichever way the page is read)
set -euo pipefail
build=${1:?usage: bench/oa_mmap.sh BUILD_DIR [OUT]}
out=${2:-${TMPDIR:-/tmp}/oa_mmap}
rows=${ROWS:-3000} size=${SIZE:-100x100} reads=${READS:-1000} rounds=${ROUNDS:-5}
slow=${SLOW_READS:-100}
pb=$build/pipebench bench=$build/bench/oa_mmap
[[ -x $build/bin/pipebench ]] && pb=$build/bin/pipebench
[[ -x $pb && -x $bench ]] || { echo "oa_mmap.sh: $pb or $bench missing (build first)" >&2; exit 1; }
mkdir -p "$out"
gen() { # gen NAME ARGS...: one dataset per folder, written once
  local name=$1
  shift
  [[ -e $out/$name/manifest.json ]] && return 0
  "$pb" gen --out "$out/$name" --rows "$rows" --size "$size" --dtype uint16 "$@" \
    >/dev/null 2>"$out/$name.log" || { cat "$out/$name.log" >&2; exit 2; }
}
op=ome-parquet
gen planes-unc --formats $op --compression none --options $op:layout=planes,$op:parquet_codec=uncompressed
gen planes-zstd --formats $op --compression none --options $op:layout=planes,$op:parquet_codec=zstd
gen chunks-unc --formats $op --compression none --options $op:layout=chunks,$op:parquet_codec=uncompressed
gen chunks-zstd --formats $op --compression none --options $op:layout=chunks,$op:parquet_codec=zstd
gen cb-zleaf-unc --formats $op --compression zstd --options $op:layout=chunk-bytes,$op:parquet_codec=uncompressed
gen cb-zleaf-zstd --formats $op --compression zstd --options $op:layout=chunk-bytes,$op:parquet_codec=zstd
gen cb-raw-unc --formats $op --compression none --options $op:layout=chunk-bytes,$op:parquet_codec=uncompressed
gen ds-zstd --formats oa-dataset --compression zstd
gen ds-unc --formats oa-dataset --compression none
printf '%-14s %-12s %10s %10s %8s %17s %s\n' dataset format mapped_p50 pread_p50 ratio interval verdict
for d in planes-unc planes-zstd chunks-unc chunks-zstd cb-zleaf-unc cb-zleaf-zstd cb-raw-unc ds-zstd ds-unc; do
  path=$out/$d/images.parquet
  [[ $d == ds-* ]] && path=$out/$d/oa-dataset
  n=$reads
  [[ $d == planes-zstd || $d == chunks-zstd ]] && n=$slow
  line=$("$bench" "$path" "$n" "$rounds") || { echo "oa_mmap.sh: $d failed" >&2; exit 2; }
  echo "$line" >>"$out/results.jsonl"
  python3 -c '
import json, sys
r = json.loads(sys.argv[2])
print("%-14s %-12s %8.1fus %8.1fus %8.3f  [%6.3f, %6.3f] %s" % (sys.argv[1], r["format"],
      r["mapped_p50_us"], r["pread_p50_us"], r["pread_over_mapped"], r["ratio_lo"],
      r["ratio_hi"], r["verdict"]))' "$d" "$line"
done
echo "(pread/mapped: ratio of p50s, 99% bootstrap interval; n=$rounds rounds x reads per mode;"
echo " json lines in $out/results.jsonl)"
