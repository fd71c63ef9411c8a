"""Composite ops as one node in eager code (python/mirax/fused.py)."""
import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
from mirax.fused import FUSED

RNG = np.random.default_rng(7)
XS = RNG.standard_normal((5, 12)).astype(np.float32)


def _one_node(y, *inputs):
    assert y._prim is FUSED and y._data is None  # lazy, as any eager op
    assert list(y._inputs) == list(inputs)


def test_eager_composites_are_one_node_with_the_compositions_values():
    x = mr.array(XS)
    w, b = mr.array(RNG.standard_normal(12).astype(np.float32)), mr.array(RNG.standard_normal(12).astype(np.float32))
    cases = [
        (lambda: mr.softmax(x, axis=-1), [x], lambda: np.exp(XS) / np.exp(XS).sum(-1, keepdims=True)),
        (lambda: mr.logsumexp(x, axis=1), [x], lambda: np.log(np.exp(XS).sum(1))),
        (lambda: mr.mean(x, 0), [x], lambda: XS.mean(0)),  # a positional axis
        (lambda: mr.var(x, axis=-1, ddof=1), [x], lambda: XS.var(-1, ddof=1)),
        (lambda: mr.std(x), [x], lambda: XS.std()),
        (lambda: nn.gelu(x), [x], None),
        (lambda: nn.silu(x), [x], lambda: XS / (1 + np.exp(-XS))),
        (lambda: nn.log_softmax(x, axis=0), [x], None),
        (lambda: mr.fast.layer_norm(x, w, b, 1e-5), [x, w, b], None),
        (lambda: mr.fast.rms_norm(x, None, 1e-6), [x], None),
    ]
    for make, inputs, ref in cases:
        y = make()
        _one_node(y, *inputs)
        got = np.asarray(y)
        if ref is not None:
            np.testing.assert_allclose(got, ref(), rtol=2e-5, atol=1e-6)
    # the compositions themselves, op by op, agree
    np.testing.assert_allclose(np.asarray(mr.softmax(x, axis=-1)),
                               np.asarray(mr.softmax.composition(x, axis=-1)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(nn.gelu(x)), np.asarray(nn.gelu.composition(x)), rtol=1e-6, atol=1e-7)


def test_a_linear_layer_is_one_node():
    layer = nn.Linear(12, 3)
    x = mr.array(XS)
    y = layer(x)
    _one_node(y, x, layer.weight, layer.bias)
    ref = XS @ np.asarray(layer.weight).T + np.asarray(layer.bias)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-6)
    plain = nn.Linear(12, 3, bias=False)
    _one_node(plain(x), x, plain.weight)


def test_lazy_inputs_and_users_around_a_fused_node():
    x = mr.array(XS)
    h = mr.exp(x)  # not evaluated
    y = mr.softmax(h * 0.5, axis=-1) + 1.0
    got = np.asarray(y)
    e = np.exp(np.exp(XS) * 0.5)
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True) + 1, rtol=2e-5)


def test_traces_see_the_composition():
    x = mr.array(XS)
    text = mr.compile(lambda t: mr.softmax(t, axis=-1)).lower(x).as_text("mirax")
    assert "mirax.exp" in text and "fused" not in text
    g = mr.grad(lambda t: mr.logsumexp(t, axis=-1).sum())(x)  # the softmax of each row
    np.testing.assert_allclose(np.asarray(g), np.exp(XS) / np.exp(XS).sum(-1, keepdims=True), rtol=1e-5)
    v = mr.vmap(lambda r: mr.softmax(r))(x)
    np.testing.assert_allclose(np.asarray(v), np.exp(XS) / np.exp(XS).sum(-1, keepdims=True), rtol=1e-5)


def test_not_fused_with_compile_disabled_or_on_another_device():
    x = mr.array(XS)
    mr.disable_compile()
    try:
        assert mr.softmax(x, axis=-1)._prim is not FUSED
    finally:
        mr.enable_compile()
    assert mr.softmax(x, axis=-1)._prim is FUSED
    assert mr.fast.rms_norm(x, None, 1e-6, stream=mr.cpu)._prim is not FUSED  # a stream: as asked
    if mr.is_available(mr.gpu):
        with mr.stream(mr.gpu):
            y = mr.softmax(x, axis=-1)
        assert y._prim is not FUSED
        np.testing.assert_allclose(np.asarray(y), np.exp(XS) / np.exp(XS).sum(-1, keepdims=True), rtol=1e-5)


def test_errors_name_the_op_and_the_callers_line():
    x = mr.array(XS)
    with pytest.raises(mr.MiraxError, match=r"(?s)axis 5 is out of bounds.*test_fused\.py"):
        mr.softmax(x, axis=5)
    with pytest.raises(ValueError, match=r"(?s)weight must have the same size.*test_fused\.py"):
        mr.fast.rms_norm(x, mr.ones((3,)), 1e-5)


def test_a_lazy_fused_node_captured_by_a_trace_is_its_value():
    """An eager composite not evaluated yet, closed over by a compiled function or a
    transform, enters it as a constant (evaluated first), its inputs not traced."""
    x = mr.array(XS)
    y = mr.softmax(x, axis=-1)
    text = mr.compile(lambda t: t * y).lower(x).as_text("mirax")
    assert "fused" not in text and "mirax.exp" not in text
    y = mr.softmax(x, axis=-1)
    got = mr.compile(lambda t: t + y)(x)
    np.testing.assert_allclose(np.asarray(got), XS + np.asarray(y), rtol=1e-6)
    y = mr.softmax(x, axis=-1)
    g = mr.grad(lambda t: (t * y).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(y), rtol=1e-6)
