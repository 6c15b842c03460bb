"""JAX peer of `pipebench infer`: flax.linen models with random weights, compiled with jax.jit,
timed under the same rules as pipebench's own engine.

Timing: the input is on the device before the clock starts; the function is lowered and compiled
ahead of time (that time is compilation_time_ms); --warmup passes run first and are dropped;
each timed pass runs from the call to block_until_ready() on its output. The C side computes the
statistics.

usage: pipebench_jax_infer.py --model M --dtype D --device cpu|cuda --warmup W --iterations I
           --seed S --input-dir DIR --batch-sizes 1 8 32 --out RESULT.json
DIR holds input_<batch>.npy (float32 NCHW) written by pipebench; JAX convolutions take NHWC, so
the input is transposed once, outside the timed loop. A dtype other than float32 casts the
weights and the input (as `.to(dtype)` does in torch).

RESULT.json gets one object: framework_version, device_name, and either "skipped" (JAX or flax
is not installed, or the device has no JAX backend: not an error), "error", or "runs"."""
import argparse
import json
import os
import sys
import time

from pipebench_rss import rss_growth_bytes, rss_mark  # beside this script


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=0, help="accepted for symmetry; XLA decides")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--input-dir", required=True)
    ap.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    ap.add_argument("--out", help="result JSON (default: stdout)")
    return ap.parse_args(argv)


def models(nn, jnp):
    """The three models as flax.linen modules (NHWC input)."""

    class Embed(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(32, (3, 3), padding=1)(x))
            x = nn.relu(nn.Conv(64, (3, 3), padding=1)(x))
            return nn.Dense(128)(jnp.mean(x, axis=(1, 2)))

    class Bottleneck(nn.Module):
        width: int
        stride: int
        project: bool

        @nn.compact
        def __call__(self, x):
            bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
            y = nn.relu(bn()(nn.Conv(self.width, (1, 1), use_bias=False)(x)))
            y = nn.Conv(self.width, (3, 3), strides=self.stride, padding=1, use_bias=False)(y)
            y = nn.relu(bn()(y))
            y = bn()(nn.Conv(self.width * 4, (1, 1), use_bias=False)(y))
            if self.project:
                x = bn()(nn.Conv(self.width * 4, (1, 1), strides=self.stride, use_bias=False)(x))
            return nn.relu(x + y)

    class ResNet50(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(64, (7, 7), strides=2, padding=3, use_bias=False)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=True)(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
            for i, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)]):
                for b in range(blocks):
                    stride = 2 if b == 0 and i > 0 else 1
                    x = Bottleneck(width, stride, b == 0)(x)
            return nn.Dense(1000)(jnp.mean(x, axis=(1, 2)))

    class EncoderBlock(nn.Module):
        heads: int
        mlp: int

        @nn.compact
        def __call__(self, x):
            y = nn.LayerNorm(epsilon=1e-6)(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(y, y)
            y = nn.LayerNorm(epsilon=1e-6)(x)
            y = nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(self.mlp)(y), approximate=False))
            return x + y

    class ViTB16(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(768, (16, 16), strides=16, padding="VALID")(x)
            n = x.shape[0]
            x = x.reshape(n, -1, 768)
            cls = self.param("cls", nn.initializers.zeros, (1, 1, 768), jnp.float32)
            x = jnp.concatenate([jnp.broadcast_to(cls, (n, 1, 768)).astype(x.dtype), x], axis=1)
            pos = self.param("pos", nn.initializers.normal(0.02), (1, x.shape[1], 768),
                             jnp.float32)
            x = x + pos.astype(x.dtype)
            for _ in range(12):
                x = EncoderBlock(12, 3072)(x)
            x = nn.LayerNorm(epsilon=1e-6)(x)
            return nn.Dense(1000)(x[:, 0])

    return {"embed": Embed, "resnet50": ResNet50, "vit_b_16": ViTB16}


def pick_device(jax, name):
    """The first JAX device of the platform, or None with the reason."""
    platform = "gpu" if name == "cuda" else "cpu"
    try:
        devs = jax.devices(platform)
    except RuntimeError as e:
        return None, f"jax {jax.__version__} has no {name} backend ({e})"
    return (devs[0], "") if devs else (None, f"jax {jax.__version__} sees no {name} device")


def peak_memory(dev, mark_kib):
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"], "device_peak_bytes_in_use"
    return rss_growth_bytes(mark_kib), "cpu_peak_rss_growth"


def measure(a, out):
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        import flax
        import flax.linen as nn
    except ImportError as e:
        out["skipped"] = f"jax or flax is not installed for {sys.executable} ({e})"
        return
    out["framework_version"] = jax.__version__
    out["versions"] = f"jax {jax.__version__}, flax {flax.__version__}"
    dev, why = pick_device(jax, a.device)
    if dev is None:
        out["skipped"] = why
        return
    out["device_name"] = getattr(dev, "device_kind", str(dev))
    table = models(nn, jnp)
    if a.model not in table:
        out["error"] = f"unknown model '{a.model}'"
        return
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[a.dtype]
    model = table[a.model]()
    key = jax.random.PRNGKey(a.seed)
    results = []
    variables = None
    total, done, last = len(a.batch_sizes) * (a.warmup + a.iterations), 0, 0.0

    def progress(text, force=True):  # pipebench shows these while the peer runs
        nonlocal last
        if force or time.monotonic() - last >= 5.0:
            sys.stderr.write(f"pipebench-progress: {done} {total} {text}\n")
            sys.stderr.flush()
            last = time.monotonic()

    for bs in a.batch_sizes:
        progress(f"jit {a.model} batch {bs}: compiling")
        x = np.load(os.path.join(a.input_dir, f"input_{bs}.npy")).transpose(0, 2, 3, 1)
        x = jax.device_put(jnp.asarray(x, dtype=dtype), dev)
        if variables is None:  # random weights, built once, cast like the input
            with jax.default_device(dev):
                v = model.init(key, x[:1].astype(jnp.float32))
            variables = jax.device_put(jax.tree_util.tree_map(lambda t: t.astype(dtype), v), dev)
        t0 = time.perf_counter_ns()
        fn = jax.jit(model.apply).lower(variables, x).compile()
        compile_ms = (time.perf_counter_ns() - t0) / 1e6
        lat = []
        mark = None
        for i in range(a.warmup + a.iterations):
            if i == a.warmup:  # memory is measured over the timed passes only
                mark = rss_mark()
            t = time.perf_counter_ns()
            fn(variables, x).block_until_ready()
            dt = time.perf_counter_ns() - t
            done += 1
            progress(f"jit {a.model} batch {bs}: pass {i + 1} of {a.warmup + a.iterations}",
                     force=False)
            if i >= a.warmup:
                lat.append(dt)
        mem, kind = peak_memory(dev, mark)
        results.append({"batch_size": bs, "latencies_ns": lat, "compile_ms": compile_ms,
                        "memory_bytes": mem, "memory_kind": kind})
    out["runs"] = [{"framework": "jax", "memory_format": "channels_last", "results": results}]


def main(argv=None):
    a = parse_args(argv)
    out = {"framework": "jax", "framework_version": "", "device": a.device, "device_name": "",
           "threads": a.threads}
    try:
        measure(a, out)
    except Exception as e:  # the C side fails the run with this message
        out["error"] = f"{type(e).__name__}: {e}"
    text = json.dumps(out)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
