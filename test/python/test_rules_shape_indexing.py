"""jvp / vjp / batch rules of the shape and indexing primitives (dialect/shape.py,
dialect/indexing.py), in float64:

* jvp against central finite differences,
* vjp against jvp: <vjp(u), v> == <u, jvp(v)>,
* vmap against a Python loop over the examples, batching different operands.
"""
import numpy as np
import pytest

import mirax as mr
from arrays import A

EPS = 1e-6


def rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def arrs(xs):
    return [A(np.asarray(x, np.float64)) for x in xs]


def call(f, xs):
    return np.asarray(f(*arrs(xs)))


def check_jvp_vjp(f, xs, seed=1):
    """f: float64 arrays -> one array, linear or not; xs: numpy float64 primals."""
    xs = [np.asarray(x, np.float64) for x in xs]
    ts = [rnd(x.shape, seed + i) for i, x in enumerate(xs)]
    outs, touts = mr.jvp(f, arrs(xs), arrs(ts))
    y, ty = np.asarray(outs[0]), np.asarray(touts[0])
    np.testing.assert_allclose(y, call(f, xs), rtol=1e-12, atol=1e-12)
    # central finite differences
    fd = (call(f, [x + EPS * t for x, t in zip(xs, ts)]) - call(f, [x - EPS * t for x, t in zip(xs, ts)])) / (2 * EPS)
    assert ty.shape == y.shape
    np.testing.assert_allclose(ty, fd, rtol=1e-6, atol=1e-7)
    # vjp / jvp consistency
    ct = rnd(y.shape, seed + 100)
    _, grads = mr.vjp(f, arrs(xs), arrs([ct]))
    lhs = sum(float(np.sum(np.asarray(g) * t)) for g, t in zip(grads, ts))
    rhs = float(np.sum(ct * ty))
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(rhs)), (lhs, rhs)
    for g, x in zip(grads, xs):
        assert np.asarray(g).shape == x.shape


def check_vmap(f, args, in_axes):
    """mr.vmap(f, in_axes)(*args) against stacking f on each example."""
    got = np.asarray(mr.vmap(f, in_axes=in_axes)(*[A(a) for a in args]))
    n = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    want = np.stack([np.asarray(f(*[A(np.take(a, b, axis=ax) if ax is not None else a)
                                    for a, ax in zip(args, in_axes)])) for b in range(n)])
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- shape ops ---------------------------------------------------------------------------

SHAPE_CASES = {
    "reshape": (lambda x: x.reshape(3, 4), [(2, 6)]),
    "reshape_flat": (lambda x: x.reshape(-1), [(2, 3, 2)]),
    "broadcast_lead_and_ones": (lambda x: mr.broadcast_to(x, (2, 3, 4)), [(3, 1)]),
    "broadcast_lead": (lambda x: mr.broadcast_to(x, (2, 4)), [(4,)]),
    "transpose": (lambda x: mr.transpose(x, (2, 0, 1)), [(2, 3, 4)]),
    "slice": (lambda x: x[1:4, 2:], [(5, 6)]),
    "slice_strided": (lambda x: x[1::2, ::3], [(5, 7)]),
    "slice_strided_3d": (lambda x: x[:, 1:6:2, 0:4:3], [(2, 7, 5)]),
    "slice_int": (lambda x: x[2], [(4, 3)]),
    "concatenate": (lambda a, b: mr.concatenate([a, b], axis=1), [(2, 3), (2, 4)]),
    "concatenate3": (lambda a, b: mr.concatenate([a, b, a], axis=0), [(2, 3), (1, 3)]),
    "pad": (lambda x, v: mr.pad(x, ((1, 0), (2, 1)), constant_values=v), [(2, 3), ()]),
    "pad_1d": (lambda x, v: mr.pad(x, (0, 2), constant_values=v), [(4,), ()]),
}


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
def test_shape_jvp_vjp(case):
    f, shapes = SHAPE_CASES[case]
    check_jvp_vjp(f, [rnd(s, i) for i, s in enumerate(shapes)])


def test_raw_slice_primitive_strided_vjp():
    from mirax.array import apply

    def f(x):
        return apply("slice", [x], start=(1, 0), stop=(6, 7), strides=(3, 4))
    check_jvp_vjp(f, [rnd((6, 7))])


