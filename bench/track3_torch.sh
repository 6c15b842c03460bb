#!/bin/sh
# Track 3 with the user's framework on one GPU, in one call: a torchvision model (resnet50 by
# default) trained with torch (bfloat16 autocast, SGD with momentum) fed in interleaved rounds by
# pipebench's loader (pipebench.torch.Loader), torch's DataLoader over the same files (ImageFolder
# + PIL) and device-resident input (the compute bound), over a `gen --preset imagenet` tree. Prints
# the rows (median images/s, AU, data wait, share of the compute bound per feeder) and the answer.
# usage: bench/track3_torch.sh PIPEBENCH [OUT]        (OUT default results/track3_torch)
# env:   MODEL (resnet50), BATCH (256), STEPS (30), REPEATS (3), ROWS (4000), WORKERS (every CPU),
#        PY (python3: the Python with torch and torchvision), TRAIN (1; 0: inference),
#        DATA (a folder from pipebench gen --preset imagenet to use instead of generating),
#        COMPILE (0; 1: the model through torch.compile, so the resident row is the compiled bound)
set -u
PB=${1:?usage: bench/track3_torch.sh PIPEBENCH [OUT]}
OUT=${2:-results/track3_torch}
MODEL=${MODEL:-resnet50}
BATCH=${BATCH:-256}
STEPS=${STEPS:-30}
REPEATS=${REPEATS:-3}
ROWS=${ROWS:-4000}
WORKERS=${WORKERS:-$(nproc)}
PY=${PY:-$(command -v python3)}
TRAIN=${TRAIN:-1}
COMPILE=${COMPILE:-0}
here=$(cd "$(dirname "$0")/.." && pwd)
# the driver and the pipebench package of this tree (a packed build does not sit beside them)
export PIPEBENCH_PYTHON_DIR=${PIPEBENCH_PYTHON_DIR:-$here/python}
mkdir -p "$OUT" || exit 2

DATA=${DATA:-$OUT/imagenet}
if [ ! -d "$DATA" ]; then
  echo "== gen --preset imagenet, $ROWS images -> $DATA"
  "$PB" gen --preset imagenet --rows "$ROWS" --out "$DATA" || exit $?
fi
"$PY" -c "import torch, torchvision; print('== torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())" || exit 2

mode=--train
[ "$TRAIN" = 1 ] || mode=
[ "$COMPILE" = 1 ] && mode="$mode --torch-compile"
echo "== run --tracks 3 --framework torch $mode --model $MODEL, batch $BATCH, $WORKERS workers, $STEPS steps x $REPEATS rounds"
"$PB" run --tracks 3 --framework torch $mode --model "$MODEL" --data "$DATA" --formats imagefolder \
  --t3-batch "$BATCH" --t3-workers "$WORKERS" --steps "$STEPS" --repeats "$REPEATS" \
  --python "$PY" --out "$OUT/run" >"$OUT/run.log" 2>&1
rc=$?
cat "$OUT/run.log"
[ -f "$OUT/run/data/pipebench_track3.csv" ] || { echo "no track 3 table (see $OUT/run.log)"; exit 2; }

echo "== rows (one per feeder and round)"
"$PY" - "$OUT/run/data/pipebench_track3.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
print("%-6s %-16s %10s %7s %7s %8s  %s" % ("round", "feeder", "images/s", "AU", "wait", "of bound", "loader"))
for r in rows:
    print("%-6s %-16s %10.1f %6.1f%% %6.1f%% %7.1f%%  %s" % (
        r["repeat"], r["feeder"], float(r["images_per_sec"]), 100 * float(r["accelerator_utilisation"]),
        100 * float(r["data_wait_fraction"]), 100 * float(r["compute_bound_share"]), r["loader"]))
print("\nmedians over rounds (%s, %s, batch %s, %s):" % (rows[0]["model"], rows[0]["mode"],
      rows[0]["batch_size"], rows[0]["device_name"] or rows[0]["device"]))
med = {}
for f in ("pipebench", "torch-dataloader", "resident"):
    v = [float(r["images_per_sec"]) for r in rows if r["feeder"] == f]
    if v:
        med[f] = statistics.median(v)
        sh = statistics.median(float(r["compute_bound_share"]) for r in rows if r["feeder"] == f)
        print("  %-16s %9.0f images/s  %5.1f%% of the compute bound" % (f, med[f], 100 * sh))
if "pipebench" in med and "torch-dataloader" in med:
    print("  pipebench / torch DataLoader: %.2fx" % (med["pipebench"] / med["torch-dataloader"]))
PY
exit $rc
