"""Shape ops: reshape, broadcast_to, transpose, expand_dims, squeeze, flatten, ...

    x.reshape(2, -1)      mr.transpose(x, (1, 0))      mr.expand_dims(x, 0)
"""
from __future__ import annotations

from ..dialect.core import MiraxError, normalize_axes, normalize_axis
from ..dialect.shape import reshape_result
from ..array import Array, apply, array, eager_host_data, where_text

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
    data = eager_host_data(a)
    if data is not None:  # eager, evaluated: numpy's view of the same buffer (no copy, no kernel)
        return Array._leaf(data.reshape(out.shape), a.dtype)
    # the requested shape, -1 included: a shapeless compile re-infers it for new shapes
    return apply("reshape", [a], shape=tuple(int(s) for s in shape))


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
    try:
        s = normalize_axis(start_axis, a.ndim, "flatten")
        e = normalize_axis(end_axis, a.ndim, "flatten")
    except MiraxError as err:
        raise _err(err) from None
    if s >= e:
        return a
    # its own primitive (as MLX's Flatten), so a shapeless compile follows new shapes
    return apply("flatten", [a], start_axis=s, end_axis=e)


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


# ---- slicing, joining, splitting, padding ----------------------------------------------

__all__ += ["concatenate", "stack", "split", "pad", "slice", "repeat", "tile"]

def strided_slice(a, start, stop, strides=None) -> Array:
    """`a[start:stop:strides]` per axis with normalized, in-bounds bounds and positive strides
    (one `mirax.slice` op; a no-op slice records nothing)."""
    a = _arr(a)
    start, stop = tuple(int(s) for s in start), tuple(int(s) for s in stop)
    strides = tuple(int(s) for s in strides) if strides is not None else (1,) * a.ndim
    if start == (0,) * a.ndim and stop == a.shape and all(
            s == 1 or d <= 1 for s, d in zip(strides, a.shape)):
        return a
    return apply("slice", [a], start=start, stop=stop, strides=strides)


def slice(a, start_indices, axes=None, slice_size=None) -> Array:
    """MLX's `slice` with static starts: `slice_size[i]` elements of `axes[i]` from
    `start_indices[i]` (negative starts count from the end)."""
    a = _arr(a)
    starts = (start_indices,) if isinstance(start_indices, int) else tuple(int(s) for s in start_indices)
    axes = tuple(range(len(starts))) if axes is None else ((axes,) if isinstance(axes, int) else tuple(axes))
    if slice_size is None:
        raise _err(MiraxError("slice: slice_size is required"))
    sizes = (slice_size,) if isinstance(slice_size, int) else tuple(int(s) for s in slice_size)
    if not len(starts) == len(axes) == len(sizes):
        raise _err(MiraxError(f"slice: start_indices {starts}, axes {axes} and slice_size {sizes} differ in length"))
    b, e = [0] * a.ndim, list(a.shape)
    for s, ax, n in zip(starts, axes, sizes):
        try:
            ax = normalize_axis(ax, a.ndim, "slice")
        except MiraxError as err:
            raise _err(err) from None
        s = s + a.shape[ax] if s < 0 else s
        if s < 0 or n < 0 or s + n > a.shape[ax]:
            raise _err(MiraxError(f"slice: start {s} and size {n} out of bounds for axis {ax} of {a.shape}"))
        b[ax], e[ax] = s, s + n
    return strided_slice(a, b, e)


def concatenate(arrays, axis=0) -> Array:
    """Join arrays along `axis`: a chain of binary `mirax.concatenate` ops."""
    from .elementwise import astype
    from ..dialect import dtypes as dt
    arrays = [_arr(x) for x in arrays]
    if not arrays:
        raise _err(MiraxError("concatenate: need at least one array"))
    if axis is None:  # numpy: the arrays flattened, then joined
        return concatenate([reshape(x, (-1,)) for x in arrays], 0)
    nd = arrays[0].ndim
    if nd == 0 or any(x.ndim != nd for x in arrays):
        raise _err(MiraxError("concatenate: arrays need the same number of dimensions (>= 1), got shapes "
                              + ", ".join(str(x.shape) for x in arrays)))
    try:
        ax = normalize_axis(axis, nd, "concatenate")
    except MiraxError as err:
        raise _err(err) from None
    for x in arrays[1:]:
        if any(p != q for i, (p, q) in enumerate(zip(x.shape, arrays[0].shape)) if i != ax):
            raise _err(MiraxError(f"concatenate: all dimensions except axis {ax} must match, got shapes "
                                  + ", ".join(str(x.shape) for x in arrays)))
    d = arrays[0].dtype
    for x in arrays[1:]:
        d = dt.promote(d, x.dtype)
    # operands empty along the axis add nothing (all of them empty: keep the first)
    arrays = [astype(x, d) for x in arrays if x.shape[ax]] or [astype(arrays[0], d)]
    out = None
    for x in arrays:
        out = x if out is None else apply("concatenate", [out, x], axis=ax)
    return out


