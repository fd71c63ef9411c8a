"""MLX's quantization (affine, and the floating-point modes mxfp4, mxfp8 and nvfp4 below),
written with other mirax ops (so eager, compile, grad, vmap
and the GPU all work from the ops it is made of). The packed format is MLX's: each row
of `w` is split into groups of `group_size` elements that share a scale and a bias, and
every element becomes a `bits`-bit integer laid end to end, lowest bits first, in
little-endian uint32 words (a 3-, 5- or 6-bit element may straddle two words). Called
eagerly, quantize and dequantize each run as one compiled kernel.

    w_q, scales, biases = mr.quantize(w, group_size=64, bits=4)   # w: (N, K) float
    w_hat = mr.dequantize(w_q, scales, biases, group_size=64, bits=4)
    y = mr.quantized_matmul(x, w_q, scales, biases)               # x @ w_hat.T
    w_q, scales = mr.quantize(w, mode="mxfp8")                    # no biases in the fp modes
    y = mr.qqmm(x, w)                                             # x and w both nvfp4
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..array import Array, array, where_text
from ..dialect import dtypes as dt
from ..dialect.core import MiraxError
from . import elementwise as ew
from . import reduction as red
from . import shape as sh
from .composite import gather_mm
from .indexing import take
from .linalg import matmul

__all__ = ["quantize", "dequantize", "quantized_matmul", "gather_qmm"]

_MODES = ("affine", "mxfp4", "mxfp8", "nvfp4")


def _arr(x):
    return x if isinstance(x, Array) else array(x)


def _err(op, msg):
    return MiraxError(f"[{op}] {msg}{where_text()}")


# each mode's default (group_size, bits); the floating-point modes allow only these
_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}


def _params(op, mode, group_size, bits):
    """Check the mode and fill MLX's per-mode defaults of group_size and bits."""
    if mode not in _MODES:
        raise _err(op, f"Invalid quantization mode '{mode}'; valid modes are {', '.join(_MODES)}.")
    gs, b = _DEFAULTS[mode]
    return (gs if group_size is None else int(group_size)), (b if bits is None else int(bits))


def _check_fp_params(op, mode, group_size, bits):
    gs, b = _DEFAULTS[mode]
    if group_size != gs:
        raise _err(op, f"{mode} quantization requires group size {gs} but got {group_size}.")
    if bits != b:
        raise _err(op, f"{mode} quantization requires bits to be {b} but got {bits}.")


def _check_global_scale(op, mode, global_scale):
    if global_scale is None:
        return None
    if mode != "nvfp4":
        raise _err(op, "Global scale is only supported for 'nvfp4' quantization mode.")
    global_scale = _arr(global_scale)
    if global_scale.size != 1:
        raise _err(op, f"Global scale must be a scalar but got shape {global_scale.shape}.")
    if global_scale.dtype is not dt.float32:
        raise _err(op, f"Global scale must have dtype float32 but got {global_scale.dtype.name}.")
    # (1, 1), not (): a 0-d operand trips mirax-fuse-reductions (IndexError in _is_row_op)
    return sh.reshape(global_scale, (1, 1))


def _layout(bits):
    """How `bits`-bit elements sit in uint32 words: the pattern repeats every
    lcm(bits, 32) bits, a pack of `per_pack` elements in `words` words. For element e of a
    pack: the word its low bits are in, the shift inside that word, and whether its high
    bits spill into the next word."""
    per_pack = math.lcm(bits, 32) // bits
    words = per_pack * bits // 32
    offset = np.arange(per_pack) * bits
    word, shift = offset // 32, offset % 32
    spills = shift + bits > 32
    return per_pack, words, word, shift, spills


def _fused(fn, *params):
    """`fn` with its leading static `params` bound, compiled once per params: eagerly a
    call is one fused kernel instead of one per op; inside a trace it is inlined."""
    key = (fn, params)
    f = _FUSED.get(key)
    if f is None:
        from ..compile import compile
        f = _FUSED[key] = compile(functools.partial(fn, *params))
    return f


_FUSED: dict = {}


def _u32(values):
    return array(np.asarray(values, dtype=np.uint32))


