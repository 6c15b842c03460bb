#!/usr/bin/env bash
# Track 3 with the JPEG decode on the GPU (nvJPEG), split between the workers and the GPU (auto),
# and on the CPU, in alternating rounds of one call (docs/gpu.md): ResNet-50 in bfloat16, batch
# 256, WORKERS CPU workers, over a `gen --preset imagenet` tree of ROWS images; prints images/s,
# AU, the decode column and the split per run; then torchvision's GPU decode + crop over the same
# files (bench/torchvision_decode_peer.py, where torchvision is installed), and the pixel
# differences nvJPEG and the GPU crop show against libjpeg-turbo and the loader over the tree's
# first 300 images (test_jpeg_gpu TREE 300), when that program is at hand.
# usage: bench/t3_decode.sh PIPEBENCH [OUT]     (after `. scripts/device_pack.sh --unpack ...`,
#        PIPEBENCH is pipebench on the PATH and test_jpeg_gpu is in $PIPEBENCH_PACK/tests)
# env:   ROWS (4096), WORKERS (16), STEPS (40), ROUNDS (2), MODES ("gpu auto cpu"),
#        PEERS (1; 0 skips torchvision and the pixel check), PIPEBENCH_PYTHON (python3);
#        PIPEBENCH_JPEG_DECODERS and PIPEBENCH_JPEG_CPU_SHARE pass
#        through (docs/gpu.md)
set -uo pipefail
pb=${1:?usage: bench/t3_decode.sh PIPEBENCH [OUT]}
out=${2:-/tmp/t3_decode}
py=${PIPEBENCH_PYTHON:-python3}
ROWS=${ROWS:-4096} WORKERS=${WORKERS:-16} STEPS=${STEPS:-40} ROUNDS=${ROUNDS:-2}
MODES=${MODES:-gpu auto cpu}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" || exit 2
tree=$out/imagenet-$ROWS
[[ -d $tree/imagefolder ]] || "$pb" gen --out "$tree" --preset imagenet --rows "$ROWS" >/dev/null || exit 2
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
status=0
for r in $(seq "$ROUNDS"); do
  for d in $MODES; do
    "$pb" run --tracks 3 --device cuda --model resnet50 --dtype bfloat16 --t3-batch 256 \
      --t3-workers "$WORKERS" --decode "$d" --data "$tree" --formats imagefolder --steps "$STEPS" \
      --repeats 1 --no-peer --out "$out/r$r-$d" >"$out/r$r-$d.log" 2>&1 || { echo "round $r $d: exit $?"; status=1; continue; }
    "$py" - "$out/r$r-$d/data/pipebench_track3.csv" "$r" <<'PY'
import csv, sys
for row in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    print(f"round {sys.argv[2]}  decode {row['decode']:<28s} images/s {float(row['images_per_sec']):9.1f}  "
          f"AU {100 * float(row['accelerator_utilisation']):5.1f}%  device {1e3 * float(row['device_time_mean']):6.2f} ms  "
          f"step p50 {1e3 * float(row['step_time_p50']):6.2f} ms  data wait {100 * float(row['data_wait_fraction']):5.1f}%")
PY
    grep -h "decode: " "$out/r$r-$d.log" | sed 's/^/    /'
  done
done
[[ ${PEERS:-1} == 0 ]] && exit $status
"$py" "$here/torchvision_decode_peer.py" "$tree/imagefolder" --batch 256 --batches 12 \
  --json "$out/torchvision.json"
rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || status=1
t=${PIPEBENCH_PACK:-}/tests/test_jpeg_gpu
[[ -x $t ]] && "$t" "$tree/imagefolder" 300
exit $status