def stack(arrays, axis=0) -> Array:
    arrays = [_arr(x) for x in arrays]
    if not arrays:
        raise _err(MiraxError("stack: need at least one array"))
    if any(x.shape != arrays[0].shape for x in arrays):
        raise _err(MiraxError("stack: all arrays must have the same shape, got "
                              + ", ".join(str(x.shape) for x in arrays)))
    try:
        ax = normalize_axis(axis, arrays[0].ndim + 1, "stack")
    except MiraxError as err:
        raise _err(err) from None
    return concatenate([expand_dims(x, ax) for x in arrays], ax)


def split(a, indices_or_sections, axis=0):
    """numpy/MLX split: a number of equal sections, or the indices where pieces start."""
    a = _arr(a)
    try:
        ax = normalize_axis(axis, a.ndim, "split")
    except MiraxError as err:
        raise _err(err) from None
    n = a.shape[ax]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0 or n % k:
            raise _err(MiraxError(f"split: array of size {n} along axis {ax} cannot be split into {k} equal sections"))
        cuts = [n // k * i for i in range(1, k)]
    else:
        cuts = [int(c) for c in indices_or_sections]
    bounds = [0] + [min(max(c + n if c < 0 else c, 0), n) for c in cuts] + [n]
    out = []
    for b, e in zip(bounds[:-1], bounds[1:]):
        e = max(b, e)
        start, stop = [0] * a.ndim, list(a.shape)
        start[ax], stop[ax] = b, e
        out.append(strided_slice(a, start, stop))
    return out


def pad(a, pad_width, mode="constant", constant_values=0) -> Array:
    """MLX/numpy pad: `pad_width` is an int, a (before, after) pair, or one pair per axis."""
    from .elementwise import astype
    a = _arr(a)
    if mode not in ("constant", "edge", "reflect", "symmetric"):
        raise _err(ValueError(f"pad: mode must be 'constant', 'edge', 'reflect' or 'symmetric', got {mode!r}"))
    import numpy as _np
    try:
        pw = _np.asarray(pad_width, _np.int64)
        if pw.ndim == 0 or pw.shape == (1,):
            pw = _np.full((a.ndim, 2), int(pw.reshape(-1)[0]))
        elif pw.shape in ((2,), (1, 2)):
            pw = _np.broadcast_to(pw.reshape(1, 2), (a.ndim, 2))
        elif pw.shape != (a.ndim, 2):
            raise ValueError
    except (ValueError, TypeError):
        raise _err(MiraxError(f"pad: pad_width {pad_width!r} does not fit an array of shape {a.shape}")) from None
    if (pw < 0).any():
        raise _err(MiraxError(f"pad: pad_width must be non-negative, got {pad_width!r}"))
    if not pw.any():
        return a
    if mode != "constant":  # numpy's other modes: gathers with constant indices per axis
        from .indexing import take
        for ax in range(a.ndim):
            lo, hi = int(pw[ax, 0]), int(pw[ax, 1])
            n = a.shape[ax]
            if not lo and not hi:
                continue
            if n == 0:
                raise _err(ValueError(f"pad: cannot pad an empty axis {ax} with mode {mode!r}"))
            src = _np.pad(_np.arange(n), (lo, hi), mode=mode)  # numpy says which element goes where
            a = take(a, array(src.astype(_np.int32)), ax)
        return a
    v = constant_values
    v = astype(v if isinstance(v, Array) else array(v, a.dtype), a.dtype)
    if v.ndim:
        raise _err(MiraxError("pad: constant_values must be a scalar"))
    return apply("pad", [a, v], low=tuple(int(x) for x in pw[:, 0]), high=tuple(int(x) for x in pw[:, 1]))


def repeat(a, repeats, axis=None) -> Array:
    """numpy repeat with an int `repeats` (a take with constant indices)."""
    import numpy as _np
    from .indexing import take
    a = _arr(a)
    if axis is None:
        a, axis = flatten(a), 0
    ax = normalize_axis(axis, a.ndim, "repeat")
    if not isinstance(repeats, int) or repeats < 0:
        raise _err(MiraxError(f"repeat: repeats must be a non-negative int, got {repeats!r}"))
    return take(a, array(_np.repeat(_np.arange(a.shape[ax], dtype=_np.int32), repeats)), ax)


def tile(a, reps) -> Array:
    """numpy tile: broadcast a (1, d) view of each axis to (r, d) and merge."""
    a = _arr(a)
    reps = (reps,) if isinstance(reps, int) else tuple(int(r) for r in reps)
    nd = max(a.ndim, len(reps))
    shape = (1,) * (nd - a.ndim) + a.shape
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(a, [v for d in shape for v in (1, d)])
    x = broadcast_to(x, [v for r, d in zip(reps, shape) for v in (r, d)])
    return reshape(x, [r * d for r, d in zip(reps, shape)])


def concat(arrays, axis=0) -> Array:
    """`concatenate` under MLX's (and the array API's) other name."""
    return concatenate(arrays, axis)


def contiguous(a, allow_col_major=False) -> Array:
    """MLX's `contiguous`: mirax arrays are always row-contiguous, so `a` itself."""
    return _arr(a)


Array.split = lambda self, indices_or_sections, axis=0: split(self, indices_or_sections, axis)
__all__ += ["concat", "contiguous"]
