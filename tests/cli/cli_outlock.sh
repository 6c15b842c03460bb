#!/usr/bin/env bash
# One results folder, one writer: a second `run --out` (or a `report`) into a folder a run is
# writing fails at once naming the folder and the run's pid; a run killed with SIGKILL leaves
# no child running (its calibration copy dies with it) and no lock that blocks the next run; a
# report.md or report.html of the user's own is never replaced; `report` refuses a folder whose
# tables and summary come from different runs.
. "$(dirname "$0")/lib.sh"
unset PIPEBENCH_CALIBRATION # stops during the run's own calibration
pb=${PIPEBENCH_CLI:?}
small=(--tracks 1 --formats raw --repeats 1 --samples 5 --warmup 1 --transforms none)
left=() # pids to kill on the way out, should a check fail
trap 'for p in "${left[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT

run "$pb" gen --out "$work/ds" --rows 40 --size 32x32 --formats raw
expect_rc 0 "gen"

# Another run's folder, for the mix below.
run timeout 120 "$pb" run --data "$work/ds" --out "$work/x" "${small[@]}"
expect_rc 0 "a first run"

# start_caught OUT: starts a run into OUT and waits for its calibration (the forked copy of
# pipebench that measures the machine, for seconds): $a is `timeout`, $runpid the run, $child
# the copy.
start_caught() {
  timeout 120 "$pb" run --data "$work/ds" --out "$1" "${small[@]}" >"$work/a.out" 2>"$work/a.err" &
  a=$! runpid="" child=""
  left+=("$a")
  for _ in $(seq 1 1500); do
    [[ -n $runpid ]] || runpid=$(pgrep -P "$a" -x pipebench | head -n 1)
    [[ -n $runpid ]] && child=$(pgrep -P "$runpid" -x pipebench | head -n 1)
    [[ -n $child ]] && break
    kill -0 "$a" 2>/dev/null || break
    sleep 0.02
  done
  if [[ -z $child ]]; then
    rc="" out="" errout=$(cat "$work/a.err")
    fail "the run never came to its calibration"
    finish
    exit 1
  fi
  left+=("$runpid" "$child")
}

# SIGKILL during the calibration: no handler runs, yet the copy must not outlive the run.
start_caught "$work/k"
[[ $(ps -o stat= -p "$child") == [RSD]* ]] && pass || fail "the calibration ended before the kill"
kill -9 "$runpid"
sleep 0.5
still=$(pgrep -f -- "--out $work/k" | grep -vx "$a")
if [[ -n $still ]]; then
  rc="" out=$(ps -o pid,ppid,stat,args -p "${still//$'\n'/,}") errout=""
  fail "a child of the killed run is still there 0.5 s after its SIGKILL"
else
  pass
fi
{ wait "$a"; } 2>/dev/null

# A run stopped in its calibration holds its folder: a second run and a report are refused at
# once. (The copy is not stopped: a stopped process whose parent dies gets SIGHUP from the
# kernel, an orphaned process group, which would hide what the kill above checks.)
start_caught "$work/r"
kill -STOP "$runpid"
run timeout 60 "$pb" run --data "$work/ds" --out "$work/r" "${small[@]}"
expect_rc 2 "a second run into a folder in use"
expect_err "$work/r is in use" "the second run names the folder"
expect_err "pid $runpid" "the second run names the first run's pid"
[[ ! -e $work/r/data ]] && pass || fail "the refused run wrote into the folder"
run timeout 60 "$pb" report "$work/r"
expect_rc 2 "report of a folder a run is writing"
expect_err "$work/r is in use" "report names the folder in use"
kill -9 "$runpid"
{ wait "$a"; } 2>/dev/null

# The killed run's lock file blocks nobody: the next run goes through, and lets go of it.
run timeout 120 "$pb" run --data "$work/ds" --out "$work/r" "${small[@]}"
expect_rc 0 "a run after a killed one"
[[ ! -e $work/r/.pipebench.lock ]] && pass || fail "the lock file stays after the run"
grep -q '^<!-- pipebench report; run ' "$work/r/report.md" && pass || fail "report.md carries its mark"
run "$pb" report "$work/r" --no-plots
expect_rc 0 "report of a folder of one run"

# Tables of one run beside the summary of another: refused, nothing redrawn.
cp -r "$work/r" "$work/m"
cp "$work/x/data/pipebench_track1.parquet" "$work/m/data/"
before=$(cd "$work/m" && md5sum report.md report.html images/*.png)
run "$pb" report "$work/m"
expect_rc 2 "report of mixed runs"
expect_err "different runs" "the mix is named"
expect_err "data/pipebench_track1.parquet" "the table of the other run is named"
expect_err "data/pipebench_summary.json" "the summary is named"
[[ $(cd "$work/m" && md5sum report.md report.html images/*.png) == "$before" ]] && pass \
  || fail "report of mixed runs rewrote files"

# A report.md or report.html of the user's own: the run is refused before it measures, the
# file stays as it was; `report` refuses it too.
for name in report.md report.html; do
  mkdir -p "$work/u-$name"
  echo "my own notes" >"$work/u-$name/$name"
  run timeout 60 "$pb" run --data "$work/ds" --out "$work/u-$name" "${small[@]}"
  expect_rc 2 "run into a folder with the user's $name"
  expect_err "$work/u-$name/$name is not a report pipebench wrote" "the user's $name is named"
  [[ $(cat "$work/u-$name/$name") == "my own notes" ]] && pass || fail "the user's $name was replaced"
  [[ ! -e $work/u-$name/data && ! -e $work/u-$name/.pipebench.lock ]] && pass \
    || fail "the refused run left files beside the user's $name"
done
cp -r "$work/r" "$work/u2"
echo "my own notes" >"$work/u2/report.md"
run "$pb" report "$work/u2"
expect_rc 2 "report into a folder with the user's report.md"
expect_err "$work/u2/report.md is not a report pipebench wrote" "report names the user's file"
[[ $(cat "$work/u2/report.md") == "my own notes" ]] && pass || fail "report replaced the user's report.md"
ln -sf "$work/elsewhere.md" "$work/u2/report.md"
run "$pb" report "$work/u2" --no-plots
expect_rc 2 "report over a link named report.md"
[[ -L $work/u2/report.md && ! -e $work/elsewhere.md ]] && pass || fail "the link was replaced or written through"
# A report of a pipebench from before the mark is its own, and is replaced.
cp -r "$work/r" "$work/old"
sed -i '1d' "$work/old/report.md"
run "$pb" report "$work/old" --no-plots
expect_rc 0 "report over an unmarked report of an older pipebench"
finish
