"""Reductions with MLX's signatures: sum, prod, max, min, argmax, argmin, mean, var,
std, logsumexp, softmax, all, any, cumsum.

    mr.sum(x)            x.sum(axis=1, keepdims=True)       mr.argmax(x, axis=-1)
    mr.var(x, axis=(0, 2), ddof=1)       mr.softmax(x, axis=-1)

`axis` is None (all axes), an int or a tuple; negative axes count from the end. The
primitives (`sum`, `prod`, `max`, `min`, `argmax`, `argmin`, `cumsum`) keep the input
dtype; the rest are compositions of primitives.
"""
from __future__ import annotations

import builtins

from ..dialect import dtypes as dt
from ..dialect.core import MiraxError, normalize_axes, normalize_axis
from ..array import Array, apply, array, where_text
from . import elementwise as ew
from .shape import reshape
from ..fused import fused

__all__ = ["sum", "prod", "max", "min", "argmax", "argmin", "mean", "var", "std", "logsumexp",
           "softmax", "all", "any", "cumsum"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _axes(a, axis, op):
    """Normalized, sorted axes; errors name the op and the user's line."""
    if axis is None:
        return tuple(range(a.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    try:
        if a.ndim == 0 and axes and builtins.any(x not in (0, -1) for x in axes):
            raise MiraxError(f"{op}: axis {axis} is out of bounds for an array of 0 dimensions")
        if a.ndim == 0:
            if len(axes) > 1:
                raise MiraxError(f"{op}: repeated axis in {axes}")
            return ()  # a 0-d array reduced over its one "axis" is itself
        return normalize_axes(axes, a.ndim, op)
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None


def _count(a, axes):
    n = 1
    for x in axes:
        n *= a.shape[x]
    return n


def _reduce(name, a, axis, keepdims):
    a = _arr(a)
    axes = _axes(a, axis, name)
    if not axes:
        return a
    return apply(name, [a], axes=axes, keepdims=bool(keepdims))


def _accumulator(a):
    """MLX's result dtype of sum and prod: bool and integers narrower than 32 bits
    accumulate in int32 (unsigned: uint32), whatever the length of the reduced axis."""
    if a.dtype is dt.bool_ or (a.dtype.kind == "i" and a.dtype.bits < 32):
        return ew.astype(a, dt.int32)
    if a.dtype.kind == "u" and a.dtype.bits < 32:
        return ew.astype(a, dt.uint32)
    return a


def sum(a, axis=None, keepdims=False) -> Array:
    """Sum over `axis` (all axes when None), as `mx.sum`; bool and small integers sum
    in int32 (uint32)."""
    a = _arr(a)
    if _axes(a, axis, "sum"):
        a = _accumulator(a)
    return _reduce("sum", a, axis, keepdims)


def prod(a, axis=None, keepdims=False) -> Array:
    """Product over `axis`, as `mx.prod`; bool and small integers multiply in int32
    (uint32)."""
    a = _arr(a)
    if _axes(a, axis, "prod"):
        a = _accumulator(a)
    return _reduce("prod", a, axis, keepdims)


def max(a, axis=None, keepdims=False) -> Array:
    """Maximum over `axis`, as `mx.max` (NaN propagates; empty raises)."""
    return _reduce("max", a, axis, keepdims)


def min(a, axis=None, keepdims=False) -> Array:
    """Minimum over `axis`, as `mx.min` (NaN propagates; empty raises)."""
    return _reduce("min", a, axis, keepdims)


def minmax(a, axis=None, keepdims=False) -> tuple:
    """(min, max) over `axis`, as `mx.minmax`: `mr.minmax(mr.array([3, -1, 2]))` is
    (array(-1), array(3))."""
    return min(a, axis, keepdims), max(a, axis, keepdims)


def _arg(name, a, axis, keepdims):
    a = _arr(a)
    if axis is None:
        flat = reshape(a, (-1,)) if a.ndim != 1 else a
        r = apply(name, [flat], axes=(0,), keepdims=False)
        return reshape(r, (1,) * a.ndim) if keepdims else r
    if not isinstance(axis, int):
        raise MiraxError(f"{name}: axis must be an int or None, got {axis!r}{where_text()}")
    try:
        ax = normalize_axis(axis, a.ndim, name)
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    if a.ndim == 0:
        return reshape(apply(name, [reshape(a, (1,))], axes=(0,), keepdims=False), ())
    return apply(name, [a], axes=(ax,), keepdims=bool(keepdims))


def argmax(a, axis=None, keepdims=False) -> Array:
    """Index (uint32) of the first maximum along `axis` (flattened when None), as `mx.argmax`."""
    return _arg("argmax", a, axis, keepdims)


def argmin(a, axis=None, keepdims=False) -> Array:
    """Index (uint32) of the first minimum along `axis` (flattened when None), as `mx.argmin`."""
    return _arg("argmin", a, axis, keepdims)


def _inexact(a):
    """Integer and bool inputs of mean/var/... compute in float32, as MLX."""
    return a if a.dtype.kind in "fc" else ew.astype(a, dt.float32)


def _size(a, axes, keepdims=False):
    """The number of elements of `a` over `axes`: a float for the divisions of mean and
    var, or in a shapeless compile trace an array computed from `a`'s shape."""
    from .. import shapeless
    if not shapeless.active():
        return float(_count(a, axes))
    from .creation import full_like
    ones = full_like(ew.astype(a, dt.int32), 1)  # counted exactly in int32
    return ew.astype(sum(ones, axes, keepdims), a.dtype)


@fused
def mean(a, axis=None, keepdims=False) -> Array:
    """Mean over `axis`, as `mx.mean` (integers give float32)."""
    a = _inexact(_arr(a))
    axes = _axes(a, axis, "mean")
    return ew.divide(sum(a, axes, keepdims), _size(a, axes, keepdims))


@fused
def var(a, axis=None, keepdims=False, ddof=0) -> Array:
    """Variance over `axis` with `ddof` delta degrees of freedom, as `mx.var`."""
    a = _inexact(_arr(a))
    axes = _axes(a, axis, "var")
    m = mean(a, axes, keepdims=True)
    d = ew.subtract(a, m)
    sq = ew.multiply(d, d) if a.dtype.kind != "c" else ew.square(ew.abs(d))  # complex: |d|^2, real
    ss = sum(sq, axes, keepdims)
    n = _size(a, axes, keepdims)
    n = float(builtins.max(n - ddof, 0)) if isinstance(n, float) else ew.maximum(ew.subtract(n, ddof), 0)
    return ew.divide(ss, n)


@fused
def std(a, axis=None, keepdims=False, ddof=0) -> Array:
    """Standard deviation over `axis`, as `mx.std`."""
    return ew.sqrt(var(a, axis, keepdims, ddof))


def _drop(a, axes, keepdims_shape):
    """Reshape a keepdims result to the shape without `axes`."""
    return reshape(a, tuple(s for i, s in enumerate(keepdims_shape) if i not in axes))


@fused
def logsumexp(a, axis=None, keepdims=False) -> Array:
    """log(sum(exp(a))) over `axis`, computed stably (max subtracted), as `mx.logsumexp`."""
    a = _inexact(_arr(a))
    axes = _axes(a, axis, "logsumexp")
    if not axes:
        return a
    m = ew.stop_gradient(max(a, axes, keepdims=True))
    m = ew.where(ew.isinf(m), 0.0, m)  # all -inf (or +inf) rows: exp stays finite
    r = ew.add(ew.log(sum(ew.exp(ew.subtract(a, m)), axes, keepdims=True)), m)
    return r if keepdims else _drop(r, axes, r.shape)


@fused
def softmax(a, axis=None, precise=False) -> Array:
    """exp(a) / sum(exp(a)) over `axis` (all axes when None), as `mx.softmax`."""
    a = _inexact(_arr(a))
    if a.ndim == 0 and axis is not None:  # MLX: a 0-d array has no axis to normalise over
        raise MiraxError(f"softmax: axis {axis} is out of bounds for an array of 0 dimensions{where_text()}")
    axes = _axes(a, axis, "softmax")
    if not axes:
        return ew.exp(ew.subtract(a, a))  # over no axes every element is its own softmax: 1
    orig = a.dtype
    if precise and orig in (dt.float16, dt.bfloat16):
        a = ew.astype(a, dt.float32)
    m = ew.stop_gradient(max(a, axes, keepdims=True))
    e = ew.exp(ew.subtract(a, m))
    # times the reciprocal of the sum, as MLX's kernels do: one division a row, not one
    # an element (vdivps was an eighth of a compiled 4096-wide softmax on AVX2)
    r = ew.multiply(e, ew.reciprocal(sum(e, axes, keepdims=True)))
    return ew.astype(r, orig)


def all(a, axis=None, keepdims=False) -> Array:
    """True where every element over `axis` is nonzero, as `mx.all` (empty gives True)."""
    a = _arr(a)
    zeros = ew.astype(ew.logical_not(a), dt.int32)
    axes = _axes(a, axis, "all")
    return ew.equal(sum(zeros, axes, keepdims), 0)


def any(a, axis=None, keepdims=False) -> Array:
    """True where some element over `axis` is nonzero, as `mx.any` (empty gives False)."""
    a = _arr(a)
    ones = ew.astype(ew.astype(a, dt.bool_), dt.int32)
    axes = _axes(a, axis, "any")
    return ew.greater(sum(ones, axes, keepdims), 0)


def cumsum(a, axis=None, *, reverse=False, inclusive=True, dtype=None) -> Array:
    """Running sum along `axis` (the flattened array when None), as `mx.cumsum`; `dtype`
    casts the input first (`mr.cumsum(mr.array([1, 2], mr.int8), dtype=mr.float32)`)."""
    a = _arr(a)
    if dtype is not None:
        a = ew.astype(a, dtype)
    if a.dtype is dt.bool_:
        a = ew.astype(a, dt.int32)
    if axis is None:
        a = reshape(a, (-1,)) if a.ndim != 1 else a
        ax = 0
    else:
        try:
            if a.ndim == 0:
                raise MiraxError(f"cumsum: axis {axis} is out of bounds for an array of 0 dimensions")
            ax = normalize_axis(axis, a.ndim, "cumsum")
        except MiraxError as err:
            raise MiraxError(f"{err}{where_text()}") from None
    return apply("cumsum", [a], axis=ax, reverse=bool(reverse), inclusive=bool(inclusive))


# ---- methods on Array ------------------------------------------------------------------

def _method(fn):
    def m(self, axis=None, keepdims=False, *args, out=None, **kw):
        # MLX's positional order (`x.std(1, True, 0)`: axis, keepdims, ddof); numpy's
        # functions call these methods on foreign arrays (`np.all(x)` calls
        # `x.all(axis=None, out=None)`): accept its `out`, as long as it asks for nothing
        if out is not None:
            raise TypeError(f"{fn.__name__}(): mirax arrays are immutable, `out=` is not supported")
        return fn(self, axis, keepdims, *args, **kw)
    m.__name__ = fn.__name__
    m.__doc__ = fn.__doc__
    return m


for _f in [sum, prod, max, min, argmax, argmin, mean, var, std, logsumexp, all, any]:
    setattr(Array, _f.__name__, _method(_f))


def _cumsum_method(self, axis=None, *, reverse=False, inclusive=True):
    return cumsum(self, axis, reverse=reverse, inclusive=inclusive)


Array.cumsum = _cumsum_method

cumulative_sum = cumsum  # MLX's array-API alias
__all__ += ["minmax", "cumulative_sum"]
