"""Primitives that create arrays from attributes: `constant` and `arange`.

    %0 = "mirax.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
    %1 = "mirax.arange"() {start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<5xi32>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import F64, Aval, Dense, MiraxError, primitive


def _nested_bools(a: np.ndarray) -> str:
    if a.ndim == 1:
        return "[" + ", ".join("true" if v else "false" for v in a.tolist()) + "]"
    return "[" + ", ".join(_nested_bools(x) for x in a) + "]"


def dense_attr(value: np.ndarray, dtype: dt.Dtype, lowered=False):
    """A DenseElementsAttr holding `value` (needs an active MLIR context); `lowered`
    gives the element type lowered code uses (signless, bool as i8)."""
    from mlir import ir
    elt = dtype.memory if lowered else dtype.mlir
    if dtype.kind == "c":
        # The bindings cannot hold complex dense attributes as Python objects (their
        # downcast fails), so the attribute travels as its text.
        flat = value.reshape(-1)
        if value.size and np.all(flat == flat[0]):
            body = f"({float(flat[0].real)!r}, {float(flat[0].imag)!r})"
        else:
            body = _nested_complex(value)
        dims = "".join(f"{d}x" for d in value.shape)
        return ComplexDenseText(f"dense<{body}> : tensor<{dims}{elt}>")
    if value.ndim == 0:
        # the buffer path cannot make a 0-d attribute: make a 1-element one and re-type it
        one = dense_attr(value.reshape(1), dtype, lowered)
        text = str(one)
        body = text[text.index("<") + 1:text.rindex(">")].split(">")[0]
        body = body.strip("[]") if not body.startswith('"') else body
        return ir.DenseElementsAttr(ir.Attribute.parse(f"dense<{body}> : tensor<{elt}>"))
    ttype = ir.RankedTensorType.get(list(value.shape), ir.Type.parse(elt))
    if dtype.kind == "b" and not lowered:
        # the bindings cannot build i1 attributes from a buffer: they travel as text
        # (nested lists; MLIR prints larger i8 attributes as hex, which is no i1 text)
        flat = value.reshape(-1)
        if value.size and np.all(flat == flat[0]):
            body = "true" if flat[0] else "false"
        else:
            body = _nested_bools(np.asarray(value, bool))
        return ir.Attribute.parse(f"dense<{body}> : {ttype}")
    raw = np.ascontiguousarray(value).view(dtype.storage)
    if dtype.kind in "ub" and lowered:
        raw = raw.view(f"i{dtype.size}")
    return ir.DenseElementsAttr.get(raw, type=ttype.element_type, shape=list(value.shape))


class ComplexDenseText(str):
    """The text of a DenseElementsAttr, standing in for the attribute where the bindings
    cannot hold it (complex values) or where building it would cost an MLIR context
    (`dense_text`)."""


def _scalar_text(v, dtype: dt.Dtype) -> str:
    from ..lowering.emit import float_literal
    if dtype.kind == "b":
        return "true" if v else "false"
    if dtype.kind in "iu":
        return str(int(v))
    if dtype.kind == "c":
        return f"({float_literal(float(v.real), 'f32')}, {float_literal(float(v.imag), 'f32')})"
    if dtype is dt.bfloat16:  # raw bits: the value they hold
        v = np.array(int(v) << 16, np.uint32).view(np.float32)
    return float_literal(float(v), dtype.mlir)


def dense_text(value: np.ndarray, dtype: dt.Dtype) -> str:
    """The text of `dense<...> : tensor<...>` for `value`, in pure Python (exact: every
    float is printed with enough digits to round-trip its type)."""
    value = np.asarray(value)
    dims = "".join(f"{d}x" for d in value.shape)
    flat = value.reshape(-1)
    if value.size == 0:  # `[]` would say shape (0,) whatever the rank: MLIR's empty literal
        body = ""
    elif np.all(flat == flat[0]):
        body = _scalar_text(flat[0], dtype)
    else:
        def nest(v):
            if v.ndim == 0:
                return _scalar_text(v[()], dtype)
            return "[" + ", ".join(nest(x) for x in v) + "]"
        body = nest(value)
    return ComplexDenseText(f"dense<{body}> : tensor<{dims}{dtype.mlir}>")


def _nested_complex(value):
    if value.ndim == 0:
        v = complex(value)
        return f"({v.real!r}, {v.imag!r})"
    return "[" + ", ".join(_nested_complex(v) for v in value) + "]"


def attr_to_numpy(attr, dtype: dt.Dtype) -> np.ndarray:
    from mlir import ir
    a = ir.DenseElementsAttr(attr)
    shape = tuple(ir.ShapedType(a.type).shape)
    if dtype.kind == "c":
        vals = [complex(x) for x in _parse_complex(str(a))]
        arr = np.array(vals, np.complex64)
        return np.broadcast_to(arr, shape).copy() if arr.size == 1 else arr.reshape(shape)
    if a.is_splat:
        v = np.array(a.get_splat_value().value if dtype.kind != "b" else bool(ir.BoolAttr(a.get_splat_value()).value))
        return np.full(shape, v, dtype.storage) if dtype is not dt.bfloat16 else _bf16_splat(a, shape)
    return np.array(a, copy=True).view(dtype.storage).reshape(shape)


def _bf16_splat(a, shape):
    return np.full(shape, np.float32(a.get_splat_value().value).view(np.uint32) >> 16, np.uint16)


def _parse_complex(text):
    import re
    body = text[text.index("<") + 1:text.rindex(">")].split(":")[0]
    for m in re.finditer(r"\(([^,()]+),\s*([^()]+)\)", body):
        yield complex(float(m.group(1)), float(m.group(2)))


def _constant_shape(avals, value):
    raise MiraxError("mirax.constant takes its type from its value")  # built directly, never inferred


def _constant_lower(e, ins, in_avals, out, value):
    if out.dtype.kind in "ub":
        value = dense_attr(attr_to_numpy(value, out.dtype), out.dtype, lowered=True)
    return e.op(f"arith.constant {value}", "cst")


primitive("constant", [], _constant_shape, _constant_lower, lambda value: value,
          attrs={"value": Dense()}, summary="an array given by its value", typed_result=True, dtypes=[dt.float32, dt.int32, dt.bool_])


def arange_length(start, stop, step):
    if step == 0:
        raise MiraxError("mirax.arange: step must not be zero")
    return max(0, int(np.ceil((stop - start) / step)))


def _arange_shape(avals, start, step):
    raise MiraxError("mirax.arange takes its length from its result type")


def _arange_lower(e, ins, in_avals, out, start, step):
    """out[i] = start + i * step, computed in f64 then converted (as numpy)."""
    from .elementwise import _convert

    def body(b, o):
        i = b.op("linalg.index 0 : index")
        i64 = b.op(f"arith.index_cast {i} : index to i64")
        f = b.op(f"arith.sitofp {i64} : i64 to f64")
        s = b.const(start, "f64")
        st = b.const(step, "f64")
        v = b.op(f"math.fma {f}, {st}, {s} : f64")
        return _convert(b, v, dt.float64, out.dtype)
    from ..lowering.emit import identity_map
    return e.generic([], [], out, body, [identity_map(1)], ["parallel"])


primitive("arange", [], _arange_shape, _arange_lower,
          lambda start, step, n=0, dtype=np.float32: start + np.arange(n) * step,
          attrs={"start": F64(), "step": F64()}, summary="start + i * step", typed_result=True, dtypes=[dt.float32, dt.int32])


# ---- transform rules -----------------------------------------------------------------

def _rules():
    """`constant` and `arange` have no operands: no tangent, no cotangents, and they are
    never batched (the vmap driver applies ops with no batched operand directly)."""
    from .core import PRIMITIVES

    def no_jvp(primals, tangents, out, **params):
        return None

    def no_vjp(primals, ct, out, **params):
        return []

    def constant_batch(args, dims, value):
        from mirax.array import apply_typed
        return apply_typed("constant", [], _constant_aval(value), value=value), None

    def arange_batch(args, dims, start, step):
        # the length lives only in the result type, which batching rules do not get
        raise MiraxError("mirax.arange has no operands and is never batched")

    for name in ["constant", "arange"]:
        PRIMITIVES[name].jvp = no_jvp
        PRIMITIVES[name].vjp = no_vjp
    PRIMITIVES["constant"].batch = constant_batch
    PRIMITIVES["arange"].batch = arange_batch


def _constant_aval(value) -> Aval:
    """The aval of a constant's value attribute (a DenseElementsAttr or its text)."""
    from mlir import ir
    if isinstance(value, ComplexDenseText):
        text = value[value.rindex(" : tensor<") + len(" : tensor<"):-1]
        *dims, elt = _split_tensor_text(text)
        return Aval(tuple(int(d) for d in dims), dt.from_mlir(elt))
    t = ir.RankedTensorType(value.type)
    return Aval(tuple(t.shape), dt.from_mlir(str(t.element_type)))


def _split_tensor_text(body):
    """'2x3xcomplex<f32>' -> ['2', '3', 'complex<f32>']."""
    parts = []
    while body and body[0].isdigit():
        d, body = body.split("x", 1)
        parts.append(d)
    return parts + [body]


_rules()
