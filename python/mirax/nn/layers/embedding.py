"""Embedding, as `mlx.nn.Embedding`."""
from __future__ import annotations

import math

from ... import random as mrandom
from .base import Module

__all__ = ["Embedding"]


class Embedding(Module):
    """A lookup table (num_embeddings, dims) drawn from N(0, 1/dims); `as_linear`
    multiplies by its transpose (tied output projections)."""

    def __init__(self, num_embeddings: int, dims: int):
        super().__init__()
        scale = math.sqrt(1 / dims)
        self.weight = mrandom.normal(shape=(num_embeddings, dims), scale=scale)

    def _extra_repr(self):
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}"

    def __call__(self, x):
        return self.weight[x]

    def as_linear(self, x):
        return x @ self.weight.T

    def to_quantized(self, group_size: int = None, bits: int = None, mode: str = "affine",
                     quantize_input: bool = False):
        """A `QuantizedEmbedding` approximating this embedding (see `mirax.quantize`)."""
        from .quantized import QuantizedEmbedding
        if quantize_input:
            raise ValueError("Quantized input is not supported.")
        return QuantizedEmbedding.from_embedding(self, group_size, bits, mode)
