"""Random numbers with explicit or implicit keys, as `mx.random`.

    k = mr.random.key(0)
    a, b = mr.random.split(k)               # (2, 2) keys: iterate or index
    x = mr.random.uniform(shape=(3,), key=a)
    mr.random.seed(1); y = mr.random.normal((2, 2))   # implicit global key

Every sampler is built from one primitive, `mirax.random_bits` (counter-based
Threefry-2x32, see dialect/random.py), and ordinary mirax ops, so it is lazy and
traceable: it works under grad, vmap and compile like any other op. A key is a uint32
array of shape (2,). Without `key=`, a sampler splits the global key in `state[0]`
(`state[0], sub = split(state[0])`) and uses `sub`, as MLX's key sequence does; `state`
is a list so that compile can capture and update it.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .array import Array, apply, array, where_text
from .dialect import dtypes as dt
from .dialect.core import MiraxError, broadcast_shapes
from . import device as _device
from . import ops as _ops
from .fused import fused

__all__ = ["key", "split", "seed", "state", "bits", "uniform", "normal", "bernoulli", "randint",
           "categorical", "truncated_normal", "gumbel", "permutation", "laplace", "multivariate_normal"]


def _shape(shape):
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def key(seed: int) -> Array:
    """A uint32 key of shape (2,) from an integer seed: (seed >> 32, seed & 0xffffffff)."""
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    return array(np.array([s >> 32, s & 0xFFFFFFFF], np.uint32), dt.uint32)


def _as_key(k) -> Array:
    if not isinstance(k, Array):
        k = array(np.asarray(k, np.uint32), dt.uint32)
    if k.dtype is not dt.uint32 or k.ndim < 1 or k.shape[-1] != 2:
        raise MiraxError(f"random: a key is a uint32 array of shape (2,), got {k.dtype.name}{list(k.shape)}"
                         f"{where_text()}")
    return k


def _random_bits(k, shape) -> Array:
    return apply("random_bits", [_as_key(k)], shape=_shape(shape))


def split(key: Array, num: int = 2) -> Array:
    """`num` new keys, shape (num, 2): the random bits of `key` for that shape, as MLX
    splits (JAX's partitionable split hashes (0, i) instead; the streams differ from JAX's)."""
    return _random_bits(key, (int(num), 2))


state = [key(time.time_ns())]


def seed(s: int) -> None:
    """Reset the global key: the same seed gives the same implicit-key samples."""
    state[0] = key(s)


_batch_keys = []  # the per-example keys of the vmaps being traced, innermost last


def _next(k):
    """The key to use: `k`, or a fresh subkey of the global state. Inside `vmap` the
    global stream is the example's own key (an argument vmap batches), so every example
    draws different numbers, as MLX's vmap of global-state random does."""
    if k is not None:
        return _as_key(k)
    if _batch_keys:
        slot = _batch_keys[-1]
        slot["used"] = True
        slot["key"], sub = split(slot["key"])
        return sub
    state[0], sub = split(state[0])
    return sub


def bits(shape=(), width: int = 4, key=None) -> Array:
    """Random bits: uint32 (width 4), uint16 (2) or uint8 (1) of `shape`."""
    out = {4: dt.uint32, 2: dt.uint16, 1: dt.uint8}.get(width)
    if out is None:
        raise MiraxError(f"random.bits: width must be 1, 2 or 4, got {width}{where_text()}")
    b = _random_bits(_next(key), shape)
    return b if out is dt.uint32 else b.astype(out)  # keep the low bits


def _unit(shape, key) -> Array:
    """float32 in [0, 1) on the grid of 2**-24: the top 24 bits of the random word."""
    b = _random_bits(key, shape)
    top = b - b % 256  # (b >> 8) << 8: a multiple of 256 below 2**32, exact in float32
    return top.astype(dt.float32) * (2.0 ** -32)


def _as(x, d) -> Array:
    return x.astype(d) if isinstance(x, Array) else array(x, d)


def _float_dtype(dtype, op):
    d = dt.float32 if dtype is None else dt.to_dtype(dtype)  # None: the default (MLX)
    if d.kind != "f":
        raise MiraxError(f"random.{op}: dtype must be a float type, got {d.name}{where_text()}")
    return d


