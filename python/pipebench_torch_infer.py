"""torch peer of `pipebench infer`: runs a model's forward pass under the same timing rules
(warm-up runs dropped; time.perf_counter_ns around each forward, nothing else) and prints one
JSON object with the per-iteration latencies on stdout. The C side computes the statistics, so
both frameworks are summarised by the same code.

usage: pipebench_torch_infer.py --model M --dtype D --threads N --warmup W --iterations I
                                --seed S --input-dir DIR --batch-sizes 1 8 32
DIR holds input_<batch>.npy (float32 NCHW) written by pipebench; weights are torch's default
initialisation seeded with S (weights do not change the cost of a forward pass)."""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torchvision


class Embed(torch.nn.Module):
    """origin.md's SimpleEmbeddingModel (pipebench's `embed`)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc = torch.nn.Linear(64, 128)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--input-dir", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = {"framework": "torch", "framework_version": torch.__version__, "device": "cpu",
           "threads": torch.get_num_threads(), "results": []}
    try:
        dtype = DTYPES[a.dtype]
        first = np.load(os.path.join(a.input_dir, f"input_{a.batch_sizes[0]}.npy"), mmap_mode="r")
        t0 = time.perf_counter_ns()
        if a.model == "embed":
            model = Embed(first.shape[1])
        else:
            model = getattr(torchvision.models, a.model)()
        model = model.eval().to(dtype)
        build_ms = (time.perf_counter_ns() - t0) / 1e6
        for bs in a.batch_sizes:
            x = torch.from_numpy(np.load(os.path.join(a.input_dir, f"input_{bs}.npy"))).to(dtype)
            lat = []
            with torch.inference_mode():
                for i in range(a.warmup + a.iterations):
                    t = time.perf_counter_ns()
                    y = model(x)
                    dt = time.perf_counter_ns() - t
                    if i >= a.warmup:
                        lat.append(dt)
            del y
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            out["results"].append({"batch_size": bs, "latencies_ns": lat,
                                   "compile_ms": build_ms, "peak_rss_bytes": rss})
    except Exception as e:  # reported to the C side, which fails with the message
        out["error"] = f"{type(e).__name__}: {e}"
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
