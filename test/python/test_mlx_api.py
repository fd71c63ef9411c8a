"""MLX API parity (issue 10, first part): `mr.array` is the class, the dtype API and
constants, keyword arguments in `compile`, `grad` and `value_and_grad` (`argnames`)."""
import math

import numpy as np
import pytest

import mirax as mr


def test_array_is_the_class():
    x = mr.array([1, 2])
    assert isinstance(x, mr.array) and isinstance(mr.exp(x), mr.array) and isinstance(x + 1, mr.array)
    assert type(x) is mr.array
    assert mr.array(val=[1.0], dtype=mr.float16).dtype == mr.float16
    with pytest.raises(TypeError):
        mr.array(None)


def test_dtype_categories_and_issubdtype():
    assert mr.issubdtype(mr.float16, mr.floating) and mr.issubdtype(mr.bfloat16, mr.inexact)
    assert mr.issubdtype(mr.uint8, mr.unsignedinteger) and mr.issubdtype(mr.int8, mr.signedinteger)
    assert mr.issubdtype(mr.int32, mr.integer) and mr.issubdtype(mr.int32, mr.number)
    assert not mr.issubdtype(mr.int32, mr.floating) and not mr.issubdtype(mr.bool_, mr.number)
    assert mr.issubdtype(mr.bool_, mr.generic) and mr.issubdtype(mr.complex64, mr.complexfloating)
    assert mr.issubdtype(mr.floating, mr.inexact) and not mr.issubdtype(mr.inexact, mr.floating)
    assert mr.issubdtype(mr.float32, mr.float32) and not mr.issubdtype(mr.float32, mr.float16)
    assert mr.isdtype(mr.float32, "real floating") and mr.isdtype(mr.int8, ("bool", "integral"))


def test_finfo_iinfo():
    f = mr.finfo(mr.float32)
    assert f.eps == np.finfo(np.float32).eps and f.max == np.finfo(np.float32).max and f.min == -f.max
    assert mr.finfo(mr.float16).eps == np.finfo(np.float16).eps
    assert mr.finfo(mr.bfloat16).eps == 2.0 ** -7
    i = mr.iinfo(mr.int16)
    assert (i.min, i.max) == (-32768, 32767) and mr.iinfo(mr.uint32).max == 2**32 - 1
    with pytest.raises(ValueError):
        mr.finfo(mr.int32)
    with pytest.raises(ValueError):
        mr.iinfo(mr.float32)


def test_result_type_can_cast_constants():
    assert mr.result_type(mr.array([1]), 2.0) == mr.float32  # a Python float is weak
    assert mr.result_type(mr.array([1], mr.int8), 3) == mr.int8
    assert mr.result_type(mr.int8, mr.uint8) == mr.int16
    assert mr.can_cast(mr.int8, mr.int32) and not mr.can_cast(mr.int32, mr.int8)
    assert mr.pi == math.pi and mr.e == math.e and mr.inf == math.inf and math.isnan(mr.nan)
    assert mr.newaxis is None and abs(mr.euler_gamma - 0.5772156649) < 1e-10
    assert mr.array([1.0, 2.0])[mr.newaxis].shape == (1, 2)


def test_compile_takes_keyword_arguments():
    calls = []

    def f(x, scale=1.0, bias=None):
        calls.append(1)
        return x * scale + (bias if bias is not None else 0)
    c = mr.compile(f)
    x = mr.array([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0)), [2, 4])
    np.testing.assert_array_equal(np.asarray(c(x, scale=3.0)), [3, 6])  # a Python scalar: a new trace
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0)), [2, 4])  # cached
    b = mr.array([10.0, 20.0])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0, bias=b)), [12, 24])
    np.testing.assert_array_equal(np.asarray(c(x, scale=2.0, bias=b * 2)), [22, 44])  # an array: traced
    assert len(calls) == 3 and c.trace_count == 3


def test_grad_and_value_and_grad_keywords():
    x = mr.array([1.0, 2.0])
    w = mr.array([3.0, 4.0])
    # keywords not in argnames are constants
    np.testing.assert_array_equal(np.asarray(mr.grad(lambda x, w=None: (x * w).sum())(x, w=w)), [3, 4])
    loss = lambda x, w=None, b=None: (x * w + b).sum()  # noqa: E731
    v, (gpos, gkw) = mr.value_and_grad(loss, argnames=["w", "b"])(x, w=w, b=mr.array([0.5, 0.5]))
    assert float(v) == 12.0 and gpos is None and set(gkw) == {"w", "b"}
    np.testing.assert_array_equal(np.asarray(gkw["w"]), [1, 2])
    np.testing.assert_array_equal(np.asarray(gkw["b"]), [1, 1])
    gpos, gkw = mr.grad(loss, argnums=0, argnames="w")(x, w=w, b=mr.array([0.0, 0.0]))
    np.testing.assert_array_equal(np.asarray(gpos), [3, 4])
    np.testing.assert_array_equal(np.asarray(gkw["w"]), [1, 2])
    with pytest.raises(ValueError, match="'b'"):
        mr.grad(loss, argnames="b")(x, w=w)


# ---- operations made of other ops (python/mirax/ops/composite.py) ----------------------------

ELEMENTWISE = [  # name, numpy, domain
    ("log2", np.log2, (0.1, 4)), ("log10", np.log10, (0.1, 4)), ("degrees", np.degrees, (-3, 3)),
    ("radians", np.radians, (-90, 90)), ("arcsin", np.arcsin, (-0.95, 0.95)), ("arccos", np.arccos, (-0.95, 0.95)),
    ("arctan", np.arctan, (-3, 3)), ("arcsinh", np.arcsinh, (-3, 3)), ("arccosh", np.arccosh, (1.1, 4)),
    ("arctanh", np.arctanh, (-0.9, 0.9)), ("asin", np.arcsin, (-0.9, 0.9)), ("acosh", np.arccosh, (1.1, 3)),
]


