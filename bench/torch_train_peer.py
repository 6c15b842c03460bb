"""Torch peer for bench/cuda_train.sh: a torchvision training step (bfloat16 autocast, SGD with
momentum 0.9 and weight decay 5e-5, cross-entropy, channels-last for ResNet-50) on
device-resident random input, eager and torch.compile; images/s over a synchronised window of
back-to-back steps (as cuda_train_bench), the per-step median from CUDA events, and the peak
device memory (torch.cuda.max_memory_allocated). One line per row.
usage: torch_train_peer.py MODEL BATCH [SECONDS]"""
import statistics
import sys
import time

import torch
import torchvision


def make_step(name, batch, compile_):
    """The training step every row times (bench/torch_train_profile.py profiles the same one):
    the model, its device-resident batch and the optimizer, as one callable."""
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    if name == "resnet50":
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    m.train()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return torch.compile(step) if compile_ else step


def run(name, batch, compile_, seconds):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    fn = make_step(name, batch, compile_)
    t0 = time.monotonic()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    warm = time.monotonic() - t0
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    torch.cuda.synchronize()
    steps, t0 = 0, time.monotonic()
    while steps < 20 or time.monotonic() - t0 < seconds:
        for _ in range(10):
            fn()
        steps += 10
        if steps % 50 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"torch     train {name:9s} bfloat16  b{batch:<4d} {steps * batch / dt:8.0f} img/s  "
          f"step p50 {statistics.median(times):.3f} ms (device, n=30)  {steps} steps  memory "
          f"{peak:.2f} GiB (max allocated)  {'compile' if compile_ else 'eager'} (warm-up "
          f"{warm:.0f} s; torch {torch.__version__}, {torch.cuda.get_device_name()})", flush=True)
    del fn


if __name__ == "__main__":
    name, batch = sys.argv[1], int(sys.argv[2])
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    for c in (False, True):
        try:
            run(name, batch, c, secs)
        except Exception as e:  # one failed row never stops the other
            print(f"torch train {name} {batch} {'compile' if c else 'eager'} failed: {e}")
