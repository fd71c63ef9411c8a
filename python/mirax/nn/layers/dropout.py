"""Dropout layers, as `mlx.nn`: masks drawn from `mirax.random`'s global key sequence."""
from __future__ import annotations

from ... import random as mrandom
from ...array import array
from ...dialect import dtypes as dt
from ...fused import fused
from .base import Module

__all__ = ["Dropout", "Dropout2d", "Dropout3d"]


@fused
def _dropped(k, x, keep: float, mask_shape: tuple):
    """x with a mask of `mask_shape` (True with probability `keep`, from key k) applied
    and the rest scaled by 1 / keep: eager, one kernel and one pass over x (op by op it
    was the mask's kernel and two multiplies, three passes; the values are the same)."""
    mask = mrandom._bernoulli_values(k, array(keep, dt.float32), mask_shape)
    return (mask * x) * (1 / keep)  # mask first: x keeps its dtype (bf16 stays bf16)


class _DropoutBase(Module):
    def __init__(self, p: float = 0.5):
        super().__init__()
        if p < 0 or p >= 1:
            raise ValueError(f"The dropout probability {p} is not in [0, 1)")
        self._p = p
        self._p_1 = 1 - p

    def _extra_repr(self) -> str:
        return f"p={self._p}"


class Dropout(_DropoutBase):
    r"""Zero each element with probability `p` and scale the rest by 1/(1-p) in
    training mode; the identity in eval mode."""

    def __call__(self, x):
        if self._p_1 == 1 or not self.training:
            return x
        return _dropped(mrandom._next(None), x, self._p_1, tuple(x.shape))


class Dropout2d(_DropoutBase):
    """Drop whole channels of (N, H, W, C) or (H, W, C) inputs."""

    def __call__(self, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"Received input with {x.ndim} dimensions. Expected 3 or 4 dimensions.")
        if self._p_1 == 1 or not self.training:
            return x
        mask_shape = list(x.shape)
        mask_shape[-2] = mask_shape[-3] = 1
        return _dropped(mrandom._next(None), x, self._p_1, tuple(mask_shape))


class Dropout3d(_DropoutBase):
    """Drop whole channels of (N, D, H, W, C) or (D, H, W, C) inputs."""

    def __call__(self, x):
        if x.ndim not in (4, 5):
            raise ValueError(f"Received input with {x.ndim} dimensions. Expected 4 or 5 dimensions.")
        if self._p_1 == 1 or not self.training:
            return x
        mask_shape = list(x.shape)
        mask_shape[-2] = mask_shape[-3] = mask_shape[-4] = 1
        return _dropped(mrandom._next(None), x, self._p_1, tuple(mask_shape))
