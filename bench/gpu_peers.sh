#!/usr/bin/env bash
# The GPU peers beside pipebench's CUDA engine, in one call on one GPU: ResNet-50 and ViT-B/16
# in bfloat16 through `pipebench infer --framework all --device cuda` (pipebench's engine, torch
# eager, torch.compile, JAX jit), the rows in OUT/raw, one summary table on stdout.
#
# usage: bench/gpu_peers.sh [BUILD_DIR] [OUT]      (defaults: build, results/gpu_peers)
# env:   PIPEBENCH_PYTHON    Python with torch (CUDA build) and jax[cuda] + flax (default: python3 on PATH)
#        ITERATIONS   timed passes per batch size (default 200; p99 needs 662)
#        WARMUP       dropped passes (default 20)
#        DTYPE        bfloat16 (default), float16, float32
# A framework that is missing (or sees no GPU) is skipped with one line; the run goes on.
set -euo pipefail
build=${1:-build}
out=${2:-results/gpu_peers}
pb=$build/pipebench
py=${PIPEBENCH_PYTHON:-$(command -v python3)}
iters=${ITERATIONS:-200}
warmup=${WARMUP:-20}
dtype=${DTYPE:-bfloat16}
[[ -x $pb ]] || { echo "gpu_peers: no $pb (build first, or give the build folder)" >&2; exit 2; }

echo "== versions"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" - <<'PY' || true
import importlib
for name in ("torch", "jax", "flax"):
    try:
        m = importlib.import_module(name)
        extra = ""
        if name == "torch":
            extra = f" cuda {m.version.cuda}, available {m.cuda.is_available()}"
        if name == "jax":
            extra = f" devices {m.devices()}"
        print(f"{name} {m.__version__}{extra}")
    except Exception as e:  # the missing one is skipped by infer too
        print(f"{name}: not usable ({e})")
PY

run_model() { # model, batch sizes...
  local model=$1
  shift
  echo "== $model $dtype, batch sizes $*"
  "$pb" infer --framework all --device cuda --model "$model" --dtype "$dtype" \
    --batch-sizes "$@" --iterations "$iters" --warmup "$warmup" --python "$py" \
    --output-dir "$out/raw"
}
run_model resnet50 1 32 128 256
run_model vit_b_16 1 32 128

echo "== summary (newest rows per framework, model and batch size)"
"$py" - "$out/raw" <<'PY'
import csv, glob, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "benchmark_results_*.csv"))):
    for r in csv.DictReader(l for l in open(path) if not l.startswith("#")):
        rows[(r["model"], int(r["batch_size"]), r["framework"])] = r
print(f"{'model':10} {'batch':>5} {'framework':14} {'p50 ms':>9} {'img/s':>10} {'compile ms':>11} {'memory MiB':>11}")
for (m, b, f), r in sorted(rows.items()):
    print(f"{m:10} {b:5d} {f:14} {float(r['latency_p50_ms']):9.3f} {float(r['throughput_ips']):10.1f} "
          f"{float(r['compilation_time_ms'] or 'nan'):11.1f} {float(r['memory_mb'] or 'nan'):11.1f}")
PY
