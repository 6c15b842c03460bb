#!/usr/bin/env bash
# The inference guide's workflows through `pipebench infer`, with tiny iteration counts: the
# guide's commands (torch for real; `both both` with stand-in peers, since ViT-B/16 on a CPU
# takes minutes a pass), the plain CSV read by pandas.read_csv with no arguments and filtered as
# the guide does, throughput = batch / mean, the environment JSON beside the CSV, the plot beside
# the output folder, and a `pipebench gen` folder as the data source.
. "$(dirname "$0")/../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=400
csv_of() { sed -n 's/^results: \([^ ]*\).*/\1/p' <<<"$out"; }

# ---- the guide's second command, for real (torch on this machine's device) ---------------------
mkdir -p "$work/cwd" && cd "$work/cwd" || exit 1
run timeout $lim "$pb" infer --framework pytorch --model resnet50 --batch-sizes 1 2 --iterations 2 \
  --warmup 0 --output-dir "$work/results/raw"
expect_rc 0 "infer --framework pytorch --model resnet50"
expect_out "^pytorch +resnet50 +batch    2: mean +[0-9.]+ ms  throughput +[0-9.]+ images/s" \
  "the console prints the mean beside the throughput"
csv=$(csv_of)
[[ $csv == "$work/results/raw/benchmark_results_"????????_??????.csv ]] && pass || fail "CSV name: $csv"
[[ -s ${csv%.csv}.json ]] && pass || fail "the environment JSON of the same stem"
[[ -s $work/results/images/pipebench_infer.png ]] && pass || fail "the plot beside the output folder"
[[ ! -e $work/cwd/images ]] && pass || fail "no plot in the working folder"
if "$py" -c "import pandas" 2>/dev/null; then
  if "$py" - "$csv" "${csv%.csv}.json" <<'PY'
import json, sys
import pandas as pd
df = pd.read_csv(sys.argv[1])  # no arguments: a plain CSV
pytorch_resnet = df[(df['framework'] == 'pytorch') & (df['model'] == 'resnet50')]
sel = pytorch_resnet[['batch_size', 'latency_p50_ms', 'throughput_ips', 'memory_mb']]
assert list(sel['batch_size']) == [1, 2], sel
for _, r in pytorch_resnet.iterrows():
    want = r['batch_size'] / (r['latency_mean_ms'] / 1e3)
    assert abs(r['throughput_ips'] - want) <= 1e-6 * want, (r['throughput_ips'], want)
    assert r['memory_kind'] in ('cpu_peak_rss_growth', 'cuda_max_allocated'), r['memory_kind']
    assert r['memory_mb'] >= 0, r['memory_mb']
    assert r['n'] == 2 and r['device_type'] in ('cpu', 'cuda'), r
env = json.load(open(sys.argv[2]))
assert env.get('command') == 'infer' and any(k.startswith('env.') for k in env), env
PY
  then pass; else fail "pandas reads the CSV and the guide's analysis works"; fi
else
  echo "skip: pandas is not installed (python3-pandas): the CSV was not read with it"
fi

# ---- the guide's first command: both frameworks, both models (stand-in peers) ------------------
fake=$work/fake
mkdir -p "$fake"
cat >"$fake/pipebench_torch_infer.py" <<'PY'
import json, sys
a = sys.argv
arg = lambda k: a[a.index(k) + 1]
bss = [int(x) for x in a[a.index("--batch-sizes") + 1:] if x.isdigit()]
n = int(arg("--iterations"))
res = [{"batch_size": b, "latencies_ns": [1e6 * b] * n, "compile_ms": 0,
        "memory_bytes": 1048576, "memory_kind": "cpu_peak_rss_growth"} for b in bss]
json.dump({"framework": "torch", "framework_version": "0", "device": arg("--device"),
           "runs": [{"framework": "torch", "memory_format": "channels_last", "results": res}],
           "model": arg("--model")}, open(arg("--out"), "w"))
PY
cat >"$fake/pipebench_jax_infer.py" <<'PY'
import json, sys
json.dump({"framework": "jax", "skipped": "jax or flax is not installed (stand-in)"},
          open(sys.argv[sys.argv.index("--out") + 1], "w"))
PY
PIPEBENCH_PYTHON_DIR=$fake run timeout $lim "$pb" infer --framework both --model both \
  --batch-sizes 1 4 --iterations 3 --warmup 0 --output-dir "$work/r2/raw"
expect_rc 0 "infer --framework both --model both: jax skipped, pytorch measured"
expect_err "^jax: rows skipped: jax or flax is not installed \(stand-in\)" "one skip line per model"
[[ $(grep -c "rows skipped" <<<"$errout") -eq 2 ]] && pass || fail "jax skipped once per model"
expect_out "^pytorch +resnet50 +batch    4: mean +4.000 ms  throughput +1000.0 images/s" \
  "throughput is batch / mean"
expect_out "^pytorch +vit_b_16 +batch    1: mean" "the second model"
csv=$(csv_of)
got=$("$py" -c "
import csv, sys
print(' '.join(r['framework'] + ':' + r['model'] + ':' + r['batch_size'] for r in csv.DictReader(open(sys.argv[1]))))" "$csv")
[[ $got == "pytorch:resnet50:1 pytorch:resnet50:4 pytorch:vit_b_16:1 pytorch:vit_b_16:4" ]] && pass ||
  fail "rows of both models: $got"

# ---- a gen folder as the data source -----------------------------------------------------------
run "$pb" gen --out "$work/ds" --rows 3 --size 16x16 --formats tiff,raw
expect_rc 0 "gen"
run timeout $lim "$pb" infer --framework pipebench --data-source "$work/ds" --format raw \
  --batch-sizes 1 --iterations 1 --warmup 0 --threads 1 --output-dir "$work/r3/raw"
expect_rc 0 "a gen folder with --format"
grep -q ",$work/ds/images.pbraw," "$(csv_of)" && pass || fail "data_source names the raw dataset"
run timeout $lim "$pb" infer --framework pipebench --data-source "$work/ds" --batch-sizes 1 \
  --iterations 1 --warmup 0 --threads 1 --output-dir "$work/r4/raw"
expect_rc 0 "a gen folder, first readable format"
grep -qE ",$work/ds/(tiff|images.pbraw)," "$(csv_of)" && pass || fail "data_source names one of its formats"
run "$pb" infer --framework pipebench --data-source "$work/ds" --format zarr --batch-sizes 1
expect_rc 1 "a format the folder lacks"
expect_err "holds no format 'zarr' \(it has: .*tiff.*\)" "lists the folder's formats"
[[ ! -e $work/cwd/results ]] && pass || fail "a refused run leaves no results folder"
finish
