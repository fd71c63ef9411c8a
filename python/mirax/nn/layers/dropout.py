"""Dropout layers, as `mlx.nn`: masks drawn from `mirax.random`'s global key sequence."""
from __future__ import annotations

from ... import random as mrandom
from .base import Module

__all__ = ["Dropout", "Dropout2d", "Dropout3d"]


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
        mask = mrandom.bernoulli(self._p_1, x.shape)
        return (mask * x) * (1 / self._p_1)


class Dropout2d(_DropoutBase):
    """Drop whole channels of (N, H, W, C) or (H, W, C) inputs."""

    def __call__(self, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"Received input with {x.ndim} dimensions. Expected 3 or 4 dimensions.")
        if self._p_1 == 1 or not self.training:
            return x
        mask_shape = list(x.shape)
        mask_shape[-2] = mask_shape[-3] = 1
        mask = mrandom.bernoulli(p=self._p_1, shape=mask_shape)
        return (mask * x) * (1 / self._p_1)  # mask first: x keeps its dtype (bf16 stays bf16)


class Dropout3d(_DropoutBase):
    """Drop whole channels of (N, D, H, W, C) or (D, H, W, C) inputs."""

    def __call__(self, x):
        if x.ndim not in (4, 5):
            raise ValueError(f"Received input with {x.ndim} dimensions. Expected 4 or 5 dimensions.")
        if self._p_1 == 1 or not self.training:
            return x
        mask_shape = list(x.shape)
        mask_shape[-2] = mask_shape[-3] = mask_shape[-4] = 1
        mask = mrandom.bernoulli(p=self._p_1, shape=mask_shape)
        return (mask * x) * (1 / self._p_1)  # mask first: x keeps its dtype (bf16 stays bf16)
