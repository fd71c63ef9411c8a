"""The primitive: one declaration holds everything mirax knows about an op.

A family module declares each op once:

    primitive("exp", operands=["x"], shape=same_as_input, lower=..., reference=np.exp)

and from those declarations mirax derives the IRDL dialect (`dialect/mirax.irdl.mlir`),
builds and reads IR ops, checks shapes, lowers to linalg and tests against numpy.
The transform rules (`jvp`, `vjp`, `batch`) live on the same object.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Callable


from . import dtypes as dt


class MiraxError(ValueError):
    """A user-visible error in a mirax op (bad shape, axis, dtype)."""


@dataclass(frozen=True)
class Aval:
    """The abstract value of an array: its shape and dtype."""

    shape: tuple
    dtype: dt.Dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)  # exact Python ints (np.prod costs ~4 µs a call on the eager path)

    def tensor_type(self, lowered=False) -> str:
        """`tensor<2x3xf32>`; `lowered` gives the element type lowered code stores."""
        elt = self.dtype.memory if lowered else self.dtype.mlir
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{elt}>"

    def __repr__(self):
        return f"{self.dtype.name}{list(self.shape)}"


# Attribute kinds: how a Python parameter is stored as an MLIR attribute.
# Each maps to an IRDL base constraint and converters both ways.
class AttrKind:
    irdl_base = ""

    def to_text(self, value) -> str:
        raise NotImplementedError

    def from_ir(self, attr):
        raise NotImplementedError


class I64(AttrKind):
    irdl_base = "#builtin.integer"

    def to_text(self, v):
        return f"{int(v)} : i64"

    def from_ir(self, attr):
        from mlir import ir
        return ir.IntegerAttr(attr).value


class Bool(AttrKind):
    irdl_base = "#builtin.integer"

    def to_text(self, v):
        return "true" if v else "false"

    def from_ir(self, attr):
        from mlir import ir
        return bool(ir.BoolAttr(attr).value)


class F64(AttrKind):
    irdl_base = "#builtin.float"

    def to_text(self, v):
        return f"{float(v)!r} : f64".replace("inf", "0x7FF0000000000000").replace("nan", "0x7FF8000000000000")

    def from_ir(self, attr):
        from mlir import ir
        return ir.FloatAttr(attr).value


class I64Array(AttrKind):
    irdl_base = "#builtin.dense_array"

    def to_text(self, v):
        return "array<i64" + ("" if not v else ": " + ", ".join(str(int(x)) for x in v)) + ">"

    def from_ir(self, attr):
        from mlir import ir
        return tuple(ir.DenseI64ArrayAttr(attr))


class Dense(AttrKind):
    """A constant's value: a numpy array held as a DenseElementsAttr."""

    irdl_base = "#builtin.dense_int_or_fp_elements"

    def to_text(self, v):
        raise NotImplementedError("dense attributes are built with the bindings")

    def from_ir(self, attr):
        return attr  # converted by the constant primitive, which knows the dtype

    @staticmethod
    def read(op, name):
        """The attribute, or its text when the bindings cannot wrap it (complex values)."""
        try:
            return op.attributes[name]
        except TypeError:
            import re
            from .creation import ComplexDenseText
            m = re.search(name + r" = (dense<.*?> : tensor<[^>]*>>?)", str(op))
            return ComplexDenseText(m.group(1))


F64_NEG_INF = float("-inf")


