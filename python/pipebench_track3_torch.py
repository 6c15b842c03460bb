#!/usr/bin/env python3
"""Track 3 with the user's framework: a torch model fed three ways, in interleaved rounds.

pipebench runs this for `pipebench run --tracks 3 --framework torch [--train]`, once per format:

  pipebench         pipebench.torch.Loader (native decode and transform, pinned staging, the copy
                    to the GPU on a side stream, normalised there)
  torch-dataloader  torch.utils.data.DataLoader over the same files: torchvision's ImageFolder
                    with PIL for image folders, the tifffile / zarr-python datasets of Track 2's
                    peer (pipebench_peer.py) for OME-TIFF and OME-Zarr
  resident          one batch already on the device, used again every step: the compute bound

The model is a torchvision name (resnet50, vit_b_16, ...), `embed` (a small CNN of this file, for
machines without torchvision), or the user's own (`file.py:build`, build() or
build(num_classes) returning a torch.nn.Module). Training: SGD with momentum and weight decay,
cross-entropy against the image folder's labels (seeded labels for formats without any),
bfloat16 autocast on cuda. Inference: the forward pass under torch.inference_mode.

Each round of a feeder: its queued batches are taken and dropped (what it prefetched while the
other feeders ran would make its first steps free), one step is run and reported on its own (the
first step), then STEPS steps are timed in a window that opens and closes on a synchronised
device. On cuda a step's device time comes from CUDA events around its compute, a step ends when
its work ends on the device, and the device's busy time is the sum of the compute spans (one
stream, so they never overlap: busy <= window). On the cpu a step's compute ends when the call
returns. The host's wait for each batch is recorded either way.

Usage: pipebench_track3_torch.py SPEC.json RESULT.json
SPEC: {"format", "path", "model", "torch_model", "train", "compile", "batch", "workers", "steps",
       "repeats", "seed", "device": "auto"|"cpu"|"cuda", "dtype", "library", "crop", "resize",
       "vary": images of different sizes}
RESULT: {"device", "device_name", "dtype", "model", "classes", "batch", "versions", "notes",
         "rows": [{"feeder", "round", "loader", "first_step_s", "step_s", "wait_s", "window_s",
                   "busy_s", "samples", "drained"}]}
or, for bad input, {"error": "one line"} and exit status 3.
"""
import contextlib
import importlib.util
import inspect
import json
import os
import sys
import time

EXIT_BAD_INPUT = 3
# seconds before each device-resident round, for the other feeders' workers to refill and go idle
SETTLE_S = 1.0


class BadInput(Exception):
    """What the user gave does not work: said in one line, exit status 3."""


def last_line(e):
    text = ("%s: %s" % (type(e).__name__, e)).strip()
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else type(e).__name__


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def count_classes(path):
    return len([d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))
                and not d.startswith(".")])


# ---- models ---------------------------------------------------------------------------------

