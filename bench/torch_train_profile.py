"""Where a torch training step spends its device time, by kind of kernel: the counterpart of
PIPEBENCH_CUDA_PROFILE for the step bench/torch_train_peer.py times (bfloat16 autocast, SGD with
momentum, channels-last, device-resident input; torch_train_peer.make_step builds it).
torch.profiler's CUDA kernel times over a few steps after warm-up, per step, summed into
convolution, matrix product, generated (Triton), optimizer and other kernels, then the largest
kernels by name.
usage: torch_train_profile.py MODEL BATCH [eager|compile]"""
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from torch_train_peer import make_step  # the same step, from beside this file


def kind(name):
    n = name.lower()
    if n.startswith("triton"):
        return "generated (triton)"
    if any(s in n for s in ("conv", "dgrad", "wgrad", "fprop", "implicit", "xmma", "cudnn")):
        return "convolution (cudnn)"
    if "gemm" in n or "cublas" in n or "cutlass" in n:
        return "matrix product"
    if "foreach" in n or "multi_tensor" in n or "sgd" in n:
        return "optimizer"
    if "batch_norm" in n or "bn_" in n:
        return "batch norm (aten)"
    return "other"


def main():
    name, batch = sys.argv[1], int(sys.argv[2])
    compile_ = len(sys.argv) > 3 and sys.argv[3] == "compile"
    fn = make_step(name, batch, compile_)
    for _ in range(6):
        fn()
    torch.cuda.synchronize()
    steps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    by_kind, by_name = collections.Counter(), collections.Counter()
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
        by_kind[kind(ev.name)] += us
        by_name[ev.name[:90]] += us
    total = sum(by_kind.values())
    label = f"torch {'compile' if compile_ else 'eager'} {name} b{batch}"
    for k, us in by_kind.most_common():
        print(f"{label} {k:22s} {us / steps / 1000:8.3f} ms {100 * us / total:5.1f}%")
    print(f"{label} {'TOTAL':22s} {total / steps / 1000:8.3f} ms (kernel time per step)")
    for k, us in by_name.most_common(25):
        print(f"{label}   {us / steps / 1000:7.3f} ms  {k}")


if __name__ == "__main__":
    main()
