"""`mirax-math-approx`: float32 exp, log, erf, tanh, expm1, log1p, pow as polynomial arithmetic.

LLVM turns a vector `math.exp` into one libm call per lane (30-100x slower than a
vectorized polynomial), and the MLIR wheels have no approximation pass, so f32
transcendental functions are written out here as `arith`/`math.fma` sequences that
vectorize. f64 stays on libm. The pass runs in the CPU pipeline after
`convert-mirax-to-linalg` and rewrites every f32 `math.exp/log/erf/tanh` (f16/bf16 ops
compute in f32; sigmoid is written with exp; softmax's exp, erfinv's log come along),
and `math.powf` with a non-constant exponent where the tuning table picks the polynomial
over the vector math library (`powf`: computed in f64, within 1 ulp);
`emit(name, b, x, "f32")` gives the same arithmetic to a lowering rule's `Emitter`.

    %y = math.exp %x : f32
  becomes (abridged; `target=cpu`, see `exp`)
    %t = %x * log2(e) + 1.5 * 2^23 (fma)      %m = %t - 1.5 * 2^23 (round(x log2(e)))
    %r = %x - %m * ln2 (two-part, with fma)   %p = 1 + r + r^2 * P4(r)
    %y = %p * 2^(m/2) * 2^(m - m/2)           (2^k built in the exponent field of %t's bits)

Accuracy against numpy (float64 reference rounded to float32), as tested in
`test/python/test_cpu_codegen.py`: relative error <= 2e-6 everywhere in the normal
range (measured maxima: exp ~1.2e-7, log ~1.2e-7, erf ~6e-7 in its relative sense with
absolute error <= 1e-7 near 0, tanh ~1.4e-7, sigmoid through exp ~2e-7), with inf,
-inf, nan, 0 and denormal results as numpy gives them.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import func

from .emit import Emitter
from .pass_base import MiraxPass, clone_mapped, defining_op, isa, splat_attr, user_op, walk_ops

NAME = "mirax-math-approx"

F32_MIN_NORMAL = 1.17549435e-38


def _c(b, v):
    return b.const(v, "f32")


def _i(b, v):
    return b.const(v, "i32")


def _fma(b, a, x, c, t="f32"):
    return b.op(f"math.fma {a}, {x}, {c} : {t}")


def _horner(b, x, coeffs, t="f32"):
    """coeffs[0]*x^n + ... + coeffs[n], with fmas (in scalar float type `t`)."""
    acc = b.const(coeffs[0], t)
    for k in coeffs[1:]:
        acc = _fma(b, acc, x, b.const(k, t), t)
    return acc


def _clamp(b, x, lo, hi, t="f32"):
    """min(max(x, lo), hi) with compares and selects: NaN stays NaN (a compare with
    NaN is false), and it is one vcmp + blend per bound on x86."""
    lo_c, hi_c = b.const(lo, t), b.const(hi, t)
    lt = b.op(f"arith.cmpf olt, {x}, {lo_c} : {t}")
    x = b.op(f"arith.select {lt}, {lo_c}, {x} : {t}")
    gt = b.op(f"arith.cmpf ogt, {x}, {hi_c} : {t}")
    return b.op(f"arith.select {gt}, {hi_c}, {x} : {t}")


def _pow2i(b, k):
    """2^k as f32 for an i32 k in [-126, 127] (the exponent field, built directly)."""
    e = b.op(f"arith.addi {k}, {_i(b, 127)} : i32")
    e = b.op(f"arith.shli {e}, {_i(b, 23)} : i32")
    return b.op(f"arith.bitcast {e} : i32 to f32")


def exp(b, x, target="any"):
    """exp(x) in f32: x = m ln2 + r, |r| <= ln2/2 (Cody-Waite two-part ln2), exp(r) =
    1 + r + r^2 P(r) with P a degree-4 minimax fit (relative error 3e-9 on [-ln2/2,
    ln2/2]: below f32 rounding), times 2^m applied as two factors so results that overflow
    become inf and those that underflow become denormals or 0, as in numpy.

    m = round(x log2(e)). `target="cpu"`: from one fma with 1.5 * 2^23, whose low bits are
    then m as an integer (a subtraction from the exponent field): 3 ops fewer than floor,
    a float-to-int conversion and the select that restores a NaN (which then stays a NaN
    all the way through, never converted to an integer). That needs the adds kept as
    written, as LLVM's CPU back ends do; GPU compilers may fold `(v + c) - c` to `v`
    (Mesa's NIR does), so elsewhere (`"any"`) m is floor(x log2(e) + 1/2), converted.
    Max relative error ~8e-8 (1 ulp) either way."""
    xc = _clamp(b, x, -104.0, 88.8)  # beyond these the result is 0 or inf anyway
    if target == "cpu":
        magic = 12582912.0  # 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer in the low bits
        t = _fma(b, xc, _c(b, 1.44269504088896341), _c(b, magic))
        m = b.op(f"arith.subf {t}, {_c(b, magic)} : f32")
        tb = b.op(f"arith.bitcast {t} : f32 to i32")
        mi = b.op(f"arith.subi {tb}, {_i(b, 0x4B400000)} : i32")
    else:
        t = _fma(b, xc, _c(b, 1.44269504088896341), _c(b, 0.5))
        m = b.op(f"math.floor {t} : f32")
        mi = b.op(f"arith.fptosi {m} : f32 to i32")
    r = _fma(b, m, _c(b, -0.693359375), xc)
    r = _fma(b, m, _c(b, 2.12194440e-4), r)
    p = _horner(b, r, [1.3814592966809869e-3, 8.368708193302155e-3, 4.166838899254799e-2,
                       1.666652113199234e-1, 4.999999403953552e-1])
    r2 = b.op(f"arith.mulf {r}, {r} : f32")
    y = _fma(b, p, r2, r)
    y = b.op(f"arith.addf {y}, {_c(b, 1.0)} : f32")
    m1 = b.op(f"arith.shrsi {mi}, {_i(b, 1)} : i32")
    m2 = b.op(f"arith.subi {mi}, {m1} : i32")
    y = b.op(f"arith.mulf {y}, {_pow2i(b, m1)} : f32")
    y = b.op(f"arith.mulf {y}, {_pow2i(b, m2)} : f32")
    if target == "cpu":
        return y
    isnan = b.op(f"arith.cmpf uno, {x}, {x} : f32")  # fptosi(nan) is poison: select it away
    return b.op(f"arith.select {isnan}, {x}, {y} : f32")


def log(b, x, target="any"):
    """log(x) in f32: Cephes logf. x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) by
    a degree-9 polynomial in m - 1, plus e ln2 in two parts. Denormal inputs are scaled
    by 2^23 first. log(0) = -inf, log(x < 0) = nan, log(inf) = inf, as numpy.
    Max relative error ~1.2e-7."""
    small = b.op(f"arith.cmpf olt, {x}, {_c(b, F32_MIN_NORMAL)} : f32")
    xs = b.op(f"arith.mulf {x}, {_c(b, 8388608.0)} : f32")
    xs = b.op(f"arith.select {small}, {xs}, {x} : f32")
    bias = b.op(f"arith.select {small}, {_i(b, 126 + 23)}, {_i(b, 126)} : i32")
    bits = b.op(f"arith.bitcast {xs} : f32 to i32")
    ebits = b.op(f"arith.shrui {bits}, {_i(b, 23)} : i32")
    ebits = b.op(f"arith.andi {ebits}, {_i(b, 255)} : i32")
    e = b.op(f"arith.subi {ebits}, {bias} : i32")
    mbits = b.op(f"arith.andi {bits}, {_i(b, 0x007FFFFF)} : i32")
    mbits = b.op(f"arith.ori {mbits}, {_i(b, 0x3F000000)} : i32")
    m = b.op(f"arith.bitcast {mbits} : i32 to f32")  # in [0.5, 1)
    ef = b.op(f"arith.sitofp {e} : i32 to f32")
    lt = b.op(f"arith.cmpf olt, {m}, {_c(b, 0.707106781186547524)} : f32")
    one = _c(b, 1.0)
    ef1 = b.op(f"arith.subf {ef}, {one} : f32")
    ef = b.op(f"arith.select {lt}, {ef1}, {ef} : f32")
    m2 = b.op(f"arith.addf {m}, {m} : f32")
    mm = b.op(f"arith.select {lt}, {m2}, {m} : f32")
    f = b.op(f"arith.subf {mm}, {one} : f32")
    z = b.op(f"arith.mulf {f}, {f} : f32")
    p = _horner(b, f, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                       1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                       3.3333331174e-1])
    fz = b.op(f"arith.mulf {f}, {z} : f32")
    y = b.op(f"arith.mulf {p}, {fz} : f32")
    y = _fma(b, ef, _c(b, -2.12194440e-4), y)
    y = _fma(b, z, _c(b, -0.5), y)
    y = b.op(f"arith.addf {f}, {y} : f32")
    y = _fma(b, ef, _c(b, 0.693359375), y)
    # special values: 0 -> -inf, negative or nan -> nan, +inf -> +inf
    zero = _c(b, 0.0)
    iszero = b.op(f"arith.cmpf oeq, {x}, {zero} : f32")
    y = b.op(f"arith.select {iszero}, {_c(b, float('-inf'))}, {y} : f32")
    isinf = b.op(f"arith.cmpf oeq, {x}, {_c(b, float('inf'))} : f32")
    y = b.op(f"arith.select {isinf}, {x}, {y} : f32")
    bad = b.op(f"arith.cmpf ult, {x}, {zero} : f32")  # x < 0 or nan
    return b.op(f"arith.select {bad}, {_c(b, float('nan'))}, {y} : f32")


# erf(z) = z P(z^2) / Q(z^2) on z clamped to [-4, 4]: the rational approximation Eigen
# and XLA use (coefficients highest degree first). At the clamp it gives exactly +-1.
ERF_P = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
ERF_Q = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02]
ERF_BOUND = 4.0  # erf(4) rounds to 1 in f32


def erf(b, x, target="any", scale=1.0, mul=1.0, add=0.0):
    """add + mul * erf(scale * x) in f32 (erf alone by default), with the rational
    approximation above: an odd degree-13 numerator over an even degree-8 denominator.
    Max absolute error of erf ~1e-7; relative ~6e-7.

    The affine maps around erf cost less here (`erf_affine` finds them in a body, as in
    gelu's `x * (1 + erf(x / sqrt 2)) / 2`): the denominator is monic (its first Horner
    step an add), a power-of-two `mul` is in the numerator's coefficients and `add` is
    the last fma: `fma(zc, P~(t) / Q~(t), add)`, zc = clamp(c x, -4, 4), t = zc^2 (gelu:
    12 multiplies and fmas, an add and a divide; written out as ops, 15, an add and a
    divide; Zen 3, one thread: 0.50 -> 0.41-0.45 ns an element, the memory copy 0.24)."""
    c, s = float(scale), float(mul)
    if c < 0:  # erf is odd
        c, s = -c, -s
    # A power-of-two `mul` scales every Horner step exactly, so it goes into P; another
    # is one more multiply-add. `scale` is not folded into the coefficients (rounded
    # anew they no longer give exactly +-1 at the clamp: 4 erf(-2.5 inf) - 1 came out
    # -5.0000005), so erf(+-inf) * mul is exactly +-mul, 1 + erf(-inf) exactly 0 and
    # gelu(-1e30) is -0, not -1e30 times a rounding residue.
    inner = s if _pow2(s) else 1.0
    z = x if c == 1 else b.op(f"arith.mulf {x}, {_c(b, c)} : f32")
    zc = _clamp(b, z, -ERF_BOUND, ERF_BOUND)
    t = b.op(f"arith.mulf {zc}, {zc} : f32")
    lead = ERF_Q[0]
    p = _horner(b, t, [inner * k / lead for k in ERF_P])
    q = b.op(f"arith.addf {t}, {_c(b, ERF_Q[1] / lead)} : f32")
    for k in ERF_Q[2:]:
        q = _fma(b, q, t, _c(b, k / lead))
    pq = b.op(f"arith.divf {p}, {q} : f32")
    if inner == s and add != 0:
        # exact at the clamp too: there P/Q is exactly mul/4 (test_cpu_codegen checks
        # that 1 + erf(-inf) is 0), so zc P/Q + add is add -+ mul before rounding
        return _fma(b, zc, pq, _c(b, float(add)))
    # zc times the ratio last: one rounding, so denormal x keep their precision
    e = b.op(f"arith.mulf {zc}, {pq} : f32")
    if inner != s:
        return _fma(b, e, _c(b, s), _c(b, float(add)))
    return e


def tanh(b, x, target="any"):
    """tanh(x) in f32: for |x| < 0.625 Cephes' odd polynomial x + x^3 P(x^2); beyond,
    sign(x) (1 - 2 / (exp(2|x|) + 1)) with the exp above (no cancellation there, and
    exp(2|x|) = inf gives exactly +-1). Max relative error ~5e-7."""
    ax = b.op(f"math.absf {x} : f32")
    x2 = b.op(f"arith.mulf {x}, {x} : f32")
    p = _horner(b, x2, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                        -3.33332819422e-1])
    x3 = b.op(f"arith.mulf {x2}, {x} : f32")
    ys = _fma(b, p, x3, x)
    ys = b.op(f"math.copysign {ys}, {x} : f32")  # keeps tanh(-0) = -0
    ax2 = b.op(f"arith.addf {ax}, {ax} : f32")
    e = exp(b, ax2, target)
    one = _c(b, 1.0)
    den = b.op(f"arith.addf {e}, {one} : f32")
    q = b.op(f"arith.divf {_c(b, 2.0)}, {den} : f32")
    yl = b.op(f"arith.subf {one}, {q} : f32")
    yl = b.op(f"math.copysign {yl}, {x} : f32")
    small = b.op(f"arith.cmpf olt, {ax}, {_c(b, 0.625)} : f32")
    y = b.op(f"arith.select {small}, {ys}, {yl} : f32")
    isnan = b.op(f"arith.cmpf uno, {x}, {x} : f32")
    return b.op(f"arith.select {isnan}, {x}, {y} : f32")


def _exp_t(b, x, t, target):
    return exp(b, x, target) if t == "f32" else b.op(f"math.exp {x} : {t}")


def _log_t(b, x, t, target):
    return log(b, x, target) if t == "f32" else b.op(f"math.log {x} : {t}")


def _ends(b, r, x, u, t):
    """expm1's and log1p's `r`, with x itself where u (exp(x) or 1 + x) is 1 and u where
    it is inf (their forms divide by zero or inf there)."""
    exact = b.op(f"arith.cmpf oeq, {u}, {b.const(1.0, t)} : {t}")
    r = b.op(f"arith.select {exact}, {x}, {r} : {t}")
    inf = b.op(f"arith.cmpf oeq, {u}, {b.const(math.inf, t)} : {t}")
    return b.op(f"arith.select {inf}, {u}, {r} : {t}")


def log1p(b, x, target="any", t="f32"):
    """log(1 + x) accurate for small x (Goldberg's form): with u = 1 + x rounded,
    log(u) * x / (u - 1) (the division cancels u's rounding error), x itself where u is
    1 and u where it is inf. MLIR's lowering computes log(1 + x): log1p(5.6e-7) came out
    5.96e-7, 7% off. Relative error ~2e-7 with the f32 log above (f64: libm's log)."""
    one = b.const(1.0, t)
    u = b.op(f"arith.addf {x}, {one} : {t}")
    um1 = b.op(f"arith.subf {u}, {one} : {t}")
    q = b.op(f"arith.divf {x}, {um1} : {t}")
    r = b.op(f"arith.mulf {_log_t(b, u, t, target)}, {q} : {t}")
    return _ends(b, r, x, u, t)


# expm1(x) = x P(x) for |x| < 1: Taylor's coefficients 1/(k+1)!, k = 0..10 (the next
# term, x^12/12!, is 2e-9 of the result at |x| = 1), highest degree first
EXPM1_P = [1 / math.factorial(k + 1) for k in range(10, -1, -1)]


def expm1(b, x, target="any", t="f32"):
    """exp(x) - 1 accurate for small x. f32: x P(x) for |x| < 1 (the product keeps x's
    sign, -0.0 included, and denormals), exp(x) - 1 beyond, where the subtraction
    cancels at most ~1.3 bits (exp(-1) = 0.37): one exp, 11 multiply-adds and a select,
    where Kahan's form below took an exp, a log and a divide (4M f32: 5.95 ms against
    exp's 1.59). f64 (libm's exp and log): Kahan's form, (u - 1) * x / log(u) with
    u = exp(x) rounded, x itself where u is 1, -1 where u - 1 is, u where it is inf.
    MLIR's lowering computes exp(x) - 1 (expm1(5.6e-7) came out 5.96e-7). Relative error
    ~2e-7 (f32), libm's (f64)."""
    one = b.const(1.0, t)
    if t == "f32":
        p = _horner(b, x, EXPM1_P)
        small = b.op(f"arith.mulf {x}, {p} : f32")
        big = b.op(f"arith.subf {exp(b, x, target)}, {one} : f32")
        ax = b.op(f"math.absf {x} : f32")
        near = b.op(f"arith.cmpf olt, {ax}, {one} : f32")
        return b.op(f"arith.select {near}, {small}, {big} : f32")
    u = _exp_t(b, x, t, target)
    um1 = b.op(f"arith.subf {u}, {one} : {t}")
    q = b.op(f"arith.divf {x}, {_log_t(b, u, t, target)} : {t}")
    r = b.op(f"arith.mulf {um1}, {q} : {t}")
    neg = b.op(f"arith.cmpf oeq, {um1}, {b.const(-1.0, t)} : {t}")
    r = b.op(f"arith.select {neg}, {um1}, {r} : {t}")
    return _ends(b, r, x, u, t)


# ln(1 + f) / f for f in [sqrt(1/2) - 1, sqrt(2) - 1] (lowest degree first): relative error
# 2^-35.8 (a fit of the relative error, Lawson's weighted least squares, in f64)
LN1P_Q = (0.9999999999859597, -0.5000000002942452, 0.3333333433359158, -0.2499999407772997, 0.19999881155887086,
          -0.16666943563158831, 0.14290986680240372, -0.12497480858189672, 0.11005084200030814,
          -0.09922898655216306, 0.10033237122056163, -0.09900669875169815, 0.053626286915037784)
# 2^r for r in [-1/2, 1/2]: relative error 2^-34.5
EXP2_HALF = (0.9999999999616817, 0.6931471807284728, 0.24022651198161007, 0.05550410353369158,
             0.009618027253102075, 0.0013333922624629247, 0.00015469291347934024, 1.5201908138996382e-05)


def powf(b, x, y, target="any"):
    """x^y in f32, as numpy (C99's powf), computed in f64 without tables: |x| = 2^k m with
    m in [sqrt(1/2), sqrt(2)) from the bits of |x| in f64 (f32 denormals are normal there),
    log2|x| = k + ln(m) log2(e) with ln(1 + f) = f Q12(f); t = y log2|x| clamped to
    [-300, 300] (beyond, the f32 result is 0 or inf; a NaN passes); 2^t = 2^n 2^r, n
    rounded with 1.5 * 2^52, 2^r by a degree-7 polynomial, 2^n in the exponent field;
    rounded to f32 once. Then C99's cases: |x| = 1 gives 1 (also for y = +-inf or NaN), a
    negative x (sign bit: -0 and -inf too) and an odd integer y negate, a finite x < 0 and
    a y that is not an integer give NaN, y = 0 gives 1 (also for x NaN).

    Within 1 ulp of the correctly rounded result (log2|x| is within |t| 2^-35 of exact, 2^r
    within 2^-34: both far below f32's rounding). glibc's vector powf reads its tables with
    gathers (`vgatherdpd`), which some cores run slowly: on an Intel host LLVM names
    rocketlake, 16-lane libmvec pow ran 0.59-0.88x numpy's SVML speed in bench pairs and
    this polynomial 0.76-1.19x, but back to back the library won (2.98 vs 3.15 ms for 4M),
    so the tuner races the two (tuning.py `math`); without a library it is 2.9x faster
    than libm a lane."""
    if target == "gpu":
        return _powf_target(b, x, y)
    f64, i64 = "f64", "i64"
    c = lambda v: b.const(v, f64)  # noqa: E731
    ci = lambda v: b.const(v, i64)  # noqa: E731
    ax = b.op(f"math.absf {x} : f32")
    xd = b.op(f"arith.extf {ax} : f32 to f64")
    yd = b.op(f"arith.extf {y} : f32 to f64")
    # |x| = 2^k m, m in [sqrt(1/2), sqrt(2)): k from the bits of |x| / sqrt(1/2) (musl's log)
    bits = b.op(f"arith.bitcast {xd} : f64 to i64")
    tmp = b.op(f"arith.subi {bits}, {ci(0x3FE6A09E667F3BCD)} : i64")
    k = b.op(f"arith.shrsi {tmp}, {ci(52)} : i64")
    top = b.op(f"arith.andi {tmp}, {ci(-(1 << 52))} : i64")
    m = b.op(f"arith.bitcast {b.op(f'arith.subi {bits}, {top} : i64')} : i64 to f64")
    f = b.op(f"arith.subf {m}, {c(1.0)} : f64")
    ln = b.op(f"arith.mulf {f}, {_horner(b, f, LN1P_Q[::-1], f64)} : f64")
    kf = b.op(f"arith.sitofp {k} : i64 to f64")
    l2 = b.op(f"math.fma {ln}, {c(1.4426950408889634)}, {kf} : f64")
    # |x| = 0: -inf; inf or NaN: itself
    zero = b.op(f"arith.cmpf oeq, {ax}, {_c(b, 0.0)} : f32")
    l2 = b.op(f"arith.select {zero}, {c(float('-inf'))}, {l2} : f64")
    odd_x = b.op(f"arith.cmpf uge, {ax}, {_c(b, float('inf'))} : f32")
    l2 = b.op(f"arith.select {odd_x}, {xd}, {l2} : f64")
    t = _clamp(b, b.op(f"arith.mulf {yd}, {l2} : f64"), -300.0, 300.0, f64)
    magic = 6755399441055744.0  # 1.5 * 2^52: adding it rounds |t| < 2^51 to an integer in the low bits
    tm = b.op(f"arith.addf {t}, {c(magic)} : f64")
    n = b.op(f"arith.subf {tm}, {c(magic)} : f64")
    r = b.op(f"arith.subf {t}, {n} : f64")
    p = _horner(b, r, EXP2_HALF[::-1], f64)
    ni = b.op(f"arith.subi {b.op(f'arith.bitcast {tm} : f64 to i64')}, {ci(0x4338000000000000)} : i64")
    e = b.op(f"arith.shli {b.op(f'arith.addi {ni}, {ci(1023)} : i64')}, {ci(52)} : i64")
    yd2 = b.op(f"arith.mulf {p}, {b.op(f'arith.bitcast {e} : i64 to f64')} : f64")
    res = b.op(f"arith.truncf {yd2} : f64 to f32")
    return _c99_pow_cases(b, x, y, ax, res)


def _powf_target(b, x, y):
    """x^y in f32 on a GPU: the target's own pow (GLSL.std.450 Pow, Metal's pow, NVVM's
    powf) of |x|, where GLSL and Metal define it (their pow is undefined for x < 0 and
    for x = 0 with y <= 0: lavapipe gave 0 for 0^0, 0^-1 and (-2)^0.5), as products for
    y = 1, 2, 3 and -1 (Pow is exp2(y log2 x) there: 3^1 came out 3.0000002), 0 or inf for
    x = 0, NaN for a NaN operand, then C99's cases as on the CPU."""
    ax = b.op(f"math.absf {x} : f32")
    res = b.op(f"math.powf {ax}, {y} : f32")
    sq = b.op(f"arith.mulf {ax}, {ax} : f32")
    for k, exact in ((1.0, ax), (2.0, sq), (3.0, b.op(f"arith.mulf {sq}, {ax} : f32")),
                     (-1.0, b.op(f"arith.divf {_c(b, 1.0)}, {ax} : f32"))):
        yk = b.op(f"arith.cmpf oeq, {y}, {_c(b, k)} : f32")
        res = b.op(f"arith.select {yk}, {exact}, {res} : f32")
    zero = b.op(f"arith.cmpf oeq, {ax}, {_c(b, 0.0)} : f32")
    ypos = b.op(f"arith.cmpf ogt, {y}, {_c(b, 0.0)} : f32")
    at0 = b.op(f"arith.select {ypos}, {_c(b, 0.0)}, {_c(b, float('inf'))} : f32")
    res = b.op(f"arith.select {zero}, {at0}, {res} : f32")
    nan = b.op(f"arith.cmpf uno, {x}, {y} : f32")  # (lavapipe's Pow gave 0 for NaN^3)
    res = b.op(f"arith.select {nan}, {_c(b, float('nan'))}, {res} : f32")
    return _c99_pow_cases(b, x, y, ax, res)


def _c99_pow_cases(b, x, y, ax, res):
    """`res` (|x|^y) with C99's cases: |x| = 1 gives 1, a negative x (its sign bit) and an
    odd integer y negate, a finite x < 0 and a y that is not an integer give NaN, y = 0
    gives 1. (Integers by floor, not trunc: the same test, and SPIR-V has no trunc.)"""
    one = _c(b, 1.0)
    unit = b.op(f"arith.cmpf oeq, {ax}, {one} : f32")
    res = b.op(f"arith.select {unit}, {one}, {res} : f32")
    ty = b.op(f"math.floor {y} : f32")
    integer = b.op(f"arith.cmpf oeq, {y}, {ty} : f32")
    half = b.op(f"arith.mulf {y}, {_c(b, 0.5)} : f32")
    frac = b.op(f"arith.cmpf one, {half}, {b.op(f'math.floor {half} : f32')} : f32")
    odd = b.op(f"arith.andi {integer}, {frac} : i1")
    neg = b.op(f"arith.cmpi slt, {b.op(f'arith.bitcast {x} : f32 to i32')}, {_i(b, 0)} : i32")
    flip = b.op(f"arith.andi {neg}, {odd} : i1")
    res = b.op(f"arith.select {flip}, {b.op(f'arith.negf {res} : f32')}, {res} : f32")
    below = b.op(f"arith.cmpf olt, {x}, {_c(b, 0.0)} : f32")
    finite = b.op(f"arith.cmpf ogt, {x}, {_c(b, float('-inf'))} : f32")
    fraction = b.op(f"arith.xori {integer}, {b.const(1, 'i1')} : i1")
    bad = b.op(f"arith.andi {b.op(f'arith.andi {below}, {finite} : i1')}, {fraction} : i1")
    res = b.op(f"arith.select {bad}, {_c(b, float('nan'))}, {res} : f32")
    y0 = b.op(f"arith.cmpf oeq, {y}, {_c(b, 0.0)} : f32")
    return b.op(f"arith.select {y0}, {one}, {res} : f32")


# 2/pi in 32-bit words, most significant first (2/pi = 0.A2F9836E 4E441529 ...): 192 bits
# cover every f32 (exponent <= 127) with the 64 bits kept after its binary point
TWO_OVER_PI_WORDS = (0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041)
# sin r = r + r^3 P(r^2), cos r = 1 - r^2 / 2 + r^4 Q(r^2) on [-pi/4, pi/4] (Cephes' sinf/cosf: ~1 ulp)
SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
COS_Q = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _u32(b, v):
    return _i(b, v - (1 << 32) if v >= 1 << 31 else v)


def _funnel(b, lo, hi, s):
    """The 32 bits of the 64-bit (hi:lo) starting at bit s (0..31): (lo >> s) | (hi << (32
    - s)), that shift written as two (1, then 31 - s) so that s = 0 shifts by no more than 31."""
    low = b.op(f"arith.shrui {lo}, {s} : i32")
    up = b.op(f"arith.shli {b.op(f'arith.shli {hi}, {_i(b, 1)} : i32')}, "
              f"{b.op(f'arith.subi {_i(b, 31)}, {s} : i32')} : i32")
    return b.op(f"arith.ori {low}, {up} : i32")


def _pick(b, w, words):
    """words[w - 1] for a runtime w in 1..len(words) (selects)."""
    out = words[0]
    for k, v in enumerate(words[1:], start=2):
        out = b.op(f"arith.select {b.op(f'arith.cmpi eq, {w}, {_i(b, k)} : i32')}, {v}, {out} : i32")
    return out


def _reduce_pio2(b, ax):
    """(q, r) with |x| = q pi/2 + r, |r| <= pi/4 (q an i32, its low two bits exact) for |x|
    = `ax` finite, by Payne-Hanek's reduction in integers: |x|'s 24-bit mantissa
    (left-justified) times the 192 bits of 2/pi in 32-bit words (`arith.mului_extended`,
    the carries added), and the 64 bits around the product's binary point read at an offset
    set by |x|'s exponent: two integer bits (q) and 62 of fraction, rounded to the nearest
    quadrant. Below 0.5, r = |x|. (Cody-Waite's x - q C1 - q C2 - ... is no use on a GPU:
    lavapipe reassociated it into x - q (C1 + C2 + ...), sin(4762.65) off by 3e-4.)"""
    # Payne-Hanek: R = M * W (M = mantissa << 8, W the 192-bit 2/pi) in seven words r[0..6]
    bits = b.op(f"arith.bitcast {ax} : f32 to i32")
    e = b.op(f"arith.shrui {bits}, {_i(b, 23)} : i32")
    m = b.op(f"arith.ori {b.op(f'arith.shli {bits}, {_i(b, 8)} : i32')}, {_u32(b, 0x80000000)} : i32")
    r, carry = [], None
    prev_hi = None
    for word in reversed(TWO_OVER_PI_WORDS):  # least significant first
        prod = b.fresh("mul")
        b.line(f"{prod}:2 = arith.mului_extended {m}, {_u32(b, word)} : i32")
        lo, hi = f"{prod}#0", f"{prod}#1"
        if prev_hi is None:
            r.append(lo)
        else:
            t = b.op(f"arith.addi {lo}, {prev_hi} : i32")
            c1 = b.op(f"arith.cmpi ult, {t}, {lo} : i32")
            if carry is not None:
                t2 = b.op(f"arith.addi {t}, {carry} : i32")
                c2 = b.op(f"arith.cmpi ult, {t2}, {t} : i32")
                c1, t = b.op(f"arith.ori {c1}, {c2} : i1"), t2
            r.append(t)
            carry = b.op(f"arith.extui {c1} : i1 to i32")
        prev_hi = hi
    r.append(b.op(f"arith.addi {prev_hi}, {carry} : i32"))  # (no carry out: R < 2^224)
    r.append(_i(b, 0))  # r[7]: the window of |x| < 1 reaches past R
    # x 2/pi = R 2^(e - 350): the window [base, base + 64) of R, base = 288 - e, has the
    # binary point 62 bits up (w = base / 32 in 1..5 for e in 126..254)
    base = b.op(f"arith.subi {_i(b, 288)}, {e} : i32")
    w = b.op(f"arith.shrui {base}, {_i(b, 5)} : i32")
    sh = b.op(f"arith.andi {base}, {_i(b, 31)} : i32")
    r0, r1, r2 = (_pick(b, w, r[k:k + 5]) for k in (1, 2, 3))  # r[w], r[w + 1], r[w + 2]
    lo, hi = _funnel(b, r0, r1, sh), _funnel(b, r1, r2, sh)
    q_slow = b.op(f"arith.shrui {b.op(f'arith.addi {hi}, {_i(b, 1 << 29)} : i32')}, {_i(b, 30)} : i32")
    frac = b.op(f"arith.sitofp {b.op(f'arith.shli {hi}, {_i(b, 2)} : i32')} : i32 to f32")
    frac = _fma(b, b.op(f"arith.uitofp {lo} : i32 to f32"), _c(b, 2.0 ** -30), frac)
    r_big = b.op(f"arith.mulf {frac}, {_c(b, math.pi / 2 * 2.0 ** -32)} : f32")
    big = b.op(f"arith.cmpi uge, {e}, {_i(b, 126)} : i32")  # |x| >= 0.5
    return (b.op(f"arith.select {big}, {q_slow}, {_i(b, 0)} : i32"),
            b.op(f"arith.select {big}, {r_big}, {ax} : f32"))


def _trig(b, x, fn):
    """sin, cos or tan of f32 x for targets whose own are inexact far from 0 (a GPU's Sin
    and Cos: lavapipe gave sin(1e10) = -1.05 and cos(1e30) = 2.1): x reduced to r in
    [-pi/4, pi/4] (`_reduce_pio2`, exact to ~1 ulp for every f32), Cephes' polynomials,
    the quadrant's sign and swap. Infinities and NaN give NaN."""
    ax = b.op(f"math.absf {x} : f32")
    q, r = _reduce_pio2(b, ax)
    z = b.op(f"arith.mulf {r}, {r} : f32")
    sin_r = _fma(b, b.op(f"arith.mulf {r}, {z} : f32"), _horner(b, z, SIN_P), r)
    cos_r = _fma(b, b.op(f"arith.mulf {z}, {z} : f32"), _horner(b, z, COS_Q), _fma(b, z, _c(b, -0.5), _c(b, 1.0)))
    odd = b.op(f"arith.cmpi ne, {b.op(f'arith.andi {q}, {_i(b, 1)} : i32')}, {_i(b, 0)} : i32")
    if fn == "tan":
        num = b.op(f"arith.select {odd}, {b.op(f'arith.negf {cos_r} : f32')}, {sin_r} : f32")
        den = b.op(f"arith.select {odd}, {sin_r}, {cos_r} : f32")
        y = b.op(f"arith.divf {num}, {den} : f32")
    else:
        if fn == "cos":
            q = b.op(f"arith.addi {q}, {_i(b, 1)} : i32")
            odd = b.op(f"arith.xori {odd}, {b.const(1, 'i1')} : i1")
        y = b.op(f"arith.select {odd}, {cos_r}, {sin_r} : f32")
        neg = b.op(f"arith.cmpi ne, {b.op(f'arith.andi {q}, {_i(b, 2)} : i32')}, {_i(b, 0)} : i32")
        y = b.op(f"arith.select {neg}, {b.op(f'arith.negf {y} : f32')}, {y} : f32")
    if fn != "cos":  # odd functions: x's sign (its bit: -0 gives -0)
        negative = b.op(f"arith.cmpi slt, {b.op(f'arith.bitcast {x} : f32 to i32')}, {_i(b, 0)} : i32")
        y = b.op(f"arith.select {negative}, {b.op(f'arith.negf {y} : f32')}, {y} : f32")
    finite = b.op(f"arith.cmpf olt, {ax}, {_c(b, float('inf'))} : f32")  # (false for NaN)
    return b.op(f"arith.select {finite}, {y}, {_c(b, float('nan'))} : f32")


def sin(b, x, target="any"):
    return _trig(b, x, "sin")


def cos(b, x, target="any"):
    return _trig(b, x, "cos")


def tan(b, x, target="any"):
    return _trig(b, x, "tan")


APPROX = {"exp": exp, "log": log, "erf": erf, "tanh": tanh, "expm1": expm1, "log1p": log1p}
BINARY = {"powf": powf}  # (two operands: math.powf x, y)
MATH_OPS = tuple(APPROX) + tuple(BINARY)  # the `math` ops the pass rewrites by default
# ...and on request (the GPU's): the CPU's libm is exact at any argument
TRIG = {"sin": sin, "cos": cos, "tan": tan}
F64_OPS = ("expm1", "log1p")  # ...also in f64 (with libm's exp and log: MLIR's forms lose x)


def emit(name, b, x, t, target="any"):
    """The approximation of `name` applied to `x` of scalar type `t`, emitted into `b`;
    None when there is none (f64, or a function without one). `target`: see `exp`."""
    fn = APPROX.get(name)
    if fn is None or t != "f32":
        return None
    return fn(b, x, target)


def function_text(name: str, fname: str, target: str = "any", t: str = "f32", **affine) -> str:
    """A private `func.func @fname(t) -> t` computing the approximation of `name`
    (`affine`: erf's scale/mul/add, see `erf`; `t` f64 only for F64_OPS; `(t, t) -> t` for
    BINARY's)."""
    b = Emitter()
    if name in BINARY:
        z = BINARY[name](b, "%x", "%y", target)
        return f"func.func private @{fname}(%x: {t}, %y: {t}) -> {t} {{\n{b.text()}\n  return {z} : {t}\n}}"
    fn = APPROX.get(name) or TRIG[name]
    y = fn(b, "%x", target, **affine) if t == "f32" else fn(b, "%x", target, t=t)
    return f"func.func private @{fname}(%x: {t}) -> {t} {{\n{b.text()}\n  return {y} : {t}\n}}"


def _const_f32(v):
    """The value of `v` when it is a finite float constant (scalar or splat), else None."""
    a = splat_attr(v)
    if a is None or not isa(ir.FloatAttr, a):
        return None
    k = ir.FloatAttr(a).value
    return k if math.isfinite(k) else None


def _pow2(k):
    """Is `k` a power of two (times +-1)? Scaling by it is exact (barring overflow to inf
    or underflow to denormals), so it moves across products freely."""
    return k is not None and k != 0 and math.frexp(abs(k))[0] == 0.5


def _only_user(v):
    uses = list(v.uses)
    return user_op(uses[0]) if len(uses) == 1 else None


def erf_affine(op):
    """For a scalar `math.erf` op: (x, dict(scale=c, mul=s, add=o), w, chain) such that the
    result of chain[-1] is `o + s erf(c x)`, times `w` when w is not None. `c` is a
    constant factor (or divisor) of erf's operand; the chain follows erf's single users through adds,
    subtracts, products and quotients by constants, then at most one product with a
    value `w`, whose power-of-two constant factors (on either side) move into s and o,
    exactly. gelu as traced, `(x * (erf(x * 0.7071) + 1)) * 0.5`, is
    (x, scale=0.7071, mul=0.5, add=0.5), w = x."""
    c, s, o = 1.0, 1.0, 0.0
    x = op.operands[0]
    d = defining_op(x)
    if d is not None and d.name == "arith.mulf":
        for i in (0, 1):
            k = _const_f32(d.operands[i])
            if k is not None and k != 0:
                c, x = k, d.operands[1 - i]
                break
    elif d is not None and d.name == "arith.divf":
        k = _const_f32(d.operands[1])
        if k:
            c, x = 1 / k, d.operands[0]
    w, chain, cur = None, [op], op
    while True:
        u = _only_user(cur.results[0])
        if u is None or u.block != cur.block or len(u.results) != 1:
            break
        ops = list(u.operands)
        me = [i for i, v in enumerate(ops) if v == cur.results[0]]
        if len(me) != 1:
            break
        me = me[0]
        k = _const_f32(ops[1 - me]) if len(ops) == 2 else None
        n = u.name
        if n == "arith.mulf" and _pow2(k) or n == "arith.divf" and me == 0 and _pow2(k):
            f = k if n == "arith.mulf" else 1 / k
            s, o = s * f, o * f
        elif w is not None:
            break
        elif n == "arith.addf" and k is not None:
            o += k
        elif n == "arith.subf" and k is not None:
            s, o = (s, o - k) if me == 0 else (-s, k - o)
        elif n == "arith.mulf" and k is not None:
            s, o = s * k, o * k
        elif n == "arith.negf":
            s, o = -s, -o
        elif n == "arith.mulf" and len(ops) == 2:
            w = ops[1 - me]
            dw = defining_op(w)
            if dw is not None and dw.name == "arith.mulf":
                for j in (0, 1):
                    k2 = _const_f32(dw.operands[j])
                    if _pow2(k2):
                        s, o, w = s * k2, o * k2, dw.operands[1 - j]
                        break
        else:
            break
        chain.append(u)
        cur = u
    if not (math.isfinite(s) and math.isfinite(o)) or s == 0:
        return op.operands[0], {}, None, [op]
    return x, dict(scale=c, mul=s, add=o), w, chain


class MathApprox(MiraxPass):
    name = NAME
    summary = "Rewrite f32 math.exp/log/erf/tanh/powf into vectorizable polynomial arithmetic"
    after = ["inline", "symbol-dce"]
    options = {"target": ("any", "cpu: exp rounds with 1.5 * 2^23 (LLVM's CPU code generation keeps the adds); "
                                 "any: floor and a conversion (GPU compilers may reassociate); gpu: as any, and "
                                 "powf (constant exponents too) is the target's pow with C99's cases"),
               "ops": ("", "comma-separated math ops to rewrite (default: " + ",".join(MATH_OPS) + "; also "
                           + ",".join(TRIG) + ": reduced exactly at any argument, for GPUs)")}

    def __init__(self, **options):
        super().__init__(**options)
        self.ops = [o.strip() for o in str(self.opts["ops"]).split(",") if o.strip()] or list(MATH_OPS)
        unknown = [o for o in self.ops if o not in MATH_OPS + tuple(TRIG)]
        if unknown:
            raise ValueError(f"pass '{self.name}': no approximation of {', '.join(unknown)} "
                             f"(it has {', '.join(MATH_OPS + tuple(TRIG))})")

    def run(self, module: ir.Operation):
        ops = self.ops
        targets = []
        gpu_pow = str(self.opts["target"]) == "gpu"

        def visit(op):
            for region in op.regions:
                for block in region.blocks:
                    for child in block.operations:
                        child = child.operation
                        nm = child.name
                        if nm.startswith("math.") and nm[5:] in ops and len(child.results) == 1 and (
                                str(child.results[0].type) == "f32"
                                or (nm[5:] in F64_OPS and str(child.results[0].type) == "f64")) \
                                and not (nm[5:] in BINARY and _const_f32(child.operands[1]) is not None
                                         and not gpu_pow):
                            # (a constant exponent stays: LLVM makes x^2 a multiply, x^0.5 a sqrt;
                            # on a GPU the cases are needed all the same, and fold)
                            targets.append(child)
                        visit(child)
        visit(module)
        if not targets:
            return
        ctx = module.context
        block = module.regions[0].blocks[0]
        made = {}
        for op in targets:
            fn, t = op.name[5:], str(op.results[0].type)
            x, affine, w, chain = erf_affine(op) if fn == "erf" else (op.operands[0], {}, None, [op])
            args = [x] + list(op.operands[1:]) if fn in BINARY else [x]
            plain = not affine or affine == dict(scale=1.0, mul=1.0, add=0.0)
            key = (fn, t) if plain else (fn, t) + tuple(sorted(affine.items()))
            fname = made.get(key)
            if fname is None:
                fname = f"__mirax_approx_{fn}_{t}" + ("" if plain else f"_{len(made)}")
                with ctx, ir.Location.unknown():
                    snippet = ir.Module.parse(function_text(fn, fname, str(self.opts["target"]), t,
                                                            **({} if plain else affine)))
                    block.append(snippet.body.operations[0])
                made[key] = fname
            last = chain[-1]
            with ctx, last.location, ir.InsertionPoint(last):
                r = func.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(fname), args).results[0]
                if w is not None:
                    r = ir.Operation.create("arith.mulf", results=[r.type], operands=[r, w]).results[0]
            last.results[0].replace_all_uses_with(r)
            for dead in reversed(chain):
                dead.erase()


def _splat_int(v, value):
    """Is `v` an arith.constant splat (or scalar) integer `value`?"""
    a = splat_attr(v)
    return a is not None and isa(ir.IntegerAttr, a) and ir.IntegerAttr(a).value == value


def _pow2_of(v):
    """`k` when `v` is `bitcast((k + 127) << 23)` (the exponent field of 2^k, `_pow2i`)."""
    b = defining_op(v)
    if b is None or b.name != "arith.bitcast":
        return None
    s = defining_op(b.operands[0])
    if s is None or s.name != "arith.shli" or not _splat_int(s.operands[1], 23):
        return None
    a = defining_op(s.operands[0])
    if a is None or a.name != "arith.addi" or not _splat_int(a.operands[1], 127):
        return None
    return a.operands[0]


def _two_factor_scaling(mul2):
    """(mul1, sub, shr) when `mul2` is the second multiply of exp's 2^m scaling `y *
    2^(m >> 1) * 2^(m - (m >> 1))` (`mul1` the first, `sub` = m - (m >> 1), `shr` = m >> 1),
    else None."""
    m2 = _pow2_of(mul2.operands[1])
    mul1 = defining_op(mul2.operands[0])
    if m2 is None or mul1 is None or mul1.name != "arith.mulf":
        return None
    m1 = _pow2_of(mul1.operands[1])
    sub, shr = defining_op(m2), (defining_op(m1) if m1 is not None else None)
    if (sub is None or sub.name != "arith.subi" or shr is None or shr.name != "arith.shrsi"
            or sub.operands[1] != m1 or shr.operands[0] != sub.operands[0] or not _splat_int(shr.operands[1], 1)):
        return None
    return mul1, sub, shr


def _rounded_t(mi):
    """t when exp's integer m `mi` is `bitcast(t) - 0x4B400000` (target "cpu": t = x log2(e)
    + 1.5 * 2^23, m in its low bits), else None."""
    op = defining_op(mi)
    if op is None or op.name != "arith.subi" or not _splat_int(op.operands[1], 0x4B400000):
        return None
    tb = defining_op(op.operands[0])
    return tb.operands[0] if tb is not None and tb.name == "arith.bitcast" else None


def _float_exponent(mi):
    """exp's m as a float, for its integer m `mi`: `t - 1.5 * 2^23` beside `bitcast(t) -
    0x4B400000` (target "cpu"), or the operand of `fptosi` ("any"); None if not found."""
    op = defining_op(mi)
    if op is not None and op.name == "arith.fptosi":
        return op.operands[0]
    t = _rounded_t(mi)
    if t is None:
        return None
    for use in t.uses:
        u = user_op(use)
        if u.name == "arith.subf" and u.operands[0] == t:
            return u.results[0]
    return None


SCALEF = "llvm.x86.avx512.mask.scalef.ps.512"
REDUCE = "llvm.x86.avx512.mask.reduce.ps.512"

# (vector ops built generically here: mlir.dialects.vector costs ~3 ms to import in a fresh
# process, mlir.dialects.llvm 25-45 ms)


def _intrinsic(name, result_type, operands):
    """`llvm.call_intrinsic "name"(operands)`."""
    return ir.Operation.create(
        "llvm.call_intrinsic", results=[result_type], operands=operands,
        attributes={"intrin": ir.StringAttr.get(name), "op_bundle_sizes": ir.DenseI32ArrayAttr.get([]),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(operands), 0])}).results[0]


