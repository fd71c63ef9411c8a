"""Conv1d, Conv2d and Conv3d, as `mlx.nn` (channels last: inputs (N, ..., C_in), weights
(C_out, *kernel, C_in // groups)), calling `mr.conv1d`/`mr.conv2d`/`mr.conv3d`
(or `mr.conv_general`). Weights are drawn from U(-s, s), s = 1/sqrt(C_in * prod(kernel));
biases start at zero, as in MLX."""
from __future__ import annotations

import math
from typing import Union

from ... import ops as mr
from ... import random as mrandom
from .base import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


def _conv_op(name):
    import mirax
    fn = getattr(mirax, name, None)
    if fn is None:
        raise NotImplementedError(f"mirax.{name} is not available (the convolution ops are not built in)")
    return fn


def _tuple(x, n):
    return (x,) * n if isinstance(x, int) else tuple(x)


class _ConvNd(Module):
    _n = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError(f"The number of input channels ({in_channels}) must be "
                             f"divisible by the number of groups ({groups})")
        n = self._n
        kernel_size = _tuple(kernel_size, n)
        scale = math.sqrt(1 / (in_channels * math.prod(kernel_size)))
        self.weight = mrandom.uniform(low=-scale, high=scale,
                                      shape=(out_channels, *kernel_size, in_channels // groups))
        if bias:
            self.bias = mr.zeros((out_channels,))
        # configuration lives outside the dict (not a parameter or state leaf)
        object.__setattr__(self, "stride", stride if n == 1 else _tuple(stride, n))
        object.__setattr__(self, "padding", padding if n == 1 else _tuple(padding, n))
        object.__setattr__(self, "dilation", dilation if n == 1 else _tuple(dilation, n))
        object.__setattr__(self, "groups", groups)

    def _extra_repr(self):
        ks = self.weight.shape[1] if self._n == 1 else tuple(self.weight.shape[1:-1])
        return (f"{self.weight.shape[-1] * self.groups}, {self.weight.shape[0]}, "
                f"kernel_size={ks}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, groups={self.groups}, bias={'bias' in self}")

    def _conv(self, x):
        raise NotImplementedError

    def __call__(self, x):
        y = self._conv(x)
        if "bias" in self:
            y = y + self.bias
        return y


class Conv1d(_ConvNd):
    """1-D convolution over (N, L, C_in) inputs."""
    _n = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

    def _conv(self, x):
        return _conv_op("conv1d")(x, self.weight, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """2-D convolution over (N, H, W, C_in) inputs."""
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, tuple],
                 stride: Union[int, tuple] = 1, padding: Union[int, tuple] = 0,
                 dilation: Union[int, tuple] = 1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

    def _conv(self, x):
        return _conv_op("conv2d")(x, self.weight, self.stride, self.padding, self.dilation, self.groups)


class Conv3d(_ConvNd):
    """3-D convolution over (N, D, H, W, C_in) inputs."""
    _n = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, tuple],
                 stride: Union[int, tuple] = 1, padding: Union[int, tuple] = 0,
                 dilation: Union[int, tuple] = 1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

    def _conv(self, x):
        import mirax
        if getattr(mirax, "conv3d", None) is not None:
            return mirax.conv3d(x, self.weight, self.stride, self.padding, self.dilation, self.groups)
        return _conv_op("conv_general")(x, self.weight, stride=self.stride, padding=self.padding,
                                        kernel_dilation=self.dilation, groups=self.groups)


class _ConvTransposeNd(Module):
    _n = 0
    _op = ""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, bias):
        super().__init__()
        n = self._n
        kernel_size = _tuple(kernel_size, n)
        scale = math.sqrt(1 / (in_channels * math.prod(kernel_size)))
        self.weight = mrandom.uniform(low=-scale, high=scale, shape=(out_channels, *kernel_size, in_channels))
        if bias:
            self.bias = mr.zeros((out_channels,))
        for name, v in (("stride", stride), ("padding", padding), ("dilation", dilation),
                        ("output_padding", output_padding)):
            object.__setattr__(self, name, v if n == 1 else _tuple(v, n))

    def _extra_repr(self):
        ks = self.weight.shape[1] if self._n == 1 else tuple(self.weight.shape[1:-1])
        return (f"{self.weight.shape[-1]}, {self.weight.shape[0]}, kernel_size={ks}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, output_padding={self.output_padding}, "
                f"bias={'bias' in self}")

    def __call__(self, x):
        y = _conv_op(self._op)(x, self.weight, self.stride, self.padding, self.dilation, self.output_padding)
        if "bias" in self:
            y = y + self.bias
        return y


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over (N, L, C_in) inputs; weight (C_out, K, C_in)."""
    _n, _op = 1, "conv_transpose1d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, output_padding: int = 0, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, bias)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution over (N, H, W, C_in) inputs."""
    _n, _op = 2, "conv_transpose2d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, tuple],
                 stride: Union[int, tuple] = 1, padding: Union[int, tuple] = 0,
                 dilation: Union[int, tuple] = 1, output_padding: Union[int, tuple] = 0, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, bias)


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over (N, D, H, W, C_in) inputs."""
    _n, _op = 3, "conv_transpose3d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, tuple],
                 stride: Union[int, tuple] = 1, padding: Union[int, tuple] = 0,
                 dilation: Union[int, tuple] = 1, output_padding: Union[int, tuple] = 0, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, bias)
