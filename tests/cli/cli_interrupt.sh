#!/usr/bin/env bash
# pipebench run stopped by SIGINT or SIGTERM sent to the main process alone (as `kill PID`
# does, not a terminal's Ctrl-C to the whole group): it ends within about two seconds with
# 128 + the signal, no child is left running (the torch peer included), no temporary is left in
# OUT or OUT/data, the earlier complete set of tables, plots and report is there byte for byte
# and consistent (one run id: the summary's timestamp is every table's and the report's), and
# OUT/data/pipebench_summary_failed.json says what was finished and where the run stopped. A run
# that fails before measuring (a missing dataset) leaves that file and no empty folder.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
small=(--repeats 1 --samples 10 --warmup 2 --batches 4 --batch-sizes 4 --workers 0,2 --caches none
       --transforms none --python "$py")

run "$pb" gen --out "$work/ds" --rows 40 --size 32x32 --formats raw,tiff
expect_rc 0 "gen"
# The earlier complete set.
run "$pb" run --data "$work/ds" --out "$work/r" --tracks 1,2 --no-peer "${small[@]}"
expect_rc 0 "the first, complete run"

set_files() { # the run's set in OUT, with checksums
  (cd "$work/r" && find data images report.md report.html -maxdepth 1 -type f \
     -name 'pipebench_track*' -o -name pipebench_summary.json -o -name 'report.*' | sort | xargs md5sum)
}
consistent() { # one run id across summary, tables and report
  "$py" - "$work/r" <<'PY'
import csv, json, sys
d = sys.argv[1]
ts = json.load(open(d + "/data/pipebench_summary.json"))["env"]["timestamp_utc"]
for t in (1, 2):
    rows = list(csv.DictReader(l for l in open(f"{d}/data/pipebench_track{t}.csv") if not l.startswith("#")))
    assert rows and {r["timestamp"] for r in rows} == {ts}, (t, ts)
assert f"Run of {ts}" in open(d + "/report.md").read(), ts
PY
}
before=$(set_files)
consistent && pass || fail "the first run's set is consistent"

peer_left() { pgrep -f "pipebench_peer.py.*$work/r" >/dev/null; }
temps_left() { find "$work/r" "$work/r/data" -maxdepth 1 -name '.*' ! -name . | grep -q .; }

# stop SIG WHEN PHASE ARGS...: starts a run over $work/r, waits until WHEN (a shell test) holds,
# sends SIG to the main process alone and checks what is left.
stop() {
  local sig=$1 when=$2 phase=$3
  shift 3
  "$pb" run --out "$work/r" "$@" >"$work/out" 2>"$work/err" &
  local pid=$! waited=0
  until eval "$when"; do
    sleep 0.05
    waited=$((waited + 1))
    if ! kill -0 "$pid" 2>/dev/null || [[ $waited -gt 2400 ]]; then
      wait "$pid"; rc=$?; errout=$(cat "$work/err"); out=""
      fail "$sig in $phase: the run ended before the moment to stop it came"
      return
    fi
  done
  local t0 t1
  t0=$(date +%s%N)
  kill "-$sig" "$pid"
  wait "$pid"
  rc=$?
  t1=$(date +%s%N)
  out=$(cat "$work/out"); errout=$(cat "$work/err")
  local ms=$(((t1 - t0) / 1000000)) want
  [[ $sig == INT ]] && want=130 || want=143
  echo "  $sig in $phase: exit $rc after $ms ms"
  if [[ $rc -eq 0 && $phase == report ]]; then
    # the signal came during the swap itself: the new set must then be whole
    consistent && pass || fail "$sig in $phase: a run that finished left a consistent set"
    before=$(set_files)
    return
  fi
  expect_rc "$want" "$sig in $phase: exit status"
  [[ $ms -lt 2500 ]] && pass || fail "$sig in $phase: took $ms ms to stop"
  expect_err "interrupted by SIG$sig" "$sig in $phase: says it was interrupted"
  sleep 0.2
  peer_left && fail "$sig in $phase: a peer process is still running" || pass
  temps_left && fail "$sig in $phase: temporaries left: $(ls -a "$work/r" "$work/r/data")" || pass
  [[ $(set_files) == "$before" ]] && pass || fail "$sig in $phase: the earlier set changed"
  consistent && pass || fail "$sig in $phase: the earlier set is no longer consistent"
  "$py" - "$work/r/data/pipebench_summary_failed.json" "SIG$sig" "$phase" <<'PY' && pass || fail "$sig in $phase: pipebench_summary_failed.json"
import json, sys
s = json.load(open(sys.argv[1]))
i = s["interrupted"]
assert i["signal"] == sys.argv[2] and s["stopped_in"].startswith(sys.argv[3]), s
assert "interrupted" in s["error"], s["error"]
if sys.argv[3] == "track 2":
    assert s["completed_tracks"] == ["1"] and i["track"] == "2", s
PY
}

# During data generation (no --data: the preset is generated into OUT/dataset-default).
stop INT '[[ -d $work/r/dataset-default ]]' "preparing the data" --tracks 1 --formats raw,tiff,ome-zarr "${small[@]}"
[[ ! -e $work/r/dataset-default ]] && pass || fail "a stopped generation left $(ls -a "$work/r/dataset-default")"
# During calibration (the staging folder is there, no table yet): one the run measures itself.
PIPEBENCH_CALIBRATION= stop TERM 'ls -a "$work/r" | grep -q "^\.run\.pbtmp-"' calibration --data "$work/ds" --tracks 1,2 "${small[@]}"
# During track 2 with the torch peer running (track 1 finished before).
stop INT 'peer_left' "track 2" --data "$work/ds" --tracks 1,2 "${small[@]}"
stop TERM 'peer_left' "track 2" --data "$work/ds" --tracks 1,2 "${small[@]}"
# During the plots and the report.
stop INT 'compgen -G "$work/r/.run.pbtmp-*/images" >/dev/null' report --data "$work/ds" --tracks 1,2 --no-peer "${small[@]}"

# A missing dataset: exit 2, pipebench_summary_failed.json, no empty folder.
run "$pb" run --data "$work/missing" --out "$work/m" --tracks 1
expect_rc 2 "run with a missing dataset"; expect_err "missing" "the missing dataset is named"
grep -q "missing" "$work/m/data/pipebench_summary_failed.json" && pass || fail "missing dataset: no summary_failed"
[[ -z $(find "$work/m" -type d -empty) ]] && pass || fail "missing dataset left empty folders: $(find "$work/m" -type d -empty)"
[[ $(find "$work/m" -type f | wc -l) -eq 1 ]] && pass || fail "missing dataset left files: $(find "$work/m")"
# A corrupt dataset: the same.
mkdir -p "$work/bad" && printf 'not a tiff' >"$work/bad/x.ome.tif"
run "$pb" run --data "$work/bad/x.ome.tif" --out "$work/b" --tracks 1
expect_rc 2 "run with a corrupt dataset"
[[ -s $work/b/data/pipebench_summary_failed.json && -z $(find "$work/b" -type d -empty) ]] && pass || fail "corrupt dataset: summary_failed, no empty folder"
finish
