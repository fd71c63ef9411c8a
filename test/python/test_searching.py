"""count_nonzero, searchsorted, convolve and segmented_mm against numpy (MLX's
signatures, dtypes and errors), under grad, vmap and compile."""
import numpy as np
import pytest

import mirax as mr


def test_count_nonzero():
    c = np.array([[0, 1, 0], [2, 3, 0]], dtype=np.int32)
    x = mr.array(c)
    assert mr.count_nonzero(x).item() == 3 and mr.count_nonzero(x).dtype == mr.int32
    assert mr.count_nonzero(x, 0).tolist() == [1, 2, 0]
    assert mr.count_nonzero(x, axis=1, keepdims=True).tolist() == [[1], [2]]
    assert mr.count_nonzero(x, axis=(0, 1)).item() == 3
    f = np.array([[0.0, -0.5, np.nan], [0.0, 0.0, 2.0]], dtype=np.float32)
    assert mr.count_nonzero(mr.array(f), axis=-1).tolist() == np.count_nonzero(f, axis=-1).tolist()
    assert mr.count_nonzero(mr.array([True, False, True])).item() == 2
    with pytest.raises(TypeError):
        mr.count_nonzero(x, 0, True)   # keepdims is keyword-only, as in MLX


def test_count_nonzero_vmap_compile():
    c = np.array([[0, 1, 0], [2, 3, 0]], dtype=np.float32)
    assert mr.vmap(mr.count_nonzero)(mr.array(c)).tolist() == [1, 2]
    assert mr.compile(lambda a: mr.count_nonzero(a, axis=0))(mr.array(c)).tolist() == [1, 2, 0]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9])
def test_searchsorted_matches_numpy(rng, side, n):
    a = np.sort(rng.integers(-3, 4, n)).astype(np.float32)   # with repeats, so the sides differ
    v = rng.integers(-5, 6, (3, 4)).astype(np.float32)
    got = mr.searchsorted(mr.array(a), mr.array(v), side=side)
    assert got.dtype == mr.uint32 and got.shape == v.shape
    np.testing.assert_array_equal(np.asarray(got), np.searchsorted(a, v, side=side))


def test_searchsorted_dtypes_nan_empty():
    a = mr.array([1, 2, 2, 4])
    assert mr.searchsorted(a, mr.array([0, 2, 3, 5])).tolist() == [0, 1, 3, 4]
    assert mr.searchsorted(a, mr.array([0, 2, 3, 5]), "right").tolist() == [0, 3, 3, 4]
    # promoted, not truncated: 4.5 goes after the 4
    assert mr.searchsorted(mr.array([1, 3, 4, 7]), mr.array([4.5])).tolist() == [3]
    assert mr.searchsorted(a, mr.array(3)).shape == ()
    nan = mr.array([float("nan")])
    assert mr.searchsorted(mr.array([1.0, 2.0, 3.0]), nan).tolist() == [3]
    with_nan = mr.array([1.0, 2.0, float("nan")])
    assert mr.searchsorted(with_nan, nan).tolist() == [2]
    assert mr.searchsorted(with_nan, nan, side="right").tolist() == [3]
    assert mr.searchsorted(with_nan, mr.array([5.0])).tolist() == [2]
    assert mr.searchsorted(mr.array(np.zeros(0, np.float32)), mr.array([1.0, -1.0])).tolist() == [0, 0]


def test_searchsorted_vmap_compile(rng):
    seq = mr.arange(8, dtype=mr.float32)
    vs = rng.uniform(0, 10, (3, 5)).astype(np.float32)
    want = np.searchsorted(np.arange(8), vs)
    np.testing.assert_array_equal(np.asarray(mr.vmap(lambda x: mr.searchsorted(seq, x))(mr.array(vs))), want)
    f = mr.compile(lambda s, x: mr.searchsorted(s, x, side="right"))
    np.testing.assert_array_equal(np.asarray(f(seq, mr.array(vs))), np.searchsorted(np.arange(8), vs, "right"))


def test_searchsorted_errors():
    with pytest.raises(ValueError, match="side"):
        mr.searchsorted(mr.array([1.0]), mr.array([1.0]), side="middle")
    with pytest.raises(ValueError, match="1-D"):
        mr.searchsorted(mr.zeros((2, 2)), mr.array([1.0]))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n,m", [(6, 3), (7, 4), (2, 5), (1, 1)])
