#!/usr/bin/env bash
# A Parquet file of 1000 one-row row groups: `inspect` stays within a memory bound (its peak
# resident size, from /usr/bin/time). It took 240-250 MB (DuckDB's external file cache kept a copy
# of every byte range its metadata scan read, and DuckDB scanned the metadata leaves of every
# row group), ~120 MB once the page reader read those leaves (DuckDB parsing the footer took
# ~75 MB of that), ~50 MB now that pipebench parses the footer itself (lib/parquet/pq_footer.c)
# and DuckDB does not touch the file at open. 20,000 row groups would take minutes to generate
# here; bench/rowgroups.sh measures them. Not under sanitizers (their shadow memory is not the
# program's).
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
if [[ ! -x /usr/bin/time ]]; then
  echo "SKIP: no /usr/bin/time"
  exit 0
fi
run "$pb" gen --out "$work/pq" --rows 1000 --size 4x4 --formats ome-parquet \
  --options ome-parquet:row_group_rows=1
expect_rc 0 "gen 1000 one-row row groups"
run timeout 120 /usr/bin/time -f "maxrss_kb %M" "$pb" inspect "$work/pq/images.parquet"
expect_rc 0 "inspect the file of 1000 row groups"
expect_out "999  img_00999 " "every image is listed"
kb=$(awk '/^maxrss_kb/ { print $2 }' <<<"$errout")
if [[ -n $kb && $kb -lt 81920 ]]; then pass; else
  fail "inspect of 1000 row groups peaked at ${kb:-?} KB resident (bound 80 MB)"
fi

# The same file with its footer cut in half (the length before the closing magic rewritten to
# match): refused with exit 2, naming the file and the footer field where the bytes ran out.
f=$work/pq/images.parquet
size=$(stat -c %s "$f")
n=$(tail -c 8 "$f" | head -c 4 | od -An -tu4 | tr -d ' ')
keep=$((n / 2))
le=$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((keep & 255)) $(((keep >> 8) & 255)) \
  $(((keep >> 16) & 255)) $(((keep >> 24) & 255)))
{ head -c $((size - 8 - n + keep)) "$f"; printf "$le"; printf 'PAR1'; } >"$work/cut.parquet"
run "$pb" inspect "$work/cut.parquet"
expect_rc 2 "a footer cut short"
expect_err "cut\.parquet: Parquet footer, row_groups\[[0-9]+\]" "the error names the file and the field"
finish
