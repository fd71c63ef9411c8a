"""Scale (issue 11): long programs trace, transform and compile (the times are in
bench/scale.py: 10,000 ops within ~12x of 1,000)."""
import numpy as np

import mirax as mr


def chain(n, step=0.5):
    def f(x):
        for i in range(n):
            x = mr.sin(x) * 1.0001 if i % 2 else x + step
        return x.sum()
    return f


def chain_np(n, x, step=0.5):
    """The chain and its derivative in float64 numpy (forward mode along the chain)."""
    x = x.astype(np.float64)
    d = np.ones_like(x)
    for i in range(n):
        if i % 2:
            d = np.cos(x) * 1.0001 * d
            x = np.sin(x) * 1.0001
        else:
            x = x + step
    return x.sum(), d


def test_grad_through_ten_thousand_ops():
    x = np.linspace(-1, 1, 8)
    g = mr.grad(chain(10_000))(mr.array(x))
    _, want = chain_np(10_000, x)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-9, atol=1e-12)


def test_compiled_long_chain_is_split_and_correct(monkeypatch):
    """4,500 ops: above mirax-outline-kernels' threshold, so LLVM gets several functions."""
    from mlir import ir
    from mirax.runtime import cpu
    monkeypatch.setenv("MIRAX_CACHE_DIR", "")  # compile now, not a cache hit
    cpu.clear_memory_cache()
    parts = []
    lower = cpu.lower_to_llvm

    def spy(m):
        lower(m)
        parts.extend(ir.StringAttr(f.attributes["sym_name"]).value for f in m.operation.regions[0].blocks[0].operations
                     if f.operation.name == "llvm.func" and "_part" in ir.StringAttr(f.attributes["sym_name"]).value)
    monkeypatch.setattr(cpu, "lower_to_llvm", spy)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    got = float(mr.compile(chain(4_500, 0.001))(mr.array(x)))
    want, _ = chain_np(4_500, x, 0.001)
    assert abs(got - want) < 1e-3
    assert len(parts) >= 2 and "main_part0" in parts
