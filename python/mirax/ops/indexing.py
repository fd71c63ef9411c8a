"""Indexing: take, take_along_axis, scatter_add, `a[...]` and `a.at[...].add(...)`.

    x[1:, ::-1]        x[None, ..., 0]        x[[2, 0, 1]]        x[:, idx]
    mr.take(x, idx, axis=1)       mr.take_along_axis(x, mr.argsort(x), -1)

Constant indices (Python ints, lists, numpy arrays) are bounds-checked like numpy and
raise IndexError. Indices held in mirax arrays are only known when the kernel runs: a
negative one wraps once and one still out of range is *clamped* to the nearest valid
index (as MLX and JAX do), so no index can read or write outside a buffer.
Arrays are immutable: `a[i] = v` raises; use `a.at[i].add(v)` or `mr.where`.
"""
from __future__ import annotations

import math

import numpy as np

from ..dialect.core import MiraxError, broadcast_shapes, normalize_axis
from ..array import Array, apply, array, eager_host_data, where_text
from ..device import small_copy

__all__ = ["take", "take_along_axis", "scatter_add", "ArrayAt"]


def _arr(x):
    return x if isinstance(x, Array) else array(x)


def _err(err):
    return MiraxError(f"{err}{where_text()}")


def _axis(axis, ndim, op):
    try:
        return normalize_axis(axis, ndim, op)
    except MiraxError as err:
        raise _err(err) from None


def _indices(indices):
    """An integer Array from an Array, int, list or numpy array."""
    if isinstance(indices, Array):
        return indices
    n = np.asarray(indices)
    if n.dtype.kind not in "iu":
        if n.size == 0:
            n = n.astype(np.int32)
        else:
            raise _err(MiraxError(f"indices must be integers, got {n.dtype}"))
    if n.dtype.kind == "i" and n.dtype.itemsize == 8 and n.size and \
            np.iinfo(np.int32).min <= n.min() and n.max() <= np.iinfo(np.int32).max:
        n = n.astype(np.int32)
    return array(n)


def take(a, indices, axis=None) -> Array:
    """numpy `take`: `axis=None` takes from the flattened array."""
    from .shape import reshape
    a = _arr(a)
    idx = _indices(indices)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    return apply("take", [a, idx], axis=_axis(axis, a.ndim, "take"))


def take_along_axis(a, indices, axis) -> Array:
    """numpy `take_along_axis`; `indices` broadcasts against `a` outside `axis`."""
    from .shape import broadcast_to, reshape
    a = _arr(a)
    idx = _indices(indices)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    if idx.ndim != a.ndim:
        raise _err(MiraxError(f"take_along_axis: indices {idx.shape} must have as many dimensions as "
                              f"the array {a.shape}"))
    ax = _axis(axis, a.ndim, "take_along_axis")
    one = lambda s: tuple(1 if i == ax else d for i, d in enumerate(s))  # noqa: E731
    try:
        b = broadcast_shapes(one(a.shape), one(idx.shape), op="take_along_axis")
    except MiraxError as err:
        raise _err(err) from None
    with_axis = lambda n: tuple(n if i == ax else d for i, d in enumerate(b))  # noqa: E731
    a = broadcast_to(a, with_axis(a.shape[ax]))
    idx = broadcast_to(idx, with_axis(idx.shape[ax]))
    return apply("take_along_axis", [a, idx], axis=ax)


def scatter_add(a, indices, updates, axis=0) -> Array:
    """The adjoint of `take(a, indices, axis)`: a copy of `a` with `updates[..., i, ...]`
    added at `indices[i]` along `axis` (repeated indices accumulate; indices clamp)."""
    from .elementwise import astype
    from .shape import broadcast_to
    a = _arr(a)
    idx = _indices(indices)
    ax = _axis(axis, a.ndim, "scatter_add")
    u = astype(_arr(updates), a.dtype)
    shape = a.shape[:ax] + idx.shape + a.shape[ax + 1:]
    try:
        if broadcast_shapes(u.shape, shape, op="scatter_add") != shape:
            raise MiraxError(f"scatter_add: updates {u.shape} do not broadcast to {shape}")
    except MiraxError as err:
        raise _err(err) from None
    return apply("scatter_add", [a, idx, broadcast_to(u, shape)], axis=ax)


