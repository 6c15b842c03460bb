#!/usr/bin/env bash
# pipebench run across MPI ranks: 2 and 4 ranks write one table each (rank 0 alone), whose
# aggregate counts are the sums of the ranks'; a rank that fails reading stops the run with its
# message and exit 2; a rank stuck past PIPEBENCH_RANKS_TIMEOUT_S stops it too; run --ranks N starts the
# ranks itself, and a SIGTERM to it alone stops every rank. Needs PIPEBENCH_CLI, PIPEBENCH_MPIRUN and
# PIPEBENCH_PYTHON (for reading the CSV tables).
source "$(dirname "$0")/../cli/lib.sh"
source "$(dirname "$0")/mpi_lib.sh" # P, MPIRUN, PY, TMPDIR; broken_tiff_copy

"$P" gen --out "$work/ds" --rows 203 --size 32x32 --formats raw,tiff >/dev/null 2>&1 || {
  echo "gen failed"; exit 1; }
# small and quick: one configuration per format in track 2, emulated compute in track 3
small=(--tracks 2,3 --repeats 1 --batch-sizes 8 --workers 1 --caches none --no-peer --steps 8
       --t3-batch 8 --emulate-ms 0.5 --batches 10 --window-ms 20)

# check_tables OUT NP: one row per configuration (not per rank), every row across NP ranks, the
# aggregate sample count the sum of the ranks', equal steps per rank in track 3, and the AU
# count the number of ranks at AU >= 0.9.
check_tables() {
  "$PY" - "$1" "$2" <<'EOF'
import csv, sys
out, np = sys.argv[1], int(sys.argv[2])
def rows(name):
    with open(f"{out}/data/{name}.csv") as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))
bad = []
t2, t3 = rows("pipebench_track2"), rows("pipebench_track3")
if len(t2) != 2: bad.append(f"track 2 has {len(t2)} rows, want 2 (one per format)")
if len(t3) != 4: bad.append(f"track 3 has {len(t3)} rows, want 4 (formats x caches)")
for name, t in (("track 2", t2), ("track 3", t3)):
    for r in t:
        per = [int(float(x)) for x in r["rank_samples"].split(",")]
        rates = [float(x) for x in r["rank_samples_per_sec"].split(",")]
        if int(r["ranks"]) != np or len(per) != np or len(rates) != np:
            bad.append(f"{name} {r['format']}: ranks {r['ranks']}, {len(per)} per-rank counts, want {np}")
        if sum(per) != int(r["samples_all_ranks"]):
            bad.append(f"{name} {r['format']}: ranks' samples {per} do not sum to {r['samples_all_ranks']}")
        if int(r["slowest_rank"]) != rates.index(min(rates)):
            bad.append(f"{name} {r['format']}: slowest rank {r['slowest_rank']}, rates {rates}")
        agg = "samples_per_sec" if name == "track 2" else "images_per_sec"
        want = int(r["samples_all_ranks"]) / float(r["window_s"])
        if abs(float(r[agg]) - want) > 1e-6 * want:
            bad.append(f"{name} {r['format']}: {agg} {r[agg]} is not samples / window ({want})")
for r in t3:
    per = [int(float(x)) for x in r["rank_samples"].split(",")]
    if per != [8 * 8] * np:  # 8 timed steps of batch 8 on every rank
        bad.append(f"track 3 {r['format']}: per-rank samples {per}, want 64 each")
    au = [float(x) for x in r["rank_accelerator_utilisation"].split(",")]
    if int(r["accelerators_au90"]) != sum(a >= 0.9 for a in au):
        bad.append(f"track 3 {r['format']}: accelerators_au90 {r['accelerators_au90']} for AU {au}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
}

# only_results OUT: what a run leaves is the results (no temporary or per-rank files)
only_results() {
  local extra
  extra=$(cd "$1" && find . -type f | grep -vE '^\./data/pipebench_(track[23]\.(parquet|csv|csv-metadata\.json)|summary\.json)$|^\./images/[^/]+\.png$|^\./report\.(md|html)$')
  [[ -z $extra ]] || { echo "unexpected files in $1: $extra"; return 1; }
  [[ -z $(ls -A "$TMPDIR") ]] || { echo "left in TMPDIR: $(ls -A "$TMPDIR")"; return 1; }
}

for np in 2 4; do
  run timeout 300 "${MPIRUN[@]}" -np $np "$P" run --data "$work/ds" --out "$work/out$np" "${small[@]}"
  expect_rc 0 "run across $np ranks"
  n=$(grep -c 'wrote .*pipebench_track2.parquet' <<<"$errout")
  if [[ $n == 1 ]]; then pass; else fail "$np ranks: the track 2 table written $n times, want once"; fi
  expect_err "$np ranks: tracks 2 and 3 report each rank" "$np ranks: the run says it runs across ranks"
  if msg=$(check_tables "$work/out$np" $np 2>&1); then pass; else fail "$np ranks: tables: $msg"; fi
  if msg=$(only_results "$work/out$np"); then pass; else fail "$np ranks: $msg"; fi
done

# Tracks 1 and 4 measure one process: refused across ranks, as a usage error.
run timeout 120 "${MPIRUN[@]}" -np 2 "$P" run --data "$work/ds" --out "$work/out1" --tracks 1
expect_rc 1 "track 1 across ranks"
expect_err "tracks 1 and 4 measure one process" "track 1 across ranks says why"

