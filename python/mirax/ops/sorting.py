"""Sorting: `argsort`, `sort`, `partition`, `argpartition`, `topk`, `median`, as MLX has
them (stable, NaN last as numpy, along `axis`, default -1; `axis=None` flattens).

    mr.sort(x); mr.argsort(x, axis=0); mr.topk(x, 3); mr.partition(x, 2)

`argsort` is the dialect's `mirax.argsort` (dialect/sort.py: on the CPU, (key, index)
pairs sorted by vectors for values of 32 bits or fewer, a merge sort of each row for
wider ones), `sort` and `partition` the dialect's `mirax.sort` (the values by vectors: a
bitonic network and vector merges; its gradient gathers by argsort); `median` and
`unique` build on them, so they run on every device and under every transform.
`topk` gathers `mirax.argtopk`'s indices (the k largest by insertion, not a full sort).
`partition` and `argpartition` return the full sort, a valid partition for every `kth`.
"""
from __future__ import annotations

import functools

import numpy as np

from ..array import Array, apply, array, where_text
from ..dialect import dtypes as dt
from ..dialect.core import MiraxError
from . import elementwise as ew
from . import reduction as red
from . import shape as sh
from .indexing import take_along_axis

__all__ = ["argsort", "sort", "partition", "argpartition", "topk", "median", "unique"]


def _arr(x):
    return x if isinstance(x, Array) else array(x)


def _prepare(a, axis, op):
    """(a, the axis normalized) or (a flattened, None)."""
    a = _arr(a)
    if axis is None:
        return sh.reshape(a, (-1,)), None
    if a.ndim == 0:
        raise MiraxError(f"{op}: axis {axis} is out of bounds for an array of 0 dimensions{where_text()}")
    if not -a.ndim <= axis < a.ndim:
        raise MiraxError(f"{op}: axis {axis} is out of bounds for an array of shape {a.shape}{where_text()}")
    return a, axis % a.ndim


def argsort(a, axis=-1):
    """The indices that sort `a` along `axis` (stable; NaN last), uint32 as in MLX."""
    a, ax = _prepare(a, axis, "argsort")
    return apply("argsort", [a], axis=0 if ax is None else ax)


def sort(a, axis=-1):
    """`a` sorted along `axis` (NaN last): the dialect's `mirax.sort`.

        mr.sort(mr.array([3, 1, 2]))   # array([1, 2, 3], dtype=int32)
    """
    a2, ax = _prepare(a, axis, "sort")
    return apply("sort", [a2], axis=0 if ax is None else ax)


def argpartition(a, kth, axis=-1):
    """Indices that partition `a` around its `kth` element (here: the full argsort)."""
    a2, ax = _prepare(a, axis, "argpartition")
    _check_kth(a2, ax, kth, "argpartition")
    return argsort(a2, -1 if ax is None else ax)


def _check_kth(a2, ax, kth, op):
    n = a2.shape[-1 if ax is None else ax]
    if not -n <= kth < n:
        raise MiraxError(f"{op}: kth {kth} is out of bounds for an axis of size {n}{where_text()}")


def partition(a, kth, axis=-1):
    """`a` partitioned around its `kth` element (here: fully sorted)."""
    a2, ax = _prepare(a, axis, "partition")
    _check_kth(a2, ax, kth, "partition")
    return sort(a2, -1 if ax is None else ax)


def topk(a, k, axis=-1):
    """The `k` largest elements along `axis` (in ascending order)."""
    a2, ax = _prepare(a, axis, "topk")
    ax = -1 if ax is None else ax
    n = a2.shape[ax]
    if not 0 <= k <= n:
        raise MiraxError(f"topk: k {k} must be in [0, {n}] for an axis of size {n}{where_text()}")
    if k == 0:
        key = [slice(None)] * a2.ndim
        key[ax] = slice(0, 0)
        return a2[tuple(key)]
    if a2.dtype.kind == "c":  # (no integer keys for complex: the full sort's last k)
        s = sort(a2, ax)
        key = [slice(None)] * s.ndim
        key[ax] = slice(n - k, n)
        return s[tuple(key)]
    return take_along_axis(a2, apply("argtopk", [a2], axis=ax % a2.ndim, k=k), axis=ax)


