"""The inference benchmark as a configuration object and three functions:

    from pipebench import BenchmarkConfig, run_inference_benchmark, run_benchmark_suite, read_results

run_inference_benchmark and run_benchmark_suite call the library's pb_infer_run (the function
`pipebench infer` calls): pipebench's own engines run in this process, the torch and JAX peers as
child processes. Each returns a list of dicts, one per framework, model and batch size, with the
columns of the CSV it writes (results/raw/benchmark_results_YYYYMMDD_HHMMSS.csv by default).
Failures raise PipebenchError with the library's message. See docs/infer.md.
"""

import csv
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from . import PipebenchError, infer

__all__ = ["BenchmarkConfig", "run_inference_benchmark", "run_benchmark_suite", "read_results"]

_MODEL_INPUT = (3, 224, 224)  # resnet50 and vit_b_16


@dataclass
class BenchmarkConfig:
    """What one run_inference_benchmark call measures.

    framework: 'pytorch' (or 'torch'), 'torch-compile', 'jax', 'pipebench' (the engine on the
    device), 'onednn', 'cuda', 'both' (pytorch and jax), 'peers', 'all', or a list of them.
    model_name: 'resnet50', 'vit_b_16', 'embed', 'both', or a list. device_prefer: None (the GPU
    when one can run, else the CPU), 'cpu' or 'cuda'; 'mps' and 'tpu' raise PipebenchError
    naming the devices this machine has. input_shape: None, or (3, 224, 224) for the two image
    models (the only input they take). data_source: 'synthetic', a dataset, or a folder that
    `pipebench gen` wrote (data_format picks one of its formats). csv_output_dir: where the
    CSV and its environment JSON go (None: nowhere). verbose: print notes and one line per row.
    """

    framework: object = "pytorch"
    model_name: object = "resnet50"
    batch_sizes: List[int] = field(default_factory=lambda: [1, 8, 32, 128])
    warmup_iterations: int = 10
    measurement_iterations: int = 50
    input_shape: Optional[Tuple[int, ...]] = None
    dtype: str = "float32"
    device_prefer: Optional[str] = None
    data_source: str = "synthetic"
    csv_output_dir: Optional[str] = "results/raw"
    verbose: bool = True
    data_format: Optional[str] = None
    seed: int = 42
    threads: int = 0
    plot: bool = False
    python: Optional[str] = None
    peer_timeout_s: float = 0


def _names(v):
    return v if isinstance(v, str) else ",".join(v)


class _Printer(list):
    """The notes of a call, printed as they come when verbose."""

    def __init__(self, verbose):
        super().__init__()
        self.verbose = verbose

    def append(self, item):
        super().append(item)
        if self.verbose:
            level, line = item
            print(("warning: " if level else "") + line, flush=True)


def run_inference_benchmark(config):
    """Runs config; returns the rows (a list of dicts, the CSV's columns). The CSV's path is the
    'csv_path' key of each row (absent when csv_output_dir is None)."""
    if not isinstance(config, BenchmarkConfig):
        raise TypeError("run_inference_benchmark takes a BenchmarkConfig")
    if config.input_shape is not None:
        models = _names(config.model_name).split(",")
        if tuple(config.input_shape) != _MODEL_INPUT or "embed" in models:
            raise PipebenchError(-1, "input_shape %s: resnet50 and vit_b_16 take %s; leave it "
                                 "None" % (tuple(config.input_shape), _MODEL_INPUT))
    notes = _Printer(config.verbose)
    paths = []
    rows = infer(frameworks=_names(config.framework), model=_names(config.model_name),
                 batch_sizes=list(config.batch_sizes), iterations=config.measurement_iterations,
                 warmup=config.warmup_iterations, dtype=config.dtype,
                 device=config.device_prefer or "auto", threads=config.threads,
                 seed=config.seed, data_source=config.data_source,
                 output_dir=config.csv_output_dir, plot=config.plot, python=config.python,
                 peer_timeout_s=config.peer_timeout_s, notes=notes,
                 data_format=config.data_format, csv_path=paths)
    path = paths[0] if paths else None
    for r in rows:
        if path is not None:
            r["csv_path"] = path
        if config.verbose:
            print("%-16s %-9s batch %4d: mean %9.3f ms  throughput %9.1f images/s  memory %8.1f "
                  "MiB" % (r["framework"], r["model"], r["batch_size"], r["latency_mean_ms"],
                           r["throughput_ips"], r["memory_mb"] if r["memory_mb"] is not None
                           else float("nan")))
    return rows


def run_benchmark_suite(models=("resnet50", "vit_b_16"), frameworks=("pytorch", "jax"),
                        batch_sizes=(1, 8, 32, 128), **config):
    """Every model with every framework in one call (one CSV); a framework that is not installed
    is skipped with a note. Other keyword arguments are BenchmarkConfig fields."""
    cfg = BenchmarkConfig(framework=list(frameworks), model_name=list(models),
                          batch_sizes=list(batch_sizes), **config)
    return run_inference_benchmark(cfg)


def _convert(v):
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def read_results(path, output_dir=None):
    """A results CSV as a pandas DataFrame (pandas.read_csv), or as a list of dicts (numbers
    converted, empty cells None) when pandas is not installed. output_dir: the folder path is
    relative to."""
    if output_dir is not None:
        path = os.path.join(output_dir, path)
    try:
        import pandas
    except ImportError:
        pandas = None
    if pandas is not None:
        return pandas.read_csv(path)
    with open(path, newline="") as f:
        return [{k: _convert(v) for k, v in row.items()} for row in csv.DictReader(f)]
