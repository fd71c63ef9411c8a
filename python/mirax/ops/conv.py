"""Convolutions with MLX's signatures and channels-last layout.

    mr.conv1d(x, w, stride=2, padding=1)            # x (N, L, C_in), w (C_out, K, C_in)
    mr.conv2d(x, w, padding=(1, 2), groups=2)       # x (N, H, W, C_in), w (C_out, KH, KW, C_in / 2)
    mr.conv_general(x, w, padding=([1, 0], [0, 2]), input_dilation=2, flip=True)
    mr.conv_transpose2d(y, w, stride=2, padding=1)  # w (C_out, KH, KW, C_in), as MLX

All are the one `mirax.conv` primitive (dialect/conv.py); the operands are promoted to
a common dtype first.
"""
from __future__ import annotations

from ..dialect import dtypes as dt
from ..dialect.core import MiraxError
from ..array import Array, apply, array, where_text
from . import elementwise as ew

__all__ = ["conv_general", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "convolve"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _err(msg):
    return MiraxError(f"{msg}{where_text()}")


def _per_dim(v, d, name, op):
    """An int or a sequence of d ints, as a tuple of d ints."""
    if isinstance(v, int):
        return (int(v),) * d
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise _err(f"{op}: {name} must be an int or {d} ints, got {v!r}") from None
    if len(t) == 1:
        t = t * d
    if len(t) != d:
        raise _err(f"{op}: {name} {v!r} needs {d} entries, one per spatial dim")
    return t


def _operands(input, weight, op):
    x, w = _arr(input), _arr(weight)
    if x.ndim < 3 or x.ndim != w.ndim:
        raise _err(f"{op}: input (N, spatial..., C_in) and weight (C_out, spatial..., C_in / groups) need the "
                   f"same rank >= 3, got shapes {x.shape} and {w.shape}")
    d = dt.promote(x.dtype, w.dtype)
    if d.kind in "bc":
        raise _err(f"{op}: {d.name} operands are not supported (shapes {x.shape} and {w.shape})")
    return ew.astype(x, d), ew.astype(w, d)


def _conv(x, w, stride, lo, hi, kernel_dilation, input_dilation, groups, flip, op):
    if not isinstance(groups, int) or groups < 1:
        raise _err(f"{op}: groups must be a positive int, got {groups!r}")
    # channels, groups and strides are checked by the primitive's shape rule (dialect/conv.py)
    return apply("conv", [x, w], stride=stride, padding_lo=lo, padding_hi=hi, kernel_dilation=kernel_dilation,
                 input_dilation=input_dilation, groups=groups, flip=bool(flip))


def conv_general(input, weight, stride=1, padding=0, kernel_dilation=1, input_dilation=1, groups=1,
                 flip=False) -> Array:
    """General convolution over any number of spatial dims, as `mx.conv_general`.

    `padding` is an int, one int per spatial dim (both sides), or a pair (low, high) of
    such; `flip` flips the kernel (a convolution instead of a cross-correlation)."""
    op = "conv_general"
    x, w = _operands(input, weight, op)
    d = x.ndim - 2
    if isinstance(padding, tuple) and len(padding) == 2 and not isinstance(padding[0], int):
        lo, hi = _per_dim(padding[0], d, "padding", op), _per_dim(padding[1], d, "padding", op)
    else:
        lo = hi = _per_dim(padding, d, "padding", op)
    return _conv(x, w, _per_dim(stride, d, "stride", op), lo, hi,
                 _per_dim(kernel_dilation, d, "kernel_dilation", op),
                 _per_dim(input_dilation, d, "input_dilation", op), groups, flip, op)


def _convnd(nd, op, input, weight, stride, padding, dilation, groups):
    x, w = _operands(input, weight, op)
    if x.ndim != nd + 2:
        raise _err(f"{op}: expects a {nd + 2}-D input (N, {'spatial, ' * nd}C_in) and weight, got shapes "
                   f"{x.shape} and {w.shape}")
    p = _per_dim(padding, nd, "padding", op)
    return _conv(x, w, _per_dim(stride, nd, "stride", op), p, p, _per_dim(dilation, nd, "dilation", op),
                 (1,) * nd, groups, False, op)


def conv1d(input, weight, stride=1, padding=0, dilation=1, groups=1) -> Array:
    """1-D convolution (cross-correlation): input (N, L, C_in), weight (C_out, K, C_in / groups).
    As MLX's (`conv_general` with one stride, padding and dilation), an input of more
    spatial dims is convolved over each of them with the same ones."""
    x, w = _operands(input, weight, "conv1d")
    if x.ndim > 3 and isinstance(stride, int) and isinstance(padding, int) and isinstance(dilation, int):
        return conv_general(x, w, stride, padding, dilation, 1, groups)
    return _convnd(1, "conv1d", x, w, stride, padding, dilation, groups)


def conv2d(input, weight, stride=1, padding=0, dilation=1, groups=1) -> Array:
    """2-D convolution: input (N, H, W, C_in), weight (C_out, KH, KW, C_in / groups)."""
    return _convnd(2, "conv2d", input, weight, stride, padding, dilation, groups)


def conv3d(input, weight, stride=1, padding=0, dilation=1, groups=1) -> Array:
    """3-D convolution: input (N, D, H, W, C_in), weight (C_out, KD, KH, KW, C_in / groups)."""
    return _convnd(3, "conv3d", input, weight, stride, padding, dilation, groups)


def _conv_transpose(nd, op, input, weight, stride, padding, dilation, output_padding, groups):
    """MLX's transposed convolution: a flipped convolution of the input dilated by `stride`,
    padded so the result has (L - 1) * stride - 2 * padding + dilated kernel + output_padding."""
    x, w = _operands(input, weight, op)
    if x.ndim != nd + 2:
        raise _err(f"{op}: expects a {nd + 2}-D input and weight, got shapes {x.shape} and {w.shape}")
    s = _per_dim(stride, nd, "stride", op)
    p = _per_dim(padding, nd, "padding", op)
    k = _per_dim(dilation, nd, "dilation", op)
    op_ = _per_dim(output_padding, nd, "output_padding", op)
    kd = [(w.shape[1 + i] - 1) * k[i] + 1 for i in range(nd)]
    lo = tuple(kd[i] - 1 - p[i] for i in range(nd))
    hi = tuple(kd[i] - 1 - p[i] + op_[i] for i in range(nd))
    return _conv(x, w, (1,) * nd, lo, hi, k, s, groups, True, op)


def conv_transpose1d(input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1) -> Array:
    """1-D transposed convolution: input (N, L, C_in), weight (C_out, K, C_in / groups), as MLX."""
    return _conv_transpose(1, "conv_transpose1d", input, weight, stride, padding, dilation, output_padding, groups)


def conv_transpose2d(input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1) -> Array:
    """2-D transposed convolution: input (N, H, W, C_in), weight (C_out, KH, KW, C_in / groups)."""
    return _conv_transpose(2, "conv_transpose2d", input, weight, stride, padding, dilation, output_padding, groups)


def conv_transpose3d(input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1) -> Array:
    """3-D transposed convolution: input (N, D, H, W, C_in), weight (C_out, KD, KH, KW, C_in / groups)."""
    return _conv_transpose(3, "conv_transpose3d", input, weight, stride, padding, dilation, output_padding, groups)


def convolve(a, v, /, mode="full") -> Array:
    """Discrete linear convolution of two 1-D arrays, as `mx.convolve` (and numpy):
    mode "full" (length n + m - 1), "same" (max(n, m), centred as numpy) or "valid".

    >>> mr.convolve(mr.array([1.0, 2.0, 3.0]), mr.array([0.0, 1.0, 0.5])).tolist()
    [0.0, 1.0, 2.5, 4.0, 1.5]"""
    a, v = _arr(a), _arr(v)
    if a.ndim != 1 or v.ndim != 1:
        raise _err(f"convolve: inputs must be 1-D, got shapes {a.shape} and {v.shape}")
    if a.size == 0 or v.size == 0:
        raise _err(f"convolve: inputs cannot be empty, got shapes {a.shape} and {v.shape}")
    if mode not in ("full", "same", "valid"):
        raise _err(f"convolve: invalid mode {mode!r}, expected 'full', 'same' or 'valid'")
    # the longer one is the signal, so "valid" is never empty; convolution is symmetric
    x, w = (v, a) if a.size < v.size else (a, v)
    m = w.size
    lo = {"full": m - 1, "same": m // 2, "valid": 0}[mode]
    hi = {"full": m - 1, "same": (m - 1) // 2, "valid": 0}[mode]
    x, w = _operands(x.reshape(1, -1, 1), w.reshape(1, -1, 1), "convolve")
    out = _conv(x, w, (1,), (lo,), (hi,), (1,), (1,), 1, True, "convolve")
    return out.reshape(-1)
