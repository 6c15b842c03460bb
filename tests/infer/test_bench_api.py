"""The inference guide's Python API: BenchmarkConfig, run_inference_benchmark,
run_benchmark_suite and read_results over small runs (pipebench's engine in this process, the
torch peer as a child), errors as PipebenchError."""
import csv
import os
import sys
import tempfile

from pipebench import (BenchmarkConfig, PipebenchError, read_results, run_benchmark_suite,
                       run_inference_benchmark)

failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


def raises(fn, text):
    try:
        fn()
    except PipebenchError as e:
        check(text in str(e), f"message '{e}' lacks '{text}'")
        return
    check(False, f"no PipebenchError ('{text}')")


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)
    # the guide's call, every keyword as it shows them; a small model, two batch sizes
    config = BenchmarkConfig(framework='pipebench', model_name='embed', batch_sizes=[1, 2],
                             warmup_iterations=1, measurement_iterations=3, dtype='float32',
                             device_prefer='cpu', data_source='synthetic',
                             csv_output_dir='results/raw', verbose=True)
    results = run_inference_benchmark(config)
    check([r['batch_size'] for r in results] == [1, 2], results)
    check(all(r['n'] == 3 and r['warmup'] == 1 for r in results), "iterations and warm-up")
    path = results[0].get('csv_path', '')
    check(path.startswith('results/raw/benchmark_results_') and os.path.isfile(path), path)
    with open(path, newline='') as f:
        header = next(csv.reader(f))
    check(set(header) <= set(results[0]) and 'csv_path' not in header,
          "the rows have the CSV's columns")
    for r in results:
        want = r['batch_size'] / (r['latency_mean_ms'] / 1e3)
        check(abs(r['throughput_ips'] - want) <= 1e-9 * want, "throughput is batch / mean")
        check(r['memory_kind'] == 'cpu_peak_rss_growth' and r['memory_mb'] >= 0, r['memory_kind'])
    df = read_results(path)
    try:
        import pandas
        check(isinstance(df, pandas.DataFrame) and len(df) == 2, type(df))
        sel = df[(df['framework'] == 'onednn') & (df['model'] == 'embed')]
        check(list(sel['batch_size']) == [1, 2], sel)
    except ImportError:
        check(isinstance(df, list) and df[1]['batch_size'] == 2, df)
        print("pandas is not installed: read_results gave dicts")

    # the suite: one call, every model with every framework; jax is skipped where missing
    if have_torch():
        rows = run_benchmark_suite(models=['embed'], frameworks=['pytorch', 'jax'],
                                   batch_sizes=[1], warmup_iterations=0,
                                   measurement_iterations=2, verbose=False,
                                   csv_output_dir=None)
        fws = sorted({r['framework'] for r in rows})
        check('pytorch' in fws and all(r['model'] == 'embed' for r in rows), fws)
    else:
        print("torch is not installed: the suite's torch rows are not checked")

    # errors: the library's message in a PipebenchError
    raises(lambda: run_inference_benchmark(BenchmarkConfig(device_prefer='mps', verbose=False)),
           "device 'mps' is not available on this machine (it has: cpu")
    raises(lambda: run_inference_benchmark(BenchmarkConfig(device_prefer='tpu', verbose=False)),
           "'tpu'")
    raises(lambda: run_inference_benchmark(BenchmarkConfig(model_name='resnet18',
                                                           verbose=False)), "resnet18")
    raises(lambda: run_inference_benchmark(BenchmarkConfig(framework='pipebench',
                                                           input_shape=(1, 64, 64),
                                                           verbose=False)), "input_shape")
    bad = os.path.join(tmp, 'afile')
    open(bad, 'w').close()
    raises(lambda: run_inference_benchmark(BenchmarkConfig(framework='pipebench',
                                                           model_name='embed',
                                                           csv_output_dir=bad + '/raw',
                                                           verbose=False)), "afile")
    try:
        import jax  # noqa: F401
        print("jax is installed: the missing-jax refusal is not checked")
    except ImportError:
        raises(lambda: run_inference_benchmark(BenchmarkConfig(framework='jax', batch_sizes=[1],
                                                               measurement_iterations=1,
                                                               verbose=False,
                                                               csv_output_dir=None)),
               "nothing could run")
    os.chdir("/")

print("failures:", failures)
sys.exit(1 if failures else 0)
