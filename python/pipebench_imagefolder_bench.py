#!/usr/bin/env python3
"""pipebench's loader against the torch DataLoader on an image folder, side by side in one run.

For the ImageNet training transform (RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize) and the evaluation transform (Resize(256) + CenterCrop(224) + ToTensor + Normalize),
at each worker count, in interleaved rounds:
  pipebench    pipebench.Loader (worker threads; random_resized_crop / center_crop_resize)
  torch+PIL    torch DataLoader over torchvision.datasets.ImageFolder (PIL decoding), the same
               transforms from torchvision.transforms, worker processes
  torch+io     the same with torchvision.io.decode_jpeg decoding (where torchvision has it)
Each loader delivers float32 batches of N x 3 x 224 x 224; a round runs `batches` batches after
the first ones (start-up, and the batches the workers queued while the other loaders ran, 1 + 2 x
workers, are left out) and images/s is images over the round's wall time. The median
over rounds is reported, and pipebench's ratio to torch+PIL at the same worker count against the
targets (training >= 3x, evaluation >= 2x).

With several worker counts including 1, a scaling table follows: each loader's efficiency
rate(w) / (w x rate(1)) side by side, and for pipebench where its workers' time goes per image
(reading, JPEG decoding, resizing + normalising, batch assembly; summed over workers, from the
loader's stats over the timed batches) and how busy its workers were (that time over
w x wall time). Per-image time that grows with w means each worker got slower (memory
bandwidth, shared cores, allocator contention); constant per-image time with idle workers
means something outside them (the consumer, the queue) holds the rate back.

Usage: pipebench_imagefolder_bench.py DIR [--workers 1,16] [--batch 64] [--batches 20]
           [--rounds 3] [--transforms train,eval] [--peers pil,io] [--json OUT]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import pipebench as pb

TARGETS = {"train": 3.0, "eval": 2.0}
MEAN, STD = 0.45, 0.225  # one mean and std for every channel, for both loaders


def pipebench_loader(path, kind, workers, batch, seed):
    tr = "random_resized_crop" if kind == "train" else "center_crop_resize"
    return pb.Loader(path, batch_size=batch, workers=workers, shuffle=True, seed=seed,
                     transform=tr, crop=224, resize=256, mean=MEAN, std=STD,
                     prefetch=2, drop_last=True)


def torch_loader(path, kind, workers, batch, seed, decoder):
    import torch
    import torchvision
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, Dataset

    if kind == "train":
        geo = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    else:
        geo = [T.Resize(256), T.CenterCrop(224)]
    if decoder == "pil":
        tf = T.Compose(geo + [T.ToTensor(), T.Normalize([MEAN] * 3, [STD] * 3)])
        ds = torchvision.datasets.ImageFolder(path, transform=tf)
    else:
        import torchvision.io as io
        # Tensor transforms: antialiased resizing as PIL's, then scaling to [0, 1].
        geo = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()] \
            if kind == "train" else [T.Resize(256, antialias=True), T.CenterCrop(224)]
        tf = T.Compose(geo + [T.ConvertImageDtype(torch.float32), T.Normalize([MEAN] * 3, [STD] * 3)])
        folder = torchvision.datasets.ImageFolder(path)

        class Decoded(Dataset):
            def __len__(self):
                return len(folder.samples)

            def __getitem__(self, i):
                p, label = folder.samples[i]
                img = io.decode_jpeg(io.read_file(p), mode=io.ImageReadMode.RGB)
                return tf(img), label

        ds = Decoded()
    g = torch.Generator()
    g.manual_seed(seed)
    extra = {"persistent_workers": True, "prefetch_factor": 2} if workers > 0 else {}
    return DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                      generator=g, **extra)


class Runner:
    """One loader kept across rounds (threads or worker processes started once)."""

    STAGES = ("read_ns", "decode_ns", "transform_ns", "convert_ns", "collate_ns")

    def __init__(self, name, make, workers):
        self.name, self.loader, self.workers = name, make(), workers
        self.it = None
        self.stage_rounds = []  # pipebench: per round, worker ns per image by stage

    def next_batch(self):
        if self.name == "pipebench":
            b = self.loader.next()
            if b is None:
                self.loader.reset(self.loader.epoch + 1)
                b = self.loader.next()
            a = b.numpy()
            n = a.shape[0]
            assert a.shape[1:] == (3, 224, 224), a.shape
            b.release()
            return n
        if self.it is None:
            self.it = iter(self.loader)
        try:
            x, _ = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            x, _ = next(self.it)
        assert tuple(x.shape[1:]) == (3, 224, 224), x.shape
        return int(x.shape[0])

    def round(self, batches):
        # While the other loaders had their rounds, this one's workers filled its queue (2
        # batches per worker for both loaders): those batches cost nothing now, so they, and
        # the first batch (start-up), are taken before the clock starts and the round times
        # the steady state, where every batch is decoded while it is waited for.
        for _ in range(1 + 2 * max(self.workers, 1)):
            self.next_batch()
        s0 = self.loader.stats() if self.name == "pipebench" else None
        t0 = time.perf_counter_ns()
        n = sum(self.next_batch() for _ in range(batches))
        wall = time.perf_counter_ns() - t0
        if s0 is not None:
            s1 = self.loader.stats()
            k = max(s1["samples"] - s0["samples"], 1)
            st = {f: (s1[f] - s0[f]) / k for f in self.STAGES}
            st["busy"] = sum(s1[f] - s0[f] for f in self.STAGES) / (max(self.workers, 1) * wall)
            self.stage_rounds.append(st)
        return n / (wall / 1e9)

    def close(self):
        if self.name == "pipebench":
            self.loader.close()
        self.it = None
        self.loader = None


def scaling(rows):
    """Per-worker efficiency rate(w) / (w x rate(1)) of every loader, with pipebench's worker
    time per image by stage, for each transform measured at 1 worker and more."""
    for kind in TARGETS:
        mine = [r for r in rows if r["transform"] == kind]
        one = [r for r in mine if r["workers"] == 1]
        if not one or len(mine) < 2:
            continue
        base = one[0]["images_per_s"]
        names = list(base)
        print("\nscaling, %s: efficiency = rate / (workers x 1-worker rate); pipebench's workers' "
              "ms per image (summed over workers) and busy = that time / (workers x wall)" % kind)
        print("%7s " % "workers" + " ".join("%16s" % ("%s eff" % n) for n in names) +
              "  %6s %6s %7s %6s %5s" % ("read", "decode", "resize", "batch", "busy"))
        for r in mine:
            w, m, st = r["workers"], r["images_per_s"], r.get("pipebench_stages")
            eff = {n: m[n] / (w * base[n]) if base.get(n) else None for n in names}
            r["efficiency"] = eff
            cells = " ".join("%16s" % ("%.0f %4.0f%%" % (m[n], 100 * eff[n]) if eff[n] else "-")
                             for n in names)
            if st:
                cells += "  %6.2f %6.2f %7.2f %6.2f %4.0f%%" % (
                    st["read_ns"] / 1e6, st["decode_ns"] / 1e6,
                    (st["transform_ns"] + st["convert_ns"]) / 1e6, st["collate_ns"] / 1e6,
                    100 * st["busy"])
            print("%7d " % w + cells)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--workers", default="1,%d" % (os.cpu_count() or 1))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transforms", default="train,eval")
    ap.add_argument("--peers", default="pil,io", help="torch peers: pil, io, both or none")
    ap.add_argument("--json")
    a = ap.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    kinds = [k for k in a.transforms.split(",") if k]
    want = set(p for p in a.peers.split(",") if p and p != "none")
    if any(k not in TARGETS for k in kinds) or not kinds or want - {"pil", "io"}:
        ap.error("--transforms takes train and/or eval, --peers pil and/or io (or none)")
    peers = []
    try:
        import torch
        import torchvision
        torch.set_num_threads(1)
        if "pil" in want:
            peers.append("torch+PIL")
        import torchvision.io as io
        if "io" in want and hasattr(io, "decode_jpeg"):
            peers.append("torch+io")
        versions = {"torch": torch.__version__, "torchvision": torchvision.__version__}
    except ImportError as e:
        print("imagefolder bench: the torch peers are skipped: %s (python: %s)" % (e, sys.executable))
        versions = {}
    rows = []
    for kind in kinds:
        for w in workers:
            makers = [("pipebench", lambda: pipebench_loader(a.dir, kind, w, a.batch, 7))]
            if "torch+PIL" in peers:
                makers.append(("torch+PIL", lambda: torch_loader(a.dir, kind, w, a.batch, 7, "pil")))
            if "torch+io" in peers:
                makers.append(("torch+io", lambda: torch_loader(a.dir, kind, w, a.batch, 7, "io")))
            runners = [Runner(n, m, w) for n, m in makers]
            rates = {r.name: [] for r in runners}
            for _ in range(a.rounds):  # interleaved: each round runs every loader once
                for r in runners:
                    rates[r.name].append(r.round(a.batches))
            stages = None
            for r in runners:
                if r.name == "pipebench" and r.stage_rounds:
                    stages = {f: statistics.median(x[f] for x in r.stage_rounds)
                              for f in r.stage_rounds[0]}
                r.close()
            med = {k: statistics.median(v) for k, v in rates.items()}
            row = {"transform": kind, "workers": w, "images_per_s": med, "rounds": rates,
                   "pipebench_stages": stages}
            rows.append(row)
            print("  %s, %d workers: %s" % (kind, w, ", ".join(
                "%s %.0f" % (k, v) for k, v in med.items())), file=sys.stderr, flush=True)
    print("images/s (median of %d rounds of %d batches of %d; float32 3x224x224 out)"
          % (a.rounds, a.batches, a.batch))
    print("%-9s %7s %11s %11s %11s %10s %7s %10s" % ("transform", "workers", "pipebench", "torch+PIL",
                                                     "torch+io", "vs PIL", "target", "vs io"))
    for row in rows:
        m = row["images_per_s"]
        pil, tio = m.get("torch+PIL"), m.get("torch+io")
        ratio = m["pipebench"] / pil if pil else None
        row["over_pil"] = ratio
        row["over_io"] = m["pipebench"] / tio if tio else None
        t = TARGETS[row["transform"]]
        verdict = "-" if ratio is None else ("met" if ratio >= t else "MISSED")
        print("%-9s %7d %11.0f %11s %11s %10s %7s %10s" % (
            row["transform"], row["workers"], m["pipebench"],
            "%.0f" % pil if pil else "-", "%.0f" % tio if tio else "-",
            "%.2fx" % ratio if ratio else "-", ">=%gx %s" % (t, verdict),
            "%.2fx" % row["over_io"] if row["over_io"] else "-"))
    scaling(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "versions": versions, "batch": a.batch,
                       "batches": a.batches, "rounds": a.rounds}, f, indent=1)


if __name__ == "__main__":
    main()
