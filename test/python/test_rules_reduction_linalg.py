"""Transform rules (jvp, vjp, batch) of the reduction, matmul and creation primitives.

Every check is in float64: jvp against central finite differences, the vjp against the
jvp (<vjp(u), v> == <u, jvp(v)>), and vmap against a Python loop over the examples.
"""
import numpy as np
import pytest

import mirax as mr
from arrays import A

EPS = 1e-6
RTOL = 1e-6


def _np(x):
    return np.asarray(x)


def _rand(rng, shape):
    return rng.standard_normal(shape)


def _call(fun, xs):
    return _np(fun(*[A(x) for x in xs]))


def check_ad(fun, xs, rng, fd=True):
    """jvp vs central differences and vjp vs jvp, at numpy float64 inputs `xs`."""
    ts = [_rand(rng, x.shape) for x in xs]
    outs, touts = mr.jvp(fun, [A(x) for x in xs], [A(t) for t in ts])
    y, ty = _np(outs[0]), _np(touts[0])
    np.testing.assert_allclose(y, _call(fun, xs), rtol=1e-12, atol=1e-12)
    assert ty.shape == y.shape
    if fd:
        plus = _call(fun, [x + EPS * t for x, t in zip(xs, ts)])
        minus = _call(fun, [x - EPS * t for x, t in zip(xs, ts)])
        np.testing.assert_allclose(ty, (plus - minus) / (2 * EPS), rtol=RTOL, atol=1e-6)
    u = _rand(rng, y.shape)
    _, cts = mr.vjp(fun, [A(x) for x in xs], [A(u)])
    lhs = sum(float(np.sum(_np(c) * t)) for c, t in zip(cts, ts))
    np.testing.assert_allclose(lhs, float(np.sum(u * ty)), rtol=1e-10, atol=1e-10)
    return ty, [_np(c) for c in cts]


def check_vmap(fun, xs, in_axes):
    """vmap(fun, in_axes) against stacking fun on each example."""
    got = _np(mr.vmap(fun, in_axes=in_axes)(*[A(x) for x in xs]))
    n = next(x.shape[a] for x, a in zip(xs, in_axes) if a is not None)
    want = np.stack([_call(fun, [x if a is None else np.take(x, i, axis=a) for x, a in zip(xs, in_axes)])
                     for i in range(n)])
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- reductions ----------------------------------------------------------------------------

RED_CASES = [(1, False), ((0, 2), True), (None, False), (-1, True)]


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axis,keepdims", RED_CASES)
def test_reduce_ad(name, axis, keepdims, rng):
    fn = getattr(mr, name)
    x = _rand(rng, (2, 3, 4))
    if name == "prod":
        x = 0.5 + rng.random((2, 3, 4))  # keep products of 24 elements moderate
    check_ad(lambda a: fn(a, axis=axis, keepdims=keepdims), [x], rng)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "argmax", "argmin"])
def test_reduce_vmap(name, rng):
    fn = getattr(mr, name)
    x = _rand(rng, (2, 3, 4))
    for axis, keepdims in [(1, False), (-1, True)]:
        for in_axis in [0, 1]:
            check_vmap(lambda a: fn(a, axis=axis, keepdims=keepdims), [x], (in_axis,))
    if not name.startswith("arg"):
        check_vmap(lambda a: fn(a, axis=(0, 1), keepdims=True), [x], (2,))


def test_prod_with_zeros(rng):
    # rows with no zero, one zero, two zeros
    x = np.array([[1.5, -2.0, 3.0, 0.5], [2.0, 0.0, -1.5, 4.0], [0.0, 2.0, 0.0, 3.0]])
    g = _np(mr.grad(lambda a: mr.prod(a, axis=1).sum())(A(x)))
    want = np.array([[np.prod(np.delete(r, j)) for j in range(4)] for r in x])
    np.testing.assert_allclose(g, want, rtol=1e-12)
    assert np.all(np.isfinite(g))
    # prod is a polynomial: finite differences are exact enough even at zeros
    ty, _ = check_ad(lambda a: mr.prod(a, axis=1), [x], rng)
    assert np.all(np.isfinite(ty))
    # whole-array product with one zero
    g = _np(mr.grad(lambda a: mr.prod(a))(A(x[1])))
    np.testing.assert_allclose(g, [0.0, 2.0 * -1.5 * 4.0, 0.0, 0.0])