def _llvm_int(t, v):
    """An `llvm.mlir.constant` of integer type `t` (an intrinsic's immediate operand)."""
    return ir.Operation.create("llvm.mlir.constant", results=[t], attributes={"value": ir.IntegerAttr.get(t, v)}).results[0]


def _splat(vt, v):
    """A splat f32 vector constant of type `vt`."""
    return ir.Operation.create("arith.constant", results=[vt], attributes={
        "value": ir.DenseElementsAttr.get_splat(vt, ir.FloatAttr.get(ir.F32Type.get(), v))}).results[0]


def _vector_horner(x, coeffs, vt):
    """coeffs[0] + coeffs[1] x + ... + coeffs[n] x^n on f32 vectors of type `vt`, with fmas
    (coefficients lowest degree first)."""
    p = _splat(vt, coeffs[-1])
    for c in coeffs[-2::-1]:
        p = ir.Operation.create("math.fma", results=[vt], operands=[p, x, _splat(vt, c)]).results[0]
    return p


def _pieces16(fn, n, *vs):
    """fn(pieces...) on each 16-lane piece of the n-lane f32 vectors `vs` (a 512-bit
    register each), the results put back together into the first vector's type."""
    if n == 16:
        return fn(*vs)
    i64 = ir.IntegerType.get_signless(64)
    v16 = ir.VectorType.get([16], ir.F32Type.get())
    i64s = lambda *xs: ir.ArrayAttr.get([ir.IntegerAttr.get(i64, x) for x in xs])  # noqa: E731
    out = vs[0]
    for k in range(0, n, 16):
        pieces = [ir.Operation.create("vector.extract_strided_slice", results=[v16], operands=[v], attributes={
            "offsets": i64s(k), "sizes": i64s(16), "strides": i64s(1)}).results[0] for v in vs]
        out = ir.Operation.create("vector.insert_strided_slice", results=[vs[0].type], operands=[fn(*pieces), out],
                                  attributes={"offsets": i64s(k), "strides": i64s(1)}).results[0]
    return out


