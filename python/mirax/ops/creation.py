"""Array creation: zeros, ones, full, arange, linspace, eye, *_like.

    mr.full((2, 3), 7.0)      mr.arange(0, 10, 2)      mr.eye(3)
"""
from __future__ import annotations

import numpy as np

from ..dialect import dtypes as dt
from ..dialect.core import Aval, MiraxError
from ..dialect.creation import arange_length, dense_attr
from ..array import Array, apply_typed, array, where_text

__all__ = ["array", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "empty", "empty_like", "arange",
           "linspace", "eye", "identity", "constant"]


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise MiraxError(f"negative dimensions are not allowed: {shape}{where_text()}")
    return shape


def constant(value: np.ndarray, dtype: dt.Dtype) -> Array:
    """A `mirax.constant` node (kept as an op, so traces show it)."""
    from mlir import ir
    from ..runtime.context import context
    with context(), ir.Location.unknown():
        attr = dense_attr(np.asarray(value), dtype)
    return apply_typed("constant", [], Aval(tuple(np.shape(value)), dtype), value=attr)


def full(shape, vals, dtype=None) -> Array:
    """An array of `shape` filled with `vals` (a scalar or an array broadcast to it)."""
    from .shape import broadcast_to
    shape = _shape(shape)
    if isinstance(vals, Array):
        v = vals if dtype is None else vals.astype(dtype)
        return broadcast_to(v, shape)
    v = array(vals, dtype)
    return broadcast_to(v, shape)


def zeros(shape, dtype=dt.float32) -> Array:
    return full(shape, 0, dtype)


def ones(shape, dtype=dt.float32) -> Array:
    return full(shape, 1, dtype)


def zeros_like(a: Array, dtype=None) -> Array:
    return full_like(a, 0, dtype)


def ones_like(a: Array, dtype=None) -> Array:
    return full_like(a, 1, dtype)


def empty_like(a: Array, dtype=None) -> Array:
    """An array shaped like `a` (MLX leaves it uninitialised; mirax fills zeros)."""
    return full_like(a, 0, dtype)


def empty(shape, dtype=dt.float32) -> Array:
    """An array of `shape` (MLX leaves it uninitialised; mirax fills zeros)."""
    return full(shape, 0, dtype)


def full_like(a: Array, vals, dtype=None) -> Array:
    if dtype is not None:
        from .elementwise import astype
        return full_like(astype(a, dtype) if isinstance(a, Array) else array(a, dtype), vals)
    from .. import shapeless
    if shapeless.active():
        # `vals` broadcast against `a` itself, so the shape follows `a` at new input shapes
        from .elementwise import where
        v = vals.astype(a.dtype) if isinstance(vals, Array) else array(vals, a.dtype)
        return where(True, v, a)
    return full(a.shape, vals, a.dtype)


def arange(start, stop=None, step=None, dtype=None) -> Array:
    """`mr.arange(5)`, `mr.arange(1, 2, 0.25)`; int32 when all bounds are ints, as MLX."""
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dtype = dt.int32 if ints else dt.float32
    d = dt.to_dtype(dtype)
    try:
        n = arange_length(float(start), float(stop), float(step))
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    return apply_typed("arange", [], Aval((n,), d), start=float(start), step=float(step))


def linspace(start, stop, num=50, endpoint=True, dtype=dt.float32) -> Array:
    """`num` evenly spaced values from `start` to `stop` (included unless `endpoint=False`,
    then the step is (stop - start) / num), as numpy and MLX."""
    if isinstance(endpoint, dt.Dtype):  # linspace(a, b, n, mr.int32): the old positional dtype
        endpoint, dtype = True, endpoint
    if num < 0:
        raise MiraxError(f"linspace: num must be non-negative, got {num}{where_text()}")
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    return apply_typed("arange", [], Aval((int(num),), dt.to_dtype(dtype)), start=float(start), step=float(step))


def eye(n, m=None, k=0, dtype=dt.float32) -> Array:
    from .elementwise import equal
    from .shape import expand_dims
    m = n if m is None else m
    rows = expand_dims(arange(n), 1)
    cols = expand_dims(arange(m), 0)
    return equal(rows + k, cols).astype(dtype)


def identity(n, dtype=dt.float32) -> Array:
    return eye(n, dtype=dtype)
