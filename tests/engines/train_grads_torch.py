"""Checks a training step of pipebench's CUDA engine against torch in float64. The folder holds
the weights before the step (NAME.npy, torch's state_dict names, flattened), the engine's
gradients (NAME.grad.npy), its running statistics after the step (NAME.after.npy), input.npy,
labels.npy and loss.npy. torch runs the same model in train mode (batch statistics, running
averages with momentum 0.1), cross-entropy over the batch, backward. Prints each parameter's
relative L2 error and the largest. The same step in torch at the engine's precision (float32 on the
CPU, or bfloat16 autocast on the GPU, DTYPE) against the same float64 reference says what that
precision itself costs: the test passes when the engine's largest per-parameter error and its
error over all gradients together are each within the tolerance or within twice torch's own.
usage: train_grads_torch.py FOLDER MODEL TOLERANCE CHANNELS DTYPE"""
import os
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import Embed  # noqa: E402


def build(model_name, c):
    return Embed(c) if model_name == "embed" else getattr(torchvision.models, model_name)()


def torch_grads(model_name, c, load, x, labels, dtype):
    """The same step in torch at dtype: {name: gradient as float64 numpy}."""
    m = build(model_name, c)
    m.load_state_dict({k: v.float() for k, v in load.items()}, strict=False)
    m.train()
    if dtype == "bfloat16" and torch.cuda.is_available():
        m = m.cuda().to(memory_format=torch.channels_last)
        xx = x.float().cuda().contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(xx), labels.cuda())
    else:
        loss = torch.nn.functional.cross_entropy(m(x.float()), labels)
    loss.backward()
    return {n: p.grad.detach().double().cpu().numpy().reshape(-1) for n, p in m.named_parameters()}


def main():
    folder, model_name, tol, c = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    dtype = sys.argv[5] if len(sys.argv) > 5 else "float32"
    torch.set_num_threads(int(os.environ.get("PIPEBENCH_THREADS", "4")))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = build(model_name, c).double()
    state = model.state_dict()
    load = {}
    for k, v in state.items():
        f = os.path.join(folder, k + ".npy")
        if os.path.exists(f):
            load[k] = torch.from_numpy(np.load(f).astype(np.float64)).reshape(v.shape)
    res = model.load_state_dict(load, strict=False)
    missing = [k for k in res.missing_keys if not k.endswith("num_batches_tracked")]
    if missing:
        print("missing:", missing)
        return 1
    labels = torch.from_numpy(np.load(os.path.join(folder, "labels.npy")).astype(np.int64))
    n = labels.shape[0]
    x = torch.from_numpy(np.load(os.path.join(folder, "input.npy")).astype(np.float64))
    side = int(round((x.numel() / (n * c)) ** 0.5))
    x = x.reshape(n, c, side, side)
    peer = torch_grads(model_name, c, load, x, labels, dtype)
    model.train()
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, labels)
    loss.backward()
    ours = float(np.load(os.path.join(folder, "loss.npy"))[0])
    rows, num, pnum, den = [], 0.0, 0.0, 0.0
    for name, p in model.named_parameters():
        g = np.load(os.path.join(folder, name + ".grad.npy")).astype(np.float64)
        ref = p.grad.detach().numpy().reshape(-1)
        r2 = max(float(np.sum(ref * ref)), 1e-300)
        e, pe = float(np.sum((g - ref) ** 2)), float(np.sum((peer[name] - ref) ** 2))
        num, pnum, den = num + e, pnum + pe, den + r2
        rows.append((name, (e / r2) ** 0.5, (pe / r2) ** 0.5))
    stat_worst = 0.0
    for name, b in model.named_buffers():
        if not (name.endswith("running_mean") or name.endswith("running_var")):
            continue
        a = np.load(os.path.join(folder, name + ".after.npy")).astype(np.float64)
        ref = b.detach().numpy().reshape(-1)
        stat_worst = max(stat_worst, float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30)))
    rows.sort(key=lambda r: -r[1])
    for name, err, perr in rows[:5]:
        print(f"  {name}: relative error {err:.3g} (torch {dtype}: {perr:.3g})")
    worst, worst_name = rows[0][1], rows[0][0]
    peer_worst = max(r[2] for r in rows)
    glob, pglob = (num / den) ** 0.5, (pnum / den) ** 0.5
    lerr = abs(ours - loss.item()) / max(abs(loss.item()), 1e-30)
    print(f"{model_name} {dtype}: {len(rows)} gradients vs torch float64: max relative error "
          f"{worst:.3g} ({worst_name}; torch {dtype} itself: {peer_worst:.3g}), all gradients "
          f"together {glob:.3g} (torch {dtype}: {pglob:.3g}), loss {ours:.6f} vs {loss.item():.6f} "
          f"({lerr:.2g}), running statistics {stat_worst:.3g} (tolerance {tol})")
    ok = (worst <= max(tol, 2 * peer_worst) and glob <= max(tol, 2 * pglob) and lerr <= tol
          and stat_worst <= tol)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
