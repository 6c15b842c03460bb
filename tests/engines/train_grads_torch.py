"""Checks a training step of pipebench's CUDA engine against torch in float64. The folder holds
the weights before the step (NAME.npy, torch's state_dict names, flattened), the engine's
gradients (NAME.grad.npy), its running statistics after the step (NAME.after.npy), input.npy,
labels.npy and loss.npy. torch runs the same model in train mode (batch statistics, running
averages with momentum 0.1), cross-entropy over the batch, backward. Prints each parameter's
relative L2 error and the largest; exit 0 when it is <= tolerance.
usage: train_grads_torch.py FOLDER MODEL TOLERANCE CHANNELS"""
import os
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import Embed  # noqa: E402


def main():
    folder, model_name, tol, c = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(int(os.environ.get("PB_THREADS", "4")))
    model = Embed(c) if model_name == "embed" else getattr(torchvision.models, model_name)()
    model = model.double()
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
    model.train()
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, labels)
    loss.backward()
    ours = float(np.load(os.path.join(folder, "loss.npy"))[0])
    worst, worst_name, rows = 0.0, "", []
    for name, p in model.named_parameters():
        g = np.load(os.path.join(folder, name + ".grad.npy")).astype(np.float64)
        ref = p.grad.detach().numpy().reshape(-1)
        err = float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-30))
        rows.append((name, err))
        if err > worst:
            worst, worst_name = err, name
    stat_worst = 0.0
    for name, b in model.named_buffers():
        if not (name.endswith("running_mean") or name.endswith("running_var")):
            continue
        a = np.load(os.path.join(folder, name + ".after.npy")).astype(np.float64)
        ref = b.detach().numpy().reshape(-1)
        stat_worst = max(stat_worst, float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30)))
    rows.sort(key=lambda r: -r[1])
    for name, err in rows[:5]:
        print(f"  {name}: relative error {err:.3g}")
    lerr = abs(ours - float(loss)) / max(abs(float(loss)), 1e-30)
    print(f"{model_name}: {len(rows)} gradients vs torch float64: max relative error {worst:.3g} "
          f"({worst_name}), loss {ours:.6f} vs {float(loss):.6f} ({lerr:.2g}), running "
          f"statistics {stat_worst:.3g} (tolerance {tol})")
    ok = worst <= tol and lerr <= tol and stat_worst <= tol
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