def _pack(q, bits):
    """uint32 values below 2**bits, (..., N) -> packed words (..., N * bits / 32)."""
    per_pack, words, word, shift, _ = _layout(bits)
    n = q.shape[-1]
    q = sh.reshape(q, q.shape[:-1] + (n // per_pack, per_pack, 1))
    # element e lands in word k shifted by e*bits - 32k: left where >= 0 (bits past 32
    # fall off), right where < 0 (its spill into the next word); 0 where it is absent
    rel = (np.arange(per_pack) * bits)[:, None] - 32 * np.arange(words)[None, :]
    present = (rel > -bits) & (rel < 32)
    left = np.where(present & (rel >= 0), rel, 0)
    right = np.where(present & (rel < 0), -rel, 0)
    parts = ew.left_shift(q, _u32(left))
    if words > 1:
        parts = ew.right_shift(parts, _u32(right)) * _u32(present)
    out = red.sum(parts, axis=-2)  # the parts of one word have disjoint bits: sum is or
    return sh.reshape(out, out.shape[:-2] + (n * bits // 32,))


def _unpack(w, bits):
    """Packed words (..., W) -> uint32 values (..., W * 32 / bits)."""
    per_pack, words, word, shift, spills = _layout(bits)
    n_words = w.shape[-1]
    if words == 1:
        low = ew.right_shift(sh.reshape(w, w.shape + (1,)), _u32(shift))
    else:
        w = sh.reshape(w, w.shape[:-1] + (n_words // words, words))
        low = ew.right_shift(take(w, array(word.astype(np.int32)), axis=-1), _u32(shift))
        nxt = np.minimum(word + 1, words - 1).astype(np.int32)
        high = ew.left_shift(take(w, array(nxt), axis=-1), _u32(np.where(spills, 32 - shift, 0)))
        low = ew.bitwise_or(low, high * _u32(spills))
    vals = ew.bitwise_and(low, _u32((1 << bits) - 1))
    return sh.reshape(vals, vals.shape[:-2] + (n_words * 32 // bits,))


def quantize(w, group_size=None, bits=None, mode="affine", *, global_scale=None):
    """Quantize `w` (at least 2-D, float) in groups of `group_size` along its last axis,
    as `mx.quantize`: returns (w_q uint32, scales, biases), scales and biases in w's dtype.

        w_q, scales, biases = mr.quantize(mr.random.normal((8, 64)), group_size=32, bits=4)
        w_q.shape, scales.shape    # (8, 8), (8, 2)
    """
    group_size, bits = _params("quantize", mode, group_size, bits)
    w = _arr(w)
    if w.dtype.kind != "f":
        raise _err("quantize", f"Only real floating types can be quantized but w has type {w.dtype.name}.")
    if w.ndim < 2:
        raise _err("quantize", f"The matrix to be quantized must have at least 2 dimensions but it has only {w.ndim}.")
    if w.shape[-1] % group_size:
        raise _err("quantize", f"The last dimension of the matrix needs to be divisible by the quantization "
                               f"group size {group_size}. However the provided matrix has shape {w.shape}.")
    global_scale = _check_global_scale("quantize", mode, global_scale)
    if mode != "affine":
        _check_fp_params("quantize", mode, group_size, bits)
        args = (w,) if global_scale is None else (w, global_scale)
        return tuple(_fused(_fp_quantize, group_size, bits, global_scale is not None)(*args))
    if group_size not in (32, 64, 128):
        raise _err("quantize", f"The requested group size {group_size} is not supported. "
                               "The supported group sizes are 32, 64, and 128.")
    if bits not in (2, 3, 4, 5, 6, 8):
        raise _err("quantize", f"The requested number of bits {bits} is not supported. "
                               "The supported bits are 2, 3, 4, 5, 6 and 8.")
    return tuple(_fused(_affine_quantize, group_size, bits)(w))


def _affine_quantize(group_size, bits, w):
    n_bins = float((1 << bits) - 1)
    groups = w.shape[:-1] + (w.shape[-1] // group_size,)
    wg = ew.astype(sh.reshape(w, groups + (group_size,)), dt.float32)
    w_max = red.max(wg, axis=-1, keepdims=True)
    w_min = red.min(wg, axis=-1, keepdims=True)
    # MLX's choice: the edge of larger magnitude is quantized exactly (to 0 or n_bins),
    # the scale nudged so that it is; a group with no spread keeps the floor scale eps
    mask = ew.abs(w_min) > ew.abs(w_max)
    scales = ew.maximum((w_max - w_min) / n_bins, 1e-7)
    scales = ew.where(mask, scales, -scales)
    edge = ew.where(mask, w_min, w_max)
    q0 = ew.round(edge / scales)
    scales = ew.where(q0 != 0, edge / q0, scales)
    biases = ew.where(q0 == 0, 0.0, edge)
    q = ew.clip(ew.round((wg - biases) / scales), 0.0, n_bins)
    w_q = _pack(sh.reshape(ew.astype(q, dt.uint32), w.shape), bits)
    scales = ew.astype(sh.reshape(scales, groups), w.dtype)
    biases = ew.astype(sh.reshape(biases, groups), w.dtype)
    return w_q, scales, biases


def _check_packed(op, w, scales, biases, group_size, bits):
    """MLX's checks of a packed matrix against its scales and biases; returns the
    unpacked width of w's rows."""
    if biases is None:
        raise _err(op, "Biases must be provided for affine quantization.")
    if w.dtype is not dt.uint32:
        raise _err(op, f"The weight matrix should be uint32 but received {w.dtype.name}.")
    if bits <= 0 or bits > 32:
        raise _err(op, f"Invalid value for bits: {bits}")
    if group_size <= 0:
        raise _err(op, f"Invalid value for group_size: {group_size}")
    if w.ndim < 2:
        raise _err(op, f"The quantized matrix must have at least 2 dimensions but it has only {w.ndim}.")
    if scales.shape != biases.shape:
        raise _err(op, f"Scales and biases should have the same shape. Received scales with shape "
                       f"{scales.shape} and biases with {biases.shape}")
    if scales.shape[:-1] != w.shape[:-1]:
        raise _err(op, f"Weight and scales should have the same batch shape. Received weight with shape "
                       f"{w.shape}, scales with {scales.shape}.")
    width = scales.shape[-1] * group_size
    if width * bits != w.shape[-1] * 32:
        raise _err(op, f"The shapes of the weight and scales are incompatible based on bits and group_size. "
                       f"w.shape == {w.shape} and scales.shape == {scales.shape} with "
                       f"group_size={group_size} and bits={bits}")
    d = dt.promote(scales.dtype, biases.dtype)
    if d.kind != "f":
        raise _err(op, f"Only real floating types are supported but scales.dtype == {scales.dtype.name} "
                       f"and biases.dtype == {biases.dtype.name}.")
    return width


def _dequantize(group_size, bits, dtype, w, scales, biases):
    """w_hat = scale * q + bias per group, each op rounded to `dtype` as MLX does."""
    groups = scales.shape + (group_size,)
    # 16-bit floats: in float32, rounded after each op (exactly a 16-bit multiply and add);
    # left in bfloat16, a fused kernel would keep the product unrounded in registers
    work = dt.float32 if dtype.bits == 16 else dtype
    q = sh.reshape(ew.astype(_unpack(w, bits), work), groups)
    s = sh.expand_dims(ew.astype(scales, work), -1)
    b = sh.expand_dims(ew.astype(biases, work), -1)
    out = q * s
    if work is not dtype:
        out = ew.astype(ew.astype(out, dtype), work)
    out = ew.astype(out + b, dtype)
    return sh.reshape(out, w.shape[:-1] + (groups[-2] * group_size,))


def dequantize(w, scales, biases=None, group_size=None, bits=None, mode="affine", global_scale=None,
               dtype=None):
    """Undo `quantize`: scale * q + bias for every packed element, as `mx.dequantize`.
    The result has the dtype of scales and biases unless `dtype` is given.

        w_hat = mr.dequantize(*mr.quantize(w, 64, 4), group_size=64, bits=4)
    """
    group_size, bits = _params("dequantize", mode, group_size, bits)
    w, scales = _arr(w), _arr(scales)
    biases = None if biases is None else _arr(biases)
    if dtype is not None and dt.to_dtype(dtype).kind != "f":
        raise _err("dequantize", f"Only real floating types are supported but output dtype == "
                                 f"{dt.to_dtype(dtype).name}.")
    if mode != "affine":
        return _fp_dequantize_checked("dequantize", w, scales, biases, group_size, bits, mode, global_scale,
                                      dt.bfloat16 if dtype is None else dt.to_dtype(dtype))
    if global_scale is not None:
        raise _err("dequantize", "Global scale is only supported for 'nvfp4' quantization mode.")
    _check_packed("dequantize", w, scales, biases, group_size, bits)
    out = _fused(_dequantize, group_size, bits, dt.promote(scales.dtype, biases.dtype))(w, scales, biases)
    return out if dtype is None else ew.astype(out, dt.to_dtype(dtype))


def _prepare_qmm(op, x, w, scales, biases, transpose, group_size, bits, mode):
    group_size, bits = _params(op, mode, group_size, bits)
    x, w, scales = _arr(x), _arr(w), _arr(scales)
    biases = None if biases is None else _arr(biases)
    if mode != "affine":
        if x.dtype.kind != "f":
            raise _err(op, f"Only real floating types are supported but x.dtype == {x.dtype.name}.")
        w_hat = _fp_dequantize_checked(op, w, scales, biases, group_size, bits, mode, None, x.dtype)
        inner, outer = (w_hat.shape[-1], w_hat.shape[-2]) if transpose else w_hat.shape[-2:]
        if x.ndim == 0 or x.shape[-1] != inner:
            raise _err(op, f"Last dimension of first input with shape (..., {x.shape[-1] if x.ndim else ''}) "
                           f"does not match the expanded quantized matrix ({inner}, {outer}) computed from shape "
                           f"{w.shape} with group_size={group_size}, bits={bits} and transpose={transpose}")
        return x, (sh.swapaxes(w_hat, -1, -2) if transpose else w_hat)
    width = _check_packed(op, w, scales, biases, group_size, bits)
    inner = width if transpose else w.shape[-2]
    outer = w.shape[-2] if transpose else width
    if x.ndim == 0 or x.shape[-1] != inner:
        raise _err(op, f"Last dimension of first input with shape (..., {x.shape[-1] if x.ndim else ''}) "
                       f"does not match the expanded quantized matrix ({inner}, {outer}) computed from shape "
                       f"{w.shape} with group_size={group_size}, bits={bits} and transpose={transpose}")
    d = dt.promote(x.dtype, dt.promote(scales.dtype, biases.dtype))  # floating: the scales are
    w_hat = _fused(_dequantize, group_size, bits, d)(w, scales, biases)
    return ew.astype(x, d), (sh.swapaxes(w_hat, -1, -2) if transpose else w_hat)


def quantized_matmul(x, w, scales, biases=None, transpose=True, group_size=None, bits=None, mode="affine"):
    """x @ w_hat.T (or x @ w_hat with transpose=False), w_hat the dequantized `w`, as
    `mx.quantized_matmul`; the result has x's dtype promoted with the scales'.
    Gradients flow to x, scales and biases; the packed w has none.

        y = mr.quantized_matmul(x, *mr.quantize(w), transpose=True)   # ~ x @ w.T
    """
    x, w_hat = _prepare_qmm("quantized_matmul", x, w, scales, biases, transpose, group_size, bits, mode)
    return matmul(x, w_hat)


def gather_qmm(x, w, scales, biases=None, lhs_indices=None, rhs_indices=None, transpose=True,
               group_size=None, bits=None, mode="affine", *, sorted_indices=False):
    """`gather_mm` with a quantized right operand, as `mx.gather_qmm`: out[i] =
    X[lhs_indices[i]] @ W_hat[rhs_indices[i]](.T), the indices flat over the batch dims
    of x and of w. Without indices it is `quantized_matmul`. `sorted_indices` is a hint
    MLX's kernels use; the result does not depend on it.

        y = mr.gather_qmm(x, w_q, s, b, rhs_indices=mr.array([2, 0]))  # experts 2 and 0
    """
    if lhs_indices is None and rhs_indices is None:
        return quantized_matmul(x, w, scales, biases, transpose, group_size, bits, mode)
    x, w_hat = _prepare_qmm("gather_qmm", x, w, scales, biases, transpose, group_size, bits, mode)
    for name, idx in (("lhs_indices", lhs_indices), ("rhs_indices", rhs_indices)):
        if idx is not None and _arr(idx).dtype.kind not in "iu":
            raise _err("gather_qmm", f"{name} must be an integer array, got {_arr(idx).dtype.name}.")
    return gather_mm(x, w_hat, lhs_indices, rhs_indices, sorted_indices=sorted_indices)


# ---- the floating-point modes: mxfp4, mxfp8 (e8m0 scales) and nvfp4 (e4m3 scales) -------------
# MLX's reference formats: mxfp4 and nvfp4 store each element as an fp4 e2m1 nibble (the
# 16 values of _FP4, eight to a uint32 word, lowest first), mxfp8 as an fp8 e4m3 byte;
# a group's scale is a power of two stored as its biased exponent (e8m0) for mx*, an e4m3
# byte for nvfp4 (times 448 * 6 / global_scale when a global scale is given).

_FP4 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _fp_quantize(group_size, bits, has_global, w, global_scale=None):
    from .bits import to_fp8, from_fp8, view
    shape = w.shape
    wq = sh.reshape(w, (-1, group_size))
    scales = red.max(ew.abs(wq), axis=-1, keepdims=True) / ew.astype(array(6.0 if bits == 4 else 448.0), w.dtype)
    if group_size == 16:  # nvfp4: e4m3 scales
        encode = (array(np.float32(448.0 * 6.0)) / global_scale) if has_global else array(np.float32(1.0))
        scales = to_fp8(scales * encode)
        wq = wq / from_fp8(scales, w.dtype) * encode
    else:  # e8m0: the exponent, rounded up (the group's largest element fits)
        exponent = ew.where(scales == 0, 0, _ceil_log2(scales))
        wq = wq / ew.power(ew.astype(array(2.0), w.dtype), ew.astype(exponent, w.dtype))
        scales = ew.astype(exponent + 127, dt.uint8)
    if bits == 4:
        lut = ew.astype(array(np.array(_FP4, np.float32)), w.dtype)
        code = ew.astype(red.argmin(ew.abs(sh.expand_dims(wq, -1) - lut), axis=-1), dt.uint32)  # nearest, first on ties
        code = sh.reshape(code, (-1, 8))
        wq = red.sum(ew.left_shift(code, _u32(np.arange(0, 32, 4))), axis=-1)
    else:
        wq = view(to_fp8(wq), dt.uint32)
    return sh.reshape(wq, shape[:-1] + (-1,)), sh.reshape(scales, shape[:-1] + (-1,))


def _ceil_log2(x):
    """ceil(log2(x)) of positive floats, exactly (int32), read from the float32 bits: the
    exponent, plus one unless the mantissa is 0 (log2's polynomial is off by ulps at
    powers of two, which ceil would turn into a whole step)."""
    from .bits import view
    x = ew.astype(x, dt.float32)
    tiny = x < np.float32(2.0 ** -126)   # subnormal: scaled into the normal range first
    x = ew.where(tiny, x * np.float32(2.0 ** 64), x)
    bits = view(x, dt.uint32)
    exponent = ew.astype(ew.right_shift(bits, _u32(23)), dt.int32) - 127
    inexact = ew.astype(ew.bitwise_and(bits, _u32(0x7FFFFF)) != 0, dt.int32)
    return exponent + inexact - ew.where(tiny, 64, 0)


def _fp_dequantize(group_size, bits, dtype, has_global, w, scales, global_scale=None):
    from .bits import from_fp8, view
    shape = w.shape[:-1] + (-1,)
    if bits == 4:
        byte = view(w, dt.uint8)
        lo = ew.bitwise_and(byte, array(np.uint8(0x0F)))
        hi = ew.right_shift(byte, array(np.uint8(4)))
        code = sh.reshape(sh.stack([lo, hi], axis=-1), byte.shape[:-1] + (-1,))
        out = take(ew.astype(array(np.array(_FP4, np.float32)), dtype), ew.astype(code, dt.int32))
    else:
        out = from_fp8(view(w, dt.uint8), dtype)
    out = sh.reshape(out, (-1, group_size))
    scales = sh.reshape(scales, (-1, 1))
    if group_size == 16:
        scale = from_fp8(scales, dtype)
        if has_global:
            scale = scale * (ew.astype(global_scale, dtype) / ew.astype(array(np.float32(448.0 * 6.0)), dtype))
    else:
        scale = ew.power(ew.astype(array(2.0), dtype), ew.astype(scales, dtype) - ew.astype(array(127.0), dtype))
    return sh.reshape(out * scale, shape)


def _fp_dequantize_checked(op, w, scales, biases, group_size, bits, mode, global_scale, dtype):
    """MLX's checks of a floating-point-mode packed matrix; its values in `dtype`."""
    if scales.dtype is not dt.uint8:
        raise _err(op, f"Scale type must be uint8 but received type {scales.dtype.name}.")
    if biases is not None:
        raise _err(op, f"Biases must be null for quantization mode '{mode}'.")
    if w.dtype is not dt.uint32:
        raise _err(op, "The matrix should be given as a uint32")
    if w.ndim < 2:
        raise _err(op, f"The matrix to be dequantized must have at least 2 dimension but it has only {w.ndim}.")
    global_scale = _check_global_scale(op, mode, global_scale)
    _check_fp_params(op, mode, group_size, bits)
    if w.ndim != scales.ndim or w.shape[:-1] != scales.shape[:-1] or \
            w.shape[-1] * 32 // bits != scales.shape[-1] * group_size:
        raise _err(op, f"Shape of scales does not match the matrix given the quantization parameters. Provided "
                       f"matrix of shape {w.shape} and scales of shape {scales.shape}.")
    args = (w, scales) if global_scale is None else (w, scales, global_scale)
    return _fused(_fp_dequantize, group_size, bits, dt.to_dtype(dtype), global_scale is not None)(*args)


# ---- quantized x quantized: qqmm, gather_qqmm --------------------------------------------------

def _check_qq(op, x, w, scales, mode, global_scale_x, global_scale_w):
    """MLX's checks of qqmm's operands (both are floating, or w is packed with scales)."""
    if mode not in _MODES:
        raise _err(op, f"Invalid quantization mode '{mode}'.")
    if w.dtype is dt.uint32:
        if scales is None:
            raise _err(op, "Scales must be provided if second argument is quantized.")
    elif w.dtype.kind != "f" or w.dtype is dt.float64:
        raise _err(op, f"Only real floating types except float64 are supported but second argument dtype == "
                       f"{w.dtype.name}.")
    if x.dtype.kind != "f" or x.dtype is dt.float64:
        raise _err(op, f"Only real floating types except float64 are supported but first argument dtype == "
                       f"{x.dtype.name}.")
    for gs in (global_scale_x, global_scale_w):
        if gs is not None and mode != "nvfp4":
            raise _err(op, "Global scale is only supported for 'nvfp4' quantization mode.")
    if mode == "nvfp4" and (global_scale_x is None) != (global_scale_w is None):
        raise _err(op, "For nvfp4 mode, either both global_scale_x and global_scale_w must be provided, "
                       "or neither.")
    if w.dtype is not dt.uint32 and (x.ndim == 0 or x.shape[-1] != w.shape[-1]):
        raise _err(op, f"Last dimension of first input with shape {x.shape} must match last dimension of "
                       f"second input with shape {w.shape}.")


def _round_trip(a, scales, group_size, bits, mode, global_scale, dtype):
    """`a` as its quantized form reads back: dequantize(quantize(a)), or dequantize(a,
    scales) when `a` is already packed."""
    if a.dtype is dt.uint32:
        biases = None
    else:
        a, scales, *rest = quantize(a, group_size, bits, mode, global_scale=global_scale)
        biases = rest[0] if rest else None
    return dequantize(a, scales, biases, group_size, bits, mode, global_scale=global_scale, dtype=dtype)


def qqmm(x, w, scales=None, group_size=None, bits=None, mode="nvfp4", global_scale_x=None, global_scale_w=None):
    """x @ w.T with both operands quantized (`mx.qqmm`): x is quantized on the fly, and so
    is w unless it comes packed (uint32) with its `scales`; each is read back from its
    quantized form and the product is taken in x's dtype. x may be 1-D or batched; w is 2-D.

        y = mr.qqmm(x, w, mode="affine", group_size=32, bits=8)   # ~ x @ w.T

    The modes are `quantize`'s, so those mirax cannot quantize yet raise its error."""
    x, w = _arr(x), _arr(w)
    scales = None if scales is None else _arr(scales)
    gx = None if global_scale_x is None else _arr(global_scale_x)
    gw = None if global_scale_w is None else _arr(global_scale_w)
    if x.ndim > 2 and w.ndim == 2:
        lead, x = x.shape[:-1], sh.reshape(x, (-1, x.shape[-1]))
    else:
        lead, x = (None, sh.reshape(x, (1, -1))) if x.ndim == 1 else (x.shape[:-1], x)
    if x.ndim > 2 or w.ndim > 2:
        raise _err("qqmm", f"Only 2D inputs are supported but x.ndim == {x.ndim} and w.ndim == {w.ndim}.")
    _check_qq("qqmm", x, w, scales, mode, gx, gw)
    group_size, bits = _params("qqmm", mode, group_size, bits)
    out = _qq_product(group_size, bits, mode, x, w, scales, gx, gw)
    return sh.reshape(out, (out.shape[-1],) if lead is None else lead + (out.shape[-1],))


def _qq_product(group_size, bits, mode, x, w, scales, gx, gw, lhs_indices=None, rhs_indices=None):
    """x_hat @ w_hat.T (gathered when indices are given), as one compiled function."""
    optional = [a for a in (scales, gx, gw, lhs_indices, rhs_indices) if a is not None]
    present = tuple(a is not None for a in (scales, gx, gw, lhs_indices, rhs_indices))
    return _fused(_qq_core, group_size, bits, mode, present)(x, w, *optional)


def _qq_core(group_size, bits, mode, present, x, w, *optional):
    it = iter(optional)
    scales, gx, gw, lhs, rhs = (next(it) if p else None for p in present)
    x_hat = _round_trip(x, None, group_size, bits, mode, gx, x.dtype)
    w_hat = sh.swapaxes(_round_trip(w, scales, group_size, bits, mode, gw, x.dtype), -1, -2)
    return matmul(x_hat, w_hat) if lhs is None else gather_mm(x_hat, w_hat, lhs, rhs)


def gather_qqmm(x, w, /, scales=None, lhs_indices=None, rhs_indices=None, group_size=None, bits=None,
                mode="nvfp4", global_scale_x=None, global_scale_w=None, *, sorted_indices=False):
    """`gather_mm` of the quantized x and w (`mx.gather_qqmm`): out[i] =
    X[lhs_indices[i]] @ W[rhs_indices[i]].T, both read back from their quantized forms,
    the indices flat over the batch dims of x and of w (all of them when None).

        y = mr.gather_qqmm(x, w, rhs_indices=mr.array([1, 0]), mode="affine", group_size=32, bits=8)
    """
    x, w = _arr(x), _arr(w)
    scales = None if scales is None else _arr(scales)
    gx = None if global_scale_x is None else _arr(global_scale_x)
    gw = None if global_scale_w is None else _arr(global_scale_w)
    if x.ndim < 2 or w.ndim < 2:
        raise _err("gather_qqmm", f"x and w must have at least 2 dimensions but x.ndim == {x.ndim} and "
                                  f"w.ndim == {w.ndim}.")
    _check_qq("gather_qqmm", x, w, scales, mode, gx, gw)
    for name, idx in (("lhs_indices", lhs_indices), ("rhs_indices", rhs_indices)):
        if idx is not None and _arr(idx).dtype.kind not in "iu":
            raise _err("gather_qqmm", f"{name} must be an integer array, got {_arr(idx).dtype.name}.")
    group_size, bits = _params("gather_qqmm", mode, group_size, bits)
    # sorted_indices only lets MLX's kernels go faster: the result does not depend on it
    if lhs_indices is None:
        lhs_indices = sh.reshape(_arange_batch(x), x.shape[:-2])
    if rhs_indices is None:
        rhs_indices = sh.reshape(_arange_batch(w), w.shape[:-2])
    return _qq_product(group_size, bits, mode, x, w, scales, gx, gw, _arr(lhs_indices), _arr(rhs_indices))


def _arange_batch(a):
    """0, 1, ... over the batch (all but the last two) dims of `a`: every matrix in order."""
    from .creation import arange
    return arange(int(np.prod(a.shape[:-2], dtype=np.int64)), dtype=dt.uint32)


__all__ += ["qqmm", "gather_qqmm"]
