"""MLX operations written with other mirax ops: no primitive of their own, so their
jvp, vjp and batching come from the ops they are made of. Signatures follow MLX.

    mr.log2(x); mr.arcsin(x); mr.tril(m, k=-1); mr.roll(x, 2, axis=0); mr.kron(a, b)
"""
from __future__ import annotations

import math

import numpy as np

from ..array import Array, apply, array, where_text
from ..dialect import dtypes as dt
from ..dialect.core import MiraxError
from . import elementwise as ew
from . import reduction as red
from . import shape as sh
from .creation import arange, full, ones, zeros, zeros_like
from .indexing import take, take_along_axis
from .linalg import matmul
from .sorting import _prepare

__all__ = [
    "log2", "log10", "logaddexp", "trunc", "degrees", "radians", "isfinite", "isposinf", "isneginf",
    "nan_to_num", "divmod", "logical_xor", "sinh", "cosh",
    "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "tri", "tril", "triu", "diag", "diagonal", "roll", "flip", "meshgrid", "unflatten", "unstack",
    "atleast_1d", "atleast_2d", "atleast_3d", "permute_dims", "matrix_transpose", "broadcast_shapes", "diff",
    "kron", "vecdot", "addmm", "hanning", "hamming", "blackman", "bartlett",
]


def _arr(x):
    return x if isinstance(x, Array) else array(x)


def _float(a):
    """`a` as floating point (ints become float32), as MLX's float-only ops do."""
    a = _arr(a)
    return a if a.dtype.kind in "fc" else ew.astype(a, dt.float32)


# ---- elementwise ---------------------------------------------------------------------------

def log2(a):
    """Base-2 logarithm."""
    return ew.log(_float(a)) * (1 / math.log(2))


def log10(a):
    """Base-10 logarithm."""
    return ew.log(_float(a)) * (1 / math.log(10))


def logaddexp(a, b):
    """log(exp(a) + exp(b)), without overflow: max + log1p(exp(-|a - b|))."""
    a, b = _float(a), _float(b)
    m = ew.maximum(a, b)
    d = ew.abs(a - b)
    out = m + ew.log1p(ew.exp(-d))
    return ew.where(ew.isinf(m), m, out)  # both -inf (or one +inf): the max itself


def trunc(a):
    """Round toward zero."""
    a = _arr(a)
    if a.dtype.kind not in "fc":
        return a
    return ew.where(a < 0, ew.ceil(a), ew.floor(a))


def degrees(a):
    return _float(a) * (180.0 / math.pi)


def radians(a):
    return _float(a) * (math.pi / 180.0)


def isfinite(a):
    a = _arr(a)
    if a.dtype.kind not in "fc":
        return ew.astype(ones(a.shape, dt.bool_), dt.bool_)
    return ew.logical_not(ew.logical_or(ew.isnan(a), ew.isinf(a)))


def _is_inf(a, value):
    a = _arr(a)
    if a.dtype.kind == "c":  # as MLX: the real part
        a = ew.real(a)
    if a.dtype.kind not in "f":
        return zeros(a.shape, dt.bool_)
    return ew.equal(a, value)


def isposinf(a):
    return _is_inf(a, math.inf)


def isneginf(a):
    return _is_inf(a, -math.inf)


def nan_to_num(a, nan=0.0, posinf=None, neginf=None):
    """NaN -> `nan`, +inf -> `posinf` (default: the dtype's max), -inf -> `neginf`
    (default: the dtype's lowest)."""
    a = _arr(a)
    if a.dtype.kind != "f":
        return a
    info = np.finfo(np.float32 if a.dtype is dt.bfloat16 else a.dtype.storage)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    if a.dtype is dt.bfloat16 and posinf is None:
        hi, lo = 3.3895313892515355e38, -3.3895313892515355e38
    out = ew.where(ew.isnan(a), ew.astype(array(nan), a.dtype), a)
    out = ew.where(ew.equal(a, math.inf), ew.astype(array(hi), a.dtype), out)
    return ew.where(ew.equal(a, -math.inf), ew.astype(array(lo), a.dtype), out)


