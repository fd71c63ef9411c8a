"""The Metal runtime: runs on macOS only (PyObjC's Metal). Everything up to the MSL text
is tested on every machine (test_msl.py, lit); these tests need a Mac."""
import sys

import numpy as np
import pytest

import mirax as mr


def test_metal_availability_is_reported():
    """MLX's `mx.metal.is_available()`: never true off macOS (mr.gpu is Vulkan there)."""
    assert isinstance(mr.metal.is_available(), bool)
    if sys.platform != "darwin":
        assert not mr.metal.is_available()
        assert mr.gpu.backend.kind in ("vulkan", "cuda")


needs_metal = pytest.mark.skipif(not mr.metal.is_available(), reason="Metal runs on macOS only")


@needs_metal
def test_eager_and_compiled_ops_on_metal_match_numpy():
    from mirax.runtime.metal import MetalDevice
    assert mr.gpu.backend is MetalDevice.get()
    x = np.random.default_rng(0).standard_normal((6, 1000)).astype(np.float32)
    with mr.stream(mr.gpu):
        y = mr.softmax(mr.array(x), axis=-1)
        z = mr.compile(lambda a, b: a @ b)(mr.array(x[:, :64]), mr.array(x[:64, :96]))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(y), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(z), x[:, :64] @ x[:64, :96], rtol=1e-4, atol=1e-4)


@needs_metal
def test_float64_is_refused_on_metal():
    with pytest.raises(mr.MiraxError, match="float64"):
        with mr.stream(mr.gpu):
            mr.eval(mr.array(np.ones(3)) + 1)
