"""Elementwise primitives: unary, binary, `where` and `astype`.

Operands of binary ops have one shape and one dtype: the Python API broadcasts and
promotes first, so the IR shows every `broadcast_to` and `astype` explicitly (as in
JAX's lax). Each op is one `unary(...)`/`binary(...)` line giving its scalar lowering
per dtype kind and its numpy reference.

    %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "mirax.add"(%0, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import AttrKind, Aval, MiraxError, primitive, same_dtypes, same_shapes

FLOATS = ("f",)
INEXACT = ("f", "c")
NUMERIC = ("i", "u", "f", "c")
REAL = ("b", "i", "u", "f")
ALL = ("b", "i", "u", "f", "c")

FLOAT_TEST = [dt.float32, dt.float64, dt.float16]
NUM_TEST = [dt.float32, dt.int32, dt.float64]


def _elt(d):
    return d.signless


def _upcast(b, x, d):
    """Half types compute transcendental functions in f32 (libm has no f16 versions)."""
    if d.mlir in ("f16", "bf16"):
        return b.op(f"arith.extf {x} : {d.mlir} to f32"), "f32"
    return x, d.mlir


def _downcast(b, y, d, t):
    if t != d.signless:
        return b.op(f"arith.truncf {y} : {t} to {d.signless}")
    return y


def _float_fn(fn):
    """A body for a float function given as `fn(b, x, t) -> value` in type t."""
    def body(b, x, d):
        x2, t = _upcast(b, x, d)
        return _downcast(b, fn(b, x2, t), d, t)
    return body


def _math(name):
    """`math.<name>` (f16/bf16 through f32). The CPU pipeline's `mirax-math-approx`
    (lowering/approx.py) turns the f32 exp/log/erf/tanh into vectorizable polynomials."""
    return _float_fn(lambda b, x, t: b.op(f"math.{name} {x} : {t}"))


def _complex(name):
    return lambda b, x, d: b.op(f"complex.{name} {x} : {d.mlir}")


def _same_shape_rule(kinds, result=None):
    def rule(avals, **_):
        (a,) = avals
        if a.dtype.kind not in kinds:
            raise MiraxError(f"does not support dtype {a.dtype.name}")
        return Aval(a.shape, result(a.dtype)) if result else a  # (avals are frozen: shared)
    return rule


UNARY = {}


def unary(name, bodies, reference, result=None, summary="", **test):
    """Declare an elementwise unary op. `bodies` maps a dtype kind to `body(b, x, dtype)`."""
    kinds = tuple(bodies)

    def lower(e, ins, in_avals, out):
        d = in_avals[0].dtype
        return e.map(ins, in_avals, out, lambda b, x: bodies[d.kind](b, x, d))

    rule = _same_shape_rule(kinds, result)

    def shape(avals, **params):
        try:
            return rule(avals, **params)
        except MiraxError as err:
            raise MiraxError(f"mirax.{name} {err}") from None

    p = primitive(name, ["x"], shape, lower, reference, summary=summary, **test)
    UNARY[name] = p
    return p


def _neg_int(b, x, d):
    z = b.const(0, d.signless)
    return b.op(f"arith.subi {z}, {x} : {d.signless}")


def _sign(b, x, d):
    t = d.signless
    if d.kind == "b":
        return x
    zero, one = b.const(0, t), b.const(1, t)
    if d.kind == "f":
        gt = b.op(f"arith.cmpf ogt, {x}, {zero} : {t}")
        lt = b.op(f"arith.cmpf olt, {x}, {zero} : {t}")
        m1 = b.const(-1.0, t)
        s = b.op(f"arith.select {lt}, {m1}, {zero} : {t}")
        s = b.op(f"arith.select {gt}, {one}, {s} : {t}")
        isnan = b.op(f"arith.cmpf uno, {x}, {x} : {t}")
        return b.op(f"arith.select {isnan}, {x}, {s} : {t}")
    if d.kind == "u":
        ne = b.op(f"arith.cmpi ne, {x}, {zero} : {t}")
        return b.op(f"arith.extui {ne} : i1 to {t}") if t != "i1" else ne
    gt = b.op(f"arith.cmpi sgt, {x}, {zero} : {t}")
    lt = b.op(f"arith.cmpi slt, {x}, {zero} : {t}")
    m1 = b.const(-1, t)
    s = b.op(f"arith.select {lt}, {m1}, {zero} : {t}")
    return b.op(f"arith.select {gt}, {one}, {s} : {t}")


def _complex_sign(b, x, d):
    a = b.op(f"complex.abs {x} : {d.mlir}")
    zero = b.const(0.0, "f32")
    isz = b.op(f"arith.cmpf oeq, {a}, {zero} : f32")
    one = b.const(1.0, "f32")
    safe = b.op(f"arith.select {isz}, {one}, {a} : f32")
    re = b.op(f"complex.re {x} : {d.mlir}")
    im = b.op(f"complex.im {x} : {d.mlir}")
    re = b.op(f"arith.divf {re}, {safe} : f32")
    im = b.op(f"arith.divf {im}, {safe} : f32")
    return b.op(f"complex.create {re}, {im} : {d.mlir}")


def _identity(b, x, d):
    return x


def _float_recip(b, x, t):
    one = b.const(1.0, t)
    return b.op(f"arith.divf {one}, {x} : {t}")


def _sigmoid(b, x, t):
    """1 / (1 + exp(-x)) without overflow: with e = exp(-|x|) in (0, 1] and
    r = 1 / (1 + e), the result is r for x >= 0 and e * r for x < 0, so very negative x
    give exp(x) down to the denormals rather than 0 (f32's exp is then the polynomial of
    lowering/approx.py)."""
    one = b.const(1.0, t)
    ax = b.op(f"math.absf {x} : {t}")
    nax = b.op(f"arith.negf {ax} : {t}")
    e = b.op(f"math.exp {nax} : {t}")
    den = b.op(f"arith.addf {one}, {e} : {t}")
    r = b.op(f"arith.divf {one}, {den} : {t}")
    er = b.op(f"arith.mulf {e}, {r} : {t}")
    neg = b.op(f"arith.cmpf olt, {x}, {b.const(0.0, t)} : {t}")
    return b.op(f"arith.select {neg}, {er}, {r} : {t}")


def _erfinv(b, x, t):
    """Giles' single-precision erfinv ("Approximating the erfinv function", 2010),
    the form XLA and JAX use; ~2e-7 relative error in float32 away from +-1."""
    c = lambda v: b.const(v, t)  # noqa: E731
    one = c(1.0)
    mx = b.op(f"arith.negf {x} : {t}")
    xx = b.op(f"arith.mulf {x}, {mx} : {t}")
    om = b.op(f"arith.addf {one}, {xx} : {t}")  # 1 - x^2
    lg = b.op(f"math.log {om} : {t}")
    w = b.op(f"arith.negf {lg} : {t}")
    small = b.op(f"arith.cmpf olt, {w}, {c(5.0)} : {t}")
    ws = b.op(f"arith.subf {w}, {c(2.5)} : {t}")
    sq = b.op(f"math.sqrt {w} : {t}")
    wl = b.op(f"arith.subf {sq}, {c(3.0)} : {t}")
    ps = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
          -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]
    pl = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
          -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]
    acc_s, acc_l = c(ps[0]), c(pl[0])
    for a, bb in zip(ps[1:], pl[1:]):
        acc_s = b.op(f"math.fma {acc_s}, {ws}, {c(a)} : {t}")
        acc_l = b.op(f"math.fma {acc_l}, {wl}, {c(bb)} : {t}")
    p = b.op(f"arith.select {small}, {acc_s}, {acc_l} : {t}")
    r = b.op(f"arith.mulf {p}, {x} : {t}")
    # exactly +-1 give +-inf, |x| > 1 gives nan, as numpy/scipy
    ax = b.op(f"math.absf {x} : {t}")
    is1 = b.op(f"arith.cmpf oeq, {ax}, {one} : {t}")
    inf = c(float("inf"))
    sinf = b.op(f"math.copysign {inf}, {x} : {t}")
    if t == "f64":  # two Newton steps on erf(y) = x bring the f32 guess to f64 accuracy
        k = c(2 / np.sqrt(np.pi))
        for _ in range(2):
            ey = b.op(f"math.erf {r} : {t}")
            num = b.op(f"arith.subf {ey}, {x} : {t}")
            yy = b.op(f"arith.mulf {r}, {r} : {t}")
            nyy = b.op(f"arith.negf {yy} : {t}")
            g = b.op(f"math.exp {nyy} : {t}")
            den = b.op(f"arith.mulf {k}, {g} : {t}")
            step = b.op(f"arith.divf {num}, {den} : {t}")
            r = b.op(f"arith.subf {r}, {step} : {t}")
    return b.op(f"arith.select {is1}, {sinf}, {r} : {t}")


def _round_f(b, x, t):
    return b.op(f"math.roundeven {x} : {t}")


def _logical_not(b, x, d):
    t = d.signless
    if d.kind == "c":
        z = b.const(0, d.mlir)
        return b.op(f"complex.eq {x}, {z} : {d.mlir}")
    z = b.const(0, t)
    if d.kind == "f":
        return b.op(f"arith.cmpf oeq, {x}, {z} : {t}")
    return b.op(f"arith.cmpi eq, {x}, {z} : {t}")


def _float_to_float32(d):
    return dt.float32 if d.kind == "c" else d


def _erfinv_ref(x):
    from math import erf
    # Newton on erf, enough for a test oracle without scipy
    y = np.zeros_like(x, dtype=np.float64)
    xs = x.astype(np.float64)
    derf = np.vectorize(erf, otypes=[np.float64])
    for _ in range(60):
        y = y - (derf(y) - xs) / (2 / np.sqrt(np.pi) * np.exp(-y * y))
        y = np.clip(y, -6, 6)
    y = np.where(np.abs(xs) == 1, np.sign(xs) * np.inf, y)
    y = np.where(np.abs(xs) > 1, np.nan, y)
    return y.astype(x.dtype)


def _erf_ref(x):
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _np_sign(x):
    if x.dtype == np.complex64:
        a = np.abs(x)
        return np.where(a == 0, 0, x / np.where(a == 0, 1, a)).astype(x.dtype)
    return np.sign(x)


unary("negative", {"i": _neg_int, "u": _neg_int, "f": _float_fn(lambda b, x, t: b.op(f"arith.negf {x} : {t}")), "c": _complex("neg")},
      np.negative, summary="-x", dtypes=NUM_TEST)
def _abs_int(b, x, d):
    """|x| as a compare and a select (LLVM still finds its abs instruction): math.absi of
    8- and 16-bit integers has no SPIR-V form (the GPU refused int8 abs)."""
    z = b.const(0, d.signless)
    neg = b.op(f"arith.cmpi slt, {x}, {z} : {d.signless}")
    return b.op(f"arith.select {neg}, {_neg_int(b, x, d)}, {x} : {d.signless}")


unary("abs", {"b": _identity, "i": _abs_int, "u": _identity,
              "f": _math("absf"), "c": lambda b, x, d: b.op(f"complex.abs {x} : {d.mlir}")},
      np.abs, result=_float_to_float32, summary="|x|", dtypes=NUM_TEST + [dt.complex64])
unary("sign", {"b": _identity, "i": _sign, "u": _sign, "f": _sign, "c": _complex_sign}, _np_sign,
      summary="-1, 0 or 1 (x/|x| for complex)", dtypes=NUM_TEST + [dt.complex64])
for _n, _ref, _dom, _cplx in [
        ("exp", np.exp, (-5, 5), "exp"), ("log", np.log, (0.1, 10), "log"),
        ("log1p", np.log1p, (-0.9, 10), "log1p"), ("expm1", np.expm1, (-5, 5), "expm1"),
        ("sqrt", np.sqrt, (0.0, 10), "sqrt"), ("rsqrt", lambda x: 1 / np.sqrt(x), (0.1, 10), "rsqrt"),
        ("sin", np.sin, (-5, 5), "sin"), ("cos", np.cos, (-5, 5), "cos"), ("tan", np.tan, (-1.4, 1.4), "tan"),
        ("tanh", np.tanh, (-5, 5), "tanh"), ("erf", _erf_ref, (-3, 3), None)]:
    _bodies = {"f": _math(_n)}
    if _cplx:
        _bodies["c"] = _complex(_cplx)
    unary(_n, _bodies, _ref, summary=f"{_n}(x)", dtypes=FLOAT_TEST, domain=_dom)
unary("erfinv", {"f": _float_fn(_erfinv)}, _erfinv_ref, summary="inverse of erf", dtypes=FLOAT_TEST,
      domain=(-0.99, 0.99))
unary("reciprocal", {"f": _float_fn(_float_recip), "c": lambda b, x, d: b.op(
      f"complex.div {b.const(1, d.mlir)}, {x} : {d.mlir}")}, np.reciprocal, summary="1/x",
      dtypes=FLOAT_TEST, domain=(0.5, 4))
unary("square", {"i": lambda b, x, d: b.op(f"arith.muli {x}, {x} : {d.signless}"),
                 "u": lambda b, x, d: b.op(f"arith.muli {x}, {x} : {d.signless}"),
                 "f": _float_fn(lambda b, x, t: b.op(f"arith.mulf {x}, {x} : {t}")),
                 "c": lambda b, x, d: b.op(f"complex.mul {x}, {x} : {d.mlir}")},
      np.square, summary="x*x", dtypes=NUM_TEST)
unary("sigmoid", {"f": _float_fn(_sigmoid)}, lambda x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype),
      summary="1/(1+exp(-x))", dtypes=FLOAT_TEST)
unary("floor", {"i": _identity, "u": _identity, "b": _identity, "f": _math("floor")}, np.floor,
      summary="floor(x)", dtypes=FLOAT_TEST)
unary("ceil", {"i": _identity, "u": _identity, "b": _identity, "f": _math("ceil")}, np.ceil,
      summary="ceil(x)", dtypes=FLOAT_TEST)
unary("round", {"i": _identity, "u": _identity, "b": _identity, "f": _float_fn(_round_f)}, np.round,
      summary="round half to even", dtypes=FLOAT_TEST)
unary("logical_not", {k: _logical_not for k in ALL}, np.logical_not, result=lambda d: dt.bool_,
      summary="x == 0", dtypes=[dt.bool_, dt.float32, dt.int32])


# ---- astype -------------------------------------------------------------------------

def _convert(b, x, src, dst):
    """Scalar conversion between any two mirax dtypes (signless values)."""
    s, t = src.signless, dst.signless
    if src is dst:
        return x
    if dst.kind == "b":
        if src.kind == "c":
            return b.op(f"complex.neq {x}, {b.const(0, src.mlir)} : {src.mlir}")
        z = b.const(0, s)
        return b.op(f"arith.cmpf une, {x}, {z} : {s}" if src.kind == "f" else f"arith.cmpi ne, {x}, {z} : {s}")
    if src.kind == "c":
        x = b.op(f"complex.re {x} : {src.mlir}")
        return _convert(b, x, dt.float32, dst)
    if dst.kind == "c":
        re = _convert(b, x, src, dt.float32)
        zero = b.const(0.0, "f32")
        return b.op(f"complex.create {re}, {zero} : {dst.mlir}")
    if dst.kind == "f":
        if src.kind == "f":
            if src.mlir in ("f16", "bf16") and dst.mlir in ("f16", "bf16"):
                x = b.op(f"arith.extf {x} : {s} to f32")
                return b.op(f"arith.truncf {x} : f32 to {t}")
            op = "extf" if dst.bits > src.bits else "truncf"
            return b.op(f"arith.{op} {x} : {s} to {t}")
        op = "sitofp" if src.kind == "i" else "uitofp"
        return b.op(f"arith.{op} {x} : {s} to {t}")
    # integer destination
    if src.kind == "f":
        return _float_to_int(b, x, src, dst)
    if dst.bits == src.bits:
        return x
    if dst.bits < src.bits:
        return b.op(f"arith.trunci {x} : {s} to {t}")
    op = "extsi" if src.kind == "i" else "extui"
    return b.op(f"arith.{op} {x} : {s} to {t}")


def saturation_bounds(src_storage, dst) -> tuple[float, float]:
    """The values of float type `src_storage` (numpy's float32 or float64) nearest to the
    range of integer dtype `dst` from inside: float -> int conversions clamp to them.

        saturation_bounds(np.float32, dt.int32)   # (-2147483648.0, 2147483520.0)
    """
    info = np.iinfo(dst.storage)
    f = np.dtype(src_storage).type
    lo, hi = f(info.min), f(info.max)  # (a power of two or 0: exact; the max may round up)
    if int(hi) > info.max:
        hi = np.nextafter(hi, f(0))
    return float(lo), float(hi)


def _float_to_int(b, x, src, dst):
    """A float -> integer conversion that saturates: values beyond the integer range give
    its nearest end (the integer's minimum or maximum), NaN gives 0, as XLA's conversion does (`arith.fptosi`/`fptoui` of
    them is poison: the same program gave x86's wrapped integers on x86-64 and the
    saturated ones on AArch64, numpy's casts too)."""
    s, t = src.signless, dst.signless
    if s in ("f16", "bf16"):  # (clamped in f32: the widening is exact)
        x, s = b.op(f"arith.extf {x} : {s} to f32"), "f32"
    bounds = saturation_bounds(np.float64 if s == "f64" else np.float32, dst)
    lo, hi = (b.const(v, s) for v in bounds)
    c = b.op(f"arith.select {b.op(f'arith.cmpf olt, {x}, {lo} : {s}')}, {lo}, {x} : {s}")
    above = b.op(f"arith.cmpf ogt, {c}, {hi} : {s}")
    c = b.op(f"arith.select {above}, {hi}, {c} : {s}")
    y = b.op(f"arith.{'fptosi' if dst.kind == 'i' else 'fptoui'} {c} : {s} to {t}")
    top = int(np.iinfo(dst.storage).max)
    if bounds[1] < top:  # (the integer maximum is no value of the float type: 2^31 - 1 in f32)
        y = b.op(f"arith.select {above}, {b.const(top if dst.kind == 'i' else top - (1 << dst.bits), t)}, {y} : {t}")
    nan = b.op(f"arith.cmpf uno, {x}, {x} : {s}")
    return b.op(f"arith.select {nan}, {b.const(0, t)}, {y} : {t}")


def _astype_shape(avals, dtype):
    (a,) = avals
    return Aval(a.shape, dt.from_name(dtype))


def _astype_lower(e, ins, in_avals, out, dtype):
    src, dst = in_avals[0].dtype, out.dtype
    return e.map(ins, in_avals, out, lambda b, x: _convert(b, x, src, dst))


def _astype_ref(x, dtype):
    d = dt.from_name(dtype)
    if d is dt.bfloat16:
        raise NotImplementedError
    if np.iscomplexobj(x) and d.kind != "c":
        x = x.real
    if d.kind in "iu" and np.asarray(x).dtype.kind == "f":  # saturating (`_float_to_int`)
        x = np.asarray(x)
        wide = np.float64 if x.dtype == np.float64 else np.float32  # (f16: clamped in f32)
        lo, hi = saturation_bounds(wide, d)
        with np.errstate(invalid="ignore"):
            x = x.astype(wide)
            out = np.where(np.isnan(x), 0, np.clip(x, lo, hi)).astype(d.storage)
            return np.where(x > hi, np.iinfo(d.storage).max, out).astype(d.storage)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(d.storage)


class _DtypeAttr(AttrKind):
    """astype's target dtype, stored as a type attribute (`dtype = f32`)."""

    irdl_base = "#builtin.type"

    def to_text(self, v):
        return dt.from_name(v).mlir

    def from_ir(self, attr):
        from mlir import ir
        return dt.from_mlir(str(ir.TypeAttr(attr).value)).name


primitive("astype", ["x"], _astype_shape, _astype_lower, _astype_ref, attrs={"dtype": _DtypeAttr()},
          summary="dtype conversion (C casts; float to int truncates)", dtypes=[dt.float32, dt.int32, dt.bool_])


# ---- binary -------------------------------------------------------------------------

BINARY = {}


def binary(name, bodies, reference, result=None, summary="", **test):
    """Declare an elementwise binary op over same-shaped, same-dtype operands."""
    kinds = tuple(bodies)

    def shape(avals, **_):
        s = same_shapes(avals, f"mirax.{name}")
        d = same_dtypes(avals, f"mirax.{name}")
        if d.kind not in kinds:
            raise MiraxError(f"mirax.{name} does not support dtype {d.name}")
        return Aval(s, result(d)) if result else avals[0]  # (its shape and dtype; frozen: shared)

    def lower(e, ins, in_avals, out):
        d = in_avals[0].dtype
        return e.map(ins, in_avals, out, lambda b, x, y: bodies[d.kind](b, x, y, d))

    p = primitive(name, ["lhs", "rhs"], shape, lower, reference, summary=summary, **test)
    BINARY[name] = p
    return p


def _arith(fop=None, iop=None, uop=None, cop=None, bop=None):
    """Bodies from arith op names per kind (`addf`, `addi`, ...)."""
    out = {}

    def mk(opname, dialect="arith", half_up=False):
        def body(b, x, y, d):
            t = d.mlir if d.kind == "c" else d.signless
            if half_up and d.kind == "f":
                x2, t2 = _upcast(b, x, d)
                y2, _ = _upcast(b, y, d)
                return _downcast(b, b.op(f"{dialect}.{opname} {x2}, {y2} : {t2}"), d, t2)
            return b.op(f"{dialect}.{opname} {x}, {y} : {t}")
        return body
    if fop:
        out["f"] = mk(fop)
    if iop:
        out["i"] = mk(iop)
    if uop:
        out["u"] = mk(uop)
    if bop:
        out["b"] = mk(bop)
    if cop:
        out["c"] = mk(cop, "complex")
    return out


def _remainder(b, x, y, d):
    """Python/MLX remainder: the result has the divisor's sign. Integer division by zero
    gives 0 (as numpy) instead of trapping."""
    t = d.signless
    zero = b.const(0, t)
    if d.kind == "f":
        r = b.op(f"arith.remf {x}, {y} : {t}")
        rnz = b.op(f"arith.cmpf une, {r}, {zero} : {t}")
        rneg = b.op(f"arith.cmpf olt, {r}, {zero} : {t}")
        yneg = b.op(f"arith.cmpf olt, {y}, {zero} : {t}")
        diff = b.op(f"arith.xori {rneg}, {yneg} : i1")
        fix = b.op(f"arith.andi {rnz}, {diff} : i1")
        ry = b.op(f"arith.addf {r}, {y} : {t}")
        return b.op(f"arith.select {fix}, {ry}, {r} : {t}")
    one = b.const(1, t)
    yz = b.op(f"arith.cmpi eq, {y}, {zero} : {t}")
    if d.kind == "u":
        safe = b.op(f"arith.select {yz}, {one}, {y} : {t}")
        r = b.op(f"arith.remui {x}, {safe} : {t}")
        return b.op(f"arith.select {yz}, {zero}, {r} : {t}")
    m1 = b.const(-1, t)
    ym1 = b.op(f"arith.cmpi eq, {y}, {m1} : {t}")
    bad = b.op(f"arith.ori {yz}, {ym1} : i1")  # INT_MIN % -1 traps on x86
    safe = b.op(f"arith.select {bad}, {one}, {y} : {t}")
    r = b.op(f"arith.remsi {x}, {safe} : {t}")
    rnz = b.op(f"arith.cmpi ne, {r}, {zero} : {t}")
    rneg = b.op(f"arith.cmpi slt, {r}, {zero} : {t}")
    yneg = b.op(f"arith.cmpi slt, {y}, {zero} : {t}")
    diff = b.op(f"arith.xori {rneg}, {yneg} : i1")
    fix = b.op(f"arith.andi {rnz}, {diff} : i1")
    ry = b.op(f"arith.addi {r}, {safe} : {t}")
    r = b.op(f"arith.select {fix}, {ry}, {r} : {t}")
    return b.op(f"arith.select {bad}, {zero}, {r} : {t}")


def _ipow(b, x, y, d):
    """x ** y for integers by binary exponentiation, unrolled over the exponent's bits
    (math.ipowi has no lowering to LLVM or SPIR-V without outlining a function):
    wrapping products; a negative exponent gives 0, as MLX."""
    t = d.signless
    one = b.const(1, t)
    zero = b.const(0, t)
    acc, base = one, x
    for k in range(d.bits - (0 if d.kind == "u" else 1)):
        bit = b.op(f"arith.andi {b.op(f'arith.shrui {y}, {b.const(k, t)} : {t}')}, {one} : {t}")
        odd = b.op(f"arith.cmpi ne, {bit}, {zero} : {t}")
        acc = b.op(f"arith.select {odd}, {b.op(f'arith.muli {acc}, {base} : {t}')}, {acc} : {t}")
        base = b.op(f"arith.muli {base}, {base} : {t}")
    if d.kind == "u":
        return acc
    neg = b.op(f"arith.cmpi slt, {y}, {zero} : {t}")
    return b.op(f"arith.select {neg}, {zero}, {acc} : {t}")


def _powf(b, x, y, d):
    x2, t = _upcast(b, x, d)
    y2, _ = _upcast(b, y, d)
    return _downcast(b, b.op(f"math.powf {x2}, {y2} : {t}"), d, t)


def _atan2(b, x, y, d):
    x2, t = _upcast(b, x, d)
    y2, _ = _upcast(b, y, d)
    return _downcast(b, b.op(f"math.atan2 {x2}, {y2} : {t}"), d, t)


def _cmp(fpred, spred, upred, cplx=None):
    def body(b, x, y, d):
        t = d.signless
        if d.kind == "f":
            return b.op(f"arith.cmpf {fpred}, {x}, {y} : {t}")
        if d.kind == "c":
            return b.op(f"complex.{cplx} {x}, {y} : {d.mlir}")
        pred = spred if d.kind == "i" else upred
        return b.op(f"arith.cmpi {pred}, {x}, {y} : {t}")
    kinds = ["b", "i", "u", "f"] + (["c"] if cplx else [])
    return {k: body for k in kinds}


def _bool_result(d):
    return dt.bool_


def _np_remainder(x, y):
    if x.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.remainder(x, np.where(y == 0, 1, y))
        return np.where(y == 0, 0, r).astype(x.dtype)
    return np.remainder(x, y)


binary("add", _arith("addf", "addi", "addi", "add", "ori"), np.add, summary="x + y", dtypes=NUM_TEST + [dt.complex64])
binary("subtract", _arith("subf", "subi", "subi", "sub"), np.subtract, summary="x - y", dtypes=NUM_TEST)
binary("multiply", _arith("mulf", "muli", "muli", "mul", "andi"), np.multiply, summary="x * y",
       dtypes=NUM_TEST + [dt.complex64])
binary("divide", _arith("divf", cop="div"), np.divide, summary="x / y (inexact dtypes)",
       dtypes=FLOAT_TEST, domain=(0.5, 4))
binary("power", {"f": _powf, "i": _ipow, "u": _ipow, "c": _arith(cop="pow")["c"]},
       lambda x, y: np.power(x, y), summary="x ** y", dtypes=[dt.float32, dt.float64, dt.int32, dt.uint8],
       domain=(0.5, 2))
binary("maximum", _arith("maximumf", "maxsi", "maxui", bop="ori"), np.maximum, summary="max(x, y), NaN-propagating",
       dtypes=NUM_TEST)
binary("minimum", _arith("minimumf", "minsi", "minui", bop="andi"), np.minimum, summary="min(x, y), NaN-propagating",
       dtypes=NUM_TEST)
binary("remainder", {"i": _remainder, "u": _remainder, "f": _remainder}, _np_remainder,
       summary="x mod y with the sign of y", dtypes=[dt.float32, dt.int32], domain=(1, 7))
binary("arctan2", {"f": _atan2}, np.arctan2, summary="atan2(x, y)", dtypes=FLOAT_TEST)


def _floor_divide(b, x, y, d):
    """floor(x / y); integer division by zero gives 0 (as numpy) instead of trapping."""
    t = d.signless
    if d.kind == "f":
        x2, t2 = _upcast(b, x, d)
        y2, _ = _upcast(b, y, d)
        q = b.op(f"arith.divf {x2}, {y2} : {t2}")
        return _downcast(b, b.op(f"math.floor {q} : {t2}"), d, t2)
    zero, one = b.const(0, t), b.const(1, t)
    yz = b.op(f"arith.cmpi eq, {y}, {zero} : {t}")
    if d.kind == "u":
        safe = b.op(f"arith.select {yz}, {one}, {y} : {t}")
        q = b.op(f"arith.divui {x}, {safe} : {t}")
        return b.op(f"arith.select {yz}, {zero}, {q} : {t}")
    m1 = b.const(-1, t)
    ym1 = b.op(f"arith.cmpi eq, {y}, {m1} : {t}")
    safe = b.op(f"arith.select {yz}, {one}, {y} : {t}")
    safe = b.op(f"arith.select {ym1}, {one}, {safe} : {t}")  # INT_MIN / -1 traps on x86
    q = b.op(f"arith.floordivsi {x}, {safe} : {t}")
    neg = b.op(f"arith.subi {zero}, {x} : {t}")  # x // -1 == -x (wrapping, as numpy)
    q = b.op(f"arith.select {ym1}, {neg}, {q} : {t}")
    return b.op(f"arith.select {yz}, {zero}, {q} : {t}")


def _np_floor_divide(x, y):
    if x.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q = np.floor_divide(x, np.where(y == 0, 1, y))
        return np.where(y == 0, 0, q).astype(x.dtype)
    return np.floor_divide(x, y)


binary("floor_divide", {"i": _floor_divide, "u": _floor_divide, "f": _floor_divide}, _np_floor_divide,
       summary="floor(x / y)", dtypes=[dt.int32, dt.float32, dt.uint8], domain=(-7, 7))
for _n, _f, _s, _u, _c, _ref in [
        ("equal", "oeq", "eq", "eq", "eq", np.equal), ("not_equal", "une", "ne", "ne", "neq", np.not_equal),
        ("less", "olt", "slt", "ult", None, np.less), ("less_equal", "ole", "sle", "ule", None, np.less_equal),
        ("greater", "ogt", "sgt", "ugt", None, np.greater),
        ("greater_equal", "oge", "sge", "uge", None, np.greater_equal)]:
    binary(_n, _cmp(_f, _s, _u, _c), _ref, result=_bool_result, summary=f"x {_n} y",
           dtypes=[dt.float32, dt.int32, dt.bool_])
binary("logical_and", _arith(bop="andi"), np.logical_and, summary="x and y (bool)", dtypes=[dt.bool_])
binary("logical_or", _arith(bop="ori"), np.logical_or, summary="x or y (bool)", dtypes=[dt.bool_])


# ---- bitwise (integers and bool) ------------------------------------------------------------

def _bits(op):
    return {k: (lambda b, x, y, d, op=op: b.op(f"arith.{op} {x}, {y} : {d.signless}")) for k in "biu"}


def _shift(left):
    """x << y or x >> y (arithmetic for signed x) with numpy's results for shift counts
    outside [0, bits): 0, or -1 for a negative x shifted right (LLVM calls them poison)."""
    def body(b, x, y, d):
        t = d.signless
        op = "shli" if left else ("shrsi" if d.kind == "i" else "shrui")
        r = b.op(f"arith.{op} {x}, {y} : {t}")
        big = b.op(f"arith.cmpi uge, {y}, {b.const(d.bits, t)} : {t}")  # negative counts are huge unsigned
        fill = b.const(0, t)
        if not left and d.kind == "i":
            neg = b.op(f"arith.cmpi slt, {x}, {b.const(0, t)} : {t}")
            fill = b.op(f"arith.select {neg}, {b.const(-1, t)}, {fill} : {t}")
        return b.op(f"arith.select {big}, {fill}, {r} : {t}")
    return {"i": body, "u": body}


def _np_shift(fn):
    def ref(x, y):
        bits = x.dtype.itemsize * 8
        with np.errstate(all="ignore"):
            r = fn(x, np.clip(y, 0, bits - 1).astype(y.dtype))
        big = (y.astype(np.int64) < 0) | (y.astype(np.int64) >= bits)
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if fn is np.right_shift else np.zeros_like(x)
        return np.where(big, fill, r).astype(x.dtype)
    return ref


BIT_TEST = [dt.int32, dt.uint8, dt.bool_]
binary("bitwise_and", _bits("andi"), np.bitwise_and, summary="x & y, bit by bit", dtypes=BIT_TEST)
binary("bitwise_or", _bits("ori"), np.bitwise_or, summary="x | y, bit by bit", dtypes=BIT_TEST)
binary("bitwise_xor", _bits("xori"), np.bitwise_xor, summary="x ^ y, bit by bit", dtypes=BIT_TEST)
binary("left_shift", _shift(True), _np_shift(np.left_shift),
       summary="x << y (0 for counts outside [0, bits))", dtypes=[dt.int32, dt.uint8, dt.int64])
binary("right_shift", _shift(False), _np_shift(np.right_shift),
       summary="x >> y, arithmetic for signed x (0 or -1 for counts outside [0, bits))",
       dtypes=[dt.int32, dt.uint8, dt.int64])


# ---- where --------------------------------------------------------------------------

def _where_shape(avals):
    c, x, y = avals
    s = same_shapes(avals, "mirax.where")
    if c.dtype is not dt.bool_:
        raise MiraxError(f"mirax.where: the condition must be bool, got {c.dtype.name}")
    d = same_dtypes([x, y], "mirax.where")
    return Aval(s, d)


def _where_lower(e, ins, in_avals, out):
    t = out.dtype.mlir if out.dtype.kind == "c" else out.dtype.signless
    return e.map(ins, in_avals, out, lambda b, c, x, y: b.op(f"arith.select {c}, {x}, {y} : {t}"))


primitive("where", ["condition", "x", "y"], _where_shape, _where_lower, np.where,
          summary="x where condition else y", dtypes=[dt.float32, dt.int32])


unary("stop_gradient", {k: _identity for k in ALL}, lambda x: x.copy(),
      summary="identity whose derivative is zero", dtypes=[dt.float32, dt.int32])


# ---- complex parts ----------------------------------------------------------------------

def _part(name, op):
    def body(b, x, d):
        if d.kind == "c":
            return b.op(f"complex.{op} {x} : {d.mlir}")
        if name == "imag":
            return b.const(0, d.signless)
        return x
    return body


unary("real", {"c": _part("real", "re"), "f": _part("real", "re")}, np.real, result=_float_to_float32,
      summary="real part", dtypes=[dt.complex64, dt.float32])
unary("imag", {"c": _part("imag", "im"), "f": _part("imag", "im")},
      lambda x: np.imag(x).astype(np.float32 if x.dtype == np.complex64 else x.dtype), result=_float_to_float32,
      summary="imaginary part", dtypes=[dt.complex64, dt.float32])
unary("conjugate", {"c": _complex("conj"), "f": _identity}, np.conjugate, summary="complex conjugate",
      dtypes=[dt.complex64, dt.float32])


# ---- transform rules ----------------------------------------------------------------------
# Rules use mirax's own API (they emit mirax ops). vjp rules multiply the cotangent by the
# conjugate derivative, MLX's convention for complex values.

def _rules():
    import math

    import mirax as mr
    from .rules import defjvp, deflinear, defvjp, elementwise_batch

    def conj(x):
        return mr.conjugate(x) if x.dtype.kind == "c" else x

    def unary_rule(name, deriv):
        """d out = g * deriv(x, out)."""
        defjvp(name, lambda g, x, out: g * deriv(x, out))
        defvjp(name, lambda ct, x, out: ct * conj(deriv(x, out)))

    unary_rule("exp", lambda x, out: out)
    unary_rule("log", lambda x, out: mr.reciprocal(x))
    unary_rule("log1p", lambda x, out: mr.reciprocal(1 + x))
    unary_rule("expm1", lambda x, out: out + 1)
    unary_rule("sqrt", lambda x, out: 0.5 / out)
    unary_rule("rsqrt", lambda x, out: -0.5 * out / x)
    unary_rule("sin", lambda x, out: mr.cos(x))
    unary_rule("cos", lambda x, out: -mr.sin(x))
    unary_rule("tan", lambda x, out: 1 + out * out)
    unary_rule("tanh", lambda x, out: 1 - out * out)
    unary_rule("erf", lambda x, out: (2 / math.sqrt(math.pi)) * mr.exp(-x * x))
    unary_rule("erfinv", lambda x, out: (math.sqrt(math.pi) / 2) * mr.exp(out * out))
    unary_rule("reciprocal", lambda x, out: -out * out)
    unary_rule("square", lambda x, out: 2 * x)
    unary_rule("sigmoid", lambda x, out: out * (1 - out))

    def abs_jvp(g, x, out):
        if x.dtype.kind == "c":
            return mr.real(mr.conjugate(x) * g) / mr.where(out == 0, 1, out)
        return g * mr.sign(x)

    def abs_vjp(ct, x, out):
        if x.dtype.kind == "c":
            return ct.astype(x.dtype) * x / mr.where(out == 0, 1, out).astype(x.dtype)
        return ct * mr.sign(x)
    defjvp("abs", abs_jvp)
    defvjp("abs", abs_vjp)

    for name in ["sign", "floor", "ceil", "round", "logical_not"]:
        defjvp(name, None)
        defvjp(name, None)
    for name in ["negative", "conjugate"]:
        deflinear(name)
    defvjp("negative", lambda ct, x, out: -ct)
    defvjp("conjugate", lambda ct, x, out: conj(ct))
    deflinear("real")
    deflinear("imag")
    defvjp("real", lambda ct, x, out: ct.astype(x.dtype))
    defvjp("imag", lambda ct, x, out: ct.astype(x.dtype) * mr.array(1j) if x.dtype.kind == "c"
           else mr.zeros_like(x))

    # stop_gradient: no derivative at all
    defjvp("stop_gradient", None)
    defvjp("stop_gradient", None)

    def astype_vjp(ct, x, out, dtype):
        if x.dtype.kind != "c" and ct.dtype.kind == "c":
            ct = mr.real(ct)
        return ct.astype(x.dtype)
    defjvp("astype", lambda g, x, out, dtype: g.astype(dtype))
    defvjp("astype", astype_vjp)

    deflinear("add")
    deflinear("subtract")
    defvjp("add", lambda ct, x, y, out: ct, lambda ct, x, y, out: ct)
    defvjp("subtract", lambda ct, x, y, out: ct, lambda ct, x, y, out: -ct)
    defjvp("multiply", lambda g, x, y, out: g * y, lambda g, x, y, out: x * g)
    defvjp("multiply", lambda ct, x, y, out: ct * conj(y), lambda ct, x, y, out: ct * conj(x))
    defjvp("divide", lambda g, x, y, out: g / y, lambda g, x, y, out: -g * out / y)
    defvjp("divide", lambda ct, x, y, out: ct / conj(y), lambda ct, x, y, out: -ct * conj(out / y))

    def pow_dx(x, y, out):
        # y * x^(y-1), with 0^0 terms giving 0 as JAX does
        return mr.where(y == 0, 0, y * mr.power(x, y - 1))

    def pow_dy(x, y, out):
        safe = mr.where(x == 0, 1, x)
        return mr.where(x == 0, 0, out * mr.log(safe))
    defjvp("power", lambda g, x, y, out: g * pow_dx(x, y, out), lambda g, x, y, out: g * pow_dy(x, y, out))
    defvjp("power", lambda ct, x, y, out: ct * conj(pow_dx(x, y, out)),
           lambda ct, x, y, out: ct * conj(pow_dy(x, y, out)))

    def mask(cond, x):
        # MLX's rule: the first operand's share where it wins strictly, the second's
        # where x <= y (x >= y for minimum): ties go to the second (relu = maximum(x, 0)
        # has gradient 0 at 0), a NaN to neither. One comparison, which mirax-simplify
        # reads off the result (`_won`): a compiled relu keeps only its output for the
        # backward pass, not its input too
        return cond.astype(x.dtype)
    defjvp("maximum", lambda g, x, y, out: g * mask(x > y, x), lambda g, x, y, out: g * mask(x <= y, x))
    defvjp("maximum", lambda ct, x, y, out: ct * mask(x > y, x), lambda ct, x, y, out: ct * mask(x <= y, x))
    defjvp("minimum", lambda g, x, y, out: g * mask(x < y, x), lambda g, x, y, out: g * mask(x >= y, x))
    defvjp("minimum", lambda ct, x, y, out: ct * mask(x < y, x), lambda ct, x, y, out: ct * mask(x >= y, x))
    defjvp("floor_divide", None, None)
    defvjp("floor_divide", None, None)
    defjvp("remainder", lambda g, x, y, out: g, lambda g, x, y, out: -g * mr.floor(x / y))
    defvjp("remainder", lambda ct, x, y, out: ct, lambda ct, x, y, out: -ct * mr.floor(x / y))
    defjvp("arctan2", lambda g, x, y, out: g * y / (x * x + y * y),
           lambda g, x, y, out: -g * x / (x * x + y * y))
    defvjp("arctan2", lambda ct, x, y, out: ct * y / (x * x + y * y),
           lambda ct, x, y, out: -ct * x / (x * x + y * y))
    for name in ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
                 "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]:
        defjvp(name, None, None)
        defvjp(name, None, None)

    def where_jvp(primals, tangents, out):
        c, x, y = primals
        _, gx, gy = tangents
        if gx is None and gy is None:
            return None
        gx = gx if gx is not None else mr.zeros_like(x)
        gy = gy if gy is not None else mr.zeros_like(y)
        return mr.where(c, gx, gy)
    from .core import PRIMITIVES
    PRIMITIVES["where"].jvp = where_jvp
    defvjp("where", None, lambda ct, c, x, y, out: mr.where(c, ct, mr.zeros_like(ct)),
           lambda ct, c, x, y, out: mr.where(c, mr.zeros_like(ct), ct))

    for name in list(UNARY) + list(BINARY) + ["where", "astype"]:
        elementwise_batch(name)


_rules()
