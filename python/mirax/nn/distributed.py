"""Distributed training helpers of `mirax.nn` (MLX's `nn.average_gradients` and the
sharded linear layers), on `mirax.distributed`.

    grads = nn.average_gradients(grads)                  # data parallel: the mean over ranks
    up = nn.AllToShardedLinear.from_linear(fc1)          # tensor parallel: each rank keeps
    down = nn.ShardedToAllLinear.from_linear(fc2)        # a slice, down() sums them
"""
from __future__ import annotations

import math
from functools import lru_cache, reduce
from typing import Any, Callable, Optional, Union

from .. import distributed, ops
from .. import random as mrandom
from ..custom import custom_function
from ..utils import tree_flatten, tree_map, tree_map_with_path, tree_unflatten
from .layers.base import Module

__all__ = ["average_gradients", "AllToShardedLinear", "ShardedToAllLinear", "QuantizedAllToShardedLinear",
           "QuantizedShardedToAllLinear", "shard_linear", "shard_inplace"]


def average_gradients(gradients: Any, group: Optional[distributed.Group] = None,
                      all_reduce_size: int = 32 * 1024 ** 2, communication_stream=None):
    """The mean of a tree of gradients over the processes of `group` (default: the
    world). Arrays of one dtype are concatenated into all_sums of about
    `all_reduce_size` bytes each (<= 0: one all_sum per array).

    >>> grads = nn.average_gradients(grads)   # in a data-parallel training step
    """
    group = group or distributed.init()
    n = group.size()
    if n == 1:
        return gradients
    if all_reduce_size <= 0:
        return tree_map(lambda g: distributed.all_sum(g, group=group) / n, gradients)
    flat = tree_flatten(gradients)
    if not flat:
        return gradients
    dtypes = {g.dtype for _, g in flat}
    if len(dtypes) > 1:  # one buffer needs one dtype
        return average_gradients(gradients, group, 0)
    itemsize = next(iter(dtypes)).size
    out = []
    for chunk in _by_size([g.size for _, g in flat], itemsize, all_reduce_size):
        big = ops.concatenate([ops.reshape(flat[i][1], (-1,)) for i in chunk])
        big = distributed.all_sum(big, group=group) / n
        offsets = reduce(lambda acc, i: acc + [acc[-1] + flat[i][1].size], chunk, [0])
        parts = ops.split(big, offsets[1:-1]) if len(chunk) > 1 else [big]
        out += [(flat[i][0], ops.reshape(p, flat[i][1].shape)) for i, p in zip(chunk, parts)]
    return tree_unflatten(out)


def _by_size(sizes, itemsize, limit):
    """Consecutive indices in chunks of at least `limit` bytes (the last may be less)."""
    chunks, current, nbytes = [], [], 0
    for i, s in enumerate(sizes):
        current.append(i)
        nbytes += s * itemsize
        if nbytes >= limit:
            chunks.append(current)
            current, nbytes = [], 0
    return chunks + ([current] if current else [])


@lru_cache
def _sum_gradients(group):
    """The identity whose vjp sums the cotangents of the ranks: the input of a layer
    that each rank applies in part is the same on every rank."""
    if group.size() == 1:
        return lambda x: x

    @custom_function
    def f(x):
        return x

    @f.vjp
    def f_vjp(x, dx, _):
        return distributed.all_sum(dx, group=group)
    return f


def _split(weight, segments, axis):
    if isinstance(segments, int) or isinstance(segments[0], int):
        return ops.split(weight, segments, axis=axis)
    n = weight.shape[axis]
    return ops.split(weight, [int(s * n) for s in segments], axis=axis)


def _shard(parameters, predicate, group=None):
    """`parameters` with each array the predicate names cut along its axis: this rank's
    share of every one of its `segments` (fused QKV weights: segments=3)."""
    group = group or distributed.init()
    n, r = group.size(), group.rank()

    def cut(path, w):
        if not hasattr(w, "shape"):
            return w
        s = predicate(path, w)
        if s is None:
            return w
        if isinstance(s, int):
            axis, segments = s, 1
        elif isinstance(s, tuple):
            axis, segments = s
        else:
            raise ValueError("The sharding function should return int or tuple[int, list]")
        return ops.contiguous(ops.concatenate([_split(part, n, axis)[r] for part in _split(w, segments, axis)],
                                              axis=axis))
    return tree_map_with_path(cut, parameters)


