"""The Python binding against the C loader (driven by test_loader_python.c).

argv: dataset (23 uint8 images 1x1x1x16x12, pixel 0 = index), the C loader's batches
(augment, workers 2, shuffle, seed 7, batch 5) and their indices."""
import gc
import sys

import numpy as np
import torch

import pipebench as pb

data, dump, idx = sys.argv[1:4]

# Dataset: count, metadata, pixels.
ds = pb.Dataset(data)
assert len(ds) == 23 and ds.format == "raw"
m = ds.meta(4)
assert m["name"] == "img_00004" and m["dtype"] == "uint8" and m["shape"] == (1, 1, 1, 16, 12), m
img = ds.read(4)
assert img.shape == (1, 1, 1, 16, 12) and img.dtype == np.uint8 and img.flat[0] == 4

# The same batches as the C loader, bit for bit.
want = np.fromfile(dump, dtype=np.float32).reshape(-1, 1, 16, 12)
want_idx = np.fromfile(idx, dtype=np.int64)
loader = pb.Loader(data, batch_size=5, workers=2, shuffle=True, seed=7, transform="augment")
assert len(loader) == 5
got, got_idx = [], []
for b in loader:
    a = b.numpy()
    assert a.dtype == np.float32 and a.shape[1:] == (1, 16, 12)
    got.append(a.copy())
    got_idx.append(b.indices)
got = np.concatenate(got)
assert np.array_equal(np.concatenate(got_idx), want_idx)
assert got.tobytes() == want.tobytes(), np.abs(got - want).max()

# Workers 0 give the same pixels too.
w0 = pb.Loader(data, batch_size=5, workers=0, shuffle=True, seed=7, transform="augment")
assert np.concatenate([b.numpy().copy() for b in w0]).tobytes() == want.tobytes()

# torch shares the batch's memory; numpy views and tensors outlive the Batch object.
for dtype, tdtype in [("float32", torch.float32), ("float16", torch.float16),
                      ("bfloat16", torch.bfloat16)]:
    ld = pb.Loader(data, batch_size=4, workers=1, transform="normalize", dtype=dtype)
    b = ld.next()
    t = b.torch()
    view = b.numpy()
    assert t.dtype == tdtype and tuple(t.shape) == b.shape == (4, 1, 16, 12)
    assert t.data_ptr() == b.data_ptr == view.ctypes.data, (t.data_ptr(), b.data_ptr)
    ref = (pb.Dataset(data).read(int(b.indices[0]))[0].astype(np.float64) / 255 - 0.5) / 0.5
    del b
    ld.close()
    gc.collect()
    tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    assert np.allclose(t[0].float().numpy(), ref, atol=tol), dtype
    if dtype != "bfloat16":
        assert np.allclose(view[0].astype(np.float64), ref, atol=tol)
    view[0, 0, 0, 0] = 9  # writes through to the tensor: one buffer
    if dtype == "float32":
        assert float(t[0, 0, 0, 0]) == 9.0
    del t, view
    gc.collect()

# Errors come back as exceptions that name the file.
try:
    pb.Loader(data + ".missing")
    raise AssertionError("expected an error")
except pb.PipebenchError as e:
    assert "missing" in str(e)

st = loader.stats()
assert st["batches"] == 5 and st["samples"] == 23, st
print("binding: ok")