def test_shape_vmap():
    x = rnd((3, 2, 6))
    check_vmap(lambda x: x.reshape(4, 3), [x], [0])
    check_vmap(lambda x: x.reshape(-1), [x], [1])
    check_vmap(lambda x: mr.broadcast_to(x, (2, 3, 6)), [rnd((3, 1, 6))], [0])
    check_vmap(lambda x: mr.broadcast_to(x, (4, 2, 3)), [rnd((2, 3, 1))], [2])
    check_vmap(lambda x: mr.transpose(x, (1, 0)), [x], [1])
    check_vmap(lambda x: mr.transpose(x, (1, 0)), [x], [0])
    check_vmap(lambda x: x[1::2, 1:5], [x], [0])
    check_vmap(lambda x: x[::2, 2:], [x], [1])
    a, b = rnd((3, 2, 4), 1), rnd((2, 5), 2)
    check_vmap(lambda a, b: mr.concatenate([a, b], axis=1), [a, b], [0, None])
    check_vmap(lambda a, b: mr.concatenate([b, a], axis=0), [np.moveaxis(a, 0, 2).copy(), rnd((1, 3, 4), 3)],
               [2, 1])


def test_pad_vmap():
    x, v = rnd((3, 2, 4)), rnd((3,), 1)
    f = lambda x, v: mr.pad(x, ((1, 0), (0, 2)), constant_values=v)  # noqa: E731
    check_vmap(f, [x, v[0]], [0, None])
    check_vmap(f, [x[0], v], [None, 0])
    check_vmap(f, [np.moveaxis(x, 0, 1).copy(), v], [1, 0])


# ---- indexing ----------------------------------------------------------------------------

IDX = np.array([[0, 2], [2, -1], [7, 2]], np.int32)  # repeats, a negative and an out-of-range index
ALONG = np.array([[0, 0, 4], [1, -1, 9], [2, 2, 2], [3, 0, 3]], np.int32)


