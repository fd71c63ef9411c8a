"""Max and average pooling over the spatial axes of channels-last inputs, as `mlx.nn`
(MaxPool1d/2d/3d, AvgPool1d/2d/3d). mirax has no `as_strided`: a window reduction is the
elementwise max/sum of one strided slice per kernel offset."""
from __future__ import annotations

import itertools
from typing import Optional, Tuple, Union

from ... import ops as mr
from .base import Module

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d"]


def _value_or_list(x, n, msg):
    if isinstance(x, (list, tuple)):
        if len(x) != n:
            raise ValueError(msg)
        return list(x)
    if not isinstance(x, int):
        raise ValueError(msg)
    return [x] * n


class _Pool(Module):
    _kind = ""
    _n = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        name, n = type(self).__name__, self._n
        msg = "[{}] '{}' must be an integer or a tuple containing {} integer(s)"
        kernel_size = _value_or_list(kernel_size, n, msg.format(name, "kernel_size", n))
        stride = kernel_size if stride is None else _value_or_list(stride, n, msg.format(name, "stride", n))
        padding = _value_or_list(padding, n, msg.format(name, "padding", n))
        for what, values in (("kernel_size", kernel_size), ("stride", stride)):
            if any(v <= 0 for v in values):
                raise ValueError(f"[{name}] '{what}' must be positive but got {tuple(values)}.")
        if any(p < 0 for p in padding):
            raise ValueError(f"[{name}] 'padding' must be non-negative but got {tuple(padding)}.")
        self._kernel_size, self._stride, self._padding = kernel_size, stride, padding

    def _extra_repr(self):
        return (f"kernel_size={tuple(self._kernel_size)}, stride={tuple(self._stride)}, "
                f"padding={tuple(self._padding)}")

    def __call__(self, x):
        n = self._n
        if x.ndim < n + 2:
            raise ValueError(f"{type(self).__name__} expects inputs (N, {'spatial, ' * n}C), got {x.shape}")
        if any(self._padding):
            pad_value = float("-inf") if self._kind == "max" else 0
            x = mr.pad(x, [(0, 0)] * (x.ndim - n - 1) + [(p, p) for p in self._padding] + [(0, 0)],
                       constant_values=pad_value)
        sizes = x.shape[-n - 1:-1]
        outs = [(s - k) // st + 1 for s, k, st in zip(sizes, self._kernel_size, self._stride)]
        if any(o <= 0 for o in outs):
            raise ValueError(f"{type(self).__name__}: the kernel {tuple(self._kernel_size)} is larger than "
                             f"the (padded) input {tuple(sizes)}")
        acc = None
        for offs in itertools.product(*[range(k) for k in self._kernel_size]):
            idx = tuple(slice(o, o + st * (m - 1) + 1, st) for o, st, m in zip(offs, self._stride, outs))
            win = x[(Ellipsis,) + idx + (slice(None),)]
            acc = win if acc is None else (mr.maximum(acc, win) if self._kind == "max" else acc + win)
        if self._kind == "avg":
            count = 1
            for k in self._kernel_size:
                count *= k
            acc = acc / count
        return acc


class MaxPool1d(_Pool):
    """Max over windows of (N, L, C) inputs (stride defaults to kernel_size; -inf padding)."""
    _kind, _n = "max", 1

    def __init__(self, kernel_size: Union[int, Tuple[int]], stride: Optional[Union[int, Tuple[int]]] = None,
                 padding: Union[int, Tuple[int]] = 0):
        super().__init__(kernel_size, stride, padding)


class AvgPool1d(_Pool):
    """Mean over windows of (N, L, C) inputs (zero padding counts in the mean, as MLX)."""
    _kind, _n = "avg", 1

    def __init__(self, kernel_size: Union[int, Tuple[int]], stride: Optional[Union[int, Tuple[int]]] = None,
                 padding: Union[int, Tuple[int]] = 0):
        super().__init__(kernel_size, stride, padding)


class MaxPool2d(_Pool):
    """Max over windows of (N, H, W, C) inputs."""
    _kind, _n = "max", 2

    def __init__(self, kernel_size: Union[int, Tuple[int, int]],
                 stride: Optional[Union[int, Tuple[int, int]]] = None, padding: Union[int, Tuple[int, int]] = 0):
        super().__init__(kernel_size, stride, padding)


class AvgPool2d(_Pool):
    """Mean over windows of (N, H, W, C) inputs."""
    _kind, _n = "avg", 2

    def __init__(self, kernel_size: Union[int, Tuple[int, int]],
                 stride: Optional[Union[int, Tuple[int, int]]] = None, padding: Union[int, Tuple[int, int]] = 0):
        super().__init__(kernel_size, stride, padding)


class MaxPool3d(_Pool):
    """Max over windows of (N, D, H, W, C) inputs.

        nn.MaxPool3d(kernel_size=2)(mr.zeros((1, 4, 4, 4, 3))).shape   # (1, 2, 2, 2, 3)
    """
    _kind, _n = "max", 3

    def __init__(self, kernel_size: Union[int, Tuple[int, int, int]],
                 stride: Optional[Union[int, Tuple[int, int, int]]] = None,
                 padding: Union[int, Tuple[int, int, int]] = 0):
        super().__init__(kernel_size, stride, padding)


class AvgPool3d(_Pool):
    """Mean over windows of (N, D, H, W, C) inputs (zero padding counts in the mean).

        nn.AvgPool3d(kernel_size=2, stride=1)(mr.zeros((1, 3, 3, 3, 1))).shape   # (1, 2, 2, 2, 1)
    """
    _kind, _n = "avg", 3

    def __init__(self, kernel_size: Union[int, Tuple[int, int, int]],
                 stride: Optional[Union[int, Tuple[int, int, int]]] = None,
                 padding: Union[int, Tuple[int, int, int]] = 0):
        super().__init__(kernel_size, stride, padding)
