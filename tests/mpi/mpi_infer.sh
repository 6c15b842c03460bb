#!/usr/bin/env bash
# pipebench infer across MPI ranks (docs/scaling.md): with 2 and 4 ranks rank 0 alone writes the
# CSV and its JSON, with a row per rank and one for all ranks per batch size whose counts are the
# sums of the ranks'; a rank that fails stops the run with its message and exit 2; a rank stuck
# past PIPEBENCH_RANKS_TIMEOUT_S stops it too; the peers are refused across ranks; train prints its
# metrics path once. Without mpirun the CSV has the columns it always had. Needs PIPEBENCH_CLI,
# PIPEBENCH_MPIRUN and PIPEBENCH_PYTHON (for reading the CSV).
source "$(dirname "$0")/../cli/lib.sh"
source "$(dirname "$0")/mpi_lib.sh" # P, MPIRUN, PY, TMPDIR; broken_tiff_copy

"$P" gen --out "$work/ds" --rows 10 --size 32x32 --formats raw >/dev/null 2>&1 || {
  echo "gen failed"; exit 1; }
small=(--model embed --batch-sizes 2,4 --iterations 6 --warmup 1 --threads 1 --device cpu)

# check_csv DIR NP: one CSV and one JSON; per batch size NP rank rows and one 'all' row whose
# counts are the ranks' sums and whose images/s is all samples over the common window.
check_csv() {
  "$PY" - "$1" "$2" <<'EOF'
import csv, glob, json, sys
out, np = sys.argv[1], int(sys.argv[2])
csvs, jsons = glob.glob(out + "/*.csv"), glob.glob(out + "/*.json")
bad = []
if len(csvs) != 1 or len(jsons) != 1:
    print(f"want one CSV and one JSON in {out}, found {csvs} {jsons}"); sys.exit(1)
rows = list(csv.DictReader(open(csvs[0])))
env = json.load(open(jsons[0]))
if env.get("ranks") != str(np): bad.append(f"the JSON says ranks {env.get('ranks')}")
for bs in (2, 4):
    mine = [r for r in rows if int(r["batch_size"]) == bs]
    ranks = [r for r in mine if r["rank"] != "all"]
    agg = [r for r in mine if r["rank"] == "all"]
    if [r["rank"] for r in ranks] != [str(k) for k in range(np)] or len(agg) != 1:
        bad.append(f"batch {bs}: rows for ranks {[r['rank'] for r in mine]}"); continue
    a = agg[0]
    per = [int(r["n"]) * bs for r in ranks]
    listed = [int(float(x)) for x in a["rank_samples"].split(",")]
    if per != [6 * bs] * np or listed != per:
        bad.append(f"batch {bs}: per-rank samples {per}, listed {listed}")
    if int(a["n"]) != sum(int(r["n"]) for r in ranks):
        bad.append(f"batch {bs}: all-ranks n {a['n']} is not the sum of the ranks'")
    if int(a["samples_all_ranks"]) != sum(per):
        bad.append(f"batch {bs}: samples_all_ranks {a['samples_all_ranks']} != {sum(per)}")
    want = int(a["samples_all_ranks"]) / float(a["window_s"])
    if abs(float(a["throughput_ips"]) - want) > 1e-6 * want:
        bad.append(f"batch {bs}: all-ranks images/s {a['throughput_ips']}, want samples/window {want}")
    rates = [float(x) for x in a["rank_samples_per_sec"].split(",")]
    for r, rate in zip(ranks, rates):
        if abs(float(r["throughput_ips"]) - rate) > 1e-4 * rate:
            bad.append(f"batch {bs} rank {r['rank']}: images/s {r['throughput_ips']} vs listed {rate}")
        if int(r["ranks"]) != np: bad.append(f"batch {bs}: ranks column {r['ranks']}")
    if int(a["slowest_rank"]) != rates.index(min(rates)):
        bad.append(f"batch {bs}: slowest rank {a['slowest_rank']} for rates {rates}")
    if sum(rates) < float(a["throughput_ips"]) * 0.999:
        bad.append(f"batch {bs}: the window's rate {a['throughput_ips']} exceeds the ranks' own {rates}")
print("\n".join(bad)); sys.exit(1 if bad else 0)
EOF
}

for np in 2 4; do
  run timeout 180 "${MPIRUN[@]}" -np $np "$P" infer "${small[@]}" --data-source "$work/ds" \
    --output-dir "$work/out$np"
  expect_rc 0 "infer across $np ranks"
  n=$(grep -c '^results: ' <<<"$out")
  if [[ $n == 1 ]]; then pass; else fail "$np ranks: 'results:' said $n times, want once (rank 0)"; fi
  expect_err "no plot across ranks" "$np ranks: says why there is no plot"
  if msg=$(check_csv "$work/out$np" $np 2>&1); then pass; else fail "$np ranks: CSV: $msg"; fi
  left=$(ls -A "$TMPDIR")
  if [[ -z $left ]]; then pass; else fail "$np ranks: left in TMPDIR: $left"; fi
done

