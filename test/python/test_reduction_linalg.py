"""Reductions, cumsum and matmul against numpy (the oracle); every result runs through
the lowering and a JIT kernel."""
import numpy as np
import pytest

import mirax as mr
from mirax.dialect import PRIMITIVES

RNG = np.random.default_rng(0)


def A(x):
    """A mirax array keeping numpy's dtype (mr.array makes float64 data float32, as MLX)."""
    x = np.asarray(x)
    return mr.array(x, dtype=x.dtype)


def _rand(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) > 0.5
    if dtype.kind in "iu":
        return RNG.integers(-4 if dtype.kind == "i" else 0, 5, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _close(got, want, dtype=None):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        tol = 1e-3 if got.dtype == np.float16 else 1e-5 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


# ---- sum / prod / max / min ------------------------------------------------------------

CASES = [((), None), ((5,), None), ((5,), 0), ((3, 4), 1), ((3, 4), -1), ((3, 4), (0, 1)),
         ((2, 3, 4), (0, 2)), ((2, 3, 4), -2)]


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("shape,axis", CASES)
def test_reduce(name, dtype, shape, axis):
    x = _rand(shape, dtype)
    if name == "prod" and dtype != np.int32:
        x = (x * 0.5 + 1).astype(dtype)
    for keepdims in (False, True):
        got = getattr(mr, name)(A(x), axis=axis, keepdims=keepdims)
        want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
        _close(got, want.astype(dtype), dtype)


def test_reduce_methods_and_bool():
    x = _rand((3, 4), np.bool_)
    a = A(x)
    _close(a.sum(), x.sum(), np.int32)
    _close(a.sum(axis=0), x.sum(axis=0), np.int32)
    _close(a.max(axis=1), x.max(axis=1), np.bool_)
    _close(a.min(axis=1), x.min(axis=1), np.bool_)
    _close(a.prod(axis=1), x.prod(axis=1), np.int32)
    y = _rand((3, 4), np.uint8)
    _close(A(y).max(axis=0), y.max(axis=0), np.uint8)
    _close(A(y).min(axis=0), y.min(axis=0), np.uint8)
    z = _rand((2, 5), np.float16)
    _close(A(z).max(axis=1, keepdims=True), z.max(axis=1, keepdims=True), np.float16)


def test_sum_empty_and_max_empty_raises():
    x = np.zeros((3, 0), np.float32)
    _close(mr.sum(A(x), axis=1), x.sum(axis=1), np.float32)
    _close(mr.sum(A(x)), x.sum(), np.float32)
    _close(mr.prod(A(x), axis=1), x.prod(axis=1), np.float32)
    _close(mr.max(A(x), axis=0), x.max(axis=0), np.float32)  # (0,) result: fine
    with pytest.raises(ValueError, match="max"):
        mr.max(A(x), axis=1)
    with pytest.raises(ValueError, match="argmin"):
        mr.argmin(A(x), axis=1)


def test_max_min_nan_propagates():
    x = np.array([[1.0, np.nan, 3.0], [2.0, -1.0, 0.5]], np.float32)
    _close(mr.max(A(x), axis=1), np.max(x, axis=1))
    _close(mr.min(A(x), axis=1), np.min(x, axis=1))


# ---- argmax / argmin ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_arg(name, dtype):
    x = _rand((3, 4, 5), dtype)
    a = A(x)
    fn = getattr(np, name)
    for axis in (0, 1, -1, None):
        _close(getattr(mr, name)(a, axis=axis), fn(x, axis=axis), np.uint32)
    _close(getattr(a, name)(axis=1, keepdims=True), fn(x, axis=1, keepdims=True), np.uint32)
    _close(getattr(mr, name)(a, keepdims=True), fn(x, keepdims=True), np.uint32)


def test_arg_ties_and_nan():
    x = np.array([[1, 3, 3, 0, 0], [2, 2, 2, 2, 2], [-np.inf] * 5, [1, np.nan, 5, np.nan, -1]], np.float32)
    _close(mr.argmax(A(x), axis=1), np.argmax(x, axis=1))
    _close(mr.argmin(A(x), axis=1), np.argmin(x, axis=1))
    _close(mr.argmax(A(np.float32(3.0))), np.argmax(np.float32(3.0)))


# ---- compositions --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("shape,axis", [((5,), None), ((3, 4), 1), ((2, 3, 4), (0, 2)), ((3, 4), -2)])
def test_mean_var_std(dtype, shape, axis):
    x = _rand(shape, dtype)
    a = A(x)
    rd = np.float64 if dtype == np.float64 else np.float32
    _close(mr.mean(a, axis=axis), np.mean(x, axis=axis).astype(rd), rd)
    _close(a.mean(axis=axis, keepdims=True), np.mean(x, axis=axis, keepdims=True).astype(rd))
    _close(mr.var(a, axis=axis), np.var(x, axis=axis).astype(rd), rd)
    _close(mr.var(a, axis=axis, ddof=1), np.var(x, axis=axis, ddof=1).astype(rd))
    _close(a.std(axis=axis, keepdims=True), np.std(x, axis=axis, keepdims=True).astype(rd))


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


@pytest.mark.parametrize("shape,axis", [((5,), None), ((3, 4), -1), ((2, 3, 4), (0, 2)), ((3, 4), None)])
def test_logsumexp_softmax(shape, axis):
    x = (_rand(shape, np.float32) * 30).astype(np.float32)
    a = A(x)
    _close(mr.logsumexp(a, axis=axis), _np_logsumexp(x, axis))
    _close(a.logsumexp(axis=axis, keepdims=True), _np_logsumexp(x, axis, keepdims=True))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    _close(mr.softmax(a, axis=axis), e / e.sum(axis=axis, keepdims=True))


def test_logsumexp_inf():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]], np.float32)
    _close(mr.logsumexp(A(x), axis=1), np.array([-np.inf, 0.0], np.float32))


