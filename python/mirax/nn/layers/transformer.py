"""MultiHeadAttention and the Transformer blocks, as `mlx.nn`.

mirax has no fused attention; `scaled_dot_product_attention` here is the plain
softmax(q k^T * scale + mask) v with MLX's mask conventions (additive float masks,
boolean masks where True keeps, or "causal")."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from ... import ops as mr
from ...array import Array, array
from ...dialect import dtypes as dt
from .activations import relu
from .base import Module
from .dropout import Dropout
from .linear import Linear
from .normalization import LayerNorm

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "TransformerEncoderLayer",
           "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]


def _finfo_min(d):
    if d is dt.bfloat16:
        return -3.3895313892515355e38
    return float(np.finfo(d.storage).min)


def scaled_dot_product_attention(queries, keys, values, scale: float, mask=None):
    """softmax(queries @ keys^T * scale + mask) @ values over (..., heads, L, D) arrays.

    `mask`: None, "causal", a boolean array (True attends) or an additive array, all
    broadcast against the (..., L_q, L_k) scores."""
    scores = (queries * scale) @ keys.swapaxes(-1, -2)
    if mask is not None:
        if isinstance(mask, str):
            if mask != "causal":
                raise ValueError(f"Unsupported mask {mask!r}; the only string mask is 'causal'")
            lq, lk = scores.shape[-2], scores.shape[-1]
            qi = mr.arange(lk - lq, lk, dtype=dt.int32)
            ki = mr.arange(0, lk, dtype=dt.int32)
            mask = mr.expand_dims(qi, -1) >= mr.expand_dims(ki, 0)
        mask = mask if isinstance(mask, Array) else array(mask)
        if mask.dtype is dt.bool_:
            scores = mr.where(mask, scores, array(_finfo_min(scores.dtype), scores.dtype))
        else:
            scores = scores + mask.astype(scores.dtype)
    weights = mr.softmax(scores, axis=-1, precise=True)
    return weights @ values


class MultiHeadAttention(Module):
    """Multi-head attention: project queries/keys/values, attend per head, project out.

    Inputs are (..., L, dims); `mask` is added to (or, boolean, selects) the attention
    scores of shape (..., num_heads, L_q, L_k) after broadcasting."""

    def __init__(self, dims: int, num_heads: int, query_input_dims: Optional[int] = None,
                 key_input_dims: Optional[int] = None, value_input_dims: Optional[int] = None,
                 value_dims: Optional[int] = None, value_output_dims: Optional[int] = None,
                 bias: bool = False):
        super().__init__()
        if (dims % num_heads) != 0:
            raise ValueError("The input feature dimensions should be divisible by the "
                             f"number of heads ({dims} % {num_heads}) != 0")
        query_input_dims = query_input_dims or dims
        key_input_dims = key_input_dims or dims
        value_input_dims = value_input_dims or key_input_dims
        value_dims = value_dims or dims
        value_output_dims = value_output_dims or dims
        self.num_heads = num_heads
        self.query_proj = Linear(query_input_dims, dims, bias=bias)
        self.key_proj = Linear(key_input_dims, dims, bias=bias)
        self.value_proj = Linear(value_input_dims, value_dims, bias=bias)
        self.out_proj = Linear(value_dims, value_output_dims, bias=bias)

    def _heads(self, x):
        x = x.reshape(*x.shape[:-1], self.num_heads, -1)
        return x.swapaxes(-2, -3)  # (..., heads, L, d)

    def __call__(self, queries, keys, values, mask=None):
        queries = self._heads(self.query_proj(queries))
        keys = self._heads(self.key_proj(keys))
        values = self._heads(self.value_proj(values))
        scale = math.sqrt(1 / queries.shape[-1])
        out = scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)
        out = out.swapaxes(-2, -3)
        out = out.reshape(*out.shape[:-2], -1)
        return self.out_proj(out)

    @staticmethod
    def create_additive_causal_mask(N: int, dtype=dt.float32):
        """(N, N): 0 where j <= i, the dtype's most negative value where j > i."""
        indices = mr.arange(N)
        mask = mr.expand_dims(indices, 1) < mr.expand_dims(indices, 0)
        d = dt.to_dtype(dtype)
        return mask.astype(d) * _finfo_min(d)