INDEX_CASES = {
    "take_axis0": (lambda x: mr.take(x, IDX, axis=0), [(5, 3)]),
    "take_axis1": (lambda x: mr.take(x, IDX, axis=1), [(2, 4, 3)]),
    "take_flat": (lambda x: mr.take(x, np.array([5, 5, 0])), [(2, 3)]),
    "take_scalar_index": (lambda x: mr.take(x, A(np.int32(3)), axis=1), [(2, 5)]),
    "take_along_axis1": (lambda x: mr.take_along_axis(x, ALONG, axis=1), [(4, 5)]),
    "take_along_axis0": (lambda x: mr.take_along_axis(x, ALONG.T.copy(), axis=0), [(5, 4)]),
    "take_along_axis_bcast": (lambda x: mr.take_along_axis(x, ALONG[:1, None, :], axis=2), [(2, 3, 5)]),
    "getitem_array": (lambda x: x[:, np.array([1, 1, 0])], [(3, 2)]),
    "scatter_add": (lambda x, u: mr.scatter_add(x, np.array([1, 1, -1]), u, axis=0), [(5, 3), (3, 3)]),
    "scatter_add_axis1": (lambda x, u: mr.scatter_add(x, IDX, u, axis=1), [(2, 4, 3), (2, 3, 2, 3)]),
    "at_add": (lambda x, u: x.at[np.array([0, 2, 0])].add(u), [(4, 2), (3, 2)]),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_index_jvp_vjp(case):
    f, shapes = INDEX_CASES[case]
    check_jvp_vjp(f, [rnd(s, i) for i, s in enumerate(shapes)])


def test_take_vjp_accumulates_repeats():
    x = A(np.zeros(4))
    _, (g,) = mr.vjp(lambda x: mr.take(x, np.array([1, 1, 3, -1, 9])), [x], [A(np.ones(5))])
    np.testing.assert_array_equal(np.asarray(g), [0, 2, 0, 3])
    _, (g,) = mr.vjp(lambda x: mr.take_along_axis(x, np.array([[1, 1, 9]]), axis=1), [A(np.zeros((2, 4)))],
                     [A(np.arange(6.0).reshape(2, 3))])
    np.testing.assert_array_equal(np.asarray(g), [[0, 1, 0, 2], [0, 7, 0, 5]])


def test_take_vmap():
    x = rnd((3, 5, 2))
    idx = np.array([[0, 4, 4], [-1, 2, 9], [1, 1, 0]], np.int32)  # (batch, k)
    take0 = lambda x, i: mr.take(x, i, axis=0)  # noqa: E731
    take1 = lambda x, i: mr.take(x, i, axis=1)  # noqa: E731
    check_vmap(take0, [x, idx[0]], [0, None])               # batched x, shared indices
    check_vmap(take0, [x[0], idx], [None, 0])               # shared x, batched indices
    check_vmap(take1, [x[0].T.copy(), idx.T.copy()], [None, 1])
    check_vmap(take0, [x, idx], [0, 0])                     # a gather per example
    check_vmap(take1, [np.moveaxis(x, 0, 2).copy(), idx.T.copy()], [2, 1])
    i2 = np.array([[[0, 1], [1, 1]], [[4, 0], [3, 3]], [[2, 2], [0, -2]]], np.int64)  # (batch, 2, 2)
    check_vmap(take0, [x, i2], [0, 0])
    check_vmap(take1, [rnd((3, 2, 5, 2), 3), i2.astype(np.uint32)], [0, 0])


def test_take_along_axis_vmap():
    x = rnd((3, 4, 5))
    idx = np.stack([ALONG, ALONG[::-1], ALONG % 3])  # (3, 4, 3)
    f = lambda x, i: mr.take_along_axis(x, i, axis=1)  # noqa: E731
    check_vmap(f, [x, ALONG], [0, None])
    check_vmap(f, [x[0], idx], [None, 0])
    check_vmap(f, [x, idx], [0, 0])
    check_vmap(f, [np.moveaxis(x, 0, 2).copy(), idx], [2, 0])


def test_scatter_add_vmap():
    x, u = rnd((3, 5, 2)), rnd((3, 4, 2), 1)
    idx = np.array([[0, 4, 4, 1], [-1, 2, 9, 2], [1, 1, 0, 1]], np.int32)
    f = lambda x, i, u: mr.scatter_add(x, i, u, axis=0)  # noqa: E731
    check_vmap(f, [x, idx[0], u], [0, None, 0])
    check_vmap(f, [x, idx[0], u[0]], [0, None, None])
    check_vmap(f, [x[0], idx[0], u], [None, None, 0])
    check_vmap(f, [x[0], idx, u[0]], [None, 0, None])       # shared x and updates, batched indices
    check_vmap(f, [x, idx, u], [0, 0, 0])
    check_vmap(f, [np.moveaxis(x, 0, 2).copy(), idx.T.copy(), np.moveaxis(u, 0, 1).copy()], [2, 1, 1])
    g = lambda x, i, u: mr.scatter_add(x, i, u, axis=1)  # noqa: E731
    x2, u2 = rnd((3, 2, 5), 2), rnd((3, 2, 2, 2), 3)
    i2 = np.array([[[0, 1], [1, 1]], [[4, 0], [3, 3]], [[2, 2], [0, -2]]], np.int32)
    check_vmap(g, [x2, i2, u2], [0, 0, 0])


def test_vmap_of_jvp_and_vjp():
    """The rules nest: vmap over jvp and vjp of a chain of shape and indexing ops."""
    idx = np.array([2, 0, 2])

    def f(x):
        y = mr.take(x.T, idx, axis=1)[::2]
        return mr.pad(mr.concatenate([y, y], axis=1), 1).reshape(-1)

    xs, ts = rnd((4, 3, 2)), rnd((4, 3, 2), 1)
    push = lambda x, t: mr.jvp(f, [x], [t])[1][0]  # noqa: E731
    check_vmap(push, [xs, ts], [0, 0])
    check_vmap(push, [xs[0], ts], [None, 0])
    ct = rnd((4, 24), 2)
    pull = lambda x, c: mr.vjp(f, [x], [c])[1][0]  # noqa: E731
    check_vmap(pull, [xs, ct], [0, 0])
    check_vmap(pull, [xs[0], ct], [None, 0])
