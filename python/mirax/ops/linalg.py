"""Matrix products with numpy/MLX semantics: matmul (and `@`), inner, outer, tensordot.

    a @ b            mr.matmul(x, w)          mr.outer(u, v)       mr.tensordot(a, b, axes=1)

`matmul` promotes both operands, lifts 1-D operands to matrices (and drops the added
dim afterwards), and broadcasts the batch dims with explicit `broadcast_to`, so the
`mirax.matmul` primitive sees (..., M, K) x (..., K, N) with equal batch dims.
"""
from __future__ import annotations

from ..dialect import dtypes as dt
from ..dialect.core import MiraxError, broadcast_shapes, normalize_axis
from .. import shapeless as _shapeless
from ..array import Array, apply, array, where_text
from . import elementwise as ew
from .creation import arange
from .shape import broadcast_to, reshape, transpose

__all__ = ["matmul", "inner", "outer", "tensordot", "segmented_mm"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _err(msg):
    return MiraxError(f"{msg}{where_text()}")


def matmul(a, b) -> Array:
    """Matrix product with numpy's rules for 1-D operands and batch broadcasting."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        raise _err(f"matmul: operands must be at least 1-D, got shapes {a.shape} and {b.shape}")
    d = dt.promote(a.dtype, b.dtype)
    if d.kind == "b":
        raise _err(f"matmul: bool operands are not supported (shapes {a.shape} and {b.shape})")
    if d.kind == "c":  # four real products: (ar br - ai bi) + i (ar bi + ai br)
        ar, ai = ew.real(ew.astype(a, d)), ew.imag(ew.astype(a, d))
        br, bi = ew.real(ew.astype(b, d)), ew.imag(ew.astype(b, d))
        re = matmul(ar, br) - matmul(ai, bi)
        im = matmul(ar, bi) + matmul(ai, br)
        return ew.add(ew.astype(re, d), ew.multiply(ew.astype(im, d), array(1j, d)))
    a, b = ew.astype(a, d), ew.astype(b, d)
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    shapeless = _shapeless.active()  # sizes inferred (-1) and batch dims broadcast implicitly
    if a_vec:
        a = reshape(a, (1, -1 if shapeless else a.shape[0]))
    if b_vec:
        b = reshape(b, (-1 if shapeless else b.shape[0], 1))
    if a.shape[-1] != b.shape[-2]:
        raise _err(f"matmul: last dim of the first operand ({a.shape[-1]}) must equal the second-to-last "
                   f"dim of the second ({b.shape[-2]}); shapes {a.shape} and {b.shape}")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    except MiraxError as err:
        raise _err(err) from None
    if not shapeless and b.ndim == 2 and a.ndim > 2:
        # (..., M, K) x (K, N), a linear layer: one (prod(...) * M, K) x (K, N) product, not
        # K x N broadcast to every batch entry and a batched product (and, in the gradient,
        # a batched product summed over the batch)
        m, k = a.shape[-2:]
        rows = 1
        for d in a.shape[:-1]:
            rows *= d
        r = apply("matmul", [reshape(a, (rows, k)), b])
        return reshape(r, batch + (m,) + (() if b_vec else (b.shape[-1],)))
    bcast = _shapeless.broadcast if shapeless else broadcast_to
    a = bcast(a, batch + a.shape[-2:])
    b = bcast(b, batch + b.shape[-2:])
    r = apply("matmul", [a, b])
    if a_vec or b_vec:
        shape = batch + (() if a_vec else (a.shape[-2],)) + (() if b_vec else (b.shape[-1],))
        if shapeless and len(shape) == 1:
            shape = (-1,)
        r = reshape(r, shape)
    return r


def inner(a, b) -> Array:
    """Sum product over the last axes, as `mx.inner`."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return ew.multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise _err(f"inner: last dims differ: shapes {a.shape} and {b.shape}")
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def outer(a, b) -> Array:
    """Outer product of the flattened operands, as `mx.outer`."""
    a, b = _arr(a), _arr(b)
    return ew.multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2) -> Array:
    """Sum products over `axes` (an int: the last/first n; or two axis lists), as `mx.tensordot`."""
    a, b = _arr(a), _arr(b)
    if isinstance(axes, int):
        if axes < 0 or axes > a.ndim or axes > b.ndim:
            raise _err(f"tensordot: axes={axes} is invalid for shapes {a.shape} and {b.shape}")
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, int) else list(ax_b)
        try:
            ax_a = [normalize_axis(x, a.ndim, "tensordot") for x in ax_a]
            ax_b = [normalize_axis(x, b.ndim, "tensordot") for x in ax_b]
        except MiraxError as err:
            raise _err(err) from None
    if len(ax_a) != len(ax_b) or any(a.shape[i] != b.shape[j] for i, j in zip(ax_a, ax_b)):
        raise _err(f"tensordot: contracted dims differ: shapes {a.shape} and {b.shape}, axes {ax_a} and {ax_b}")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [j for j in range(b.ndim) if j not in ax_b]
    k = 1
    for i in ax_a:
        k *= a.shape[i]
    at = reshape(transpose(a, free_a + ax_a), (-1, k) if k else (_size(a, free_a), 0))
    bt = reshape(transpose(b, ax_b + free_b), (k, -1) if k else (0, _size(b, free_b)))
    r = matmul(at, bt)
    return reshape(r, tuple(a.shape[i] for i in free_a) + tuple(b.shape[j] for j in free_b))