def embed_model(torch, classes):
    """A small CNN: what `embed` names where torchvision is absent (and on CPU CI)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def user_model(torch, spec, classes):
    text = spec["torch_model"]
    path, _, fn = text.rpartition(":") if ":" in text else (text, "", "build")
    fn = fn or "build"
    if not os.path.isfile(path):
        raise BadInput("--torch-model %s: %s: no such file" % (text, path))
    try:
        ms = importlib.util.spec_from_file_location("pipebench_user_model", path)
        mod = importlib.util.module_from_spec(ms)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        ms.loader.exec_module(mod)
    except Exception as e:  # the user's file: anything it raises is theirs to fix
        raise BadInput("--torch-model %s: %s does not import: %s" % (text, path, last_line(e)))
    build = getattr(mod, fn, None)
    if not callable(build):
        raise BadInput("--torch-model %s: %s has no function %s()" % (text, path, fn))
    try:
        takes = len(inspect.signature(build).parameters) > 0
    except (TypeError, ValueError):
        takes = False
    try:
        m = build(classes) if takes else build()
    except Exception as e:
        raise BadInput("--torch-model %s: %s() failed: %s" % (text, fn, last_line(e)))
    if not isinstance(m, torch.nn.Module):
        raise BadInput("--torch-model %s: %s() returned %s, not a torch.nn.Module"
                       % (text, fn, type(m).__name__))
    return m, "%s:%s" % (os.path.basename(path), fn)


def builtin_model(torch, name, classes):
    if name == "embed":
        return embed_model(torch, classes)
    try:
        import torchvision
    except ImportError:
        raise BadInput("model %s needs torchvision, which %s lacks (--model embed runs "
                       "without it)" % (name, sys.executable))
    ctor = getattr(torchvision.models, name, None)
    if not callable(ctor) or not name[:1].islower():
        names = sorted(n for n in dir(torchvision.models)
                       if n[:1].islower() and callable(getattr(torchvision.models, n))
                       and not n.startswith("get_") and n not in ("list_models",))
        raise BadInput("unknown model %r: torchvision %s has %s, and embed"
                       % (name, torchvision.__version__, ", ".join(names[:12]) + ", ..."))
    return ctor(num_classes=classes)


# ---- feeders --------------------------------------------------------------------------------

def forever(make_iter):
    while True:
        got = False
        for item in make_iter():
            got = True
            yield item
        if not got:
            raise BadInput("the feeder gave no batch in an epoch (fewer images than a batch?)")


def torch_dataloader(torch, spec, dev, cuda, mean, std):
    """torch's DataLoader over the same files, or (None, why)."""
    fmt, path, train = spec["format"], spec["path"], spec["train"]
    if fmt == "imagefolder":
        try:
            import torchvision
            import torchvision.transforms as T
        except ImportError:
            return None, "torchvision is not installed for %s" % sys.executable
        crop, resize = spec["crop"], spec["resize"]
        if train:
            tf = [T.RandomResizedCrop(crop), T.RandomHorizontalFlip()]
        else:
            tf = [T.Resize(resize), T.CenterCrop(crop)]
        tf = T.Compose(tf + [T.ToTensor(), T.Normalize(mean, std)])
        ds = torchvision.datasets.ImageFolder(path, transform=tf)
        name = "torch-dataloader (ImageFolder + PIL)"
    elif fmt in ("tiff", "ome-zarr"):
        if spec.get("vary"):
            return None, "images of different sizes (the peer stacks one size)"
        import pipebench_peer as peer
        try:
            ds = (peer.TiffImages if fmt == "tiff" else peer.ZarrImages)(path, mean[0], std[0])
        except ImportError as e:
            return None, "%s (%s)" % (last_line(e), sys.executable)
        name = "torch-dataloader (%s)" % ("tifffile" if fmt == "tiff" else "zarr-python")
    else:
        return None, "no torch Dataset for format %s (Track 2's peer reads tiff, ome-zarr and " \
                     "image folders)" % fmt
    w = spec["workers"]
    extra = {"persistent_workers": True, "prefetch_factor": 2} if w > 0 else {}
    g = torch.Generator()
    g.manual_seed(spec["seed"])
    dl = torch.utils.data.DataLoader(ds, batch_size=spec["batch"], shuffle=True, num_workers=w,
                                     pin_memory=cuda, drop_last=True, generator=g, **extra)

    def batches():
        for b in dl:
            x, y = (b[0], b[1]) if isinstance(b, (list, tuple)) else (b, None)
            x = x.to(dev, non_blocking=True)
            if y is not None:
                y = y.to(dev, non_blocking=True)
            yield x, y
    return (forever(batches), name, 2 * w), None


