"""pipebench.torch.Loader on the CPU (CI has no GPU; the same checks run on a GPU under the gpu
label with argv[2] == "cuda"): batches equal the native loader's after per-channel
normalisation, labels are torchvision ImageFolder's, ranks shard every epoch's order into
disjoint equal parts as DistributedSampler does, set_epoch picks the order, and each iteration
without set_epoch starts the next epoch.
argv: a scratch folder [device]."""
import os
import sys

import numpy as np
import torch

import pipebench as pb
from pipebench.torch import IMAGENET_MEAN, IMAGENET_STD, Loader

tmp = sys.argv[1]
os.makedirs(tmp, exist_ok=True)
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
root = os.path.join(tmp, "torch_tree")
rng = np.random.default_rng(5)
images, names = [], []
for k in range(24):
    h, w = 30 + 3 * k, 50 - k
    img = rng.integers(0, 256, (3, 1, h, w), dtype=np.uint8)
    images.append(img)
    names.append("%s/img_%02d" % (["b", "a", "c"][k % 3], k))
pb.write(root, images, format="imagefolder", names=names)
want_label = {}
for k, n in enumerate(names):
    want_label[n.split("/")[1]] = sorted(["a", "b", "c"]).index(n.split("/")[0])

# 1. values: the evaluation crop (deterministic) against the native loader's float32 batch
ld = Loader(root, batch_size=5, device=device, transform="center_crop_resize", crop=16,
            resize=20, shuffle=False, drop_last=False, workers=2)
ref = pb.Loader(root, batch_size=5, workers=0, transform="center_crop_resize", crop=16,
                resize=20, mean=0.0, std=1.0)
mean = np.array(IMAGENET_MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
std = np.array(IMAGENET_STD, dtype=np.float32).reshape(1, 3, 1, 1)
n = 0
for (x, y), b in zip(ld, ref):
    assert x.device.type == torch.device(device).type, x.device
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.is_contiguous(memory_format=torch.channels_last)
    want = (b.numpy() - mean) / std
    got = x.cpu().numpy()
    # float16 on the way holds x/255 to about 1e-3 of a level
    err = np.abs(got - want).max()
    assert err < 2e-3 / 0.224, "max error %g" % err
    assert list(y.cpu().numpy()) == list(b.labels), (y, b.labels)
    n += x.shape[0]
assert n == 24, n
assert len(ld) == 5

# 2. sharding: two ranks, drop_last, disjoint halves of each epoch that together cover it
def epoch_labels(rank, world, epoch=None, seed=9):
    ld = Loader(root, batch_size=4, device=device, transform="random_resized_crop", crop=8,
                rank=rank, world_size=world, seed=seed, workers=1)
    if epoch is not None:
        ld.set_epoch(epoch)
    out = [x.cpu().numpy().copy() for x, _ in ld]
    return len(ld), out

for epoch in (0, 3):
    idx = []
    for rank in (0, 1):
        ld = pb.Loader(root, batch_size=4, shuffle=True, seed=9, rank=rank, world_size=2,
                       drop_last=True, transform="random_resized_crop", crop=8)
        ld.reset(epoch)
        idx.append(np.concatenate([b.indices for b in iter(ld.next, None)]))
    assert len(idx[0]) == len(idx[1]) == 12, [len(i) for i in idx]
    assert not set(idx[0]) & set(idx[1])
n0, e0 = epoch_labels(0, 2)
n1, e1 = epoch_labels(1, 2)
assert n0 == n1 == 3, (n0, n1)
assert sum(x.shape[0] for x in e0) == 12

# 3. set_epoch picks the order; iterating again without it moves on to the next epoch
ld = Loader(root, batch_size=24, device=device, transform="random_resized_crop", crop=8,
            seed=4, workers=1)
first = [y.cpu().numpy().copy() for _, y in ld]
second = [y.cpu().numpy().copy() for _, y in ld]
ld.set_epoch(0)
again = [y.cpu().numpy().copy() for _, y in ld]
assert np.array_equal(first[0], again[0])
assert sorted(first[0]) == sorted(second[0])
assert not np.array_equal(first[0], second[0]) or len(set(first[0])) == 1

# 4. bad arguments are clear
for kw, want in (({"host_dtype": "int8"}, "host_dtype"), ({"mean": (0.5, 0.5), "std": (1.0,)}, "same length")):
    try:
        Loader(root, device=device, **kw)
    except ValueError as e:
        assert want in str(e), e
    else:
        raise AssertionError("accepted %r" % kw)
if device == "cpu" and not torch.cuda.is_available():
    try:
        Loader(root, device="cuda")
    except RuntimeError as e:
        assert "no usable GPU" in str(e), e
    else:
        raise AssertionError("device=cuda accepted without a GPU")
print("ok: pipebench.torch on", device)