# One process (no launcher): the columns infer always wrote, no rank columns, no 'ranks' in the
# environment.
run timeout 120 "$P" infer "${small[@]}" --data-source "$work/ds" --output-dir "$work/out1"
expect_rc 0 "infer in one process"
if msg=$("$PY" - "$work/out1" <<'EOF'
import csv, glob, json, sys
rows = list(csv.DictReader(open(glob.glob(sys.argv[1] + "/*.csv")[0])))
env = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
bad = [c for c in rows[0] if c in ("rank", "ranks", "window_s", "samples_all_ranks")]
if len(rows) != 2: bad.append(f"{len(rows)} rows")
if "ranks" in env: bad.append("ranks in the JSON")
print(bad); sys.exit(1 if bad else 0)
EOF
); then pass; else fail "one process: $msg"; fi

# A rank that fails reading its shard: rank 1 gets a copy whose compressed strips are broken.
"$P" gen --out "$work/dz" --rows 8 --size 32x32 --formats tiff --compression zstd >/dev/null 2>&1
broken_tiff_copy "$work/dz" "$work/dz_bad"
cat >"$work/by_rank.sh" <<'EOF'
#!/usr/bin/env bash
# the same infer on every rank but rank 1's data (BAD_DATA) and passes (SLOW_ITERS)
data=$GOOD_DATA iters=6
if [[ ${OMPI_COMM_WORLD_RANK:-0} == 1 ]]; then data=${BAD_DATA:-$GOOD_DATA}; iters=${SLOW_ITERS:-6}; fi
exec "$PIPEBENCH_CLI" infer --data-source "$data" --iterations "$iters" "$@"
EOF
chmod +x "$work/by_rank.sh"
one=(--model embed --batch-sizes 2 --warmup 1 --threads 1 --device cpu)
start=$SECONDS
GOOD_DATA=$work/dz/tiff BAD_DATA=$work/dz_bad/tiff \
  run timeout 120 "${MPIRUN[@]}" -np 2 "$work/by_rank.sh" --output-dir "$work/outbad" "${one[@]}"
expect_rc 2 "a failing rank fails infer"
expect_err "infer: rank 1: .*dz_bad/tiff/img_[0-9]+\.ome\.tif.*cannot decode" "the failing rank's message, from rank 0"
n=$(grep -c 'cannot decode' <<<"$errout")
if [[ $n == 1 ]]; then pass; else fail "the error said $n times, want once"; fi
if ((SECONDS - start < 90)); then pass; else fail "the failed run took $((SECONDS - start)) s"; fi
if [[ ! -e $work/outbad ]] || [[ -z $(ls -A "$work/outbad") ]]; then pass; else
  fail "a failed run wrote: $(ls -A "$work/outbad")"; fi

# A rank that runs far longer than the bound (rank 1 times a million passes): rank 0, waiting for
# it where the window closes, gives up after PIPEBENCH_RANKS_TIMEOUT_S and stops the job with exit 2.
start=$SECONDS
PIPEBENCH_RANKS_TIMEOUT_S=10 GOOD_DATA=$work/ds SLOW_ITERS=1000000 \
  run timeout 150 "${MPIRUN[@]}" -np 2 "$work/by_rank.sh" --output-dir "$work/outslow" "${one[@]}"
expect_rc 2 "a stuck rank stops infer"
expect_err "rank 0 of 2: the other ranks did not reach .* within 10 s" "the timeout says what it waited for"
if ((SECONDS - start < 90)); then pass; else fail "the stuck run took $((SECONDS - start)) s"; fi

# The peers time one process: refused across ranks, as a usage error, said once.
run timeout 120 "${MPIRUN[@]}" -np 2 "$P" infer --framework pipebench,torch --output-dir "$work/outpeer"
expect_rc 1 "peers across ranks"
n=$(grep -c "only pipebench's engine runs" <<<"$errout")
if [[ $n == 1 ]]; then pass; else fail "the peers' refusal said $n times, want once"; fi

# More ranks than images: each rank needs a shard.
run timeout 120 "${MPIRUN[@]}" -np 4 "$P" infer "${one[@]}" --iterations 2 --data-source "$work/dz" \
  --output-dir "$work/outfew"
expect_rc 0 "8 images across 4 ranks"
"$P" gen --out "$work/d3" --rows 3 --size 32x32 --formats raw >/dev/null 2>&1
run timeout 120 "${MPIRUN[@]}" -np 4 "$P" infer "${small[@]}" --data-source "$work/d3" --output-dir "$work/out3"
expect_rc 1 "3 images across 4 ranks"
expect_err "holds 3 images, fewer than the 4 ranks" "fewer images than ranks says so"

# train across ranks: the metrics path said once, by rank 0, which wrote it.
run timeout 300 "${MPIRUN[@]}" -np 2 "$P" train --data "$work/ds/images.pbraw" --epochs 1 --batch-size 2 \
  --threads 1 --metrics-out "$work/train.json"
expect_rc 0 "train across 2 ranks"
n=$(grep -c '^metrics: ' <<<"$out")
if [[ $n == 1 && -s $work/train.json ]]; then pass; else fail "train: 'metrics:' said $n times, want once"; fi
finish
