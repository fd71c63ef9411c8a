"""MLX's dtype API: `finfo`, `iinfo`, the category types, `issubdtype`, `isdtype`,
`result_type`, `can_cast`, and the constants `pi`, `e`, `inf`, `nan`, `newaxis`,
`euler_gamma`.

    mr.issubdtype(mr.float16, mr.floating)    # True
    mr.finfo(mr.float32).eps                   # 1.1920929e-07
    mr.result_type(mr.array([1]), 2.0)         # float32 (a Python float is weak)
"""
from __future__ import annotations

import math

import numpy as np

from .dialect import dtypes as dt
from .dialect.dtypes import Dtype


class DtypeCategory:
    """A category of dtypes (`mr.floating`, `mr.integer`, ...), as MLX's `DtypeCategory`."""

    def __init__(self, name, kinds, parent=None):
        self.name, self.kinds, self.parent = name, kinds, parent

    def __repr__(self):
        return f"DtypeCategory.{self.name}"

    def contains(self, d: Dtype) -> bool:
        return d.kind in self.kinds


generic = DtypeCategory("generic", "biufc")
number = DtypeCategory("number", "iufc", generic)
inexact = DtypeCategory("inexact", "fc", number)
floating = DtypeCategory("floating", "f", inexact)
complexfloating = DtypeCategory("complexfloating", "c", inexact)
integer = DtypeCategory("integer", "iu", number)
signedinteger = DtypeCategory("signedinteger", "i", integer)
unsignedinteger = DtypeCategory("unsignedinteger", "u", integer)
CATEGORIES = [generic, number, inexact, floating, complexfloating, integer, signedinteger, unsignedinteger]


def issubdtype(a, b) -> bool:
    """Whether dtype or category `a` is `b` or falls under category `b` (MLX's rules:
    a dtype is a subtype of itself and of its categories; categories nest)."""
    if isinstance(a, DtypeCategory):
        if not isinstance(b, DtypeCategory):
            return False
        while a is not None:
            if a is b:
                return True
            a = a.parent
        return False
    a = dt.to_dtype(a)
    if isinstance(b, DtypeCategory):
        return b.contains(a)
    return a is dt.to_dtype(b)


def isdtype(d, kind) -> bool:
    """The array API's `isdtype`: `kind` a dtype, a category, a name ('bool',
    'signed integer', 'unsigned integer', 'integral', 'real floating', 'complex
    floating', 'numeric') or a tuple of these."""
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    d = dt.to_dtype(d)
    names = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
             "real floating": "f", "complex floating": "c", "numeric": "iufc"}
    if isinstance(kind, str):
        if kind not in names:
            raise ValueError(f"[isdtype] Unknown kind '{kind}': expected a dtype or one of {sorted(names)}")
        return d.kind in names[kind]
    return issubdtype(d, kind)


class finfo:
    """Machine limits of a floating dtype: `min`, `max`, `eps`, `tiny`, `bits`, `dtype`."""

    def __init__(self, d):
        d = dt.to_dtype(d)
        if d.kind not in "fc":
            raise ValueError(f"[finfo] dtype {d.name} is not inexact.")
        self.dtype = d if d.kind == "f" else dt.float32
        if self.dtype is dt.bfloat16:
            self.bits, self.eps = 16, 2.0 ** -7
            self.max = float((2 - 2 ** -7) * 2.0 ** 127)
            self.tiny = 2.0 ** -126
        else:
            info = np.finfo(self.dtype.storage)
            self.bits, self.eps, self.max, self.tiny = info.bits, float(info.eps), float(info.max), float(info.tiny)
        self.min = -self.max
        self.smallest_normal = self.tiny  # the array API's name

    def __repr__(self):
        return f"finfo(min={self.min}, max={self.max}, dtype={self.dtype.name})"


class iinfo:
    """Limits of an integer dtype: `min`, `max`, `bits`, `dtype`."""

    def __init__(self, d):
        d = dt.to_dtype(d)
        if d.kind not in "iub":
            raise ValueError(f"[iinfo] dtype {d.name} is not integral.")
        self.dtype = d
        info = np.iinfo(d.storage) if d.kind != "b" else None
        self.min, self.max = (int(info.min), int(info.max)) if info else (0, 1)
        self.bits = d.bits

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype.name})"


def result_type(*arrays_and_dtypes) -> Dtype:
    """The dtype an op on these operands gives (MLX's promotion; Python scalars are weak)."""
    from .array import Array
    strong = [x.dtype if isinstance(x, Array) else dt.to_dtype(x)
              for x in arrays_and_dtypes if not isinstance(x, (bool, int, float, complex))]
    out = None
    for d in strong:
        out = d if out is None else dt.promote(out, d)
    for x in arrays_and_dtypes:
        if isinstance(x, (bool, int, float, complex)):
            out = dt.to_dtype(type(x)) if out is None else dt.weak_scalar_dtype(x, out)
    if out is None:
        raise ValueError("result_type needs at least one array, dtype or scalar")
    return out


def can_cast(from_, to) -> bool:
    """Whether `from_` (a dtype or array) casts to `to` without loss (numpy's "safe" rule:
    promotion with `to` gives `to`)."""
    from .array import Array
    a = from_.dtype if isinstance(from_, Array) else dt.to_dtype(from_)
    b = dt.to_dtype(to)
    return dt.promote(a, b) is b


pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
euler_gamma = 0.5772156649015329
newaxis = None
