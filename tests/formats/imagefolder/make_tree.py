"""Builds an ImageFolder tree with PIL and writes what PIL and torchvision read from it.

usage: make_tree.py TREE EXPECT
TREE gets class folders with JPEG (baseline, progressive, 4:2:0, 4:4:4, grey, a 100 kB ICC block) and PNG (RGB,
grey, palette, RGBA, 16-bit grey) files of different sizes, a nested folder, and files that are
not images. EXPECT/list.txt has one line per sample of torchvision.datasets.ImageFolder (with
pipebench's extensions .jpg/.jpeg/.png): relative path, label, dtype, channels, height, width;
EXPECT/<n>.bin holds PIL's pixels of sample n, planar C,Y,X, native byte order.
"""
import os
import sys

import numpy as np
from PIL import Image
import torchvision


def smooth(h, w, c, seed):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [np.sin(x / (5 + k + seed) + seed) * 90 + np.cos(y / (4 + seed + k)) * 60 + 120
              for k in range(c)]
    return np.stack(planes, -1).clip(0, 255).astype(np.uint8)


def main():
    tree, expect = sys.argv[1], sys.argv[2]
    for d in ("b_cat", "a_dog", "a_dog/nested", "C_upper", "c_pal"):
        os.makedirs(os.path.join(tree, d), exist_ok=True)
    os.makedirs(expect, exist_ok=True)
    j = lambda *p: os.path.join(tree, *p)
    Image.fromarray(smooth(37, 53, 3, 1)).save(j("b_cat", "base.jpg"), quality=85)
    Image.fromarray(smooth(40, 64, 3, 2)).save(j("b_cat", "prog.JPG"), quality=80,
                                                progressive=True)
    Image.fromarray(smooth(33, 47, 3, 3)).save(j("b_cat", "s420.jpeg"), quality=90, subsampling=2)
    Image.fromarray(smooth(33, 47, 3, 4)).save(j("b_cat", "s444.JPEG"), quality=95, subsampling=0)
    # 100 kB of ICC profile before the frame header: past the first 64 KiB that meta reads
    Image.fromarray(smooth(30, 34, 3, 11)).save(j("b_cat", "icc.jpg"), quality=85,
                                                icc_profile=bytes(100000))
    Image.fromarray(smooth(29, 31, 1, 5)[:, :, 0], "L").save(j("a_dog", "grey.jpg"), quality=88)
    Image.fromarray(smooth(21, 22, 3, 6)).save(j("a_dog", "rgb.png"))
    Image.fromarray(smooth(21, 22, 1, 7)[:, :, 0], "L").save(j("a_dog", "nested", "grey.png"))
    rgba = np.concatenate([smooth(18, 19, 3, 8), np.full((18, 19, 1), 100, np.uint8)], -1)
    Image.fromarray(rgba, "RGBA").save(j("C_upper", "alpha.png"))
    g16 = (smooth(12, 13, 1, 9)[:, :, 0].astype(np.uint16) * 257 + 3)
    Image.fromarray(g16.astype(np.int32), "I").convert("I;16").save(j("C_upper", "g16.png"))
    Image.fromarray(smooth(25, 26, 3, 10)).quantize(colors=16).save(j("c_pal", "pal.png"))
    with open(j("c_pal", "notes.txt"), "w") as f:
        f.write("not an image\n")
    with open(j("top.txt"), "w") as f:
        f.write("ignored\n")

    ds = torchvision.datasets.ImageFolder(tree, is_valid_file=lambda p: p.lower().endswith(
        (".jpg", ".jpeg", ".png")))
    with open(os.path.join(expect, "list.txt"), "w") as out:
        for n, (path, label) in enumerate(ds.samples):
            im = Image.open(path)
            if im.mode in ("I;16", "I"):
                a = np.asarray(im).astype("<u2")[None]
            elif im.mode in ("L", "LA"):
                a = np.asarray(im.convert("L"))[None]
            else:
                a = np.asarray(im.convert("RGB")).transpose(2, 0, 1)
            a = np.ascontiguousarray(a)
            a.tofile(os.path.join(expect, "%d.bin" % n))
            rel = os.path.relpath(path, tree)
            out.write("%s %d %s %d %d %d\n" % (rel, label, "uint16" if a.dtype == np.uint16
                                                else "uint8", a.shape[0], a.shape[1], a.shape[2]))


main()
