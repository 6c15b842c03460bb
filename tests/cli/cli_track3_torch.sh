#!/usr/bin/env bash
# run --tracks 3 --framework torch on the CPU with Debian's torch, over a tiny generated tree
# (an image folder and OME-TIFF), training and inference: one row per feeder (pipebench, torch's
# DataLoader, device-resident input) and round, honest arithmetic in the rows, the answer on the
# console. Then bad input: a --torch-model that does not import, does not return an nn.Module,
# whose output does not match the labels, or runs out of memory in training exits 2 with one
# line and leaves the earlier results as they were; an unknown --framework is a usage error.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
models=$(cd "$(dirname "$0")/torch_models" && pwd)
lim=300
if ! "$py" -c "import torch, torchvision, tifffile" 2>/dev/null; then
  echo "skipped: $py has no torch, torchvision or tifffile (scripts/setup.sh installs them)"
  exit 77
fi

# one tree, two formats: an image folder of 3 classes and OME-TIFF, 32x32 RGB
run "$pb" gen --out "$work/ds" --rows 24 --size 32x32 --channels 3 --dtype uint8 \
  --formats imagefolder,tiff --options imagefolder:classes=3
expect_rc 0 "gen an image folder and OME-TIFF"

small=(--t3-batch 4 --t3-workers 1 --steps 3 --repeats 2 --device cpu --python "$py")

# rows: every feeder of every format in every round, AU and shares within [0, 1], images/s =
# batch x steps / window, the DataLoader reading as Track 2's peer does
check_rows() { # CSV MODE
  "$py" - "$@" <<'PY'
import csv, sys
path, mode = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(l for l in open(path) if not l.startswith("#")))
bad = []
for fmt, dl in (("imagefolder", "torch-dataloader (ImageFolder + PIL)"),
                ("tiff", "torch-dataloader (tifffile)")):
    for want in ("pipebench", "torch-dataloader", "resident"):
        got = [r for r in rows if r["format"] == fmt and r["feeder"] == want]
        if len(got) != 2: bad.append(("rounds of", fmt, want, len(got)))
        if want == "torch-dataloader" and any(r["loader"] != dl for r in got):
            bad.append(("loader", fmt, [r["loader"] for r in got]))
for r in rows:
    f = lambda k: float(r[k])
    if r["mode"] != mode: bad.append(("mode", r["mode"]))
    if r["device"] != "cpu": bad.append(("device", r["device"]))
    if not r["framework"].startswith("torch "): bad.append(("framework", r["framework"]))
    au, w = f("accelerator_utilisation"), f("data_wait_fraction")
    if not 0 < au <= 1: bad.append(("AU", au))
    if not 0 <= w <= 1: bad.append(("data wait", w))
    ips = f("images_per_sec")
    if abs(ips - f("batch_size") * f("num_steps") / f("window_s")) > 1e-6 * ips:
        bad.append(("images/s is not batch x steps / window", ips))
    if f("device_busy_s") > f("window_s"): bad.append(("busy over the window", r["feeder"]))
    if r["feeder"] == "resident" and abs(f("compute_bound_share") - 1) > 1e-9:
        bad.append(("resident share", r["compute_bound_share"]))
    if r["feeder"] == "pipebench" and not f("over_dataloader") > 0:
        bad.append(("over_dataloader", r["over_dataloader"]))
assert rows and not bad, bad
print(len(rows), "rows")
PY
}

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r1" --tracks 3 --framework torch \
  --train --model embed "${small[@]}"
expect_rc 0 "training, --model embed"
expect_err "^run: track 3: torch [^ ]+ runs on cpu, float32" "says the device torch used"
expect_err "^run: track 3: torch embed training on cpu: pipebench's loader .*imagefolder: [0-9]+ images/s, [0-9]+% of the [0-9]+ images/s on device-resident input, [0-9.]+x torch's DataLoader .*; tiff: " \
  "the answer in one sentence"
if check_rows "$work/r1/data/pipebench_track3.csv" train; then pass; else fail "training rows"; fi
grep -q "pipebench's loader" "$work/r1/report.md" && pass || fail "the report says the answer"

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r2" --tracks 3 --framework torch \
  --torch-model "$models/good.py" "${small[@]}"
expect_rc 0 "inference, the user's model (FILE.py alone calls build)"
expect_err "^run: track 3: torch good.py:build inference on cpu: " "names the user's model"
if check_rows "$work/r2/data/pipebench_track3.csv" inference; then pass; else fail "inference rows"; fi