@pytest.mark.parametrize("name,ref,domain", ELEMENTWISE, ids=[r[0] for r in ELEMENTWISE])
def test_elementwise_compositions_and_their_gradients(name, ref, domain, rng):
    x = rng.uniform(*domain, size=(7,))
    f = getattr(mr, name)
    np.testing.assert_allclose(np.asarray(f(mr.array(x.astype(np.float32)))), ref(x), rtol=2e-6, atol=1e-6)
    g = np.asarray(mr.grad(lambda v: f(v).sum())(mr.array(x)))  # float64: against central differences
    eps = 1e-6
    np.testing.assert_allclose(g, (ref(x + eps) - ref(x - eps)) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_logaddexp_trunc_nan_to_num_xor_divmod():
    a = np.array([-np.inf, 1.0, 1000.0, -3.0], np.float32)
    b = np.array([-np.inf, 2.0, 1000.0, 5.0], np.float32)
    np.testing.assert_allclose(np.asarray(mr.logaddexp(mr.array(a), mr.array(b))), np.logaddexp(a, b), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(mr.trunc(mr.array([-1.5, -0.5, 0.5, 2.7]))), [-1, -0, 0, 2])
    v = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    np.testing.assert_array_equal(np.asarray(mr.nan_to_num(mr.array(v))), np.nan_to_num(v))
    np.testing.assert_array_equal(np.asarray(mr.nan_to_num(mr.array(v), nan=-1.0, posinf=9.0, neginf=-9.0)),
                                  [-1, 9, -9, 1])
    assert np.asarray(mr.isfinite(mr.array(v))).tolist() == [False, False, False, True]
    assert np.asarray(mr.isposinf(mr.array(v))).tolist() == [False, True, False, False]
    assert np.asarray(mr.isneginf(mr.array(v))).tolist() == [False, False, True, False]
    assert np.asarray(mr.logical_xor(mr.array([True, True, False]), mr.array([True, False, False]))).tolist() == \
        [False, True, False]
    q, r = mr.divmod(mr.array([7, -7]), mr.array([2, 2]))
    assert np.asarray(q).tolist() == [3, -4] and np.asarray(r).tolist() == [1, 1]


def test_matrix_and_shape_compositions(rng):
    m = rng.standard_normal((3, 4)).astype(np.float32)
    t = rng.standard_normal((2, 3, 4)).astype(np.float32)
    eq = np.testing.assert_array_equal
    eq(np.asarray(mr.tri(3, 4, 1)), np.tri(3, 4, 1))
    for k in (-1, 0, 2):
        eq(np.asarray(mr.tril(mr.array(m), k)), np.tril(m, k))
        eq(np.asarray(mr.triu(mr.array(t), k)), np.triu(t, k))
        eq(np.asarray(mr.diag(mr.array(m), k)), np.diag(m, k))
        eq(np.asarray(mr.diag(mr.array([1.0, 2.0, 3.0]), k)), np.diag([1.0, 2.0, 3.0], k))
    eq(np.asarray(mr.diagonal(mr.array(t), 1, 1, 2)), np.diagonal(t, 1, 1, 2))
    eq(np.asarray(mr.diagonal(mr.array(t), -1, 2, 0)), np.diagonal(t, -1, 2, 0))
    eq(np.asarray(mr.roll(mr.array(m), 5)), np.roll(m, 5))
    eq(np.asarray(mr.roll(mr.array(t), (1, -2), axis=(0, 2))), np.roll(t, (1, -2), axis=(0, 2)))
    eq(np.asarray(mr.flip(mr.array(t))), np.flip(t))
    eq(np.asarray(mr.flip(mr.array(t), axis=1)), np.flip(t, axis=1))
    for idx in ("xy", "ij"):
        for got, want in zip(mr.meshgrid(mr.array([1, 2, 3]), mr.array([4, 5]), indexing=idx),
                             np.meshgrid([1, 2, 3], [4, 5], indexing=idx)):
            eq(np.asarray(got), want)
    assert mr.unflatten(mr.array(t), 2, (2, 2)).shape == (2, 3, 2, 2)
    parts = mr.unstack(mr.array(t), axis=1)
    assert len(parts) == 3 and all(p.shape == (2, 4) for p in parts)
    eq(np.asarray(parts[1]), t[:, 1])
    assert mr.atleast_1d(mr.array(1.0)).shape == (1,) and mr.atleast_2d(mr.array([1, 2])).shape == (1, 2)
    assert mr.atleast_3d(mr.array(m)).shape == (3, 4, 1)
    assert [a.shape for a in mr.atleast_2d(mr.array(1.0), mr.array(m))] == [(1, 1), (3, 4)]
    eq(np.asarray(mr.permute_dims(mr.array(t), (2, 0, 1))), np.transpose(t, (2, 0, 1)))
    eq(np.asarray(mr.matrix_transpose(mr.array(t))), np.swapaxes(t, -1, -2))
    assert mr.broadcast_shapes((2, 1), (3,), (1, 1, 3)) == (1, 2, 3)
    with pytest.raises(ValueError):
        mr.broadcast_shapes((2,), (3,))
    np.testing.assert_allclose(np.asarray(mr.diff(mr.array(t), 2, axis=-1)), np.diff(t, 2, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mr.diff(mr.array(m), 1, axis=0, prepend=0.0, append=mr.array(m[:1]))),
                               np.diff(m, 1, axis=0, prepend=0.0, append=m[:1]), rtol=1e-6)
    eq(np.asarray(mr.kron(mr.array(m[:2, :2]), mr.array(t[0]))), np.kron(m[:2, :2], t[0]))
    np.testing.assert_allclose(np.asarray(mr.vecdot(mr.array(t), mr.array(t))), (t * t).sum(-1), rtol=1e-5)
    c = rng.standard_normal((3, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mr.addmm(mr.array(c), mr.array(m), mr.array(m.T), alpha=2.0, beta=0.5)),
                               0.5 * c + 2 * m @ m.T, rtol=1e-5, atol=1e-5)
    for w in ("hanning", "hamming", "blackman", "bartlett"):
        for n in (0, 1, 6):
            np.testing.assert_allclose(np.asarray(getattr(mr, w)(n)), getattr(np, w)(n), atol=1e-6)


def test_compositions_under_vmap_and_grad(rng):
    t = rng.standard_normal((2, 3, 3))
    got = mr.vmap(lambda a: mr.tril(a, -1) + mr.diag(mr.diagonal(a)) + mr.roll(a, 1, axis=0))(mr.array(t, mr.float64))
    want = np.stack([np.tril(a, -1) + np.diag(np.diagonal(a)) + np.roll(a, 1, axis=0) for a in t])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    g = mr.grad(lambda a: (mr.triu(a) * mr.flip(a)).sum())(mr.array(t[0], mr.float64))
    np.testing.assert_allclose(np.asarray(g), np.triu(np.flip(t[0])) + np.flip(np.triu(t[0])), rtol=1e-12)


def test_array_methods_of_compositions():
    x = mr.array([[1.0, 2.0], [4.0, 8.0]])
    np.testing.assert_array_equal(np.asarray(x.mT), [[1, 4], [2, 8]])
    np.testing.assert_allclose(np.asarray(x.log2()), [[0, 1], [2, 3]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(x.log10()), np.log10([[1, 2], [4, 8]]), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(x.diag()), [1, 8])
    np.testing.assert_array_equal(np.asarray(x.diagonal(1)), [2])


def test_numpy_reductions_on_mirax_arrays():
    """numpy calls the array's own method with `out=None` (`np.all(x)` -> `x.all(...)`)."""
    assert bool(np.all(mr.array([True, True]))) and not bool(np.any(mr.array([False, False])))
    assert float(np.sum(mr.array([1.0, 2.0]))) == 3.0 and int(np.max(mr.array([3, 1]))) == 3
    with pytest.raises(TypeError, match="out="):
        mr.array([1.0]).sum(out=np.zeros(()))


def test_sinh_cosh_f32_one_exp():
    """f32 sinh and cosh from one exp of |x| (sinh: an odd polynomial for |x| <= 1/2):
    within a few ulp of numpy across the branch point and wide ranges (up to 89.4, where
    e^|x| alone would overflow), signed zeros,
    infinities and NaN as numpy, and gradients finite where the branch not taken would
    overflow (|x| = 1e6: sinh's polynomial of x)."""
    x = np.concatenate([np.linspace(-0.6, 0.6, 2001), np.geomspace(1e-38, 80, 500), -np.geomspace(1e-38, 80, 500),
                        [0.5, -0.5, np.nextafter(0.5, 1)]]).astype(np.float32)
    ref = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(mr.sinh(mr.array(x))), np.sinh(ref), rtol=4e-7, atol=0)
    np.testing.assert_allclose(np.asarray(mr.cosh(mr.array(x))), np.cosh(ref), rtol=4e-7, atol=0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e6, -1e6], np.float32)
    s, c = np.asarray(mr.sinh(mr.array(special))), np.asarray(mr.cosh(mr.array(special)))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(s, np.sinh(special))
        np.testing.assert_array_equal(c, np.cosh(special))
    assert np.signbit(s[1]) and not np.signbit(s[0])
    # finite where e^|x| alone overflows (|x| in (88.7, 89.4]), as numpy's
    big = np.array([88.75, 89.0, 89.4, -89.4, 89.42], np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(np.asarray(mr.sinh(mr.array(big))), np.sinh(big), rtol=4e-7)
        np.testing.assert_allclose(np.asarray(mr.cosh(mr.array(big))), np.cosh(big), rtol=4e-7)
    g = np.asarray(mr.grad(lambda a: mr.sinh(a).sum())(mr.array(special)))
    np.testing.assert_array_equal(g, [1, 1, np.inf, np.inf, np.nan, np.inf, np.inf])
    xs = np.linspace(-3, 3, 13).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mr.grad(lambda a: mr.cosh(a).sum())(mr.array(xs))), np.sinh(xs), rtol=1e-6)
    z = (xs + 1j * xs[::-1]).astype(np.complex64)  # complex: e^z's forms (|z| and z < 0 mean nothing there)
    np.testing.assert_allclose(np.asarray(mr.sinh(mr.array(z))), np.sinh(z), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mr.cosh(mr.array(z))), np.cosh(z), rtol=1e-5, atol=1e-5)


