"""Loads weights exported by pipebench (one NAME.npy per state_dict tensor) into torchvision's
model (or the embed network), runs input.npy through it in eval mode and compares with
output.npy. Exit 0 when max|diff| / max|reference| <= tolerance."""
import os
import sys

import numpy as np
import torch
import torchvision


class Embed(torch.nn.Module):
    """origin.md's SimpleEmbeddingModel with pipebench's parameter names."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc = torch.nn.Linear(64, 128)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    folder, model_name, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.set_num_threads(int(os.environ.get("PIPEBENCH_THREADS", "2")))
    x = torch.from_numpy(np.load(os.path.join(folder, "input.npy")))
    want = np.load(os.path.join(folder, "output.npy"))
    if model_name == "embed":
        model = Embed(x.shape[1])
    else:
        model = getattr(torchvision.models, model_name)()
    state = {}
    for f in os.listdir(folder):
        if f.endswith(".npy") and f not in ("input.npy", "output.npy"):
            state[f[:-4]] = torch.from_numpy(np.load(os.path.join(folder, f)))
    res = model.load_state_dict(state, strict=False)
    missing = [k for k in res.missing_keys if not k.endswith("num_batches_tracked")]
    if missing or res.unexpected_keys:
        print("missing:", missing, "unexpected:", res.unexpected_keys)
        return 1
    model.eval()
    with torch.no_grad():
        got = model(x).numpy()
    if got.shape != want.shape:
        print("shape", got.shape, "vs", want.shape)
        return 1
    err = float(np.abs(got - want).max() / max(np.abs(got).max(), 1e-30))
    print(f"{model_name}: {len(state)} tensors, max|diff|/max|torch| = {err:.3g} (tolerance {tol})")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
