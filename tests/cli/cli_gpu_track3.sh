#!/usr/bin/env bash
# Track 3 on the GPU (label gpu: ctest -L gpu on a machine with one). The rows must be honest:
# accelerator utilisation at most 1, images/s no more than the rows' own device time allows
# (batch x steps / (device_time_mean x steps), 1% for timer resolution), no step shorter than
# half a step's device time (a step ends when its work ends on the device), and images/s no more
# than batch / mean step time (the steps lie inside the window). --device auto (the default)
# takes the GPU and says so; a --train loop trains there with the cuda engine's own step, its rows
# held to the same rules; infer and train say which device they used.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=400

run "$pb" gen --out "$work/ds" --rows 320 --size 100x100 --formats raw,tiff
expect_rc 0 "gen 320 images"

honest() {
"$py" - "$1" "$2" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
bad = []
for r in rows:
    f = lambda k: float(r[k])
    b, n = f("batch_size"), f("num_steps")
    au, ips, dev = f("accelerator_utilisation"), f("images_per_sec"), f("device_time_mean")
    bound = b * n / (dev * n)
    print(f"{r['format']:8s} {r['cache']:8s} AU {au:.4f}  images/s {ips:9.1f}  bound {bound:9.1f}  "
          f"device {1e3*dev:7.3f} ms  step p50 {1e3*f('step_time_p50'):7.3f} min {1e3*f('step_time_min'):7.3f} ms")
    if r["device"] != "cuda": bad.append(("device", r["device"]))
    if not 0 < au <= 1: bad.append(("AU", au))
    if not ips <= bound * 1.01: bad.append(("images/s over the device bound", ips, bound))
    if not f("step_time_min") >= 0.5 * dev: bad.append(("step shorter than its work", f("step_time_min"), dev))
    if not ips <= b / f("step_time_mean") * 1.0001: bad.append(("images/s over batch / step", ips))
    if r["mode"] != sys.argv[2]: bad.append(("mode", r["mode"]))
assert rows and not bad, bad
PY
}

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r" --tracks 3 --model resnet50 \
  --t3-batch 64 --t3-workers 2 --steps 24 --repeats 2 --no-peer
expect_rc 0 "track 3 with resnet50 on the default device"
expect_err "^run: device: cuda \(" "auto takes the GPU and names it"
honest "$work/r/data/pipebench_track3.csv" inference && pass || fail "track 3 GPU rows are honest"

run timeout $lim "$pb" run --data "$work/ds" --out "$work/rt" --tracks 3 --model resnet50 \
  --t3-batch 32 --t3-workers 2 --steps 8 --repeats 1 --train --formats raw --no-peer
expect_rc 0 "track 3 --train left to auto"
expect_err "^run: device: cuda \(" "training takes the GPU too"
honest "$work/rt/data/pipebench_track3.csv" train && pass || fail "track 3 GPU training rows are honest"

run timeout $lim "$pb" infer --batch-sizes 8 --iterations 3 --warmup 1 --output-dir "$work/inf"
expect_rc 0 "infer on the default device"
expect_out "^device: cuda " "infer takes the GPU"

run timeout $lim "$pb" train --num-images 8 --batch-size 4 --threads 2 --metrics-out "$work/m.json"
expect_rc 0 "train on the default device"
expect_out "^device: cuda " "train takes the GPU"

run timeout $lim "$pb" train --device cuda --model resnet50 --num-images 64 --batch-size 32 \
  --metrics-out "$work/mr.json"
expect_rc 0 "train resnet50 on cuda"
expect_out "^device: cuda .*model resnet50" "train names the GPU and the model"
if "$py" - "$work/mr.json" <<'PY'
import json, math, sys
m = json.load(open(sys.argv[1]))
assert m["device"] == "cuda" and m["steps"] == 2 and math.isfinite(m["final_loss"]), m
PY
then pass; else fail "train resnet50 metrics: cuda, 2 steps, a finite loss"; fi
finish
