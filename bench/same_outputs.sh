#!/usr/bin/env bash
# Do two builds write the same outputs? Runs the deterministic parts of pipebench with build A and
# build B on the same inputs and compares every output file byte for byte:
#
#   gen      the datasets of every format written with one seed (gen-A/, gen-B/);
#            manifest.json with created_utc and git_commit masked (when and by which commit)
#   report   `pipebench report` of one saved results folder (track tables and an infer table made
#            once, by A): the plots, report.md and report.html (report-A/, report-B/)
#   run      `run --tracks 1,2,4` with one seed on gen-A's data, A and B alternately (RUNS rounds
#            each): the table files' headers, row counts and every cell that is not a
#            measurement; `infer` (pipebench engine, CPU) likewise
#
# Measurements are not compared: the columns of a run's tables whose values differ between two
# rounds of the *same* build (timings, rates, and counts the timer derives from them, such as
# num_samples and timer_group), named in the output with the reason, plus timestamp, git_commit
# and hostname (when, which build, where). The .csv-metadata.json twins (a hash of the CSV)
# and the .parquet twins (the same cells) of measured tables are left out for the same reason;
# pipebench_summary.json is compared by its keys.
#
# usage: bench/same_outputs.sh A B [OUT]          (OUT default $TMPDIR/same_outputs)
#   A, B: a build folder holding `pipebench`, a `pipebench` program, or a git commit of this
#         repository (built into OUT/build-<commit> with cmake: the CLI only, some minutes)
# env:   ROWS (40), SIZE (32x32), SEED (7), RUNS (2),
#        FORMATS (raw,tiff,ome-zarr,oa-dataset,ome-parquet,duckdb,imagefolder)
# exit:  0 all the same, 1 a difference (listed), 2 a build or command failed
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
usage="usage: bench/same_outputs.sh A B [OUT]"
a_arg=${1:?$usage}
b_arg=${2:?$usage}
out=${3:-${TMPDIR:-/tmp}/same_outputs}
rows=${ROWS:-40}
size=${SIZE:-32x32}
seed=${SEED:-7}
runs=${RUNS:-2}
formats=${FORMATS:-raw,tiff,ome-zarr,oa-dataset,ome-parquet,duckdb,imagefolder}
run_formats=${formats//,imagefolder/}
rm -rf "$out" && mkdir -p "$out"

program() { # program ARG: the pipebench program ARG names (building a commit when it is one)
  local arg=$1
  if [[ -f $arg/pipebench && -x $arg/pipebench ]]; then echo "$(cd "$arg" && pwd)/pipebench"; return; fi
  if [[ -f $arg && -x $arg ]]; then echo "$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")"; return; fi
  local rev
  rev=$(git -C "$repo" rev-parse --short=12 "$arg^{commit}" 2>/dev/null) || {
    echo "same_outputs: $arg is neither a build folder, a pipebench program nor a commit" >&2; exit 2; }
  local src=$out/src-$rev bld=$out/build-$rev
  echo "same_outputs: building $rev into $bld (the CLI only)" >&2
  git -C "$repo" worktree add --detach "$src" "$rev" >/dev/null 2>&1
  [[ -d $repo/third_party ]] && cp -a "$repo/third_party" "$src/"
  { cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
      cmake --build "$bld" -j"$(nproc)" --target pipebench_cli >"$out/build-$rev.log" 2>&1; } || {
    echo "same_outputs: building $rev failed (see $out/build-$rev.log)" >&2; exit 2; }
  echo "$bld/pipebench"
}
A=$(program "$a_arg")
B=$(program "$b_arg")
echo "A: $A ($("$A" --version 2>/dev/null | head -1))"
echo "B: $B ($("$B" --version 2>/dev/null | head -1))"

must() { # must LOG CMD...: runs CMD, its output into LOG; exit 2 naming LOG when it fails
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { echo "same_outputs: failed: $* (see $log)" >&2; tail -5 "$log" >&2; exit 2; }
}

# ---- gen ---------------------------------------------------------------------------------
for w in A B; do
  p=$A; [[ $w == B ]] && p=$B
  must "$out/gen-$w.log" "$p" gen --out "$out/gen-$w" --rows "$rows" --size "$size" --formats "$formats" --seed "$seed"
done

# ---- the saved results folder, made once by A; then report by each build ---------------------
common=(--tracks 1,2,4 --formats "$run_formats" --repeats 1 --samples 10 --warmup 2 --batches 3
  --window-ms 10 --batch-sizes 4 --workers 0,1 --caches none --transforms none --no-peer --seed "$seed")
infer=(infer --framework pipebench --model embed --batch-sizes 1 2 --iterations 3 --warmup 1 --device cpu --seed "$seed")
must "$out/saved.log" "$A" run --data "$out/gen-A" --out "$out/saved" "${common[@]}"
must "$out/saved-infer.log" "$A" "${infer[@]}" --output-dir "$out/saved/data"
for w in A B; do
  p=$A; [[ $w == B ]] && p=$B
  mkdir -p "$out/report-$w"
  cp -a "$out/saved/data" "$out/report-$w/"
  must "$out/report-$w.log" "$p" report "$out/report-$w"
