"""slice / concatenate / pad / take / take_along_axis / scatter_add and `a[...]`, against numpy.

Every case runs through the real lowering and JIT; numpy is only the oracle.
"""
import numpy as np
import pytest

import mirax as mr
from mirax.array import apply
from mirax.dialect import PRIMITIVES

DTYPES = [np.float32, np.int32, np.bool_]


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.integers(-9, 10, size=shape)).astype(dtype)


def check(got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


# ---- primitives, directly ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_primitive(dtype):
    x = data((4, 5), dtype)
    for start, stop, strides in [((1, 0), (4, 5), (2, 2)), ((0, 2), (0, 5), (1, 1)), ((3, 4), (4, 5), (1, 3))]:
        out = apply("slice", [mr.array(x)], start=start, stop=stop, strides=strides)
        check(out, PRIMITIVES["slice"].reference(x, start=start, stop=stop, strides=strides))


def test_slice_primitive_rejects_bad_bounds():
    x = mr.zeros((3,))
    with pytest.raises(mr.MiraxError, match="mirax.slice"):
        apply("slice", [x], start=(2,), stop=(1,), strides=(1,))
    with pytest.raises(mr.MiraxError, match="strides must be positive"):
        apply("slice", [x], start=(0,), stop=(3,), strides=(-1,))
    with pytest.raises(mr.MiraxError, match="mirax.slice"):
        apply("slice", [x], start=(0,), stop=(4,), strides=(1,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate(dtype):
    x, y = data((2, 3), dtype), data((2, 4), dtype, 1)
    check(mr.concatenate([mr.array(x), mr.array(y)], axis=1), np.concatenate([x, y], 1))
    check(mr.concatenate([mr.array(x), mr.array(x), mr.array(x)], axis=-2), np.concatenate([x, x, x], 0))
    check(mr.concatenate([mr.array(x)]), x)
    e = np.zeros((0, 3), dtype)
    check(mr.concatenate([mr.array(e), mr.array(x)]), np.concatenate([e, x]))
    check(mr.concatenate([mr.array(e), mr.array(e)]), np.concatenate([e, e]))


def test_concatenate_promotes_and_checks():
    check(mr.concatenate([mr.array([1, 2]), mr.array([0.5])]), np.array([1, 2, 0.5], np.float32))
    with pytest.raises(mr.MiraxError, match="concatenate"):
        mr.concatenate([mr.zeros((2, 3)), mr.zeros((3, 2))])
    with pytest.raises(mr.MiraxError, match="concatenate"):
        mr.concatenate([mr.zeros((2, 3)), mr.zeros((2, 3, 1))], axis=0)
    with pytest.raises(mr.MiraxError, match="out of bounds"):
        mr.concatenate([mr.zeros((2, 3)), mr.zeros((2, 3))], axis=2)
    with pytest.raises(mr.MiraxError, match="concatenate"):
        mr.concatenate([mr.array(1.0), mr.array(2.0)])
    with pytest.raises(mr.MiraxError, match="test_shape_indexing.py"):  # names the user's line
        mr.concatenate([mr.zeros((2, 3)), mr.zeros((3, 2))])


@pytest.mark.parametrize("dtype", DTYPES)
def test_stack_and_split(dtype):
    x, y = data((2, 3), dtype), data((2, 3), dtype, 1)
    check(mr.stack([mr.array(x), mr.array(y)]), np.stack([x, y]))
    check(mr.stack([mr.array(x), mr.array(y)], axis=-1), np.stack([x, y], -1))
    check(mr.stack([mr.array(x[0, 0]), mr.array(y[0, 0])]), np.stack([x[0, 0], y[0, 0]]))
    z = data((6, 4), dtype)
    for ios, ax in [(3, 0), ([1, 3], 1), ([2, -1], 0), ([0, 9], 1), (2, 1)]:
        got = mr.split(mr.array(z), ios, axis=ax)
        want = np.split(z, ios, axis=ax)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            check(g, w)
    with pytest.raises(mr.MiraxError, match="equal sections"):
        mr.split(mr.array(z), 4)
    with pytest.raises(mr.MiraxError, match="same shape"):
        mr.stack([mr.zeros((2,)), mr.zeros((3,))])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad(dtype):
    x = data((2, 3), dtype)
    check(mr.pad(mr.array(x), ((1, 0), (2, 1))), np.pad(x, ((1, 0), (2, 1))))
    check(mr.pad(mr.array(x), 1, constant_values=1), np.pad(x, 1, constant_values=1))
    check(mr.pad(mr.array(x), (0, 2)), np.pad(x, (0, 2)))
    e = np.zeros((0, 2), dtype)
    check(mr.pad(mr.array(e), ((1, 1), (0, 0))), np.pad(e, ((1, 1), (0, 0))))
    with pytest.raises(mr.MiraxError, match="pad"):
        mr.pad(mr.array(x), ((1, 0), (-1, 1)))
    with pytest.raises(mr.MiraxError, match="pad"):
        mr.pad(mr.array(x), ((1, 0), (1, 1), (1, 1)))


def test_pad_float_value_and_static_slice_repeat_tile():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check(mr.pad(mr.array(x), ((0, 1), (1, 0)), constant_values=-2.5), np.pad(x, ((0, 1), (1, 0)), constant_values=-2.5))
    check(mr.slice(mr.array(x), (1, -2), (0, 1), (1, 2)), x[1:2, 1:3])
    check(mr.repeat(mr.array(x), 2, axis=1), np.repeat(x, 2, 1))
    check(mr.repeat(mr.array(x), 3), np.repeat(x, 3))
    check(mr.tile(mr.array(x), (2, 1, 2)), np.tile(x, (2, 1, 2)))


# ---- take / take_along_axis / scatter_add --------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_take(dtype):
    x = data((4, 5), dtype)
    a = mr.array(x)
    i = np.array([[0, -1, 3], [2, 2, -4]], np.int32)
    check(mr.take(a, mr.array(i), axis=1), np.take(x, i, axis=1))
    check(mr.take(a, mr.array(i), axis=0), np.take(x, i, axis=0))
    check(mr.take(a, [7, -20]), np.take(x, [7, 0]))  # axis=None: flattened
    check(mr.take(a, 2, axis=-1), np.take(x, 2, axis=-1))  # 0-d indices drop the axis
    check(mr.take(a, np.zeros((0,), np.int32), axis=0), np.take(x, [], axis=0).astype(x.dtype))


def test_take_index_dtypes_and_clamping():
    x = np.arange(5, dtype=np.float32)
    for idt in [np.int8, np.int16, np.int64, np.uint8, np.uint32]:
        i = np.array([0, 4, 2], idt)
        check(mr.take(mr.array(x), mr.array(i)), x[i.astype(np.int64)])
    # out-of-range indices held in arrays clamp (MLX/JAX) instead of crashing
    i = np.array([-1, -5, -6, 5, 100, -100], np.int32)
    check(mr.take(mr.array(x), mr.array(i)), x[[4, 0, 0, 4, 4, 0]])
    check(mr.take(mr.array(x), mr.array(np.array([200, 255], np.uint8))), x[[4, 4]])
    with pytest.raises(mr.MiraxError, match="integer"):
        mr.take(mr.array(x), mr.array([0.5]))
    with pytest.raises(mr.MiraxError, match="out of bounds"):
        mr.take(mr.array(x), [0], axis=1)
    with pytest.raises(mr.MiraxError, match="size 0"):
        mr.take(mr.zeros((0, 2)), [0], axis=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_along_axis(dtype):
    x = data((3, 4), dtype)
    i = np.array([[0, 3], [1, -1], [2, 2]], np.int32)
    check(mr.take_along_axis(mr.array(x), mr.array(i), 1), np.take_along_axis(x, i % 4, 1))
    j = np.array([[2, 0, 1, 1]], np.int32)
    check(mr.take_along_axis(mr.array(x), mr.array(j), 0), np.take_along_axis(x, j, 0))
    # indices broadcast against x outside the axis
    k = np.array([[1], [0]], np.int32).reshape(2, 1)
    x3 = data((2, 3, 4), dtype)
    kk = np.array([[[3, 0]]], np.int32)  # (1, 1, 2) broadcasts to (2, 3, 2)
    check(mr.take_along_axis(mr.array(x3), mr.array(kk), -1),
          np.take_along_axis(x3, np.broadcast_to(kk, (2, 3, 2)), -1))
    check(mr.take_along_axis(mr.array(x), mr.array(np.array([5, 0], np.int32)), None), x.reshape(-1)[[5, 0]])
    with pytest.raises(mr.MiraxError, match="take_along_axis"):
        mr.take_along_axis(mr.array(x), mr.array(k[:, 0]), 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add(dtype):
    x = data((4, 3), dtype)
    i = np.array([0, -1, 0, 9], np.int32)
    u = data((4, 3), dtype, 2)
    a = mr.array(x)
    got = mr.scatter_add(a, mr.array(i), mr.array(u), axis=0)
    want = x.copy()
    for r, j in enumerate([0, 3, 0, None]):  # -1 wraps; 9 is out of range: its update is dropped
        if j is not None:
            want[j] = (want[j] | u[r]) if dtype == np.bool_ else want[j] + u[r]
    check(got, want)
    check(a, x)  # the input buffer is not written in place
    u2 = data((4, 2), dtype, 3)
    check(mr.scatter_add(a, mr.array(np.array([2, 2], np.int32)), mr.array(u2), axis=1),
          PRIMITIVES["scatter_add"].reference(x, np.array([2, 2]), u2, axis=1))


def test_scatter_add_broadcasts_and_checks():
    check(mr.scatter_add(mr.zeros((4,)), [0, 0, 3], 1.0), np.array([2, 0, 0, 1], np.float32))
    check(mr.scatter_add(mr.zeros((2, 2)), np.zeros((0,), np.int32), mr.zeros((0, 2))), np.zeros((2, 2), np.float32))
    with pytest.raises(mr.MiraxError, match="scatter_add"):
        mr.scatter_add(mr.zeros((4,)), [0, 1], mr.zeros((3,)))


def test_at_add():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = mr.array(x).at[[0, 0, 2], 1:].add(1.0)
    want = x.copy()
    np.add.at(want, (np.array([0, 0, 2])[:, None], np.arange(1, 4)[None]), 1.0)
    check(got, want)
    check(mr.array(x).at[-1].subtract(mr.array([1.0, 2, 3, 4])), x - np.array([[0, 0, 0, 0]] * 2 + [[1, 2, 3, 4]], np.float32))


# ---- a[key] ------------------------------------------------------------------------------

X = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)

KEYS = [
    0, -1, 1, (1, 2), (-1, -3, 0, 4), (),
    slice(None), slice(1, None), slice(None, None, -1), slice(5, 1, -1), slice(3, 1), slice(-100, 100),
    (slice(None), slice(None, None, 2)), (slice(1, None), slice(2, 0, -1), slice(None, None, -3)),
    (None, Ellipsis, 0), (Ellipsis, None), (None,), (0, None, 1, None), Ellipsis, (Ellipsis, 2),
    (0, Ellipsis, slice(None, None, -1), 1),
    [1, 0, 1], [-1], (slice(None), [2, 0]), (0, slice(None), [3, -1]), (Ellipsis, [0, 4, 4]),
    (slice(None), [0, 2], slice(None), [1, 4]), ([[0, 1]], [[2], [0]]), (1, slice(None, None, -2), None, [-1, 0]),
    (None, 0, None, [1, 2], None), (0, [1, 2], slice(None), 0), ([0, 1], 2, [3, 3]), (np.array([True, False]),),
    (slice(None), np.array([[True, False, True, False], [False] * 4, [True] * 4])), ([],), (slice(None), np.int64(2)),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k)[:40] for k in KEYS])
def test_getitem_matches_numpy(key):
    check(mr.array(X.astype(np.int32))[key], X.astype(np.int32)[key])


@pytest.mark.parametrize("dtype", DTYPES)
def test_getitem_dtypes_and_small_shapes(dtype):
    x = data((3, 4), dtype)
    a = mr.array(x)
    for key in [1, (slice(None), -1), (slice(None, None, -1), [0, 3]), (None, 1, slice(1, 3))]:
        check(a[key], x[key])
    s = data((), dtype)
    check(mr.array(s)[...], s[...])
    check(mr.array(s)[None], s[None])
    check(mr.array(s)[()], s[()])
    e = np.zeros((0, 3), dtype)
    check(mr.array(e)[:, 1], e[:, 1])
    check(mr.array(e)[::-1], e[::-1])


def test_getitem_with_array_indices():
    x = X.astype(np.float32)
    a = mr.array(x)
    i = np.array([[1, -1]], np.int32)
    check(a[:, mr.array(i), 0], x[:, i, 0])
    check(a[0, 0, 0, mr.array(i)], x[0, 0, 0, i])
    check(a[mr.array(i), 0, mr.array(i)], x[i, 0, i])  # non-adjacent: index dims first
    check(a[1, mr.array(np.int32(2))], x[1, 2])
    # array indices out of range clamp instead of raising
    check(a[0, 0, mr.array([9, -9])], x[0, 0, [3, 0]])
    check(a[mr.array([5]), mr.array([0]), 0, 0], x[[1], [0], 0, 0])
    check(a[mr.array([1])][0, 0], x[[1]][0, 0])


def test_getitem_errors():
    a = mr.array(np.zeros((3, 4), np.float32))
    for key, exc, msg in [(3, IndexError, "out of bounds"), (-4, IndexError, "out of bounds"),
                          ((0, 4), IndexError, "axis 1 with size 4"), ((0, 0, 0), IndexError, "too many"),
                          ((Ellipsis, Ellipsis), IndexError, "single ellipsis"), ([3], IndexError, "out of bounds"),
                          (0.5, IndexError, "valid indices"), ([0.5], IndexError, "integers"),
                          (mr.array([True, False, True]), IndexError, "mr.where"),
                          (mr.array([0.0]), IndexError, "integers"), (True, IndexError, "boolean")]:
        with pytest.raises(exc, match=msg):
            a[key]
    with pytest.raises(IndexError, match="test_shape_indexing.py"):
        a[7]
    with pytest.raises(IndexError, match="test_shape_indexing.py"):  # assignment checks its key the same way
        a[7] = 1.0
    with pytest.raises(TypeError):
        len(mr.array(1.0))


def test_iteration_uses_getitem():
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    rows = list(mr.array(x))
    assert len(rows) == 3
    for r, w in zip(rows, x):
        check(r, w)


def test_lowered_ir_uses_upstream_ops():
    from mirax.device import kernel_module_text
    from mirax.lowering.emit import kernel_function
    from mirax.dialect.core import Aval
    from mirax.dialect import dtypes as dt
    f32, i32 = dt.float32, dt.int32
    take = kernel_function("k", PRIMITIVES["take"], {"axis": 0}, [Aval((4, 2), f32), Aval((3,), i32)],
                           Aval((3, 2), f32))
    assert "linalg.generic" in take and "tensor.extract" in take and "linalg.index" in take
    sc = kernel_function("k", PRIMITIVES["scatter_add"], {"axis": 0},
                         [Aval((4,), f32), Aval((3,), i32), Aval((3,), f32)], Aval((4,), f32))
    assert "scf.for" in sc and "tensor.insert" in sc
    pad = kernel_function("k", PRIMITIVES["pad"], {"low": (1,), "high": (0,)}, [Aval((4,), f32), Aval((), f32)],
                          Aval((5,), f32))
    assert "tensor.pad" in pad
    assert "mirax.slice" in kernel_module_text(PRIMITIVES["slice"], {"start": (0,), "stop": (2,), "strides": (1,)},
                                               [Aval((4,), f32)], Aval((2,), f32))


def test_getitem_index_arrays_must_broadcast():
    a = mr.array(np.zeros((3, 4), np.float32))
    with pytest.raises(IndexError, match="broadcast"):
        a[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="broadcast"):
        a[mr.array([0, 1]), mr.array([0, 1, 2])]
