#!/usr/bin/env bash
# Track 3's GPU rows, checked on a GPU in one call (issue 30, "honest GPU steps"):
#   1. the build: an unpacked pack when PIPEBENCH_PACK is set (`. scripts/device_pack.sh --unpack .devpack
#      /tmp/pbpack` first; a GPU machine without this project's packages), else cmake into BUILD;
#   2. the GPU tests: test_gpu_window (the window arithmetic), test_engine_native cuda, and
#      cli_gpu_track3 (a short Track 3 on the default device: AU <= 1, images/s within the rows'
#      device time); from a build, `ctest -L gpu` (every gpu-labelled test) as well;
#   3. `run --tracks 3 --device cuda --model resnet50 --t3-batch 256` over ROWS generated images
#      of 100x100 uint16 (raw, TIFF, OME-Zarr), as issue 30 measured it;
#   4. per row: AU, images/s, device_time_mean and the bound batch / device_time_mean, the step
#      times, and whether the row is honest (AU <= 1, images/s <= bound + 1%).
# Exits 1 when a test fails or a row is not honest.
# usage: bench/gpu_honest.sh [OUT]          (default /tmp/gpu_honest)
# env:   PIPEBENCH_PACK (see 1), BUILD (build-gpu), ROWS (4096), STEPS (40), REPEATS (2), BATCH (256),
#        PIPEBENCH_PYTHON (python3)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/gpu_honest}
py=${PIPEBENCH_PYTHON:-$(command -v python3)}
ROWS=${ROWS:-4096} STEPS=${STEPS:-40} REPEATS=${REPEATS:-2} BATCH=${BATCH:-256}
mkdir -p "$out" || exit 2
status=0
step() { echo; echo "== $*"; }
check() { # check NAME RC
  if [[ $2 -eq 0 ]]; then echo "ok   $1"; else echo "FAIL $1 (exit $2)"; status=1; fi
}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null

if [[ -n ${PIPEBENCH_PACK:-} ]]; then
  pb=$PIPEBENCH_PACK/bin/pipebench tests=$PIPEBENCH_PACK/tests
  step "1. the build: pack $PIPEBENCH_PACK"
else
  build=${BUILD:-$here/build-gpu}
  step "1. the build: cmake into $build"
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPB_WERROR=ON >"$out/cmake.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" >>"$out/cmake.log" 2>&1
  rc=$?
  check "build" $rc
  [[ $rc -eq 0 ]] || { tail -n 20 "$out/cmake.log"; exit 1; }
  [[ -f $build/libpipebench-cuda.so ]] || { echo "FAIL no CUDA module was built (see $out/cmake.log)"; exit 1; }
  pb=$build/pipebench
  tests=$build/tests
  export PIPEBENCH_CUDA_MODULE=$build/libpipebench-cuda.so
fi

step "2. the GPU tests"
find_test() { find "$tests" -type f -name "$1" -perm -u+x | head -n 1; }
t=$(find_test test_gpu_window)
[[ -n $t ]] && { "$t" >"$out/test_gpu_window.log" 2>&1; check "test_gpu_window" $?; }
t=$(find_test test_engine_native)
[[ -n $t ]] && { timeout 300 "$t" cuda >"$out/test_engine_native_cuda.log" 2>&1; check "test_engine_native cuda" $?; }
PIPEBENCH_CLI=$pb PIPEBENCH_PYTHON=$py timeout 600 bash "$here/tests/cli/cli_gpu_track3.sh" >"$out/cli_gpu_track3.log" 2>&1
check "cli_gpu_track3" $?
grep -E "AU |FAIL" "$out/cli_gpu_track3.log"
if [[ -z ${PIPEBENCH_PACK:-} ]]; then
  (cd "$build" && timeout 1200 ctest -L gpu --output-on-failure >"$out/ctest_gpu.log" 2>&1)
  check "ctest -L gpu" $?
  grep -E "tests passed|Failed|\*\*\*" "$out/ctest_gpu.log"
fi

step "3. track 3: resnet50, batch $BATCH, $STEPS steps x $REPEATS repeats, $ROWS images of 100x100"
data=$out/data
[[ -d $data ]] || "$pb" gen --out "$data" --rows "$ROWS" --size 100x100 --formats raw,tiff,ome-zarr \
  >"$out/gen.log" 2>&1 || { echo "FAIL gen"; tail -n 5 "$out/gen.log"; exit 1; }
rm -rf "$out/r"
timeout 900 "$pb" run --tracks 3 --data "$data" --device cuda --model resnet50 --t3-batch "$BATCH" \
  --steps "$STEPS" --repeats "$REPEATS" --no-peer --out "$out/r" >"$out/run.log" 2>&1
rc=$?
check "run --tracks 3 --device cuda" $rc
grep -E "^run: device" "$out/run.log"
[[ $rc -eq 0 ]] || { tail -n 10 "$out/run.log"; exit 1; }

step "4. the rows (bound = batch / device_time_mean: the most the device time allows)"
"$py" - "$out/r/data/pipebench_track3.csv" <<'PY' || status=1
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
f = lambda r, k: float(r[k]) if r.get(k) not in (None, "") else float("nan")
print(f"{'format':9s} {'cache':8s} {'rep':>3s} {'AU':>7s} {'images/s':>9s} {'bound':>9s} {'device ms':>9s} "
      f"{'step p50':>9s} {'step min':>9s} {'step max':>9s} {'wait':>6s}  verdict")
bad = 0
for r in rows:
    b, dev = f(r, "batch_size"), f(r, "device_time_mean")
    au, ips = f(r, "accelerator_utilisation"), f(r, "images_per_sec")
    bound = b / dev
    ok = au <= 1 and ips <= bound * 1.01
    bad += not ok
    print(f"{r['format']:9s} {r['cache']:8s} {r['repeat']:>3s} {au:7.4f} {ips:9.0f} {bound:9.0f} {1e3*dev:9.3f} "
          f"{1e3*f(r,'step_time_p50'):9.3f} {1e3*f(r,'step_time_min'):9.3f} {1e3*f(r,'step_time_max'):9.3f} "
          f"{100*f(r,'data_wait_fraction'):5.1f}%  {'ok' if ok else 'NOT HONEST'}")
print(f"{len(rows) - bad} of {len(rows)} rows honest (AU <= 1, images/s <= bound + 1%)")
sys.exit(1 if bad or not rows else 0)
PY
echo
[[ $status -eq 0 ]] && echo "gpu_honest: all checks passed" || echo "gpu_honest: FAILED (logs in $out)"
exit $status
