"""Eager-op overhead on a kernel-cache hit and cold kernel compile latency, beside numpy.

    python bench/eager_overhead.py

Targets (issue 2): a cached eager op under 50 us; a cold op kernel under 100 ms.
Prints medians of interleaved rounds and the ratios mirax / numpy.
"""
import os
import statistics
import tempfile
import time

# a fresh kernel cache, so "cold" really compiles (bench/cache.py measures the disk cache)
os.environ["MIRAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="mirax-bench-")

import numpy as np

import mirax as mr
from mirax.device import cpu


def per_call(fn, n=2000):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def main(rounds=7):
    a_np = np.arange(16, dtype=np.float32)
    b_np = np.ones(16, np.float32)
    a, b = mr.array(a_np), mr.array(b_np)
    mr.eval(a + b, mr.exp(a))  # warm the kernel cache

    def mirax_add():
        mr.eval(a + b)

    def mirax_exp():
        mr.eval(mr.exp(a))

    rows = {"add (16 f32)": (mirax_add, lambda: np.add(a_np, b_np)),
            "exp (16 f32)": (mirax_exp, lambda: np.exp(a_np))}
    print(f"{'op':<16}{'mirax us':>10}{'numpy us':>10}{'ratio':>8}")
    for name, (mf, nf) in rows.items():
        ms, ns = [], []
        for _ in range(rounds):  # interleave the contenders
            ms.append(per_call(mf))
            ns.append(per_call(nf))
        m, n = statistics.median(ms) * 1e6, statistics.median(ns) * 1e6
        print(f"{name:<16}{m:>10.1f}{n:>10.2f}{m / n:>8.1f}x   target < 50 us: {'ok' if m < 50 else 'MISSED'}")

    # a tiny compiled function on a cache hit: the whole Python call path
    fc = mr.compile(lambda x, y: mr.exp(-x) + y)
    x0, y0 = mr.array(1.0), mr.array(2.0)
    fc(x0, y0)
    cs = []
    for _ in range(rounds):
        cs.append(per_call(lambda: fc(x0, y0)))
    c = statistics.median(cs) * 1e6
    print(f"{'compiled exp(-x)+y':<16}{c:>10.1f}{'':>10}{'':>8}   target <= 20 us: {'ok' if c <= 20 else 'MISSED'}")

    colds = []
    for i in range(rounds):
        x = mr.ones((3, 5 + i))  # a new shape: a new kernel
        mr.eval(x)
        y = mr.tanh(x)
        before = cpu.kernels.compiles
        t = time.perf_counter()
        mr.eval(y)
        colds.append(time.perf_counter() - t)
        assert cpu.kernels.compiles == before + 1
    c = statistics.median(colds) * 1e3
    print(f"cold tanh kernel compile + run: {c:.1f} ms (median of {rounds})   target < 100 ms: "
          f"{'ok' if c < 100 else 'MISSED'}")


if __name__ == "__main__":
    main()
