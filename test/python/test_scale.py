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


def _transformer_step_ir(layers):
    """(mirax ops, LLVM dialect ops, most operands of one call) of a small transformer LM
    training step (examples/transformer_lm.py's model; forward, backward, AdamW) lowered
    by mirax-cpu-pipeline (no JIT: the LLVM-dialect text only)."""
    import re
    import sys
    from pathlib import Path
    import mirax.optimizers as optim
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from transformer_lm import TransformerLM, make_step
    mr.random.seed(0)
    model = TransformerLM(12, 8, 16, 2, layers)
    opt = optim.AdamW(learning_rate=1e-3, weight_decay=0.01)
    step = make_step(model, opt)
    x = mr.array(np.zeros((4, 8), np.int32))
    low = step.lower(x, x)
    n_mirax = len(re.findall(r'"mirax\.', low.as_text("simplified")))
    llvm = low.as_text("llvm")
    n_llvm = len(re.findall(r"^\s*(%\S+ = )?llvm\.", llvm, re.M))
    widest = max(m.group(1).count("%") for m in re.finditer(r"llvm\.call @\w+\(([^)]*)\)", llvm))
    return n_mirax, n_llvm, widest


def test_transformer_step_llvm_ir_stays_small():
    """The LLVM IR of a training step grows linearly and stays small (issue 12: a 2-layer
    step was 1.6 MB of LLVM IR and ~10 s of LLVM). Loop nests become functions of their
    own, identical ones shared (the layers), called with aligned pointers rather than
    memref descriptors. Measured on this model: ~24 LLVM-dialect ops per mirax op, a
    layer adding ~0.4x of a 1-layer step, at most 9 call operands; before: 49 per op,
    1.2x per layer, calls of 1,109 operands."""
    ops1, llvm1, _ = _transformer_step_ir(1)
    ops2, llvm2, widest = _transformer_step_ir(2)
    assert ops2 > 1.4 * ops1
    assert llvm2 / ops2 < 32, f"{llvm2} LLVM ops for {ops2} mirax ops"
    assert llvm2 - llvm1 < 0.6 * llvm1, f"one more layer: {llvm1} -> {llvm2} LLVM ops"
    assert widest <= 32, f"a call with {widest} operands (memref descriptors passed field by field?)"
