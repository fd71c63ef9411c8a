"""mirax dtypes: names, MLIR element types, numpy storage, and MLX type promotion.

    >>> promote(int32, float16)
    float16
    >>> float32.mlir, uint8.mlir, bool_.mlir
    ('f32', 'ui8', 'i1')
"""
from __future__ import annotations

import numpy as np


class Dtype:
    """One array element type. `kind` is one of 'b', 'i', 'u', 'f', 'c'."""

    __slots__ = ("name", "kind", "bits", "mlir", "storage", "signless", "memory")

    def __init__(self, name, kind, bits, mlir, storage, signless=None, memory=None):
        self.name = name
        self.kind = kind
        self.bits = bits
        self.mlir = mlir  # element type as written in mirax IR
        self.storage = np.dtype(storage)  # numpy dtype holding the bytes
        self.signless = signless or mlir  # scalar type in lowered code (arith is signless)
        self.memory = memory or self.signless  # element type of lowered tensors and buffers

    @property
    def size(self):
        return self.storage.itemsize

    @property
    def is_float(self):
        return self.kind in "fc"

    @property
    def is_inexact(self):
        return self.kind in "fc"

    @property
    def is_integer(self):
        return self.kind in "iu"

    def __repr__(self):
        return self.name

    def __reduce__(self):
        return (from_name, (self.name,))


# bool is i1 in mirax IR and one byte (i8) in memory, as numpy stores it
bool_ = Dtype("bool", "b", 1, "i1", np.bool_, memory="i8")
int8 = Dtype("int8", "i", 8, "i8", np.int8)
int16 = Dtype("int16", "i", 16, "i16", np.int16)
int32 = Dtype("int32", "i", 32, "i32", np.int32)
int64 = Dtype("int64", "i", 64, "i64", np.int64)
uint8 = Dtype("uint8", "u", 8, "ui8", np.uint8, "i8")
uint16 = Dtype("uint16", "u", 16, "ui16", np.uint16, "i16")
uint32 = Dtype("uint32", "u", 32, "ui32", np.uint32, "i32")
uint64 = Dtype("uint64", "u", 64, "ui64", np.uint64, "i64")
float16 = Dtype("float16", "f", 16, "f16", np.float16)
bfloat16 = Dtype("bfloat16", "f", 16, "bf16", np.uint16)  # numpy has no bfloat16: raw bits
float32 = Dtype("float32", "f", 32, "f32", np.float32)
float64 = Dtype("float64", "f", 64, "f64", np.float64)
complex64 = Dtype("complex64", "c", 64, "complex<f32>", np.complex64)

ALL = [bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
       float16, bfloat16, float32, float64, complex64]
_BY_NAME = {d.name: d for d in ALL}
_BY_MLIR = {d.mlir: d for d in ALL}
_BY_NUMPY = {d.storage: d for d in ALL if d is not bfloat16}


def from_name(name: str) -> Dtype:
    return _BY_NAME[name]


def from_mlir(text: str) -> Dtype:
    """The dtype of an MLIR element type's text (`f32`, `ui8`, `complex<f32>`)."""
    try:
        return _BY_MLIR[text]
    except KeyError:
        raise TypeError(f"mirax has no dtype for MLIR element type '{text}'") from None


def from_numpy(dt) -> Dtype:
    dt = np.dtype(dt)
    if dt in _BY_NUMPY:
        return _BY_NUMPY[dt]
    if dt == np.complex128:
        return complex64
    raise TypeError(f"mirax has no dtype for numpy dtype '{dt}'")


def to_dtype(x) -> Dtype:
    """Accept a Dtype, a name, a numpy dtype or a Python type."""
    if isinstance(x, Dtype):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if x is bool:
        return bool_
    if x is int:
        return int32
    if x is float:
        return float32
    if x is complex:
        return complex64
    try:
        return from_numpy(x)
    except TypeError:
        raise TypeError(f"'{x}' is not a mirax dtype (one of {', '.join(_BY_NAME)})") from None


# MLX's promotion: the smallest type that holds both; unsigned with signed widens;
# integer with float gives the float; any float16/bfloat16 pair gives float32.
def _rank(d):
    return ALL.index(d)


def promote(a: Dtype, b: Dtype) -> Dtype:
    if a is b:
        return a
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    if a.kind == "c" or b.kind == "c":
        return complex64
    if a.kind == "f" or b.kind == "f":
        if a.kind == "f" and b.kind == "f":
            if {a, b} == {float16, bfloat16}:
                return float32
            return a if a.bits > b.bits else b
        return a if a.kind == "f" else b
    if a.kind == b.kind:
        return a if a.bits > b.bits else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if s.bits > u.bits:
        return s
    return {8: int16, 16: int32, 32: int64, 64: float32}[u.bits]


def weak_scalar_dtype(value, other: Dtype) -> Dtype:
    """MLX's rule for a Python scalar beside an array: the array's dtype wins unless the
    scalar's kind is wider (a float scalar with an int array gives float32)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if other.kind != "b" else int32
    if isinstance(value, float):
        return other if other.kind in "fc" else float32
    if isinstance(value, complex):
        return complex64
    raise TypeError(f"unsupported scalar {value!r}")