def _scalef(y, m, n):
    """y * 2^m for f32 vectors of n lanes (a multiple of 16) and a float, integer-valued m:
    AVX-512's `vscalefps` on each 16-lane piece (all lanes, the current rounding mode)."""
    i16, i32 = ir.IntegerType.get_signless(16), ir.IntegerType.get_signless(32)
    mask, rounding = _llvm_int(i16, -1), _llvm_int(i32, 4)  # _MM_FROUND_CUR_DIRECTION
    return _pieces16(lambda yk, mk: _intrinsic(SCALEF, yk.type, [yk, mk, yk, mask, rounding]), n, y, m)


def scale_with_ldexp(root, scalef: bool = False):
    """The two-factor 2^m scaling of the vectorized exps in `root` (`y * 2^(m >> 1) *
    2^(m - (m >> 1))`, see `exp`) as one `llvm.ldexp(y, m)`, which LLVM lowers to
    `vscalefps` on AVX-512 (9 vector ops -> 2: the int-to-float conversion and the
    scalef). Bit-identical: both round y * 2^m once (the first factor of the two-factor
    form is exact), overflow to inf and underflow to denormals or 0 alike, and a NaN stays
    a NaN. For hosts with AVX-512 only: elsewhere LLVM calls libm's ldexpf a lane.

    `scalef` (AVX-512 hosts): `vscalefps` itself, on exp's m as the float it already has
    (`m = t - 1.5 * 2^23`, beside the integer one): no conversion back (9 ops -> 1), where
    the vectors are whole 512-bit registers; ldexp elsewhere. Zen 4, logsumexp 4096^2,
    interleaved medians: one thread 3.96 -> 3.73 ms, two 2.91 -> 2.79 (bit-identical).

    The ops are built generically: `mlir.dialects.llvm` costs 25-45 ms to import, a third
    of the first compile of a small function in a fresh process."""
    for mul2 in walk_ops(root, lambda n: n == "arith.mulf"):
        t = mul2.results[0].type
        if not str(t).startswith("vector<") or ir.VectorType(t).rank != 1:
            # (an LLVM intrinsic takes 1-d vectors only: a transpose's 16x16 register block,
            # fused with an exp, keeps its two multiplies)
            continue
        found = _two_factor_scaling(mul2)
        if found is None:
            continue
        mul1, sub, _ = found
        n = ir.VectorType(t).shape[0]
        mf = _float_exponent(sub.operands[0]) if scalef and n % 16 == 0 and str(t).endswith("xf32>") else None
        with ir.InsertionPoint(mul2), mul2.location:
            if mf is not None:
                r = _scalef(mul1.operands[0], mf, n)
            else:
                # llvm.intr.ldexp takes a scalar exponent only: the generic intrinsic call
                r = _intrinsic("llvm.ldexp", t, [mul1.operands[0], sub.operands[0]])
        mul2.results[0].replace_all_uses_with(r)