def _all_to_sharded(segments):
    return lambda path, w: (-1, segments) if path.endswith("bias") else (max(w.ndim - 2, 0), segments)


def _sharded_to_all(segments):
    return lambda path, w: None if path.endswith("bias") else (-1, segments)


def _check_sharding(sharding):
    if sharding not in ("all-to-sharded", "sharded-to-all"):
        raise ValueError(f"Sharding type sharding={sharding!r} not supported, "
                         "choose one of 'all-to-sharded' or 'sharded-to-all'")


def shard_inplace(module: Module, sharding: Union[str, Callable], *, segments: Union[int, list] = 1,
                  group: Optional[distributed.Group] = None):
    """Replace `module`'s parameters by this rank's shard of them ("all-to-sharded",
    "sharded-to-all" or a callable `(path, weight) -> axis or (axis, segments)`)."""
    if isinstance(sharding, str):
        _check_sharding(sharding)
        sharding = _all_to_sharded(segments) if sharding == "all-to-sharded" else _sharded_to_all(segments)
    module.update(_shard(module.parameters(), sharding, group))


def shard_linear(module: Module, sharding: str, *, segments: Union[int, list] = 1,
                 group: Optional[distributed.Group] = None):
    """A new sharded layer from a `Linear` or `QuantizedLinear`.

    >>> fc = nn.shard_linear(nn.Linear(8, 8), "all-to-sharded")
    """
    from .layers.linear import Linear
    _check_sharding(sharding)
    make = {("all-to-sharded", True): AllToShardedLinear.from_linear,
            ("all-to-sharded", False): QuantizedAllToShardedLinear.from_quantized_linear,
            ("sharded-to-all", True): ShardedToAllLinear.from_linear,
            ("sharded-to-all", False): QuantizedShardedToAllLinear.from_quantized_linear}
    return make[sharding, isinstance(module, Linear)](module, segments=segments, group=group)


def _uniform(input_dims, shape):
    scale = math.sqrt(1.0 / input_dims)
    return mrandom.uniform(low=-scale, high=scale, shape=shape)


class _ShardedLinear(Module):
    """What the two sharded linear layers share: building one from a `Linear`, each rank
    keeping its slice of the parameters (`_predicate`: how each is cut)."""

    @classmethod
    def from_linear(cls, linear_layer: Module, *, segments: Union[int, list] = 1,
                    group: Optional[distributed.Group] = None):
        group = group or distributed.init()
        output_dims, input_dims = linear_layer.weight.shape
        sl = cls(input_dims, output_dims, "bias" in linear_layer, group)
        sl.update(_shard(linear_layer.parameters(), cls._predicate(segments), group))
        return sl