# ---- bad input: exit 2, one line, the earlier results as they were ----------------------------
cp "$work/r1/data/pipebench_track3.csv" "$work/before.csv"
bad() { # WHAT REGEX ARGS...
  local what=$1 re=$2
  shift 2
  run timeout $lim "$pb" run --data "$work/ds" --formats imagefolder --out "$work/r1" --tracks 3 \
    --framework torch --train "${small[@]}" "$@"
  expect_rc 2 "$what"
  expect_err "$re" "$what: says why"
  [[ $(grep -c "^pipebench run:" <<<"$errout") -eq 1 ]] && ! grep -q "Traceback" <<<"$errout" && pass ||
    fail "$what: one line, no traceback"
  cmp -s "$work/before.csv" "$work/r1/data/pipebench_track3.csv" && pass ||
    fail "$what: the earlier results were written over"
}
bad "a model that does not import" \
  "^pipebench run: .*--torch-model .*broken.py:build: .*broken.py does not import: ModuleNotFoundError: No module named 'no_such_module_for_pipebench'$" \
  --torch-model "$models/broken.py:build"
bad "a build() that returns no module" \
  "^pipebench run: .*build\(\) returned dict, not a torch.nn.Module$" \
  --torch-model "$models/not_module.py:build"
bad "a model whose output does not match the labels" \
  "^pipebench run: .*the model's output \(4x1\) does not match the labels: a batch of 4x3x32x32 needs \(4, >= [23]\) class scores$" \
  --torch-model "$models/wrong_output.py:build"
bad "out of memory in training" \
  "^pipebench run: .*out of host memory in training: oom.py:build on a batch of 4x3x32x32 \(float32\): RuntimeError: CUDA out of memory\. Tried to allocate 96\.00 GiB .*; [0-9.]+ GiB of [0-9.]+ GiB free \(host memory\)$" \
  --torch-model "$models/oom.py"
bad "a model file that is not there" "^pipebench run: --torch-model .*nowhere.py: no such file" \
  --torch-model "$work/nowhere.py:build"

run "$pb" run --data "$work/ds" --out "$work/r5" --tracks 3 --framework tensorflow
expect_rc 1 "an unknown --framework is a usage error"
expect_err "unknown --framework 'tensorflow' \(torch" "names the frameworks"
run "$pb" run --data "$work/ds" --out "$work/r5" --tracks 3 --torch-model "$models/good.py"
expect_rc 1 "--torch-model without --framework torch"
expect_err "needs --framework torch" "says what it needs"
run "$pb" run --data "$work/ds" --out "$work/r5" --tracks 3 --framework torch --device tpu
expect_rc 1 "a device torch does not run on is a usage error"
expect_err "runs on --device auto, cpu or cuda\[:N\], not 'tpu'" "names the devices"
run "$pb" run --data "$work/ds" --out "$work/r5" --tracks 3 --framework torch --dtype int4
expect_rc 1 "a compute type torch's loop does not take is a usage error"
[[ ! -e $work/r5 ]] && pass || fail "usage errors write nothing"
# SIGINT while the driver and its DataLoader workers run: exit 130, none of them left running
# (they run in the process runner's own group), nothing written but the failed summary.
"$pb" run --data "$work/ds" --formats imagefolder --out "$work/r6" --tracks 3 --framework torch \
  --model embed --t3-batch 4 --t3-workers 2 --steps 100000 --repeats 1 --device cpu \
  --python "$py" >"$work/r6.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do pgrep -f "$work/r6/.*t3torch" >/dev/null && break; sleep 1; done
sleep 5 # into the rounds: the workers have started
n=$(pgrep -f "$work/r6/.*t3torch" | wc -l)
kill -INT $pid
wait $pid
rc=$?
out=$(cat "$work/r6.log")
errout=$out
expect_rc 130 "SIGINT during the torch rounds"
[[ $n -ge 2 ]] && pass || fail "the driver and its DataLoader workers were running ($n processes)"
sleep 1
left=$(pgrep -f "$work/r6/.*t3torch" | wc -l)
[[ $left -eq 0 ]] && pass || fail "$left driver processes left running after SIGINT"
[[ ! -e $work/r6/data/pipebench_track3.csv ]] && pass || fail "a stopped run wrote a table"
finish