def test_all_any():
    x = np.array([[1.0, 0.0, 2.0], [1.0, 1.0, np.nan], [0.0, 0.0, 0.0]], np.float32)
    a = A(x)
    for axis in (None, 0, 1):
        _close(mr.all(a, axis=axis), np.all(x, axis=axis), np.bool_)
        _close(a.any(axis=axis, keepdims=True), np.any(x, axis=axis, keepdims=True), np.bool_)
    e = np.zeros((0, 2), np.int32)
    _close(mr.all(A(e)), np.all(e), np.bool_)
    _close(mr.any(A(e), axis=0), np.any(e, axis=0), np.bool_)
    assert mr.allclose(A(x[0]), A(x[0])).item()


# ---- cumsum ------------------------------------------------------------------------------

def _np_cumsum(x, axis, reverse, inclusive):
    if axis is None:
        x, axis = x.reshape(-1), 0
    y = np.flip(x, axis) if reverse else x
    c = np.cumsum(y, axis=axis, dtype=x.dtype)
    if not inclusive:
        c = c - y
    return np.flip(c, axis) if reverse else c


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("shape,axis", [((6,), 0), ((3, 4), 1), ((3, 4), None), ((2, 3, 4), -2), ((2, 0), 0)])
def test_cumsum(dtype, shape, axis):
    x = _rand(shape, dtype)
    a = A(x)
    for reverse in (False, True):
        for inclusive in (True, False):
            _close(mr.cumsum(a, axis, reverse=reverse, inclusive=inclusive),
                   _np_cumsum(x, axis, reverse, inclusive), dtype)
    _close(a.cumsum(axis), _np_cumsum(x, axis, False, True), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.complex64, np.int8])
@pytest.mark.parametrize("shape,axis", [((1000,), 0), ((3, 100), 1), ((5, 7, 64), 2), ((64, 1, 1), 0),
                                        ((2, 50, 1), 1), ((300, 257), 1), ((2, 3, 20000), -1)])
