#!/usr/bin/env bash
# Scale-out across MPI ranks on one host, side by side in one call (docs/scaling.md):
#   1. Track 2 aggregate throughput with N ranks against N x one rank's (a plain process), for
#      on-demand TIFF (cache none) and preloaded pixels (cache preload); target >= 0.9. Beside it,
#      N plain processes at the same time (their rates summed): what this machine gives N
#      processes without MPI, so a shortfall can be told apart from a machine without N free cores.
#   2. What MPI adds to a step: Track 3 (emulated compute) as N ranks under mpirun against N
#      plain processes running at the same time; target < 1%.
#   3. Where GPUs are: Track 3 with one GPU per rank (resnet50), each rank's AU and how many
#      ranks hold AU >= 90%.
# Rounds alternate between the two sides of each ratio; ratios are of medians over rounds.
#
# usage: bench/mpi.sh [N...]            (default: 2; e.g. bench/mpi.sh 8 16)
# env:   PIPEBENCH_CLI      pipebench (default: build-mp/pipebench, build/pipebench, or pipebench on PATH)
#        PIPEBENCH_MPIRUN   mpirun (default: the one on PATH; scripts/device_pack.sh --unpack sets it)
#        ROUNDS      alternating rounds (default 3)     WORKERS  loader threads per rank (default 0)
#        ROWS        images (default 2000, 128x128 uint16)    OUT  work folder (default $TMPDIR)
#        GPU_RANKS   ranks for part 3 (default: the GPUs nvidia-smi lists; 0 skips it)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NS=("$@")
[[ ${#NS[@]} -gt 0 ]] || NS=(2)
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-0}
ROWS=${ROWS:-2000}
PY=$(command -v python3)
P=${PIPEBENCH_CLI:-}
for c in "$here/build-mp/pipebench" "$here/build/pipebench" "$(command -v pipebench 2>/dev/null)"; do
  [[ -z $P && -n $c && -x $c ]] && P=$c
done
[[ -n $P && -x $P ]] || { echo "mpi.sh: no pipebench (set PIPEBENCH_CLI)" >&2; exit 2; }
mkdir -p "${OUT:-${TMPDIR:-/tmp}}" || exit 2
work=$(mktemp -d "${OUT:-${TMPDIR:-/tmp}}/pb-mpi-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cores=$(nproc)

MPIRUN=${PIPEBENCH_MPIRUN:-$(command -v mpirun 2>/dev/null)}
mpi_note=""
if [[ -z $MPIRUN || ! -x $MPIRUN ]]; then
  mpi_note="no mpirun on this machine (PATH, PIPEBENCH_MPIRUN): only one-rank numbers"
  MPIRUN=""
fi
source "$(dirname "$0")/mpi_lib.sh" # mpirun_n

"$P" gen --out "$work/ds" --rows "$ROWS" --size 128x128 --formats tiff,raw >/dev/null 2>&1 ||
  { echo "mpi.sh: gen failed" >&2; exit 2; }
t2=(--tracks 2 --formats tiff --data "$work/ds" --repeats 1 --batch-sizes 16 --workers "$WORKERS"
    --caches none,preload --no-peer --batches 50 --window-ms 1500)
t3=(--tracks 3 --formats raw --data "$work/ds" --repeats 1 --steps 400 --t3-batch 16
    --t3-workers 1 --emulate-ms 2)

# col OUT TRACK FILTER COLUMN: the column's value(s) in rows where FILTER (k=v,...) holds
col() {
  "$PY" - "$@" <<'EOF'
import csv, sys
out, track, flt, column = sys.argv[1:5]
want = dict(kv.split("=") for kv in flt.split(",") if kv)
with open(f"{out}/data/pipebench_track{track}.csv") as f:
    rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
for r in rows:
    if all(r.get(k) == v for k, v in want.items()):
        print(r[column])
EOF
}
median() { "$PY" -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:] if x not in ("","nan")]; print(statistics.median(v) if v else "nan")' "$@"; }
have_mpi_build() { grep -q '^# env.mpi_version: .\+' "$1/data/pipebench_track$2.csv"; }
ratio() { "$PY" -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f"{a/b:.3f}" if b>0 else "nan")' "$1" "$2"; }

rows=()
row() { rows+=("$(printf '%-34s %5s %14s %14s %9s %9s %7s' "$@")"); }
row "measure" "N" "without MPI" "with MPI" "ratio" "target" "imbal."

for N in "${NS[@]}"; do
  declare -A one=() agg=() imb=() conc=()
  for ((r = 0; r < ROUNDS; r++)); do
    out="$work/one-$N-$r"
    "$P" run "${t2[@]}" --out "$out" >"$out.log" 2>&1 || { echo "mpi.sh: one-rank run failed:"; tail -3 "$out.log"; exit 2; }
    for c in none preload; do one[$c]+=" $(col "$out" 2 cache=$c samples_per_sec)"; done
    [[ -z $MPIRUN ]] && continue
    if ! have_mpi_build "$out" 2; then
      mpi_note="this pipebench was built without MPI (no libopenmpi-dev at configure time): only one-rank numbers"
      MPIRUN=""
      continue
    fi
    pids=()
    for ((k = 0; k < N; k++)); do
      "$P" run "${t2[@]}" --out "$work/c2-$N-$r-$k" >"$work/c2-$N-$r-$k.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "mpi.sh: a plain track 2 run failed"; exit 2; }; done
    for c in none preload; do
      v=()
      for ((k = 0; k < N; k++)); do v+=($(col "$work/c2-$N-$r-$k" 2 cache=$c samples_per_sec)); done
      conc[$c]+=" $("$PY" -c 'import sys; print(sum(float(x) for x in sys.argv[1:]))' "${v[@]}")"
    done
    out="$work/ranks-$N-$r"
    mpirun_n "$N" "$P" run "${t2[@]}" --out "$out" >"$out.log" 2>&1 || { echo "mpi.sh: $N-rank run failed:"; tail -5 "$out.log"; exit 2; }
    for c in none preload; do
      agg[$c]+=" $(col "$out" 2 cache=$c samples_per_sec)"
      imb[$c]+=" $(col "$out" 2 cache=$c rank_imbalance)"
    done
  done
  for c in none preload; do
    o=$(median ${one[$c]})
    what="track 2 tiff cache=$c, samples/s"
    if [[ -n $MPIRUN ]]; then
      a=$(median ${agg[$c]})
      nx=$("$PY" -c "print($N*$o)")
      row "$what" "$N" "$(printf '%.0f' "$nx")" "$(printf '%.0f' "$a")" "$(ratio "$a" "$nx")" ">=0.9" "$(printf '%.2f' "$(median ${imb[$c]})")"
      cc=$(median ${conc[$c]})
      row "  same, N plain processes at once" "$N" "$(printf '%.0f' "$cc")" "$(printf '%.0f' "$a")" "$(ratio "$a" "$cc")" "-" "-"
    else
      row "$what (one rank)" 1 "$(printf '%.0f' "$o")" "-" "-" "-" "-"
    fi
  done

  # What MPI adds to a step: N ranks under mpirun against N plain processes at the same time.
  [[ -z $MPIRUN ]] && continue
  plain=() ranked=()
  for ((r = 0; r < ROUNDS; r++)); do
    pids=()
    for ((k = 0; k < N; k++)); do
      "$P" run "${t3[@]}" --out "$work/p3-$N-$r-$k" >"$work/p3-$N-$r-$k.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "mpi.sh: a plain track 3 run failed"; exit 2; }; done
    v=()
    for ((k = 0; k < N; k++)); do v+=($(col "$work/p3-$N-$r-$k" 3 cache=preload step_time_mean)); done
    plain+=("$("$PY" -c 'import sys; v=[float(x) for x in sys.argv[1:]]; print(sum(v)/len(v))' "${v[@]}")")
    out="$work/r3-$N-$r"
    mpirun_n "$N" "$P" run "${t3[@]}" --out "$out" >"$out.log" 2>&1 || { echo "mpi.sh: $N-rank track 3 failed:"; tail -5 "$out.log"; exit 2; }
    # pooled over ranks: the mean step of all ranks' steps
    ranked+=("$(col "$out" 3 cache=preload step_time_mean)")
  done
  sp=$(median "${plain[@]}")
  sr=$(median "${ranked[@]}")
  row "track 3 step, emulated 2 ms, ms" "$N" "$(printf '%.4f' "$("$PY" -c "print($sp*1e3)")")" \
      "$(printf '%.4f' "$("$PY" -c "print($sr*1e3)")")" "$(ratio "$sr" "$sp")" "<1.01" "-"
done

# One GPU per rank: Track 3 on resnet50, each rank's AU.
gpus=${GPU_RANKS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
gpu_lines=()
if [[ -n $MPIRUN && ${gpus:-0} -gt 0 ]]; then
  out="$work/gpu"
  if mpirun_n "$gpus" "$P" run --tracks 3 --formats tiff,raw --data "$work/ds" --repeats 1 --steps 100 \
       --t3-batch 64 --t3-workers 4 --device cuda --model resnet50 --out "$out" >"$out.log" 2>&1; then
    while IFS= read -r l; do gpu_lines+=("$l"); done < <("$PY" - "$out" <<'EOF'
import csv, sys
with open(sys.argv[1] + "/data/pipebench_track3.csv") as f:
    rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
for r in rows:
    print(f"  {r['format']:5} cache={r['cache']:7} ranks={r['ranks']} images/s={float(r['images_per_sec']):.0f} "
          f"AU mean={float(r['accelerator_utilisation']):.3f} min={float(r['accelerator_utilisation_min']):.3f} "
          f"per rank=[{r['rank_accelerator_utilisation']}] accelerators at AU>=90%: {r['accelerators_au90']}")
EOF
)
  else
    gpu_lines+=("  track 3 on $gpus GPUs failed: $(tail -2 "$out.log" | tr '\n' ' ')")
  fi
fi

echo "bench/mpi.sh: $(hostname), $cores cores, $ROWS images 128x128 uint16, $WORKERS loader threads per rank, $ROUNDS rounds (medians)"
echo "  pipebench: $P"
echo "  mpirun:    ${MPIRUN:-none} $([[ -n $MPIRUN ]] && "$MPIRUN" --version 2>/dev/null | head -1)"
[[ -n $mpi_note ]] && echo "  NOTE: $mpi_note"
for N in "${NS[@]}"; do ((N > cores)) && echo "  NOTE: $N ranks on $cores cores: oversubscribed, so the ratio measures sharing, not scaling"; done
printf '%s\n' "${rows[@]}"
echo "  ratio: aggregate / (N x one rank) for track 2 (next line: / the sum of N plain processes at once);"
echo "         step with MPI / without for track 3 (N ranks against N plain processes at once)"
echo "  load average while measuring: $(cut -d' ' -f1-3 /proc/loadavg) ($cores cores)"
if ((${#gpu_lines[@]})); then
  echo "track 3, one GPU per rank (resnet50, batch 64):"
  printf '%s\n' "${gpu_lines[@]}"
elif [[ -n $MPIRUN ]]; then
  echo "track 3 on GPUs: no GPU here (nvidia-smi), skipped"
fi