def divmod(a, b):
    """(a // b, a % b), as Python's divmod."""
    return ew.floor_divide(a, b), ew.remainder(a, b)


def logical_xor(a, b):
    return ew.not_equal(ew.astype(_arr(a), dt.bool_), ew.astype(_arr(b), dt.bool_))


def arcsin(a):
    """asin(x) = atan2(x, sqrt((1 - x)(1 + x))): accurate near +-1, NaN outside [-1, 1]."""
    a = _float(a)
    return ew.arctan2(a, ew.sqrt((1 - a) * (1 + a)))


def arccos(a):
    a = _float(a)
    return ew.arctan2(ew.sqrt((1 - a) * (1 + a)), a)


def arctan(a):
    a = _float(a)
    return ew.arctan2(a, full(a.shape, 1.0, a.dtype))


def arcsinh(a):
    """asinh(x) = sign(x) log(|x| + sqrt(x^2 + 1)) (odd, no cancellation for x < 0)."""
    a = _float(a)
    m = ew.abs(a)
    return ew.sign(a) * ew.log(m + ew.sqrt(m * m + 1))


def arccosh(a):
    a = _float(a)
    return ew.log(a + ew.sqrt((a - 1) * (a + 1)))


def arctanh(a):
    a = _float(a)
    return (ew.log1p(a) - ew.log1p(-a)) * 0.5


asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh


# e^|x| / 2 without overflow up to |x| = 89.4 (where sinh and cosh are still finite in f32,
# and e^|x| is not from 88.7 on): exp(|x| - C_HI) * K, C_HI being ln 2 on the grid of
# 2^-17 (so |x| - C_HI is exact for every |x| < 128; beyond, the result is inf anyway) and K
# = e^(C_HI - ln 2) rounded to f32 (relative error 2e-9)
_LN2_HI = 0.693145751953125
_HALF_EXP_K = 0.9999985694885254


def _half_exp_abs(a):
    """(|a|, e^|a| / 2) for real `a`: f32 as above, other dtypes e^|a| in their own type
    halved (exact: a power of two)."""
    m = ew.abs(a)
    if a.dtype != dt.float32:
        return m, ew.exp(m) * 0.5
    return m, ew.exp(m - _LN2_HI) * _HALF_EXP_K


def sinh(a):
    """(e^x - e^-x) / 2 from one exp of |x| (h - 1/(4h) with h = e^|x| / 2, the sign put
    back), and an odd Taylor polynomial for |x| <= 1/2, where h - 1/(4h) would cancel
    (its x^11 term is under f32's rounding there). Two expm1, as before, took ~5x the
    time: 4M f32 8.9 -> 1.7 ms (minima in one process; numpy 1.9). h, not e^|x|, so the
    result is finite up to |x| = 89.4 as numpy's. float64 keeps the expm1 form (libm's
    precision), complex too; f16 and bf16 take e^|x| in their own type."""
    a = _float(a)
    if a.dtype == dt.float64 or a.dtype.kind == "c":  # (|z| and z < 0 mean nothing here for complex z)
        return (ew.expm1(a) - ew.expm1(-a)) * 0.5
    m, h = _half_exp_abs(a)
    big = h - 0.25 / h
    near = m <= 0.5
    small_x = ew.where(near, a, 0)  # (the branch not taken stays finite: its gradient is 0, not 0 * inf)
    t = small_x * small_x
    small = small_x + small_x * t * (1 / 6 + t * (1 / 120 + t * (1 / 5040 + t * (1 / 362880))))
    return ew.where(near, small, ew.where(a < 0, -big, big))