def test_cumsum_scans_rows(dtype, shape, axis):
    """cumsum along the last non-unit axis: each row scanned in memory order (the rows on
    the threads from 65536 elements: (300, 257) and (2, 3, 20000)), compiled and eager,
    every direction; exact for integers (int8 wraps as numpy's)."""
    x = _rand(shape, dtype)
    if dtype == np.int8:
        x = np.random.default_rng(3).integers(-100, 100, shape).astype(np.int8)
    a = A(x)
    for reverse in (False, True):
        for inclusive in (True, False):
            want = _np_cumsum(x, axis, reverse, inclusive)
            f = mr.compile(lambda v, r=reverse, i=inclusive: mr.cumsum(v, axis, reverse=r, inclusive=i))
            for got in (np.asarray(mr.cumsum(a, axis, reverse=reverse, inclusive=inclusive)), np.asarray(f(a))):
                assert got.dtype == np.dtype(dtype) and got.shape == want.shape
                if np.dtype(dtype).kind in "iu":
                    np.testing.assert_array_equal(got, want)
                else:  # (running sums: rounding grows with the row's length)
                    tol = 1e-12 if dtype == np.float64 else 1e-6 * shape[axis]
                    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_cumsum_rows_run_in_memory_order():
    text = mr.compile(lambda v: mr.cumsum(v, axis=1)).lower(A(np.zeros((512, 512), np.float32))).as_text("linalg")
    assert "scf.forall" in text and text.count("tensor.extract ") == 1  # one element a step


def test_cumsum_bool():
    x = _rand((7,), np.bool_)
    _close(mr.cumsum(A(x)), np.cumsum(x), np.int32)


# ---- matmul ------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 2, 3, 4), (2, 2, 4, 5)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((4,), (4, 5)),
                                   ((3, 4), (4,)), ((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
                                   ((3, 0), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_matmul(sa, sb, dtype):
    x, y = _rand(sa, dtype), _rand(sb, dtype)
    _close(mr.matmul(A(x), A(y)), np.matmul(x, y), dtype)


def test_matmul_promotion_and_operator():
    x, y = _rand((3, 4), np.float64), _rand((4, 2), np.int32)
    _close(A(x) @ A(y), x @ y, np.float64)
    _close(A(y.T) @ A(x.T), y.T @ x.T, np.float64)
    # a numpy operand becomes an mirax array first (float64 data: float32, as MLX)
    x32 = x.astype(np.float32)
    _close(x32 @ A(y.astype(np.float32)), x32 @ y.astype(np.float32), np.float32)


def test_inner_outer_tensordot():
    x, y = _rand((2, 3, 4), np.float32), _rand((4, 3, 5), np.float32)
    _close(mr.tensordot(A(x), A(y), axes=([1, 2], [1, 0])),
           np.tensordot(x, y, axes=([1, 2], [1, 0])))
    _close(mr.tensordot(A(x), A(y.transpose(1, 0, 2)), axes=2),
           np.tensordot(x, y.transpose(1, 0, 2), axes=2))
    u, v = _rand((3,), np.float32), _rand((4,), np.float32)
    _close(mr.outer(A(u), A(v)), np.outer(u, v))
    _close(mr.inner(A(x), A(y[:, 0, :].T)), np.inner(x, y[:, 0, :].T))


# ---- errors ------------------------------------------------------------------------------

def test_errors_name_op_and_line():
    a = A(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="sum") as info:
        mr.sum(a, axis=2)
    assert "test_reduction_linalg.py" in str(info.value)
    with pytest.raises(ValueError, match="mean"):
        a.mean(axis=(0, -2))
    with pytest.raises(ValueError, match="argmax"):
        mr.argmax(a, axis=-3)
    with pytest.raises(ValueError, match="cumsum"):
        mr.cumsum(a, axis=5)
    with pytest.raises(ValueError, match="matmul") as info:
        mr.matmul(a, a)
    assert "test_reduction_linalg.py" in str(info.value)
    with pytest.raises(ValueError, match="matmul"):
        mr.matmul(A(np.ones((2, 3, 4), np.float32)), A(np.ones((3, 4, 5), np.float32)))
    with pytest.raises(mr.MiraxError):
        mr.softmax(a, axis=3)


def test_primitive_references_and_ir():
    """The primitives are declared with references and print in the generated dialect."""
    from mirax.dialect import irdl_text
    text = irdl_text()
    for name in ["sum", "prod", "max", "min", "argmax", "argmin", "cumsum", "matmul"]:
        assert name in PRIMITIVES
        assert f"irdl.operation @{name} " in text
    x = _rand((3, 4), np.float32)
    ref = PRIMITIVES["sum"].reference(x, axes=(1,), keepdims=True)
    _close(mr.sum(A(x), axis=1, keepdims=True), ref)
