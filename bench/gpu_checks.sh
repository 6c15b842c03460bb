#!/usr/bin/env bash
# Checks on a GPU machine that the CPU-only CI cannot make, in one call from an unpacked build
# (`. scripts/device_pack.sh --unpack .devpack /tmp/pbpack` first, which sets PIPEBENCH_PACK):
#   1. the CUDA module's API on a real GPU: cuda:N naming, a forward's CUDA-event time, the
#      engine against oneDNN (test_engine_cuda_module, test_engine_cuda);
#   2. `pipebench infer --device cuda`: host wall and CUDA-event latency side by side for
#      pipebench's engine and torch (RN50 bf16, batch 1 and 64);
#   3. a batch that cannot fit in device memory: exit 2 with the size and the memory free;
#   4. the branch runner's GPU memory: nvidia-smi sampling from outside and the Lightning
#      callback from inside (tests/revs/revs_gpu.sh).
# usage: bench/gpu_checks.sh [OUT]      (default /tmp/gpu_checks)
# env:   PIPEBENCH_PYTHON   Python with torch (CUDA) and Lightning (default: python3 on PATH)
#        SKIP_TO     start at step 2, 3 or 4, skipping the steps before it
set -uo pipefail
pack=${PIPEBENCH_PACK:?unpack a build first: . scripts/device_pack.sh --unpack .devpack /tmp/pbpack}
out=${1:-/tmp/gpu_checks}
py=${PIPEBENCH_PYTHON:-$(command -v python3)}
pb=$pack/bin/pipebench
mkdir -p "$out"
status=0
step() { echo; echo "== $*"; }
check() { # check NAME RC WANT
  if [[ $2 -eq $3 ]]; then echo "ok   $1"; else echo "FAIL $1 (exit $2, wanted $3)"; status=1; fi
}

[[ ${SKIP_TO:-1} -le 1 ]] && {
step "1. the CUDA module on this GPU"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
for t in test_engine_cuda_module test_engine_cuda; do
  timeout 300 "$pack/tests/$t" >"$out/$t.log" 2>&1
  check "$t" $? 0
  grep -E "forward device time|cuda:1023|cuda engine on|max rel" "$out/$t.log" | head -8
done

}
[[ ${SKIP_TO:-1} -le 2 ]] && {
step "2. infer --device cuda: wall and CUDA-event latency"
PIPEBENCH_PYTHON_DIR=$PWD/python timeout 400 "$pb" infer --device cuda --framework pipebench,pytorch \
  --model resnet50 --dtype bfloat16 --batch-sizes 1 64 --iterations 50 --warmup 10 \
  --python "$py" --output-dir "$out/infer" >"$out/infer.log" 2>&1
check "infer --device cuda" $? 0
"$py" - "$out/infer" <<'PY'
import csv, glob, sys
files = sorted(glob.glob(sys.argv[1] + "/**/*.csv", recursive=True))
rows = [r for f in files for r in csv.DictReader(l for l in open(f) if not l.startswith("#"))]
print(f"{'framework':12s} {'batch':>5s} {'wall p50 ms':>12s} {'device p50 ms':>14s} {'img/s':>9s}")
for r in rows:
    print(f"{r['framework']:12s} {r['batch_size']:>5s} {float(r['latency_p50_ms']):12.3f} "
          f"{(float(r['device_latency_p50_ms']) if r['device_latency_p50_ms'] else float('nan')):14.3f} "
          f"{float(r['throughput_ips']):9.0f}")
missing = [r["framework"] for r in rows if not r["device_latency_p50_ms"]]
sys.exit(1 if missing else 0)
PY
check "device latency on every CUDA row" $? 0

}
[[ ${SKIP_TO:-1} -le 3 ]] && {
step "3. a batch larger than device memory"
timeout 240 "$pb" infer --device cuda --framework pipebench --model vit_b_16 --dtype bfloat16 \
  --batch-sizes 32768 --iterations 2 --warmup 1 --output-dir "$out/oom" >"$out/oom.log" 2>&1
rc=$?
tail -n 3 "$out/oom.log"
check "out-of-memory batch exits 2" $rc 2
grep -q "out of device memory" "$out/oom.log" && echo "ok   message gives free and total memory" || { echo "FAIL no memory in the message"; status=1; }

}
step "4. revs: GPU memory from outside (nvidia-smi) and inside (Lightning)"
PIPEBENCH_CLI=$pb PIPEBENCH_PYTHON=$py timeout 200 bash tests/revs/revs_gpu.sh >"$out/revs.log" 2>&1
check "revs_gpu" $? 0
grep -E "nvidia-smi sampled|Lightning on the GPU|FAIL|passed" "$out/revs.log" | tail -6

echo
[[ $status -eq 0 ]] && echo "gpu_checks: all passed" || echo "gpu_checks: FAILURES above (logs in $out)"
exit $status