# 2^r for r in [0, 1): 1 + c1 r + ... + c6 r^6, a fit of the relative error (Lawson's
# weighted least squares); evaluated in f32 with fmas, at most 1.1 * 2^-24 off
EXP2_UNIT = (1.0, 0.6931470632553101, 0.2402293086051941, 0.05548528581857681, 0.009675436653196812,
             0.0012468008790165186, 0.0002161229058401659)


def reduced_exps(root) -> int:
    """Each vectorized f32 exp in `root` (see `exp`, target "cpu"; vectors of a multiple of
    16 lanes) as 2^t with t = x log2(e): r = t - floor(t) by AVX-512's `vreduceps`
    (imm 9: no fraction bits kept, rounding down), 2^r by a degree-6
    polynomial on [0, 1), scaled by 2^floor(t) with `vscalefps` (which floors t itself):

        %t = %x * log2(e)      %r = vreduceps %t      %p = P6(%r)      %y = vscalefps %p, %t

    10 vector ops (the reduce is two) against the Cody-Waite form's 14: no clamp (the
    reduce of an infinity or of a |t| >= 2^23 is 0, so -inf gives 0 and +inf inf, a NaN
    stays a NaN), no magic-number rounding, no two-part ln2. For AVX-512 hosts (DQ), in
    the row kernels of mirax-fuse-reductions, on exps that are only summed (logsumexp's:
    the busy loop there). The price: t's rounding (|t| 2^-24) passes into each exp as a
    relative error |x| 2^-24 where Cody-Waite reduces x exactly, so only sums take it:
    logsumexp's result log(sum) has the same |t| ln2 2^-24 from rounding the log, and its
    shift (the first chunk's max, `stable_shift`) keeps |t| near the log's size. A
    softmax's exps are its outputs, relative to the row's first chunk's max (|x| up to
    tens: 3e-6 relative error for 30-sigma logits against 4e-7 with Cody-Waite), so they
    keep Cody-Waite. Returns how many it rewrote."""
    f32, i16, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(16), ir.IntegerType.get_signless(32)
    count = 0
    for mul2 in walk_ops(root, lambda n: n == "arith.mulf"):
        vt = mul2.results[0].type
        if not isa(ir.VectorType, vt) or ir.VectorType(vt).rank != 1 or ir.VectorType(vt).element_type != f32 \
                or ir.VectorType(vt).shape[0] % 16:
            continue
        if any(user_op(u).name != "arith.addf" for u in mul2.results[0].uses):
            continue  # (a softmax's exps, which it writes: see the docstring)
        found = _exp_pattern(mul2)
        if found is None:
            continue
        x, n = found[0], ir.VectorType(vt).shape[0]
        with ir.InsertionPoint(mul2), mul2.location:
            t = ir.Operation.create("arith.mulf", results=[vt], operands=[x, _splat(vt, 1.44269504088896341)]).results[0]
            imm, mask, sae = _llvm_int(i32, 9), _llvm_int(i16, -1), _llvm_int(i32, 4)
            r = _pieces16(lambda p: _intrinsic(REDUCE, p.type, [p, imm, p, mask, sae]), n, t)
            y = _scalef(_vector_horner(r, EXP2_UNIT, vt), t, n)
        mul2.results[0].replace_all_uses_with(y)
        _erase_unused(mul2)
        count += 1
    return count


