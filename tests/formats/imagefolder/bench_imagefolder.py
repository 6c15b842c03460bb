#!/usr/bin/env python3
"""python/pipebench_imagefolder_bench.py: its wait for a quiet machine and a short run.

1. settle() waits while a child process (as a torch DataLoader worker is) still uses CPU, and
   returns soon once nothing of this process does; with a child that never stops it gives up at
   its limit and says so.
2. The script on a small tree (PIL writes it) with pipebench alone (--peers none) and with the
   torch peer where torch and torchvision are installed: exit 0, the table, and the JSON with
   the CPU layout, the steal shares and each row's batch count (max(20, 6 x workers) by default).

Usage: bench_imagefolder.py   (PIPEBENCH_LIB and PYTHONPATH set as for the binding's tests)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.normpath(os.path.join(here, "..", "..", ".."))
sys.path.insert(0, os.path.join(src, "python"))
import pipebench_imagefolder_bench as bench  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        failures += 1


# A child that burns a given amount of CPU time (runnable all along, however loaded the machine).
BUSY = "import time\nwhile time.process_time() < %f: pass\n"
# Under a loaded machine (make check) the child may get little of a CPU: the test asks settle
# for no tick at all in a window, which a child that is never descheduled for 0.2 s cannot pass.
QUIET = 0.01

# 1. A child busy for 1.5 s: settle waits for it.
child = subprocess.Popen([sys.executable, "-c", BUSY % 1.5])
time.sleep(0.2)
waited, settled = bench.settle(limit_s=20, below=QUIET)
child.wait()
check(settled and waited >= 0.9, "settle waits for a busy child (waited %.2f s)" % waited)
# Nothing running: it returns after about one window.
waited, settled = bench.settle(limit_s=20, below=QUIET)
check(settled and waited < 1.5, "settle returns at once on a quiet process (%.2f s)" % waited)
# A child busier than its limit: it gives up and says so.
child = subprocess.Popen([sys.executable, "-c", BUSY % 4.0])
time.sleep(0.2)
waited, settled = bench.settle(limit_s=1.0, below=QUIET)
child.kill()
child.wait()
check(not settled and 0.9 <= waited < 5.0, "settle gives up at its limit (%.2f s)" % waited)
# delivery_rate: waves of 4 batches of 10 images every 0.5 s are 80 images/s, also when the
# window catches only part of its first wave (the rest was taken before the clock started);
# images over the window's time would read up to 96.
for skip in range(4):
    times, counts = [], []
    for wave in range(8):
        for b in range(4):
            if wave * 4 + b < skip:
                continue
            times.append(0.3 + 0.5 * wave + 1e-4 * b)
            counts.append(10 * (len(counts) + 1))
    r = bench.delivery_rate(times, counts)
    check(abs(r - 80.0) < 4.0, "delivery_rate of waves, the first %d batches outside: %.1f images/s"
          % (skip, r))
steady = [0.01 * k for k in range(50)]
check(abs(bench.delivery_rate(steady, [5 * k for k in range(50)]) - 500.0) < 1e-6,
      "delivery_rate of a steady stream is its rate")
logical, cores = bench.cpu_layout()
check(logical >= 1 and (cores is None or 1 <= cores <= logical),
      "cpu_layout: %d logical, %s cores" % (logical, cores))

# 2. The script on a tree of 2 classes x 24 JPEGs of 300 x 260.
from PIL import Image  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    tree = os.path.join(d, "tree")
    for c in range(2):
        os.makedirs(os.path.join(tree, "c%d" % c))
        for k in range(24):
            img = Image.new("RGB", (300, 260), (40 * c + k, 90, 200 - 5 * k))
            img.save(os.path.join(tree, "c%d" % c, "%02d.jpg" % k), quality=90)
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        peer_sets = ["none", "pil"]
    except ImportError:
        peer_sets = ["none"]
    for peers in peer_sets:
        out = os.path.join(d, "loaders-%s.json" % peers)
        p = subprocess.run([sys.executable, os.path.join(src, "python", "pipebench_imagefolder_bench.py"),
                            tree, "--workers", "1,2", "--batch", "4", "--rounds", "2",
                            "--transforms", "train", "--peers", peers, "--json", out],
                           capture_output=True, text=True, timeout=240)
        check(p.returncode == 0, "bench with --peers %s exits 0 (%s)" % (peers, p.stderr[-300:]))
        check("cpus: %d logical" % logical in p.stdout, "bench prints the CPU layout")
        check("train           1" in p.stdout, "bench prints its table")
        if p.returncode != 0:
            continue
        j = json.load(open(out))
        rows = j["rows"]
        check([r["batches"] for r in rows] == [20, 20], "rounds time max(20, 6 x workers) batches")
        check(all(r["images_per_s"]["pipebench"] > 0 for r in rows), "pipebench's rates are positive")
        check(all("pipebench" in r["steal"] for r in rows), "steal recorded per loader")
        check(all(len(r["rounds_wall"]["pipebench"]) == 2 for r in rows),
              "each round's wall-time rate kept beside the slope")
        check(j["cpus"]["logical"] == logical, "the JSON holds the CPU layout")
        if peers == "pil":
            check(all(len(r["over_pil_rounds"]) == 2 and r["over_pil"] > 0 for r in rows),
                  "each round's own ratio to torch+PIL")
    p = subprocess.run([sys.executable, os.path.join(src, "python", "pipebench_imagefolder_bench.py"),
                        tree, "--workers", "x", "--peers", "none"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 2 and "--workers" in p.stderr, "a nonsense worker count is a usage error")
    p = subprocess.run([sys.executable, os.path.join(src, "python", "pipebench_imagefolder_bench.py"),
                        os.path.join(d, "missing"), "--peers", "none"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 2 and "missing: no such folder" in p.stderr and "Traceback" not in p.stderr,
          "a missing folder is named, without a traceback")

print("%d failed" % failures)
sys.exit(1 if failures else 0)
