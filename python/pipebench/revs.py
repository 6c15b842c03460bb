"""Metrics from inside your own training or prediction code, for `pipebench revs`.

`pipebench revs` runs your command on each branch with the environment variable
PIPEBENCH_METRICS naming a file; write your timings there as JSON and revs compares them
across branches (docs/revs.md has the keys). This module needs only the standard library.

    from pipebench.revs import Recorder

    rec = Recorder()                      # file from PIPEBENCH_METRICS; nothing written without
    with rec.time("total_training"):
        with rec.time("model_initialization"):
            model = build_model()
        with rec.time("data_setup"):
            data = build_data()
        with rec.time("epoch_breakdown.first_epoch"):
            train_one_epoch(model, data)
    rec.set("dataset_info.num_train_batches", len(data))
    rec.save()                            # also done when the with-block of the Recorder ends

Each timing is stored as {"elapsed_seconds": ...} at its dotted path, as the guide's JSON shows;
set() stores a plain number. PyTorch Lightning users add `MetricsCallback(rec)` (importable
only where Lightning is installed) to the Trainer's callbacks instead of timing by hand.
"""

import json
import os
import time
from contextlib import contextmanager

__all__ = ["Recorder", "ENV"]

ENV = "PIPEBENCH_METRICS"


class Recorder:
    """Collects timings and numbers under dotted paths and writes them as nested JSON."""

    def __init__(self, path=None):
        self.path = path if path is not None else os.environ.get(ENV)
        self.data = {}

    def _slot(self, dotted):
        parts = [p for p in dotted.split(".") if p]
        if not parts:
            raise ValueError("empty metric name")
        node = self.data
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"metric '{dotted}': '{p}' already holds a number")
            node = nxt
        return node, parts[-1]

    def set(self, dotted, value):
        """Stores a number (or any JSON value) at a dotted path; returns the value."""
        node, key = self._slot(dotted)
        node[key] = value
        return value

    def set_seconds(self, dotted, seconds):
        """Stores {"elapsed_seconds": seconds} at a dotted path (keeps other keys there)."""
        node, key = self._slot(dotted)
        entry = node.get(key)
        if not isinstance(entry, dict):
            entry = {}
            node[key] = entry
        entry["elapsed_seconds"] = float(seconds)

    @contextmanager
    def time(self, dotted):
        """Times the with-block (time.perf_counter) into {"elapsed_seconds": ...} at dotted.
        The time is stored also when the block raises."""
        t0 = time.perf_counter()
        try:
            yield self
        finally:
            self.set_seconds(dotted, time.perf_counter() - t0)

    def get(self, dotted, default=None):
        node = self.data
        for p in dotted.split("."):
            if not isinstance(node, dict) or p not in node:
                return default
            node = node[p]
        return node

    def save(self, path=None):
        """Writes the JSON (atomically: a temporary name, then a rename). Without a path and
        without PIPEBENCH_METRICS it writes nothing and returns None; else the path."""
        path = path if path is not None else self.path
        if not path:
            return None
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.save()
        return False


def _peak_gpu_mb():
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / (1024.0 * 1024.0)


try:  # the callback exists only where PyTorch Lightning does
    try:
        import lightning.pytorch as _pl
    except ImportError:
        import pytorch_lightning as _pl
except ImportError:
    _pl = None

if _pl is not None:

    class MetricsCallback(_pl.Callback):
        """Fills the guide's training keys from the Trainer's hooks: total_training (fit start
        to fit end), model_initialization (the callback's construction to fit start: create it
        before the model), data_setup (the setup hook to fit start),
        epoch_breakdown.first_epoch, data_loading_first_batch (epoch start to the first batch
        handed over), model_forward_first_batch (first batch start to its end),
        dataset_info.num_train_batches and batch_size, the final logged metrics and
        peak_gpu_memory_mb. Saves the Recorder when fitting ends."""

        def __init__(self, recorder=None):
            super().__init__()
            self.rec = recorder if recorder is not None else Recorder()
            self._t_created = time.perf_counter()
            self._t_fit = self._t_setup = self._t_epoch = self._t_batch = None
            self._first_epoch = True
            self._first_batch = True

        def setup(self, trainer, pl_module, stage=None):
            self._t_setup = time.perf_counter()

        def on_fit_start(self, trainer, pl_module):
            now = time.perf_counter()
            self._t_fit = now
            self.rec.set_seconds("model_initialization", now - self._t_created)
            if self._t_setup is not None:
                self.rec.set_seconds("data_setup", now - self._t_setup)

        def on_train_epoch_start(self, trainer, pl_module):
            self._t_epoch = time.perf_counter()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            now = time.perf_counter()
            if self._first_batch and self._t_epoch is not None:
                self.rec.set_seconds("epoch_breakdown.data_loading_first_batch",
                                     now - self._t_epoch)
            self._t_batch = now

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self._first_batch and self._t_batch is not None:
                self.rec.set_seconds("epoch_breakdown.model_forward_first_batch",
                                     time.perf_counter() - self._t_batch)
                self._first_batch = False

        def on_train_epoch_end(self, trainer, pl_module):
            if self._first_epoch and self._t_epoch is not None:
                self.rec.set_seconds("epoch_breakdown.first_epoch",
                                     time.perf_counter() - self._t_epoch)
                self._first_epoch = False

        def on_fit_end(self, trainer, pl_module):
            if self._t_fit is not None:
                self.rec.set_seconds("total_training", time.perf_counter() - self._t_fit)
            nb = trainer.num_training_batches
            if isinstance(nb, (int, float)) and nb == nb and nb != float("inf"):
                self.rec.set("dataset_info.num_train_batches", int(nb))
            dl = getattr(trainer, "train_dataloader", None)
            bs = getattr(dl, "batch_size", None)
            if isinstance(bs, int):
                self.rec.set("dataset_info.batch_size", bs)
            for k, v in trainer.callback_metrics.items():
                try:
                    self.rec.set("final_metrics." + k.replace(".", "_"), float(v))
                except (TypeError, ValueError):
                    pass
            gpu = _peak_gpu_mb()
            if gpu is not None:
                self.rec.set("peak_gpu_memory_mb", gpu)
            self.rec.save()

    __all__.append("MetricsCallback")
