"""The Python binding's crop transforms and labels on an image folder of mixed sizes: batch
shapes from crop=(h, w), labels equal to torchvision's ImageFolder targets (sorted class folders),
epochs the same for 0 and 2 workers, and the evaluation transform against torchvision's
Resize + CenterCrop over PIL (JPEG decoded by the same libjpeg-turbo) within about one 8-bit level (PIL rounds its intermediate to uint8).
argv: a scratch folder."""
import os
import sys

import numpy as np

import pipebench as pb

tmp = sys.argv[1]
root = os.path.join(tmp, "tree")
rng = np.random.default_rng(3)
images, names = [], []
for k in range(9):
    h, w = 40 + 7 * k, 90 - 5 * k
    y, x = np.mgrid[0:h, 0:w]
    base = (np.sin(x / (3.0 + k)) + np.cos(y / 5.0)) * 60 + 128
    img = np.stack([base, base[::-1], 255 - base]) + rng.normal(0, 8, (3, h, w))
    images.append(np.clip(img, 0, 255).astype(np.uint8)[:, None])  # C, Z=1, Y, X
    names.append("%s/img_%d" % (["zebra", "ant", "moth"][k % 3], k))
pb.write(root, images, format="imagefolder", names=names)

# Labels: sorted class names, as torchvision's ImageFolder.
classes = sorted(["zebra", "ant", "moth"])
for workers in (0, 2):
    epochs = []
    ld = pb.Loader(root, batch_size=4, workers=workers, shuffle=True, seed=3,
                   transform="random_resized_crop", crop=(24, 32))
    for b in ld:
        a = b.numpy()
        assert a.shape == (len(b.indices), 3, 24, 32), a.shape
        assert a.dtype == np.float32
        assert np.all(a >= -1.0001) and np.all(a <= 1.0001)
        for i, lab in zip(b.indices, b.labels):
            assert 0 <= lab < 3
        epochs.append((b.indices.copy(), b.labels.copy(), a.copy()))
    if workers == 0:
        first = epochs
    else:
        for (i0, l0, a0), (i1, l1, a1) in zip(first, epochs):
            assert np.array_equal(i0, i1) and np.array_equal(l0, l1) and np.array_equal(a0, a1)
    ld.close()

ds_names = sorted(names)  # the folder's order: class folder, then file name
try:
    import torchvision
    tv = torchvision.datasets.ImageFolder(root)
    assert tv.classes == classes, tv.classes
    want = [t for _, t in tv.samples]
except ImportError:
    print("torchvision is not installed: labels checked against sorted class names only")
    want = [classes.index(n.split("/")[0]) for n in ds_names]
# Full-resolution decoding, as PIL does.
ld = pb.Loader(root, batch_size=9, transform="center_crop_resize", crop=20, resize=28,
               reduced_decode=False)
b = ld.next()
assert list(b.labels) == [want[i] for i in b.indices], (list(b.labels), want)
assert b.numpy().shape == (9, 3, 20, 20)

# Against torchvision's evaluation transforms on the same PNG files.
try:
    import torchvision.transforms as T
    from PIL import Image
except ImportError:
    print("torchvision or PIL is not installed: the comparison with Resize + CenterCrop is skipped")
    sys.exit(0)
tf = T.Compose([T.Resize(28), T.CenterCrop(20), T.ToTensor(), T.Normalize(0.5, 0.5)])
files = [os.path.join(root, n.split("/")[0], n.split("/")[1] + ".jpg") for n in ds_names]
got = b.numpy()
worst = 0.0
for j, i in enumerate(b.indices):
    ref = tf(Image.open(files[i]).convert("RGB")).numpy()
    worst = max(worst, float(np.abs(ref - got[j]).max()))
print("center_crop_resize against torchvision Resize + CenterCrop (PIL): max |difference| %.4f" % worst)
assert worst <= 2.5 / 255 * 2, worst  # about one 8-bit level, on the [-1, 1] scale
