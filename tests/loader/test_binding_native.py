"""The Python binding's native batches: numpy views in the images' own pixel type (uint16,
uint8) equal to the written pixels, the struct layout after the appended fields, torch through
DLPack where torch has the type, and the refusal of transforms. argv: a scratch folder."""
import gc
import os
import sys

import numpy as np

import pipebench as pb

tmp = sys.argv[1]
rng = np.random.default_rng(5)
u16 = [rng.integers(0, 65536, size=(2, 1, 9, 8), dtype=np.uint16) for _ in range(11)]
u8 = [rng.integers(0, 256, size=(1, 6, 7), dtype=np.uint8) for _ in range(11)]
p16, p8 = os.path.join(tmp, "u16.raw"), os.path.join(tmp, "u8.raw")
pb.write(p16, u16)
pb.write(p8, u8)

for cache in ("none", "preload", "shared"):
    for workers in (0, 2):
        ld = pb.Loader(p16, batch_size=4, workers=workers, shuffle=True, seed=9, cache=cache,
                       dtype="native")
        seen = []
        for b in ld:
            a = b.numpy()
            assert b.native and b.dtype == "uint16", (b.native, b.dtype)
            assert a.dtype == np.uint16 and a.shape == (len(b.indices), 2, 9, 8), (a.dtype, a.shape)
            for j, i in enumerate(b.indices):
                assert np.array_equal(a[j], u16[i][:, 0]), (cache, workers, i)
            seen.extend(int(i) for i in b.indices)
        assert sorted(seen) == list(range(11)), seen
        ld.close()

# The fields after the appended ones still line up: a float32 batch of the same data names
# its pixel type, and its times and shape read as before.
ld = pb.Loader(p16, batch_size=3, dtype="float32")
b = ld.next()
assert b.dtype == "float32" and not b.native and b._get().native_dtype == 1  # PB_UINT16
assert b.shape == (3, 2, 9, 8) and b.times["bytes_decoded"] == 3 * 2 * 9 * 8 * 2, b.times
assert np.array_equal(b.numpy()[1], u16[1][:, 0].astype(np.float32))
del b
ld.close()

# torch: uint8 comes through DLPack without a copy; uint16 where torch has that type.
import torch  # noqa: E402

ld = pb.Loader(p8, batch_size=5, dtype="native")
b = ld.next()
t = b.torch()
assert t.dtype == torch.uint8 and tuple(t.shape) == (5, 1, 6, 7)
assert t.data_ptr() == b.data_ptr
assert np.array_equal(t[2, 0].numpy(), u8[2][0])
del b
ld.close()
gc.collect()
assert np.array_equal(t[4, 0].numpy(), u8[4][0])  # the tensor keeps the batch alive
del t
if hasattr(torch, "uint16"):
    ld = pb.Loader(p16, batch_size=2, dtype="native")
    t = ld.next().torch()
    assert t.dtype == torch.uint16 and np.array_equal(t[1].numpy(), u16[1][:, 0])
    ld.close()

# Transforms are refused with native output.
for tr in ("normalize", "augment"):
    try:
        pb.Loader(p16, dtype="native", transform=tr)
        raise AssertionError("expected an error")
    except pb.PipebenchError as e:
        assert "transform must be none" in str(e), str(e)
print("binding native: ok")