def test_convolve_matches_numpy(rng, mode, n, m):
    a, v = rng.standard_normal(n).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    got = mr.convolve(mr.array(a), mr.array(v), mode)
    want = np.convolve(a, v, mode)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_convolve_grad_vmap_compile(rng):
    a, v = rng.standard_normal(6).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    g = mr.grad(lambda x: mr.convolve(x, mr.array(v)).sum())(mr.array(a))
    np.testing.assert_allclose(np.asarray(g), np.full(6, v.sum()), rtol=1e-5)   # d/da sum(a * v) = sum(v)
    batch = rng.standard_normal((2, 6)).astype(np.float32)
    got = mr.vmap(lambda x: mr.convolve(x, mr.array(v), "same"))(mr.array(batch))
    np.testing.assert_allclose(np.asarray(got), np.stack([np.convolve(r, v, "same") for r in batch]),
                               rtol=1e-5, atol=1e-5)
    f = mr.compile(lambda x, w: mr.convolve(x, w, "valid"))
    np.testing.assert_allclose(np.asarray(f(mr.array(a), mr.array(v))), np.convolve(a, v, "valid"),
                               rtol=1e-5, atol=1e-5)


def test_convolve_errors():
    with pytest.raises(ValueError, match="1-D"):
        mr.convolve(mr.zeros((2, 2)), mr.zeros(2))
    with pytest.raises(ValueError, match="empty"):
        mr.convolve(mr.zeros(0), mr.zeros(2))
    with pytest.raises(ValueError, match="mode"):
        mr.convolve(mr.zeros(3), mr.zeros(2), mode="circular")


def _segmented_ref(a, b, segments):
    flat = segments.reshape(-1, 2)
    out = np.stack([a[:, s:e] @ b[s:e, :] for s, e in flat])
    return out.reshape(segments.shape[:-1] + (a.shape[0], b.shape[1]))


@pytest.mark.parametrize("m,n", [(3, 5), (5, 2)])   # the mask goes on a, then on b
def test_segmented_mm_matches_loop(rng, m, n):
    a = rng.standard_normal((m, 8)).astype(np.float32)
    b = rng.standard_normal((8, n)).astype(np.float32)
    segments = np.array([[[0, 3], [3, 8]], [[2, 2], [5, 1]]], dtype=np.uint32)   # empty and reversed give zeros
    got = mr.segmented_mm(mr.array(a), mr.array(b), mr.array(segments))
    assert got.shape == (2, 2, m, n) and got.dtype == mr.float32
    np.testing.assert_allclose(np.asarray(got), _segmented_ref(a, b, segments), rtol=1e-5, atol=1e-5)


def test_segmented_mm_grad_vmap_compile(rng):
    a = rng.standard_normal((3, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    seg = np.array([[0, 2], [2, 6]], dtype=np.int32)
    g = mr.grad(lambda x: mr.segmented_mm(x, mr.array(b), mr.array(seg)).sum())(mr.array(a))
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(b.sum(1), (3, 6)), rtol=1e-5)   # segments tile K
    batch = rng.standard_normal((2, 3, 6)).astype(np.float32)
    got = mr.vmap(lambda x: mr.segmented_mm(x, mr.array(b), mr.array(seg)))(mr.array(batch))
    np.testing.assert_allclose(np.asarray(got), np.stack([_segmented_ref(x, b, seg) for x in batch]),
                               rtol=1e-5, atol=1e-5)
    f = mr.compile(mr.segmented_mm)
    np.testing.assert_allclose(np.asarray(f(mr.array(a), mr.array(b), mr.array(seg))), _segmented_ref(a, b, seg),
                               rtol=1e-5, atol=1e-5)


def test_segmented_mm_errors():
    seg = mr.array([[0, 1]])
    with pytest.raises(ValueError, match="matrices"):
        mr.segmented_mm(mr.ones((2, 2, 2)), mr.ones((2, 2, 2)), seg)
    with pytest.raises(ValueError, match=r"\(\.\.\., 2\)"):
        mr.segmented_mm(mr.ones((2, 2)), mr.ones((2, 2)), mr.array([0, 1, 2]))
    with pytest.raises(ValueError, match="floating"):
        mr.segmented_mm(mr.array([[1, 2]]), mr.array([[1], [2]]), seg)
    with pytest.raises(ValueError, match="integers"):
        mr.segmented_mm(mr.ones((2, 2)), mr.ones((2, 2)), mr.array([[0.0, 1.0]]))
