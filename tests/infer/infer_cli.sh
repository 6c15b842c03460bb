#!/usr/bin/env bash
# pipebench infer and train through the library functions (programs/infer): frameworks as peers,
# a missing framework skipped with one line, a failing or hanging peer stopped with a clear error,
# Python helpers found through PIPEBENCH_PYTHON_DIR only, train through the loader.
. "$(dirname "$0")/../cli/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=240

# columns of rows from a CSV: framework,batch_size,n per line
rows_of() {
  "$py" - "$1" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):  # a plain CSV: no comment lines
    print(r["framework"], r["batch_size"], r["n"], r["device_type"], r["compilation_time_ms"] != "",
          r["versions"] != "")
PY
}
csv_of() { sed -n 's/^results: \([^ ]*\).*/\1/p' <<<"$out"; }

# ---- names --------------------------------------------------------------------------------------
run "$pb" infer --framework tensorflow
expect_rc 1 "unknown framework"
expect_err "unknown framework 'tensorflow' \(available: pipebench.*pytorch \(or torch\), torch-compile, jax" "lists the frameworks"
run "$pb" infer --framework onednn,bogus
expect_rc 1 "one bad name in a list"
run "$pb" infer --model resnet18
expect_rc 1 "unknown model"
expect_err "available: embed, resnet50, vit_b_16" "lists the models"
run "$pb" infer --model both,resnet18
expect_rc 1 "one bad model in a list"
run "$pb" infer --device gpu0
expect_rc 1 "unknown device"
expect_err "this machine has: cpu" "says which devices there are"

# ---- the engine and the torch peer on the same inputs -------------------------------------------
# The peers' inputs go to $TMPDIR: a folder of this test's own, so other runs cannot show up in it.
export TMPDIR=$work/tmpdir
mkdir -p "$TMPDIR"
run timeout $lim "$pb" infer --framework onednn,torch --batch-sizes 1 2 --iterations 3 --warmup 1 \
  --threads 1 --output-dir "$work/raw"
expect_rc 0 "engine and torch"
expect_out "^device: cpu" "the device line"
expect_out "^onednn +embed +batch    2: mean" "an engine row"
expect_out "^pytorch +embed +batch    2: mean" "a torch row"
csv=$(csv_of)
if [[ -s $csv ]]; then
  got=$(rows_of "$csv")
  want=$'onednn 1 3 cpu True True\nonednn 2 3 cpu True True\npytorch 1 3 cpu True True\npytorch 2 3 cpu True True'
  [[ $got == "$want" ]] && pass || fail "rows: got [$got]"
else
  fail "no CSV"
fi
[[ -z $(ls -A "$TMPDIR") ]] && pass || fail "temporary input folder left in \$TMPDIR"

# ---- fake peers: PIPEBENCH_PYTHON_DIR is where the scripts come from (PIPEBENCH_SOURCE_DIR is not) -----
fake=$work/fake
mkdir -p "$fake"
export PIPEBENCH_SOURCE_DIR=/nonexistent
cat >"$fake/pipebench_torch_infer.py" <<'PY'
import json, sys
a = sys.argv
out = a[a.index("--out") + 1]
json.dump({"framework": "torch", "error": "RuntimeError: the fake peer fails on purpose"}, open(out, "w"))
PY
PIPEBENCH_PYTHON_DIR=$fake run timeout $lim "$pb" infer --framework torch --batch-sizes 1 \
  --iterations 2 --output-dir "$work/raw2"
expect_rc 2 "a peer reporting an error fails the run"
expect_err "torch peer: RuntimeError: the fake peer fails on purpose" "with the peer's message"

cat >"$fake/pipebench_torch_infer.py" <<'PY'
import subprocess, sys, time
# a grandchild that would outlive a peer killed by pid only
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "__PB_MARK__"])
open(sys.argv[sys.argv.index("--out") + 1] + ".pid", "w").write("started")
time.sleep(120)
PY
# A mark of this run's own, so that a grandchild of another run of this test is not counted.
mark="pb-infer-cli-$$-$RANDOM"
sed -i "s/__PB_MARK__/$mark/" "$fake/pipebench_torch_infer.py"
t0=$(date +%s)
PIPEBENCH_PYTHON_DIR=$fake run timeout $lim "$pb" infer --framework torch --batch-sizes 1 \
  --iterations 2 --peer-timeout 2 --output-dir "$work/raw2"
