"""Spatial upsampling of channels-last inputs (N, *spatial, C), as `mlx.nn`: nearest
neighbour, (bi/tri)linear and (bi)cubic interpolation, with MLX's sampling grids
(`align_corners`) and its cubic kernel (a = -0.75, borders clamped).

    up = nn.Upsample(scale_factor=2, mode="linear")
    y = up(mr.zeros((1, 4, 4, 3)))                      # (1, 8, 8, 3)
    y = nn.upsample_cubic(x, (2.0, 1.5), align_corners=True)
"""
from __future__ import annotations

import operator
from functools import reduce
from itertools import product
from typing import Callable, Literal, Tuple, Union

from ... import ops as mr
from ...dialect import dtypes as dt
from .base import Module

__all__ = ["Upsample", "upsample_nearest", "upsample_linear", "upsample_cubic"]


def _along(indices, dim, ndims):
    """`indices` (M,) shaped to broadcast along spatial axis `dim` of `ndims`."""
    shape = [1] * ndims
    shape[dim] = -1
    return indices.reshape(shape)


def _scaled_indices(N, scale, align_corners, dim, ndims):
    """The (fractional) input coordinate of each of the int(scale * N) outputs."""
    M = int(scale * N)
    if align_corners:
        indices = mr.arange(M, dtype=dt.float32) * ((N - 1) / max(M - 1, 1))
    else:  # output pixel centres mapped onto input pixel centres
        step = 1 / scale
        start = ((M - 1) * step - N + 1) / 2
        indices = mr.arange(M, dtype=dt.float32) * step - start
    return _along(indices, dim, ndims)


def _nearest_indices(N, scale, dim, ndims):
    M = int(scale * N)
    indices = mr.arange(M, dtype=dt.float32)
    if M > N:
        indices = mr.round((indices + 0.5) * (N / M) - 0.5)
    else:
        indices = indices * (N / M)
    return _along(indices.astype(dt.uint32), dim, ndims)


def _linear_indices(N, scale, align_corners, dim, ndims):
    """[(indices, weight)] of the two neighbours of each output coordinate."""
    indices = mr.clip(_scaled_indices(N, scale, align_corners, dim, ndims), a_min=0, a_max=N - 1)
    left, right = mr.floor(indices), mr.ceil(indices)
    weight = mr.expand_dims(indices - left, -1)
    return ((left.astype(dt.uint32), 1 - weight), (right.astype(dt.uint32), weight))


def _cubic_weight(x, near: bool):
    """Keys' cubic kernel with a = -0.75 (OpenCV's) at distance x: |x| <= 1 if `near`,
    else 1 < |x| <= 2."""
    a = -0.75
    if near:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    return (((x - 5) * x + 8) * x - 4) * a


def _cubic_indices(N, scale, align_corners, dim, ndims):
    """[(indices, weight)] of the four neighbours of each output coordinate; the
    indices clamp to the border (edge padding)."""
    indices = _scaled_indices(N, scale, align_corners, dim, ndims)
    l1 = mr.floor(indices)
    r1 = mr.floor(indices + 1)
    out = []
    for grid, near in ((l1, True), (r1, True), (l1 - 1, False), (r1 + 1, False)):
        weight = mr.expand_dims(_cubic_weight(mr.abs(indices - grid), near), -1)
        out.append((mr.clip(grid, a_min=0, a_max=N - 1).astype(dt.uint32), weight))
    return tuple(out)


def _check_scales(x, scale_factor, name):
    if x.ndim - 2 != len(scale_factor):
        raise ValueError(f"[{name}] A scale needs to be provided for each spatial dimension: "
                         f"got {len(scale_factor)} scales for an input of shape {x.shape}")