@fused
def _uniform_values(k, lo, hi, top, shape, d):
    """Uniform samples of dtype d in [lo, hi) from key k: at most `top` (hi's float below,
    for a Python number hi: MLX's clamp), or else (top None) lo where rounding reached hi.

    The samplers' arithmetic (`uniform`'s, `normal`'s, `bernoulli`'s: the random bits to
    floats, the scaling, the clamp, a comparison) is one kernel in eager code (`fused`,
    the bounds as arguments: one kernel serves every scale of Linear's initialization):
    op by op, a 784-512-512-10 MLP's initialization built 49 kernels (1.6 s on a cold
    cache), and a dropout mask read and wrote its activation six times a step."""
    u = _unit(shape, k)
    cd = d if d.bits >= 32 else dt.float32  # half types compute in float32
    lo_c, hi_c = lo.astype(cd), hi.astype(cd)
    r = lo_c + (hi_c - lo_c) * u.astype(cd)
    r = _ops.maximum(lo_c, r).astype(d)
    return _ops.minimum(r, top) if top is not None else _ops.where(r < hi, r, lo)


def _top(high, d):
    """The float of dtype d below `high` when high is a Python number, else None."""
    if isinstance(high, (int, float)) and d is not dt.bfloat16:
        return array(np.nextafter(np.asarray(high, d.storage), np.asarray(-np.inf, d.storage)), d)
    return None


def uniform(low=0.0, high=1.0, shape=(), dtype=dt.float32, key=None) -> Array:
    """Uniform samples in [low, high); `low`/`high` broadcast against `shape`.

        mr.random.uniform(-1.0, 1.0, (3, 4))"""
    d = _float_dtype(dtype, "uniform")
    lo, hi = _as(low, d), _as(high, d)
    try:
        shape = broadcast_shapes(_shape(shape), lo.shape, hi.shape, op="random.uniform")
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    return _uniform_values(_next(key), lo, hi, _top(high, d), shape, d)


def normal(shape=(), dtype=dt.float32, loc=0.0, scale=1.0, key=None) -> Array:
    """Normal samples: sqrt(2) * erfinv(u), u uniform in (-1, 1) (as JAX and MLX).
    complex64: real and imaginary parts each erfinv(u) (variance 1/2 each, 1 in all)."""
    lo = float(np.nextafter(np.float32(-1), np.float32(0)))
    if dtype is not None and dt.to_dtype(dtype) is dt.complex64:
        parts = _ops.erfinv(uniform(lo, 1.0, _shape(shape) + (2,), dt.float32, key))
        z = _ops.take(parts, 0, axis=-1) + _ops.take(parts, 1, axis=-1) * 1j
        if not (isinstance(scale, (int, float)) and scale == 1):
            z = _as(scale, dt.complex64) * z if not isinstance(scale, Array) else scale * z
        if not (isinstance(loc, (int, float)) and loc == 0):
            z = z + (loc if isinstance(loc, Array) else _as(loc, dt.complex64))
        return z
    d = _float_dtype(dtype, "normal")
    shape = _shape(shape)
    cd = dt.float32 if d.bits < 32 else d
    scale, loc = (float(a) if isinstance(a, (int, float, np.integer, np.floating)) else _as(a, d) for a in (scale, loc))
    return _normal_values(_next(key), scale, loc, shape, d, cd, lo)


@fused
def _normal_values(k, scale, loc, shape, d, cd, lo):
    """`normal`'s samples from key k (scale and loc Python floats or arrays): one kernel
    in eager code, as `_uniform_values`."""
    u = _uniform_values(k, array(lo, cd), array(1.0, cd), _top(1.0, cd), shape, cd)
    z = (_ops.erfinv(u) * math.sqrt(2)).astype(d)
    if not (isinstance(scale, float) and scale == 1):
        z = z * _as(scale, d)
    if not (isinstance(loc, float) and loc == 0):
        z = z + _as(loc, d)
    return z


