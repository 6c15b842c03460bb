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
workers, are left out) and images/s is the slope of images delivered against time over the
round's batches (delivery_rate: robust to the waves in which whole-batch workers deliver; each
round's images over its wall time is kept in the JSON as rounds_wall). The median
over rounds is reported, and pipebench's ratio to torch+PIL at the same worker count against the
targets (training >= 3x, evaluation >= 2x), with the lowest and highest of the rounds' own ratios
(each round times the loaders one after the other) and a warning for any loader whose rate varies
by more than 5% (coefficient of variation) over the rounds.

With several worker counts including 1, a scaling table follows: each loader's efficiency
rate(w) / (w x rate(1)) side by side, and for pipebench where its workers' time goes per image
(reading, JPEG decoding, resizing + normalising, batch assembly; summed over workers, from the
loader's stats over the timed batches) and how busy its workers were (that time over
w x wall time). Per-image time that grows with w means each worker got slower (memory
bandwidth, shared cores, allocator contention); constant per-image time with idle workers
means something outside them (the consumer, the queue) holds the rate back.

Before each round the script waits until its own process and its children (the torch workers)
are quiet, so that no loader is timed while the one measured before it still decodes the batches
it prefetched (2 per worker: for the torch peers, seconds of work at many workers).

Each worker builds whole batches, so a round at w workers delivers its batches in waves of about w;
over a few batches, images over wall time would time the phase of a wave, not the rate. By default a round at w
workers times max(20, 6 x w) batches. The machine's layout (logical CPUs, physical cores) and the
share of CPU time the hypervisor took away (steal, from /proc/stat) during the timed windows are
printed with the results: a VM whose vCPUs are hyper-threads of fewer cores, or whose host is busy,
slows decode-heavy workers more than interpreter-bound ones.

Usage: pipebench_imagefolder_bench.py DIR [--workers 1,16] [--batch 64] [--batches auto]
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