def _erase_unused(op) -> None:
    """Erase `op` and then each op that fed only it, while their results have no users
    (the pure arith/math ops of an exp that was replaced)."""
    todo = [op]
    while todo:
        o = todo.pop()
        if any(True for r in o.results for _ in r.uses) or o.name.split(".")[0] not in ("arith", "math"):
            continue
        feeders = [defining_op(v) for v in o.operands]
        o.erase()
        todo += [d for d in feeders if d is not None and d not in todo]


def _exp_input(t_op):
    """`x` when `t_op` is exp's `fma(clamp(x, lo, hi), log2(e), 1.5 * 2^23)` (`exp`,
    target "cpu"), with the clamp's four ops; else (None, [])."""
    if t_op is None or t_op.name != "math.fma":
        return None, []
    hi_sel = defining_op(t_op.operands[0])
    if hi_sel is None or hi_sel.name != "arith.select":
        return None, []
    hi_cmp, lo_sel = defining_op(hi_sel.operands[0]), defining_op(hi_sel.operands[2])
    if hi_cmp is None or hi_cmp.name != "arith.cmpf" or lo_sel is None or lo_sel.name != "arith.select":
        return None, []
    lo_cmp = defining_op(lo_sel.operands[0])
    if lo_cmp is None or lo_cmp.name != "arith.cmpf" or hi_cmp.operands[0] != lo_sel.results[0] \
            or lo_cmp.operands[0] != lo_sel.operands[2]:
        return None, []
    return lo_sel.operands[2], [lo_cmp, lo_sel, hi_cmp, hi_sel]