def median(a, axis=None, keepdims=False):
    """The median along `axis` (all elements when None): the middle element, or the mean
    of the two middle ones."""
    a = _arr(a)
    if axis is None:
        flat = sort(sh.reshape(a, (-1,)), 0)
        n = flat.shape[0]
        mid = (flat[(n - 1) // 2] + flat[n // 2]) / 2 if n % 2 == 0 else ew.astype(flat[n // 2], _mean_dtype(a))
        mid = _nan_if_any(mid, flat, -1)
        return sh.reshape(mid, (1,) * a.ndim) if keepdims else mid
    axes = [axis] if isinstance(axis, int) else list(axis)
    axes = [x % a.ndim for x in axes]
    rest = [d for d in range(a.ndim) if d not in axes]
    m = sh.transpose(a, rest + axes)
    m = sh.reshape(m, m.shape[:len(rest)] + (-1,))
    s = sort(m, -1)
    n = s.shape[-1]
    lo, hi = s[..., (n - 1) // 2], s[..., n // 2]
    mid = (lo + hi) / 2 if n % 2 == 0 else ew.astype(hi, _mean_dtype(a))
    mid = _nan_if_any(mid, s, -1)
    if keepdims:
        mid = sh.reshape(mid, tuple(1 if d in axes else a.shape[d] for d in range(a.ndim)))
    return mid


def unique(a, /, size, return_index=False, return_inverse=False, return_counts=False, fill_value=None):
    """The sorted unique elements of the flattened `a`, `size` of them (MLX's static-size
    unique): fewer unique elements pad with `fill_value` (default: the smallest unique
    element), count 0 and index that of the first; more keep the `size` smallest.

        mr.unique(mr.array([2, 1, 2, 3, 1]), 4, return_counts=True, fill_value=0)
        # (array([1, 2, 3, 0]), array([2, 2, 1, 0]))

    Optional results, in this order: the flat index of each element's first occurrence
    (uint32), the inverse (the slot of each element of `a`, clamped to the last one when
    truncated; uint32, shaped as `a`) and the counts (int32). Each NaN is its own element,
    as NaN != NaN."""
    from .creation import full, zeros
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"unique: size must be an int, got {type(size).__name__}{where_text()}")
    if size < 0:
        raise ValueError(f"[unique] Received negative size {size}.{where_text()}")
    a = _arr(a)
    flat = sh.reshape(a, (-1,))
    n, size = flat.shape[0], int(size)
    if fill_value is not None:
        fv = _arr(fill_value)
        if fv.size != 1:
            raise ValueError(f"[unique] Fill value must have one element, but got shape {fv.shape}.{where_text()}")
        fill_value = ew.astype(sh.reshape(fv, ()), a.dtype)
    elif n == 0 and size > 0:
        raise ValueError(f"[unique] A fill value is required for an empty input with a non-zero size.{where_text()}")
    if n == 0 or size == 0:  # nothing to scatter into or from
        values = full((size,), fill_value, dtype=a.dtype) if size else flat[:0]
        results = [values, zeros((size,), dt.uint32), zeros(a.shape, dt.uint32), zeros((size,), dt.int32)]
    else:
        key = (size, fill_value is not None)
        body = _UNIQUE.get(key)
        if body is None:  # eagerly one fused kernel per size and shape, not one per op
            from ..compile import compile
            body = _UNIQUE[key] = compile(functools.partial(_unique_body, *key))
        values, index, inverse, counts = body(flat, *([] if fill_value is None else [fill_value]))
        results = [values, index, sh.reshape(inverse, a.shape), counts]
    wanted = [True, return_index, return_inverse, return_counts]
    picked = [r for r, want in zip(results, wanted) if want]
    return picked[0] if len(picked) == 1 else tuple(picked)


_UNIQUE: dict = {}


def _unique_body(size, has_fill, flat, fill=None):
    """unique's values, first indices, inverse (flat) and counts of a non-empty 1-D `flat`
    (padded with `fill`, else the smallest element)."""
    from .creation import full, zeros
    from .indexing import take
    n = flat.shape[0]
    perm = ew.astype(argsort(flat, axis=0), dt.int32)
    s = take(flat, perm)
    # an element starts a new group when it differs from the one before (NaN always does)
    is_new = sh.concatenate([ew.astype(array([True]), dt.bool_), ew.not_equal(s[1:], s[:-1])])
    group = red.cumsum(ew.astype(is_new, dt.int32)) - 1
    slot = ew.where(is_new, group, size)  # scatters drop positions past the end
    values = sh.broadcast_to(fill if has_fill else s[0], (size,)).at[slot].set(s)
    index = full((size,), perm[0], dtype=dt.int32).at[slot].set(perm)  # stable: perm[start] comes first
    counts = zeros((size,), dt.int32).at[group].add(1)
    inverse = zeros((n,), dt.int32).at[perm].set(ew.clip(group, 0, max(size - 1, 0)))
    return values, ew.astype(index, dt.uint32), ew.astype(inverse, dt.uint32), counts


def _nan_if_any(mid, sorted_rows, axis):
    """numpy: a median over values holding a NaN is NaN (the sort puts NaNs last, so the
    middle element alone would not show it)."""
    if sorted_rows.dtype.kind not in "fc" or sorted_rows.shape[axis] == 0:
        return mid
    last = sorted_rows[..., -1]
    nan = ew.logical_or(ew.isnan(ew.real(last)), ew.isnan(ew.imag(last))) if last.dtype.kind == "c" \
        else ew.isnan(last)
    return ew.where(nan, ew.astype(last, mid.dtype), mid)


def _mean_dtype(a):
    return a.dtype if a.dtype.kind in "fc" else dt.float32


def _sort_method(self, axis=-1):
    return sort(self, axis)


Array.sort = _sort_method
Array.argsort = lambda self, axis=-1: argsort(self, axis)
