"""The CUDA backend: needs an NVIDIA GPU and driver; PTX itself is tested everywhere
(test_ptx.py, lit). These run where `mr.cuda.is_available()`, and skip elsewhere."""
import numpy as np
import pytest

import mirax as mr


def test_cuda_availability_is_reported():
    assert isinstance(mr.cuda.is_available(), bool)
    if not mr.cuda.is_available():
        from mirax.runtime.cuda import CudaDevice
        assert CudaDevice.why_unavailable()  # says why (no libcuda.so.1, no device)


needs_cuda = pytest.mark.skipif(not mr.cuda.is_available(), reason="needs an NVIDIA GPU and its driver")


@needs_cuda
def test_eager_compiled_and_training_on_cuda_match_the_cpu():
    assert mr.gpu.backend.kind == "cuda"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1000)).astype(np.float32)
    a, b = rng.standard_normal((200, 100)).astype(np.float32), rng.standard_normal((100, 70)).astype(np.float32)
    f = mr.compile(lambda a, b: mr.softmax(a @ b, axis=-1))
    want = np.asarray(f(mr.array(a), mr.array(b)))
    with mr.stream(mr.gpu):
        y = mr.softmax(mr.array(x), axis=-1)
        got = f(mr.array(a), mr.array(b))
        s = mr.cumsum(mr.array(x), axis=1)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(y), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(s), np.cumsum(x, 1), rtol=1e-4, atol=1e-3)
