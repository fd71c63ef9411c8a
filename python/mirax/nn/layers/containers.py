"""Sequential, as `mlx.nn.Sequential`."""
from __future__ import annotations

from .base import Module

__all__ = ["Sequential"]


class Sequential(Module):
    """Calls its layers (modules or plain callables) in order: `Sequential(l1, f, l2)(x)`."""

    def __init__(self, *modules):
        super().__init__()
        self.layers = list(modules)

    def __call__(self, x):
        for m in self.layers:
            x = m(x)
        return x
