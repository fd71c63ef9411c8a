"""Shape primitives: reshape, broadcast_to, transpose, slice, concatenate, pad.

    %0 = "mirax.broadcast_to"(%x) : (tensor<3xf32>) -> tensor<2x3xf32>
    %1 = "mirax.transpose"(%0) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64Array, Aval, MiraxError, broadcast_shapes, primitive
from ..lowering.emit import ttype, _affine

SHAPE_TEST = [dt.float32, dt.int32, dt.bool_]


def _reshape_shape(avals, shape):
    return reshape_result(avals[0], shape)


def _reshape_lower(e, ins, in_avals, out, shape):
    shp = e.op(f"arith.constant dense<[{', '.join(str(d) for d in out.shape)}]> : tensor<{out.ndim}xi64>"
               if out.ndim else "arith.constant dense<> : tensor<0xi64>", "shape")
    return e.op(f"tensor.reshape {ins[0]}({shp}) : ({ttype(in_avals[0])}, tensor<{out.ndim}xi64>) -> {ttype(out)}")


def reshape_result(aval, shape):
    """The result aval of reshaping to `shape` (one -1 allowed), or a MiraxError."""
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise MiraxError(f"mirax.reshape: can only infer one dimension, got {shape}")
    if -1 in shape:
        rest = int(np.prod([s for s in shape if s != -1]))
        if rest == 0 or aval.size % rest:
            raise MiraxError(f"mirax.reshape: cannot reshape array of shape {aval.shape} into {shape}")
        shape = tuple(aval.size // rest if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or int(np.prod(shape)) != aval.size:
        raise MiraxError(f"mirax.reshape: cannot reshape array of shape {aval.shape} into {shape}")
    return Aval(shape, aval.dtype)


primitive("reshape", ["x"], _reshape_shape, _reshape_lower, lambda x, shape: x.reshape(shape),
          attrs={"shape": I64Array()},
          summary="same elements, new shape (row-major)", dtypes=SHAPE_TEST)


def broadcast_result(aval, shape):
    shape = tuple(int(s) for s in shape)
    try:
        b = broadcast_shapes(aval.shape, shape, op="mirax.broadcast_to")
    except MiraxError:
        b = None
    if b != shape:
        raise MiraxError(f"mirax.broadcast_to: cannot broadcast shape {aval.shape} to {shape}")
    return Aval(shape, aval.dtype)


def _broadcast_lower(e, ins, in_avals, out, shape):
    a = in_avals[0]
    n, k = out.ndim, a.ndim
    dims = ["0" if a.shape[i] == 1 and out.shape[n - k + i] != 1 else f"d{n - k + i}" for i in range(k)]
    maps = [_affine(n, dims), _affine(n, [f"d{i}" for i in range(n)])]
    return e.generic(ins, in_avals, out, lambda b, x, o: x, maps, ["parallel"] * n)


primitive("broadcast_to", ["x"], lambda avals, shape: broadcast_result(avals[0], shape), _broadcast_lower,
          lambda x, shape: np.broadcast_to(x, shape).copy(), attrs={"shape": I64Array()},
          summary="numpy broadcasting to `shape`", dtypes=SHAPE_TEST)


def _transpose_shape(avals, permutation):
    (a,) = avals
    perm = tuple(permutation)
    if sorted(perm) != list(range(a.ndim)):
        raise MiraxError(f"mirax.transpose: {perm} is not a permutation of the {a.ndim} axes of {a.shape}")
    return Aval(tuple(a.shape[p] for p in perm), a.dtype)


def _transpose_lower(e, ins, in_avals, out, permutation):
    init = e.empty(out)
    perm = ", ".join(str(p) for p in permutation)
    return e.op(f"linalg.transpose ins({ins[0]} : {ttype(in_avals[0])}) outs({init} : {ttype(out)}) "
                f"permutation = [{perm}]")


primitive("transpose", ["x"], _transpose_shape, _transpose_lower,
          lambda x, permutation: np.transpose(x, permutation), attrs={"permutation": I64Array()},
          summary="permute axes", dtypes=SHAPE_TEST)