def test_dlpack_asarray_async_eval_array_equal_sinh_cosh_tree_merge():
    x = mr.array([1.0, 2.0])
    y = np.from_dlpack(x)
    y[0] = 9.0  # a copy: mirax's value stays
    np.testing.assert_array_equal(np.asarray(x), [1, 2])
    assert mr.from_dlpack(np.arange(3, dtype=np.int32)).dtype == mr.int32
    assert mr.asarray(x) is x and mr.asarray([1, 2], mr.float32).dtype == mr.float32
    z = x + 1
    mr.async_eval(z)
    np.testing.assert_array_equal(np.asarray(z), [2, 3])
    n = mr.array([1.0, np.nan])
    assert bool(mr.array_equal(n, n, equal_nan=True)) and not bool(mr.array_equal(n, n))
    v = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(np.asarray(mr.sinh(mr.array(v, mr.float64))), np.sinh(v), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(mr.cosh(mr.array(v, mr.float64))), np.cosh(v), rtol=1e-12)
    g = mr.grad(lambda a: mr.sinh(a).sum())(mr.array(v, mr.float64))
    np.testing.assert_allclose(np.asarray(g), np.cosh(v), rtol=1e-12)
    from mirax.utils import tree_merge
    assert tree_merge({"a": 1, "l": [1, None]}, {"b": {"c": 2}, "l": [None, 3]}) == {"a": 1, "l": [1, 3], "b": {"c": 2}}
    assert tree_merge({"a": 1}, {"a": 2}, merge_fn=lambda p, q: p + q) == {"a": 3}
    with pytest.raises(ValueError):
        tree_merge({"a": 1}, {"a": 2})


