"""Elementwise ops with MLX's broadcasting and type promotion.

    mr.exp(x)        mr.maximum(x, 0.0)        mr.where(x > 0, x, 0)

Binary ops promote both sides (Python scalars are weakly typed, as in MLX), then
broadcast with explicit `broadcast_to` ops, so each primitive sees equal avals.
"""
from __future__ import annotations

import math

import numpy as np

from ..dialect import dtypes as dt
from ..dialect.core import MiraxError, broadcast_shapes
from ..array import Array, apply, array, eager_host_data, eager_on_cpu, where_text
from ..device import small_copy
from .. import shapeless as _shapeless

_UNARY = ["real", "imag", "conjugate", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "square",
          "sin", "cos", "tan", "tanh", "sigmoid", "erf", "erfinv", "floor", "ceil"]
_FLOAT_ONLY = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "tanh",
               "sigmoid", "erf", "erfinv"}

__all__ = _UNARY + ["negative", "round", "logical_not", "astype", "stop_gradient", "add", "subtract",
                    "multiply", "divide", "power", "maximum", "minimum", "remainder", "equal", "not_equal",
                    "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
                    "arctan2", "where", "floor_divide", "isnan", "isinf", "clip", "array_equal", "allclose",
                    "isclose", "conj", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert", "left_shift",
                    "right_shift", "atan2", "bitwise_left_shift", "bitwise_right_shift", "pow"]


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def astype(a, dtype) -> Array:
    a = _arr(a)
    d = dt.to_dtype(dtype)
    if a.dtype is d:
        return a
    return apply("astype", [a], dtype=d.name)


