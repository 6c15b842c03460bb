#!/usr/bin/env bash
# pipebench infer across MPI ranks, one GPU per rank (docs/scaling.md), side by side in one call:
# the engine's images/s in one plain process against N ranks under mpirun (each rank on GPU
# rank mod GPUs), rounds alternating between the two. Prints, per batch size, one process's
# images/s, the N ranks' aggregate (all ranks' images over the common window) and its ratio to
# N x one (target >= 0.9 where each rank has a GPU of its own), every rank's own images/s and the
# imbalance (fastest / slowest rank). Medians over rounds.
#
# usage: bench/mpi_infer.sh [N...]     (default: 1 and the GPUs nvidia-smi lists, at least 2;
#                                      N = 1 is one rank under mpirun beside the plain process)
# env:   PIPEBENCH_CLI    pipebench (default: build-mp/pipebench, build/pipebench, or pipebench on PATH)
#        PIPEBENCH_MPIRUN mpirun (default: the one on PATH; scripts/device_pack.sh --unpack sets it)
#        DEVICE    cuda when nvidia-smi lists a GPU, else cpu      MODEL  resnet50
#        DTYPE     bfloat16     BATCHES  64,256     ITERS  100     WARMUP  10     ROUNDS  3
#        THREADS   compute threads per process (default: 0, all CPUs; on the CPU give each rank
#                  its share)
#        SOURCE    --data-source (default synthetic)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
NS=("$@")
[[ ${#NS[@]} -gt 0 ]] || NS=(1 $((gpus > 2 ? gpus : 2)))
DEVICE=${DEVICE:-$([[ ${gpus:-0} -gt 0 ]] && echo cuda || echo cpu)}
MODEL=${MODEL:-resnet50}
DTYPE=${DTYPE:-bfloat16}
BATCHES=${BATCHES:-64,256}
ITERS=${ITERS:-100}
WARMUP=${WARMUP:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-0}
SOURCE=${SOURCE:-synthetic}
PY=$(command -v python3)
P=${PIPEBENCH_CLI:-}
for c in "$here/build-mp/pipebench" "$here/build/pipebench" "$(command -v pipebench 2>/dev/null)"; do
  [[ -z $P && -n $c && -x $c ]] && P=$c
done
[[ -n $P && -x $P ]] || { echo "mpi_infer.sh: no pipebench (set PIPEBENCH_CLI)" >&2; exit 2; }
MPIRUN=${PIPEBENCH_MPIRUN:-$(command -v mpirun 2>/dev/null)}
[[ -n $MPIRUN && -x $MPIRUN ]] || { echo "mpi_infer.sh: no mpirun (PATH, PIPEBENCH_MPIRUN)" >&2; exit 2; }
work=$(mktemp -d "${OUT:-${TMPDIR:-/tmp}}/pb-mpi-infer-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
export TMPDIR=$work

args=(infer --framework pipebench --model "$MODEL" --dtype "$DTYPE" --device "$DEVICE"
      --batch-sizes "$BATCHES" --iterations "$ITERS" --warmup "$WARMUP" --threads "$THREADS"
      --data-source "$SOURCE")
source "$(dirname "$0")/mpi_lib.sh" # mpirun_n

# rows DIR: "batch rank images_per_s imbalance" per row of the CSV there (rank 'one' without ranks)
rows() {
  "$PY" - "$1" <<'EOF'
import csv, glob, sys
for r in csv.DictReader(open(glob.glob(sys.argv[1] + "/*.csv")[0])):
    print(r["batch_size"], r.get("rank") or "one", r["throughput_ips"], r.get("rank_imbalance") or "nan",
          r["device_type"], r["device"].replace(" ", "_"))
EOF
}

for ((r = 0; r < ROUNDS; r++)); do
  out="$work/one-$r"
  "$P" "${args[@]}" --output-dir "$out" >"$out.log" 2>&1 || { echo "mpi_infer.sh: one process failed:"; tail -5 "$out.log"; exit 2; }
  rows "$out" | sed "s/^/one $r /" >>"$work/all.txt"
  for N in "${NS[@]}"; do
    out="$work/ranks$N-$r"
    mpirun_n "$N" "$P" "${args[@]}" --output-dir "$out" >"$out.log" 2>&1 ||
      { echo "mpi_infer.sh: $N ranks failed:"; tail -5 "$out.log"; exit 2; }
    rows "$out" | sed "s/^/$N $r /" >>"$work/all.txt"
  done
done

echo "bench/mpi_infer.sh: $(hostname), $cores cores, $gpus GPUs; $MODEL $DTYPE on $DEVICE, $ITERS passes" \
     "after $WARMUP, $ROUNDS rounds (medians), data: $SOURCE"
echo "  pipebench: $P"
echo "  mpirun:    $MPIRUN $("$MPIRUN" --version 2>/dev/null | head -1)"
"$PY" - "$work/all.txt" "${NS[@]}" <<'EOF'
import statistics, sys
from collections import defaultdict
path, ns = sys.argv[1], [int(n) for n in sys.argv[2:]]
v = defaultdict(list)   # (what, batch, rank) -> images/s per round
imb = defaultdict(list)
dev = {}
for line in open(path):
    what, rnd, batch, rank, ips, im, dtype, name = line.split()
    if rank == "one" and what != "one":  # mpirun -np 1: one rank, a plain row
        v[(what, int(batch), "0")].append(float(ips))
        dev[(what, int(batch), "0")] = f"{dtype} {name.replace('_', ' ')}"
        rank, im = "all", "1"
    v[(what, int(batch), rank)].append(float(ips))
    if rank == "all": imb[(what, int(batch))].append(float(im))
    if rank not in ("all", "one"): dev[(what, int(batch), rank)] = f"{dtype} {name.replace('_', ' ')}"
    if rank == "one": dev[("one", int(batch), "one")] = f"{dtype} {name.replace('_', ' ')}"
med = lambda x: statistics.median(x) if x else float("nan")
batches = sorted({k[1] for k in v})
print(f"{'batch':>5} {'N':>3} {'one process':>12} {'N ranks, all':>13} {'ratio':>7} {'target':>7} {'imbal.':>7}  per rank images/s")
for b in batches:
    one = med(v[("one", b, "one")])
    for n in ns:
        agg = med(v[(str(n), b, "all")])
        per = [med(v[(str(n), b, str(k))]) for k in range(n)]
        ratio = agg / (n * one) if one > 0 else float("nan")
        print(f"{b:>5} {n:>3} {one:>12.1f} {agg:>13.1f} {ratio:>7.3f} {'>=0.9':>7} {med(imb[(str(n), b)]):>7.3f}  "
              + ", ".join(f"r{k} {x:.1f} ({dev.get((str(n), b, str(k)), '?')})" for k, x in enumerate(per)))
print("  ratio: the N ranks' aggregate (every rank's images over the common window) / (N x one plain process);")
print("  one process ran on " + dev.get(("one", batches[0], "one"), "?") + "; each rank on the device named beside it")
EOF
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg) ($cores cores)"
