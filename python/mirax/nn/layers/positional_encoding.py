"""RoPE, sinusoidal and ALiBi positional encodings, as `mlx.nn` (RoPE in ordinary ops:
mirax has no `fast.rope`)."""
from __future__ import annotations

import math
from typing import Optional

from ... import ops as mr
from ...array import array
from ...dialect import dtypes as dt
from .base import Module

__all__ = ["RoPE", "SinusoidalPositionalEncoding", "ALiBi", "rope"]


def rope(x, dims: int, traditional: bool = False, base: float = 10000, scale: float = 1.0, offset: int = 0):
    """Rotary positional encoding of the first `dims` features of x (..., L, D) at
    positions offset + arange(L): feature pairs (i, i + dims/2) (or (2i, 2i+1) when
    `traditional`) rotate by the angle scale * position * base**(-2i/dims)."""
    L = x.shape[-2]
    half = dims // 2
    inv = mr.exp(mr.arange(0, half, dtype=dt.float32) * (-2.0 * math.log(base) / dims))
    pos = (mr.arange(0, L, dtype=dt.float32) + offset) * scale
    theta = mr.expand_dims(pos, 1) * mr.expand_dims(inv, 0)  # (L, half)
    cd = x.dtype if x.dtype in (dt.float32, dt.float64) else dt.float32
    cos, sin = mr.cos(theta).astype(cd), mr.sin(theta).astype(cd)
    xr, rest = x[..., :dims].astype(cd), x[..., dims:]
    if traditional:
        pairs = xr.reshape(*xr.shape[:-1], half, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        y = mr.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(*xr.shape)
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
        y = mr.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    y = y.astype(x.dtype)
    return y if dims == x.shape[-1] else mr.concatenate([y, rest], axis=-1)


class RoPE(Module):
    """Rotary positional encoding; `__call__(x, offset=0)` on x of shape (..., L, D)."""

    def __init__(self, dims: int, traditional: bool = False, base: float = 10000, scale: float = 1.0):
        super().__init__()
        self.dims = dims
        self.traditional = traditional
        self.base = base
        self.scale = scale

    def _extra_repr(self):
        return f"{self.dims}, traditional={self.traditional}"

    def __call__(self, x, offset: int = 0):
        return rope(x, self.dims, self.traditional, self.base, self.scale, offset)


class SinusoidalPositionalEncoding(Module):
    """[sin(x * sigma), cos(x * sigma)] * scale with frequencies sigma spaced
    geometrically from max_freq down to min_freq (MLX's layout)."""

    def __init__(self, dims: int, min_freq: float = 0.0001, max_freq: float = 1, scale: Optional[float] = None,
                 cos_first: bool = False, full_turns: bool = False):
        super().__init__()
        if dims <= 0 or dims % 2 != 0:
            raise ValueError(f"[SinusoidalPositionalEncoding] dims must be positive and even but got {dims}.")
        if dims == 2:
            one_zero = array([1.0])
        else:
            one_zero = 1 - mr.arange(0, dims // 2, dtype=dt.float32) / (dims // 2 - 1)
        lo, hi = math.log(min_freq), math.log(max_freq)
        self._sigmas = mr.exp(one_zero * (hi - lo) + lo)
        if full_turns:
            self._sigmas = self._sigmas * (2 * math.pi)
        self.scale = scale if scale is not None else (2 / dims) ** 0.5
        self.cos_first = cos_first

    def __call__(self, x):
        y = mr.expand_dims(x, -1) * self._sigmas
        cosy, siny = mr.cos(y), mr.sin(y)
        y = mr.concatenate([cosy, siny] if self.cos_first else [siny, cosy], axis=-1)
        if self.scale != 1:
            y = y * self.scale
        return y


class ALiBi(Module):
    """Attention with linear biases (Press et al., 2021): adds -slope_h * |i - j| to the
    attention scores (N, heads, L_q, L_k) of query i and key j, with one geometric
    slope per head. `__call__(attention_scores, offset=0, mask=None)`; queries sit at
    positions offset + arange(L_q) and `mask` is added to the bias.

        scores = nn.ALiBi()(mr.zeros((1, 8, 4, 4)))   # scores[0, h, i, j] = -slope_h |i - j|
    """

    @staticmethod
    def create_alibi_matrix(q_sequence_length: int, k_sequence_length: int, num_heads: int, offset: int,
                            dtype=dt.float32):
        """The bias (1, num_heads, q_sequence_length - offset, k_sequence_length)."""
        x1 = mr.arange(offset, q_sequence_length)
        x2 = mr.arange(0, k_sequence_length)
        distance = -mr.abs(mr.expand_dims(x1[:, None] - x2[None, :], axis=(0, 1)))
        slope = ALiBi.create_alibi_slope(num_heads=num_heads, dtype=dtype)
        return (distance * slope).astype(dtype)

    @staticmethod
    def create_alibi_slope(num_heads: int, dtype=dt.float32):
        """The slopes (num_heads, 1, 1): 2**(-8 h / n) for h = 1..n when n is a power of
        two; otherwise those of the power of two below, then every other one of twice it."""
        def slopes(n):
            if math.log2(n).is_integer():
                start = 2 ** (-(2 ** -(math.log2(n) - 3)))
                return [start * start ** i for i in range(n)]
            p = 2 ** math.floor(math.log2(n))
            return slopes(p) + slopes(2 * p)[0::2][: n - p]
        return mr.expand_dims(array(slopes(num_heads), dtype=dtype), axis=(-1, -2))

    def __call__(self, attention_scores, offset: int = 0, mask=None):
        if attention_scores.ndim != 4:
            raise ValueError("[ALiBi] expects attention scores of shape (N, heads, L_q, L_k) but got "
                             f"shape {attention_scores.shape}")
        bias = ALiBi.create_alibi_matrix(q_sequence_length=attention_scores.shape[-2] + offset,
                                         k_sequence_length=attention_scores.shape[-1],
                                         num_heads=attention_scores.shape[1], offset=offset,
                                         dtype=attention_scores.dtype)
        if mask is not None:
            bias = bias + mask
        return attention_scores + bias
