"""`bitcast`: the bits of an array read as another dtype (MLX's `view`).

Equal widths are one `arith.bitcast` per element. Between widths the last axis scales, as
in numpy and MLX (little-endian: piece 0 is the low bits), and the lowering stays in
plain linalg/tensor ops so the CPU and GPU pipelines take it unchanged:

- narrower (k pieces per element): a parallel `linalg.generic` over (..., n, k) whose body
  shifts the element right by `linalg.index` * width and truncates, then
  `tensor.collapse_shape` to (..., n*k);
- wider (k elements per piece): k strided `tensor.extract_slice`s of the last axis, then
  one elementwise map that widens, shifts and ors them.

No reductions and no memref tricks (`memref` bitcasts of a different width are not
portable to SPIR-V's typed buffers), so every kernel is an elementwise one.

    %0 = "mirax.bitcast"(%x) {dtype = i32} : (tensor<2xf32>) -> tensor<2xi32>
    %1 = "mirax.bitcast"(%y) {dtype = ui8} : (tensor<2xf32>) -> tensor<8xui8>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import Aval, MiraxError, primitive
from .elementwise import _DtypeAttr


def _bytes(d):
    return max(d.bits // 8, 1)  # bool is one byte in memory


def _bitcast_shape(avals, dtype):
    (a,) = avals
    d = dt.from_name(dtype)
    ib, ob = _bytes(a.dtype), _bytes(d)
    shape = list(a.shape)
    if ib != ob:
        if not shape:
            raise MiraxError("mirax.bitcast: changing the type of a scalar is only allowed for types with the "
                             f"same size ({a.dtype.name} is {ib} bytes, {d.name} {ob})")
        if ib < ob:
            if shape[-1] % (ob // ib):
                raise MiraxError("mirax.bitcast: when viewing as a larger dtype, the size in bytes of the last "
                                 f"axis must be a multiple of the requested type size (last axis of {shape[-1]} "
                                 f"{a.dtype.name} is {shape[-1] * ib} bytes, {d.name} is {ob})")
            shape[-1] //= ob // ib
        else:
            shape[-1] *= ib // ob
    return Aval(tuple(shape), d)


def _to_bits(b, x, d):
    """The scalar `x` of dtype `d` as an integer of its width (i8 for bool)."""
    if d.kind == "b":
        return b.op(f"arith.extui {x} : i1 to i8")
    if d.kind == "f":
        return b.op(f"arith.bitcast {x} : {d.signless} to i{d.bits}")
    if d.kind == "c":  # complex64 in memory: the real part in the low 32 bits
        parts = [b.op(f"complex.{p} {x} : {d.mlir}") for p in ("re", "im")]
        parts = [b.op(f"arith.bitcast {p} : f32 to i32") for p in parts]
        re, im = [b.op(f"arith.extui {p} : i32 to i64") for p in parts]
        high = b.op(f"arith.shli {im}, {b.const(32, 'i64')} : i64")
        return b.op(f"arith.ori {high}, {re} : i64")
    return x


def _from_bits(b, v, d):
    """The integer `v` of `d`'s width read as a scalar of dtype `d`."""
    if d.kind == "b":  # any nonzero byte reads as True
        return b.op(f"arith.cmpi ne, {v}, {b.const(0, 'i8')} : i8")
    if d.kind == "f":
        return b.op(f"arith.bitcast {v} : i{d.bits} to {d.signless}")
    if d.kind == "c":
        re = b.op(f"arith.trunci {v} : i64 to i32")
        high = b.op(f"arith.shrui {v}, {b.const(32, 'i64')} : i64")
        im = b.op(f"arith.trunci {high} : i64 to i32")
        re, im = [b.op(f"arith.bitcast {p} : i32 to f32") for p in (re, im)]
        return b.op(f"complex.create {re}, {im} : {d.mlir}")
    return v


def _width(d):
    return _bytes(d) * 8


def _bitcast_lower(e, ins, in_avals, out, dtype):
    from ..lowering.emit import identity_map, projected_map, ttype
    (x,), (a,) = ins, in_avals
    src, dst = a.dtype, out.dtype
    wi, wo = _width(src), _width(dst)
    if wi == wo:
        return e.map(ins, in_avals, out, lambda b, v: _from_bits(b, _to_bits(b, v, src), dst))
    r = a.ndim
    if wi > wo:
        k = wi // wo
        pieces = Aval(a.shape + (k,), dst)

        def body(b, v, _acc):
            j = b.op(f"arith.index_cast {b.op(f'linalg.index {r} : index')} : index to i{wi}")
            shift = b.op(f"arith.muli {j}, {b.const(wo, f'i{wi}')} : i{wi}")
            low = b.op(f"arith.shrui {_to_bits(b, v, src)}, {shift} : i{wi}")
            return _from_bits(b, b.op(f"arith.trunci {low} : i{wi} to i{wo}"), dst)
        g = e.generic(ins, in_avals, pieces, body, [projected_map(r + 1, range(r)), identity_map(r + 1)],
                      ["parallel"] * (r + 1))
        groups = ", ".join(f"[{i}]" for i in range(r - 1)) + (", " if r > 1 else "") + f"[{r - 1}, {r}]"
        return e.op(f"tensor.collapse_shape {g} [{groups}] : {ttype(pieces)} into {ttype(out)}")
    k = wo // wi
    part = Aval(out.shape, src)
    offsets = ", ".join(["0"] * (r - 1) + ["{j}"])
    sizes = ", ".join(str(s) for s in out.shape)
    strides = ", ".join(["1"] * (r - 1) + [str(k)])
    parts = [e.op(f"tensor.extract_slice {x}[{offsets.format(j=j)}] [{sizes}] [{strides}] : "
                  f"{ttype(a)} to {ttype(part)}") for j in range(k)]

    def combine(b, *vs):
        acc = None
        for j, v in enumerate(vs):
            w = b.op(f"arith.extui {_to_bits(b, v, src)} : i{wi} to i{wo}")
            if j:
                w = b.op(f"arith.shli {w}, {b.const(j * wi, f'i{wo}')} : i{wo}")
            acc = w if acc is None else b.op(f"arith.ori {acc}, {w} : i{wo}")
        return _from_bits(b, acc, dst)
    return e.map(parts, [part] * k, out, combine)


def _bitcast_ref(x, dtype):
    d = dt.from_name(dtype)
    y = np.array(x, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    if y.ndim == 0:
        return y.reshape(1).view(d.storage).reshape(())
    return y.view(d.storage)


primitive("bitcast", ["x"], _bitcast_shape, _bitcast_lower, _bitcast_ref, attrs={"dtype": _DtypeAttr()},
          summary="the bits read as another dtype; between widths the last axis scales (little-endian)",
          dtypes=[dt.float32, dt.int32, dt.uint8])


def _rules():
    from .core import PRIMITIVES
    from .rules import move_to_front

    def no_derivative(*_args, **_params):
        raise MiraxError("mirax.view: views of another dtype have no derivative (MLX's View has no vjp or jvp); "
                         "apply mr.stop_gradient to the input first")
    PRIMITIVES["bitcast"].jvp = no_derivative
    PRIMITIVES["bitcast"].vjp = no_derivative

    def batch(args, dims, dtype):
        from mirax.array import apply
        (x,), (d,) = args, dims
        if x.ndim == 1 and _bytes(x.dtype) != _bytes(dt.from_name(dtype)):
            _bitcast_shape([Aval((), x.dtype)], dtype)  # the per-example error: a scalar
        return apply("bitcast", [move_to_front(x, d)], dtype=dtype), 0
    PRIMITIVES["bitcast"].batch = batch


_rules()
