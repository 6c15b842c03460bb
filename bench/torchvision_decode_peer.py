#!/usr/bin/env python3
"""torchvision's GPU JPEG pipeline over an image folder: the peer of Track 3's --decode gpu.

Batches of JPEG files are decoded on the GPU with torchvision.io.decode_jpeg(list, device="cuda")
(nvJPEG, batched), then taken to the evaluation crop as torchvision does it: resize of the
shorter side to 256 with antialiasing, centre crop 224, float and ImageNet's normalisation. The
images' bytes are read into memory first, so the peer does no file I/O in its timed window
(pipebench's Track 3 reads the files in every step); images of one size are resized together,
in one call per size, which is the fastest way torchvision offers. Each mode's window opens and
closes on a synchronised device.

usage: torchvision_decode_peer.py TREE [--batch 256] [--batches 20] [--warmup 3] [--json OUT]
prints one line per mode: "decode" (decode only) and "decode+crop" (decode, resize, crop,
normalise), in images/s.
"""
import argparse
import json
import os
import sys
import time


def jpeg_files(tree):
    out = []
    for root, _, names in os.walk(tree):
        out += [os.path.join(root, n) for n in names if n.lower().endswith((".jpg", ".jpeg"))]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import torch
        import torchvision
        import torchvision.transforms.v2.functional as F
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
    except ImportError as e:
        print(f"torchvision_decode_peer: {e}", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torchvision_decode_peer: no CUDA device", file=sys.stderr)
        return 77
    paths = jpeg_files(a.tree)
    need = a.batch * (a.batches + a.warmup)
    if len(paths) < a.batch:
        print(f"torchvision_decode_peer: {a.tree}: {len(paths)} JPEGs, fewer than batch {a.batch}",
              file=sys.stderr)
        return 2
    data = [read_file(paths[i % len(paths)]) for i in range(need)]
    dev = torch.device("cuda")
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)

    def crop(imgs):
        by_size = {}
        for k, im in enumerate(imgs):
            by_size.setdefault(tuple(im.shape), []).append(k)
        out = torch.empty((len(imgs), 3, 224, 224), dtype=torch.uint8, device=dev)
        for ks in by_size.values():
            group = torch.stack([imgs[k] for k in ks])
            group = F.center_crop(F.resize(group, [256], antialias=True), [224, 224])
            out[ks] = group
        return (out.float() / 255.0 - mean) / std

    def step(b, full):
        imgs = decode_jpeg(data[b * a.batch:(b + 1) * a.batch], device=dev, mode=ImageReadMode.RGB)
        return crop(imgs) if full else imgs

    rows = []
    for name, full in (("decode", False), ("decode+crop", True)):
        for b in range(a.warmup):
            step(b, full)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in range(a.warmup, a.warmup + a.batches):
            step(b, full)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        ips = a.batch * a.batches / dt
        rows.append({"mode": name, "images_per_s": ips, "seconds": dt, "batch": a.batch,
                     "batches": a.batches})
        print(f"torchvision {torchvision.__version__} {name:<12s} batch {a.batch}: "
              f"{ips:9.1f} images/s ({a.batches} batches, {dt:.3f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "device": torch.cuda.get_device_name(0),
                       "torch": torch.__version__, "torchvision": torchvision.__version__}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
