"""Parameter initializers, as `mlx.nn.init`: each returns `initializer(array) -> array`
of the same shape, drawn from `mirax.random`'s global key sequence.

    w = nn.init.glorot_uniform()(mr.zeros((64, 32)))
    layer.weight = nn.init.he_normal()(layer.weight, mode="fan_out")
"""
from __future__ import annotations

import math
from typing import Callable, Literal

from .. import ops as mr
from .. import random as mrandom
from ..dialect import dtypes as dt

__all__ = ["constant", "normal", "uniform", "identity", "glorot_normal", "glorot_uniform",
           "he_normal", "he_uniform", "sparse", "orthogonal"]


def constant(value: float, dtype=dt.float32) -> Callable:
    """All `value`."""
    def initializer(a):
        return mr.full(a.shape, value, dtype=dtype)
    return initializer


def normal(mean: float = 0.0, std: float = 1.0, dtype=dt.float32) -> Callable:
    """N(mean, std**2)."""
    def initializer(a):
        return mrandom.normal(shape=a.shape, scale=std, loc=mean, dtype=dtype)
    return initializer


def uniform(low: float = 0.0, high: float = 1.0, dtype=dt.float32) -> Callable:
    """U(low, high)."""
    def initializer(a):
        return mrandom.uniform(low, high, a.shape, dtype=dtype)
    return initializer


def identity(dtype=dt.float32) -> Callable:
    """The identity matrix (square 2-D arrays only)."""
    def initializer(arr):
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise ValueError(f"The input array must be a square matrix but got shape {arr.shape}.")
        return mr.eye(arr.shape[0], dtype=dtype)
    return initializer


def _calculate_fan_in_fan_out(x):
    if x.ndim < 2:
        raise ValueError("Glorot / He initialization requires at least 2 dimensional input"
                         f" but input with {x.ndim} dimensions.")
    fan_in, fan_out = x.shape[-1], x.shape[0]
    if x.ndim > 2:
        receptive = math.prod(x.shape[1:-1])
        fan_in, fan_out = fan_in * receptive, fan_out * receptive
    return fan_in, fan_out


def glorot_normal(dtype=dt.float32) -> Callable:
    """N(0, std**2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    def initializer(a, gain: float = 1.0):
        fan_in, fan_out = _calculate_fan_in_fan_out(a)
        std = gain * math.sqrt(2.0 / (fan_in + fan_out))
        return mrandom.normal(shape=a.shape, scale=std, dtype=dtype)
    return initializer


def glorot_uniform(dtype=dt.float32) -> Callable:
    """U(-limit, limit), limit = gain * sqrt(6 / (fan_in + fan_out))."""
    def initializer(a, gain: float = 1.0):
        fan_in, fan_out = _calculate_fan_in_fan_out(a)
        limit = gain * math.sqrt(6.0 / (fan_in + fan_out))
        return mrandom.uniform(-limit, limit, a.shape, dtype=dtype)
    return initializer


def _fan(a, mode):
    fan_in, fan_out = _calculate_fan_in_fan_out(a)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"Invalid mode: {mode}. Valid modes are: fan_in, fan_out")


def he_normal(dtype=dt.float32) -> Callable:
    """N(0, std**2), std = gain / sqrt(fan) (fan_in or fan_out by `mode`)."""
    def initializer(a, mode: Literal["fan_in", "fan_out"] = "fan_in", gain: float = 1.0):
        std = gain / math.sqrt(_fan(a, mode))
        return mrandom.normal(shape=a.shape, scale=std, dtype=dtype)
    return initializer


def he_uniform(dtype=dt.float32) -> Callable:
    """U(-limit, limit), limit = gain * sqrt(3 / fan) (fan_in or fan_out by `mode`)."""
    def initializer(a, mode: Literal["fan_in", "fan_out"] = "fan_in", gain: float = 1.0):
        limit = gain * math.sqrt(3.0 / _fan(a, mode))
        return mrandom.uniform(-limit, limit, a.shape, dtype=dtype)
    return initializer


def sparse(sparsity: float, mean: float = 0.0, std: float = 1.0, dtype=dt.float32) -> Callable:
    """N(mean, std**2) with ceil(sparsity * columns) entries of every row set to zero
    (Martens, 2010): with `x @ w.T` each output sees at most a 1 - sparsity fraction
    of the inputs. 2-D arrays only.

        w = nn.init.sparse(sparsity=0.5)(mr.zeros((4, 6)))   # 3 zeros per row
    """
    def initializer(a):
        if a.ndim != 2:
            raise ValueError(f"[sparse] Only arrays with 2 dimensions are supported but got shape {a.shape}.")
        rows, cols = a.shape
        num_zeros = int(math.ceil(sparsity * cols))
        # a random permutation per row picks the zeroed columns
        order = mr.argsort(mrandom.uniform(shape=a.shape), axis=1)
        out = mrandom.normal(shape=a.shape, scale=std, loc=mean, dtype=dtype)
        out[mr.arange(rows).reshape(rows, 1), order[:, :num_zeros]] = 0
        return out
    return initializer


def orthogonal(gain: float = 1.0, dtype=dt.float32) -> Callable:
    """`gain` times a random orthogonal matrix (the Q of the QR decomposition of a
    Gaussian n x n matrix, n = max(rows, cols), signs fixed by diag(R)), cut to the
    array's shape: orthonormal rows or columns, whichever are fewer. 2-D arrays only.

        w = nn.init.orthogonal()(mr.zeros((3, 5)))   # w @ w.T == eye(3)
    """
    def initializer(a):
        if a.ndim != 2:
            raise ValueError(f"[orthogonal] Orthogonal initialization requires a 2D array but got a {a.ndim}D array.")
        from .. import linalg  # noqa: PLC0415 (mirax.linalg imports the ops this module is part of)
        rows, cols = a.shape
        n = max(rows, cols)
        q, r = linalg.qr(mrandom.normal(shape=(n, n)))
        q = q * mr.sign(mr.diag(r))
        return (q[:rows, :cols] * gain).astype(dtype)
    return initializer
