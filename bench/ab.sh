#!/usr/bin/env bash
# Did a change keep the speed? Two builds of pipebench on bench_formats (random reads and
# sequential decode per format) and on the loader (Track 2), in alternating rounds, compared by
# `pipebench revs --compare`: the ratio of medians with its bootstrap 99% interval and the
# verdict of docs/measuring.md (a change only past the factor, 1.1, AND Mann-Whitney p < 0.002
# or non-overlapping 99% intervals of the medians; otherwise "no significant change").
#
# revs serves here as the round runner and the judge: each build is one "branch" of a command
# task file (its commit, read from the build's `pipebench --version`), the task runs the build's
# own programs by absolute path (bench/ab_task.sh) and needs no build of the worktree.
#
# usage: bench/ab.sh BUILD_A BUILD_B [OUT]        (OUT default $TMPDIR/ab)
#   BUILD_A is the baseline; each BUILD a build folder with pipebench and bench/bench_formats.
# env:   ROUNDS (5), ROWS (500), SIZE (64x64), READS (500),
#        FORMATS (raw,tiff,ome-zarr,oa-dataset,ome-parquet), LOADER_FORMATS (raw,tiff,ome-zarr),
#        A_REV / B_REV (the revisions to name the builds by, when --version cannot tell them apart)
# Defaults take about five minutes on a 2-core machine. The data is written once by A's gen.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
usage="usage: bench/ab.sh BUILD_A BUILD_B [OUT]"
A=$(cd "${1:?$usage}" && pwd)
B=$(cd "${2:?$usage}" && pwd)
out=${3:-${TMPDIR:-/tmp}/ab}
for b in "$A" "$B"; do
  [[ -x $b/pipebench && -x $b/bench/bench_formats ]] ||
    { echo "ab: $b needs pipebench and bench/bench_formats (cmake --build $b --target pipebench_cli bench_formats)" >&2; exit 1; }
done
rev_of() { "$1/pipebench" --version | sed -n 's/.*(git \([0-9a-f]*\).*/\1/p' | head -1; }
ra=${A_REV:-$(rev_of "$A")}
rb=${B_REV:-$(rev_of "$B")}
if [[ -z $ra || -z $rb || $ra == "$rb" ]]; then
  echo "ab: cannot tell the builds apart by commit ('$ra', '$rb'); set A_REV and B_REV" >&2
  exit 1
fi
rm -rf "$out" && mkdir -p "$out"
"$A/pipebench" gen --out "$out/data" --rows "${ROWS:-500}" --size "${SIZE:-64x64}" \
  --formats "${FORMATS:-raw,tiff,ome-zarr,oa-dataset,ome-parquet}" --seed 7 >"$out/gen.log" 2>&1
task=$here/ab_task.sh
{
  echo "branch,experiment,command,metrics"
  for w in A B; do
    if [[ $w == A ]]; then rev=$ra; b=$A; else rev=$rb; b=$B; fi
    echo "$rev,formats,\"$task formats $b $out/data ${READS:-500}\",$out/metrics-$w-formats.json"
    echo "$rev,loader,\"$task loader $b $out/data ${LOADER_FORMATS:-raw,tiff,ome-zarr}\",$out/metrics-$w-loader.json"
  done
} >"$out/tasks.csv"
echo "A = $ra ($A), B = $rb ($B); $out/tasks.csv, ${ROUNDS:-5} rounds"
"$A/pipebench" revs --repo "$repo" --config "$out/tasks.csv" --output "$out/ab.json" \
  --repeats "${ROUNDS:-5}" --compare --baseline "$ra" --tmp-dir "$out"
