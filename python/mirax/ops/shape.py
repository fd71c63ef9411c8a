"""Shape ops: reshape, broadcast_to, transpose, expand_dims, squeeze, flatten, ...

    x.reshape(2, -1)      mr.transpose(x, (1, 0))      mr.expand_dims(x, 0)
"""
from __future__ import annotations

from ..dialect.core import MiraxError, normalize_axes, normalize_axis
from ..dialect.shape import reshape_result
from ..array import Array, apply, array, where_text

__all__ = ["reshape", "broadcast_to", "transpose", "expand_dims", "squeeze", "flatten", "swapaxes",
           "moveaxis", "broadcast_arrays"]


def _arr(x):
    return x if isinstance(x, Array) else array(x)


def _err(err):
    return MiraxError(f"{err}{where_text()}")


def reshape(a, shape) -> Array:
    a = _arr(a)
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = reshape_result(a.aval, shape)
    except MiraxError as err:
        raise _err(err) from None
    if out.shape == a.shape:
        return a
    return apply("reshape", [a], shape=out.shape)


def broadcast_to(a, shape) -> Array:
    a = _arr(a)
    shape = tuple(int(s) for s in shape)
    if a.shape == shape:
        return a
    return apply("broadcast_to", [a], shape=shape)


def broadcast_arrays(*arrays):
    from ..dialect.core import broadcast_shapes
    arrays = [_arr(a) for a in arrays]
    try:
        s = broadcast_shapes(*[a.shape for a in arrays], op="broadcast_arrays")
    except MiraxError as err:
        raise _err(err) from None
    return [broadcast_to(a, s) for a in arrays]


def transpose(a, axes=None) -> Array:
    a = _arr(a)
    if axes is None:
        axes = tuple(range(a.ndim))[::-1]
    try:
        axes = tuple(normalize_axis(x, a.ndim, "transpose") for x in axes)
    except MiraxError as err:
        raise _err(err) from None
    if axes == tuple(range(a.ndim)):
        return a
    return apply("transpose", [a], permutation=axes)


def swapaxes(a, axis1, axis2) -> Array:
    a = _arr(a)
    perm = list(range(a.ndim))
    i, j = normalize_axis(axis1, a.ndim, "swapaxes"), normalize_axis(axis2, a.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination) -> Array:
    a = _arr(a)
    s = normalize_axis(source, a.ndim, "moveaxis")
    d = normalize_axis(destination, a.ndim, "moveaxis")
    perm = [i for i in range(a.ndim) if i != s]
    perm.insert(d, s)
    return transpose(a, perm)


def expand_dims(a, axis) -> Array:
    a = _arr(a)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = a.ndim + len(axes)
    try:
        axes = normalize_axes(axes, nd, "expand_dims")
    except MiraxError as err:
        raise _err(err) from None
    shape = list(a.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return reshape(a, shape)


def squeeze(a, axis=None) -> Array:
    a = _arr(a)
    if axis is None:
        axes = tuple(i for i, s in enumerate(a.shape) if s == 1)
    else:
        try:
            axes = normalize_axes((axis,) if isinstance(axis, int) else axis, a.ndim, "squeeze")
        except MiraxError as err:
            raise _err(err) from None
        for ax in axes:
            if a.shape[ax] != 1:
                raise _err(MiraxError(f"squeeze: cannot squeeze axis {ax} of size {a.shape[ax]} in {a.shape}"))
    return reshape(a, [s for i, s in enumerate(a.shape) if i not in axes])


def flatten(a, start_axis=0, end_axis=-1) -> Array:
    a = _arr(a)
    if a.ndim == 0:
        return reshape(a, (1,))
    s = normalize_axis(start_axis, a.ndim, "flatten")
    e = normalize_axis(end_axis, a.ndim, "flatten")
    return reshape(a, a.shape[:s] + (-1,) + a.shape[e + 1:]) if a.size else reshape(
        a, a.shape[:s] + (0,) + a.shape[e + 1:])


def _reshape_method(self, *shape):
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    return reshape(self, shape)


def _transpose_method(self, *axes):
    if len(axes) == 1 and not isinstance(axes[0], int):
        axes = axes[0]
    return transpose(self, axes or None)


Array.reshape = _reshape_method
Array.transpose = _transpose_method
Array.T = property(lambda self: transpose(self))
Array.flatten = flatten
Array.squeeze = squeeze
Array.swapaxes = swapaxes
Array.moveaxis = moveaxis
