"""pipebench.infer/train from Python (the library functions the CLI calls), and the peer
scripts run on their own: what they time, what they write, how they skip."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import pipebench

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "python")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def binding():
    notes = []
    rows = pipebench.infer(batch_sizes=[1, 3], iterations=4, warmup=1, threads=1, notes=notes)
    check([r["batch_size"] for r in rows] == [1, 3], f"one row per batch size: {rows}")
    check(all(r["framework"] == "onednn" and r["n"] == 4 and r["warmup"] == 1 for r in rows),
          "engine rows with n = iterations")
    check(all(r["latency_p50_ms"] > 0 and r["throughput_ips"] > 0 for r in rows), "timings")
    check(rows[1]["input_shape"] == "3x1x100x100", rows[1]["input_shape"])
    check(notes and notes[0][0] == 0 and notes[0][1].startswith("device: cpu"), notes)
    try:
        pipebench.infer(frameworks=["pipebench", "mxnet"])
        check(False, "an unknown framework raises")
    except pipebench.PipebenchError as e:
        check(e.code == -10000 and "mxnet" in str(e), str(e))
    t = pipebench.train(num_images=8, batch_size=4, epochs=2, threads=1)
    check(t["steps"] == 4 and t["device"] == "cpu" and np.isfinite(t["final_loss"]), t)


def run_peer(script, args, env=None):
    with tempfile.TemporaryDirectory() as d:
        for bs in (1, 2):
            np.save(os.path.join(d, f"input_{bs}.npy"),
                    np.random.default_rng(bs).standard_normal((bs, 1, 16, 16), dtype=np.float32))
        out = os.path.join(d, "r.json")
        cmd = [sys.executable, os.path.join(PYDIR, script), "--model", "embed", "--input-dir", d,
               "--batch-sizes", "1", "2", "--out", out] + args
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        check(p.returncode == 0, f"{script} exits 0: {p.stderr[-500:]}")
        return json.load(open(out))


def blocked(name):
    d = tempfile.mkdtemp()
    os.makedirs(os.path.join(d, name))
    with open(os.path.join(d, name, "__init__.py"), "w") as f:
        f.write(f"raise ImportError('No module named {name} (blocked)')\n")
    env = dict(os.environ, PYTHONPATH=d)
    return env


def torch_peer():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: the torch peer's timing is not checked")
        return
    r = run_peer("pipebench_torch_infer.py", ["--iterations", "5", "--warmup", "2",
                                              "--threads", "1", "--modes", "eager,compile"])
    check("error" not in r and "skipped" not in r, r)
    runs = {x["framework"]: x for x in r.get("runs", [])}
    check("torch" in runs, f"an eager run: {list(runs)}")
    if "torch-compile" not in runs:
        check("compile" in r.get("skipped_modes", {}), "torch.compile missing is said, not hidden")
    for run in runs.values():
        for res, bs in zip(run["results"], (1, 2)):
            check(res["batch_size"] == bs and len(res["latencies_ns"]) == 5,
                  "warm-up passes dropped: 5 timed latencies")
            check(all(v > 0 for v in res["latencies_ns"]), "latencies positive")
            check(res["memory_kind"] == "cpu_peak_rss_growth" and "device_latencies_ns" not in res,
                  "CPU: no device timings")
    check(runs["torch"]["results"][0]["compile_ms"] == 0, "eager compiles nothing")
    # a CPU-only torch asked for cuda: skipped, not failed (or measured where CUDA exists)
    import torch
    r = run_peer("pipebench_torch_infer.py", ["--device", "cuda", "--iterations", "2"])
    if not torch.cuda.is_available():
        check("skipped" in r and "cuda" in r["skipped"], r)
    r = run_peer("pipebench_torch_infer.py", ["--iterations", "2"], env=blocked("torch"))
    check(r.get("skipped", "").startswith("torch is not installed"), r)


def jax_peer():
    r = run_peer("pipebench_jax_infer.py", ["--iterations", "2"], env=blocked("jax"))
    check(r.get("skipped", "").startswith("jax or flax is not installed"), r)
    check("runs" not in r and "error" not in r, r)
    try:
        import jax  # noqa: F401
        import flax  # noqa: F401
    except ImportError:
        print("jax is not installed: only the JAX peer's skip path is checked")
        return
    r = run_peer("pipebench_jax_infer.py", ["--iterations", "3", "--warmup", "1"])
    res = r["runs"][0]["results"]
    check([x["batch_size"] for x in res] == [1, 2], res)
    check(all(len(x["latencies_ns"]) == 3 and x["compile_ms"] > 0 for x in res), res)


binding()
torch_peer()
jax_peer()
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