# ---- in-place updates (MLX's semantics) ---------------------------------------------------

SETITEM_KEYS = [1, -1, slice(1, 3), slice(None, None, -2), (Ellipsis, 0), (None, 1), (1, slice(None), 2),
                np.array([0, 2, 2]), (np.array([0, 1]), np.array([3, 1])), np.array([True, False, True])]


@pytest.mark.parametrize("key", SETITEM_KEYS, ids=[repr(k)[:30] for k in SETITEM_KEYS])
def test_setitem_matches_numpy(key, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    want = a.copy()
    sel = want[key]
    v = rng.standard_normal(np.shape(sel)).astype(np.float32)
    want[key] = v
    x = mr.array(a)
    x[key] = mr.array(v)
    np.testing.assert_array_equal(np.asarray(x), want)
    x = mr.array(a)  # a scalar broadcasts; += reads then writes
    x[key] += 1.0
    want = a.copy()
    want[key] += 1.0
    np.testing.assert_array_equal(np.asarray(x), want)


def test_setitem_keeps_earlier_results_and_casts():
    x = mr.arange(6.0)
    y = x * 2  # lazy, built before the update: keeps the old x
    x[1] = 10.0
    z = x * 2  # after: sees it
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 4, 6, 8, 10])
    np.testing.assert_array_equal(np.asarray(z), [0, 20, 4, 6, 8, 10])
    i = mr.array([1, 2, 3], mr.int32)
    i[0] = 7.9  # cast to the array's dtype, as MLX
    assert i.dtype == mr.int32 and np.asarray(i).tolist() == [7, 2, 3]
    r = mr.ones(4)
    r[mr.array([1, 1, 9])] = mr.array([2.0, 3.0, 4.0])  # repeats: the last wins; out of range: dropped
    np.testing.assert_array_equal(np.asarray(r), [1, 3, 1, 1])
    with pytest.raises(ValueError, match="shape"):
        r[1:3] = mr.array([1.0, 2.0, 3.0])
    with pytest.raises(IndexError):
        r[7] = 1.0


def test_setitem_under_grad_vmap_compile_and_gpu():
    def f(x):
        y = x * 1
        y[0] = 0.0
        y[1:] *= 3.0
        return (y * mr.arange(3.0)).sum()
    np.testing.assert_array_equal(np.asarray(mr.grad(f)(mr.ones(3))), [0, 3, 6])
    assert float(mr.compile(f)(mr.ones(3))) == 9.0

    def g(x):
        x[0] = 5.0  # the argument itself: the function's handle takes the new value
        return x * 2
    np.testing.assert_array_equal(np.asarray(mr.vmap(g)(mr.ones((2, 3)))), [[10, 2, 2], [10, 2, 2]])
    np.testing.assert_array_equal(np.asarray(mr.compile(g)(mr.ones(3))), [10, 2, 2])
    outer = mr.ones(3)
    mr.compile(g)(outer)
    np.testing.assert_array_equal(np.asarray(outer), [1, 1, 1])  # the caller's array is not the trace's
    with mr.stream(mr.gpu):
        x = mr.zeros((2, 3))
        x[:, 1] = mr.array([4.0, 5.0])
        np.testing.assert_array_equal(np.asarray(x), [[0, 4, 0], [0, 5, 0]])


def test_at_set():
    x = mr.zeros((2, 3))
    np.testing.assert_array_equal(np.asarray(x.at[1, mr.array([0, 2])].set(7.0)), [[0, 0, 0], [7, 0, 7]])
    np.testing.assert_array_equal(np.asarray(x), np.zeros((2, 3)))  # .at returns a new array