def cpu_layout():
    """(logical CPUs, physical cores) from sysfs; cores is None where sysfs does not say."""
    n = os.cpu_count() or 1
    cores = set()
    try:
        for c in range(n):
            t = "/sys/devices/system/cpu/cpu%d/topology/" % c
            with open(t + "physical_package_id") as f, open(t + "core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
    except OSError:
        return n, None
    return n, len(cores)


def cpu_jiffies():
    """(total, steal) jiffies of all CPUs from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(v[:8]), (v[7] if len(v) > 7 else 0)


VMSTAT = ("pgfault", "pgmajfault", "pgmigrate_success", "compact_stall", "compact_migrate_scanned",
          "thp_fault_alloc", "thp_collapse_alloc", "numa_hint_faults", "pgsteal_kswapd",
          "pgsteal_direct")


def vmstat():
    """The kernel's memory counters that a loader's round may stir (faults, page migration,
    compaction, huge pages, reclaim), from /proc/vmstat; {} where it cannot be read."""
    out = {}
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k in VMSTAT:
                    out[k] = int(v)
    except (OSError, ValueError):
        return {}
    return out


def own_cpu_ticks():
    """CPU ticks used so far by this process (all its threads) and its child processes (the
    torch DataLoader's workers)."""
    me, total = str(os.getpid()), 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if d == me or rest[1] == me:  # rest[1]: the parent's pid
            total += int(rest[11]) + int(rest[12])  # utime + stime
    return total


def settle(limit_s=30.0, window_s=0.2, below=0.25):
    """Waits until this process and its children use less than `below` of a CPU over a window:
    the loader measured before has finished the batches it prefetched. Without this, a round
    starts while the other loader's workers still decode their queue (2 batches per worker),
    and the round is timed on a machine it shares. Returns (seconds waited, settled)."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    t0 = time.perf_counter()
    prev = own_cpu_ticks()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(window_s)
        cur = own_cpu_ticks()
        if (cur - prev) / hz < below * window_s:
            return time.perf_counter() - t0, True
        prev = cur
    return time.perf_counter() - t0, False


def delivery_rate(times, counts):
    """Images/s as the least-squares slope of images delivered against time. Workers that each
    build a whole batch deliver in waves of about one batch per worker; a round's images over its
    wall time then depends on where the waves fall against the clock's start (a wave finished
    just after it counts at no cost: up to one wave in N batches too fast), while the slope
    through every delivery follows the steady rate whatever the phase."""
    k = len(times)
    if k < 3:
        return counts[-1] / times[-1] if k and times[-1] > 0 else 0.0
    mt, mc = sum(times) / k, sum(counts) / k
    var = sum((t - mt) ** 2 for t in times)
    if var <= 0:
        return 0.0
    return sum((t - mt) * (c - mc) for t, c in zip(times, counts)) / var


class Runner:
    """One loader kept across rounds (threads or worker processes started once)."""

    STAGES = ("read_ns", "decode_ns", "transform_ns", "convert_ns", "collate_ns")

    def __init__(self, name, make, workers):
        self.name, self.loader, self.workers = name, make(), workers
        self.it = None
        if name != "pipebench" and workers > 0:
            self.it = iter(self.loader)  # persistent workers: forked now, once
        self.stage_rounds = []  # pipebench: per round, worker ns per image by stage
        self.steal = [0, 0]  # jiffies: total and stolen over the timed windows
        self.unsettled = 0  # rounds started before the machine was quiet (settle's limit)
        self.endpoint = []  # each round's images over its wall time, for comparison
        self.vm_rounds = []  # each round's changes of the kernel's memory counters

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
        if not settle()[1]:
            self.unsettled += 1
        # While the other loaders had their rounds, this one's workers filled its queue (2
        # batches per worker for both loaders): those batches cost nothing now, so they, and
        # the first batch (start-up), are taken before the clock starts and the round times
        # the steady state, where every batch is decoded while it is waited for.
        for _ in range(1 + 2 * max(self.workers, 1)):
            self.next_batch()
        s0 = self.loader.stats() if self.name == "pipebench" else None
        j0, v0 = cpu_jiffies(), vmstat()
        t0 = time.perf_counter_ns()
        times, counts, n = [], [], 0  # each delivery (not the clock's start)
        for _ in range(batches):
            n += self.next_batch()
            times.append((time.perf_counter_ns() - t0) / 1e9)
            counts.append(n)
        wall = time.perf_counter_ns() - t0
        j1, v1 = cpu_jiffies(), vmstat()
        self.vm_rounds.append({k: v1[k] - v0[k] for k in v1 if k in v0})
        if j0 and j1:
            self.steal[0] += j1[0] - j0[0]
            self.steal[1] += j1[1] - j0[1]
        if s0 is not None:
            s1 = self.loader.stats()
            k = max(s1["samples"] - s0["samples"], 1)
            st = {f: (s1[f] - s0[f]) / k for f in self.STAGES}
            st["busy"] = sum(s1[f] - s0[f] for f in self.STAGES) / (max(self.workers, 1) * wall)
            self.stage_rounds.append(st)
        self.endpoint.append(n / (wall / 1e9))
        return delivery_rate(times, counts)

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
    ap.add_argument("--batches", default="auto",
                    help="batches timed per round, or auto: max(20, 6 x workers)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transforms", default="train,eval")
    ap.add_argument("--peers", default="pil,io", help="torch peers: pil, io, both or none")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        workers = [int(w) for w in a.workers.split(",")]
        fixed = None if a.batches == "auto" else int(a.batches)
    except ValueError:
        ap.error("--workers takes a list of counts (1,16), --batches a count or auto")
    if any(w < 0 for w in workers) or (fixed is not None and fixed < 1):
        ap.error("--workers takes counts >= 0, --batches a count >= 1")
    if not os.path.isdir(a.dir):
        ap.error("%s: no such folder (give an image folder: class folders of JPEG/PNG files)" % a.dir)
    logical, cores = cpu_layout()
    print("cpus: %d logical, %s physical cores" % (logical, cores if cores else "unknown"))
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
            # The torch peers fork their worker processes first. A fork makes every page of this
            # process copy-on-write, so pipebench's batch buffers, if they existed then, would
            # fault once per page at their next write: in its first round after the fork (100,000
            # faults, its resize 5x slower, on 16 workers). Built after the forks, they are
            # private. Rounds still run pipebench first.
            built = {n: Runner(n, m, w) for n, m in makers[::-1]}
            runners = [built[n] for n, _ in makers]
            rates = {r.name: [] for r in runners}
            nb = fixed if fixed is not None else max(20, 6 * w)
            for _ in range(a.rounds):  # interleaved: each round runs every loader once
                for r in runners:
                    rates[r.name].append(r.round(nb))
            stages, stage_rounds = None, None
            for r in runners:
                if r.name == "pipebench" and r.stage_rounds:
                    stages = {f: statistics.median(x[f] for x in r.stage_rounds)
                              for f in r.stage_rounds[0]}
                    stage_rounds = r.stage_rounds
                r.close()
            med = {k: statistics.median(v) for k, v in rates.items()}
            steal = {r.name: r.steal[1] / r.steal[0] if r.steal[0] else None for r in runners}
            unsettled = {r.name: r.unsettled for r in runners if r.unsettled}
            endpoint = {r.name: r.endpoint for r in runners}
            vm = {r.name: r.vm_rounds for r in runners}
            row = {"transform": kind, "workers": w, "images_per_s": med, "rounds": rates,
                   "batches": nb, "pipebench_stages": stages, "steal": steal,
                   "rounds_wall": endpoint, "pipebench_stage_rounds": stage_rounds,
                   "vmstat_rounds": vm,
                   "unsettled_rounds": unsettled}
            if unsettled:
                print("  warning: %s: rounds began while this process's threads or workers still "
                      "used CPU after 30 s (something keeps them busy)" % unsettled,
                      file=sys.stderr, flush=True)
            rows.append(row)
            print("  %s, %d workers: %s" % (kind, w, ", ".join(
                "%s %.0f" % (k, v) for k, v in med.items())), file=sys.stderr, flush=True)
    print("images/s (median of %d rounds of %s batches of %d; float32 3x224x224 out)"
          % (a.rounds, a.batches if fixed is not None else "max(20, 6 x workers)", a.batch))
    print("%-9s %7s %11s %11s %11s %10s %13s %7s %10s" % (
        "transform", "workers", "pipebench", "torch+PIL", "torch+io", "vs PIL", "rounds",
        "target", "vs io"))
    unstable = []
    for row in rows:
        m, per = row["images_per_s"], row["rounds"]
        pil, tio = m.get("torch+PIL"), m.get("torch+io")
        ratio = m["pipebench"] / pil if pil else None
        row["over_pil"] = ratio
        row["over_io"] = m["pipebench"] / tio if tio else None
        # each round's own ratio (the two loaders timed one after the other): the spread a
        # median of a few rounds hides
        rr = [p / q for p, q in zip(per["pipebench"], per.get("torch+PIL", [])) if q]
        row["over_pil_rounds"] = rr
        for name, v in per.items():
            if len(v) > 1 and statistics.mean(v) > 0 and \
                    statistics.stdev(v) / statistics.mean(v) > 0.05:
                unstable.append("%s %d %s (CV %.0f%%)" % (row["transform"], row["workers"], name,
                                                          100 * statistics.stdev(v) / statistics.mean(v)))
        t = TARGETS[row["transform"]]
        verdict = "-" if ratio is None else ("met" if ratio >= t else "MISSED")
        print("%-9s %7d %11.0f %11s %11s %10s %13s %7s %10s" % (
            row["transform"], row["workers"], m["pipebench"],
            "%.0f" % pil if pil else "-", "%.0f" % tio if tio else "-",
            "%.2fx" % ratio if ratio else "-",
            "%.2f-%.2fx" % (min(rr), max(rr)) if rr else "-", ">=%gx %s" % (t, verdict),
            "%.2fx" % row["over_io"] if row["over_io"] else "-"))
    if unstable:
        print("unstable (coefficient of variation over rounds above 5%): " + ", ".join(unstable))
    stolen = [(row["transform"], row["workers"], n, v) for row in rows
              for n, v in row["steal"].items() if v is not None]
    if stolen:
        print("steal (CPU time the hypervisor took during the timed windows): " + ", ".join(
            "%s %d %s %.1f%%" % (k, w, n, 100 * v) for k, w, n, v in stolen))
    scaling(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "versions": versions, "batch": a.batch,
                       "batches": a.batches, "rounds": a.rounds,
                       "cpus": {"logical": logical, "cores": cores}}, f, indent=1)


if __name__ == "__main__":
    main()