expect_rc 2 "a hanging peer is stopped"
expect_err "no result after 2 s" "says it timed out"
(( $(date +%s) - t0 < 30 )) && pass || fail "stopped in time"
sleep 1
if pgrep -f "$mark" -u "$(id -u)" >/dev/null; then
  fail "the peer's own child was left running"
else pass; fi

printf 'import sys\nprint("not json")\nopen(sys.argv[sys.argv.index("--out")+1],"w").write("{oops")\n' \
  >"$fake/pipebench_torch_infer.py"
PIPEBENCH_PYTHON_DIR=$fake run timeout $lim "$pb" infer --framework torch --batch-sizes 1 \
  --iterations 2 --output-dir "$work/raw2"
expect_rc 2 "a peer writing broken JSON"
expect_err "pipebench_torch_infer.py wrote no valid JSON" "names the script"
unset PIPEBENCH_SOURCE_DIR

# ---- a missing framework: one line, no failure --------------------------------------------------
block=$work/block
mkdir -p "$block/jax" "$block/torch"
echo 'raise ImportError("No module named jax (blocked by the test)")' >"$block/jax/__init__.py"
echo 'raise ImportError("No module named torch (blocked by the test)")' >"$block/torch/__init__.py"
PYTHONPATH=$block run timeout $lim "$pb" infer --framework onednn,peers --batch-sizes 1 \
  --iterations 2 --warmup 0 --threads 1 --output-dir "$work/raw3"
expect_rc 0 "missing peers do not fail the run"
expect_err "^torch: rows skipped: torch is not installed" "torch skipped in one line"
expect_err "^jax: rows skipped: jax or flax is not installed" "jax skipped in one line"
[[ $(grep -c "rows skipped" <<<"$errout") -eq 2 ]] && pass || fail "one line per skipped peer"
csv=$(csv_of)
[[ -s $csv && $(rows_of "$csv") == "onednn 1 2 cpu True True" ]] && pass || fail "only the engine's rows"

PYTHONPATH=$block run timeout $lim "$pb" infer --framework jax --batch-sizes 1 --iterations 2 \
  --output-dir "$work/raw4"
expect_rc 2 "only a missing peer asked for: nothing could run"
expect_err "nothing could run: every framework asked for was skipped" "says nothing was measured"
[[ ! -e $work/raw4 ]] && pass || fail "no empty CSV written"

# ---- the device reaches the engine --------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  run "$pb" infer --device cuda --batch-sizes 1 --iterations 2 --output-dir "$work/raw5"
  expect_rc 2 "cuda without a GPU"
  expect_err "batch 1: .*cuda" "the engine's reason"
fi

# ---- train through the loader -------------------------------------------------------------------
run "$pb" gen --out "$work/ds" --rows 10 --size 16x16 --formats tiff
expect_rc 0 "gen"
run timeout $lim "$pb" train --data "$work/ds/tiff" --batch-size 4 --epochs 2 --workers 2 \
  --threads 1 --metrics-out "$work/m.json"
expect_rc 0 "train on a dataset"
expect_out "images of 1x16x16 through the loader" "reads through the loader"
expect_out "^epoch 2: " "an epoch line"
if "$py" - "$work/m.json" <<'PY'
import json, math, sys
m = json.load(open(sys.argv[1]))
assert m["loader"] == "pipebench" and m["workers"] == 2, m
assert m["steps"] == 4 and m["images"] == 10, m  # 10 images, batch 4: 2 full steps an epoch
assert math.isfinite(m["final_loss"]) and m["data_time_s"] > 0, m
PY
then pass; else fail "metrics of a loader run"; fi
run "$pb" train --data "$work/ds/tiff" --batch-size 11
expect_rc 1 "a batch larger than the dataset"
expect_err "batch size 11 is larger than the 10 images" "says so"
run "$pb" train --data "$work/nosuch"
expect_rc 2 "a missing dataset"
expect_err "nosuch" "names the path"

finish