def test_prod_second_order_and_complex(rng):
    # exact to second order with zeros (the rules only multiply)
    for zeros in [[], [2], [0, 2]]:
        y = np.array([1.5, -2.0, 0.7, 3.0])
        y[zeros] = 0
        h = _np(mr.hessian(lambda a: mr.prod(a))(A(y)))
        want = np.array([[0 if i == j else np.prod(np.delete(y, [i, j])) for j in range(4)] for i in range(4)])
        np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-12)
    # complex: the cotangent times the conjugate derivative
    x = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
    x[1] = 0
    u = np.complex64(0.3 - 0.7j)
    _, (g,) = mr.vjp(lambda a: mr.prod(a), [A(x)], [A(u)])
    want = np.array([u * np.conj(np.prod(np.delete(x, i))) for i in range(4)])
    np.testing.assert_allclose(_np(g), want, rtol=1e-5, atol=1e-6)


def test_max_min_ties_share():
    x = A(np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]))
    g = _np(mr.grad(lambda a: mr.max(a, axis=1).sum())(x))
    np.testing.assert_allclose(g, [[0, 0.5, 0.5, 0], [0.25] * 4])
    g = _np(mr.grad(lambda a: mr.min(a, axis=1).sum())(x))
    np.testing.assert_allclose(g, [[0, 0, 0, 1], [0.25] * 4])
    _, (ty,) = mr.jvp(lambda a: mr.max(a, axis=1), [x], [A(np.arange(8.0).reshape(2, 4))])
    np.testing.assert_allclose(_np(ty), [1.5, 5.5])


def test_argmax_argmin_no_derivative(rng):
    x = _rand(rng, (3, 4))
    for fn in [mr.argmax, mr.argmin]:
        _, (ty,) = mr.jvp(lambda a: fn(a, axis=1), [A(x)], [A(x)])
        assert not np.any(_np(ty))
        # the index only selects: the gradient flows through the multiplication alone
        g = _np(mr.grad(lambda a: (a * fn(a, axis=1, keepdims=True).astype(mr.float64)).sum())(A(x)))
        np.testing.assert_allclose(g, np.broadcast_to(np.asarray(
            (np.argmax if fn is mr.argmax else np.argmin)(x, axis=1))[:, None], x.shape).astype(float))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("inclusive", [True, False])
def test_cumsum_ad(axis, reverse, inclusive, rng):
    x = _rand(rng, (3, 4))
    fun = lambda a: mr.cumsum(a, axis=axis, reverse=reverse, inclusive=inclusive)  # noqa: E731
    _, (ct,) = check_ad(fun, [x], rng)
    # the vjp is the transpose of the (linear) map
    u = _rand(rng, x.shape)
    y = _np(mr.vjp(fun, [A(x)], [A(u)])[1][0])
    n = x.shape[axis]
    eye = np.eye(n)
    m = np.stack([_call(lambda a: mr.cumsum(a, axis=0, reverse=reverse, inclusive=inclusive), [eye[i]])
                  for i in range(n)])  # m[i] = image of e_i
    want = np.moveaxis(np.tensordot(np.moveaxis(u, axis, -1), m.T, axes=1), -1, axis)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_cumsum_vmap(rng):
    x = _rand(rng, (3, 4, 2))
    for reverse, inclusive in [(False, True), (True, False)]:
        for in_axis in [0, 1, 2]:
            check_vmap(lambda a: mr.cumsum(a, axis=-1, reverse=reverse, inclusive=inclusive), [x], (in_axis,))


