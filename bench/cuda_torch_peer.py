"""Torch peers for bench/cuda_engine.sh: torchvision ResNet-50 (channels-last) and ViT-B/16 with
random weights on the GPU, eager and torch.compile, images/s from CUDA events (median of timed
batches after warm-up), compile time reported. Prints one line per row; a missing torch or GPU
prints one line and exits 0."""
import os
import statistics
import sys
import time

try:
    import torch
    import torchvision
except Exception as e:  # pragma: no cover
    print(f"torch peer skipped: {e}")
    sys.exit(0)
if not torch.cuda.is_available():
    print("torch peer skipped: no CUDA device")
    sys.exit(0)


def bench(fn, x, seconds=2.0):
    times = []
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    end = time.monotonic() + seconds
    while len(times) < 10 or time.monotonic() < end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def run(name, batch, dtype, compile_):
    torch.manual_seed(0)
    if name == "resnet50":
        m = torchvision.models.resnet50()
    else:
        m = torchvision.models.vit_b_16()
    m = m.eval().cuda().to(dtype)
    x = torch.rand(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if name == "resnet50":
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    fn = m
    ctime = 0.0
    with torch.inference_mode():
        if compile_:
            t0 = time.monotonic()
            fn = torch.compile(m)
            fn(x)
            torch.cuda.synchronize()
            ctime = (time.monotonic() - t0) * 1e3
        ms = bench(fn, x)
    print(f"torch {name:9s} {str(dtype).replace('torch.', ''):9s} {batch:5d} "
          f"{'compile' if compile_ else 'eager':7s} {batch * 1e3 / ms:9.0f} img/s  p50 {ms:.3f} ms"
          f"  compile {ctime:.0f} ms  (torch {torch.__version__})", flush=True)


rows = os.environ.get("TORCH_ROWS", "resnet50:256,vit_b_16:128,resnet50:1,vit_b_16:1").split(",")
for r in rows:
    name, b = r.split(":")
    for c in (False, True):
        if int(b) == 1 and c:
            continue
        try:
            run(name, int(b), torch.bfloat16, c)
        except Exception as e:  # one failed row never stops the others
            print(f"torch {name} {b} {'compile' if c else 'eager'} failed: {e}")