def cosh(a):
    """(e^|x| + e^-|x|) / 2 from one exp and a divide (4M f32: 1.96 -> 1.14 ms; numpy
    2.26): h + 1/(4h) with h = e^|x| / 2 in f32, finite up to |x| = 89.4 as numpy's."""
    a = _float(a)
    if a.dtype.kind == "c":
        return (ew.exp(a) + ew.exp(-a)) * 0.5
    _, h = _half_exp_abs(a)
    return h + 0.25 / h


# ---- matrices, shapes ----------------------------------------------------------------------

def tri(n, m=None, k=0, dtype=dt.float32):
    """An n x m matrix with ones at and below the k-th diagonal."""
    m = n if m is None else m
    i = sh.reshape(arange(n, dtype=dt.int32), (n, 1))
    j = sh.reshape(arange(m, dtype=dt.int32), (1, m))
    return ew.astype(ew.less_equal(j, i + k), dtype)


def _tri_mask(a, k, lower):
    a = _arr(a)
    if a.ndim < 2:
        raise MiraxError(f"{'tril' if lower else 'triu'}: the array must have at least 2 dimensions, got shape "
                         f"{a.shape}{where_text()}")
    n, m = a.shape[-2:]
    mask = tri(n, m, k if lower else k - 1, dt.bool_)
    return a, (mask if lower else ew.logical_not(mask))


def tril(x, k=0):
    """x with the elements above the k-th diagonal zeroed (last two axes)."""
    a, mask = _tri_mask(x, k, True)
    return ew.where(mask, a, zeros_like(a))