def pipebench_loader(torch, spec, dev, mean, std):
    import pipebench.torch as pbt
    opts = {"format": spec["format"]}
    if spec["format"] == "imagefolder" or spec.get("vary"):
        transform = "random_resized_crop" if spec["train"] else "center_crop_resize"
        opts.update(crop=spec["crop"], resize=spec["resize"])
    else:
        transform = "normalize"
    ld = pbt.Loader(spec["path"], batch_size=spec["batch"], device=dev, transform=transform,
                    workers=max(spec["workers"], 1), shuffle=True, seed=spec["seed"],
                    drop_last=True, rank=0, world_size=1, mean=mean, std=std, **opts)
    if len(ld) < 1:
        raise BadInput("%s: fewer images than one batch of %d" % (spec["path"], spec["batch"]))
    return (forever(lambda: iter(ld)), "pipebench.torch.Loader (%s)" % transform, 3), ld


# ---- the loop -------------------------------------------------------------------------------

def compiled(torch, model, name):
    """The model through torch.compile (default mode; the first step, untimed, compiles it)."""
    if not hasattr(torch, "compile"):
        raise BadInput("--torch-compile needs torch 2.0 or later (this Python has torch %s)"
                       % torch.__version__)
    try:
        return torch.compile(model), name + " (torch.compile)"
    except Exception as e:
        raise BadInput("torch.compile of %s: %s" % (name, last_line(e)))


