#!/usr/bin/env python3
"""Random batches of one OME-Zarr `gen` folder over HTTP, side by side: pipebench's Loader,
zarr-python + fsspec (a loop over the batch, as a user writes it, and a pool of threads), and
tensorstore's http kvstore with its zarr driver. Run by bench/remote_peers.sh, which serves the
data and puts pipebench-netem in front of it.

Every reader gets the same images in the same order: round r reads the first
(warmup + batches) batches of the loader's epoch r (pb_sampler_plan, the order
pipebench.Loader(shuffle=True, seed) reads), and the checksum of the pixels it read must be the
same for all. pipebench's warm-up is 2 + workers x prefetch batches (its queue holds up to
workers x prefetch batches read ahead during the warm-up: the window starts once they are
consumed, so it measures the loader's rate, not its queue); the peers read ahead nothing and
warm up on the 2 batches before the window. Opening (pipebench's dataset scan, zarr.open / tensorstore.open of every image's
array, in 16 threads) is set-up, timed on its own; images/s is the steady window: the measured
batches after the warm-up, from asking for the first to holding the last. Rounds interleave
the readers. Prints one JSON object per reader and round on stdout.

  remote_peers.py batches URL IMAGES [--batch 16] [--warmup 2] [--batches 30] [--rounds 2]
                  [--seed 42] [--readers pipebench,zarr,zarr-threads,tensorstore]
                  [--pipebench "workers=32 prefetch=2"]
  remote_peers.py whole URL IMAGES [--rounds 2] [--whole-reader dataset|loader]
                  [--whole-workers 2]                 whole images through pipebench
"""
import argparse
import concurrent.futures as cf
import ctypes
import inspect
import json
import os
import sys
import time
import urllib.parse

import numpy as np

import pipebench

# keys of --pipebench that are the I/O layer's overrides (docs/io.md) rather than Loader arguments
_IO_KEYS = {"in_flight": "PIPEBENCH_IN_FLIGHT", "timeout": "PIPEBENCH_TIMEOUT",
            "retries": "PIPEBENCH_RETRIES", "block_size": "PIPEBENCH_BLOCK_SIZE"}


def pipebench_settings(text):
    """'workers=8 prefetch=4 in_flight=16' -> Loader keyword arguments (numbers as numbers);
    in_flight, timeout, retries and block_size become PIPEBENCH_* variables. A key the Loader
    does not take is an error, so a setting is never silently dropped."""
    kw, env = {}, {}
    accepted = set(inspect.signature(pipebench.Loader.__init__).parameters)
    for item in text.split():
        k, _, v = item.partition("=")
        if k in _IO_KEYS:
            env[_IO_KEYS[k]] = v
            continue
        if k not in accepted:
            sys.exit("remote_peers.py: --pipebench: %r is not a pipebench.Loader argument "
                     "(it takes %s)" % (k, ", ".join(sorted(accepted - {"self", "path"}))))
        try:
            kw[k] = int(v)
        except ValueError:
            try:
                kw[k] = float(v)
            except ValueError:
                kw[k] = v
    return kw, env


def plan(n, seed, epoch, count):
    """The first count indices of the loader's shuffled epoch (pb_sampler_plan)."""
    f = pipebench._lib.pb_sampler_plan
    f.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                  ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    order = np.empty(n, dtype=np.int64)
    if f(n, 0, 1, 1, seed, epoch, n, order.ctypes.data) != 0:
        sys.exit("remote_peers.py: pb_sampler_plan failed")
    return [int(i) for i in order[:count]]


def array_url(url, i):
    return "%s/img_%05d.zarr/0" % (url, i)


def steady(batches, read_batch, warmup, skip=0):
    """Reads batches[skip:] with read_batch(indices) -> array, the first warmup - skip of them
    dropped; returns (seconds of the measured batches, images measured, checksum of their
    pixels)."""
    total, images, t0 = 0, 0, None
    for k, b in enumerate(batches):
        if k < skip:
            continue
        if k == warmup:
            t0 = time.perf_counter_ns()
        a = read_batch(b)
        if k >= warmup:
            total += int(a.sum(dtype=np.uint64))
            images += len(b)
    return (time.perf_counter_ns() - t0) / 1e9, images, total


_LOADER = {}


def run_pipebench(a, order, batches, epoch):
    """One Loader for all rounds (its open scans every image's metadata: set-up, timed once);
    round r is its epoch r."""
    t = time.perf_counter()
    if "ld" not in _LOADER:
        kw, env = pipebench_settings(a.pipebench)
        os.environ.update(env)
        _LOADER["ld"] = pipebench.Loader(a.url, batch_size=a.batch, shuffle=True, seed=a.seed,
                                         dtype="native", transform="none", cache="none", **kw)
    ld = _LOADER["ld"]
    setup = time.perf_counter() - t
    ld.reset(epoch)

    def read(b):
        x = ld.next()
        if list(x.indices) != b:
            sys.exit("remote_peers.py: the loader's order is not pb_sampler_plan's")
        return x.numpy()

    s, n, total = steady(batches, read, a.pb_warmup)
    return setup, s, n, total, "pipebench.Loader(%s), warm-up %d batches" % (a.pipebench,
                                                                              a.pb_warmup)