def _exp_pattern(mul2):
    """The parts of a vectorized exp ending in `mul2` (its second 2^m factor), or None:
    (x, the clamp's ops, mi (m as an integer), the ops of the two-factor scaling, y before
    the scaling, the constant 23 of the exponent field's shift)."""
    found = _two_factor_scaling(mul2)
    if found is None:
        return None
    mul1, sub, shr = found
    mi = sub.operands[0]
    t = _rounded_t(mi)  # t = fma(...) (target "cpu")
    if t is None:
        return None
    x, clamp = _exp_input(defining_op(t))
    if x is None:
        return None
    scaling = [shr, sub, mul1, mul2]
    for f in (mul1.operands[1], mul2.operands[1]):  # bitcast(shli(addi(k, 127), 23))
        b = defining_op(f)
        s = defining_op(b.operands[0])
        scaling += [b, s, defining_op(s.operands[0])]
    shl23 = defining_op(defining_op(mul2.operands[1]).operands[0])
    return x, clamp, mi, scaling, mul1.operands[0], shl23.operands[1]


# |x| below this: m = round(x log2(e)) is in [-124, 124] (86 log2(e) = 124.07), the clamp
# does nothing, and y 2^m (y = exp(r) in [0.70, 1.42], exponent field 126 or 127) is a
# normal float whose exponent field is y's plus m
FAST_EXP_BOUND = 86.0


