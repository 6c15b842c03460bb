"""The binding's Engine: raw uint16 images through forward_native, the logits handed to torch
through DLPack without a copy. Argument: the device, cpu (default) or cuda (label gpu): on cuda
the tensor must be a CUDA tensor over the engine's own buffer, and the logits must equal the
oneDNN engine's on the same images (float32, relative error <= 1e-3)."""
import sys

import numpy as np
import torch

import pipebench

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
rng = np.random.default_rng(3)
images = rng.integers(0, 65536, size=(4, 1, 100, 100), dtype=np.uint16)


def run(dev):
    e = pipebench.Engine("embed", device=dev, dtype="float32", batch_size=4, channels=3,
                         height=64, width=64, seed=11)
    e.forward_native(images, mean=0.5, std=0.5)
    t = e.output_torch()
    return e, t


e, t = run(device)
assert tuple(t.shape) == (4, e.outputs), t.shape
assert t.dtype == torch.float32
host = e.output_numpy()
assert np.isfinite(host).all()
# the tensor is the engine's buffer, not a copy: a second export points at the same memory
# and shows the next forward's values
t2 = e.output_torch()
assert t2.data_ptr() == t.data_ptr()
np.testing.assert_array_equal(t.cpu().numpy(), host)
e.forward_native(images[::-1].copy(), mean=0.5, std=0.5)
e.synchronize()
after = e.output_numpy()
assert not np.array_equal(after, host), "the second batch gave the same logits"
np.testing.assert_array_equal(t.cpu().numpy(), after)
# per-channel normalisation: the same value for every channel is the scalar form; another mean
# changes the logits; a list of the wrong length is refused before anything runs
e.forward_native(images, mean=[0.5], std=[0.5])
e.synchronize()
np.testing.assert_allclose(e.output_numpy(), host, rtol=1e-6, atol=1e-6)
e.forward_native(images, mean=[0.3], std=[0.5])
e.synchronize()
assert not np.allclose(e.output_numpy(), host), "a per-channel mean changed nothing"
try:
    e.forward_native(images, mean=[0.5, 0.5], std=[0.5, 0.5])
    raise AssertionError("two means for one channel were accepted")
except ValueError as ex:
    assert "per channel" in str(ex), ex
if device == "cuda":
    assert t.is_cuda, t.device
    _, ref = run("cpu")
    e.forward_native(images, mean=0.5, std=0.5)
    e.synchronize()
    got = e.output_numpy()
    r = float(np.linalg.norm(got - ref.numpy()) / np.linalg.norm(ref.numpy()))
    print(f"cuda against cpu: relative error {r:.2e}")
    assert r <= 1e-3, r
else:
    assert not t.is_cuda
print(f"dlpack {device}: ok ({e.outputs} outputs, tensor on {t.device})")