def _unary(name):
    def op(a):
        a = _arr(a)
        if name in _FLOAT_ONLY and a.dtype.kind not in "fc":
            a = astype(a, dt.float32)  # MLX: integer inputs of float functions become float32
        return apply(name, [a])
    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}`, as `mx.{name}`."
    return op


for _n in _UNARY:
    globals()[_n] = _unary(_n)


def conj(a):
    return conjugate(a)


def negative(a):
    a = _arr(a)
    if a.dtype is dt.bool_:
        raise MiraxError(f"negative: not supported for bool arrays{where_text()}")
    return apply("negative", [a])


def round(a, decimals=0):
    a = _arr(a)
    if decimals == 0:
        return apply("round", [a])
    s = 10.0 ** decimals
    return divide(apply("round", [multiply(a, s)]), s)


def logical_not(a):
    return apply("logical_not", [_arr(a)])


def stop_gradient(a):
    return apply("stop_gradient", [_arr(a)])


def result_dtype(a, b) -> dt.Dtype:
    """MLX promotion with weakly typed Python scalars."""
    if isinstance(a, Array) and isinstance(b, Array):
        return dt.promote(a.dtype, b.dtype)
    if isinstance(a, Array):
        return dt.weak_scalar_dtype(b, a.dtype) if _is_scalar(b) else dt.promote(a.dtype, array(b).dtype)
    if isinstance(b, Array):
        return dt.weak_scalar_dtype(a, b.dtype) if _is_scalar(a) else dt.promote(array(a).dtype, b.dtype)
    return dt.promote(array(a).dtype, array(b).dtype)


def _is_scalar(x):
    return isinstance(x, (bool, int, float, complex))


_SCALARS = (bool, int, float)
_FILLED: dict = {}  # (Python type, repr, dtype, shape) -> the constant `_eager_scalar` made
_BROADCAST: dict = {}  # (id of a buffer, shape) -> (the buffer, its broadcast `_eager_broadcast` made)
_FILLED_ENTRIES = 256  # (then emptied: with _FILLED_BYTES, at most 4 MiB kept, 8 for _BROADCAST)
_FILLED_BYTES = 16384  # larger constants are made again each time, not kept


def _eager_broadcast(x, shape):
    """`broadcast_to(x, shape)` made now by numpy, for an evaluated array `x` in eager
    code on the CPU (a bias added to a batch: one op instead of two); None where the
    broadcast must be recorded (see `_eager_scalar`), or `x` is not evaluated yet."""
    if x.aval.shape == shape or math.prod(shape) > small_copy():
        return None
    data = eager_host_data(x)
    if data is None:
        return None
    # kept by the buffer (a layer's bias, broadcast every step): a buffer's values never
    # change, and the entry holds it, so no other buffer takes its id while it is kept
    key = (id(data), shape)
    hit = _BROADCAST.get(key)
    if hit is not None and hit[0] is data:
        return hit[1]
    c = Array._leaf(_filled(shape, data), x.aval.dtype)
    if c._data.nbytes <= _FILLED_BYTES:
        _keep(_BROADCAST, key, (data, c))
    return c


def _filled(shape, data):
    """A new numpy array of `shape` holding `data` broadcast (numpy's assignment: ~0.4 us
    for a small one, where `np.broadcast_to(...).copy()` takes ~2.7 and `np.full` ~1.2)."""
    out = np.empty(shape, data.dtype)
    out[...] = data
    return out


def _eager_scalar(v, d, like):
    """The Python scalar `v` of a binary op as an evaluated array of dtype `d` and the
    shape of the array `like`, in eager code on the CPU: what `broadcast_to(array(v, d),
    like.shape)` would compute, made by numpy at once instead of recorded as two ops and
    run as a kernel (`x * 2.0` on 16 floats: 32 -> ~11 us, as `x * y`). None where the
    ops must be recorded: in a trace (compile, grad, vmap: the IR keeps the broadcast),
    for another device, or for outputs large enough that the threads' broadcast kernel
    beats numpy's one-thread fill.

        x * 2.0      # multiply(x, <2.0 filled like x>): one op, one kernel
    """
    if like.aval.size > small_copy() or not eager_on_cpu(like):
        return None
    shape = like.aval.shape
    key = (type(v), repr(v), d, shape)  # (repr: -0.0 and nan are keys of their own)
    c = _FILLED.get(key)
    if c is None:
        s = array(v, d)  # the conversion's checks and errors (300 as uint8), as in _prepare
        c = Array._leaf(_filled(shape, s._data), d)
        if c._data.nbytes <= _FILLED_BYTES:
            _keep(_FILLED, key, c)
    return c


def _keep(cache, key, value):
    if len(cache) >= _FILLED_ENTRIES:
        cache.clear()
    cache[key] = value


def _prepare(name, a, b, dtype=None):
    """Promote and broadcast two operands to one dtype and shape."""
    d = dtype or result_dtype(a, b)
    if type(b) in _SCALARS and type(a) is Array and a.aval.dtype is d:
        c = _eager_scalar(b, d, a)
        if c is not None:
            return a, c
    elif type(a) in _SCALARS and type(b) is Array and b.aval.dtype is d:
        c = _eager_scalar(a, d, b)
        if c is not None:
            return c, b
    if not (type(a) is Array and type(b) is Array and a.aval.dtype is d and b.aval.dtype is d):
        a = astype(_arr(a) if isinstance(a, Array) else array(a, d), d)
        b = astype(_arr(b) if isinstance(b, Array) else array(b, d), d)
    sa, sb = a.aval.shape, b.aval.shape
    if sa[len(sa) - len(sb):] == sb:  # (the common cases, without the general rule: b's shape ends a's)
        shape = sa
    elif sb[len(sb) - len(sa):] == sa:
        shape = sb
    else:
        try:
            shape = broadcast_shapes(sa, sb, op=name)
        except MiraxError as err:
            raise MiraxError(f"{err}{where_text()}") from None
    if _shapeless.active():  # the shape follows the operands at new input shapes
        return _shapeless.broadcast(a, shape), _shapeless.broadcast(b, shape)
    return _broadcast(a, shape), _broadcast(b, shape)


def _broadcast(x, shape):
    """`broadcast_to(x, shape)`, made at once in eager code when it can (`_eager_broadcast`)."""
    if x.aval.shape == shape:
        return x
    y = _eager_broadcast(x, shape)
    if y is not None:
        return y
    from .shape import broadcast_to
    return broadcast_to(x, shape)


def _binary(name, float_only=False, bool_only=False, integer_only=False):
    def op(a, b):
        same = type(a) is Array and type(b) is Array and a.aval.dtype is b.aval.dtype
        d = a.aval.dtype if same else result_dtype(a, b)
        if float_only and d.kind not in "fc":
            d = dt.float32
        if bool_only:
            d = dt.bool_
        if integer_only:  # bitwise ops: integers and bool (MLX promotes first; floats are refused)
            if d.kind not in "biu":
                raise MiraxError(f"mirax.{name}: needs integer or bool operands, got {d.name}{where_text()}")
            if name.endswith("shift") and d.kind == "b":
                d = dt.uint8  # numpy shifts bools as small integers
        if same and a.aval.dtype is d and a.aval.shape == b.aval.shape and not _shapeless.active():
            return apply(name, [a, b])  # what _prepare would give: nothing to promote or broadcast
        x, y = _prepare(name, a, b, d)
        return apply(name, [x, y])
    op.__name__ = name
    op.__doc__ = f"Elementwise `{name}` with broadcasting, as `mx.{name}`."
    return op


add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide", float_only=True)
maximum = _binary("maximum")
minimum = _binary("minimum")
remainder = _binary("remainder")
arctan2 = _binary("arctan2", float_only=True)
atan2 = arctan2  # MLX's array-API alias
equal = _binary("equal")
not_equal = _binary("not_equal")
less = _binary("less")
less_equal = _binary("less_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
logical_and = _binary("logical_and", bool_only=True)
logical_or = _binary("logical_or", bool_only=True)


def power(a, b):
    d = result_dtype(a, b)
    x, y = _prepare("power", a, b, d)
    if d.kind == "b":
        x, y = astype(x, dt.int32), astype(y, dt.int32)
    if d.kind == "u":
        x, y = astype(x, dt.int64), astype(y, dt.int64)
        return astype(apply("power", [x, y]), d)
    return apply("power", [x, y])


pow = power  # MLX's array-API alias (shadows the builtin only in this module, which never calls it)


def floor_divide(a, b):
    d = result_dtype(a, b)
    if d.kind == "c":
        raise TypeError(f"floor_divide: not supported for complex arrays{where_text()}")
    if d.kind == "b":
        d = dt.int32
    x, y = _prepare("floor_divide", a, b, d)
    return apply("floor_divide", [x, y])


def where(condition, x, y):
    """`x` where `condition` else `y`, broadcasting all three."""
    c = astype(_arr(condition), dt.bool_)
    d = result_dtype(x, y)
    xa, ya = _prepare("where", x, y, d)
    try:
        shape = broadcast_shapes(c.shape, xa.shape, op="where")
    except MiraxError as err:
        raise MiraxError(f"{err}{where_text()}") from None
    bcast = _shapeless.broadcast if _shapeless.active() else _broadcast
    return apply("where", [bcast(c, shape), bcast(xa, shape), bcast(ya, shape)])


def isnan(a):
    a = _arr(a)
    return not_equal(a, a)


def isinf(a):
    a = _arr(a)
    if a.dtype.kind not in "fc":
        return not_equal(a, a)  # integers are never infinite: all False
    return equal(globals()["abs"](a), float("inf"))


def clip(a, a_min=None, a_max=None):
    a = _arr(a)
    if a_min is not None:
        a = maximum(a, a_min)
    if a_max is not None:
        a = minimum(a, a_max)
    return a


def isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """|a - b| <= atol + rtol * |b|; infinities are close only to themselves (numpy)."""
    a, b = _arr(a), _arr(b)
    near = less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b))))
    if a.dtype.is_inexact or b.dtype.is_inexact:  # inf - inf is not "near": compare those exactly
        finite = logical_and(less(abs(a), math.inf), less(abs(b), math.inf))
        near = logical_and(near, finite)
    close = logical_or(near, equal(a, b))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    from .reduction import all as _all
    return _all(isclose(a, b, rtol, atol, equal_nan))


bitwise_and = _binary("bitwise_and", integer_only=True)
bitwise_or = _binary("bitwise_or", integer_only=True)
bitwise_xor = _binary("bitwise_xor", integer_only=True)
left_shift = _binary("left_shift", integer_only=True)
right_shift = _binary("right_shift", integer_only=True)
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift  # MLX's array-API aliases


def bitwise_invert(a):
    """~a: every bit flipped (logical not for bool)."""
    a = _arr(a)
    if a.dtype.kind == "b":
        return logical_not(a)
    if a.dtype.kind not in "iu":
        raise MiraxError(f"mirax.bitwise_invert: needs integer or bool operands, got {a.dtype.name}{where_text()}")
    return bitwise_xor(a, astype(array(-1 if a.dtype.kind == "i" else int(np.iinfo(a.dtype.storage).max)),
                                 a.dtype))


def array_equal(a, b, equal_nan=False):
    """Whether `a` and `b` have the same shape and values (NaNs equal with `equal_nan`)."""
    from .reduction import all as _all
    a, b = _arr(a), _arr(b)
    if a.shape != b.shape:
        return array(False)
    same = equal(a, b)
    if equal_nan and a.dtype.kind in "fc" and b.dtype.kind in "fc":
        same = logical_or(same, logical_and(isnan(a), isnan(b)))
    return _all(same)


# ---- operators on Array ----------------------------------------------------------------

def _operand_ok(x):
    """What MLX's operators take beside an array: arrays and scalars (lists, tuples and
    other objects are refused: `x == [1, 2]` is False, `x * [1, 2]` raises ValueError)."""
    return isinstance(x, (Array, bool, int, float, complex, np.ndarray, np.generic))


def _checked(fn, name):
    def op(self, other):
        if not _operand_ok(other):
            raise ValueError(f"Cannot perform {name} on an mirax array and {type(other).__name__}; convert it "
                             f"with mr.array first{where_text()}")
        return fn(self, other)
    return op


def _rev(fn):
    return lambda self, other: fn(other, self)


def _eq(self, other):
    return equal(self, other) if _operand_ok(other) else False


def _ne(self, other):
    return not_equal(self, other) if _operand_ok(other) else True


# binary operators and their reflected forms (`2 - x` calls x.__rsub__)
for _name, _fn in (("add", add), ("sub", subtract), ("mul", multiply), ("truediv", divide),
                   ("floordiv", floor_divide), ("mod", remainder), ("pow", power), ("and", bitwise_and),
                   ("or", bitwise_or), ("xor", bitwise_xor), ("lshift", left_shift), ("rshift", right_shift)):
    setattr(Array, f"__{_name}__", _checked(_fn, _name))
    setattr(Array, f"__r{_name}__", _checked(_rev(_fn), _name))
for _name, _fn in (("lt", less), ("le", less_equal), ("gt", greater), ("ge", greater_equal)):
    setattr(Array, f"__{_name}__", _checked(_fn, _name))
Array.__neg__ = negative
Array.__abs__ = lambda self: globals()["abs"](self)
Array.__eq__ = _eq
Array.__ne__ = _ne
Array.__invert__ = lambda self: bitwise_invert(self)
Array.__hash__ = object.__hash__
Array.astype = astype
Array.real = property(lambda self: real(self))
Array.imag = property(lambda self: imag(self))
Array.conj = lambda self: conjugate(self)
for _n in ["abs", "exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "sigmoid",
           "round"]:
    setattr(Array, _n, globals()[_n])





def positive(a):
    """`+a` (numpy's and MLX's `positive`): the array itself."""
    return _arr(a) if isinstance(a, Array) else array(a)


__all__ += ["positive"]


def _inplace(name):
    """`x op= y` as MLX: `x` (this very object) takes the result; arrays computed from x
    before keep its old value (see array.rebind)."""
    def op(self, other):
        from ..array import rebind
        new = getattr(Array, name)(self, other)
        if new.dtype is not self.dtype:  # MLX: an in-place op keeps the array's type
            raise ValueError(f"in-place {name.strip('_')} would change the array's dtype from {self.dtype.name} "
                             f"to {new.dtype.name}; write x = x {name.strip('_')} y instead{where_text()}")
        rebind(self, new)
        return self
    return op


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
              "rshift", "matmul"):
    setattr(Array, f"__i{_name}__", _inplace(f"__{_name}__"))
