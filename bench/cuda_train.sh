#!/bin/sh
# Training throughput on one GPU, side by side in one call: pipebench's own CUDA training step
# (cuda_train_bench) against torch eager and torch.compile doing the same step (bfloat16
# autocast, SGD with momentum, channels-last, device-resident synthetic input), with each one's
# peak device memory. Builds nothing.
# Usage: bench/cuda_train.sh BUILD_DIR [MODEL [BATCH [SECONDS]]]   (default resnet50 256 5)
#   BUILD_DIR (or a device pack's bench/ and lib/) holds cuda_train_bench and the CUDA module.
set -u
B=${1:?usage: bench/cuda_train.sh BUILD_DIR [MODEL [BATCH [SECONDS]]]}
M=${2:-resnet50}
N=${3:-256}
S=${4:-5}
BENCH="$B/cuda_train_bench"
[ -x "$BENCH" ] || BENCH="$B/bench/cuda_train_bench"
export PIPEBENCH_CUDA_MODULE=${PIPEBENCH_CUDA_MODULE:-$B/libpipebench-cuda.so}
[ -f "$PIPEBENCH_CUDA_MODULE" ] || PIPEBENCH_CUDA_MODULE=$B/lib/libpipebench-cuda.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
"$BENCH" "$M" bfloat16 "$N" "$S" || echo "pipebench row failed (rc $?)"
python3 "$(dirname "$0")/torch_train_peer.py" "$M" "$N" "$S" || echo "torch rows failed (rc $?)"