# 2^r for r in [-1/2, 1/2] (lowest degree first), for exps that are only summed: degree 5,
# evaluated in f32 with fmas at most 2.8 * 2^-24 off (a minimax fit of the relative error
# with 2^0 = 1 exact; degree 6 was 1.3 * 2^-24, one fma more a vector: logsumexp 512 x
# 4096 and 4096^2 on Zen 3 7-10% slower, interleaved in one process, its largest error
# against float64 7.1e-7 against this one's 7.6e-7). A sum's terms already carry t's
# rounding, |t| 2^-24 each (see `_summed_fast_exp`), above this for |t| > 3
EXP2_HALF_F32 = (1.0, 0.6931470036506653, 0.24022242426872253, 0.05550733581185341, 0.009671512991189957,
                 0.001326472731307149)


def _summed_fast_exp(x, vt, it, c23):
    """The fast branch's exp of `x` (every lane |x| < 86) when it is only summed: 2^t, t =
    x log2(e), n = round(t) with 1.5 * 2^23 (whose bits are then n + 0x4B400000, and
    shifted left by 23 exactly n << 23), 2^(t - n) by a degree-5 polynomial, n added to
    its exponent field: 13 vector ops a register for Cody-Waite's 16 (no two-part ln2, no
    subtraction of the magic number's bits). As `reduced_exps` on AVX-512, t's rounding is
    a relative error |t| 2^-24 in each exp: for sums only (logsumexp)."""
    from mlir.dialects import arith
    magic = 12582912.0  # 1.5 * 2^23
    t = arith.MulFOp(x, _splat(vt, 1.44269504088896341)).result
    tm = arith.AddFOp(t, _splat(vt, magic)).result
    r = arith.SubFOp(t, arith.SubFOp(tm, _splat(vt, magic)).result).result
    p = _vector_horner(r, EXP2_HALF_F32, vt)
    e = arith.ShLIOp(arith.BitcastOp(it, tm).result, c23).result
    return arith.BitcastOp(vt, arith.AddIOp(arith.BitcastOp(it, p).result, e).result).result


