#!/usr/bin/env python3
"""The Python way of loading the same images, timed by pipebench's rules.

pipebench runs this as its peer in track 2: a torch.utils.data.Dataset over the same files
(tifffile for OME-TIFF, zarr-python for OME-Zarr, torchvision's ImageFolder with PIL and again
with torchvision.io.decode_jpeg for image folders, or a numpy array decoded once into RAM for
the "preload" cache mode) under torch.utils.data.DataLoader, with the same batch sizes, worker
counts and normalisation as pipebench's loader.

Usage: pipebench_peer.py CONFIG.json RESULT.json
CONFIG: {"format": "tiff"|"ome-zarr"|"imagefolder", "path": DIR, "cache": "none"|"preload",
         "batch_sizes": [...], "workers": [...], "batches": N, "repeats": R,
         "mean": 0.5, "std": 0.5}
RESULT: {"rows": [{"batch_size", "workers", "repeat", "first_batch_s", "batch_s": [...],
                   "samples": n, "loader": name}], "versions": {...}}
Each batch is timed from asking the DataLoader's iterator for it to holding it; the first batch
(worker start-up) is reported on its own.
"""
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def list_images(path, suffixes):
    names = sorted(n for n in os.listdir(path) if n.endswith(suffixes))
    return [os.path.join(path, n) for n in names]


def scale_of(dtype):
    return float(np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else 1.0


class TiffImages(Dataset):
    def __init__(self, path, mean, std):
        import tifffile
        self.tifffile = tifffile
        self.files = list_images(path, (".tif", ".tiff"))
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        a = self.tifffile.imread(self.files[i])
        return to_tensor(a, self.mean, self.std)


class ZarrImages(Dataset):
    def __init__(self, path, mean, std):
        import zarr
        self.zarr = zarr
        self.groups = list_images(path, (".zarr",))
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.groups)

    def __getitem__(self, i):
        a = self.zarr.open_array(os.path.join(self.groups[i], "0"), mode="r")[...]
        return to_tensor(a, self.mean, self.std)


class FolderImages(Dataset):
    """torchvision's ImageFolder with ToTensor and Normalize (pipebench's "normalize"): PIL
    decodes, or torchvision.io.decode_jpeg where decode_jpeg is set and torchvision has it."""

    def __init__(self, path, mean, std, decode_jpeg=False):
        import torchvision
        import torchvision.transforms as T
        self.inner = torchvision.datasets.ImageFolder(path)
        self.decode_jpeg = decode_jpeg
        self.norm = T.Normalize(mean, std)
        self.to_tensor = T.ToTensor()

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        path, _ = self.inner.samples[i]
        if self.decode_jpeg:
            import torchvision.io as io
            data = io.read_file(path)
            jpeg = path.lower().endswith((".jpg", ".jpeg"))
            t = (io.decode_jpeg(data) if jpeg else io.decode_image(data)).float() / 255.0
        else:
            t = self.to_tensor(self.inner.loader(path))
        return self.norm(t)


def has_decode_jpeg():
    try:
        import torchvision.io as io
        return hasattr(io, "decode_jpeg")
    except ImportError:
        return False


class PreloadedImages(Dataset):
    """Every image decoded once into one numpy array: the origin benchmark's optimisation."""

    def __init__(self, inner):
        self.cache = np.stack([inner[i].numpy() for i in range(len(inner))])

    def __len__(self):
        return len(self.cache)

    def __getitem__(self, i):
        return torch.from_numpy(self.cache[i])


def to_tensor(a, mean, std):
    a = np.asarray(a)
    scale = scale_of(a.dtype)
    # Same layout as pipebench's loader: C,H,W (or C,Z,H,W) from the image's t,c,z,y,x.
    a = a.reshape(a.shape[-2:]) if a.ndim == 2 else a
    t = torch.from_numpy(a.astype(np.float32))
    if scale != 1.0:
        t = t / scale
    t = (t - mean) / std
    while t.ndim > 3 and t.shape[0] == 1:
        t = t[0]
    if t.ndim == 2:
        t = t.unsqueeze(0)
    return t


def main():
    cfg = json.load(open(sys.argv[1]))
    mean, std = cfg.get("mean", 0.5), cfg.get("std", 0.5)
    torch.set_num_threads(1)
    if cfg["format"] == "tiff":
        ds = TiffImages(cfg["path"], mean, std)
    elif cfg["format"] == "ome-zarr":
        ds = ZarrImages(cfg["path"], mean, std)
    elif cfg["format"] == "imagefolder":
        try:
            import torchvision  # noqa: F401
        except ImportError:
            print("peer: torchvision is not installed for %s: no image-folder peer rows"
                  % sys.executable, file=sys.stderr)
            write_result(cfg, [], 0.0)
            return
        ds = FolderImages(cfg["path"], mean, std)
    else:
        raise SystemExit("peer: no Python reader for format %r" % cfg["format"])
    preload_s = 0.0
    if cfg.get("cache", "none") == "preload":
        t0 = time.perf_counter_ns()
        ds = PreloadedImages(ds)
        preload_s = (time.perf_counter_ns() - t0) / 1e9
    # Image folders: PIL, and torchvision.io.decode_jpeg where it exists (not with preload).
    variants = [("torch-dataloader", ds)]
    if cfg["format"] == "imagefolder" and cfg.get("cache", "none") == "none" and has_decode_jpeg():
        variants.append(("torch-dataloader+decode_jpeg", FolderImages(cfg["path"], mean, std, True)))
    rows = []
    for loader_name, ds in variants:
        rows += measure(cfg, ds, loader_name)
    write_result(cfg, rows, preload_s)


def measure(cfg, ds, loader_name):
    rows = []
    for bs in cfg["batch_sizes"]:
        for w in cfg["workers"]:
            # Same window rule as pipebench: at least 8 prefetch queues long, across epochs.
            prefetch = 2
            want = max(cfg["batches"], 8 * prefetch * max(w, 1))
            for r in range(cfg["repeats"]):
                # persistent_workers keeps worker processes across epochs, as pipebench keeps
                # its threads; prefetch_factor 2 matches pipebench's prefetch depth.
                extra = {"persistent_workers": True, "prefetch_factor": prefetch} if w > 0 else {}
                dl = DataLoader(ds, batch_size=bs, num_workers=w, shuffle=False,
                                pin_memory=False, **extra)
                t0 = time.perf_counter_ns()
                it = iter(dl)
                next(it)
                first = (time.perf_counter_ns() - t0) / 1e9
                lat, samples = [], 0
                window = cfg.get("window_ms", 0) / 1e3
                w0 = time.perf_counter()
                while len(lat) < want or time.perf_counter() - w0 < window:
                    a = time.perf_counter_ns()
                    try:
                        b = next(it)
                    except StopIteration:
                        it = iter(dl)
                        b = next(it)
                    lat.append((time.perf_counter_ns() - a) / 1e9)
                    samples += b.shape[0]
                del it, dl
                rows.append({"batch_size": bs, "workers": w, "repeat": r, "first_batch_s": first,
                             "batch_s": lat, "samples": samples, "loader": loader_name})
    return rows


def write_result(cfg, rows, preload_s):
    out = {"rows": rows, "preload_s": preload_s,
           "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                        "numpy": np.__version__}}
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
