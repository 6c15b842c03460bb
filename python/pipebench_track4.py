#!/usr/bin/env python3
"""Track 4's Python half: the hand-off of pipebench's batches to torch, next to the peer path.

For each format, per sample:
  next_s       pipebench's loader (batch 1, normalize) producing the sample, called from Python
  dlpack_s     Batch.torch(): the same memory as a torch tensor through DLPack (no copy)
  numpy_s      the same image's native pixels as a numpy array (pipebench Dataset.read)
  from_numpy_s the peer's conversion: torch.from_numpy(a).float()

Usage: pipebench_track4.py CONFIG.json RESULT.json (written by `pipebench run`).
"""
import json
import os
import sys
import time

cfg = json.load(open(sys.argv[1]))
if cfg.get("library"):
    os.environ["PIPEBENCH_LIB"] = cfg["library"]
if "oa_cache_mb" in cfg:  # the block budget of the run's own readers, before the library loads
    os.environ["PB_OA_CACHE_MB"] = str(int(cfg["oa_cache_mb"]))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pipebench  # noqa: E402

torch.set_num_threads(1)
now = time.perf_counter_ns
rows = []
for fmt, path in cfg["formats"].items():
    for r in range(cfg["repeats"]):
        # images of different sizes: the run's crop (center_crop_resize), as its C side reads them
        crop = cfg.get("crops", {}).get(fmt, 0)
        extra = {"transform": "center_crop_resize", "crop": crop, "resize": cfg["crop_resize"]} \
            if crop else {"transform": "normalize"}
        loader = pipebench.Loader(path, batch_size=1, workers=0, shuffle=True,
                                  seed=cfg["seed"] + r, format=fmt, **extra)
        ds = pipebench.Dataset(path, format=fmt)
        loader.reset(r)
        next_s, dlpack_s, numpy_s, conv_s = [], [], [], []
        total = cfg["warmup"] + cfg["samples"]
        k = 0
        while k < total:
            t0 = now()
            b = loader.next()
            t1 = now()
            if b is None:
                loader.reset(r + 1000 + k)
                continue
            t = b.torch()
            t2 = now()
            i = int(b.indices[0])
            a = ds.read(i)
            t3 = now()
            # torch 1.13 has no uint16 tensors: the peer widens such pixels first.
            peer = torch.from_numpy(a if a.dtype != np.uint16 else a.astype(np.int32)).float()
            t4 = now()
            # Both paths must hold the same image (the peer path still lacks normalisation);
            # under a crop the peer converts the whole image the crop comes from.
            assert crop or peer.numel() == t.numel(), (peer.shape, t.shape)
            if k >= cfg["warmup"]:
                next_s.append((t1 - t0) / 1e9)
                dlpack_s.append((t2 - t1) / 1e9)
                numpy_s.append((t3 - t2) / 1e9)
                conv_s.append((t4 - t3) / 1e9)
            del t, peer, a
            b.release()
            k += 1
        loader.close()
        ds.close()
        rows.append({"format": fmt, "repeat": r, "next_s": next_s, "dlpack_s": dlpack_s,
                     "numpy_s": numpy_s, "from_numpy_s": conv_s})

out = {"rows": rows, "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                                  "numpy": np.__version__}}
tmp = sys.argv[2] + ".tmp"
with open(tmp, "w") as f:
    json.dump(out, f)
os.replace(tmp, sys.argv[2])