# ---- matmul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((2, 3, 4), (2, 4, 5)), ((4,), (4, 3)),
                                   ((2, 3, 4), (4, 5))])
def test_matmul_ad(sa, sb, rng):
    a, b = _rand(rng, sa), _rand(rng, sb)
    _, (ga, gb) = check_ad(lambda x, y: x @ y, [a, b], rng)
    if len(sa) == 2 and len(sb) == 2:
        u = _rand(rng, (sa[0], sb[1]))
        _, (ga, gb) = mr.vjp(lambda x, y: x @ y, [A(a), A(b)], [A(u)])
        np.testing.assert_allclose(_np(ga), u @ b.T, rtol=1e-12)
        np.testing.assert_allclose(_np(gb), a.T @ u, rtol=1e-12)


@pytest.mark.parametrize("in_axes", [(0, 0), (1, 1), (0, None), (None, 0), (1, None), (None, 2), (2, 1)])
def test_matmul_vmap(in_axes, rng):
    # per example: (3, 4) @ (4, 2); the batch (size 5) sits at in_axes
    def batched(shape, ax):
        return _rand(rng, shape) if ax is None else _rand(rng, shape[:ax] + (5,) + shape[ax:])
    a, b = batched((3, 4), in_axes[0]), batched((4, 2), in_axes[1])
    check_vmap(lambda x, y: x @ y, [a, b], in_axes)


def test_matmul_vmap_batched_operands(rng):
    # per example: (2, 3, 4) @ (2, 4, 2), one operand unbatched
    a, b = _rand(rng, (2, 5, 3, 4)), _rand(rng, (2, 4, 2))
    check_vmap(lambda x, y: x @ y, [a, b], (1, None))
    a, b = _rand(rng, (2, 3, 4)), _rand(rng, (2, 4, 2, 5))
    check_vmap(lambda x, y: x @ y, [a, b], (None, 3))


def test_matmul_vmap_of_grad(rng):
    a, b = _rand(rng, (5, 3, 4)), _rand(rng, (4, 2))
    fun = mr.grad(lambda x, y: mr.tanh(x @ y).sum())
    got = _np(mr.vmap(fun, in_axes=(0, None))(A(a), A(b)))
    want = np.stack([(1 - np.tanh(a[i] @ b) ** 2) @ b.T for i in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-10)


# ---- creation ---------------------------------------------------------------------------------

def test_creation_ops_in_transforms(rng):
    x = _rand(rng, (4, 4))
    fun = lambda a: a * mr.arange(4).astype(mr.float64) + mr.constant(np.ones(4), mr.float64)  # noqa: E731
    check_ad(fun, [x], rng)
    check_vmap(fun, [x], (0,))
    check_vmap(fun, [x], (1,))
    g = _np(mr.grad(lambda a: (fun(a) ** 2).sum())(A(x)))
    np.testing.assert_allclose(g, 2 * (x * np.arange(4) + 1) * np.arange(4), rtol=1e-12)


# ---- compositions -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mean", "var", "logsumexp", "softmax", "std"])
def test_grad_compositions(name, rng):
    x = _rand(rng, (3, 4))
    w = _rand(rng, (3, 4))
    fn = getattr(mr, name)
    if name == "softmax":
        loss = lambda a: (fn(a, axis=-1) * A(w)).sum()  # noqa: E731
    else:
        loss = lambda a: (fn(a, axis=1) * A(w[:, 0])).sum() + fn(a)  # noqa: E731
    g = _np(mr.grad(loss)(A(x)))
    v = _rand(rng, x.shape)
    fd = (float(_call(loss, [x + EPS * v])) - float(_call(loss, [x - EPS * v]))) / (2 * EPS)
    np.testing.assert_allclose(float(np.sum(g * v)), fd, rtol=RTOL, atol=1e-7)