def triu(x, k=0):
    """x with the elements below the k-th diagonal zeroed (last two axes)."""
    a, mask = _tri_mask(x, k, False)
    return ew.where(mask, a, zeros_like(a))


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The `offset` diagonal of the matrices along `axis1`, `axis2`, as the last axis."""
    a = _arr(a)
    if a.ndim < 2:
        raise MiraxError(f"diagonal: the array must have at least 2 dimensions, got shape {a.shape}{where_text()}")
    ax1, ax2 = axis1 % a.ndim, axis2 % a.ndim
    if ax1 == ax2:
        raise MiraxError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}{where_text()}")
    rest = [d for d in range(a.ndim) if d not in (ax1, ax2)]
    m = sh.transpose(a, rest + [ax1, ax2])
    n1, n2 = m.shape[-2:]
    i0, j0 = (0, offset) if offset >= 0 else (-offset, 0)
    size = max(0, min(n1 - i0, n2 - j0))
    flat = sh.reshape(m, m.shape[:-2] + (n1 * n2,))
    idx = np.arange(size, dtype=np.int64)
    pos = (i0 + idx) * n2 + (j0 + idx)
    return take(flat, array(pos.astype(np.int32)), axis=-1)


def diag(a, k=0):
    """A 1-D array's values on the k-th diagonal of a square matrix, or a 2-D array's
    k-th diagonal."""
    a = _arr(a)
    if a.ndim == 2:
        return diagonal(a, k, 0, 1)
    if a.ndim != 1:
        raise MiraxError(f"diag: the array must be 1-D or 2-D, got shape {a.shape}{where_text()}")
    n = a.shape[0] + abs(k)
    i = sh.reshape(arange(n, dtype=dt.int32), (n, 1))
    j = sh.reshape(arange(n, dtype=dt.int32), (1, n))
    on = ew.equal(j - i, k)
    if not a.shape[0]:
        return zeros((n, n), a.dtype)
    # on the diagonal j - i = k, the element's position in `a` is min(i, j)
    vals = take(a, ew.minimum(i, j), axis=0)  # off the diagonal: clamped, then masked
    return ew.where(on, vals, zeros((n, n), a.dtype))


def roll(a, shift, axis=None):
    """Elements shifted by `shift` along `axis` (the flattened array when None), wrapping."""
    a = _arr(a)
    if axis is None:
        return sh.reshape(roll(sh.reshape(a, (-1,)), shift, 0), a.shape)
    try:  # shifts and axes broadcast together (numpy); repeated axes add up
        shifts, axes = np.broadcast_arrays(np.asarray(shift, np.int64), np.asarray(axis, np.int64))
    except ValueError:
        raise MiraxError(f"roll: shift {shift!r} and axis {axis!r} do not broadcast together{where_text()}") from None
    if shifts.ndim > 1:
        raise MiraxError(f"roll: shift and axis must be ints or 1-d sequences{where_text()}")
    for s, ax in zip(shifts.reshape(-1), axes.reshape(-1)):
        if not -a.ndim <= ax < a.ndim:
            raise MiraxError(f"roll: axis {ax} is out of bounds for an array of shape {a.shape}{where_text()}")
        ax = int(ax) % a.ndim
        n = a.shape[ax]
        if n:
            idx = (np.arange(n) - int(s)) % n
            a = take(a, array(idx.astype(np.int32)), axis=ax)
    return a


def flip(a, axis=None):
    """Elements in reverse order along `axis` (all axes when None)."""
    a = _arr(a)
    axes = range(a.ndim) if axis is None else (axis if isinstance(axis, (tuple, list)) else [axis])
    for ax in axes:
        key = [slice(None)] * a.ndim
        key[ax % a.ndim] = slice(None, None, -1)
        a = a[tuple(key)]
    return a


def meshgrid(*arrays, sparse=False, indexing="xy"):
    """Coordinate matrices from 1-D coordinate arrays (numpy's `meshgrid`)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [sh.reshape(_arr(x), (-1,)) for x in arrays]
    n = len(xs)
    out = []
    for i, x in enumerate(xs):
        shape = [1] * n
        shape[i] = x.shape[0]
        if indexing == "xy" and n >= 2 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(sh.reshape(x, tuple(shape)))
    if not sparse:
        full_shape = np.broadcast_shapes(*[o.shape for o in out]) if out else ()
        out = [sh.broadcast_to(o, full_shape) for o in out]
    return tuple(out)


def unflatten(a, axis, shape):
    """Axis `axis` of `a` split into `shape` (one entry may be -1)."""
    a = _arr(a)
    ax = axis % a.ndim
    return sh.reshape(a, a.shape[:ax] + tuple(shape) + a.shape[ax + 1:])


def matrix_trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """The sum along a diagonal (numpy's and MLX's `trace`; `mr.trace` with an array)."""
    d = diagonal(_arr(a), offset, axis1, axis2)
    if dtype is not None:
        d = ew.astype(d, dtype)
    return red.sum(d, axis=-1)


def unstack(a, axis=0):
    """The slices of `a` along `axis`, as a list."""
    a = _arr(a)
    if a.ndim == 0 or not -a.ndim <= axis < a.ndim:
        raise MiraxError(f"unstack: axis {axis} is out of bounds for an array of shape {a.shape}{where_text()}")
    axis %= a.ndim
    return [sh.squeeze(x, axis) for x in sh.split(a, a.shape[axis], axis)] if a.shape[axis] else []


def _atleast(n, arys):
    out = []
    for x in arys:
        x = _arr(x)
        if x.ndim < n:
            shape = {1: (1,), 2: (1, 1), 3: (1, 1, 1)}[n]
            if x.ndim == 1:
                shape = (1, x.shape[0]) if n == 2 else (1, x.shape[0], 1)
            elif x.ndim == 2:
                shape = x.shape + (1,)
            x = sh.reshape(x, shape)
        out.append(x)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys):
    return _atleast(1, arys)


def atleast_2d(*arys):
    return _atleast(2, arys)


def atleast_3d(*arys):
    return _atleast(3, arys)


def permute_dims(a, axes=None):
    """The array API's name of `transpose`."""
    return sh.transpose(a, axes)


def matrix_transpose(a):
    """The last two axes swapped."""
    return sh.swapaxes(_arr(a), -1, -2)