def test_put_along_axis_and_slice_update(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    i = np.array([[1], [0], [3]])
    v = rng.standard_normal((3, 1)).astype(np.float32)
    want = a.copy()
    np.put_along_axis(want, i, v, axis=1)
    np.testing.assert_array_equal(np.asarray(mr.put_along_axis(mr.array(a), mr.array(i), mr.array(v), axis=1)), want)
    want = a.copy()
    np.put_along_axis(want, np.array([[2, 0, 1, 2]]), 0.0, axis=0)
    np.testing.assert_array_equal(np.asarray(mr.put_along_axis(mr.array(a), mr.array([[2, 0, 1, 2]]), 0.0, axis=0)),
                                  want)
    got = mr.slice_update(mr.array(a), mr.array([[9.0, 8.0]]), mr.array([1, 2]), axes=(0, 1))
    want = a.copy()
    want[1:2, 2:4] = [[9, 8]]
    np.testing.assert_array_equal(np.asarray(got), want)
    got = mr.slice_update(mr.array(a), mr.array([[9.0, 8.0]]), [2, 3])  # clamped so it fits (JAX's rule)
    want = a.copy()
    want[2:3, 2:4] = [[9, 8]]
    np.testing.assert_array_equal(np.asarray(got), want)
    # differentiable in both operands
    g = mr.grad(lambda u: (mr.slice_update(mr.array(a), u, mr.array([0, 1]), axes=(0, 1)) ** 2).sum())(
        mr.array(np.ones((2, 2), np.float32)))
    np.testing.assert_array_equal(np.asarray(g), 2 * np.ones((2, 2)))


def test_bitwise_ops_and_operators(rng):
    a = rng.integers(-50, 50, 8).astype(np.int32)
    b = rng.integers(-50, 50, 8).astype(np.int32)
    s = np.array([0, 1, 5, 31, 32, 40, -1, 3], np.int32)  # counts outside [0, 32) included
    eq = np.testing.assert_array_equal
    eq(np.asarray(mr.bitwise_and(mr.array(a), mr.array(b))), a & b)
    eq(np.asarray(mr.array(a) | mr.array(b)), a | b)
    eq(np.asarray(mr.array(a) ^ mr.array(b)), a ^ b)
    eq(np.asarray(~mr.array(a)), ~a)
    eq(np.asarray(~mr.array(np.array([0, 5, 255], np.uint8))), ~np.array([0, 5, 255], np.uint8))
    eq(np.asarray(~mr.array([True, False])), [False, True])
    eq(np.asarray(mr.array([True, False]) & mr.array([True, True])), [True, False])
    big = (s < 0) | (s >= 32)
    with np.errstate(all="ignore"):
        eq(np.asarray(mr.left_shift(mr.array(a), mr.array(s))), np.where(big, 0, a << np.clip(s, 0, 31)))
        eq(np.asarray(mr.array(a) >> mr.array(s)), np.where(big, np.where(a < 0, -1, 0), a >> np.clip(s, 0, 31)))
    eq(np.asarray(1 << mr.array([1, 2, 3])), [2, 4, 8])
    eq(np.asarray(mr.array(a) & 6), a & 6)
    with mr.stream(mr.gpu):
        eq(np.asarray(mr.array(a) ^ mr.array(b)), a ^ b)
    with pytest.raises(mr.MiraxError, match="integer or bool"):
        mr.bitwise_and(mr.array([1.0]), mr.array([2.0]))


def test_gather_mm_and_block_masked_mm(rng):
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    b = rng.standard_normal((2, 5, 6)).astype(np.float32)
    li, ri = np.array([[0, 3, 1]]), np.array([1, 0, 1])
    got = np.asarray(mr.gather_mm(mr.array(a), mr.array(b), mr.array(li), mr.array(ri)))
    np.testing.assert_allclose(got, a[li] @ b[ri], rtol=1e-5, atol=1e-5)
    assert got.shape == (1, 3, 3, 6)
    np.testing.assert_allclose(np.asarray(mr.gather_mm(mr.array(a[:2]), mr.array(b))), a[:2] @ b, rtol=1e-5, atol=1e-5)
    g = mr.grad(lambda x: mr.gather_mm(x, mr.array(b), rhs_indices=mr.array([1, 1, 0, 0])).sum())(mr.array(a))
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(b[[1, 1, 0, 0]].sum(-1)[:, None, :], a.shape),
                               rtol=1e-5)
    A = rng.standard_normal((10, 7)).astype(np.float32)
    B = rng.standard_normal((7, 9)).astype(np.float32)
    ml, mb, mo = rng.random((3, 2)) < 0.5, rng.random((2, 3)) < 0.5, rng.uniform(0, 2, (3, 3)).astype(np.float32)

    def ex(m, r, c):
        return np.repeat(np.repeat(m, 4, 0), 4, 1)[:r, :c].astype(np.float32)
    want = ((A * ex(ml, 10, 7)) @ (B * ex(mb, 7, 9))) * ex(mo, 10, 9)
    got = mr.block_masked_mm(mr.array(A), mr.array(B), 4, mr.array(mo), mr.array(ml), mr.array(mb))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(mr.MiraxError, match="does not cover"):
        mr.block_masked_mm(mr.array(A), mr.array(B), 2, mask_lhs=mr.array(ml))


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_at_combiners_match_numpy_ufunc_at(device):
    """`x.at[idx].multiply/divide/maximum/minimum` combine repeated positions like numpy's
    `ufunc.at`; updates with extra leading 1s broadcast as MLX."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(6).astype(np.float32)
    idx = np.array([1, 1, 4, -1, 9])  # a repeat, a negative index, one out of range (dropped)
    u = rng.standard_normal(5).astype(np.float32)
    keep = idx < 6
    with mr.stream(getattr(mr, device)):
        for method, ufunc in (("multiply", np.multiply), ("maximum", np.maximum), ("minimum", np.minimum)):
            want = x.copy()
            ufunc.at(want, idx[keep], u[keep])
            got = getattr(mr.array(x).at[mr.array(idx)], method)(mr.array(u))
            np.testing.assert_allclose(np.array(got), want, rtol=1e-6)
        want = x.copy()
        np.multiply.at(want, idx[keep], 1 / u[keep])
        np.testing.assert_allclose(np.array(mr.array(x).at[mr.array(idx)].divide(mr.array(u))), want, rtol=1e-5)
        b = mr.array([True, False, True])
        assert np.array(b.at[mr.array([0, 1])].maximum(mr.array([False, True]))).tolist() == [True, True, True]
        assert np.array(b.at[mr.array([0, 2])].minimum(mr.array([True, False]))).tolist() == [True, False, False]
        u8 = mr.array([1, 200, 3], dtype=mr.uint8)  # unsigned comparison
        assert np.array(u8.at[mr.array([0, 1])].maximum(mr.array([250, 100], dtype=mr.uint8))).tolist() == [250, 200, 3]
        s = mr.array([1.0, 2.0, 3.0, 4.0]).at[1:3].multiply(mr.array([[2.0, 3.0]]))  # (1, 2) into (2,)
        assert np.array(s).tolist() == [1.0, 4.0, 9.0, 4.0]


def test_at_combiner_gradients():
    x0, idx = mr.array([1.0, 2.0, 3.0, 4.0]), mr.array([1, 3])
    ct = mr.array([4.0, 5.0, 6.0, 7.0])
    _, (gx, gu) = mr.vjp(lambda x, u: x.at[idx].maximum(u), [x0, mr.array([5.0, 1.0])], [ct])
    assert np.array(gx).tolist() == [4.0, 0.0, 6.0, 7.0] and np.array(gu).tolist() == [5.0, 0.0]
    _, (gx, gu) = mr.vjp(lambda x, u: x.at[idx].minimum(u), [x0, mr.array([5.0, 1.0])], [ct])
    assert np.array(gx).tolist() == [4.0, 5.0, 6.0, 0.0] and np.array(gu).tolist() == [0.0, 7.0]
    _, (gx, gu) = mr.vjp(lambda x, u: x.at[1:3].multiply(u), [x0, mr.array([2.0, 3.0])], [ct])
    assert np.array(gx).tolist() == [4.0, 10.0, 18.0, 7.0] and np.array(gu).tolist() == [10.0, 18.0]
    # repeated positions: d/du_j of x * u_0 * u_1 is x * the other update
    g = mr.grad(lambda u: x0.at[mr.array([2, 2])].multiply(u).sum())(mr.array([2.0, 5.0]))
    np.testing.assert_allclose(np.array(g), [15.0, 6.0])
    f = mr.compile(lambda x, u: x.at[idx].maximum(u))
    assert np.array(f(x0, mr.array([5.0, 1.0]))).tolist() == [1.0, 5.0, 3.0, 4.0]
    v = mr.vmap(lambda x, u: x.at[idx].multiply(u))(mr.stack([x0, x0 * 2]), mr.array([[2.0, 3.0], [1.0, 0.5]]))
    assert np.array(v).tolist() == [[1.0, 4.0, 3.0, 12.0], [2.0, 4.0, 6.0, 4.0]]


def test_values_inside_grad_as_mlx():
    """grad/vjp trace on placeholders standing for the call's arguments: as in MLX, a
    traced value can be read (`.item()`, `.tolist()`, printing), `mr.eval` of it is
    harmless, and a value kept past the transform (in a closure) evaluates later."""
    y = mr.array([2.0, 2.0])
    seen = []

    def f(x):
        x = x + y
        seen.append((x < 1).tolist())
        mr.eval(x)  # still differentiated
        return (x ** 2).sum()
    g = mr.grad(f)(mr.array([1.0]))
    assert seen == [[False, False]] and g.item() == 12.0
    state = [mr.zeros((2,))]

    def g2(w, x):
        x = w * x
        state[0] = state[0] + x  # leaks a traced value
        return x.sum()
    mr.grad(g2)(mr.array([1.0]), mr.ones((2,)))
    mr.eval(state[0])
    assert np.array(state[0]).tolist() == [1.0, 1.0]
    with pytest.raises(mr.TraceError):  # compile has no values while tracing (as MLX)
        mr.compile(lambda x: x * float(x.sum()))(mr.ones((2,)))
    with pytest.raises(mr.TraceError):
        mr.vmap(lambda x: x * x.item())(mr.ones((2,)))


def test_value_and_grad_passes_non_array_aux_through():
    def f(x):
        return (x * x).sum(), {"n": 3, "tag": "hi", "sq": x * x}
    (loss, aux), g = mr.value_and_grad(f)(mr.array([1.0, 2.0]))
    assert loss.item() == 5.0 and aux["n"] == 3 and aux["tag"] == "hi"
    assert np.array(aux["sq"]).tolist() == [1.0, 4.0] and np.array(g).tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="scalar"):  # grad wants one scalar output (MLX)
        mr.grad(f)(mr.array([1.0, 2.0]))


def test_random_complex_normal_and_laplace():
    z = np.array(mr.random.normal((20000,), mr.complex64, key=mr.random.key(0)))
    assert z.dtype == np.complex64
    assert abs(z.real.var() - 0.5) < 0.03 and abs(z.imag.var() - 0.5) < 0.03 and abs(z.mean()) < 0.03
    s = np.array(mr.random.normal((4,), mr.complex64, loc=1 + 1j, scale=0.0, key=mr.random.key(0)))
    assert np.allclose(s, 1 + 1j)
    lp = np.array(mr.random.laplace((20000,), loc=1.0, scale=2.0, key=mr.random.key(1)))
    assert abs(np.median(lp) - 1.0) < 0.1 and abs(np.abs(lp - 1.0).mean() - 2.0) < 0.1
    with pytest.raises(ValueError):
        mr.random.laplace((2,), dtype=mr.int32)


def test_masked_setitem_fills_true_positions_in_order():
    x = mr.zeros((4,))
    x[mr.array([True, False, True, False])] = mr.array([5.0, 6.0])  # k-th True takes row k
    assert np.array(x).tolist() == [5.0, 0.0, 6.0, 0.0]
    y = mr.arange(6).reshape(2, 3)
    y[y > 2] = 0  # one value for every True position
    assert np.array(y).tolist() == [[0, 1, 2], [0, 0, 0]]
    z = mr.zeros((3, 2))
    z[np.array([True, False, True])] = mr.array([[1.0, 2.0], [3.0, 4.0]])  # mask over leading dims
    assert np.array(z).tolist() == [[1.0, 2.0], [0.0, 0.0], [3.0, 4.0]]
    mask = mr.array([True, False, True, False])

    def masked_set(src):
        dst = mr.zeros(4)
        dst[mask] = src
        return dst
    _, (t,) = mr.jvp(masked_set, [mr.ones(2)], [mr.array([1.0, 2.0])])
    assert np.array(t).tolist() == [1.0, 0.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="mask"):
        w = mr.zeros((2, 2))
        w[mr.array([True, False, True])] = 1.0


def test_cummax_cummin_gradient_goes_to_latest_tie():
    a = mr.array([3.0, 3.0, 1.0, 5.0, 5.0])
    assert np.array(mr.grad(lambda y: mr.cummax(y).sum())(a)).tolist() == [1.0, 2.0, 0.0, 1.0, 1.0]
    assert np.array(mr.grad(lambda y: mr.cummin(y).sum())(mr.array([1.0, 1.0, 3.0, 0.0, 0.0]))).tolist() == \
        [1.0, 2.0, 0.0, 1.0, 1.0]
    assert np.array(mr.grad(lambda y: mr.cummax(y, reverse=True).sum())(a)).tolist() == [0.0, 0.0, 0.0, 4.0, 1.0]
    got = np.array(mr.cummax(mr.array([[1.0, np.nan, 2.0], [3.0, 1.0, 4.0]]), axis=1))
    np.testing.assert_array_equal(got, [[1.0, np.nan, np.nan], [3.0, 3.0, 4.0]])


def test_custom_vjp_gets_the_argument_itself_when_there_is_one():
    @mr.custom_function
    def f(x):
        return mr.exp(x)

    @f.vjp
    def f_vjp(x, ct, out):
        assert isinstance(x, mr.array) and isinstance(ct, mr.array)
        return mr.ones_like(x) * 42
    assert mr.grad(f)(mr.array(1.0)).item() == 42.0


def test_memory_figures_follow_buffers():
    import gc
    gc.collect()
    base = mr.get_active_memory()
    x = mr.ones((512, 512)) * 2
    mr.eval(x)
    assert mr.get_active_memory() >= base + 512 * 512 * 4
    assert mr.get_peak_memory() >= mr.get_active_memory()
    del x
    gc.collect()
    assert mr.get_active_memory() <= base + 512 * 512 * 4  # its buffer was given back
    mr.reset_peak_memory()
    assert mr.get_peak_memory() == mr.get_active_memory()
    old = mr.set_cache_limit(0)
    assert mr.set_cache_limit(old) == 0 and mr.get_cache_memory() == 0
    prev = mr.set_memory_limit(1 << 40)
    assert prev > 0 and mr.set_memory_limit(prev) == 1 << 40
    assert mr.set_wired_limit(mr.set_wired_limit(0)) == 0
    info = mr.device_info(mr.cpu)
    assert info["memory_size"] > 0 and info["device_name"]
    assert mr.metal.get_active_memory() == mr.get_active_memory()


def test_pad_modes_topk_zero_and_small_names():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for mode in ("edge", "reflect", "symmetric"):
        np.testing.assert_array_equal(np.array(mr.pad(mr.array(a), ((1, 2), (2, 1)), mode=mode)),
                                      np.pad(a, ((1, 2), (2, 1)), mode=mode))
    g = mr.grad(lambda x: mr.pad(x, 1, mode="edge").sum())(mr.array(a))
    assert np.array(g).tolist() == [[4.0, 2.0, 4.0], [4.0, 2.0, 4.0]]
    with pytest.raises(ValueError):
        mr.pad(mr.array(a), 1, mode="wrapx")
    assert mr.topk(mr.array([3, 1, 2]), 0).shape == (0,)
    assert [np.array(p).tolist() for p in mr.arange(4).split(2)] == [[0, 1], [2, 3]]
    assert np.array(mr.concat([mr.ones(1), mr.zeros(1)])).tolist() == [1.0, 0.0]
    assert np.array(mr.positive(mr.array([-1, 2]))).tolist() == [-1, 2]
    assert mr.contiguous(mr.ones((2, 2))).shape == (2, 2)


def test_grad_argument_rules_as_mlx():
    f = lambda x, tag: (x * x).sum() if tag == "sq" else x.sum()  # noqa: E731
    assert mr.grad(f)(mr.array([3.0]), "sq").item() == 6.0  # non-differentiated args: any value
    with pytest.raises(ValueError):
        mr.grad(lambda p: p["x"] * p["y"])({"x": 0.5, "y": mr.array(2.0)})
    with pytest.raises(TypeError):
        mr.value_and_grad(f, (None, None))
    with pytest.raises(ValueError):
        mr.value_and_grad(f, ())
    with pytest.raises(ValueError):
        mr.grad(f, argnums=(0, 0))
    with pytest.raises(ValueError):
        mr.grad(lambda x, y: x * y, argnums=[0], argnames=["y"])(x=mr.array(1.0), y=mr.array(2.0))


def test_complex_max_min_order_by_real_then_imaginary():
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    z[0, 1] = z[0, 2].real + 5j  # a tie on the real part
    for ax in (None, 0, 1):
        np.testing.assert_array_equal(np.array(mr.max(mr.array(z), axis=ax)), np.max(z, axis=ax))
        np.testing.assert_array_equal(np.array(mr.min(mr.array(z), axis=ax)), np.min(z, axis=ax))
    np.testing.assert_array_equal(np.array(mr.compile(lambda a: a.max(axis=1))(mr.array(z))), z.max(axis=1))


def test_one_argnum_in_a_sequence_gives_one_gradient():
    f = lambda x, y: (x * y).sum()  # noqa: E731
    g = mr.grad(f, argnums=(1,))(mr.array([2.0]), mr.array([3.0]))
    assert isinstance(g, mr.array) and g.item() == 2.0  # MLX: not a 1-tuple
    gs = mr.grad(f, argnums=(0, 1))(mr.array([2.0]), mr.array([3.0]))
    assert isinstance(gs, tuple) and len(gs) == 2


def test_exclusive_cummax_gradient_follows_the_shifted_scan():
    a = mr.array([3.0, 3.0, 1.0, 5.0, 5.0])
    assert np.array(mr.grad(lambda y: mr.cummax(y, inclusive=False).sum())(a)).tolist() == [1.0, 2.0, 0.0, 1.0, 0.0]
    assert np.array(mr.grad(lambda y: mr.cummax(y, inclusive=False, reverse=True).sum())(a)).tolist() == \
        [0.0, 0.0, 0.0, 3.0, 1.0]
    assert np.array(mr.cummax(a, inclusive=False)).tolist()[1:] == [3.0, 3.0, 3.0, 5.0]


def test_vmap_in_axes_are_tree_prefixes():
    f = lambda t: (t["a"] + t["b"][0]) * t["b"][1]  # noqa: E731
    t = {"a": mr.ones((2, 3)), "b": (mr.ones((3, 2)) * 2, mr.ones((3, 2)) * 3)}
    out = mr.vmap(f, in_axes={"a": 0, "b": 1})(t)  # one axis for the whole "b" subtree
    assert np.array(out).tolist() == [[9.0] * 3] * 2
    out = mr.vmap(f, in_axes={"a": 0, "b": (1, 1)})(t)
    assert out.shape == (2, 3)
    with pytest.raises(ValueError):
        mr.vmap(f, in_axes={"a": 0, "b": ((0, 0), 0)})(t)
    with pytest.raises(ValueError):
        mr.vmap(f, in_axes={"a": 0, "c": 0})(t)
    with pytest.raises(ValueError):
        mr.vmap(mr.exp)("hello")
    with pytest.raises(ValueError):
        mr.vmap(mr.exp, in_axes="hello")(mr.array([0.0, 1.0]))


def test_random_dtype_none_bool_randint_bernoulli_checks_truncated_normal_empty_interval():
    k = mr.random.key(3)
    assert mr.random.uniform(dtype=None).dtype == mr.float32 and mr.random.normal(dtype=None).dtype == mr.float32
    assert mr.random.randint(0, 3, dtype=None).dtype == mr.int32
    b = mr.random.randint(0, 2, [500], dtype=mr.bool_, key=k)
    assert b.dtype == mr.bool_ and sorted(set(np.array(b).tolist())) == [False, True]
    assert not bool(mr.any(mr.random.randint(0, 1, [100], dtype=mr.bool_, key=k)))
    with pytest.raises(ValueError):
        mr.random.bernoulli(0, [2])  # p must be a float
    with pytest.raises(ValueError):
        mr.random.bernoulli(mr.full((4, 3), 0.5), [2])  # shapes do not broadcast to [2]
    assert bool(mr.all(mr.random.truncated_normal(2.0, -2.0, key=k) == 2.0))


def test_complex_max_min_propagate_nan():
    z = np.array([[1 + 1j, 2 + 0j], [complex(0, np.nan), 1j]], np.complex64)
    for fn, ref in ((mr.max, np.max), (mr.min, np.min)):
        got, want = np.array(fn(mr.array(z), axis=1)), ref(z, axis=1)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert got[0] == want[0]


def test_array_format_buffers_inplace_dtype_and_scalar_masks():
    assert f"{mr.array(0.35487):.1f}" == "0.4" and f"{mr.array([1, 2])}" == "array([1, 2], dtype=int32)"
    with pytest.raises(TypeError):
        f"{mr.array([1.0, 2.0]):.2f}"
    x = mr.array(b"Hi")
    assert x.dtype == mr.uint8 and np.array(x).tolist() == [72, 105]
    a = mr.array([1])
    with pytest.raises(ValueError):  # in place, an int array stays int (MLX)
        a /= 1
    a = mr.array([1.0, 2.0, 3.0])
    a[True] = 5.0
    assert np.array(a).tolist() == [5.0, 5.0, 5.0]
    a[mr.array(False)] = 1.0
    assert np.array(a).tolist() == [5.0, 5.0, 5.0]
    assert repr(mr.array([1 + 1j, 1 - 1j])) == "array([1+1j, 1-1j], dtype=complex64)"
    assert repr(mr.ones((2, 2, 2), mr.int32)).count("\n\n") == 0


def test_integer_power_negative_exponent_complex_median_nan_softmax_0d():
    for d in (mr.int8, mr.int16, mr.int32, mr.int64):
        got = mr.power(mr.array([2, -2, 1, 3], d), mr.array([-1, -3, -9, 2], d))
        assert np.array(got).tolist() == [0, 0, 0, 9]  # MLX: a negative exponent gives 0
    assert bool(mr.isnan(mr.median(mr.array([1 + 0j, complex(np.nan, 0), 0j]))))
    with pytest.raises(ValueError):
        mr.softmax(mr.array(1.0), axis=-1)


def test_complex_matmul_and_its_gradient():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((2, 3, 4)) + 1j * rng.standard_normal((2, 3, 4))).astype(np.complex64)
    b = (rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))).astype(np.complex64)
    np.testing.assert_allclose(np.array(mr.array(a) @ mr.array(b)), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(mr.matmul(mr.array(a[0, 0]), mr.array(b))), a[0, 0] @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(mr.array(a[0]) @ mr.array(b.real)), a[0] @ b.real, rtol=1e-5, atol=1e-5)
    # d/da sum(real(a @ b)) = conj of the row sums of b^T, as the holomorphic rule gives
    g = np.array(mr.grad(lambda x: mr.real(x @ mr.array(b)).sum())(mr.array(a)))
    np.testing.assert_allclose(g, np.broadcast_to(np.conj(b.sum(axis=1)), a.shape), rtol=1e-5, atol=1e-5)


def test_linspace_endpoint():
    for num in (0, 1, 2, 5, 50):
        np.testing.assert_allclose(np.array(mr.linspace(0, 10, num, endpoint=False)),
                                   np.linspace(0, 10, num, endpoint=False), rtol=1e-6)
    np.testing.assert_allclose(np.array(mr.linspace(0, 1, 5)), np.linspace(0, 1, 5), rtol=1e-6)
    d = mr.linspace(0, 10, 5, False, mr.int64)
    assert d.dtype == mr.int64 and np.array(d).tolist() == [0, 2, 4, 6, 8]


def test_vmap_of_global_state_random_draws_per_example():
    mr.random.seed(4)
    out = np.array(mr.vmap(lambda x: x + mr.random.normal(()))(mr.zeros(8)))
    assert len(set(out.tolist())) == 8  # each example its own draw (as MLX)
    nested = np.array(mr.vmap(mr.vmap(lambda x: x + mr.random.uniform()))(mr.zeros((2, 3))))
    assert len(set(nested.reshape(-1).tolist())) == 6
    mr.random.seed(4)
    again = np.array(mr.vmap(lambda x: x + mr.random.normal(()))(mr.zeros(8)))
    np.testing.assert_array_equal(out, again)  # reproducible from the seed
    k = mr.random.key(0)  # an explicit key is the same key for every example
    same = np.array(mr.vmap(lambda x: x + mr.random.normal((), key=k))(mr.zeros(3)))
    assert len(set(same.tolist())) == 1
    f = mr.compile(mr.vmap(lambda x: x + mr.random.normal(())), inputs=[mr.random.state], outputs=[mr.random.state])
    a, b = np.array(f(mr.zeros(3))), np.array(f(mr.zeros(3)))
    assert len(set(a.tolist())) == 3 and not np.array_equal(a, b)


def test_grad_of_an_integer_argument_is_both_type_and_value_error():
    for err in (TypeError, ValueError):  # numpy-style TypeError, MLX's ValueError
        with pytest.raises(err):
            mr.grad(lambda x: x.astype(mr.float32).sum())(mr.array([1, 2], dtype=mr.uint8))
