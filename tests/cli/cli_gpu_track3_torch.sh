#!/usr/bin/env bash
# run --tracks 3 --framework torch on the GPU (label gpu: ctest -L gpu where torch sees one):
# torchvision's resnet50 training and inference on cuda, fed by pipebench, torch's DataLoader
# and device-resident input. The rows must be honest: device cuda, AU at most 1 (CUDA events over
# a synchronised window), busy time within the window, images/s = batch x steps / window, and no
# feeder faster than the compute bound by more than the rounds' noise.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=600
# the driver of this tree (a packed build on the GPU machine does not sit beside its sources)
export PIPEBENCH_PYTHON_DIR=${PIPEBENCH_PYTHON_DIR:-$(cd "$(dirname "$0")/../../python" && pwd)}
"$py" -c "import torch, torchvision, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "FAIL: $py: torch sees no GPU, or torchvision is missing"
  exit 1
}

run "$pb" gen --out "$work/img" --rows 512 --size 160x160 --channels 3 --dtype uint8 \
  --formats imagefolder --options imagefolder:classes=10
expect_rc 0 "gen an image folder"
run "$pb" gen --out "$work/tif" --rows 512 --size 100x100 --formats tiff
expect_rc 0 "gen OME-TIFF"

for mode in --train ""; do
  for data in img tif; do
    dest="$work/r-$data${mode:+-train}"
    run timeout $lim "$pb" run --data "$work/$data" --out "$dest" --tracks 3 --framework torch \
      $mode --model resnet50 --t3-batch 64 --t3-workers 4 --steps 30 --repeats 2 --python "$py"
    expect_rc 0 "resnet50 $data ${mode:-inference} on the default device"
    expect_err "^run: track 3: torch [^ ]+ runs on cuda \(" "takes the GPU and names it"
    expect_err "^run: track 3: torch resnet50 .* on cuda: pipebench's loader" "the answer"
    if "$py" - "$dest/data/pipebench_track3.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
bad = []
for r in rows:
    f = lambda k: float(r[k])
    print(f"{r['format']:12s} {r['feeder']:16s} {r['mode']:9s} images/s {f('images_per_sec'):9.1f}  "
          f"AU {f('accelerator_utilisation'):.3f}  wait {f('data_wait_fraction'):.3f}  "
          f"bound share {f('compute_bound_share'):.3f}")
    if r["device"] != "cuda": bad.append(("device", r["device"]))
    au = f("accelerator_utilisation")
    if not 0 < au <= 1: bad.append(("AU", au))
    if f("device_busy_s") > f("window_s"): bad.append(("busy over the window", r["feeder"]))
    ips = f("images_per_sec")
    if abs(ips - f("batch_size") * f("num_steps") / f("window_s")) > 1e-6 * ips:
        bad.append(("images/s", ips))
    if not f("compute_bound_share") <= 1.25: bad.append(("faster than the bound", r["feeder"]))
feeders = {r["feeder"] for r in rows}
if feeders != {"pipebench", "torch-dataloader", "resident"}: bad.append(("feeders", feeders))
assert rows and not bad, bad
PY
    then pass; else fail "honest GPU rows ($data ${mode:-inference})"; fi
  done
done
finish