done

# ---- run and infer, alternating builds ---------------------------------------------------------
for ((r = 1; r <= runs; r++)); do
  for w in A B; do
    p=$A; [[ $w == B ]] && p=$B
    must "$out/run-$w$r.log" "$p" run --data "$out/gen-A" --out "$out/run-$w$r" "${common[@]}"
    must "$out/infer-$w$r.log" "$p" "${infer[@]}" --output-dir "$out/infer-$w$r"
  done
done

python3 - "$out" "$runs" <<'PY'
import csv, filecmp, glob, json, os, re, sys
out, runs = sys.argv[1], int(sys.argv[2])
diffs = []

def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)

def masked_manifest(path):
    return re.sub(r'"(created_utc|git_commit)":\s*"[^"]*"', r'"\1": "-"', open(path).read())

def same_tree(a, b, what, skip=()):
    fa, fb = files(a), files(b)
    for f in sorted(set(fa) ^ set(fb)):
        diffs.append(f"{what}: {f} only in {'A' if f in fa else 'B'}")
    n = 0
    for f in sorted(set(fa) & set(fb)):
        if any(re.search(s, f) for s in skip):
            continue
        pa, pb = os.path.join(a, f), os.path.join(b, f)
        if os.path.basename(f) == "manifest.json":
            same = masked_manifest(pa) == masked_manifest(pb)
        else:
            same = filecmp.cmp(pa, pb, shallow=False)
        n += 1
        if not same:
            diffs.append(f"{what}: {f} differs")
    print(f"{what}: {n} files compared byte for byte")

same_tree(f"{out}/gen-A", f"{out}/gen-B", "gen")
# the inputs (data/) are copies of one folder; everything report wrote is compared
same_tree(f"{out}/report-A", f"{out}/report-B", "report")

IDENTITY = {"timestamp", "git_commit", "hostname"}

def table(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(l for l in f if not l.startswith("#"))]
    return rows[0], rows[1:]

def compare_tables(kind, pattern):
    for name in sorted({os.path.basename(p) for p in glob.glob(f"{out}/{kind}-A1/{pattern}")}):
        def load(w, r):
            hit = glob.glob(f"{out}/{kind}-{w}{r}/{os.path.dirname(pattern)}/{name}") or \
                  glob.glob(f"{out}/{kind}-{w}{r}/{pattern}")
            return table(hit[0])
        t = {(w, r): load(w, r) for w in "AB" for r in range(1, runs + 1)}
        head = t[("A", 1)][0]
        label = re.sub(r"_\d{8}_\d{6}", "_*", name)
        if any(t[k][0] != head for k in t):
            diffs.append(f"{kind} {label}: the columns differ")
            continue
        if any(len(t[k][1]) != len(t[("A", 1)][1]) for k in t):
            diffs.append(f"{kind} {label}: the row counts differ")
            continue
        measured = set()
        for j, col in enumerate(head):
            for w in "AB":
                vals = {tuple(row[j] for row in t[(w, r)][1]) for r in range(1, runs + 1)}
                if len(vals) > 1:
                    measured.add(col)
        compared = [j for j, c in enumerate(head) if c not in measured and c not in IDENTITY]
        bad = [head[j] for j in compared
               if [row[j] for row in t[("A", 1)][1]] != [row[j] for row in t[("B", 1)][1]]]
        for c in bad:
            diffs.append(f"{kind} {label}: column {c} differs between A and B "
                         f"(and not between two rounds of one build)")
        print(f"{kind} {label}: {len(t[('A', 1)][1])} rows, {len(compared)} of {len(head)} columns "
              f"compared; left out: {', '.join(sorted(IDENTITY & set(head)))} (when, which build, "
              f"where) and, as measurements (they differ between rounds of one build): "
              f"{', '.join(c for c in head if c in measured and c not in IDENTITY) or 'none'}")

compare_tables("run", "data/pipebench_track*.csv")
compare_tables("infer", "benchmark_results_*.csv")

def keys(x, p=""):
    if isinstance(x, dict):
        return {k for key, v in x.items() for k in keys(v, f"{p}/{key}")} | {p}
    return {p}
for r in range(1, runs + 1):
    ka = keys(json.load(open(f"{out}/run-A{r}/data/pipebench_summary.json")))
    kb = keys(json.load(open(f"{out}/run-B{r}/data/pipebench_summary.json")))
    if ka != kb:
        diffs.append(f"run pipebench_summary.json (round {r}): keys differ: {sorted(ka ^ kb)[:8]}")
print(f"run pipebench_summary.json: keys compared ({len(ka)}); values are measurements or the run id")

if diffs:
    print(f"\nDIFFERENT ({len(diffs)}):")
    for d in diffs:
        print("  " + d)
    sys.exit(1)
print("\nSAME: every compared output is byte-identical")
PY
