#!/bin/bash
# revs --compare on the guide's branches (names sharing a long suffix), from a results file
# written here: a ratio of exactly 1 names no direction, each comparison draws a plot of its
# own name, and the plot's page has a heading slot per branch group.
source "$(dirname "$0")/lib.sh"
py=${PIPEBENCH_PYTHON:-python3}
mkdir -p "$work/results"
"$py" - "$work/results" <<'PY'
import json, sys
d = sys.argv[1]
suffix = "-014viXtwt7gNsiG4xedaMKNA"
branches = ["main", "claude/optimize-gpu-performance" + suffix,
            "claude/tensorrt-integration-phase2" + suffix]
def runs(k_of):
    out = []
    for b in branches:
        k = k_of(b)
        out.append({"branch": b, "experiment": "im2im/segmentation", "success": True,
                    "error": None, "git_info": {"branch": b}, "task": {"kind": "command"},
                    "samples": {"total_training.elapsed_seconds": [k * (1 + 0.01 * r) for r in range(5)],
                                "total_training.throughput_samples_per_second": [100 / k] * 5,
                                "total_training.peak_memory_mb": [150.0 + r for r in range(5)]}})
    return out
# the tensorrt branch is exactly as fast as main: every ratio 1
json.dump(runs(lambda b: 0.5 if "optimize" in b else 1.0), open(d + "/train_benchmark.json", "w"))
json.dump(runs(lambda b: 2.0 if "optimize" in b else 1.0), open(d + "/inference_benchmark.json", "w"))
PY

run "$PB" revs --compare --output "$work/results/train_benchmark.json"
expect_rc 0 "compare the training results"
expect_out '^im2im/segmentation: claude/tensorrt-integration-phase2-014viXtwt7gNsiG4xedaMKNA against main' "full names in the table"
line=$(grep -E '^  total_training\.elapsed_seconds' <<<"$out" | sed -n 2p)
if [[ $line == *"1.00×"* && $line != *"faster"* && $line != *"slower"* && $line == *"no change"* ]]; then pass
else fail "a ratio of 1 names no direction: [$line]"; fi
[[ $(grep -c "1\.00× faster" <<<"$out") -eq 0 ]] && pass || fail "no '1.00× faster' anywhere"
expect_out "^plot: $work/results/images/pipebench_revs_train_benchmark\.png$" "plot named after the results file"

run "$PB" revs --compare --output "$work/results/inference_benchmark.json"
expect_rc 0 "compare the inference results into the same folder"
expect_out "^plot: $work/results/images/pipebench_revs_inference_benchmark\.png$" "its own plot"
run "$PB" revs --compare --output "$work/results/inference_benchmark.json" \
  --baseline "claude/tensorrt-integration-phase2-014viXtwt7gNsiG4xedaMKNA"
expect_rc 0 "another baseline"
expect_out "^plot: $work/results/images/pipebench_revs_inference_benchmark_vs_claude-tensorrt-integration-phase2-014viXtwt7gNsiG4xedaMKNA\.png$" "a plot per baseline"
n=$(ls "$work/results/images"/pipebench_revs_*.png | wc -l)
[[ $n -eq 3 ]] && pass || fail "three comparisons, $n plots: $(ls "$work/results/images")"

# 2 branches x 3 metrics = 6 rows and 2 headings: the page has room for 8 slots
if "$py" - "$work/results/images/pipebench_revs_train_benchmark.png" <<'PY'
import struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(24)
w, h = struct.unpack(">II", head[16:24])
assert (w, h) == (1800, max(640, 360 + 44 * (6 + 2))), (w, h)
PY
then pass; else fail "page height counts a slot per heading"; fi
finish