def segmented_mm(a, b, /, segments) -> Array:
    """a @ b restricted to segments of the inner dim, as `mx.segmented_mm`: for `segments`
    of shape (..., 2) holding [start, end) offsets into K, the result (..., M, N) holds
    a[:, start:end] @ b[start:end, :] for each segment (zeros where end <= start).

    >>> mr.segmented_mm(mr.ones((2, 4)), mr.ones((4, 3)), mr.array([[0, 1], [1, 4]]))[:, 0, 0].tolist()
    [1.0, 3.0]"""
    a, b, seg = _arr(a), _arr(b), _arr(segments)
    if a.ndim != 2 or b.ndim != 2:
        raise _err(f"segmented_mm: a and b must be matrices (batched matmul is not supported), got shapes "
                   f"{a.shape} and {b.shape}")
    if seg.ndim < 1 or seg.shape[-1] != 2:
        raise _err(f"segmented_mm: segments must have shape (..., 2), got {seg.shape}")
    d = dt.promote(a.dtype, b.dtype)
    if d.kind != "f":
        raise _err(f"segmented_mm: only real floating point operands are supported, got {a.dtype.name} and "
                   f"{b.dtype.name} (promoted to {d.name})")
    if seg.dtype.kind not in "iu":
        raise _err(f"segmented_mm: segments must be integers, got {seg.dtype.name}")
    if a.shape[1] != b.shape[0]:
        raise _err(f"segmented_mm: inner dims differ: shapes {a.shape} and {b.shape}")
    k = arange(a.shape[1], dtype=dt.int32)
    seg = ew.astype(seg, dt.int32)
    # a 0/1 mask over K per segment, applied to whichever operand is smaller
    inside = ew.logical_and(ew.greater_equal(k, seg[..., 0:1]), ew.less(k, seg[..., 1:2]))
    mask = ew.astype(inside, d)
    a, b = ew.astype(a, d), ew.astype(b, d)
    if a.shape[0] <= b.shape[1]:
        return matmul(ew.multiply(a, reshape(mask, mask.shape[:-1] + (1, a.shape[1]))), b)
    return matmul(a, ew.multiply(b, reshape(mask, mask.shape[:-1] + (b.shape[0], 1))))


def _size(a, dims):
    n = 1
    for i in dims:
        n *= a.shape[i]
    return n


Array.__matmul__ = matmul
Array.__rmatmul__ = lambda self, other: matmul(other, self)
