"""Quantized layers and `nn.quantize`, as `mlx.nn`: the weight is kept packed by
`mr.quantize` (parameters `weight`, `scales`, `biases`, frozen) and used through
`mr.quantized_matmul` / `mr.dequantize`.

    model = nn.Sequential(nn.Embedding(100, 64), nn.Linear(64, 64))
    nn.quantize(model, group_size=32, bits=4)   # Embedding -> QuantizedEmbedding, Linear -> QuantizedLinear
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

from ... import ops
from ... import random as mrandom
from .base import Module

__all__ = ["QuantizedLinear", "QuantizedEmbedding", "quantize"]

_MODE_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "nvfp4": (16, 4), "mxfp8": (32, 8)}


def _defaults_for_mode(mode, group_size, bits):
    if mode not in _MODE_DEFAULTS:
        raise ValueError(f"Invalid quantization mode '{mode}'. Valid modes are: {', '.join(_MODE_DEFAULTS)}.")
    default_group_size, default_bits = _MODE_DEFAULTS[mode]
    return group_size or default_group_size, bits or default_bits


def _map_modules(fn, tree, path=""):
    """`fn(dotted_path, module)` at every module of a nested dict/list of modules."""
    if isinstance(tree, Module):
        return fn(path, tree)
    prefix = f"{path}." if path else ""
    if isinstance(tree, dict):
        return {k: _map_modules(fn, v, f"{prefix}{k}") for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_modules(fn, v, f"{prefix}{i}") for i, v in enumerate(tree))
    return tree


def quantize(model: Module, group_size: int = None, bits: int = None, *, mode: str = "affine",
             quantize_input: bool = False,
             class_predicate: Optional[Callable[[str, Module], Union[bool, dict]]] = None):
    """Replace, in place, the leaf modules of `model` that `class_predicate(path, module)`
    selects (default: those with a `to_quantized` method) by `module.to_quantized(...)`;
    a predicate may return a dict of keyword arguments for `to_quantized` instead of True.

        nn.quantize(model, 64, 4, class_predicate=lambda p, m: isinstance(m, nn.Linear))
    """
    class_predicate = class_predicate or (lambda _, m: hasattr(m, "to_quantized"))

    def maybe_quantize(path, m):
        chosen = class_predicate(path, m)
        if not chosen:
            return m
        if not hasattr(m, "to_quantized"):
            raise ValueError(f"Unable to quantize model of type {type(m)}")
        if isinstance(chosen, bool):
            kwargs = {"group_size": group_size, "bits": bits, "mode": mode}
            if quantize_input:
                kwargs["quantize_input"] = quantize_input
            return m.to_quantized(**kwargs)
        if isinstance(chosen, dict):
            if "quantize_input" in chosen and not chosen["quantize_input"]:
                chosen = {k: v for k, v in chosen.items() if k != "quantize_input"}
            return m.to_quantized(**chosen)
        raise ValueError("``class_predicate`` must return a bool or a dict of parameters to pass to "
                         "``to_quantized``")

    model.update_modules(_map_modules(maybe_quantize, model.leaf_modules()))


class QuantizedEmbedding(Module):
    """`Embedding` with a quantized (num_embeddings, dims) table: a lookup dequantizes
    the rows it takes; `as_linear` multiplies by the table's transpose.

        emb = nn.QuantizedEmbedding(1000, 64, group_size=32, bits=4)
        emb(mr.array([3, 7])).shape    # (2, 64)
    """

    def __init__(self, num_embeddings: int, dims: int, group_size: int = None, bits: int = None,
                 mode: str = "affine"):
        super().__init__()
        self.group_size, self.bits = _defaults_for_mode(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1 / dims)
        weight = mrandom.normal(shape=(num_embeddings, dims), scale=scale)
        self.weight, self.scales, *biases = ops.quantize(weight, group_size, bits, mode=mode)
        self.biases = biases[0] if biases else None
        self.num_embeddings = num_embeddings
        self.dims = dims
        self.freeze()

    def __call__(self, x):
        biases = self.get("biases")
        return ops.dequantize(self["weight"][x], scales=self["scales"][x],
                              biases=biases[x] if biases is not None else None,
                              group_size=self.group_size, bits=self.bits, mode=self.mode)

    def as_linear(self, x):
        """x @ table.T through `quantized_matmul` (tied input and output embeddings)."""
        return ops.quantized_matmul(x, self["weight"], scales=self["scales"], biases=self.get("biases"),
                                    transpose=True, group_size=self.group_size, bits=self.bits, mode=self.mode)

    def _extra_repr(self):
        return (f"{self.num_embeddings}, {self.dims}, group_size={self.group_size}, bits={self.bits}, "
                f"mode={self.mode}")

    @classmethod
    def from_embedding(cls, embedding_layer: Module, group_size: int = None, bits: int = None,
                       mode: str = "affine"):
        """A `QuantizedEmbedding` holding `embedding_layer`'s table, quantized."""
        num_embeddings, dims = embedding_layer.weight.shape
        ql = cls(num_embeddings, dims, group_size, bits, mode=mode)
        ql.weight, ql.scales, *biases = ops.quantize(embedding_layer.weight, group_size, bits, mode=mode)
        ql.biases = biases[0] if biases else None
        return ql


class QuantizedLinear(Module):
    """`Linear` with a quantized weight: y = quantized_matmul(x, W) + b. The quantized
    parameters are frozen, as in MLX (a bias taken over by `from_linear` stays trainable).

        layer = nn.QuantizedLinear(64, 16, group_size=32, bits=8)
        layer(mr.ones((2, 64))).shape  # (2, 16)
    """

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group_size: int = None,
                 bits: int = None, mode: str = "affine"):
        super().__init__()
        self.group_size, self.bits = _defaults_for_mode(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1 / input_dims)
        weight = mrandom.uniform(low=-scale, high=scale, shape=(output_dims, input_dims))
        self.weight, self.scales, *biases = ops.quantize(weight, group_size, bits, mode=mode)
        self.biases = biases[0] if biases else None
        if bias:
            self.bias = ops.zeros((output_dims,))
        self.freeze()

    def _extra_repr(self):
        out_dims, in_dims = self.weight.shape
        in_dims = (in_dims * 32) // self.bits
        return (f"input_dims={in_dims}, output_dims={out_dims}, bias={'bias' in self}, "
                f"group_size={self.group_size}, bits={self.bits}, mode={self.mode}")

    def __call__(self, x):
        x = ops.quantized_matmul(x, self["weight"], scales=self["scales"], biases=self.get("biases"),
                                 transpose=True, group_size=self.group_size, bits=self.bits, mode=self.mode)
        if "bias" in self:
            x = x + self["bias"]
        return x

    @classmethod
    def from_linear(cls, linear_layer: Module, group_size: int = None, bits: int = None, mode: str = "affine"):
        """A `QuantizedLinear` holding `linear_layer`'s weight, quantized, and its bias."""
        output_dims, input_dims = linear_layer.weight.shape
        ql = cls(input_dims, output_dims, False, group_size, bits, mode=mode)
        ql.weight, ql.scales, *biases = ops.quantize(linear_layer.weight, group_size, bits, mode=mode)
        ql.biases = biases[0] if biases else None
        if "bias" in linear_layer:
            ql.bias = linear_layer.bias
        return ql