class TransformerEncoderLayer(Module):
    def __init__(self, dims: int, num_heads: int, mlp_dims: Optional[int] = None, dropout: float = 0.0,
                 activation: Callable[[Any], Any] = relu, norm_first: bool = True):
        super().__init__()
        mlp_dims = mlp_dims or dims * 4
        self.attention = MultiHeadAttention(dims, num_heads)
        self.ln1 = LayerNorm(dims)
        self.ln2 = LayerNorm(dims)
        self.linear1 = Linear(dims, mlp_dims)
        self.linear2 = Linear(mlp_dims, dims)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation
        self.norm_first = norm_first

    def __call__(self, x, mask):
        if self.norm_first:
            y = self.ln1(x)
            y = self.attention(y, y, y, mask)
            y = self.dropout1(y)
            x = x + y
            y = self.ln2(x)
            y = self.linear1(y)
            y = self.activation(y)
            y = self.dropout2(y)
            y = self.linear2(y)
            return x + y
        y = self.attention(x, x, x, mask)
        y = self.dropout1(y)
        x = self.ln1(x + y)
        y = self.linear1(x)
        y = self.activation(y)
        y = self.dropout2(y)
        y = self.linear2(y)
        return self.ln2(x + y)


class TransformerEncoder(Module):
    def __init__(self, num_layers: int, dims: int, num_heads: int, mlp_dims: Optional[int] = None,
                 dropout: float = 0.0, activation=relu, norm_first: bool = True, checkpoint: bool = False):
        super().__init__()
        self.layers = [TransformerEncoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first)
                       for _ in range(num_layers)]
        self.ln = LayerNorm(dims)
        self.checkpoint = checkpoint

    def __call__(self, x, mask):
        from ..utils import checkpoint
        for layer in self.layers:
            layer = checkpoint(layer) if self.checkpoint else layer
            x = layer(x, mask)
        return self.ln(x)


class TransformerDecoderLayer(Module):
    def __init__(self, dims: int, num_heads: int, mlp_dims: Optional[int] = None, dropout: float = 0.0,
                 activation: Callable[[Any], Any] = relu, norm_first: bool = True):
        super().__init__()
        mlp_dims = mlp_dims or dims * 4
        self.self_attention = MultiHeadAttention(dims, num_heads)
        self.cross_attention = MultiHeadAttention(dims, num_heads)
        self.ln1 = LayerNorm(dims)
        self.ln2 = LayerNorm(dims)
        self.ln3 = LayerNorm(dims)
        self.linear1 = Linear(dims, mlp_dims)
        self.linear2 = Linear(mlp_dims, dims)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = activation
        self.norm_first = norm_first

    def __call__(self, x, memory, x_mask, memory_mask):
        if self.norm_first:
            y = self.ln1(x)
            y = self.self_attention(y, y, y, x_mask)
            y = self.dropout1(y)
            x = x + y
            y = self.ln2(x)
            y = self.cross_attention(y, memory, memory, memory_mask)
            y = self.dropout2(y)
            x = x + y
            y = self.ln3(x)
            y = self.linear1(y)
            y = self.activation(y)
            y = self.dropout3(y)
            y = self.linear2(y)
            return x + y
        y = self.self_attention(x, x, x, x_mask)
        y = self.dropout1(y)
        x = self.ln1(x + y)
        y = self.cross_attention(x, memory, memory, memory_mask)
        y = self.dropout2(y)
        x = self.ln2(x + y)
        y = self.linear1(x)
        y = self.activation(y)
        y = self.dropout3(y)
        y = self.linear2(y)
        return self.ln3(x + y)


class TransformerDecoder(Module):
    def __init__(self, num_layers: int, dims: int, num_heads: int, mlp_dims: Optional[int] = None,
                 dropout: float = 0.0, activation=relu, norm_first: bool = True, checkpoint: bool = False):
        super().__init__()
        self.layers = [TransformerDecoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first)
                       for _ in range(num_layers)]
        self.ln = LayerNorm(dims)
        self.checkpoint = checkpoint

    def __call__(self, x, memory, x_mask, memory_mask):
        from ..utils import checkpoint
        for layer in self.layers:
            layer = checkpoint(layer) if self.checkpoint else layer
            x = layer(x, memory, x_mask, memory_mask)
        return self.ln(x)


class Transformer(Module):
    """Encoder-decoder transformer (MLX's defaults: dims 512, 8 heads, 6 + 6 layers)."""

    def __init__(self, dims: int = 512, num_heads: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, mlp_dims: Optional[int] = None, dropout: float = 0.0,
                 activation: Callable[[Any], Any] = relu, custom_encoder: Optional[Any] = None,
                 custom_decoder: Optional[Any] = None, norm_first: bool = True, checkpoint: bool = False):
        super().__init__()
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            num_encoder_layers, dims, num_heads, mlp_dims, dropout, activation, norm_first, checkpoint)
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            num_decoder_layers, dims, num_heads, mlp_dims, dropout, activation, norm_first, checkpoint)

    def __call__(self, src, tgt, src_mask, tgt_mask, memory_mask):
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, memory, tgt_mask, memory_mask)
