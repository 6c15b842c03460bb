#!/usr/bin/env bash
# infer keeps what finished and says what it is doing: progress lines while a (fake, slow) peer
# runs; the rows of the engine and of an earlier peer stay in the CSV when a later peer times
# out or on Ctrl-C, with no temporary folder left; two calls in the same second write two CSVs;
# the CSV's numbers are the shortest text of each double.
. "$(dirname "$0")/../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=240
export TMPDIR=$work/tmpdir
mkdir -p "$TMPDIR"
mark="pb-infer-keep-$$-$RANDOM"

fake=$work/fake
mkdir -p "$fake"
cat >"$fake/pipebench_torch_infer.py" <<'PY'
import json, sys, time
a = sys.argv
bss = [int(v) for v in a[a.index("--batch-sizes") + 1:] if v.isdigit()]
sys.stderr.write("pipebench-progress: 0 2 eager embed batch 1: starting\n"); sys.stderr.flush()
time.sleep(1.5)
res = [{"batch_size": b, "latencies_ns": [1000000 + 7 * b, 1100000], "compile_ms": 0.1,
        "memory_bytes": 0, "memory_kind": "cpu_peak_rss_growth"} for b in bss]
json.dump({"framework": "torch", "framework_version": "0.0-fake", "device": "cpu", "threads": 1,
           "runs": [{"framework": "torch", "memory_format": "contiguous", "results": res}]},
          open(a[a.index("--out") + 1], "w"))
PY
cat >"$fake/pipebench_jax_infer.py" <<PY
import sys, time
sys.stderr.write("pipebench-progress: 0 2 jit embed batch 1: compiling\n"); sys.stderr.flush()
time.sleep(120)  # $mark
PY

csv_lines() { "$py" -c 'import csv,sys; print(" ".join(r["framework"] for r in csv.DictReader(open(sys.argv[1]))))' "$1"; }

# ---- a later peer times out: the engine's and torch's rows stay -------------------------------
PIPEBENCH_PYTHON_DIR=$fake run timeout $lim "$pb" infer --framework onednn,both --batch-sizes 1 \
  --iterations 2 --warmup 0 --threads 1 --peer-timeout 4 --output-dir "$work/raw"
expect_rc 2 "a peer that times out fails the call"
expect_err "no result after 4 s" "says the peer timed out"
expect_err "the 2 rows that finished are in $work/raw/benchmark_results_[0-9_]+\.csv" "names the kept rows"
expect_out "^peer jax: jit embed batch 1: compiling \([0-9]+ s\)" "a progress line while the peer runs"
csv=$(ls "$work/raw"/benchmark_results_*.csv 2>/dev/null | head -n1)
[[ -n $csv && $(csv_lines "$csv") == "onednn pytorch" ]] && pass || fail "finished rows kept: [$csv]"
[[ -s ${csv%.csv}.json ]] && pass || fail "the environment beside the kept rows"
[[ -z $(ls -A "$TMPDIR") ]] && pass || fail "temporary folder left after a timeout"

# The numbers: the shortest text that reads back to the same double.
if "$py" - "$csv" <<'PY'
import csv, re, sys
for r in csv.DictReader(open(sys.argv[1])):
    for k, v in r.items():
        if re.match(r"^-?\d*\.\d+(e[-+]\d+)?$", v):
            assert repr(float(v)) == v, (k, v, repr(float(v)))
print("shortest")
PY
then pass; else fail "numbers in their shortest form"; fi

# ---- Ctrl-C while the slow peer runs: exit 130, rows kept, nothing left behind ----------------
# (not under `timeout`, which would pass the signal on twice: to pipebench and to its group)
PIPEBENCH_PYTHON_DIR=$fake "$pb" infer --framework onednn,both --batch-sizes 1 \
  --iterations 2 --warmup 0 --threads 1 --output-dir "$work/raw2" >"$work/int.out" 2>"$work/int.err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q "^peer jax" "$work/int.out" 2>/dev/null && break
  sleep 0.1
done
kill -INT "$pid"
( sleep 60; kill -KILL "$pid" 2>/dev/null ) >/dev/null 2>&1 &  # should the stop hang
dog=$!
wait "$pid"
rc=$?
kill "$dog" 2>/dev/null
out=$(cat "$work/int.out"); errout=$(cat "$work/int.err")
expect_rc 130 "Ctrl-C ends infer with 130"
expect_err "stopped by signal 2" "says it was stopped"
csv=$(ls "$work/raw2"/benchmark_results_*.csv 2>/dev/null | head -n1)
[[ -n $csv && $(csv_lines "$csv") == "onednn pytorch" ]] && pass || fail "rows kept on Ctrl-C: [$csv]"
[[ -z $(ls -A "$TMPDIR") ]] && pass || fail "pipebench_infer_* left in \$TMPDIR after Ctrl-C"
sleep 0.5
if pgrep -f "$mark" -u "$(id -u)" >/dev/null; then fail "the peer was left running"; else pass; fi

# ---- calls in the same second never share a CSV ------------------------------------------------
for k in 1 2 3; do
  "$pb" infer --framework onednn --batch-sizes 1 --iterations 1 --warmup 0 --threads 1 \
    --output-dir "$work/same" >/dev/null 2>&1 &
  a=$!
  "$pb" infer --framework onednn --batch-sizes 1 --iterations 1 --warmup 0 --threads 1 \
    --output-dir "$work/same" >/dev/null 2>&1 &
  b=$!
  wait "$a"; wait "$b"
done
n=$(ls "$work/same"/benchmark_results_*.csv | wc -l)
[[ $n -eq 6 ]] && pass || fail "six calls, $n CSVs: $(ls "$work/same")"
[[ $(ls "$work/same"/benchmark_results_*.json | wc -l) -eq 6 ]] && pass || fail "one environment per CSV"
[[ -z $(ls -A "$work/same" | grep -v '^benchmark_results_') ]] && pass || fail "nothing else left in the folder"
finish