def split_exp_range(root, lanes=0):
    """Each vectorized exp in `root` (see `exp`, target "cpu") becomes `scf.if` all lanes
    have |x| < 86: then exp without the clamp, scaled by 2^m as an integer add of m << 23
    to y's bits (2 integer ops; the clamp and the two-factor scaling are 12 vector ops of
    ~27, 2 of them multiplies), else the exp as it was. The test is 2 ops a vector and
    one branch a chunk. Bit-identical: for |x| < 86, m is in [-124, 124] and y 2^m a
    normal float, which y * 2^(m >> 1) * 2^(m - (m >> 1)) gives exactly too (neither
    product rounds); a chunk with a NaN or an infinity takes the slow branch. For hosts
    whose exps do not use `scale_with_ldexp` (one `vscalefps` on AVX-512). Zen 3 (AVX2),
    4096^2, interleaved medians: logsumexp 4.37 -> 3.86 ms, softmax 5.43 -> 5.14 ms (one
    2^m multiply then; the integer add took one more multiply off the FMA pipes). An exp
    that is only summed gets `_summed_fast_exp` on that branch instead (no Cody-Waite):
    logsumexp 4096^2 under the AVX2 cap on an Intel host 3.98 / 3.59 -> 3.39 / 3.34 ms.

        %y = (the exp of x)                       ->   %ok = |x| < 86 (all lanes)
                                                       %y = scf.if %ok { fast } else { %y as before }
    """
    import struct
    for mul2 in walk_ops(root, lambda n: n == "arith.mulf"):
        vt = mul2.results[0].type
        if not isa(ir.VectorType, vt) or ir.VectorType(vt).rank != 1:
            continue
        found = _exp_pattern(mul2)
        if found is None:
            continue
        # (imported only here: `mlir.dialects.vector` ~5 ms on a first compile without exps)
        from mlir.dialects import arith, scf, vector
        x, clamp, mi, scaling, y, c23 = found
        block = mul2.block
        # the exp's ops: everything mul2 depends on in its block, back to x
        members, todo = [], [mul2]
        while todo:
            op = todo.pop()
            if op in members:
                continue
            members.append(op)
            for v in op.operands:
                d = defining_op(v)
                if v != x and d is not None and d.block == block and d.name != "arith.constant":
                    todo.append(d)
        if any(user_op(u) not in members for op in members if op != mul2 for u in op.results[0].uses):
            continue  # a part of the exp used elsewhere: leave it
        ordered = [op.operation for op in block.operations if op.operation in members]
        with ir.InsertionPoint(mul2), mul2.location:
            i1 = ir.IntegerType.get_signless(1)
            # |x| as integers (the sign bit cleared): for non-negative floats integer order
            # is float order, and a NaN is above every number, so an unsigned max keeps it
            # and it fails the test. The largest of each lane across the vector's registers
            # (vpmaxud), then one compare a chunk: an and of 32 i1 lanes became 6 pack and
            # permute ops on AVX2
            n = ir.VectorType(vt).shape[0]
            i32 = ir.IntegerType.get_signless(32)
            it = ir.VectorType.get([n], i32)
            ax = arith.AndIOp(arith.BitcastOp(it, x).result, arith.ConstantOp(it, ir.DenseElementsAttr.get_splat(
                it, ir.IntegerAttr.get(i32, 0x7FFFFFFF))).result).result
            part = lanes if lanes and n % lanes == 0 else n
            pt = ir.VectorType.get([part], i32)
            parts = [ax] if part == n else [
                vector.ExtractStridedSliceOp(pt, ax, [k], [part], [1]).result for k in range(0, n, part)]
            while len(parts) > 1:
                parts = [arith.MaxUIOp(a, c).result for a, c in zip(parts[::2], parts[1::2])] \
                    + parts[len(parts) // 2 * 2:]
            bound = arith.ConstantOp(pt, ir.DenseElementsAttr.get_splat(pt, ir.IntegerAttr.get(
                i32, struct.unpack("<I", struct.pack("<f", FAST_EXP_BOUND))[0]))).result
            ok = arith.CmpIOp(arith.CmpIPredicate.ult, parts[0], bound).result
            all_ok = vector.ReductionOp(i1, vector.CombiningKind.AND, ok).result
            branch = scf.IfOp(all_ok, [vt], has_else=True)
        skip = clamp + scaling
        mapping = {clamp[-1].results[0]: x}
        summed = all(user_op(u).name == "arith.addf" for u in mul2.results[0].uses)
        with ir.InsertionPoint(branch.then_block), mul2.location:
            if summed:
                fast = _summed_fast_exp(x, vt, it, c23)
            else:
                for op in ordered:
                    if op in skip:
                        continue
                    clone_mapped(op, mapping)
                e = arith.ShLIOp(mapping[mi], c23).result
                yi = arith.BitcastOp(it, mapping[y]).result
                fast = arith.BitcastOp(vt, arith.AddIOp(yi, e).result).result
            scf.YieldOp([fast])
        mul2.results[0].replace_all_uses_with(branch.results[0])
        with ir.InsertionPoint(branch.else_block), mul2.location:
            yld = scf.YieldOp([mul2.results[0]])
        for op in ordered:
            op.move_before(yld)