def laplace(shape=(), dtype=dt.float32, loc=0.0, scale=1.0, key=None) -> Array:
    """Laplace samples by the inverse CDF: sign(u) * log1p(-|u|), u uniform in (-1, 1)
    (as MLX), times `scale`, plus `loc`.

        mr.random.laplace((1000,), scale=2.0)
    """
    d = dt.float32 if dtype is None else dt.to_dtype(dtype)
    if d.kind != "f":
        raise ValueError(f"[laplace] Only real floating point types are supported, got {d.name}{where_text()}")
    lo = float(np.nextafter(np.float32(-1), np.float32(0)))
    u = uniform(lo, 1.0, shape, dt.float32, key)
    z = (_ops.sign(u) * _ops.log1p(-_ops.abs(u))).astype(d)
    if scale != 1.0:
        z = array(scale, d) * z
    if loc != 0.0:
        z = array(loc, d) + z
    return z


def multivariate_normal(mean, cov, shape=(), dtype=dt.float32, key=None) -> Array:
    """Samples of N(mean, cov): standard normals times the covariance's square root
    U * sqrt(S) @ Vt from its SVD (as MLX; the SVD runs on the CPU). The result's shape is
    broadcast(cov.shape[:-2], mean.shape[:-1], shape) + (n,)."""
    from . import linalg
    d = dt.to_dtype(dtype)
    if d is not dt.float32:
        raise ValueError(f"[multivariate_normal] dtype must be float32, got {d.name}{where_text()}")
    mean, cov = _as(mean, d), _as(cov, d)
    if mean.ndim < 1:
        raise ValueError(f"[multivariate_normal] mean must have at least one dimension{where_text()}")
    if cov.ndim < 2:
        raise ValueError(f"[multivariate_normal] cov must have at least two dimensions{where_text()}")
    n = mean.shape[-1]
    if cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"[multivariate_normal] last two dimensions of cov must be equal, got "
                         f"{cov.shape}{where_text()}")
    if cov.shape[-1] != n:
        raise ValueError(f"[multivariate_normal] mean {mean.shape} and cov {cov.shape} must have "
                         f"compatible shapes{where_text()}")
    try:
        out = broadcast_shapes(cov.shape[:-2], mean.shape[:-1], _shape(shape), op="random.multivariate_normal")
    except MiraxError as err:
        raise ValueError(f"[multivariate_normal] {err}{where_text()}") from None
    with _device.stream(_device.cpu):  # the SVD is a CPU op (as MLX)
        u, sv, vt = linalg.svd(cov)
    std = (u * _ops.expand_dims(_ops.sqrt(sv), -2)) @ vt
    z = normal(out + (n,), d, key=key)
    return _ops.squeeze(_ops.expand_dims(z, -2) @ std, -2) + mean


def bernoulli(p=0.5, shape=None, key=None) -> Array:
    """bool samples, True with probability `p` (shape: p's shape when None). `p` must be
    floating point and broadcast to `shape` (MLX's ValueErrors otherwise)."""
    if isinstance(p, (bool, int)) or (isinstance(p, Array) and p.dtype.kind not in "f"):
        raise ValueError(f"[bernoulli] bernoulli probability `p` must be a float type{where_text()}")
    p = p if isinstance(p, Array) else array(p, dt.float32)
    shape = p.shape if shape is None else _shape(shape)
    if broadcast_shapes(p.shape, shape, op="random.bernoulli") != shape:
        raise ValueError(f"[bernoulli] shape {shape} is not compatible with p's shape {p.shape}{where_text()}")
    return _bernoulli_values(_next(key), p, shape)


@fused
def _bernoulli_values(k, p, shape):
    f32 = dt.float32
    return _uniform_values(k, array(0.0, f32), array(1.0, f32), _top(1.0, f32), shape, f32) < p


def randint(low, high, shape=(), dtype=dt.int32, key=None) -> Array:
    """Integers uniform in [low, high), JAX's method: two 32-bit words reduced mod the
    span without float rounding (bias below 2**-32 * span)."""
    d = dt.int32 if dtype is None else dt.to_dtype(dtype)
    if d is dt.bool_:  # bools draw from [low, high) as integers (MLX)
        return randint(low, high, shape, dt.int32, key).astype(dt.bool_)
    if d.kind not in "iu":
        raise MiraxError(f"random.randint: dtype must be an integer type, got {d.name}{where_text()}")
    lo, hi = _as(low, d), _as(high, d)
    try:
        shape = broadcast_shapes(_shape(shape), lo.shape, hi.shape, op="random.randint")
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    lo, hi = _ops.broadcast_to(lo, shape), _ops.broadcast_to(hi, shape)
    w = _random_bits(_next(key), (2,) + shape)
    higher, lower = w[0], w[1]
    u32 = dt.uint32
    span = (hi.astype(dt.int64) - lo.astype(dt.int64)).astype(u32) if d.bits <= 32 else (hi - lo).astype(u32)
    span = _ops.where(hi <= lo, array(1, u32), span)
    mult = array(2 ** 16, u32) % span
    mult = (mult * mult) % span  # 2**32 mod span
    off = ((higher % span) * mult + lower % span) % span
    return lo + off.astype(d)