# A rank that fails reading: rank 1 gets a copy whose compressed strips are broken.
"$P" gen --out "$work/dz" --rows 40 --size 32x32 --formats tiff --compression zstd >/dev/null 2>&1
broken_tiff_copy "$work/dz" "$work/dz_bad"
cat >"$work/by_rank.sh" <<'EOF'
#!/usr/bin/env bash
# the same run on every rank but rank 1's data (BAD_DATA) and steady window (SLOW_MS)
data=$GOOD_DATA ms=20
if [[ ${OMPI_COMM_WORLD_RANK:-0} == 1 ]]; then data=${BAD_DATA:-$GOOD_DATA}; ms=${SLOW_MS:-20}; fi
exec "$PIPEBENCH_CLI" run --data "$data" --window-ms "$ms" "$@"
EOF
chmod +x "$work/by_rank.sh"
t2only=(--tracks 2 --repeats 1 --batch-sizes 8 --workers 1 --caches none --no-peer --batches 10)
start=$SECONDS
GOOD_DATA=$work/dz/tiff BAD_DATA=$work/dz_bad/tiff \
  run timeout 120 "${MPIRUN[@]}" -np 2 "$work/by_rank.sh" --out "$work/outbad" "${t2only[@]}"
expect_rc 2 "a failing rank fails the run"
expect_err "run: track 2, tiff: rank 1: .*dz_bad/tiff/img_[0-9]+\.ome\.tif.*cannot decode" "the failing rank's message, from rank 0"
if ((SECONDS - start < 90)); then pass; else fail "the failed run took $((SECONDS - start)) s"; fi
if [[ ! -e $work/outbad/data/pipebench_track2.parquet && -e $work/outbad/data/pipebench_summary_failed.json ]]; then
  pass; else fail "a failed run wrote a table, or no failed summary"; fi
grep -qE '"error":[[:space:]]*"track 2, tiff: rank 1: ' "$work/outbad/data/pipebench_summary_failed.json" && pass ||
  fail "the failed summary lacks rank 1's error"

# A rank stuck far longer than the bound (rank 1's steady window lasts 300 s): rank 0, waiting
# for it, gives up after PIPEBENCH_RANKS_TIMEOUT_S and stops the job with exit 2. The bound is longer
# than rank 0's calibration, during which rank 1 waits.
start=$SECONDS
PIPEBENCH_RANKS_TIMEOUT_S=20 GOOD_DATA=$work/dz/tiff SLOW_MS=300000 \
  run timeout 200 "${MPIRUN[@]}" -np 2 "$work/by_rank.sh" --out "$work/outslow" "${t2only[@]}"
expect_rc 2 "a stuck rank stops the run"
expect_err "rank 0 of 2: the other ranks did not reach .* within 20 s" "the timeout says what it waited for"
if ((SECONDS - start < 120)); then pass; else fail "the stuck run took $((SECONDS - start)) s"; fi

# train under mpirun: each rank trains on its shard; rank 0 writes the metrics with every rank's.
run timeout 300 "${MPIRUN[@]}" -np 2 "$P" train --data "$work/ds/images.pbraw" --epochs 1 --batch-size 8 \
  --metrics-out "$work/train.json"
expect_rc 0 "train across 2 ranks"
if msg=$("$PY" - "$work/train.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
r = m.get("ranks") or {}
per = [float(x) for x in r.get("throughput_ips_per_rank", "").split(",") if x]
bad = []
if m["images"] != 203 // 2: bad.append(f"images per rank {m['images']}, want {203 // 2}")
if r.get("count") != 2 or len(per) != 2: bad.append(f"ranks {r}")
elif abs(r["throughput_ips_slowest_rank"] - min(per)) > 1e-3 * min(per): bad.append(f"slowest {r}")
print("; ".join(bad)); sys.exit(1 if bad else 0)
EOF
); then pass; else fail "train across ranks: $msg"; fi

# run --ranks N starts the ranks itself, with the same arguments.
run timeout 300 "$P" run --ranks 2 --data "$work/ds" --out "$work/outr" "${small[@]}"
expect_rc 0 "run --ranks 2"
if msg=$(check_tables "$work/outr" 2 2>&1); then pass; else fail "--ranks 2: tables: $msg"; fi
run "$P" run --ranks 0 --data "$work/ds"
expect_rc 1 "run --ranks 0 is a usage error"

# SIGTERM to the launcher alone (as a job scheduler sends it): it passes the signal on through
# mpirun, the ranks stop cleanly, nothing is left running, and it exits 128 + 15. The ranks'
# steady window (60 s) keeps them busy until the signal comes.
"$P" run --ranks 2 --data "$work/dz/tiff" --out "$work/outsig" "${t2only[@]}" --window-ms 60000 \
  >"$work/sig.log" 2>&1 &
launcher=$!
for ((i = 0; i < 600; i++)); do # up to 60 s for both ranks to be running and rank 0 to begin
  (($(pgrep -fc -- "--out $work/outsig") >= 4)) && grep -q "2 ranks: " "$work/sig.log" && break
  sleep 0.1
done
sleep 1
kill -TERM "$launcher"
for ((i = 0; i < 300; i++)); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then
  fail "the launcher still runs 30 s after SIGTERM"
  kill -KILL "$launcher"
fi
wait "$launcher"
rc=$?
if ((rc == 143)); then pass; else fail "the launcher exited $rc after SIGTERM, want 143 ($(tail -n 2 "$work/sig.log"))"; fi
for ((i = 0; i < 100; i++)); do pgrep -f -- "$work/outsig" >/dev/null || break; sleep 0.1; done
if pgrep -af -- "$work/outsig"; then
  fail "processes of the stopped run are left"
  pkill -KILL -f -- "$work/outsig"
else pass; fi
if [[ -f $work/outsig/data/pipebench_summary_failed.json && ! -e $work/outsig/data/pipebench_track2.parquet ]]; then
  pass; else fail "the stopped run left no failed summary, or wrote a table"; fi
finish