@dataclass
class Primitive:
    """Everything about one op of the mirax dialect."""

    name: str
    operands: list  # operand names
    attrs: dict  # name -> AttrKind
    shape: Callable  # (in_avals, **params) -> Aval; raises MiraxError
    lower: Callable  # (emitter, in_values, in_avals, out_aval, **params) -> value
    reference: Callable  # numpy reference: (*arrays, **params) -> np.ndarray
    summary: str = ""
    # True for ops whose result type is not derived from operands and attributes
    # (`constant`, `arange`): the verifier checks the type is consistent instead.
    typed_result: bool = False
    # transform rules, filled by the transforms issue
    jvp: Callable | None = None
    vjp: Callable | None = None
    batch: Callable | None = None
    # test hints: which dtypes the test table draws, and how to draw inputs
    test: dict = field(default_factory=dict)
    # lowerings for one target only ("gpu": scans and scatters without host loops), by
    # register_lowering; `lower` serves every other target
    target_lowerings: dict = field(default_factory=dict)

    def lowering(self, target="cpu") -> Callable:
        return self.target_lowerings.get(target, self.lower)

    @property
    def op_name(self):
        return f"mirax.{self.name}"

    def check(self, in_avals, params) -> Aval:
        """The result aval, or a MiraxError naming the op and the operands."""
        if len(in_avals) != len(self.operands):
            raise MiraxError(f"mirax.{self.name} takes {len(self.operands)} operands, got {len(in_avals)}")
        return self.shape(in_avals, **params)

    def attr_text(self, params) -> str:
        if not self.attrs:
            return ""
        parts = [f"{k} = {self.attrs[k].to_text(params[k])}" for k in self.attrs if k in params]
        return "{" + ", ".join(parts) + "}"

    def params_from_ir(self, op) -> dict:
        return {k: kind.from_ir(Dense.read(op, k) if isinstance(kind, Dense) else op.attributes[k])
                for k, kind in self.attrs.items()}


PRIMITIVES: dict[str, Primitive] = {}


def primitive(name, operands, shape, lower, reference, attrs=None, summary="", typed_result=False, **test):
    """Declare a primitive of the mirax dialect (see the module docstring)."""
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name} declared twice")
    p = Primitive(name, list(operands), dict(attrs or {}), shape, lower, reference, summary,
                  typed_result=typed_result, test=test)
    PRIMITIVES[name] = p
    return p


def register_lowering(name, rule, target):
    """Give primitive `name` its own lowering on `target` (as JAX's
    `register_lowering(prim, rule, platform=...)`), next to its default rule:

        register_lowering("cumsum", _scan_lower_gpu("sum"), target="gpu")
    """
    PRIMITIVES[name].target_lowerings[target] = rule


# ---- shape-rule helpers shared by the families -------------------------------------

def normalize_axis(axis, ndim, op):
    if not -ndim <= axis < ndim:  # as numpy: a 0-d array has no axis
        raise MiraxError(f"{op}: axis {axis} is out of bounds for an array of {ndim} dimensions")
    return axis % ndim


def normalize_axes(axes, ndim, op):
    out = tuple(sorted(normalize_axis(a, ndim, op) for a in axes))
    if len(set(out)) != len(out):
        raise MiraxError(f"{op}: repeated axis in {tuple(axes)}")
    return out


def same_shapes(avals, op):
    s = avals[0].shape
    for a in avals[1:]:
        if a.shape != s:
            raise MiraxError(f"{op}: operand shapes differ: " + ", ".join(str(x.shape) for x in avals))
    return s


def same_dtypes(avals, op):
    d = avals[0].dtype
    for a in avals[1:]:
        if a.dtype is not d:
            raise MiraxError(f"{op}: operand dtypes differ: " + ", ".join(x.dtype.name for x in avals))
    return d


def broadcast_shapes(*shapes, op="broadcast"):
    """numpy broadcasting of shapes, with an error naming the op."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dims = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise MiraxError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def op_text(prim: Primitive, result: str, operands, in_avals, out_aval: Aval, params, loc=None, extra="") -> str:
    """One mirax op in generic form, e.g.
    `%2 = "mirax.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`;
    `extra` is a discardable attribute to add (`mirax.implicit`)."""
    attrs = prim.attr_text(params) if "value" not in params else "{value = " + str(params["value"]) + "}"
    if extra:
        attrs = "{" + extra + (", " + attrs[1:] if attrs else "}")
    ins = ", ".join(a.tensor_type() for a in in_avals)
    text = (f'{result} = "{prim.op_name}"({", ".join(operands)}) {attrs}'.rstrip()
            + f" : ({ins}) -> {out_aval.tensor_type()}")
    if loc:
        text += f" {loc}"
    return text