# ---- a[key] ------------------------------------------------------------------------------

class MiraxIndexError(IndexError, ValueError):
    """A bad index: an IndexError as numpy raises, and a ValueError as MLX raises."""


def _index_error(msg):
    return MiraxIndexError(f"{msg}{where_text()}")


def _parse_key(key, ndim):
    """Entries: None, ('slice', s), ('int', i), ('arr', Array) or ('np', int64 array);
    Ellipsis expanded and trailing axes filled with full slices."""
    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in key:
        if k is None or k is Ellipsis:
            items.append(k)
        elif isinstance(k, slice):
            items.append(("slice", k))
        elif isinstance(k, (bool, np.bool_)):
            raise _index_error("boolean scalar indices are not supported")
        elif isinstance(k, (int, np.integer)):
            items.append(("int", int(k)))
        elif isinstance(k, Array):
            if k.dtype.kind == "b":
                raise _index_error("boolean mask indexing of a mirax array needs a data-dependent shape; "
                                   "use mr.where instead")
            if k.dtype.kind not in "iu":
                raise _index_error(f"arrays used as indices must be integers, got {k.dtype.name}")
            items.append(("arr", k))
        elif isinstance(k, (list, tuple, np.ndarray)):
            n = np.asarray(k)
            if n.dtype == np.bool_ and n.ndim >= 1:
                items.extend(("np", z) for z in np.nonzero(n))  # a mask is its nonzero positions
            elif n.dtype.kind in "iu" or n.size == 0:
                items.append(("np", n.astype(np.int64)))
            else:
                raise _index_error(f"arrays used as indices must be integers, got {n.dtype}")
        else:
            raise _index_error("only integers, slices (`:`), ellipsis (`...`), None and integer "
                               f"arrays are valid indices, got {type(k).__name__}")
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise _index_error("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > ndim:
        raise _index_error(f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed")
    fill = [("slice", slice(None))] * (ndim - used)
    if Ellipsis in [k for k in items if k is Ellipsis]:
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        items = items[:i] + fill + items[i + 1:]
    else:
        items = items + fill
    return items


def _getitem(a: Array, key) -> Array:
    from .shape import reshape, strided_slice, transpose
    items = _parse_key(key, a.ndim)
    start, stop, strides = [0] * a.ndim, list(a.shape), [1] * a.ndim
    reverse = []        # axes whose selection runs backwards
    advanced = []       # (axis, index Array or wrapped numpy array)
    adv_pos = []        # positions in `items` of advanced entries (for numpy's placement rule)
    ints = []           # (axis, position in items)
    ax = 0
    for pos, k in enumerate(items):
        if k is None:
            continue
        kind, v = k
        d = a.shape[ax]
        if kind == "slice":
            r = range(*v.indices(d))
            if len(r) == 0:
                start[ax] = stop[ax] = 0
            elif r.step > 0:
                start[ax], stop[ax], strides[ax] = r.start, r[-1] + 1, r.step
            else:
                start[ax], stop[ax], strides[ax] = r[-1], r[0] + 1, -r.step
                reverse.append(ax)
        elif kind == "int":
            if not -d <= v < d:
                raise _index_error(f"index {v} is out of bounds for axis {ax} with size {d}")
            v %= d
            start[ax], stop[ax] = v, v + 1
            ints.append((ax, pos))
        else:
            if kind == "np":
                if v.size and (v.min() < -d or v.max() >= d):
                    bad = v[(v < -d) | (v >= d)].flat[0]
                    raise _index_error(f"index {bad} is out of bounds for axis {ax} with size {d}")
                v = np.where(v < 0, v + d, v)
            advanced.append((ax, v))
            adv_pos.append(pos)
        ax += 1

    if not advanced:
        data = eager_host_data(a)
        if data is not None and (math.prod(stop[i] - start[i] for i in range(a.ndim)) <= small_copy()):
            # eager, evaluated: numpy's basic indexing (the same rules), as a contiguous array
            r = np.asarray(data[key])  # (a numpy scalar for all-int keys: a 0-d array)
            return Array._leaf(r if r.flags.c_contiguous else r.copy(), a.dtype)
    x = strided_slice(a, start, stop, strides)
    for r_ax in reverse:
        n = x.shape[r_ax]
        if n > 1:
            x = take(x, np.arange(n - 1, -1, -1, dtype=np.int32), r_ax)

    # labels of x's axes: original axis numbers, or "B" for the broadcast index block
    labels = list(range(a.ndim))
    nb = 0
    if len(advanced) == 1:
        (adv_ax, v), = advanced
        idx = _indices(v)
        x = take(x, idx, adv_ax)
        nb = idx.ndim
        labels = labels[:adv_ax] + ["B"] * nb + labels[adv_ax + 1:]
    elif advanced:
        x, nb = _take_many(x, advanced)
        adv_axes = [p for p, _ in advanced]
        labels = ["B"] * nb + [i for i in range(a.ndim) if i not in adv_axes]
    if advanced:
        all_pos = sorted(adv_pos + [p for _, p in ints])
        adjacent = all_pos == list(range(all_pos[0], all_pos[-1] + 1))
        rest = [lab for lab in labels if lab != "B"]
        if adjacent:
            first = advanced[0][0]
            before = [lab for lab in rest if lab < first]
            want = before + ["B"] * nb + rest[len(before):]
        else:
            want = ["B"] * nb + rest
        if want != labels:
            bpos = [i for i, lab in enumerate(labels) if lab == "B"]
            perm = [labels.index(lab) if lab != "B" else None for lab in want]
            it = iter(bpos)
            perm = [next(it) if p is None else p for p in perm]
            x = transpose(x, perm)
            labels = want

    # the result's shape in numpy's order: None adds a 1, an int drops its (size-1) axis, a
    # slice keeps its axis, the index block sits at the first advanced entry when advanced
    # entries are adjacent and in front otherwise; x already has that order, so a reshape
    # (which only adds or drops 1s) finishes
    bdims = [d for d, lab in zip(x.shape, labels) if lab == "B"]
    out = [] if not advanced or adjacent else list(bdims)
    ax = 0
    for pos, k in enumerate(items):
        if k is None:
            out.append(1)
            continue
        if k[0] == "slice":
            out.append(x.shape[labels.index(ax)])
        elif k[0] != "int" and advanced and adjacent and pos == adv_pos[0]:
            out.extend(bdims)
        ax += 1
    return reshape(x, tuple(out))


def _take_many(x, advanced):
    """Index several axes at once: move them to the front, merge them, take a linear index."""
    from .elementwise import add, astype, clip, multiply, where
    from .shape import reshape, transpose
    axes = [p for p, _ in advanced]
    dims = [x.shape[p] for p in axes]
    consts = all(not isinstance(v, Array) for _, v in advanced)
    if consts:
        try:
            bs = np.broadcast_shapes(*[v.shape for _, v in advanced])
        except ValueError:
            raise _index_error("shape mismatch: indexing arrays could not be broadcast together with shapes "
                               + " ".join(str(v.shape) for _, v in advanced)) from None
        lin = np.zeros(bs, np.int64)
        for (p, v), d in zip(advanced, dims):
            lin = lin * d + v
        idx = _indices(lin)
    else:
        try:
            broadcast_shapes(*[v.shape for _, v in advanced], op="indexing")
        except MiraxError as err:
            raise _index_error(f"shape mismatch: {err}") from None
        lin = None
        for (p, v), d in zip(advanced, dims):
            v = astype(_indices(v), "int32") if isinstance(v, Array) else _indices(v)
            if isinstance(v, Array) and v.dtype.kind == "i":
                v = where(v < 0, v + d, v)
            v = clip(astype(v, "int32"), 0, max(d - 1, 0))  # clamp per axis before merging
            lin = v if lin is None else add(multiply(lin, d), v)
        idx = lin
    rest = [i for i in range(x.ndim) if i not in axes]
    x = transpose(x, axes + rest)
    x = reshape(x, (int(np.prod(dims)),) + tuple(x.shape[len(axes):]))
    y = take(x, idx, 0)
    return y, idx.ndim


def _setitem(self, key, value):
    """`x[key] = v`, as MLX: `x` takes the updated value; arrays computed from `x` before
    keep the old one. Under grad, vmap and compile the update is part of the graph."""
    from ..array import rebind
    mask = _bool_mask(key)
    rebind(self, _masked_scatter(self, mask, value) if mask is not None else _AtUpdate(self, key).set(value))


def _bool_mask(key):
    """The boolean mask `key` is (an array, numpy array or list of bools), else None."""
    if isinstance(key, (bool, np.bool_)):
        return array(bool(key))
    if isinstance(key, Array):
        return key if key.dtype.kind == "b" else None
    if isinstance(key, (list, np.ndarray)):
        n = np.asarray(key)
        return array(n) if n.dtype == np.bool_ and n.ndim >= 1 else None
    return None


def _masked_scatter(a, mask, value):
    """`a[mask] = value` (MLX's masked_scatter): `mask` covers the leading dims of `a`; the
    k-th True position takes row k of `value` (shape (K, *rest)), or `value` broadcast to
    every True position when it has no such leading dim. A static-shape composition: the
    row each position reads is the running count of Trues (cumsum) before it."""
    from .elementwise import astype, where
    from .reduction import cumsum
    from .shape import broadcast_to, reshape
    a = _arr(a)
    if mask.ndim > a.ndim or mask.shape != a.shape[:mask.ndim]:
        raise _err(ValueError(f"[masked_scatter] The boolean mask should have the same shape as the beginning "
                              f"of the indexed array but the mask has shape {mask.shape} and the array has "
                              f"shape {a.shape}"))
    rest = a.shape[mask.ndim:]
    v = astype(_arr(value), a.dtype)
    if v.ndim > len(rest) + 1:
        raise _err(ValueError(f"[masked_scatter] Value array shape must be broadcastable with the last "
                              f"{len(rest)} dimensions of the input, got {v.shape}"))
    m = reshape(mask, (-1,))
    if v.ndim < len(rest) + 1:  # one value for every True position
        rows = broadcast_to(reshape(v, (1,) * (len(rest) + 1 - v.ndim) + v.shape), (1,) + rest)
    else:
        rows = broadcast_to(v, (v.shape[0],) + rest)
    if rows.shape[0] == 0:
        return a
    src = cumsum(astype(m, "int32")) - 1
    src = where(src < 0, 0, where(src >= rows.shape[0], rows.shape[0] - 1, src))
    picked = take(rows, src, axis=0)
    keep = reshape(m, (m.shape[0],) + (1,) * len(rest))
    out = where(keep, picked, reshape(a, (m.shape[0],) + rest))
    return reshape(out, a.shape)


class ArrayAt:
    """`x.at` (MLX's `ArrayAt`): updates at indices, returned as a new array;
    `x.at[idx].add(v)` accumulates over repeated indices, where `x[idx] += v` does not."""
    __slots__ = ("_a",)

    def __init__(self, a):
        self._a = a

    def __getitem__(self, key):
        return _AtUpdate(self._a, key)

    def __getattr__(self, name):  # `x.at.add(1)`: MLX's error, not an AttributeError
        if name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "set"):
            raise ValueError(f"x.at.{name}(...) needs an index first: x.at[idx].{name}(...)")
        raise AttributeError(name)


class _AtUpdate(ArrayAt):
    # `x.at[idx]`: an ArrayAt with its index, as in MLX (indexing it again replaces it)
    __slots__ = ("_key",)

    def __init__(self, a, key):
        self._a, self._key = a, key

    def _positions(self):
        """The flat positions `a[key]` selects. Array indices out of range (after negative
        ones wrap) select the position `a.size`, which the scatter drops (JAX's rule for
        updates; constant indices out of range raise IndexError instead)."""
        from .elementwise import where
        a = self._a
        items = _parse_key(self._key, a.ndim)
        key, pad, ax = [], [], 0
        for k in items:
            if k is None:
                key.append(None)
                continue
            kind, v = k
            if kind == "arr":
                d = a.shape[ax]
                w = v if v.dtype.kind == "u" else where(v < 0, v + d, v)
                key.append(where((w >= 0) & (w < d), w, d))  # d: the padding slot below
                pad.append(ax)
            else:
                key.append(v)
            ax += 1
        dtype = np.int32 if a.size < 2**31 - 1 else np.int64
        pos = np.arange(a.size, dtype=dtype).reshape(a.shape)
        if pad:  # one more slot on each axis an array indexes, holding the dropped position
            pos = np.pad(pos, [(0, 1) if i in pad else (0, 0) for i in range(a.ndim)], constant_values=a.size)
        return _getitem(array(pos), tuple(key))

    def _updates(self, value, pos):
        """`value` cast to the array's dtype and broadcast to the selection's shape; as MLX,
        leading size-1 dimensions beyond the selection's rank are dropped first."""
        from .elementwise import astype
        from .shape import broadcast_to, reshape
        v = astype(_arr(value), self._a.dtype)
        if v.ndim > pos.ndim and all(n == 1 for n in v.shape[:v.ndim - pos.ndim]):
            v = reshape(v, v.shape[v.ndim - pos.ndim:])
        try:
            return broadcast_to(v, pos.shape) if v.shape != pos.shape else v
        except MiraxError:
            raise ValueError(f"cannot update a selection of shape {pos.shape} with a value of shape "
                             f"{_arr(value).shape}{where_text()}") from None

    def _scatter(self, name, value) -> Array:
        from .shape import reshape
        a = self._a
        pos = self._positions()
        u = self._updates(value, pos)
        flat = apply(name, [reshape(a, (-1,)), reshape(pos, (-1,)), reshape(u, (-1,))], axis=0)
        return reshape(flat, a.shape)

    def add(self, value) -> Array:
        """`a.at[key].add(v)`: a copy of `a` with `v` added at `a[key]` (repeats accumulate;
        updates at array indices out of range are dropped)."""
        return self._scatter("scatter_add", value)

    def set(self, value) -> Array:
        """`a.at[key].set(v)`: a copy of `a` with `v` written at `a[key]` (the last of
        repeated positions wins; array indices out of range are dropped)."""
        return self._scatter("scatter", value)

    def subtract(self, value) -> Array:
        from .elementwise import negative
        return self.add(negative(_arr(value)))

    def multiply(self, value) -> Array:
        """`a.at[key].multiply(v)`: `a[key] *= v`, repeated positions multiplying by each
        of their updates (`x.at[[0, 0]].multiply(2)` quadruples x[0])."""
        return self._scatter("scatter_prod", value)

    def divide(self, value) -> Array:
        """`a.at[key].divide(v)`: `a[key] /= v`, repeated positions dividing by each."""
        from .elementwise import reciprocal
        return self.multiply(reciprocal(_arr(value)))

    def maximum(self, value) -> Array:
        """`a.at[key].maximum(v)`: the largest of `a[key]` and every update hitting it."""
        return self._scatter("scatter_max", value)

    def minimum(self, value) -> Array:
        """`a.at[key].minimum(v)`: the smallest of `a[key]` and every update hitting it."""
        return self._scatter("scatter_min", value)


Array.__getitem__ = _getitem
Array.__setitem__ = _setitem
Array.at = property(lambda self: ArrayAt(self))
Array.take = lambda self, indices, axis=None: take(self, indices, axis)


# ---- put_along_axis, slice_update (writes through the scatter primitive) ---------------------

def _flat_positions(shape, coords):
    """Flat positions of the points whose per-axis coordinates are `coords` (arrays that
    broadcast together; a coordinate outside its axis makes the position `size`, which
    the scatter drops)."""
    from .elementwise import astype, logical_and, where
    size = int(np.prod(shape, dtype=np.int64))
    wide = "int64" if size >= 2**31 - 1 else "int32"
    pos, ok = None, None
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        c = astype(coords[d], wide)
        inside = logical_and(c >= 0, c < shape[d])
        term = c * stride
        pos = term if pos is None else pos + term
        ok = inside if ok is None else logical_and(ok, inside)
        stride *= shape[d]
    return where(ok, pos, size)


def put_along_axis(a, indices, values, axis=None):
    """numpy's `put_along_axis`: a copy of `a` with `values` written at `indices` along
    `axis` (indices shaped like `a` but along `axis`; negative ones wrap; the last of
    repeats wins; out of range: dropped). `axis=None` works on the flattened array."""
    from .elementwise import astype, where
    from .shape import broadcast_to, reshape
    a = _arr(a)
    idx = _indices(indices)
    if axis is None:
        flat = put_along_axis(reshape(a, (-1,)), reshape(idx, (-1,)), reshape(_arr(values), (-1,))
                              if _arr(values).ndim else values, 0)
        return reshape(flat, a.shape)
    ax = _axis(axis, a.ndim, "put_along_axis")
    if idx.ndim != a.ndim:
        raise _err(MiraxError(f"put_along_axis: indices must have {a.ndim} dimensions like the array, got "
                              f"shape {idx.shape}"))
    try:
        shape = broadcast_shapes(idx.shape, _arr(values).shape, tuple(
            1 if d == ax else a.shape[d] for d in range(a.ndim)), op="put_along_axis")
    except MiraxError as err:
        raise _err(err) from None
    idx = broadcast_to(idx, shape)
    n = a.shape[ax]
    wrapped = where(idx < 0, idx + n, idx) if idx.dtype.kind == "i" else idx
    coords = [wrapped if d == ax else reshape(
        _arange_i32(shape[d]), tuple(shape[d] if k == d else 1 for k in range(len(shape))))
        for d in range(len(shape))]
    pos = _flat_positions(a.shape, coords)
    v = broadcast_to(astype(_arr(values), a.dtype), shape)
    flat = apply("scatter", [reshape(a, (-1,)), reshape(pos, (-1,)), reshape(v, (-1,))], axis=0)
    return reshape(flat, a.shape)


def _arange_i32(n):
    return array(np.arange(n, dtype=np.int32))


def slice_update(a, update, start_indices, axes=None):
    """A copy of `a` with `update` written at `start_indices` along `axes` (all axes when
    None), as MLX's `slice_update`; the start may be an array (a value known at run time).
    Starts are clamped so the update fits (as JAX's dynamic_update_slice)."""
    from .elementwise import astype, clip
    from .shape import broadcast_to, reshape
    a, u = _arr(a), _arr(update)
    axes = list(range(a.ndim)) if axes is None else [_axis(x, a.ndim, "slice_update") for x in axes]
    start = _arr(start_indices) if not isinstance(start_indices, (list, tuple)) else array(
        np.asarray(start_indices, np.int64).astype(np.int32))
    if start.ndim == 0:
        start = reshape(start, (1,))
    if start.shape != (len(axes),):
        raise _err(MiraxError(f"slice_update: {start.shape[0] if start.ndim else 1} start indices for "
                              f"{len(axes)} axes"))
    if u.ndim != a.ndim:
        u = reshape(u, (1,) * (a.ndim - u.ndim) + u.shape) if u.ndim < a.ndim else u
    if u.ndim != a.ndim or any(u.shape[d] > a.shape[d] for d in range(a.ndim)):
        raise _err(MiraxError(f"slice_update: update of shape {u.shape} does not fit in {a.shape}"))
    shape = tuple(u.shape[d] if d in axes else a.shape[d] for d in range(a.ndim))
    u = broadcast_to(astype(u, a.dtype), shape)
    coords = []
    for d in range(a.ndim):
        r = reshape(_arange_i32(shape[d]), tuple(shape[d] if k == d else 1 for k in range(a.ndim)))
        if d in axes:
            s0 = clip(astype(start[axes.index(d)], "int32"), 0, a.shape[d] - shape[d])
            r = r + s0
        coords.append(r)
    pos = _flat_positions(a.shape, coords)
    flat = apply("scatter", [reshape(a, (-1,)), reshape(broadcast_to(pos, shape), (-1,)), reshape(u, (-1,))], axis=0)
    return reshape(flat, a.shape)


__all__ += ["put_along_axis", "slice_update"]