def run_zarr(a, order, batches, epoch, threads):
    import fsspec
    import zarr

    t = time.perf_counter()
    with cf.ThreadPoolExecutor(16) as ex:
        arrs = dict(zip(order, ex.map(
            lambda i: zarr.open(fsspec.get_mapper(array_url(a.url, i)), mode="r"), order)))
    setup = time.perf_counter() - t
    ex = cf.ThreadPoolExecutor(threads) if threads > 1 else None

    def read(b):
        if ex:
            return np.stack(list(ex.map(lambda i: arrs[i][...], b)))
        return np.stack([arrs[i][...] for i in b])

    s, n, total = steady(batches, read, a.pb_warmup, a.pb_warmup - a.warmup)
    if ex:
        ex.shutdown()
    how = "zarr %s, fsspec %s, %s" % (zarr.__version__, fsspec.__version__,
                                      "%d threads per batch" % threads if ex else "a loop per batch")
    return setup, s, n, total, how


def run_tensorstore(a, order, batches, r):
    import tensorstore as ts

    ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    t = time.perf_counter()
    u = urllib.parse.urlsplit(a.url)
    base = "%s://%s" % (u.scheme, u.netloc)

    def spec(i):  # the http kvstore: base_url the server, path the array's folder
        path = urllib.parse.urlsplit(array_url(a.url, i)).path.lstrip("/") + "/"
        return {"driver": "zarr", "kvstore": {"driver": "http", "base_url": base, "path": path}}

    futs = {i: ts.open(spec(i), read=True, context=ctx) for i in order}
    arrs = {i: f.result() for i, f in futs.items()}
    setup = time.perf_counter() - t

    def read(b):
        fs = [arrs[i].read() for i in b]  # every read of the batch in flight at once
        return np.stack([f.result() for f in fs])

    s, n, total = steady(batches, read, a.pb_warmup, a.pb_warmup - a.warmup)
    return setup, s, n, total, "tensorstore %s, http kvstore, all reads of a batch in flight" % (
        getattr(ts, "__version__", "?"))


def batches_cmd(a):
    readers = a.readers.split(",")
    kw, _ = pipebench_settings(a.pipebench)
    a.pb_warmup = a.warmup + int(kw.get("workers", 0)) * int(kw.get("prefetch", 2))
    count = (a.pb_warmup + a.batches) * a.batch
    if count > a.images:
        sys.exit("remote_peers.py: %d batches of %d need %d images, the dataset has %d"
                 % (a.pb_warmup + a.batches, a.batch, count, a.images))
    needs = {"tensorstore": ("tensorstore",), "zarr": ("zarr", "fsspec", "aiohttp"),
             "zarr-threads": ("zarr", "fsspec", "aiohttp")}
    for name in list(readers):
        for mod in needs.get(name, ()):
            try:
                __import__(mod)
            except ImportError:
                print("%s: skipped (import %s failed: not installed here)" % (name, mod),
                      file=sys.stderr)
                readers.remove(name)
                break
    for r in range(a.rounds):
        order = plan(a.images, a.seed, r, count)
        batches = [order[k:k + a.batch] for k in range(0, count, a.batch)]
        for name in readers:
            if name == "pipebench":
                res = run_pipebench(a, order, batches, r)
            elif name == "zarr":
                res = run_zarr(a, order, batches, r, 1)
            elif name == "zarr-threads":
                res = run_zarr(a, order, batches, r, a.batch)
            elif name == "tensorstore":
                res = run_tensorstore(a, order, batches, r)
            else:
                sys.exit("remote_peers.py: unknown reader %r" % name)
            setup, s, n, total, how = res
            print(json.dumps({"reader": name, "round": r, "seed": a.seed, "epoch": r, "images": n,
                              "seconds": s, "images_per_s": n / s, "setup_s": setup,
                              "checksum": total, "how": how}), flush=True)


def whole_cmd(a):
    """Whole images through pipebench, bytes of pixels per second. --whole-reader dataset: one
    image at a time with Dataset.read (a transfer, then its decompression, then the next);
    loader: pipebench.Loader with batch 1 and the workers of --whole-workers, so that the next
    images' transfers run while one is decompressed. One JSON line per round: the images
    consumed, the seconds from asking for the first to holding the last, their pixel bytes."""
    n = a.images
    if a.whole_reader == "dataset":
        ds = pipebench.Dataset(a.url)
        n = min(n, len(ds))
        for r in range(a.rounds):
            t = time.perf_counter_ns()
            px = sum(int(ds.read(i).nbytes) for i in range(n))
            s = (time.perf_counter_ns() - t) / 1e9
            print(json.dumps({"reader": "pipebench.Dataset.read", "round": r, "images": n,
                              "seconds": s, "pixel_bytes": px}), flush=True)
        return
    ld = pipebench.Loader(a.url, batch_size=1, workers=a.whole_workers, prefetch=1,
                          dtype="native")
    for r in range(a.rounds):
        t = time.perf_counter_ns()
        k = px = 0
        for b in ld:
            x = b.numpy()
            k += x.shape[0]
            px += int(x.nbytes)
        s = (time.perf_counter_ns() - t) / 1e9
        print(json.dumps({"reader": "pipebench.Loader workers=%d" % a.whole_workers, "round": r,
                          "images": k, "seconds": s, "pixel_bytes": px}), flush=True)
    ld.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["batches", "whole"])
    ap.add_argument("url")
    ap.add_argument("images", type=int)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--readers", default="pipebench,zarr,zarr-threads,tensorstore")
    ap.add_argument("--pipebench", default="workers=32 prefetch=2")
    ap.add_argument("--whole-reader", choices=["dataset", "loader"], default="dataset")
    ap.add_argument("--whole-workers", type=int, default=2)
    a = ap.parse_args()
    if a.mode == "batches":
        batches_cmd(a)
    else:
        whole_cmd(a)


if __name__ == "__main__":
    main()
