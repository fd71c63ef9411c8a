"""Shape primitives: reshape, broadcast_to, transpose, slice, concatenate, pad.

    %0 = "mirax.broadcast_to"(%x) : (tensor<3xf32>) -> tensor<2x3xf32>
    %1 = "mirax.transpose"(%0) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64, I64Array, Aval, MiraxError, broadcast_shapes, primitive
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


def _flatten_shape(avals, start_axis, end_axis):
    (a,) = avals
    if not 0 <= start_axis <= end_axis < a.ndim:
        raise MiraxError(f"mirax.flatten: axes {start_axis}..{end_axis} are not valid for shape {a.shape}")
    merged = int(np.prod(a.shape[start_axis:end_axis + 1], dtype=np.int64))
    return Aval(a.shape[:start_axis] + (merged,) + a.shape[end_axis + 1:], a.dtype)


primitive("flatten", ["x"], _flatten_shape, lambda e, ins, in_avals, out, start_axis, end_axis:
          _reshape_lower(e, ins, in_avals, out, out.shape),
          lambda x, start_axis, end_axis: x.reshape(x.shape[:start_axis] + (-1,) + x.shape[end_axis + 1:])
          if x.size else x.reshape(x.shape[:start_axis] + (0,) + x.shape[end_axis + 1:]),
          attrs={"start_axis": I64(), "end_axis": I64()},
          summary="merge axes start_axis..end_axis into one", dtypes=SHAPE_TEST)


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
    if tuple(permutation) == tuple(range(out.ndim)):
        return ins[0]  # linalg.transpose rejects (asserts on) rank 0
    init = e.empty(out)
    perm = ", ".join(str(p) for p in permutation)
    return e.op(f"linalg.transpose ins({ins[0]} : {ttype(in_avals[0])}) outs({init} : {ttype(out)}) "
                f"permutation = [{perm}]")


primitive("transpose", ["x"], _transpose_shape, _transpose_lower,
          lambda x, permutation: np.transpose(x, permutation), attrs={"permutation": I64Array()},
          summary="permute axes", dtypes=SHAPE_TEST)


# ---- slice, concatenate, pad -----------------------------------------------------------

def _slice_shape(avals, start, stop, strides):
    (a,) = avals
    start, stop, strides = tuple(start), tuple(stop), tuple(strides)
    if not len(start) == len(stop) == len(strides) == a.ndim:
        raise MiraxError(f"mirax.slice: start {start}, stop {stop} and strides {strides} need one entry "
                         f"per axis of {a.shape}")
    out = []
    for i, (b, e, s, d) in enumerate(zip(start, stop, strides, a.shape)):
        if s <= 0:
            raise MiraxError(f"mirax.slice: strides must be positive, got {strides} for {a.shape}")
        if not 0 <= b <= e <= d:
            raise MiraxError(f"mirax.slice: axis {i}: need 0 <= start <= stop <= {d}, got start {b}, "
                             f"stop {e} for shape {a.shape}")
        out.append(-(-(e - b) // s))
    return Aval(tuple(out), a.dtype)


def _slice_lower(e, ins, in_avals, out, start, stop, strides):
    if out.ndim == 0:
        return ins[0]
    if out.size == 0:  # the verifier rejects an offset at the end even for an empty slice
        return e.empty(out)
    lst = lambda v: ", ".join(str(int(x)) for x in v)  # noqa: E731
    return e.op(f"tensor.extract_slice {ins[0]}[{lst(start)}] [{lst(out.shape)}] [{lst(strides)}] : "
                f"{ttype(in_avals[0])} to {ttype(out)}")


primitive("slice", ["x"], _slice_shape, _slice_lower,
          lambda x, start, stop, strides: x[tuple(slice(b, e, s) for b, e, s in zip(start, stop, strides))].copy(),
          attrs={"start": I64Array(), "stop": I64Array(), "strides": I64Array()},
          summary="x[start:stop:strides] with normalized, in-bounds start/stop and positive strides",
          dtypes=SHAPE_TEST)


def _concat_shape(avals, axis):
    a, b = avals
    if a.ndim != b.ndim or a.ndim == 0:
        raise MiraxError(f"mirax.concatenate: operands need the same rank >= 1, got {a.shape} and {b.shape}")
    if not 0 <= axis < a.ndim:
        raise MiraxError(f"mirax.concatenate: axis {axis} is out of bounds for shapes {a.shape} and {b.shape}")
    if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis):
        raise MiraxError(f"mirax.concatenate: shapes {a.shape} and {b.shape} differ outside axis {axis}")
    if a.dtype is not b.dtype:
        raise MiraxError(f"mirax.concatenate: operand dtypes differ: {a.dtype.name}, {b.dtype.name}")
    shape = list(a.shape)
    shape[axis] += b.shape[axis]
    return Aval(tuple(shape), a.dtype)


def _concat_lower(e, ins, in_avals, out, axis):
    # insert both operands into one destination; bufferization writes them in place
    lst = lambda v: ", ".join(str(int(x)) for x in v)  # noqa: E731
    ones = [1] * out.ndim
    r = e.empty(out)
    off = 0
    for x, av in zip(ins, in_avals):
        if av.size == 0:  # nothing to insert (and its offset may equal the extent)
            off += av.shape[axis]
            continue
        offs = [0] * out.ndim
        offs[axis] = off
        r = e.op(f"tensor.insert_slice {x} into {r}[{lst(offs)}] [{lst(av.shape)}] [{lst(ones)}] : "
                 f"{ttype(av)} into {ttype(out)}")
        off += av.shape[axis]
    return r


primitive("concatenate", ["lhs", "rhs"], _concat_shape, _concat_lower,
          lambda lhs, rhs, axis: np.concatenate([lhs, rhs], axis), attrs={"axis": I64()},
          summary="join two arrays along `axis` (N arrays are a chain)", dtypes=SHAPE_TEST)


def _pad_shape(avals, low, high):
    a, v = avals
    low, high = tuple(low), tuple(high)
    if len(low) != a.ndim or len(high) != a.ndim:
        raise MiraxError(f"mirax.pad: low {low} and high {high} need one entry per axis of {a.shape}")
    if any(x < 0 for x in low + high):
        raise MiraxError(f"mirax.pad: low {low} and high {high} must be non-negative (shape {a.shape})")
    if v.ndim != 0 or v.dtype is not a.dtype:
        raise MiraxError(f"mirax.pad: the value must be a 0-d {a.dtype.name} array, got {v}")
    return Aval(tuple(d + lo + hi for d, lo, hi in zip(a.shape, low, high)), a.dtype)


def _pad_lower(e, ins, in_avals, out, low, high):
    if out.ndim == 0:
        return ins[0]
    lst = lambda v: ", ".join(str(int(x)) for x in v)  # noqa: E731
    v = e.op(f"tensor.extract {ins[1]}[] : {ttype(in_avals[1])}")
    r = e.fresh("pad")
    idx = ", ".join(f"%i{k}_{r[1:]}: index" for k in range(out.ndim))
    e.line(f"{r} = tensor.pad {ins[0]} low[{lst(low)}] high[{lst(high)}] {{")
    e.lines.append(e.indent + f"^bb0({idx}):")
    e.line(f"  tensor.yield {v} : {out.dtype.memory}")
    e.line(f"}} : {ttype(in_avals[0])} to {ttype(out)}")
    return r


primitive("pad", ["x", "value"], _pad_shape, _pad_lower,
          lambda x, value, low, high: np.pad(x, list(zip(low, high)), constant_values=value),
          attrs={"low": I64Array(), "high": I64Array()},
          summary="constant padding: `low`/`high` elements before/after each axis", dtypes=SHAPE_TEST)


# ---- transform rules --------------------------------------------------------------------

def _rules():
    import mirax as mr
    from .rules import bring_all_to_front, batch_size, defbatch, deflinear, defvjp, move_to_front

    def _apply(name, args, **params):
        from mirax.array import apply
        return apply(name, args, **params)

    # every shape op is linear in its array operands (pad: in x and in the padding value)
    for name in ["reshape", "broadcast_to", "transpose", "slice", "concatenate", "pad"]:
        deflinear(name)

    # reshape
    defvjp("reshape", lambda ct, x, out, shape: mr.reshape(ct, x.shape))
    deflinear("flatten")
    defvjp("flatten", lambda ct, x, out, start_axis, end_axis: mr.reshape(ct, x.shape))

    def flatten_batch(args, dims, start_axis, end_axis):
        x = move_to_front(args[0], dims[0])
        return _apply("flatten", [x], start_axis=start_axis + 1, end_axis=end_axis + 1), 0
    defbatch("flatten", flatten_batch)

    def reshape_batch(args, dims, shape):
        (x,), (d,) = args, dims
        x = move_to_front(x, d)
        return mr.reshape(x, (x.shape[0],) + tuple(shape)), 0
    defbatch("reshape", reshape_batch)

    # broadcast_to: sum over the new leading axes and the size-1 axes that were expanded
    def broadcast_vjp(ct, x, out, shape):
        lead = len(shape) - x.ndim
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(x.shape)
                                          if d == 1 and shape[lead + i] != 1)
        if axes:
            ct = mr.sum(ct, axis=axes)
        return mr.reshape(ct, x.shape)
    defvjp("broadcast_to", broadcast_vjp)

    def broadcast_batch(args, dims, shape):
        (x,), (d,) = args, dims
        x = move_to_front(x, d)
        n = x.shape[0]
        lead = len(shape) - (x.ndim - 1)
        x = mr.reshape(x, (n,) + (1,) * lead + x.shape[1:])  # new axes go after the batch dim
        return mr.broadcast_to(x, (n,) + tuple(shape)), 0
    defbatch("broadcast_to", broadcast_batch)

    # transpose
    def transpose_vjp(ct, x, out, permutation):
        inv = [0] * len(permutation)
        for i, p in enumerate(permutation):
            inv[p] = i
        return mr.transpose(ct, inv)
    defvjp("transpose", transpose_vjp)

    def transpose_batch(args, dims, permutation):
        (x,), (d,) = args, dims
        x = move_to_front(x, d)
        return mr.transpose(x, (0,) + tuple(int(p) + 1 for p in permutation)), 0
    defbatch("transpose", transpose_batch)

    # slice: the cotangent goes back to the strided positions, zeros elsewhere
    def slice_vjp(ct, x, out, start, stop, strides):
        if ct.size == 0:
            return mr.zeros(x.shape, x.dtype)
        for ax, s in enumerate(strides):
            m = ct.shape[ax]
            if s == 1 or m <= 1:
                continue
            # interleave s-1 zeros after every element: (.., m, ..) -> (.., m, s, ..) -> (.., m*s, ..)
            e = mr.expand_dims(ct, ax + 1)
            pw = [(0, 0)] * e.ndim
            pw[ax + 1] = (0, s - 1)
            e = mr.pad(e, pw)
            e = mr.reshape(e, ct.shape[:ax] + (m * s,) + ct.shape[ax + 1:])
            lo, hi = [0] * e.ndim, list(e.shape)
            hi[ax] = (m - 1) * s + 1
            ct = mr.ops.shape.strided_slice(e, lo, hi)
        # ct now spans [start, start + span) of each axis
        pw = [(int(b), int(d - b - n)) for b, d, n in zip(start, x.shape, ct.shape)]
        return mr.pad(ct, pw)
    defvjp("slice", slice_vjp)

    def slice_batch(args, dims, start, stop, strides):
        (x,), (d,) = args, dims
        x = move_to_front(x, d)
        return _apply("slice", [x], start=(0,) + tuple(start), stop=(x.shape[0],) + tuple(stop),
                      strides=(1,) + tuple(strides)), 0
    defbatch("slice", slice_batch)

    # concatenate
    def concat_part(ct, lo, hi, axis):
        b, e = [0] * ct.ndim, list(ct.shape)
        b[axis], e[axis] = lo, hi
        return mr.ops.shape.strided_slice(ct, b, e)
    defvjp("concatenate", lambda ct, a, b, out, axis: concat_part(ct, 0, a.shape[axis], axis),
           lambda ct, a, b, out, axis: concat_part(ct, a.shape[axis], ct.shape[axis], axis))

    def concat_batch(args, dims, axis):
        return _apply("concatenate", bring_all_to_front(args, dims), axis=int(axis) + 1), 0
    defbatch("concatenate", concat_batch)

    # pad: x gets the interior of the cotangent, the value the sum of its border
    def pad_x_vjp(ct, x, value, out, low, high):
        return mr.ops.shape.strided_slice(ct, tuple(low), tuple(int(lo) + d for lo, d in zip(low, x.shape)))

    def pad_value_vjp(ct, x, value, out, low, high):
        if x.ndim == 0:
            return mr.zeros_like(value)
        border = mr.pad(mr.zeros(x.shape, mr.bool_), list(zip(low, high)), constant_values=True)
        return mr.sum(mr.where(border, ct, mr.zeros_like(ct)))
    defvjp("pad", pad_x_vjp, pad_value_vjp)

    def pad_batch(args, dims, low, high):
        x, v = args
        dx, dv = dims
        n = batch_size(args, dims)
        if dx is None:
            x = mr.broadcast_to(mr.expand_dims(x, 0), (n,) + x.shape)
        else:
            x = move_to_front(x, dx)
        low, high = (0,) + tuple(low), (0,) + tuple(high)
        if dv is None:
            return _apply("pad", [x, v], low=low, high=high), 0
        # one padding value per example: pad with anything, then select the border
        padded = _apply("pad", [x, mr.zeros((), x.dtype)], low=low, high=high)
        border = _apply("pad", [mr.zeros(x.shape, mr.bool_), mr.ones((), mr.bool_)], low=low, high=high)
        vb = mr.broadcast_to(mr.reshape(v, (n,) + (1,) * (x.ndim - 1)), padded.shape)
        return mr.where(border, vb, padded), 0
    defbatch("pad", pad_batch)


_rules()
