#!/usr/bin/env bash
# Issue 26 item 11: the cost of opening a Parquet file of many row groups. Generates (once, kept
# in BENCH_DIR) an ome-parquet file of ROWS one-row row groups of 4x4 uint16 images (46 leaf
# columns, as gen writes them) and times `pipebench inspect` of it with /usr/bin/time -v: wall
# clock, user and system CPU seconds, and peak resident size. Target: 20,000 row groups in
# <= 2 s and <= 300 MB. On a loaded machine the wall clock follows the load; user + system is
# the figure to compare.
#
# usage: bench/rowgroups.sh [BUILD_DIR] [ROWS] [REPEATS]    defaults: build 20000 3
# env: BENCH_DIR (default /tmp/pb-bench-rowgroups), BASE_CLI (another pipebench binary, timed
#      on the same file after this one, for an A/B comparison)
set -euo pipefail
build=${1:-build}; rows=${2:-20000}; repeats=${3:-3}
cli=$build/pipebench
dir=${BENCH_DIR:-/tmp/pb-bench-rowgroups}/rg$rows
[[ -x $cli ]] || { echo "no $cli (build first)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "no /usr/bin/time" >&2; exit 1; }
if [[ ! -f $dir/images.parquet ]]; then
  echo "generating $rows one-row row groups into $dir (slow: DuckDB writes each row group)" >&2
  "$cli" gen --out "$dir" --rows "$rows" --size 4x4 --formats ome-parquet \
    --options ome-parquet:row_group_rows=1 >/dev/null
fi
file=$dir/images.parquet
printf '%-10s %8s %8s %8s %10s\n' binary wall_s user_s sys_s peak_MB
measure() {
  local name=$1 bin=$2 log
  log=$(mktemp)
  for ((k = 0; k < repeats; k++)); do
    /usr/bin/time -v "$bin" inspect "$file" >/dev/null 2>"$log"
    awk -v n="$name" -F': ' '
      /Elapsed \(wall clock\)/ { split($2, t, ":"); w = t[1] * 60 + t[2] }
      /User time/ { u = $2 } /System time/ { s = $2 }
      /Maximum resident set size/ { m = $2 / 1024 }
      END { printf "%-10s %8.2f %8.2f %8.2f %10.1f\n", n, w, u, s, m }' "$log"
  done
  rm -f "$log"
}
measure this "$cli"
if [[ -n ${BASE_CLI:-} ]]; then measure base "$BASE_CLI"; fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