def upsample_nearest(x, scale_factor: Tuple):
    """Nearest-neighbour upsampling of x (N, *spatial, C) by one factor per spatial axis.

        upsample_nearest(mr.zeros((1, 2, 2, 1)), (2, 2)).shape   # (1, 4, 4, 1)
    """
    _check_scales(x, scale_factor, "upsample_nearest")
    dims = x.ndim - 2
    if tuple(map(int, scale_factor)) == tuple(scale_factor):
        # integer factors: repeat each element by broadcasting a new axis after it
        shape = list(x.shape)
        for d in range(dims):
            shape.insert(2 + 2 * d, 1)
        x = x.reshape(shape)
        for d in range(dims):
            shape[2 + 2 * d] = int(scale_factor[d])
        x = mr.broadcast_to(x, shape)
        for d in range(dims):
            shape[d + 1] *= shape[d + 2]
            shape.pop(d + 2)
        return x.reshape(shape)
    index = [slice(None)]
    for i, (n, s) in enumerate(zip(x.shape[1:-1], scale_factor)):
        index.append(_nearest_indices(n, s, i, dims))
    return x[tuple(index)]


def _interpolate(x, scale_factor: Tuple, indices_fn: Callable, align_corners: bool, name: str):
    _check_scales(x, scale_factor, name)
    dims = x.ndim - 2
    per_axis = [indices_fn(n, s, align_corners, i, dims) for i, (n, s) in enumerate(zip(x.shape[1:-1], scale_factor))]
    # one gathered sample and one product of per-axis weights per corner of the stencil
    out = None
    for corner in product(*per_axis):
        idx, weights = zip(*corner)
        term = reduce(operator.mul, weights) * x[(slice(None),) + idx]
        out = term if out is None else out + term
    return out


def upsample_linear(x, scale_factor: Tuple, align_corners: bool = False):
    """(Bi/tri)linear upsampling of x (N, *spatial, C); the result is floating point.

        upsample_linear(x, (2.0, 2.0), align_corners=True)
    """
    return _interpolate(x, scale_factor, _linear_indices, align_corners, "upsample_linear")


def upsample_cubic(x, scale_factor: Tuple, align_corners: bool = False):
    """Cubic (bicubic for 2 spatial axes) upsampling of x (N, *spatial, C).

        upsample_cubic(x, (2.0, 2.0))
    """
    return _interpolate(x, scale_factor, _cubic_indices, align_corners, "upsample_cubic")


class Upsample(Module):
    """Upsample the spatial axes (1 to ndim - 2) of channels-last inputs.

    Args:
        scale_factor (float or tuple): the multiplier of every spatial size, or one per axis.
        mode: "nearest", "linear" or "cubic". Default "nearest".
        align_corners (bool): for "linear"/"cubic", map the corner pixels of input and
            output onto each other instead of their pixel centres. Default False.

        up = nn.Upsample(scale_factor=2, mode="linear", align_corners=True)
        up(mr.arange(1, 5).reshape(1, 2, 2, 1)).squeeze()   # 4x4, corners 1, 2, 3, 4
    """

    def __init__(self, scale_factor: Union[float, Tuple], mode: Literal["nearest", "linear", "cubic"] = "nearest",
                 align_corners: bool = False):
        super().__init__()
        if mode not in ("nearest", "linear", "cubic"):
            raise ValueError(f"[Upsample] Got unsupported upsampling algorithm: {mode}")
        if isinstance(scale_factor, (list, tuple)):
            self.scale_factor = tuple(map(float, scale_factor))
        else:
            self.scale_factor = float(scale_factor)
        self.mode = mode
        self.align_corners = align_corners

    def _extra_repr(self) -> str:
        return f"scale_factor={self.scale_factor}, mode={self.mode!r}, align_corners={self.align_corners}"

    def __call__(self, x):
        dims = x.ndim - 2
        if dims <= 0:
            raise ValueError(f"[Upsample] The input should have at least 1 spatial dimension which means it "
                             f"should be at least 3D but {x.ndim}D was provided")
        scale_factor = self.scale_factor
        if isinstance(scale_factor, tuple):
            if len(scale_factor) != dims:
                raise ValueError(f"[Upsample] One scale per spatial dimension is required but "
                                 f"scale_factor={scale_factor} and the number of spatial dimensions were {dims}")
        else:
            scale_factor = (scale_factor,) * dims
        if self.mode == "nearest":
            return upsample_nearest(x, scale_factor)
        if self.mode == "linear":
            return upsample_linear(x, scale_factor, self.align_corners)
        return upsample_cubic(x, scale_factor, self.align_corners)