class Run:
    def __init__(self, torch, spec, model, dev, cuda, classes, autocast_dtype, builtin):
        self.torch, self.spec, self.model, self.dev, self.cuda = torch, spec, model, dev, cuda
        self.classes, self.builtin = classes, builtin
        self.train = spec["train"]
        self.autocast_dtype = autocast_dtype
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
                    if self.train else None)
        g = torch.Generator(device="cpu")
        g.manual_seed(spec["seed"])
        # formats without labels: seeded class labels (the loop measures time, not learning)
        self.seeded = torch.randint(0, classes, (spec["batch"],), generator=g).to(dev)
        self.image_size = getattr(model, "image_size", None) if builtin else None
        self.labelled = spec["format"] == "imagefolder"  # the others' labels are -1

    def ctx(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.dev.type, dtype=self.autocast_dtype)

    def adapt(self, x, y):
        """The built-in models take 3 channels (grey repeated) and, for ViT, their image size."""
        torch = self.torch
        # no look at the labels' values here: that would wait for the device every step
        if not self.labelled or y is None or y.numel() != x.shape[0]:
            y = self.seeded[:x.shape[0]]
        if self.builtin:
            if x.ndim == 4 and x.shape[1] == 1:
                x = x.expand(-1, 3, -1, -1)
            if self.image_size and x.shape[-1] != self.image_size:
                x = torch.nn.functional.interpolate(x, size=(self.image_size, self.image_size),
                                                    mode="bilinear", align_corners=False)
            if self.cuda:
                x = x.contiguous(memory_format=torch.channels_last)
        return x, y

    def step(self, x, y):
        x, y = self.adapt(x, y)
        if self.train:
            with self.ctx():
                out = self.model(x)
                loss = self.loss_fn(out.float(), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        else:
            with self.torch.inference_mode(), self.ctx():
                out = self.model(x)
        return out

    def probe(self, x, y):
        """One step on a real batch before anything is timed: the model's output must be one
        row of class scores per image, as many classes as the labels need."""
        torch = self.torch
        x2, y2 = self.adapt(x, y)
        shape = "x".join(str(s) for s in x2.shape)

        def failed(e):
            if is_oom(torch, e):
                return e
            return BadInput("the model fails on a batch of %s (labels %s): %s"
                            % (shape, "x".join(str(s) for s in y2.shape), last_line(e)))
        try:  # the output's shape first, without gradients (no optimiser step)
            with torch.no_grad(), self.ctx():
                out = self.model(x2)
        except Exception as e:
            raise failed(e)
        if not torch.is_tensor(out):
            raise BadInput("the model's output is %s, not a tensor of class scores (batch %s)"
                           % (type(out).__name__, shape))
        need = int(y2.max().item()) + 1
        if out.ndim != 2 or out.shape[0] != x2.shape[0] or (self.train and out.shape[1] < need):
            raise BadInput("the model's output (%s) does not match the labels: a batch of %s "
                           "needs (%d, >= %d) class scores"
                           % ("x".join(str(s) for s in out.shape), shape, x2.shape[0], need))
        try:
            self.step(x, y)
        except Exception as e:
            raise failed(e)
        self.sync()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def round(self, it, drain, steps):
        torch, now = self.torch, time.perf_counter_ns
        for _ in range(drain):  # what it queued while the others ran
            next(it)
        t0 = now()
        self.step(*next(it))
        self.sync()
        first = (now() - t0) / 1e9
        mark = None
        if self.cuda:
            mark = torch.cuda.Event(enable_timing=True)
            mark.record()
        w0 = now()
        wait, host, spans = [], [], []
        for _ in range(steps):
            a = now()
            x, y = next(it)
            b = now()
            if self.cuda:
                s = torch.cuda.Event(enable_timing=True)
                s.record()
            self.step(x, y)
            if self.cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                spans.append((s, e))
            host.append((now() - a) / 1e9)
            wait.append((b - a) / 1e9)
        self.sync()
        window = (now() - w0) / 1e9
        if self.cuda:
            busy = sum(s.elapsed_time(e) for s, e in spans) / 1e3
            ends = [mark.elapsed_time(e) / 1e3 for _, e in spans]
            step_s = [ends[0]] + [ends[i] - ends[i - 1] for i in range(1, len(ends))]
        else:
            busy = sum(h - w for h, w in zip(host, wait))
            step_s = host
        return {"first_step_s": first, "step_s": step_s, "wait_s": wait, "window_s": window,
                "busy_s": min(busy, window), "samples": steps * self.spec["batch"],
                "drained": drain}


def is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    text = str(e)
    return isinstance(e, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "not enough memory" in text or isinstance(e, MemoryError))


def free_memory(torch, dev, cuda):
    if cuda:
        try:
            free, total = torch.cuda.mem_get_info(dev)
            return "%.2f GiB of %.2f GiB free on %s" % (free / 2**30, total / 2**30,
                                                        torch.cuda.get_device_name(dev))
        except Exception:
            return "free device memory unknown"
    try:
        with open("/proc/meminfo") as f:
            info = dict(l.split(":", 1) for l in f)
        avail = int(info["MemAvailable"].split()[0]) * 1024
        total = int(info["MemTotal"].split()[0]) * 1024
        return "%.2f GiB of %.2f GiB free (host memory)" % (avail / 2**30, total / 2**30)
    except (OSError, KeyError, ValueError):
        return "free memory unknown"


def resolve_device(torch, want):
    if want in (None, "", "auto"):
        if torch.cuda.is_available():
            return "cuda", ""
        return "cpu", "torch sees no usable GPU"
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BadInput("--device %s: torch %s sees no usable GPU" % (want, torch.__version__))
        return want, ""
    if want == "cpu":
        return "cpu", ""
    raise BadInput("--device %s: the torch framework runs on cpu or cuda" % want)


def main():
    spec = json.load(open(sys.argv[1]))
    result_path = sys.argv[2]
    if spec.get("library"):
        os.environ["PIPEBENCH_LIB"] = spec["library"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        out = measure(spec)
    except BadInput as e:
        write_json(result_path, {"error": str(e)})
        sys.exit(EXIT_BAD_INPUT)
    write_json(result_path, out)


def measure(spec):
    try:
        import torch
    except ImportError:
        raise BadInput("--framework torch: torch is not installed for %s (--python names "
                       "another)" % sys.executable)
    torch.manual_seed(spec["seed"])
    device, why = resolve_device(torch, spec.get("device"))
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if cuda:
        torch.backends.cudnn.benchmark = True
    dtype = spec.get("dtype") or ("bfloat16" if cuda else "float32")
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": None}
    if dtype not in dtypes:
        raise BadInput("--dtype %s: the torch framework takes bfloat16, float16 or float32" % dtype)
    fmt = spec["format"]
    folder = fmt == "imagefolder"
    if folder and not spec.get("vary"):
        # images of one size: the crop transforms keep it where it is under 224 (a tree of small
        # images is not blown up to 224 x 224)
        import pipebench
        shape = pipebench.Dataset(spec["path"], format=fmt).meta(0)["shape"]
        side = int(min(shape[-2], shape[-1]))
        if side < spec["crop"]:
            spec["crop"] = side
            spec["resize"] = side * 256 // 224
    classes = max(count_classes(spec["path"]), 2) if folder else 10
    if spec.get("torch_model"):
        model, model_name = user_model(torch, spec, classes)
        builtin = False
    else:
        model_name = spec["model"]
        model = builtin_model(torch, model_name, classes)
        builtin = True
    model = model.to(dev)
    if cuda and builtin:
        model = model.to(memory_format=torch.channels_last)
    model.train(spec["train"])
    if spec.get("compile"):
        model, model_name = compiled(torch, model, model_name)
    if folder or spec.get("vary"):
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    else:
        mean, std = (0.5,), (0.5,)
    notes = []
    if why:
        notes.append("device cpu: %s" % why)
    run = Run(torch, spec, model, dev, cuda, classes, dtypes[dtype], builtin)
    feeders = {}
    # torch's workers are forked before pipebench's threads and buffers exist (a fork after
    # them would make the parent's batch memory copy-on-write).
    dl, no_dl = torch_dataloader(torch, spec, dev, cuda, mean, std)
    if dl is None:
        notes.append("no torch DataLoader row: %s" % no_dl)
    else:
        next(dl[0])  # its workers start (fork) here, untimed
    try:
        pbf, native = pipebench_loader(torch, spec, dev, mean, std)
    except BadInput:
        raise
    except Exception as e:
        raise BadInput("pipebench.torch.Loader over %s: %s" % (spec["path"], last_line(e)))
    feeders["pipebench"] = pbf
    if dl is not None:
        feeders["torch-dataloader"] = dl
    x0, y0 = next(pbf[0])
    batch_shape = "x".join(str(s) for s in x0.shape)
    mode = "training" if spec["train"] else "inference"
    try:
        run.probe(x0, y0)
        xr, yr = x0.clone(), (y0.clone() if y0 is not None else None)
        resident = (forever(lambda: iter([(xr, yr)])), "device-resident (one batch, reused)", 0)
        feeders["resident"] = resident
        rows = []
        for r in range(spec["repeats"]):
            for name, (it, loader, drain) in feeders.items():
                if name == "resident":
                    # The bound is measured on a quiet host: the feeder before it has just had
                    # its queue emptied, and its workers refilling it would slow the thread that
                    # launches the kernels (the event spans would then hold launch gaps).
                    time.sleep(SETTLE_S)
                row = run.round(it, drain, spec["steps"])
                row.update(feeder=name, round=r, loader=loader)
                rows.append(row)
                print("round %d %-16s %9.1f images/s  busy %5.1f%%  waiting %5.1f%%"
                      % (r, name, row["samples"] / row["window_s"],
                         100 * row["busy_s"] / row["window_s"],
                         100 * sum(row["wait_s"]) / row["window_s"]), file=sys.stderr, flush=True)
    except Exception as e:
        if not is_oom(torch, e):
            raise
        dt = "%s autocast" % dtype if dtypes[dtype] is not None else dtype
        raise BadInput("out of %s memory in %s: %s on a batch of %s (%s): %s; %s"
                       % ("device" if cuda else "host", mode, model_name, batch_shape, dt,
                          last_line(e), free_memory(torch, dev, cuda)))
    finally:
        native.close()
    import pipebench
    versions = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import torchvision
        versions["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    return {"device": "cuda" if cuda else "cpu",
            "device_name": torch.cuda.get_device_name(dev) if cuda else "",
            "dtype": dtype, "model": model_name, "classes": classes, "batch": spec["batch"],
            "batch_shape": batch_shape, "library": pipebench.library_path(),
            "versions": versions, "notes": notes, "rows": rows}


if __name__ == "__main__":
    main()
