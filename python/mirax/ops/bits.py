"""MLX ops on the bits and layout of arrays: `view`, `as_strided`, `depends`,
`hadamard_transform` and the fp8 (e4m3) conversions.

    mr.view(mr.array([1.0]), mr.uint32)            # array([1065353216], dtype=uint32)
    mr.as_strided(mr.arange(6), (2, 2), (3, 1))    # rows [0, 1] and [3, 4]
    mr.from_fp8(mr.to_fp8(mr.array([3.0, -0.5])))  # e4m3 round trip
"""
from __future__ import annotations

import math

import numpy as np

from ..array import Array, apply, array, where_text
from ..dialect import dtypes as dt
from . import elementwise as ew
from . import shape as sh
from .indexing import take
from .linalg import matmul

__all__ = ["view", "as_strided", "depends", "hadamard_transform", "to_fp8", "from_fp8"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def view(a, dtype) -> Array:
    """The bits of `a` read as `dtype`; between widths the last axis scales (as numpy):

        mr.view(mr.array([1, 2], mr.int16), mr.uint8)   # array([1, 0, 2, 0], dtype=uint8)
    """
    a = _arr(a)
    d = dt.to_dtype(dtype)
    if a.dtype is d:
        return a
    ib, ob = max(a.dtype.bits // 8, 1), max(d.bits // 8, 1)
    if ib != ob and a.ndim == 0:
        raise ValueError("[view] Changing the type of a scalar is only allowed for types with the same size "
                         f"({a.dtype.name} to {d.name}).{where_text()}")
    if ib < ob and a.shape[-1] * ib % ob:
        raise ValueError("[view] When viewing as a larger dtype, the size in bytes of the last axis must be a "
                         f"multiple of the requested type size ({a.shape[-1]} x {a.dtype.name} to {d.name})."
                         f"{where_text()}")
    return apply("bitcast", [a], dtype=d.name)


def _view_method(self, dtype, *, stream=None):
    from .. import device as _device
    if stream is None:
        return view(self, dtype)
    with _device.stream(stream):
        return view(self, dtype)


Array.view = _view_method


def as_strided(a, /, shape=None, strides=None, offset=0) -> Array:
    """Elements of row-contiguous `a` at `offset + sum(index * strides)` (MLX's as_strided;
    a gather, so the result never aliases `a`):

        mr.as_strided(mr.arange(5), (3, 3), (1, 1))   # sliding windows of 3
    """
    a = _arr(a)
    shape = tuple(int(s) for s in (a.shape if shape is None else shape))
    if any(s < 0 for s in shape):
        raise ValueError(f"[as_strided] Negative dimensions not allowed, got shape {shape}.{where_text()}")
    if strides is None:  # row-contiguous strides of `shape`
        strides = [1] * len(shape)
        for i in range(len(shape) - 1, 0, -1):
            strides[i - 1] = shape[i] * strides[i]
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise ValueError(f"[as_strided] shape {shape} and strides {strides} have different lengths{where_text()}")
    if not isinstance(offset, (int, np.integer)) or offset < 0:
        raise TypeError(f"[as_strided] offset must be a non-negative int, got {offset!r}")
    flat = sh.reshape(a, (-1,))
    index = np.full(shape, int(offset), np.int64)
    for axis, (n, st) in enumerate(zip(shape, strides)):
        index = index + (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (len(shape) - axis - 1))
    if index.size and (index.min() < 0 or index.max() >= flat.size):
        # MLX reads past the buffer here; mirax refuses instead of reading garbage
        raise ValueError(f"[as_strided] shape {shape}, strides {strides} and offset {offset} reach element "
                         f"{int(index.max() if index.max() >= flat.size else index.min())} of an array of "
                         f"{flat.size} elements{where_text()}")
    if index.size == 0:
        return sh.reshape(take(flat, array(np.zeros((0,), np.int32))), shape)
    index = index.astype(np.int32 if flat.size < 2 ** 31 else np.int64)
    return take(flat, array(index))


def depends(inputs, dependencies):
    """`inputs` unchanged, but evaluating them evaluates `dependencies` first (MLX's
    depends; an array or a list each, a list back for a list in):

        y = mr.depends(x, side_effect)     # mr.eval(y) also computes side_effect
    """
    single = isinstance(inputs, Array)
    ins = [inputs] if single else list(inputs)
    deps = [dependencies] if isinstance(dependencies, Array) else list(dependencies)
    for v in ins + deps:
        if not isinstance(v, Array):
            raise TypeError(f"depends: inputs and dependencies must be arrays, got {type(v).__name__}")
    outs = []
    for x in ins:
        for d in deps:
            x = apply("depends", [x, d])
        outs.append(x)
    return outs[0] if single else outs


# ---- the Walsh-Hadamard transform -------------------------------------------------------

# Hadamard matrices of orders 12, 20 and 28 from N. J. A. Sloane's library
# (http://neilsloane.com/hadamard/), the ones MLX uses, so that n = m * 2^k agrees with it.
_SLOANE = {
    12: """+-++++++++++ --+-+-+-+-+- +++-++----++ +---+--+-++- +++++-++---- +-+---+--+-+
           ++--+++-++-- +--++---+--+ ++----+++-++ +--+-++---+- ++++----+++- +-+--+-++---""",
    20: """+----+----++--++-++- -+----+---+++---+-++ --+----+---+++-+-+-+ ---+----+---+++++-+-
           ----+----++--++-++-+ -+++++-----+--+++--+ +-+++-+---+-+--+++-- ++-++--+---+-+--+++-
           +++-+---+---+-+--+++ ++++-----++--+-+--++ --++-+-++-+-----++++ ---++-+-++-+---+-+++
           +---++-+-+--+--++-++ ++---++-+----+-+++-+ -++---++-+----+++++- -+--+--++-+----+----
           +-+-----++-+----+--- -+-+-+---+--+----+-- --+-+++------+----+- +--+--++------+----+""",
    28: """+------++----++-+--+-+--++-- -+-----+++-----+-+--+-+--++- --+-----+++---+-+-+----+--++
           ---+-----+++---+-+-+-+--+--+ ----+-----+++---+-+-+++--+-- -----+-----++++--+-+--++--+-
           ------++----++-+--+-+--++--+ --++++-+-------++--+++-+--+- ---++++-+-----+-++--+-+-+--+
           +---+++--+----++-++--+-+-+-- ++---++---+----++-++--+-+-+- +++---+----+----++-++--+-+-+
           ++++--------+-+--++-++--+-+- -++++--------+++--++--+--+-+ -+-++-++--++--+--------++++-
           +-+-++--+--++--+--------++++ -+-+-++--+--++--+----+---+++ +-+-+-++--+--+---+---++---++
           ++-+-+-++--+------+--+++---+ -++-+-+-++--+------+-++++--- +-++-+---++--+------+-++++--
           -++--++-+-++-+++----++------ +-++--++-+-++-+++-----+----- ++-++---+-+-++-+++-----+----
           -++-++-+-+-+-+--+++-----+--- --++-++++-+-+----+++-----+-- +--++-+-++-+-+----+++-----+-
           ++--++-+-++-+-+----++------+""",
}


def _sloane(m):
    rows = _SLOANE[m].split()
    return np.array([[1.0 if c == "+" else -1.0 for c in r] for r in rows], np.float32)


def _split_hadamard(n):
    """n = m * 2^k with m in (1, 12, 20, 28): (m, 2^k), or ValueError."""
    m = 1
    if n & (n - 1):
        m = next((f for f in (12, 20, 28) if n % f == 0), 1)
        if m == 1 or (n // m) & (n // m - 1):
            raise ValueError(f"[hadamard_transform] Only supports n = m*2^k where m in (1, 12, 20, 28), "
                             f"got n = {n}.{where_text()}")
    if n // m > 1 << 26:
        raise ValueError(f"[hadamard_transform] Only supports n = m*2^k where k <= 26, got n = {n}.{where_text()}")
    return m, n // m


def hadamard_transform(a, scale=None) -> Array:
    """The Walsh-Hadamard transform along the last axis, times `scale` (default
    1/sqrt(n), orthonormal); n = m * 2^k with m in (1, 12, 20, 28), as MLX:

        mr.hadamard_transform(mr.array([1.0, 0.0]))   # [0.7071, 0.7071]
    """
    a = _arr(a)
    if a.size == 0:
        raise ValueError(f"[hadamard_transform] Does not support empty arrays.{where_text()}")
    n = a.shape[-1] if a.ndim else 1
    scale = 1.0 / math.sqrt(n) if scale is None else float(scale)
    d = a.dtype if a.dtype.kind == "f" else dt.float32
    if n == 1:
        return a if scale == 1 else ew.multiply(a, array(scale, d))
    m, p = _split_hadamard(n)
    lead = a.shape[:-1]
    x = ew.astype(a, dt.float32 if d.bits < 32 else d)  # half types sum in float32, as MLX's kernels
    # the 2^k part: k butterflies (Sylvester's matrix is the Kronecker power of [[1, 1], [1, -1]])
    h = 1
    while h < p:
        y = sh.reshape(x, lead + (m, p // (2 * h), 2, h))
        lo, hi = y[..., 0, :], y[..., 1, :]
        x = sh.reshape(sh.stack([lo + hi, lo - hi], axis=-2), lead + (m, p))
        h *= 2
    if m > 1:  # Sloane's m x m matrix mixes the m blocks of 2^k
        x = matmul(array(_sloane(m), x.dtype), sh.reshape(x, lead + (m, p)))
    x = sh.reshape(x, a.shape) * array(scale, x.dtype)
    return ew.astype(x, d)


# ---- fp8 (e4m3) -----------------------------------------------------------------------------

def to_fp8(x) -> Array:
    """Real floats to fp8 e4m3 bytes (uint8), rounding to nearest even and saturating at
    ±448 (MLX's conversion):

        mr.to_fp8(mr.array([1.0, -2.0]))   # array([56, 192], dtype=uint8)
    """
    x = _arr(x)
    if x.dtype.kind != "f":
        raise ValueError(f"[to_fp8] Only real floating types are supported but x.dtype() == {x.dtype.name}."
                         f"{where_text()}")
    u32 = dt.uint32
    bits = view(ew.astype(x, dt.float32), u32)
    sign = ew.bitwise_and(bits, array(0x80000000, u32))
    bits = ew.bitwise_xor(bits, sign)
    # below 2^-6 (subnormal e4m3): adding 2^14 puts the rounded mantissa in the low bits
    denorm = array(141 << 23, u32)
    low = ew.subtract(view(ew.add(view(bits, dt.float32), view(denorm, dt.float32)), u32), denorm)
    # normal: rebias the exponent (127 -> 7), round to nearest even on bit 20, keep bits 20..27
    odd = ew.bitwise_and(ew.right_shift(bits, array(20, u32)), array(1, u32))
    high = ew.add(ew.add(bits, array((((7 - 127) << 23) + 0x7FFFF) % 2 ** 32, u32)), odd)
    high = ew.right_shift(high, array(20, u32))
    out = ew.where(ew.less(bits, array(121 << 23, u32)), low, high)
    out = ew.where(ew.greater_equal(bits, array(543 << 21, u32)), array(0x7E, u32), out)  # saturate (NaN too)
    out = ew.bitwise_or(out, ew.right_shift(sign, array(24, u32)))
    return ew.astype(ew.bitwise_and(out, array(0xFF, u32)), dt.uint8)


def from_fp8(x, dtype=dt.bfloat16) -> Array:
    """fp8 e4m3 bytes (uint8) to the real float `dtype` (default bfloat16, as MLX):

        mr.from_fp8(mr.array([56, 192], mr.uint8), mr.float32)   # [1.0, -2.0]
    """
    x = _arr(x)
    d = dt.to_dtype(dtype)
    if x.dtype is not dt.uint8:
        raise ValueError(f"[from_fp8] Input must have type uint8 but x.dtype() == {x.dtype.name}.{where_text()}")
    if d.kind != "f":
        raise ValueError(f"[from_fp8] Only real floating types are supported but dtype == {d.name}.{where_text()}")
    # e4m3 sits in float16's bits shifted by 7; the exponent bias (15 vs 7) is a factor 2^8
    u16 = ew.left_shift(ew.astype(ew.bitwise_and(x, array(127, dt.uint8)), dt.uint16), array(7, dt.uint16))
    mag = ew.multiply(ew.astype(view(u16, dt.float16), dt.float32), array(256.0, dt.float32))
    neg = ew.not_equal(ew.bitwise_and(x, array(128, dt.uint8)), array(0, dt.uint8))
    return ew.astype(ew.where(neg, ew.negative(mag), mag), d)
