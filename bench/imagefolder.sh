#!/bin/sh
# Image folders: pipebench's loader against the torch DataLoader with PIL (and with
# torchvision.io.decode_jpeg) on an ImageNet-like JPEG tree, in one run on one machine:
#   1. the tree: `pipebench gen --preset imagenet` (N photo-like RGB JPEGs of about 500x375, 100
#      classes, quality 95, 4:2:0), made once and reused; its mean file size is printed;
#   2. images/s of the training transform (random-resized-crop 224 + flip) and the evaluation
#      transform (resize 256 + centre-crop 224), 1 worker and all cores, every loader in
#      interleaved rounds (python/pipebench_imagefolder_bench.py), with pipebench's ratio to
#      torch+PIL at each worker count against the targets (training >= 3x, evaluation >= 2x);
#      with WORKERS=1,2,4,8,16 (any list holding 1) also each loader's per-worker efficiency
#      rate / (workers x 1-worker rate) side by side, and where pipebench's workers' time per
#      image goes at each count (read, decode, resize, batch) and how busy they were;
#   3. with a GPU (nvidia-smi answers, or GPU=1): Track 3's accelerator utilisation of ResNet-50
#      in bfloat16 fed from JPEG (224x224 files of the same content, decoded by the loader and
#      normalised on the GPU) for each worker count in T3_WORKERS: how many cores keep AU >= 90%.
# usage: bench/imagefolder.sh PIPEBENCH [OUT]          (OUT default results/imagefolder)
# env:   N (10000 images), DATA (a tree to use instead), WORKERS ("1,<all cores>"),
#        TRANSFORMS ("train,eval"), PEERS ("pil,io": the torch peers, or "pil" or "none"),
#        BATCH (64), BATCHES (auto: max(20, 6 x workers) per round), ROUNDS (3), PYTHON (python3 with torch and
#        torchvision; default /usr/bin/python3 if it has numpy, else python3), GPU (auto),
#        T3_WORKERS ("2 4 8 16"), T3_BATCH (256), T3_ROWS (2048)
# The library comes from beside PIPEBENCH (../lib or its own folder) unless PIPEBENCH_LIB is
# set; the binding from python/ in this checkout.
set -u
PB=${1:?usage: bench/imagefolder.sh PIPEBENCH [OUT]}
OUT=${2:-results/imagefolder}
N=${N:-10000}
CORES=$(nproc)
WORKERS=${WORKERS:-1,$CORES}
BATCH=${BATCH:-64}
BATCHES=${BATCHES:-auto}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  /usr/bin/python3 -c 'import numpy' 2>/dev/null && PYTHON=/usr/bin/python3
fi
if [ -z "${PIPEBENCH_LIB:-}" ]; then
  d=$(cd "$(dirname "$PB")" && pwd)
  for c in "$d/../lib/libpipebench.so" "$d/libpipebench.so"; do
    [ -f "$c" ] && PIPEBENCH_LIB=$c && break
  done
fi
export PIPEBENCH_LIB
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT" || exit 2
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $CORES cores; python $PYTHON"

DATA=${DATA:-$OUT/imagenet-$N}
if [ ! -d "$DATA/imagefolder" ] && [ ! -f "$DATA/manifest.json" ]; then
  echo "== gen --preset imagenet --rows $N -> $DATA"
  t0=$(date +%s)
  "$PB" gen --out "$DATA" --preset imagenet --rows "$N" || exit $?
  echo "   $(( $(date +%s) - t0 )) s"
fi
TREE=$DATA
[ -d "$DATA/imagefolder" ] && TREE=$DATA/imagefolder
find "$TREE" -type f -name '*.jpg' -printf '%s\n' |
  awk '{s += $1; n++} END {if (n) printf "tree: %d JPEG files, mean %.1f kB\n", n, s / n / 1000}'

echo "== loaders: training and evaluation transforms, workers $WORKERS"
"$PYTHON" "$here/python/pipebench_imagefolder_bench.py" "$TREE" --workers "$WORKERS" \
  --batch "$BATCH" --batches "$BATCHES" --rounds "$ROUNDS" --transforms "${TRANSFORMS:-train,eval}" \
  --peers "${PEERS:-pil,io}" --json "$OUT/loaders.json" || exit $?

GPU=${GPU:-auto}
if [ "$GPU" = auto ]; then
  GPU=0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && GPU=1
fi
[ "$GPU" = 1 ] || { echo "(no GPU: Track 3's AU from JPEG is skipped)"; exit 0; }

T3_WORKERS=${T3_WORKERS:-2 4 8 16}
T3_BATCH=${T3_BATCH:-256}
T3_ROWS=${T3_ROWS:-2048}
T3DATA=$OUT/imagenet224-$T3_ROWS
if [ ! -d "$T3DATA/imagefolder" ]; then
  echo "== gen $T3_ROWS photo-like 224x224 JPEGs (Track 3 batches need one size) -> $T3DATA"
  "$PB" gen --out "$T3DATA" --preset imagenet --rows "$T3_ROWS" --size 224x224 \
    --options gen:sizes=fixed || exit $?
fi
for w in $T3_WORKERS; do
  echo "== track 3, resnet50 bfloat16 from JPEG, $w workers"
  "$PB" run --tracks 3 --data "$T3DATA" --formats imagefolder --device cuda --model resnet50 \
    --dtype bfloat16 --t3-batch "$T3_BATCH" --t3-workers "$w" --steps 40 --repeats 1 \
    --out "$OUT/t3-w$w" >"$OUT/t3-w$w.log" 2>&1 || { echo "track 3 failed:"; tail -n 5 "$OUT/t3-w$w.log"; }
done
"$PYTHON" - "$OUT" "$T3_WORKERS" <<'PY'
import csv, os, sys
out, workers = sys.argv[1], [int(w) for w in sys.argv[2].split()]
def f(r, k):
    try: return float(r[k])
    except (KeyError, ValueError): return float("nan")
print("\nTrack 3, ResNet-50 bfloat16 fed from 224x224 JPEG (cache none):")
print("%7s %7s %7s %9s" % ("workers", "AU", "wait", "img/s"))
first = None
for w in workers:
    p = os.path.join(out, "t3-w%d" % w, "data", "pipebench_track3.csv")
    if not os.path.exists(p): continue
    for r in csv.DictReader(l for l in open(p) if not l.startswith("#")):
        if r.get("format") != "imagefolder" or r.get("cache") != "none": continue
        au = f(r, "accelerator_utilisation")
        print("%7d %6.1f%% %6.1f%% %9.0f" % (w, 100 * au, 100 * f(r, "data_wait_fraction"), f(r, "images_per_sec")))
        if au >= 0.9 and first is None: first = w
print("AU >= 90%% from %s workers" % first if first else "AU stays below 90% at these worker counts")
PY
