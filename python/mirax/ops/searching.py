"""Counting and searching with MLX's signatures: `count_nonzero` and `searchsorted`.

    mr.count_nonzero(x, axis=0)                          # int32 counts
    mr.searchsorted(mr.array([1, 2, 2, 4]), v, side="right")   # uint32 insertion points

Both are other mirax ops (a comparison and a sum; a branchless binary search of
ceil(log2(n + 1)) gathers), so vmap, compile and the GPU come from theirs.
"""
from __future__ import annotations

from ..array import Array, array, where_text
from ..dialect import dtypes as dt
from ..dialect.core import MiraxError
from . import elementwise as ew
from . import reduction as red
from .creation import zeros
from .indexing import take

__all__ = ["count_nonzero", "searchsorted"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def count_nonzero(a, /, axis=None, *, keepdims=False) -> Array:
    """The number of non-zero elements over `axis` (all axes when None), as int32.

    >>> mr.count_nonzero(mr.array([[0, 1, 0], [2, 3, 0]]), axis=0).tolist()
    [1, 2, 0]"""
    a = _arr(a)
    nonzero = ew.astype(ew.not_equal(a, ew.astype(array(0), a.dtype)), dt.int32)
    return red.sum(nonzero, axis=axis, keepdims=keepdims)


def _before(x, y):
    """x < y in sort order, where NaN comes after every number."""
    lt = ew.less(x, y)
    if x.dtype.kind != "f":
        return lt
    return ew.logical_or(lt, ew.logical_and(ew.isnan(y), ew.logical_not(ew.isnan(x))))


def searchsorted(sorted_sequence, values, /, side="left") -> Array:
    """Indices (uint32, shaped like `values`) at which inserting `values` keeps the 1-D
    ascending `sorted_sequence` sorted: the first such index for side="left", the last for
    side="right". NaN sorts after every number, as `mr.sort` puts it.

    >>> mr.searchsorted(mr.array([1, 2, 2, 4]), mr.array([0, 2, 3, 5])).tolist()
    [0, 1, 3, 4]"""
    if side not in ("left", "right"):
        raise MiraxError(f"searchsorted: invalid side {side!r}, expected 'left' or 'right'{where_text()}")
    seq, v = _arr(sorted_sequence), _arr(values)
    if seq.ndim != 1:
        raise MiraxError(f"searchsorted: the sorted sequence must be 1-D, got shape {seq.shape}{where_text()}")
    d = dt.promote(seq.dtype, v.dtype)
    seq, v = ew.astype(seq, d), ew.astype(v, d)
    n = seq.shape[0]
    # count the prefix of seq that goes before each value: seq[i] < v (left) or
    # not v < seq[i] (right); it is monotone in i, so a binary search over the bits
    # of the count finds it with one gather per bit
    count = zeros(v.shape, dtype=dt.int32)
    step = 1 << max(n.bit_length() - 1, 0)
    while n and step:
        probe = ew.add(count, step)
        at = take(seq, ew.minimum(probe, n) - 1)
        goes_before = _before(at, v) if side == "left" else ew.logical_not(_before(v, at))
        count = ew.where(ew.logical_and(ew.less_equal(probe, n), goes_before), probe, count)
        step >>= 1
    return ew.astype(count, dt.uint32)
