"""A torch training loop fed three ways, side by side in interleaved rounds on one GPU:

  pipebench   pipebench.torch.Loader (native decode + random_resized_crop + flip, pinned float16
              batches copied on a side stream, normalised on the GPU)
  dataloader  torch's DataLoader over torchvision's ImageFolder with PIL (RandomResizedCrop,
              RandomHorizontalFlip, ToTensor, Normalize), pin_memory, persistent workers
  resident    one batch already on the GPU: the loop's compute bound

The model is a torchvision ResNet-50 (or any torchvision name) in channels-last memory, bfloat16
autocast, SGD with momentum and weight decay, cross-entropy against the folder's labels. Each
round times STEPS steps after WARMUP, between two torch.cuda.synchronize() calls, so the window
starts and ends on an idle device; images/s = STEPS * batch / window. The device's busy time is
the sum of CUDA-event spans around each step's compute; AU = busy / window (<= 1 by
construction of the window). Ratios: each feeder against resident (share of the compute bound)
and pipebench against dataloader, per round and as the median of rounds.

usage: python3 bench/torch_train_feed.py TREE [--batch 256] [--steps 30] [--warmup 5]
       [--rounds 3] [--workers N] [--model resnet50] [--compile] [--json OUT.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import pipebench.torch as pbt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tree")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--feeders", default="dataloader,pipebench,resident")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.isdir(a.tree):
        sys.exit("torch_train_feed: %s: no such folder (make one with pipebench gen --preset "
                 "imagenet)" % a.tree)
    if not torch.cuda.is_available():
        sys.exit("torch_train_feed: torch sees no GPU")
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    classes = len([d for d in os.listdir(a.tree) if os.path.isdir(os.path.join(a.tree, d))])
    model = getattr(torchvision.models, a.model)(num_classes=max(classes, 2))
    model = model.to(dev, memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    step_fn = torch.compile(model) if a.compile else model

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(step_fn(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    names = a.feeders.split(",")
    # torch's workers are forked before pipebench's threads and buffers exist (a fork after
    # would make pipebench's batch memory copy-on-write in the parent).
    feeders = {}
    if "dataloader" in names:
        import torchvision.transforms as T
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(pbt.IMAGENET_MEAN, pbt.IMAGENET_STD)])
        dl = torch.utils.data.DataLoader(
            torchvision.datasets.ImageFolder(a.tree, transform=tf), batch_size=a.batch,
            shuffle=True, num_workers=a.workers, pin_memory=True, drop_last=True,
            persistent_workers=True, prefetch_factor=2)

        def dl_batches():
            while True:
                for x, y in dl:
                    yield (x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last),
                           y.to(dev, non_blocking=True))
        feeders["dataloader"] = dl_batches()
    if "pipebench" in names:
        ld = pbt.Loader(a.tree, batch_size=a.batch, device=dev, workers=a.workers)

        def pb_batches():
            while True:
                yield from ld
        feeders["pipebench"] = pb_batches()
    if "resident" in names:
        xr = torch.randn(a.batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        yr = torch.randint(0, max(classes, 2), (a.batch,), device=dev)

        def resident():
            while True:
                yield xr, yr
        feeders["resident"] = resident()

    rows = []
    for r in range(a.rounds):
        for name in names:
            it = feeders[name]
            for _ in range(a.warmup):
                step(*next(it))
            torch.cuda.synchronize()
            spans = []
            wait = 0.0
            t0 = time.perf_counter()
            for _ in range(a.steps):
                w0 = time.perf_counter()
                x, y = next(it)
                wait += time.perf_counter() - w0
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                step(x, y)
                e.record()
                spans.append((s, e))
            torch.cuda.synchronize()
            window = time.perf_counter() - t0
            busy = sum(s.elapsed_time(e) for s, e in spans) / 1e3
            row = {"round": r, "feeder": name, "images_per_sec": a.steps * a.batch / window,
                   "window_s": window, "device_busy_s": busy, "au": busy / window,
                   "host_wait_share": wait / window}
            rows.append(row)
            print("round %d %-10s %8.0f images/s  AU %5.1f%%  host waiting %5.1f%%"
                  % (r, name, row["images_per_sec"], 100 * row["au"], 100 * row["host_wait_share"]),
                  flush=True)

    def med(name):
        v = [x["images_per_sec"] for x in rows if x["feeder"] == name]
        return statistics.median(v) if v else float("nan")

    summary = {n: med(n) for n in names}
    print("\nmedian of %d rounds (batch %d, %d workers, %s%s, %s):"
          % (a.rounds, a.batch, a.workers, a.model, " compiled" if a.compile else "",
             torch.cuda.get_device_name()))
    for n in names:
        line = "  %-10s %8.0f images/s" % (n, summary[n])
        if "resident" in summary and n != "resident":
            line += "  %5.1f%% of the compute bound" % (100 * summary[n] / summary["resident"])
        print(line)
    if "pipebench" in summary and "dataloader" in summary:
        per_round = [p["images_per_sec"] / d["images_per_sec"] for p, d in
                     zip([x for x in rows if x["feeder"] == "pipebench"],
                         [x for x in rows if x["feeder"] == "dataloader"])]
        print("  pipebench / dataloader: %.2fx (rounds: %s)"
              % (summary["pipebench"] / summary["dataloader"],
                 ", ".join("%.2f" % v for v in per_round)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "median_images_per_sec": summary, "args": vars(a),
                       "device": torch.cuda.get_device_name(), "torch": torch.__version__}, f,
                      indent=1)


if __name__ == "__main__":
    main()
