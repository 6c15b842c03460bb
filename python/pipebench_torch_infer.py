"""torch peer of `pipebench infer`: a model's forward pass under the same timing rules as
pipebench's own engine, in eager mode and with torch.compile, on the CPU or on CUDA.

Timing: the input is on the device before the clock starts; --warmup passes run first and are
dropped; each timed pass runs from the call to the finished output. On CUDA the clock is read
only after torch.cuda.synchronize(), and CUDA events recorded around the call give the device
time beside the host wall time. The C side computes the statistics, so every framework is
summarised by the same code.

usage: pipebench_torch_infer.py --model M --dtype D --device cpu|cuda --threads N --warmup W
           --iterations I --seed S --input-dir DIR --batch-sizes 1 8 32 --modes eager,compile
           --out RESULT.json
DIR holds input_<batch>.npy (float32 NCHW) written by pipebench. Weights are torch's default
initialisation seeded with S (weights do not change the cost of a forward pass). ResNet-50 runs
channels-last, as torch users run it. A dtype other than float32 casts the model and the input
(`.to(dtype)`).

RESULT.json gets one object: framework_version, device_name, threads, and either "skipped" (the
reason torch, torch.compile or the device is not available: not an error), "error", or "runs":
one per mode with its per-batch latencies."""
import argparse
import json
import os
import sys
import time

from pipebench_rss import rss_growth_bytes, rss_mark  # beside this script


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--input-dir", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    ap.add_argument("--modes", default="eager", help="comma list of eager, compile")
    ap.add_argument("--out", help="result JSON (default: stdout)")
    return ap.parse_args(argv)


def build_model(torch, name, channels):
    if name == "embed":
        class Embed(torch.nn.Module):
            """origin.md's SimpleEmbeddingModel (pipebench's `embed`)."""

            def __init__(self):
                super().__init__()
                self.conv1 = torch.nn.Conv2d(channels, 32, 3, padding=1)
                self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
                self.fc = torch.nn.Linear(64, 128)

            def forward(self, x):
                x = torch.relu(self.conv1(x))
                x = torch.relu(self.conv2(x))
                x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
                return self.fc(x)

        return Embed()
    import torchvision
    return getattr(torchvision.models, name)()


class Clock:
    """Host wall time of one pass; on CUDA also its device time from events."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda
        if cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def time(self, fn):
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        if self.cuda:
            self.start.record()
        y = fn()
        if self.cuda:
            self.end.record()
            torch.cuda.synchronize()
        wall = time.perf_counter_ns() - t0
        dev = int(self.start.elapsed_time(self.end) * 1e6) if self.cuda else None
        return y, wall, dev


def peak_memory(torch, cuda, mark_kib):
    if cuda:  # the peak since the reset before the timed passes
        return torch.cuda.max_memory_allocated(), "cuda_max_allocated"
    return rss_growth_bytes(mark_kib), "cpu_peak_rss_growth"


class Progress:
    """Lines for pipebench while this peer runs (it shows them: a slow model on a CPU takes
    minutes): 'pipebench-progress: DONE TOTAL what', at each stage and every few seconds."""

    def __init__(self, total):
        self.done, self.total, self.last = 0, total, 0.0

    def say(self, text, force=True):
        now = time.monotonic()
        if force or now - self.last >= 5.0:
            sys.stderr.write(f"pipebench-progress: {self.done} {self.total} {text}\n")
            sys.stderr.flush()
            self.last = now


def run_mode(torch, np, a, model, mode, dtype, device, memory_format, prog):
    cuda = device.type == "cuda"
    clock = Clock(torch, cuda)
    results = []
    for bs in a.batch_sizes:
        prog.say(f"{mode} {a.model} batch {bs}: {'compiling' if mode == 'compile' else 'starting'}")
        x = torch.from_numpy(np.load(os.path.join(a.input_dir, f"input_{bs}.npy")))
        x = x.to(device=device, dtype=dtype).contiguous(memory_format=memory_format)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        fn = model
        compile_ms = 0.0
        with torch.inference_mode():
            if mode == "compile":
                torch._dynamo.reset()  # one graph per batch size, its compile timed alone
                fn = torch.compile(model, dynamic=False)
                _, first, _ = clock.time(lambda: fn(x))  # compiles, then runs once
                compile_ms = first / 1e6
            lat, dev_lat = [], []
            mark = None
            for i in range(a.warmup + a.iterations):
                if i == a.warmup:  # memory is measured over the timed passes only
                    if cuda:
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                    mark = rss_mark()
                y, wall, dev = clock.time(lambda: fn(x))
                prog.done += 1
                prog.say(f"{mode} {a.model} batch {bs}: pass {i + 1} of {a.warmup + a.iterations}",
                         force=False)
                if i >= a.warmup:
                    lat.append(wall)
                    if dev is not None:
                        dev_lat.append(dev)
        del y
        mem, kind = peak_memory(torch, cuda, mark)
        r = {"batch_size": bs, "latencies_ns": lat, "compile_ms": compile_ms,
             "memory_bytes": mem, "memory_kind": kind}
        if dev_lat:
            r["device_latencies_ns"] = dev_lat
        results.append(r)
    return results


def measure(a, out):
    try:
        import numpy as np
        import torch
    except ImportError as e:
        out["skipped"] = f"torch is not installed for {sys.executable} ({e})"
        return
    out["framework_version"] = torch.__version__
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compile"):
            out["error"] = f"unknown mode '{m}' (eager, compile)"
            return
    if a.device == "cuda" and not torch.cuda.is_available():
        why = "built without CUDA" if torch.version.cuda is None else "no CUDA device visible"
        out["skipped"] = f"torch {torch.__version__} cannot run on cuda ({why})"
        return
    if "compile" in modes and not hasattr(torch, "compile"):
        out["skipped_modes"] = {"compile": f"torch {torch.__version__} has no torch.compile "
                                           "(it came with torch 2.0)"}
        modes.remove("compile")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    out["threads"] = torch.get_num_threads()
    device = torch.device(a.device)
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(0)
        out["versions"] = f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN " \
                          f"{torch.backends.cudnn.version()}"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    memory_format = torch.channels_last if a.model == "resnet50" else torch.contiguous_format
    first = np.load(os.path.join(a.input_dir, f"input_{a.batch_sizes[0]}.npy"), mmap_mode="r")
    torch.manual_seed(a.seed)
    model = build_model(torch, a.model, first.shape[1]).eval()
    model = model.to(device=device, dtype=dtype, memory_format=memory_format)
    out["runs"] = []
    prog = Progress(len(modes) * len(a.batch_sizes) * (a.warmup + a.iterations))
    for m in modes:
        res = run_mode(torch, np, a, model, m, dtype, device, memory_format, prog)
        out["runs"].append({"framework": "torch" if m == "eager" else "torch-compile",
                            "memory_format": "channels_last" if a.model == "resnet50"
                            else "contiguous", "results": res})


def main(argv=None):
    a = parse_args(argv)
    out = {"framework": "torch", "framework_version": "", "device": a.device,
           "device_name": "", "threads": a.threads}
    try:
        measure(a, out)
    except Exception as e:  # the C side fails the run with this message
        out["error"] = f"{type(e).__name__}: {e}"
    text = json.dumps(out)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