class AllToShardedLinear(_ShardedLinear):
    """A linear layer of which each rank computes a slice of the outputs: the input is
    the same on every rank, the output is sharded (its gradient summed over the ranks).

    >>> layer = nn.AllToShardedLinear(8, 16)   # on 2 ranks: (.., 8) -> (.., 8) each
    """
    _predicate = staticmethod(_all_to_sharded)

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True,
                 group: Optional[distributed.Group] = None):
        super().__init__()
        self.group = group or distributed.init()
        n = self.group.size()
        if output_dims % n:
            raise ValueError(f"Cannot shard the output of size {output_dims} across {n} devices.")
        self.weight = _uniform(input_dims, (output_dims // n, input_dims))
        if bias:
            self.bias = _uniform(input_dims, (output_dims // n,))

    def _extra_repr(self):
        out_dims, in_dims = self.weight.shape
        return f"input_dims={in_dims}, output_dims={out_dims * self.group.size()}, bias={'bias' in self}"

    def __call__(self, x):
        x = _sum_gradients(self.group)(x)
        if "bias" in self:
            return ops.addmm(self["bias"], x, self["weight"].T)
        return x @ self["weight"].T


class ShardedToAllLinear(_ShardedLinear):
    """A linear layer of which each rank holds a slice of the inputs: the partial
    products are summed over the ranks, so every rank gets the whole output.

    >>> layer = nn.ShardedToAllLinear(16, 8)   # on 2 ranks: (.., 8) each -> (.., 8)
    """
    _predicate = staticmethod(_sharded_to_all)

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True,
                 group: Optional[distributed.Group] = None):
        super().__init__()
        self.group = group or distributed.init()
        n = self.group.size()
        if input_dims % n:
            raise ValueError(f"The input of size {input_dims} cannot be sharded across {n} devices.")
        self.weight = _uniform(input_dims, (output_dims, input_dims // n))
        if bias:
            self.bias = _uniform(input_dims, (output_dims,))

    def _extra_repr(self):
        out_dims, in_dims = self.weight.shape
        return f"input_dims={in_dims * self.group.size()}, output_dims={out_dims}, bias={'bias' in self}"

    def __call__(self, x):
        x = distributed.all_sum(x @ self["weight"].T, group=self.group)
        if "bias" in self:
            x = x + self["bias"]
        return x


class _QuantizedSharded(Module):
    """The quantized forms: frozen packed weights, as `QuantizedLinear`."""

    def __init__(self, input_dims, output_dims, bias, group_size, bits, mode, group, shape, bias_dims):
        super().__init__()
        self.group_size, self.bits, self.mode = group_size, bits, mode
        self.group = group
        weight = _uniform(input_dims, shape)
        self.weight, self.scales, *biases = ops.quantize(weight, group_size, bits, mode=mode)
        self.biases = biases[0] if biases else None
        if bias:
            self.bias = ops.zeros((bias_dims,))
        self.freeze()

    def unfreeze(self, *args, **kwargs):
        super().unfreeze(*args, **kwargs)
        self.freeze(recurse=False)

    def _matmul(self, x):
        return ops.quantized_matmul(x, self["weight"], scales=self["scales"], biases=self.get("biases"),
                                    transpose=True, group_size=self.group_size, bits=self.bits, mode=self.mode)

    @classmethod
    def from_quantized_linear(cls, quantized_linear_layer: Module, *, segments: Union[int, list] = 1,
                              group: Optional[distributed.Group] = None):
        group = group or distributed.init()
        q = quantized_linear_layer
        output_dims, input_dims = q.weight.shape
        input_dims = input_dims * 32 // q.bits
        sl = cls(input_dims, output_dims, "bias" in q, group_size=q.group_size, bits=q.bits,
                 mode=getattr(q, "mode", "affine"), group=group)
        sl.update(_shard(q.parameters(), cls._predicate(segments), group))
        return sl


class QuantizedAllToShardedLinear(_QuantizedSharded):
    """`AllToShardedLinear` with a quantized weight (frozen, as `QuantizedLinear`)."""
    _predicate = staticmethod(_all_to_sharded)

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group_size: int = 64, bits: int = 4,
                 mode: str = "affine", group: Optional[distributed.Group] = None):
        group = group or distributed.init()
        n = group.size()
        if output_dims % n:
            raise ValueError(f"Cannot shard the output of size {output_dims} across {n} devices.")
        super().__init__(input_dims, output_dims, bias, group_size, bits, mode, group,
                         (output_dims // n, input_dims), output_dims // n)

    def __call__(self, x):
        x = self._matmul(_sum_gradients(self.group)(x))
        return x + self["bias"] if "bias" in self else x


class QuantizedShardedToAllLinear(_QuantizedSharded):
    """`ShardedToAllLinear` with a quantized weight (frozen, as `QuantizedLinear`)."""
    _predicate = staticmethod(_sharded_to_all)

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group_size: int = 64, bits: int = 4,
                 mode: str = "affine", group: Optional[distributed.Group] = None):
        group = group or distributed.init()
        n = group.size()
        if input_dims % n:
            raise ValueError(f"The input of size {input_dims} cannot be sharded across {n} devices.")
        super().__init__(input_dims, output_dims, bias, group_size, bits, mode, group,
                         (output_dims, input_dims // n), output_dims)

    def __call__(self, x):
        x = distributed.all_sum(self._matmul(x), group=self.group)
        return x + self["bias"] if "bias" in self else x