def gumbel(shape=(), dtype=dt.float32, key=None) -> Array:
    """Standard Gumbel samples: -log(-log(u)), u uniform in (0, 1)."""
    d = _float_dtype(dtype, "gumbel")
    tiny = float(np.finfo(np.float32).tiny)
    u = uniform(tiny, 1.0, shape, dt.float32 if d.bits < 32 else d, key)
    return (-_ops.log(-_ops.log(u))).astype(d)


def categorical(logits, axis=-1, shape=None, num_samples=None, key=None) -> Array:
    """Indices (uint32) sampled from softmax(logits) along `axis` (Gumbel-max).

    `shape` (broadcast with the batch shape logits.shape without `axis`) or
    `num_samples` (appended last) set the output shape; at most one of them."""
    logits = logits if isinstance(logits, Array) else array(logits)
    if shape is not None and num_samples is not None:
        raise MiraxError(f"random.categorical: give at most one of shape and num_samples{where_text()}")
    if logits.ndim == 0:
        raise MiraxError(f"random.categorical: logits must have at least one dimension{where_text()}")
    if not -logits.ndim <= axis < logits.ndim:
        raise MiraxError(f"random.categorical: axis {axis} out of range for logits {logits.shape}{where_text()}")
    axis %= logits.ndim
    lg = _ops.moveaxis(logits, axis, -1)
    batch, k = lg.shape[:-1], lg.shape[-1]
    if num_samples is not None:
        out = batch + (int(num_samples),)
        lg = _ops.expand_dims(lg, -2)
    else:
        out = batch if shape is None else _shape(shape)
        try:
            if broadcast_shapes(out, batch, op="random.categorical") != out:
                raise MiraxError(f"random.categorical: shape {out} does not hold the batch shape {batch}")
        except MiraxError as err:
            raise MiraxError(f"{err}{where_text()}") from None
    d = logits.dtype if logits.dtype.kind == "f" else dt.float32
    g = gumbel(out + (k,), d, key)
    return _ops.argmax(g + lg.astype(d), axis=-1)


def truncated_normal(lower, upper, shape=None, dtype=dt.float32, key=None) -> Array:
    """Normal samples truncated to [lower, upper] (inverse-CDF, as JAX and MLX)."""
    d = _float_dtype(dtype, "truncated_normal")
    cd = dt.float32 if d.bits < 32 else d
    lo, hi = _as(lower, cd), _as(upper, cd)
    shape = broadcast_shapes(lo.shape, hi.shape) if shape is None else _shape(shape)
    s2 = math.sqrt(2)
    a, b = _ops.erf(lo / s2), _ops.erf(hi / s2)
    u = uniform(a, b, shape, cd, key)
    z = _ops.erfinv(u) * s2
    z = _ops.minimum(_ops.maximum(z, lo), hi)
    return _ops.where(lo > hi, lo, z).astype(d)  # an empty interval gives its lower end (MLX)


def permutation(x, axis=0, key=None) -> Array:
    """A random permutation of `arange(x)` (x an int) or of `x` along `axis`: the order
    of n random words (their stable argsort: equal words by position), O(n log n) work
    (by the radix sort for long rows; the ranks of every pair of words it replaced were
    n^2 work and memory).

        mr.random.permutation(10)           # the integers 0..9 in a random order"""
    if isinstance(x, (int, np.integer)):
        n, arr = int(x), None
    else:
        arr = x if isinstance(x, Array) else array(x)
        n = arr.shape[axis]
    from .ops.sorting import argsort
    perm = argsort(_random_bits(_next(key), (n,))).astype(dt.int32)
    return perm if arr is None else _ops.take(arr, perm, axis=axis)


_ops._add_stream_keyword(globals(), "mirax.random")