def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to (ValueError if they do not)."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"[broadcast_shapes] Shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be "
                         "broadcast.") from None


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The n-th discrete difference along `axis` (numpy's `diff`)."""
    a = _arr(a)
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, got {n}")
    ax = axis % a.ndim
    if prepend is not None or append is not None:
        pieces = [a]
        if prepend is not None:
            pieces.insert(0, _broadcast_edge(prepend, a, ax))
        if append is not None:
            pieces.append(_broadcast_edge(append, a, ax))
        a = sh.concatenate(pieces, axis=ax)
    for _ in range(n):
        m = a.shape[ax]
        hi = [slice(None)] * a.ndim
        lo = [slice(None)] * a.ndim
        hi[ax], lo[ax] = slice(1, m), slice(0, max(m - 1, 0))
        a = a[tuple(hi)] - a[tuple(lo)]
    return a


def _broadcast_edge(v, a, ax):
    v = _arr(v)
    if v.ndim == 0:
        shp = list(a.shape)
        shp[ax] = 1
        return sh.broadcast_to(ew.astype(v, a.dtype), tuple(shp))
    return v


def kron(a, b):
    """The Kronecker product: blocks a[i, j] * b."""
    a, b = _arr(a), _arr(b)
    nd = max(a.ndim, b.ndim)
    a = sh.reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = sh.reshape(b, (1,) * (nd - b.ndim) + b.shape)
    ia = sh.reshape(a, tuple(x for d in a.shape for x in (d, 1)))
    ib = sh.reshape(b, tuple(x for d in b.shape for x in (1, d)))
    return sh.reshape(ia * ib, tuple(x * y for x, y in zip(a.shape, b.shape)))


def vecdot(a, b, axis=-1):
    """sum(conj(a) * b) along `axis`."""
    a, b = _arr(a), _arr(b)
    if a.dtype.kind == "c":
        a = ew.conjugate(a)
    return red.sum(a * b, axis=axis)


def addmm(c, a, b, alpha=1.0, beta=1.0):
    """beta * c + alpha * (a @ b)."""
    return ew.multiply(matmul(a, b), alpha) + ew.multiply(_arr(c), beta)


# ---- windows (numpy's definitions, float32) ---------------------------------------------------

def _window(m, coeffs):
    if m < 1:
        return zeros((0,), dt.float32)
    if m == 1:
        return ones((1,), dt.float32)
    n = np.arange(m, dtype=np.float64)
    w = sum(c * np.cos(2 * math.pi * k * n / (m - 1)) for k, c in enumerate(coeffs))
    return array(w.astype(np.float32))


def hanning(M):
    return _window(M, [0.5, -0.5])


def hamming(M):
    return _window(M, [0.54, -0.46])


def blackman(M):
    return _window(M, [0.42, -0.5, 0.08])


def bartlett(M):
    if M < 1:
        return zeros((0,), dt.float32)
    if M == 1:
        return ones((1,), dt.float32)
    n = np.arange(M, dtype=np.float64)
    return array((1 - np.abs(2 * n / (M - 1) - 1)).astype(np.float32))


# MLX's array methods for these
Array.mT = property(matrix_transpose)
Array.log2 = lambda self: log2(self)
Array.log10 = lambda self: log10(self)
Array.diag = lambda self, k=0: diag(self, k)
Array.diagonal = lambda self, offset=0, axis1=0, axis2=1: diagonal(self, offset, axis1, axis2)


# ---- scans: cumprod, cummax, cummin are primitives (dialect/reduction.py, as cumsum) ------
# logcumsumexp is a log-depth (Hillis-Steele) scan of an associative, commutative elementwise
# `combine`: ceil(log2 n) steps, each combining the running result with itself shifted by
# 1, 2, 4, ... places (the vacated places hold the identity). O(n log n) work in log n ops
# of other mirax ops, so every device and transform has it (gradients through the
# logaddexps); cumprod's derivative rules differentiate the same scan of multiplies. (It
# replaced masked reductions over every pair, O(n^2): rows beyond 2^31 pairs were refused.)

def _shift(y, k, reverse, ident):
    """y moved k places along its last axis (backwards when `reverse`), the vacated
    places filled with `ident`."""
    n, last = y.shape[-1], y.ndim - 1
    if k >= n:
        return full(y.shape, ident, dtype=y.dtype)
    part = y[..., k:] if reverse else y[..., :n - k]
    return sh.pad(part, [(0, 0)] * last + [(0, k) if reverse else (k, 0)], constant_values=ident)


def log_depth_scan(a, axis, reverse, inclusive, combine, identity):
    """The running `combine` (elementwise, associative, commutative) of `a` along `axis`
    (normalized) in ceil(log2 n) steps; `identity` fills the vacated places. cumprod's
    derivative rules differentiate it (dialect/reduction.py); logcumsumexp is it."""
    n = a.shape[axis]
    if n == 0:
        return a
    y = sh.moveaxis(a, axis, -1)
    if not inclusive:  # exclusive: the inclusive scan of the input shifted by one place
        y = _shift(y, 1, reverse, identity)
    k = 1
    while k < n:
        y = combine(y, _shift(y, k, reverse, identity))
        k *= 2
    return sh.moveaxis(y, -1, axis)


def _scan_axis(name, a, axis):
    """(a, axis normalized), a flattened along axis 0 when axis is None; a clear error out
    of bounds (the sorts' `_prepare`)."""
    a, ax = _prepare(a, axis, name)
    return a, 0 if ax is None else ax


def cumprod(a, axis=None, *, reverse=False, inclusive=True, dtype=None):
    """Running product along `axis` (the flattened array when None); `dtype` casts the
    input first (`mr.cumprod(x, dtype=mr.int64)`)."""
    if dtype is not None:
        a = ew.astype(_arr(a), dtype)
    a, ax = _scan_axis("cumprod", a, axis)
    x = ew.astype(a, dt.int32) if a.dtype.kind == "b" else a
    return apply("cumprod", [x], axis=ax, reverse=bool(reverse), inclusive=bool(inclusive))


def _running_extreme(name, a, axis, reverse, inclusive):
    """cummax/cummin: the dialect's `mirax.cummax` / `mirax.cummin` (a loop along the axis,
    dialect/reduction.py; the derivative goes to the latest element attaining each running
    extreme, MLX's rule for ties); bool as uint8."""
    a, ax = _scan_axis(name, a, axis)
    x = ew.astype(a, dt.uint8) if a.dtype.kind == "b" else a
    out = apply(name, [x], axis=ax, reverse=bool(reverse), inclusive=bool(inclusive))
    return ew.astype(out, dt.bool_) if a.dtype.kind == "b" else out


def cummax(a, axis=None, *, reverse=False, inclusive=True):
    """Running maximum along `axis` (ties: the gradient goes to the latest maximum)."""
    return _running_extreme("cummax", a, axis, reverse, inclusive)


def cummin(a, axis=None, *, reverse=False, inclusive=True):
    """Running minimum along `axis` (ties: the gradient goes to the latest minimum)."""
    return _running_extreme("cummin", a, axis, reverse, inclusive)


def logcumsumexp(a, axis=None, *, reverse=False, inclusive=True):
    """log of the running sum of exp along `axis`, without overflow."""
    a, ax = _scan_axis("logcumsumexp", _float(a), axis)
    return log_depth_scan(a, ax, reverse, inclusive, _logaddexp_complex if a.dtype.kind == "c" else logaddexp,
                          -math.inf)


def _logaddexp_complex(a, b):
    """log(exp(a) + exp(b)) of complex a and b, scaled by the larger real part (a real
    part of -inf: the other one, exp of it being 0)."""
    m = ew.maximum(ew.real(a), ew.real(b))
    inf = ew.isinf(m)
    safe = ew.where(inf, zeros_like(m), m)
    out = safe + ew.log(ew.exp(a - safe) + ew.exp(b - safe))
    return ew.where(inf, ew.where(ew.greater_equal(ew.real(a), ew.real(b)), a, b), out)


cumulative_prod = cumprod  # MLX's array-API alias
__all__ += ["cumprod", "cummax", "cummin", "logcumsumexp", "cumulative_prod"]
Array.cumprod = lambda self, axis=None, *, reverse=False, inclusive=True: cumprod(self, axis, reverse=reverse,
                                                                                  inclusive=inclusive)
Array.cummax = lambda self, axis=None, *, reverse=False, inclusive=True: cummax(self, axis, reverse=reverse,
                                                                                inclusive=inclusive)
Array.cummin = lambda self, axis=None, *, reverse=False, inclusive=True: cummin(self, axis, reverse=reverse,
                                                                                inclusive=inclusive)
Array.logcumsumexp = lambda self, axis=None, *, reverse=False, inclusive=True: logcumsumexp(
    self, axis, reverse=reverse, inclusive=inclusive)


# ---- structured matmuls ----------------------------------------------------------------------

def gather_mm(a, b, lhs_indices=None, rhs_indices=None, *, sorted_indices=False):
    """Matmuls of gathered matrices: out[i] = A[lhs_indices[i]] @ B[rhs_indices[i]], where A
    and B are `a` and `b` with their batch dims flattened; the indices (default: every
    batch element, shaped like the batch) broadcast together and give the result's batch
    shape. `sorted_indices` is a hint MLX uses; the result does not depend on it."""
    a, b = _arr(a), _arr(b)
    if a.ndim < 2 or b.ndim < 2:
        raise MiraxError(f"gather_mm: a and b must have at least 2 dimensions, got {a.shape} and {b.shape}"
                         f"{where_text()}")
    fa = sh.reshape(a, (-1,) + a.shape[-2:])
    fb = sh.reshape(b, (-1,) + b.shape[-2:])
    li = sh.reshape(arange(fa.shape[0], dtype=dt.int32), a.shape[:-2]) if lhs_indices is None else _arr(lhs_indices)
    ri = sh.reshape(arange(fb.shape[0], dtype=dt.int32), b.shape[:-2]) if rhs_indices is None else _arr(rhs_indices)
    batch = broadcast_shapes(li.shape, ri.shape)
    li = sh.reshape(sh.broadcast_to(li, batch), (-1,))
    ri = sh.reshape(sh.broadcast_to(ri, batch), (-1,))
    out = matmul(take(fa, li, axis=0), take(fb, ri, axis=0))
    return sh.reshape(out, tuple(batch) + out.shape[-2:])


def block_masked_mm(a, b, block_size=64, mask_out=None, mask_lhs=None, mask_rhs=None):
    """a @ b with block masks: each mask element covers a block_size x block_size tile of
    its operand (lhs: M x K, rhs: K x N) or of the result (M x N); bool masks keep or zero
    tiles, numeric ones scale them."""
    a, b = _arr(a), _arr(b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]

    def tiles(mask, rows, cols):
        mask = _arr(mask)
        mr_, mc = mask.shape[-2:]
        if mr_ * block_size < rows or mc * block_size < cols:
            raise MiraxError(f"block_masked_mm: a mask of shape {mask.shape} does not cover {rows} x {cols} "
                             f"in blocks of {block_size}{where_text()}")
        e = sh.expand_dims(sh.expand_dims(mask, -1), -3)  # (..., mr, 1, mc, 1)
        e = sh.broadcast_to(e, mask.shape[:-2] + (mr_, block_size, mc, block_size))
        e = sh.reshape(e, mask.shape[:-2] + (mr_ * block_size, mc * block_size))
        return ew.astype(e[..., :rows, :cols], a.dtype)
    if mask_lhs is not None:
        a = a * tiles(mask_lhs, m, k)
    if mask_rhs is not None:
        b = b * tiles(mask_rhs, k, n)
    out = matmul(a, b)
    if mask_out is not None:
        out = out * tiles(mask_out, m, n)
    return out


__all__ += ["gather_mm", "block_masked_mm"]
