"""Normalization layers, as `mlx.nn`: LayerNorm, RMSNorm, GroupNorm, InstanceNorm, BatchNorm.

mirax has no fused kernels (`mx.fast.layer_norm`/`rms_norm`); these are the same
formulas in ordinary ops. Half-precision inputs are normalized in float32 and cast back.
"""
from __future__ import annotations

from typing import Tuple

from ... import ops as mr
from ...dialect import dtypes as dt
from .base import Module

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm", "BatchNorm"]


def _up(x):
    return x.astype(dt.float32) if x.dtype in (dt.float16, dt.bfloat16) else x


def _layer_norm(x, weight, bias, eps, axis=-1):
    xf = _up(x)
    mean = mr.mean(xf, axis=axis, keepdims=True)
    var = mr.var(xf, axis=axis, keepdims=True)
    y = ((xf - mean) * mr.rsqrt(var + eps)).astype(x.dtype)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _rms_norm(x, weight, eps):
    xf = _up(x)
    y = (xf * mr.rsqrt(mr.mean(mr.square(xf), axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return y * weight if weight is not None else y


class LayerNorm(Module):
    r"""(x - E[x]) / sqrt(Var[x] + eps) * weight + bias over the last axis
    (weight ones, bias zeros)."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = True, bias: bool = True):
        super().__init__()
        if eps <= 0.0:
            raise ValueError(f"[LayerNorm] 'eps' must be positive but got {eps}.")
        if affine:
            self.weight = mr.ones((dims,))
            if bias:
                self.bias = mr.zeros((dims,))
        self.eps = eps
        self.dims = dims

    def _extra_repr(self):
        return f"{self.dims}, eps={self.eps}, affine={'weight' in self}"

    def __call__(self, x):
        return _layer_norm(x, self.get("weight"), self.get("bias"), self.eps)


class RMSNorm(Module):
    r"""x / sqrt(E[x^2] + eps) * weight over the last axis (weight ones)."""

    def __init__(self, dims: int, eps: float = 1e-5):
        super().__init__()
        if eps <= 0.0:
            raise ValueError(f"[RMSNorm] 'eps' must be positive but got {eps}.")
        self.weight = mr.ones((dims,))
        self.eps = eps

    def _extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"

    def __call__(self, x):
        return _rms_norm(x, self["weight"], self.eps)


class GroupNorm(Module):
    r"""Normalize groups of channels (the last axis) over the group and all the
    non-batch axes. MLX's default groups channels strided (channel c in group
    c % num_groups); `pytorch_compatible=True` groups them contiguously."""

    def __init__(self, num_groups: int, dims: int, eps: float = 1e-5, affine: bool = True,
                 pytorch_compatible: bool = False):
        super().__init__()
        if eps <= 0.0:
            raise ValueError(f"[GroupNorm] 'eps' must be positive but got {eps}.")
        if num_groups <= 0:
            raise ValueError(f"The number of groups ({num_groups}) must be a positive integer.")
        if dims <= 0:
            raise ValueError(f"The number of features ({dims}) must be a positive integer.")
        if dims % num_groups != 0:
            raise ValueError(f"The number of features ({dims}) must be evenly divisible"
                             f" by the number of groups ({num_groups}).")
        if affine:
            self.bias = mr.zeros((dims,))
            self.weight = mr.ones((dims,))
        self.num_groups = num_groups
        self.dims = dims
        self.eps = eps
        self.pytorch_compatible = pytorch_compatible

    def _extra_repr(self):
        return (f"{self.num_groups}, {self.dims}, eps={self.eps}, "
                f"affine={'weight' in self}, pytorch_compatible={self.pytorch_compatible}")

    def _pytorch_compatible_group_norm(self, x):
        g = self.num_groups
        batch, *rest, dims = x.shape
        gs = dims // g
        x = x.reshape(batch, -1, g, gs)
        x = x.transpose(0, 2, 1, 3).reshape(batch, g, -1)
        x = _layer_norm(x, None, None, self.eps)
        x = x.reshape(batch, g, -1, gs)
        return x.transpose(0, 2, 1, 3).reshape(batch, *rest, dims)

    def _group_norm(self, x):
        g = self.num_groups
        batch, *rest, dims = x.shape
        xs = x.reshape(batch, -1, g)
        xf = _up(xs)
        means = mr.mean(xf, axis=1, keepdims=True)
        var = mr.var(xf, axis=1, keepdims=True)
        xs = ((xf - means) * mr.rsqrt(var + self.eps)).astype(x.dtype)
        return xs.reshape(batch, *rest, dims)

    def __call__(self, x):
        fn = self._pytorch_compatible_group_norm if self.pytorch_compatible else self._group_norm
        x = fn(x)
        return (self.weight * x + self.bias) if "weight" in self else x


class InstanceNorm(Module):
    r"""Normalize each channel (the last axis) of each sample over its spatial axes;
    inputs are (N, ..., C)."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = False):
        super().__init__()
        if eps <= 0.0:
            raise ValueError(f"[InstanceNorm] 'eps' must be positive but got {eps}.")
        if affine:
            self.weight = mr.ones((dims,))
            self.bias = mr.zeros((dims,))
        self.dims = dims
        self.eps = eps

    def _extra_repr(self):
        return f"{self.dims}, eps={self.eps}, affine={'weight' in self}"

    def __call__(self, x):
        if x.ndim < 3:
            raise ValueError(f"InstanceNorm expects inputs with at least 3 dimensions"
                             f" (N, ..., C) but the input has {x.ndim} dimensions.")
        axes = tuple(range(1, x.ndim - 1))
        xf = _up(x)
        mean = mr.mean(xf, axis=axes, keepdims=True)
        var = mr.var(xf, axis=axes, keepdims=True)
        x = ((xf - mean) * mr.rsqrt(var + self.eps)).astype(x.dtype)
        return (self.weight * x + self.bias) if "weight" in self else x


class BatchNorm(Module):
    r"""Normalize each feature (the last axis) over all the other axes of the batch.

    In training mode the batch statistics are used and, with `track_running_stats`,
    `running_mean`/`running_var` (frozen, not trained) are updated as
    `(1 - momentum) * running + momentum * batch` (the variance unbiased); in eval
    mode the running statistics are used."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True):
        super().__init__()
        if eps <= 0.0:
            raise ValueError(f"[BatchNorm] 'eps' must be positive but got {eps}.")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = mr.ones((num_features,))
            self.bias = mr.zeros((num_features,))
        if self.track_running_stats:
            self.running_mean = mr.zeros((num_features,))
            self.running_var = mr.ones((num_features,))
            self.freeze(keys=["running_mean", "running_var"], recurse=False)

    def unfreeze(self, *args, **kwargs):
        """Unfreeze as `Module.unfreeze`; the running statistics stay frozen."""
        super().unfreeze(*args, **kwargs)
        if self.track_running_stats:
            self.freeze(keys=["running_mean", "running_var"], recurse=False)
        return self

    def _extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={'weight' in self}, track_running_stats={self.track_running_stats}")

    def _calc_stats(self, x, ddof: int = 0) -> Tuple:
        axes = tuple(range(0, x.ndim - 1))
        return mr.mean(x, axis=axes), mr.var(x, axis=axes, ddof=ddof)

    def __call__(self, x):
        if x.ndim < 2 or x.ndim > 4:
            raise ValueError(f"Expected input tensor to have 2, 3 or 4 dimensions, but got {x.ndim}")
        if self.training:
            n = 1
            for s in x.shape[:-1]:
                n *= s
            if n == 1:
                raise ValueError("BatchNorm training requires more than one value per channel.")
        mean, var = self._calc_stats(x)
        if self.training and self.track_running_stats:
            mu = self.momentum
            _, unbiased = self._calc_stats(x, ddof=1)
            self.running_mean = (1 - mu) * self.running_mean + mu * mr.stop_gradient(mean)
            self.running_var = (1 - mu) * self.running_var + mu * mr.stop_gradient(unbiased)
        elif self.track_running_stats:
            mean, var = self.running_mean, self.running_var
        x = (x - mean) * mr.rsqrt(var + self.eps)
        return (self.weight * x + self.bias) if "weight" in self else x
