#!/usr/bin/env python3
"""The same random single-image reads through tifffile and zarr-python, for bench/formats.sh.
usage: formats_vs_peers.py DATASET_DIR reads -> one JSON object per peer on stdout"""
import json
import os
import random
import sys
import time


def run(name, paths, read, reads):
    for p in paths:  # warm-up pass: the page cache holds every file, as for pipebench
        read(p)
    order = list(range(len(paths)))
    random.Random(42).shuffle(order)
    lat = []
    for k in range(reads):
        t0 = time.perf_counter_ns()
        read(paths[order[k % len(paths)]])
        lat.append((time.perf_counter_ns() - t0) / 1e9)
    s = sorted(lat)
    pct = lambda p: s[max(0, -(-int(p * 1000) * len(s) // 1000) - 1)]  # nearest rank
    print(json.dumps({"peer": name, "reads": reads, "p50_us": pct(0.5) * 1e6,
                      "p95_us": pct(0.95) * 1e6, "images_per_s": len(lat) / sum(lat)}))


def main():
    d, reads = sys.argv[1], int(sys.argv[2])
    try:
        import tifffile
    except ImportError:
        tifffile = None
    try:
        import zarr
    except ImportError:
        zarr = None
    tdir = os.path.join(d, "tiff")
    tiffs = [os.path.join(tdir, n) for n in sorted(os.listdir(tdir))]
    zdir = os.path.join(d, "ome-zarr")
    groups = [os.path.join(zdir, n, "0") for n in sorted(os.listdir(zdir)) if n.endswith(".zarr")]
    for name, mod, paths, read in (
            ("tifffile", tifffile, tiffs, lambda p: tifffile.imread(p)),
            ("zarr-python", zarr, groups, lambda p: zarr.open_array(p, mode="r")[...])):
        if mod is None:
            print(f"formats_vs_peers: {name} is not installed", file=sys.stderr)
            continue
        try:
            run(name, paths, read, reads)
        except Exception as e:  # e.g. tifffile without imagecodecs cannot decode zstd strips
            print(f"formats_vs_peers: {name} cannot read {d}: {type(e).__name__}: {e}",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
