#!/usr/bin/env python3
"""The reads bench/regions.c makes, through tensorstore and zarr-python, for bench/large_images.sh:
whole-image reads (images in index order) and random crops (the same splitmix64 sequence), with
1 thread and with N threads, on the full-resolution arrays of an OME-Zarr folder. Whole reads:
R of them, wrapping over the images; R = 0 (the default) means max(images, 4 x threads) for
each thread count, so every thread reads several images, as bench/regions.c does. Arrays are
opened once before timing (the time to open them is reported on its own line), and one
untimed pass reads every image before the first measurement.

usage: large_images_peers.py ZARR_DIR --threads 1,16 [--whole R] [--crops K] [--crop EDGE]
                             [--seed S] [--skip NAME,...]
One JSON object per line on stdout; a peer that is not installed or cannot read the folder is
named on stderr and skipped.

Threads: with 1, tensorstore's own pools are held to one thread too (data_copy_concurrency and
file_io_concurrency limit 1); with N, N Python threads issue reads, and tensorstore's pools have
their default size (the machine's cores). zarr-python's blosc runs without its own threads (each
read thread calls it; its threaded mode holds a global lock)."""
import json
import os
import sys
import threading
import time

M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def crop_of(k, seed, shapes, edge):
    a = mix((seed + (k + 1) * 0x9E3779B97F4A7C15) & M64)
    b = mix(a)
    c = mix(b)
    img = a % len(shapes)
    h, w = shapes[img][-2], shapes[img][-1]
    ey, ex = min(edge, h), min(edge, w)
    return img, b % (h - ey + 1), c % (w - ex + 1), ey, ex


