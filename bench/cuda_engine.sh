#!/bin/sh
# GPU engine benchmark: images/s of the cuda engine per model, dtype and batch size, then the
# GPU's limits (cuBLASLt peaks, copy bandwidths), all in one run on one machine; with TORCH=1 the
# torch peers (eager and torch.compile, channels-last ResNet-50) run in the same call after it.
# Builds nothing. Usage: bench/cuda_engine.sh BUILD_DIR [quick|full]
#   BUILD_DIR holds cuda_engine_bench, libpipebench.so and libpipebench-cuda.so.
# Environment: CONFIGS="model:dtype:batch ..." replaces the mode's list; PEAKS=0 skips the GPU's
# limits; TORCH_ROWS="model:batch,..." picks the torch rows (see cuda_torch_peer.py);
# PIPEBENCH_CUDA_PROFILE=FILE appends each engine step's time to FILE.
set -u
B=${1:?usage: bench/cuda_engine.sh BUILD_DIR [quick|full]}
MODE=${2:-full}
SECS=${SECS:-2}
BENCH="$B/cuda_engine_bench"
[ -x "$BENCH" ] || BENCH="$B/bin/cuda_engine_bench"
export PIPEBENCH_CUDA_MODULE=${PIPEBENCH_CUDA_MODULE:-$(dirname "$BENCH")/libpipebench-cuda.so}
[ -f "$PIPEBENCH_CUDA_MODULE" ] || PIPEBENCH_CUDA_MODULE=$B/lib/libpipebench-cuda.so
if [ "${PEAKS:-1}" != 0 ]; then "$BENCH" peaks || exit $?; fi
if [ -n "${CONFIGS:-}" ]; then
  :
elif [ "$MODE" = quick ]; then
  CONFIGS="resnet50:bfloat16:256 vit_b_16:bfloat16:128 resnet50:float32:64"
else
  CONFIGS="resnet50:bfloat16:1 resnet50:bfloat16:32 resnet50:bfloat16:128 resnet50:bfloat16:256
resnet50:float16:256 resnet50:tf32:256 resnet50:float32:1 resnet50:float32:256
vit_b_16:bfloat16:1 vit_b_16:bfloat16:32 vit_b_16:bfloat16:128 vit_b_16:bfloat16:256
vit_b_16:float16:128 vit_b_16:tf32:128 vit_b_16:float32:128 embed:bfloat16:256 embed:float32:256"
fi
for c in $CONFIGS; do
  IFS=: read -r m d b <<E
$c
E
  "$BENCH" "$m" "$d" "$b" "$SECS"
done
if [ "${TORCH:-0}" = 1 ]; then
  python3 "$(dirname "$0")/cuda_torch_peer.py" || echo "torch peer failed (rc $?)"
fi
