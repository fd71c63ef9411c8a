"""argsort, sort and topk (dialect/sort.py: the values, or (key, index) pairs for
argsort, sorted by vectors; argtopk), compiled, side by side with numpy and jax.jit.

    .venv/bin/python bench/sort.py           # 4096x1024 along the last axis, 1024x4096
                                             # along axis 0, 1M elements in one row; f64; topk

Medians of interleaved rounds with a pause before each call (bench/elementwise.py's
`measure`), and ratios to the compiled mirax kernel. argsort is stable in MLX, so its
peers are stable too (numpy `kind="stable"`, jax's default); its target: at least as
fast as numpy's stable argsort (TARGETS). sort's peer is numpy's default sort of values
(x86-simd-sort's vectorized quicksort: AVX-512 / AVX2 sorting networks), what a user
would pick; its target (SORT_TARGETS): at least as fast. A language model's vocabulary
rows (64 x 50000) are sorted too.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _host  # noqa: E402,F401  (the peers' environment, before numpy and jax load)

import numpy as np  # noqa: E402

import mirax as mr  # noqa: E402
from _host import describe  # noqa: E402
from elementwise import jax, jnp, judge, measure, report  # noqa: E402

TARGETS = {"numpy": 1.0}  # argsort: compiled at least as fast as numpy's stable argsort
CASES = [((4096, 1024), -1), ((1024, 4096), 0), ((1 << 20,), 0), ((64, 50000), -1)]
SORT_TARGETS = {"numpy": 1.0}  # sort: compiled at least as fast as numpy's (default) sort
# topk (dialect/sort.py argtopk: the k largest by insertion): a 4096^2 array's rows, a
# language model's sampling (64 rows of a 50k vocabulary, k = 40), one long row;
# target (this benchmark's): at least as fast as jax.jit's lax.top_k
TOPK = [((4096, 4096), 8), ((64, 50000), 40), ((1 << 20,), 10)]
TOPK_TARGETS = {"jax.jit": 1.0}
# 64-bit values (argsort: the radix sort moving the indices beside the keys, or the merge
# sort for short rows); numpy alone beside them (jax computes in f32 unless x64 is on)
WIDE_CASES = [((1024, 1024), -1), ((1 << 20,), 0), ((16384, 64), -1)]


def main():
    print(describe())
    rng = np.random.default_rng(0)
    for shape, axis in CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        xa = mr.array(x)
        for name, f, npf, jf in [
                ("argsort", lambda v: mr.argsort(v, axis=axis), lambda: np.argsort(x, axis=axis, kind="stable"),
                 lambda v: jnp.argsort(v, axis=axis)),
                ("sort", lambda v: mr.sort(v, axis=axis), lambda: np.sort(x, axis=axis),
                 lambda v: jnp.sort(v, axis=axis))]:
            c = mr.compile(f)
            got = np.asarray(c(xa))
            want = npf()
            if not np.array_equal(got, want):
                raise SystemExit(f"{name} {shape} axis {axis}: mirax differs from numpy")
            cands = {"mirax compiled": lambda c=c: mr.eval(c(xa)), "numpy": npf}
            if jax is not None:
                xj = jnp.asarray(x)
                jfn = jax.jit(jf)
                jfn(xj).block_until_ready()
                cands["jax.jit"] = lambda jfn=jfn, xj=xj: jfn(xj).block_until_ready()
            res = measure(cands)
            report(f"{name} {shape} f32 along axis {axis}", res, x.nbytes)
            judge(cands, TARGETS if name == "argsort" else SORT_TARGETS)
    for shape, axis in WIDE_CASES:
        x = rng.standard_normal(shape)
        xa = mr.array(x, dtype=mr.float64)
        for name, f, npf in [
                ("argsort", lambda v: mr.argsort(v, axis=axis), lambda: np.argsort(x, axis=axis, kind="stable")),
                ("sort", lambda v: mr.sort(v, axis=axis), lambda: np.sort(x, axis=axis))]:
            c = mr.compile(f)
            if not np.array_equal(np.asarray(c(xa)), npf()):
                raise SystemExit(f"{name} {shape} f64 axis {axis}: mirax differs from numpy")
            cands = {"mirax compiled": lambda c=c: mr.eval(c(xa)), "numpy": npf}
            report(f"{name} {shape} f64 along axis {axis}", measure(cands), x.nbytes)
            judge(cands, TARGETS if name == "argsort" else SORT_TARGETS)
    for shape, k in TOPK:
        x = rng.standard_normal(shape).astype(np.float32)
        xa = mr.array(x)
        c = mr.compile(lambda v: mr.topk(v, k, axis=-1))
        npf = lambda: np.partition(x, -k, axis=-1)[..., -k:]  # noqa: E731  (the k largest, unordered)
        if not np.array_equal(np.asarray(c(xa)), np.sort(npf(), axis=-1)):
            raise SystemExit(f"topk {shape} k {k}: mirax differs from numpy")
        cands = {"mirax compiled": lambda c=c, xa=xa: mr.eval(c(xa)), "numpy partition": npf}
        if jax is not None:
            xj = jnp.asarray(x)
            jfn = jax.jit(lambda v: jax.lax.top_k(v, k)[0])
            jfn(xj).block_until_ready()
            cands["jax.jit"] = lambda jfn=jfn, xj=xj: jfn(xj).block_until_ready()
        res = measure(cands)
        report(f"topk {shape} f32, k = {k}", res, x.nbytes)
        judge(cands, TOPK_TARGETS)


if __name__ == "__main__":
    main()
