#!/usr/bin/env bash
# --device auto, the default of run, infer and train: without a usable GPU (here made certain by
# pointing PIPEBENCH_CUDA_MODULE at a file that is not there) each takes the cpu, says so with
# the reason, and names the device in its results; --device cpu and cuda stay explicit choices.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=120
nogpu="env PIPEBENCH_CUDA_MODULE=$work/no-such-module.so"

run "$pb" gen --out "$work/ds" --rows 8 --size 16x16 --formats raw
expect_rc 0 "gen 8 images"

small=(--data "$work/ds" --steps 3 --repeats 1 --t3-batch 4 --no-peer)
run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/r" --tracks 3
expect_rc 0 "track 3 with the default device"
expect_err "^run: device: cpu \(no usable GPU: PIPEBENCH_CUDA_MODULE=$work/no-such-module.so: no such file\)" \
  "run says it took the cpu and why"
if "$py" - "$work/r/data" <<'PY'
import csv, json, sys
d = sys.argv[1]
rows = list(csv.DictReader(l for l in open(d + "/pipebench_track3.csv") if not l.startswith("#")))
assert rows and all(r["device"] == "cpu" for r in rows), [r["device"] for r in rows]
s = json.load(open(d + "/pipebench_summary.json"))
assert s["device"] == "cpu" and s["device_note"].startswith("no usable GPU: "), s.get("device")
assert s["tracks"]["3"]["device"] == "cpu", s["tracks"]["3"]
PY
then pass; else fail "track 3 rows and the summary name the cpu"; fi

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/r" --tracks 3 --device auto --train
expect_rc 0 "track 3 --train with auto"
expect_err "^run: device: cpu \(no usable GPU: " "auto with --train falls back the same way"

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/rc" --tracks 3 --device cpu
expect_rc 0 "track 3 --device cpu"
expect_err "^run: device: cpu \(" "run names the cpu it was told to use"
if grep -q "no usable GPU" <<<"$errout"; then fail "an explicit cpu gives no fallback reason"; else pass; fi

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/rx" --tracks 3 --device cuda
expect_rc 2 "track 3 --device cuda without a usable GPU"
expect_err "track 3: device cuda is unavailable here: PIPEBENCH_CUDA_MODULE=" "says why cuda is unusable"
[[ ! -e $work/rx/data ]] && pass || fail "a refused device writes nothing"

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/r1" --tracks 1 --samples 2
expect_rc 0 "track 1 alone"
if grep -q "device:" <<<"$errout"; then fail "tracks without a model name no device"; else pass; fi

run timeout $lim $nogpu "$pb" infer --batch-sizes 2 --iterations 2 --warmup 0 --threads 1 \
  --output-dir "$work/inf"
expect_rc 0 "infer with the default device"
expect_out "^device: cpu \(no usable GPU: PIPEBENCH_CUDA_MODULE=" "infer says it took the cpu and why"
if "$py" - "$work/inf" <<'PY'
import csv, glob, sys
rows = [r for f in glob.glob(sys.argv[1] + "/benchmark_results_*.csv") for r in csv.DictReader(open(f))]
assert rows and all(r["device_type"] == "cpu" for r in rows), rows
PY
then pass; else fail "infer rows name the cpu"; fi

run timeout $lim $nogpu "$pb" train --num-images 8 --batch-size 4 --threads 1 \
  --metrics-out "$work/m.json"
expect_rc 0 "train with the default device"
expect_out "^device: cpu \(no usable GPU: PIPEBENCH_CUDA_MODULE=" "train says it took the cpu and why"
if "$py" - "$work/m.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["device"] == "cpu" and m["device_note"].startswith("no usable GPU: "), m
PY
then pass; else fail "train metrics name the cpu and why"; fi

# training on a named GPU that is not there: one line saying why, exit 2, no metrics written
run timeout $lim $nogpu "$pb" train --device cuda --model resnet50 --num-images 8 --batch-size 4 \
  --metrics-out "$work/mc.json"
expect_rc 2 "train --device cuda without a usable GPU"
expect_err "device cuda is unavailable here: PIPEBENCH_CUDA_MODULE=" "train says why cuda is unusable"
[[ $(grep -c . <<<"$errout") == 1 ]] && pass || fail "one line, not $(grep -c . <<<"$errout"): $errout"
[[ ! -e $work/mc.json ]] && pass || fail "a refused train writes no metrics"
run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/rt" --tracks 3 --device cuda --train
expect_rc 2 "track 3 --train --device cuda without a usable GPU"
expect_err "track 3: device cuda is unavailable here: PIPEBENCH_CUDA_MODULE=" "says why, as for inference"
finish
