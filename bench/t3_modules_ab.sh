#!/bin/bash
# Track 3 with two builds of the CUDA module, side by side in alternating rounds on one machine
# and one dataset: accelerator utilisation, images/s and the CPU time the process used (user +
# system, all its threads) for each. For a change inside the module (how the host waits for the
# GPU, how batches are copied) where everything else, loader included, stays the same.
#
# usage: bench/t3_modules_ab.sh PIPEBENCH MODULE_A MODULE_B DATA [OUT]
#   PIPEBENCH  the pipebench program (its library beside it, as installed or packed)
#   MODULE_A/B the two libpipebench-cuda.so files (PIPEBENCH_CUDA_MODULE for each run)
#   DATA       a dataset Track 3 can read (one image size), e.g. a 224x224 JPEG tree from
#              `pipebench gen --preset imagenet --size 224x224 --options gen:sizes=fixed`
#   OUT        folder for each run's results and logs (default results/t3_modules_ab)
# env:   FORMAT (imagefolder), MODEL (resnet50), DTYPE (bfloat16), WORKERS (all cores),
#        BATCH (256), STEPS (60), ROUNDS (3)
set -u
PB=${1:?usage: bench/t3_modules_ab.sh PIPEBENCH MODULE_A MODULE_B DATA [OUT]}
MA=${2:?module A}
MB=${3:?module B}
DATA=${4:?dataset}
OUT=${5:-results/t3_modules_ab}
for f in "$PB" "$MA" "$MB"; do [[ -f $f ]] || { echo "t3_modules_ab: $f: no such file" >&2; exit 2; }; done
[[ -e $DATA ]] || { echo "t3_modules_ab: $DATA: no such dataset" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
WORKERS=${WORKERS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
echo "machine: $(nproc) CPUs; $(nvidia-smi -L 2>/dev/null | head -n 1)"
echo "track 3: ${MODEL:-resnet50} ${DTYPE:-bfloat16}, batch ${BATCH:-256}, $WORKERS workers, ${STEPS:-60} steps, $ROUNDS rounds A,B,B,A,..."
printf '%-6s %-2s %7s %9s %9s %9s\n' round ab AU img/s cpu_s wall_s
for ((r = 1; r <= ROUNDS; r++)); do
  order="A B"
  ((r % 2 == 0)) && order="B A" # alternate which build goes first
  for ab in $order; do
    mod=$MA
    [[ $ab == B ]] && mod=$MB
    d=$OUT/r$r-$ab
    rm -rf "$d"
    t0=$(date +%s.%N)
    # bash's times after the run: the child's user and system CPU seconds
    ( PIPEBENCH_CUDA_MODULE=$mod "$PB" run --tracks 3 --data "$DATA" --formats "${FORMAT:-imagefolder}" \
        --device cuda --model "${MODEL:-resnet50}" --dtype "${DTYPE:-bfloat16}" --t3-batch "${BATCH:-256}" \
        --t3-workers "$WORKERS" --steps "${STEPS:-60}" --repeats 1 --out "$d" >"$d.log" 2>&1
      echo "rc=$?" >>"$d.log"; times >"$d.times" )
    t1=$(date +%s.%N)
    cpu=$(awk 'NR == 2 {n = split($0, a, /[ ms]+/); s = 0
                        for (i = 1; i + 1 <= n; i += 2) s += a[i] * 60 + a[i + 1]; print s}' "$d.times")
    csv=$d/data/pipebench_track3.csv
    if [[ ! -f $csv ]]; then echo "round $r $ab failed:"; tail -n 5 "$d.log"; continue; fi
    python3 - "$csv" "$r" "$ab" "$cpu" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" <<'PY'
import csv, sys
p, r, ab, cpu, wall = sys.argv[1:6]
for row in csv.DictReader(l for l in open(p) if not l.startswith("#")):
    if row.get("cache") != "none":
        continue
    print("%-6s %-2s %6.1f%% %9.0f %9.1f %9.1f" % (r, ab, 100 * float(row["accelerator_utilisation"]),
                                               float(row["images_per_sec"]), float(cpu), float(wall)))
PY
  done
done
