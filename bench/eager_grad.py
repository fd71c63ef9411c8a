"""Eager transforms vs their compiled versions: per-call time of `mr.grad` of a small MLP
and of `nn.value_and_grad` of the same model, beside `mr.compile` of the same functions,
and (where the transform cache exists) with that cache off, i.e. retracing and re-running
the transform pass on every call as before it.

    .venv/bin/python bench/eager_grad.py [--layers 4] [--width 64] [--batch 32] [--rounds 7]

Prints the host, medians of interleaved rounds (ms per call, the result evaluated) and
the ratios to the compiled call. Target (issue 12): eager grad within 2x of compiled.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load: _host.cap_peers)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import mirax as mr  # noqa: E402
import mirax.nn as nn  # noqa: E402
from _host import describe  # noqa: E402

try:
    from mirax.transforms import cache as _tcache
except ImportError:  # before the transform cache
    _tcache = None


@contextlib.contextmanager
def cache_off():
    """The transforms as they ran before the cache: trace and pass on every call."""
    _tcache.set_enabled(False)
    try:
        yield
    finally:
        _tcache.set_enabled(True)


def per_call(fn, n):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20, help="calls per contender per round")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w, L = args.width, args.layers
    params = {"w": [mr.array((rng.standard_normal((w, w)) / np.sqrt(w)).astype(np.float32)) for _ in range(L)],
              "b": [mr.array(np.zeros(w, np.float32)) for _ in range(L)]}
    x = mr.array(rng.standard_normal((args.batch, w)).astype(np.float32))
    y = mr.array(rng.standard_normal((args.batch, w)).astype(np.float32))

    def loss(p, x, y):
        h = x
        for i, (wi, bi) in enumerate(zip(p["w"], p["b"])):
            h = h @ wi + bi
            if i < L - 1:
                h = mr.maximum(h, 0.0)
        return ((h - y) ** 2).mean()

    layers = []
    for i in range(L):
        layers.append(nn.Linear(w, w))
        if i < L - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    mr.eval(model.parameters())

    def model_loss(x, y):
        return nn.losses.mse_loss(model(x), y, reduction="mean")

    eager_grad = mr.grad(loss)
    compiled_grad = mr.compile(mr.grad(loss))
    eager_nn = nn.value_and_grad(model, model_loss)
    compiled_nn = mr.compile(nn.value_and_grad(model, model_loss), inputs=[model.state])

    rows = {
        "grad compiled": lambda: mr.eval(compiled_grad(params, x, y)),
        "grad eager": lambda: mr.eval(eager_grad(params, x, y)),
        "nn.value_and_grad compiled": lambda: mr.eval(compiled_nn(x, y)),
        "nn.value_and_grad eager": lambda: mr.eval(eager_nn(x, y)),
    }
    if _tcache is not None:
        def uncached(fn):
            def run():
                with cache_off():
                    fn()
            return run
        rows["grad eager, cache off"] = uncached(rows["grad eager"])
        rows["nn.value_and_grad eager, cache off"] = uncached(rows["nn.value_and_grad eager"])
    t0 = time.perf_counter()
    for _ in range(12):  # warm up: traces, kernels, the transform cache's compiled tier
        for fn in rows.values():
            fn()
    warm = time.perf_counter() - t0
    times = {k: [] for k in rows}
    for _ in range(args.rounds):
        for k, fn in rows.items():  # interleaved
            times[k].append(per_call(fn, args.calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(describe())
    print(f"MLP {L} layers x {w} wide, batch {args.batch}; ms per call, median of {args.rounds} interleaved "
          f"rounds of {args.calls} calls (warm-up {warm:.1f} s)")
    for k, m in med.items():
        ref = med["grad compiled" if k.startswith("grad") else "nn.value_and_grad compiled"]
        print(f"  {k:<36} {m * 1e3:8.2f} ms   {m / ref:6.2f}x compiled")
    ratio = med["grad eager"] / med["grad compiled"]
    print(f"eager grad / compiled grad: {ratio:.2f}x   target <= 2x: {'ok' if ratio <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
