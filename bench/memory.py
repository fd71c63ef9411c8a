"""Memory held by compiled kernels and by repeated calls, each measured in a fresh process.

    python bench/memory.py [--kernels 1000] [--calls 10000]

1. `--kernels` distinct eager kernels (exp over n elements, n = 2..) compiled into an
   empty cache directory: RSS growth of the process (target: 1,000 kernels < 200 MB).
2. The same kernels again in a new process, loaded from the disk cache.
3. `--calls` calls of a compiled function (a small MLP layer) after 100 warm-up calls:
   RSS growth (target: flat, < 5 MB).
RSS is read from /proc/self/status (VmRSS) in MB; "base" is the process after importing
mirax and running one op.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from _host import describe

CHILD = r"""
import json, sys, time
import numpy as np
import mirax as mr
from mirax.runtime import cpu, disk_cache

def rss():
    with open("/proc/self/status") as f:
        for l in f:
            if l.startswith("VmRSS"):
                return int(l.split()[1]) / 1024

which, n = sys.argv[1], int(sys.argv[2])
mr.eval(mr.exp(mr.ones((1,))))
base = rss()
t = time.perf_counter()
if which == "kernels":
    for i in range(n):
        mr.eval(mr.exp(mr.full((i + 2,), 0.5)))
    disk_cache.flush()
else:
    w = mr.array(np.random.rand(64, 64).astype(np.float32))
    f = mr.compile(lambda x, w: mr.maximum(x @ w, 0.0).sum(axis=1))
    x = mr.array(np.random.rand(32, 64).astype(np.float32))
    for _ in range(100):
        mr.eval(f(x, w))
    base = rss()
    for _ in range(n):
        mr.eval(f(x, w))
print(json.dumps({"base": base, "grow": rss() - base, "seconds": time.perf_counter() - t,
                  "stats": cpu.stats.as_dict()}))
"""


def child(which, n, cache):
    env = dict(os.environ, MIRAX_CACHE_DIR=cache)
    r = subprocess.run([sys.executable, "-c", CHILD, which, str(n)], env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=10000)
    a = ap.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as cache:
        cold = child("kernels", a.kernels, cache)
        warm = child("kernels", a.kernels, cache)
        calls = child("calls", a.calls, cache)
    print(f"{'case':44} {'base MB':>8} {'grew MB':>8} {'per item':>10} {'seconds':>8}")
    for name, r, n in ((f"{a.kernels} distinct eager kernels, compiled", cold, a.kernels),
                       (f"{a.kernels} distinct eager kernels, from disk", warm, a.kernels),
                       (f"{a.calls} calls of a compiled function", calls, a.calls)):
        print(f"{name:44} {r['base']:8.1f} {r['grow']:8.1f} {r['grow'] * 1024 / n:8.2f}KB {r['seconds']:8.2f}")
    print(f"compiled: {cold['stats']['compiles']} kernels; from disk: {warm['stats']['disk_hits']}")
    ok = cold["grow"] < 200 * a.kernels / 1000 and calls["grow"] < 5
    print("targets (1,000 kernels < 200 MB, calls flat < 5 MB):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
