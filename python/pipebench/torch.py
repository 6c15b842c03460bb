"""pipebench's loader as the data source of a torch training script.

    from pipebench.torch import Loader
    loader = Loader("imagenet/train", batch_size=256, device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:      # CUDA tensors, normalised, labels int64
            ...

Images are decoded, cropped and batched by pipebench's native workers (no Python per image),
into page-locked host memory; each batch is copied to the GPU on a stream of its own while the
previous one is being used, and normalised per channel there (ImageNet's mean and std by
default). Under torch.distributed the rank and world size are picked up and each rank reads its
own shard of every epoch's order, as DistributedSampler does (drop_last by default, so every
rank gets the same number of batches). docs/python.md shows a DataLoader script switched over.
"""

import collections
import os

import torch

from . import Loader as _NativeLoader

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_HOST_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _dist_rank_world():
    d = torch.distributed
    if d.is_available() and d.is_initialized():
        return d.get_rank(), d.get_world_size()
    return 0, 1


class _EpochSetter:
    """What Lightning looks for (loader.sampler.set_epoch) to start each epoch's order."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)


class Loader:
    """Batches of (images, labels) as torch tensors on `device`.

    Loader(path, batch_size=256, device="cuda", transform="random_resized_crop", workers=None,
           shuffle=True, seed=42, drop_last=True, rank=None, world_size=None,
           mean=IMAGENET_MEAN, std=IMAGENET_STD, channels_last=True, host_dtype="float16",
           prefetch=2, **options)

    images: float32 (N, C, H, W) in channels-last memory order on the device, (x/max - mean)/std
    per channel (mean/std of length 1 apply to every channel); labels: int64 (N,), the class
    folder's index for image folders, -1 for formats without labels.

    transform: "random_resized_crop" (training), "center_crop_resize" (evaluation: resize to
    `resize` then centre crop), "random_crop", "normalize" or "none" (as pipebench.Loader).
    workers: native decode threads (default: every CPU). host_dtype: what crosses to the GPU
    (float16 halves the bytes of float32 and holds every uint8 value exactly). rank/world_size:
    default torch.distributed's, else 0 and 1. Other keywords (crop, resize, scale, ratio, flip,
    cache, format, reduced_decode, skip_errors, reads_in_flight, bytes_in_flight) go to
    pipebench.Loader.

    Each iteration is one epoch: the one given to set_epoch() last, else the one after the
    previous iteration's (so a script that never calls set_epoch still gets a new order per
    epoch). len() is the number of batches one rank gets per epoch.
    """

    def __init__(self, path, batch_size=256, device="cuda", transform="random_resized_crop",
                 workers=None, shuffle=True, seed=42, drop_last=True, rank=None, world_size=None,
                 mean=IMAGENET_MEAN, std=IMAGENET_STD, channels_last=True, host_dtype="float16",
                 prefetch=2, **options):
        if host_dtype not in _HOST_DTYPES:
            raise ValueError("host_dtype must be one of %s" % sorted(_HOST_DTYPES))
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise RuntimeError("pipebench.torch.Loader: device %s asked for, but torch sees no "
                               "usable GPU" % self.device)
        if self._cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        r, w = _dist_rank_world()
        self.rank = r if rank is None else int(rank)
        self.world_size = w if world_size is None else int(world_size)
        if workers is None:
            workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self._native = _NativeLoader(
            path, batch_size=batch_size, workers=int(workers), shuffle=shuffle, seed=seed,
            transform=transform, dtype=host_dtype, mean=0.0, std=1.0, prefetch=prefetch,
            drop_last=drop_last, rank=self.rank, world_size=self.world_size,
            pinned=self._cuda, **options)
        mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        if mean.numel() != std.numel():
            raise ValueError("mean and std must have the same length")
        if not torch.all(std != 0):
            raise ValueError("std must not be 0")
        self._mean = mean.to(self.device)
        self._inv_std = (1.0 / std).to(self.device)
        self._channels_last = bool(channels_last)
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._next_epoch = 0
        self.sampler = _EpochSetter(self)

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (its order is seed + epoch, as DistributedSampler)."""
        self._next_epoch = int(epoch)

    def __len__(self):
        return len(self._native)

    def close(self):
        if getattr(self, "_native", None) is not None:
            self._native.close()
            self._native = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self):
        """The native loader's totals (pipebench.Loader.stats)."""
        return self._native.stats()

    def _normalise(self, x):
        c = x.shape[1]
        mean = self._mean if self._mean.shape[1] in (1, c) else None
        if mean is None:
            raise ValueError("mean/std have %d values, the images %d channels"
                             % (self._mean.shape[1], c))
        x = x.float()
        if self._channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x.sub_(self._mean).mul_(self._inv_std)

    def _start(self, b):
        """Starts batch b on its way to the device; returns what the consumer needs."""
        host = b.torch()
        labels = torch.from_numpy(b.labels.astype("int64"))
        b.release()  # host holds the memory (DLPack) until it is dropped
        if not self._cuda:
            return self._normalise(host), labels, None, None
        with torch.cuda.stream(self._stream):
            x = host.to(self.device, non_blocking=True)
            y = labels.to(self.device, non_blocking=True)
            x = self._normalise(x)
            done = torch.cuda.Event()
            done.record(self._stream)
        return x, y, done, host

    def __iter__(self):
        if self._native is None:
            raise ValueError("loader closed")
        epoch = self._next_epoch
        self._next_epoch = epoch + 1
        self._native.reset(epoch)
        in_use = collections.deque()  # (event, pinned host tensor) until the copy is done
        b = self._native.next()
        nxt = self._start(b) if b is not None else None
        while nxt is not None:
            x, y, done, host = nxt
            b = self._native.next()
            nxt = self._start(b) if b is not None else None  # overlaps the consumer's step
            if done is not None:
                stream = torch.cuda.current_stream(self.device)
                stream.wait_event(done)
                x.record_stream(stream)
                y.record_stream(stream)
                in_use.append((done, host))
                while len(in_use) > 2:  # long finished: the pinned memory may go back
                    ev, _ = in_use.popleft()
                    ev.synchronize()
            yield x, y
        for ev, _ in in_use:
            ev.synchronize()


def _lightning():
    try:
        import lightning.pytorch as pl
        return pl
    except ImportError:
        pass
    try:
        import pytorch_lightning as pl
        return pl
    except ImportError:
        return None


_pl = _lightning()

if _pl is not None:

    class DataModule(_pl.LightningDataModule):
        """A Lightning DataModule over pipebench's loader: training batches with
        random_resized_crop + flip, validation with center_crop_resize, on the trainer's device,
        sharded by the trainer's rank and world size. Keywords go to pipebench.torch.Loader."""

        def __init__(self, train, val=None, batch_size=256, workers=None, **options):
            super().__init__()
            self.train_path, self.val_path = train, val
            self.batch_size, self.workers, self.options = batch_size, workers, options

        def _loader(self, path, training):
            t = self.trainer
            opts = dict(self.options)
            opts.setdefault("transform", "random_resized_crop" if training else "center_crop_resize")
            return Loader(path, batch_size=self.batch_size, workers=self.workers,
                          device=t.strategy.root_device if t is not None else "cuda",
                          rank=t.global_rank if t is not None else None,
                          world_size=t.world_size if t is not None else None,
                          shuffle=training, drop_last=training, **opts)

        def train_dataloader(self):
            return self._loader(self.train_path, True)

        def val_dataloader(self):
            return self._loader(self.val_path, False) if self.val_path else []
