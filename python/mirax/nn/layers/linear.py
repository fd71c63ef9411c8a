"""Identity, Linear and Bilinear layers, as `mlx.nn` (same initialisation)."""
from __future__ import annotations

import math
from typing import Any

from ... import random as mrandom
from ...fused import fused
from .base import Module

__all__ = ["Identity", "Linear", "Bilinear"]


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __call__(self, x):
        return x


class Linear(Module):
    r"""y = x W^T + b, with W (output_dims, input_dims) and b, both drawn from
    U(-1/sqrt(input_dims), 1/sqrt(input_dims))."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True) -> None:
        super().__init__()
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mrandom.uniform(low=-scale, high=scale, shape=(output_dims, input_dims))
        if bias:
            self.bias = mrandom.uniform(low=-scale, high=scale, shape=(output_dims,))

    def _extra_repr(self) -> str:
        return (f"input_dims={self.weight.shape[1]}, output_dims={self.weight.shape[0]}, "
                f"bias={'bias' in self}")

    def __call__(self, x):
        if "bias" in self:
            return _affine(x, self["weight"], self["bias"])
        return _linear(x, self["weight"])

    def to_quantized(self, group_size: int = None, bits: int = None, mode: str = "affine",
                     quantize_input: bool = False):
        """A `QuantizedLinear` approximating this layer (see `mirax.quantize`)."""
        from .quantized import QuantizedLinear
        if quantize_input:
            raise ValueError(f"Quantized activations are only supported for 'nvfp4' and 'mxfp8' modes, "
                             f"which mirax does not implement; got mode {mode}.")
        return QuantizedLinear.from_linear(self, group_size, bits, mode)


class Bilinear(Module):
    r"""y_i = x_1^T W_i x_2 + b_i, with W (output_dims, input2_dims, input1_dims) and b
    drawn from U(-1/sqrt(input1_dims), 1/sqrt(input1_dims))."""

    def __init__(self, input1_dims: int, input2_dims: int, output_dims: int, bias: bool = True) -> None:
        super().__init__()
        scale = math.sqrt(1.0 / input1_dims)
        self.weight = mrandom.uniform(low=-scale, high=scale, shape=(output_dims, input2_dims, input1_dims))
        if bias:
            self.bias = mrandom.uniform(low=-scale, high=scale, shape=(output_dims,))

    def _extra_repr(self) -> str:
        out, in2, in1 = self.weight.shape
        return f"input1_dims={in1}, input2_dims={in2}, output_dims={out}, bias={'bias' in self}"

    def __call__(self, x1, x2):
        out, in2, in1 = self.weight.shape
        xshape = x1.shape[:-1]
        x1 = x1.reshape(-1, in1)
        x2 = x2.reshape(-1, 1, in2)
        w = self.weight.reshape(out * in2, in1)
        y = x1 @ w.T
        y = y.reshape(-1, out, in2).swapaxes(-2, -1)
        y = x2 @ y
        y = y.squeeze(1)
        y = y.reshape(*xshape, out)
        if "bias" in self:
            y = y + self.bias
        return y


@fused
def _linear(x, w):
    """x @ w.T (Linear without a bias): one kernel in eager code."""
    return x @ w.T


@fused
def _affine(x, w, b):
    """x @ w.T + b (Linear): one kernel in eager code."""
    return x @ w.T + b