def pct(s, p):  # nearest rank on sorted samples
    return s[max(0, -(-int(p * 1000) * len(s) // 1000) - 1)]


def run(name, fmt, op, threads, reads, one):
    """Calls one(k) for k in [0, reads) from `threads` threads sharing a counter."""
    lat = [0.0] * reads
    nbytes = [0] * reads
    lock = threading.Lock()
    nxt = [0]
    failed = []
    barrier = threading.Barrier(threads + 1)

    def work():
        barrier.wait()
        while not failed:
            with lock:
                k = nxt[0]
                nxt[0] += 1
            if k >= reads:
                return
            try:
                t0 = time.perf_counter_ns()
                n = one(k)
                lat[k] = (time.perf_counter_ns() - t0) / 1e9
                nbytes[k] = n
            except Exception as e:  # reported once, below
                failed.append(e)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter_ns()
    for t in ts:
        t.join()
    wall = (time.perf_counter_ns() - t0) / 1e9
    if failed:
        raise failed[0]
    s = sorted(lat)
    mean = sum(lat) / len(lat)
    sd = (sum((x - mean) ** 2 for x in lat) / max(1, len(lat) - 1)) ** 0.5
    print(json.dumps({"tool": name, "format": fmt, "op": op, "threads": threads, "n": reads,
                      "p50_us": round(pct(s, 0.5) * 1e6, 1),
                      "p95_us": round(pct(s, 0.95) * 1e6, 1),
                      "ops_per_s": round(reads / wall, 2),
                      "mb_per_s": round(sum(nbytes) / wall / 1e6, 1),
                      "cv": round(sd / mean, 3) if mean else 0}), flush=True)


def arrays(zdir):
    """(full-resolution array folder, zarr version) per image group, in name order."""
    out = []
    for n in sorted(os.listdir(zdir)):
        g = os.path.join(zdir, n)
        if n.startswith(".") or not os.path.isdir(g):
            continue
        if os.path.exists(os.path.join(g, ".zattrs")):
            attrs, v = json.load(open(os.path.join(g, ".zattrs"))), 2
        elif os.path.exists(os.path.join(g, "zarr.json")):
            attrs, v = json.load(open(os.path.join(g, "zarr.json"))).get("attributes", {}), 3
            attrs = attrs.get("ome", attrs)
        else:
            continue
        out.append((os.path.join(g, attrs["multiscales"][0]["datasets"][0]["path"]), v))
    return out


def bench(name, fmt, open_all, read_whole, read_crop, threads_list, whole, crops, edge, seed):
    for threads in threads_list:
        t0 = time.perf_counter_ns()
        arrs = open_all(threads)
        opened = (time.perf_counter_ns() - t0) / 1e9
        shapes = [tuple(a.shape) for a in arrs]
        print(json.dumps({"tool": name, "format": fmt, "op": "open", "threads": threads,
                          "n": len(arrs), "per_array_us": round(opened / len(arrs) * 1e6, 1)}),
              flush=True)
        if threads == threads_list[0]:  # untimed: every image once
            for a in arrs:
                read_whole(a)
        run(name, fmt, "whole", threads, whole or max(len(arrs), 4 * threads),
            lambda k: read_whole(arrs[k % len(arrs)]).nbytes)

        def crop(k):
            i, y, x, ey, ex = crop_of(k, seed, shapes, edge)
            return read_crop(arrs[i], y, x, ey, ex).nbytes
        if crops:
            run(name, fmt, "crop", threads, crops, crop)


def main():
    a = sys.argv[1:]
    if not a or a[0].startswith("-"):
        sys.exit(__doc__)
    zdir = a[0]
    opt = dict(zip(a[1::2], a[2::2]))
    threads_list = [int(t) for t in opt.get("--threads", f"1,{os.cpu_count()}").split(",")]
    whole, crops = int(opt.get("--whole", 0)), int(opt.get("--crops", 1000))
    edge, seed = int(opt.get("--crop", 256)), int(opt.get("--seed", 42))
    skip = set(opt.get("--skip", "").split(","))
    found = arrays(zdir)
    if not found:
        sys.exit(f"large_images_peers: {zdir}: no OME-Zarr image groups")
    fmt = f"ome-zarr v{found[0][1]}"
    common = dict(threads_list=threads_list, whole=whole, crops=crops, edge=edge, seed=seed)

    if "tensorstore" not in skip:
        try:
            import tensorstore as ts
        except ImportError:
            ts = None
            print("large_images_peers: tensorstore is not installed", file=sys.stderr)
        if ts is not None:
            def ts_open(threads):
                spec = {} if threads > 1 else {"data_copy_concurrency": {"limit": 1},
                                               "file_io_concurrency": {"limit": 1}}
                ctx = ts.Context(spec)
                return [ts.open({"driver": "zarr" if v == 2 else "zarr3",
                                 "kvstore": {"driver": "file", "path": p}},
                                read=True, context=ctx).result() for p, v in found]
            try:
                bench("tensorstore " + getattr(ts, "__version__", "?"), fmt, ts_open,
                      lambda arr: arr.read().result(),
                      lambda arr, y, x, ey, ex: arr[..., y:y + ey, x:x + ex].read().result(),
                      **common)
            except Exception as e:
                print(f"large_images_peers: tensorstore cannot read {zdir}: "
                      f"{type(e).__name__}: {e}", file=sys.stderr)

    if "zarr-python" not in skip:
        try:
            import zarr
            from numcodecs import blosc
        except ImportError:
            zarr = None
            print("large_images_peers: zarr-python is not installed", file=sys.stderr)
        if zarr is not None and any(v != 2 for _, v in found) and \
                int(zarr.__version__.split(".")[0]) < 3:
            print(f"large_images_peers: zarr-python {zarr.__version__} reads Zarr v2 only; "
                  f"{zdir} is v3", file=sys.stderr)
        elif zarr is not None:
            def z_open(threads):
                blosc.use_threads = False  # one blosc call per read thread, no global lock
                return [zarr.open_array(p, mode="r") for p, _ in found]
            try:
                bench("zarr-python " + zarr.__version__, fmt, z_open, lambda arr: arr[...],
                      lambda arr, y, x, ey, ex: arr[..., y:y + ey, x:x + ex], **common)
            except Exception as e:
                print(f"large_images_peers: zarr-python cannot read {zdir}: "
                      f"{type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
