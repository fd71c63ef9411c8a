"""CPU code generation: f32 math approximations, elementwise fusion, threads (OpenMP).

Accuracy is checked against numpy in float64 rounded to float32: relative error
<= 2e-6 over wide ranges, and numpy's answers for inf, -inf, nan, 0 and denormals.
"""
import math
import re
import shutil
import subprocess

import numpy as np
import pytest
from mlir import ir
from mlir.passmanager import PassManager

import mirax as mr
from arrays import A
from rowwise import ROWWISE
from mirax.lowering import PASSES, host_cpu, tuning
from mirax.lowering.approx import function_text
from mirax.runtime import cpu
from mirax.runtime.context import context

RTOL = 2e-6
TINY = np.finfo(np.float32).tiny


def _erf64(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid64(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


REFS = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": _erf64, "sigmoid": _sigmoid64,
        "expm1": np.expm1, "log1p": np.log1p}
RANGES = {
    # (MLIR's own lowering of these, exp(x) - 1 and log(1 + x), was 7% off at 5.6e-7)
    "expm1": [(-100.0, 88.0), (-1.0, 1.0), (-1e-6, 1e-6), (1e-30, 1e-3)],
    "log1p": [(1e-37, 3e38), (-0.999, 1.0), (-1e-6, 1e-6), (1e-30, 1e-3)],
    "exp": [(-103.0, 88.7), (-1.0, 1.0), (-1e-6, 1e-6)],
    "log": [(1e-37, 3e38), (0.5, 2.0), (0.999, 1.001)],
    "tanh": [(-12.0, 12.0), (-0.7, 0.7), (-1e-4, 1e-4)],
    "erf": [(-6.0, 6.0), (-1.0, 1.0), (-1e-4, 1e-4)],
    "sigmoid": [(-100.0, 100.0), (-8.0, 8.0), (-103.0, -80.0)],
}
SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1.0, 1.0, 89.0, -89.0,
                     -104.0, -110.0, 100.0, 3e38, -3e38], np.float32)


def _samples(lo, hi, n=20000, seed=0):
    rng = np.random.default_rng(seed)
    if lo > 0 and hi / lo > 1e6:  # log-uniform over many decades
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.float32)
    return np.concatenate([rng.uniform(lo, hi, n), np.linspace(lo, hi, n)]).astype(np.float32)


def _max_rel(got, ref):
    ref32 = ref.astype(np.float32).astype(np.float64)
    ok = np.isfinite(ref32) & (np.abs(ref32) >= TINY)
    return float(np.max(np.abs(got[ok].astype(np.float64) - ref[ok]) / np.abs(ref[ok])))


@pytest.mark.parametrize("name", sorted(REFS))
def test_f32_accuracy_wide_ranges(name):
    for lo, hi in RANGES[name]:
        x = _samples(lo, hi)
        got = np.asarray(getattr(mr, name)(A(x)))
        assert got.dtype == np.float32
        err = _max_rel(got, REFS[name](x.astype(np.float64)))
        assert err <= RTOL, f"{name} on [{lo}, {hi}]: max relative error {err:.3g}"


@pytest.mark.parametrize("name", sorted(REFS))
def test_f32_special_values_as_numpy(name):
    got = np.asarray(getattr(mr, name)(A(SPECIALS)))
    with np.errstate(all="ignore"):
        ref = REFS[name](SPECIALS.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    fin = ~np.isnan(ref)
    # exact for inf/0/+-1 results; denormal results within a few denormal steps
    np.testing.assert_allclose(got[fin], ref[fin], rtol=RTOL, atol=1e-44)
    assert np.array_equal(np.signbit(got[fin & (ref == 0)]), np.signbit(ref[fin & (ref == 0)])) or name in ("exp", "sigmoid")


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "erf"])
def test_f16_through_f32(name):
    x = _samples(0.01, 8.0, 500).astype(np.float16)
    got = np.asarray(getattr(mr, name)(A(x)))
    assert got.dtype == np.float16
    ref = REFS[name](x.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=2e-3)


def test_f64_keeps_libm_precision():
    x = np.linspace(-20, 20, 1001)
    np.testing.assert_allclose(np.asarray(mr.exp(A(x))), np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(mr.tanh(A(x))), np.tanh(x), rtol=1e-15, atol=1e-16)
    # expm1 and log1p keep it near 0 too (Kahan's and Goldberg's forms on libm's exp and log)
    t = np.concatenate([x, np.geomspace(1e-300, 1e-3, 200), -np.geomspace(1e-300, 0.9, 200)])
    np.testing.assert_allclose(np.asarray(mr.expm1(A(t))), np.expm1(t), rtol=1e-15)
    t = t[t > -1]
    np.testing.assert_allclose(np.asarray(mr.log1p(A(t))), np.log1p(t), rtol=1e-15)


POW_X = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40,
         3.4e38, 1e-30, 1.0000001, 0.9999999]
POW_Y = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 2.5, np.inf, -np.inf, np.nan, 1e10, 1e-10,
         127.9, -149.0, 16777216.0, 16777217.0, 1e8 + 1]


@pytest.mark.parametrize("poly", [1, 0])
def test_pow_matches_numpy(poly):
    """f32 pow by mirax-math-approx's polynomial (1) or the vector math library (0, where
    there is one): within an ulp of the correctly rounded result over wide ranges, and
    C99's special cases as numpy gives them (every pair of the values above)."""
    if not poly and tuning.vector_math_library() is None:
        pytest.skip("no vector math library here")
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(0, 4, 40000), np.exp2(rng.uniform(-149, 128, 40000)),
                        -np.round(rng.uniform(0, 8, 2000))]).astype(np.float32)
    y = np.concatenate([rng.uniform(-40, 40, 40000), rng.uniform(-1, 1, 40000),
                        np.round(rng.uniform(-20, 20, 2000))]).astype(np.float32)
    gx, gy = np.meshgrid(np.array(POW_X, np.float32), np.array(POW_Y, np.float32))
    x, y = np.concatenate([x, gx.ravel()]), np.concatenate([y, gy.ravel()])
    with tuning.override(math={"powf": {"polynomial": poly}}):
        got = np.asarray(mr.compile(lambda a, b: mr.power(a, b))(A(x), A(y)))
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = np.isfinite(want) & (want != 0)
    assert np.array_equal(got[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)])
    assert np.array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    ulps = np.abs(got[ok].astype(np.float64) - want[ok]) / np.spacing(np.abs(want[ok]))
    assert ulps.max() <= (1 if poly else 4), ulps.max()


def test_pow_with_a_constant_exponent_stays_for_llvm():
    """`x ** 2.0` keeps math.powf with its constant (LLVM makes it a multiply): the
    polynomial is for exponents that vary."""
    a, b = A(np.linspace(0.5, 2.0, 1 << 16, dtype=np.float32)), A(np.linspace(-3, 3, 1 << 16, dtype=np.float32))
    with tuning.override(math={"powf": {"polynomial": 1}}):
        text = mr.compile(lambda x: mr.power(x, 2.0)).lower(a).as_text("optimized")
        assert "math.powf" in text or "arith.mulf" in text
        assert "arith.extf" not in text  # (the polynomial computes in f64)
        text = mr.compile(lambda x, y: mr.power(x, y)).lower(a, b).as_text("optimized")
        assert "math.powf" not in text and "arith.extf" in text


def test_approximation_functions_are_plain_arithmetic():
    for name in ["exp", "log", "erf", "tanh", "powf"]:
        text = function_text(name, "f")
        assert not re.search(r"math\.(exp|log|erf|tanh|powf) ", text), name
        with context():
            ir.Module.parse(text)  # verifies


def _lower(text, passes):
    with context(), ir.Location.unknown():
        m = ir.Module.parse(text)
        pm = PassManager("builtin.module")
        for p in passes:
            PASSES[p]().add_to(pm)
        pm.run(m.operation)
        return str(m)


def gelu(x):
    return x * (1 + mr.erf(x / math.sqrt(2))) / 2


def test_gelu_fuses_into_one_generic():
    text = str(mr.trace(gelu, mr.zeros((4, 1000, 64))))
    out = _lower(text, ["convert-mirax-to-linalg", "mirax-fuse"])
    assert out.count("linalg.generic") == 1
    assert "broadcast" not in out


def _compiled(fun, *shapes, threads=None):
    text = str(mr.trace(fun, *[mr.zeros(s) for s in shapes]))
    text = re.sub(r"(func\.func @main\([^)]*\) -> [^{]*)\{", r"\1attributes {llvm.emit_c_interface} {", text, count=1)
    return cpu.compile_module(text, "main")


@pytest.mark.parametrize("shape", [(2, 700, 1000), (3, 5), (1, 1)])
def test_compiled_gelu_matches_numpy(shape):
    k = _compiled(gelu, shape)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    out = np.empty_like(x)
    k([x], [out])
    ref = x.astype(np.float64) * (1 + _erf64(x.astype(np.float64) / math.sqrt(2))) / 2
    # 1 + erf(x/sqrt 2) cancels for negative x: erf's ~3e-7 absolute error, times |x|
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)


# erf inside affine maps, which mirax-math-approx folds into erf's coefficients
# (approx.erf_affine): (function, its float64 reference, the largest |mul| of erf in it)
ERF_FORMS = {
    "gelu": (gelu, lambda x: x * (1 + _erf64(x / math.sqrt(2))) / 2, 0.5),
    "gelu_half_first": (lambda x: 0.5 * x * (1 + mr.erf(x * 0.7071067811865476)),
                        lambda x: 0.5 * x * (1 + _erf64(x * np.float32(0.7071067811865476))), 0.5),
    "erfc": (lambda x: 1 - mr.erf(x), lambda x: 1 - _erf64(x), 1.0),
    "scaled_negated": (lambda x: 4 * mr.erf(-2.5 * x) - 1, lambda x: 4 * _erf64(-2.5 * x) - 1, 4.0),
    "halved": (lambda x: mr.erf(x) / 2, lambda x: _erf64(x) / 2, 0.5),
    "tiny_scale": (lambda x: mr.erf(1e-3 * x) + 1, lambda x: _erf64(np.float32(1e-3) * x) + 1, 1.0),
    "used_twice": (lambda x: (e := mr.erf(x / 3)) * e + e, lambda x: (e := _erf64(x / 3)) * e + e, 2.0),
    "times_value": (lambda x: (2 + mr.erf(x)) * (x * 0.25) * 8, lambda x: (2 + _erf64(x)) * x * 2, 2.0),
}


@pytest.mark.parametrize("form", sorted(ERF_FORMS))
def test_erf_in_affine_maps_matches_numpy(form):
    fun, ref, mul = ERF_FORMS[form]
    x = np.concatenate([np.random.default_rng(2).standard_normal(3000) * 4, np.linspace(-8, 8, 1001),
                        [0.0, -0.0, 1e-30, -1e-40, 5.7, -5.7, 40.0, -40.0]]).astype(np.float32)
    got = np.asarray(mr.compile(fun)(A(x)))
    want = ref(x.astype(np.float64))
    # erf's absolute error (~1e-7), times |mul| and the magnitude of what multiplies it
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=3e-7 * mul * max(1.0, float(np.abs(x).max())))
    # exact beyond erf's clamp, in scalar code and in vector lanes (a quotient an ulp off
    # there made 1 + erf(-inf) 6e-8 and gelu(-1e30) -3e22)
    specials = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)
    for s in (specials, np.tile(specials, 1000)):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(np.asarray(mr.compile(fun)(A(s))),
                                          ref(s.astype(np.float64)).astype(np.float32))


def test_gelu_erf_folds_its_affine_maps():
    """gelu's + 1 and / 2 are in erf's coefficients: after mirax-math-approx its body is
    x / sqrt 2, the clamp, the two polynomials, the divide, one fma (+ 0.5) and * x."""
    text = str(mr.trace(gelu, mr.zeros((64,))))
    out = _lower(text, ["convert-mirax-to-linalg", "mirax-fuse", "mirax-math-approx"])
    body = out[out.index("linalg.generic"):out.index("linalg.yield")]
    assert body.count("arith.divf") == 1 and body.count("math.fma") == 6 + 3 + 1
    assert body.count("arith.mulf") == 3  # x * (1 / sqrt 2), t = zc^2, * x
    assert body.count("arith.addf") == 1  # the denominator's first step


def test_threads_split_large_kernels_only():
    if tuning.threads() < 2:
        pytest.skip("one CPU or no OpenMP runtime")
    big = str(mr.trace(gelu, mr.zeros((8, 512, 512))))
    small = str(mr.trace(gelu, mr.zeros((8, 16))))
    assert "scf.forall" in _lower(big, ["convert-mirax-to-linalg", "mirax-fuse", "mirax-parallelize"])
    assert "scf.forall" not in _lower(small, ["convert-mirax-to-linalg", "mirax-fuse", "mirax-parallelize"])


def test_threaded_reductions_and_softmax_match_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1536, 1024)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mr.sum(A(x), axis=1)), x.sum(1, dtype=np.float64), rtol=1e-4, atol=1e-3)
    y = np.asarray(mr.softmax(A(x), axis=-1))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-9)


def test_openmp_runtime_and_thread_cap(monkeypatch):
    lib = tuning.openmp_library()
    if lib is not None:
        assert any(lib == p for p in cpu._shared_libs()) or tuning.threads() == 1
    monkeypatch.setenv("MIRAX_NUM_THREADS", "1")
    assert tuning.threads() == 1
    assert all("omp" not in p for p in cpu._shared_libs())


def test_the_pipeline_is_kept_for_the_same_tuning_and_threads(monkeypatch):
    """cpu.lower_to_llvm keeps its PassManager between compiles, and builds another when
    the thread count or the tuning table changes (a kept pipeline would lower a kernel
    for threads that are no longer there): the serial kernel has no OpenMP calls."""
    text = ('func.func @k(%a: tensor<262144xf32>) -> tensor<262144xf32> attributes {llvm.emit_c_interface} {\n'
            '  %0 = "mirax.exp"(%a) : (tensor<262144xf32>) -> tensor<262144xf32>\n  return %0 : tensor<262144xf32>\n}')
    monkeypatch.setattr(cpu, "_PIPELINES", {})  # (earlier tests' pipelines: up to 8 are kept)

    def lowered():
        with context(), ir.Location.unknown():
            m = ir.Module.parse(text)
            cpu.lower_to_llvm(m)
            return str(m)
    first = lowered()
    kept = dict(cpu._PIPELINES)
    assert lowered() == first and {k: v[1] for k, v in cpu._PIPELINES.items()} == {k: v[1] for k, v in kept.items()}
    monkeypatch.setenv("MIRAX_NUM_THREADS", "1")
    serial = lowered()
    assert len(cpu._PIPELINES) == len(kept) + 1 and "__kmpc_fork_call" not in serial
    with tuning.override(elementwise={"parallel_min_elements": 1}):
        lowered()
    assert len(cpu._PIPELINES) == len(kept) + 2


def test_tuning_table_covers_the_families():
    for fam in ["elementwise", "reduction", "other"]:
        assert tuning.table()[fam]["parallel_min_elements"] >= 1


# ---- row-wise fusion (lowering/fuse_reductions.py) ----------------------------------------

def _fused_linalg(fun, shape, **opts):
    text = str(mr.trace(fun, mr.zeros(shape)))
    with context(), ir.Location.unknown():
        m = ir.Module.parse(text)
        pm = PassManager("builtin.module")
        for name in ["mirax-simplify", "convert-mirax-to-linalg", "mirax-fuse"]:
            PASSES[name]().add_to(pm)
        PASSES["mirax-fuse-reductions"](**opts).add_to(pm)
        pm.run(m.operation)
        return str(m)


@pytest.mark.parametrize("name", sorted(ROWWISE))
def test_rowwise_is_one_row_loop(name):
    """Every reduction and elementwise op of the row-wise kernel sits in ONE scf.forall:
    nothing but the loop (and a reshape) is left in the function body."""
    text = _fused_linalg(ROWWISE[name][0], (64, 4096), threads=2)
    assert text.count("scf.forall ") == 1, text
    body = text.split("scf.forall.in_parallel")[1]
    assert "linalg." not in body.split("return")[0].split("}\n    }")[-1]
    # both reductions split into a vector of partial results (the tuning table's
    # partial_sums) carried through a loop over column chunks
    width = tuning.row_fusion_config(4096)["partial_sums"]
    assert text.count(f"-> (vector<1x{width}xf32>)") == 2


def test_rowwise_small_and_column_reductions_are_left_alone():
    assert "scf.forall" not in _fused_linalg(ROWWISE["softmax"][0], (8, 16))
    col = _fused_linalg(lambda x: x / mr.sum(x, axis=0, keepdims=True), (512, 512))
    assert "scf.forall" not in col


@pytest.mark.parametrize("shape", [(256, 2048), (300, 777), (4, 65536)])
@pytest.mark.parametrize("name", sorted(ROWWISE))
def test_rowwise_fused_matches_numpy(name, shape):
    fun, ref = ROWWISE[name]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 3
    got = np.asarray(mr.compile(fun)(A(x)))
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_keepdims_lowers_to_expand_shape():
    from mirax.compile import Lowered  # noqa: F401 - the stage names come from there
    low = mr.compile(lambda x: mr.sum(x, axis=1, keepdims=True)).lower(mr.zeros((3, 4)))
    linalg = low.as_text("linalg")
    assert "tensor.expand_shape" in linalg and "tensor.reshape" not in linalg


@pytest.mark.parametrize("shape,axes,dtype", [
    ((512, 784), (1, 0), np.float32),     # blocked by the host's lanes
    ((64, 48), (1, 0), np.int32),
    ((3, 64, 32), (0, 2, 1), np.float32),  # batched
    ((32, 16, 48), (2, 0, 1), np.float32),
    ((2, 48, 4, 16), (0, 2, 1, 3), np.float32),  # innermost dim kept: runs copied in blocks
    ((1024, 64, 16), (1, 0, 2), np.float32),     # (matmul's B panels: blocks of 8 x 8 runs)
    ((36, 10, 32), (1, 0, 2), np.float32),       # (blocks of 6 x 5: divisors)
    ((13, 20, 16), (1, 0, 2), np.float32),       # (13 is prime: partial blocks of 8)
    ((10, 512), (1, 0), np.float32),       # 10: no multiple of 8 lanes (left alone), < 16 (10 x 16 blocks)
    ((6, 1000), (1, 0), np.float32),       # output rows of 6 < the lanes: 6 x 8 blocks
    ((4, 3, 40), (0, 2, 1), np.float32),   # rows of 3, 40 columns: 3 x 8 blocks
    ((5, 12), (1, 0), np.float32),         # rows of 5, 12 columns: 5 x 4 blocks
    ((64, 64), (1, 0), np.float64),        # 64-bit: left alone
])
def test_transposes_compile_to_the_right_values(shape, axes, dtype):
    """mirax-vectorize-transposes (register blocks + shuffles) against numpy, inside a
    compiled function with a consumer (the transpose is not the function's only op)."""
    import mirax as mr
    a = (np.arange(np.prod(shape)) % 251).reshape(shape).astype(dtype)
    f = mr.compile(lambda x: mr.transpose(x, axes) * 2)
    np.testing.assert_array_equal(np.asarray(f(mr.array(a, dtype=mr.float64 if dtype == np.float64 else None))),
                                  np.transpose(a, axes) * 2)


@pytest.mark.parametrize("shape", [(64, 128), (1024, 512)])  # (the second on the threads)
def test_transposes_fuse_into_their_elementwise_user(shape):
    """`x.T + y`, `exp(x.T)`: the transpose fuses into its one elementwise user (mirax-fuse)
    and that generic runs as the transpose's register blocks with the body on the way
    (mirax-vectorize-transposes); of two transposes one op reads, one fuses."""
    import mirax as mr
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape[::-1]).astype(np.float32)
    z = rng.standard_normal(shape).astype(np.float32)
    a, b, c = mr.array(x), mr.array(y), mr.array(z)
    f = mr.compile(lambda u, v: u.T + v)
    np.testing.assert_array_equal(np.asarray(f(a, b)), x.T + y)
    text = f.lower(a, b).as_text("optimized")
    assert "linalg.transpose" not in text and "linalg.generic" not in text and "vector.shuffle" in text
    np.testing.assert_allclose(np.asarray(mr.compile(lambda u: mr.exp(u.T) * 2)(a)), np.exp(x.T) * 2, rtol=1e-6)
    g = mr.compile(lambda u, w: u.T * w.T)
    np.testing.assert_array_equal(np.asarray(g(a, c)), x.T * z.T)
    # both blocked: twice the one transpose's shuffles (1 flat shuffle a block on AVX2; a
    # 16x16 block on AVX-512 lowers to 64)
    assert g.lower(a, c).as_text("optimized").count("vector.shuffle") == 2 * text.count("vector.shuffle")


LOOPS = """
func.func @f(%a: memref<64xf32>, %v: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c64 step %c1 {
    %x = memref.load %a[%i] : memref<64xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %a[%i] : memref<64xf32>
  }
  scf.for %i = %c0 to %c64 step %c16 {
    %x = vector.transfer_read %v[%i], %pad {in_bounds = [true]} : memref<64xf32>, vector<16xf32>
    %y = arith.mulf %x, %x : vector<16xf32>
    vector.transfer_write %y, %v[%i] {in_bounds = [true]} : vector<16xf32>, memref<64xf32>
  }
  return
}
"""


def test_scalar_loops_of_large_modules_are_not_unrolled(monkeypatch):
    """mirax-annotate-loops: LLVM's unroller off on scalar loops (JIT time), kept on
    vector loops (the matmul micro kernels), and small modules left alone."""
    from mirax.lowering import cpu_pipeline
    with context():
        m = ir.Module.parse(LOOPS)
        cpu_pipeline._annotate_loops(m.operation)
        assert "loop_annotation" not in str(m)  # 2 loops: below ANNOTATE_MIN_LOOPS
        monkeypatch.setattr(cpu_pipeline, "ANNOTATE_MIN_LOOPS", 2)
        cpu_pipeline._annotate_loops(m.operation)
        text = str(m)
    assert "#llvm.loop_unroll<disable = true>" in text  # (printed as an alias)
    scalar, vector = text.split("vector.transfer_read")
    assert scalar.count("{loop_annotation = ") == 1
    assert "loop_annotation" not in vector and "mirax.vector_loop" not in text


def test_no_empty_tensor_has_more_than_a_group_of_uses():
    """mirax-split-empty-tensors: CSE leaves one tensor.empty per type for a whole program,
    and bufferization's analysis of its uses grew with their square (the transformer
    step's lowering); each group of EMPTY_USES consecutive uses gets an empty of its own."""
    from mirax.lowering import cpu_pipeline
    from mirax.lowering.pass_base import walk_ops
    k = cpu_pipeline.EMPTY_USES
    n = 3 * k + 5
    lines = ["func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {",
             "  %e = tensor.empty() : tensor<8xf32>", "  %a0 = arith.addf %x, %x : tensor<8xf32>"]
    for i in range(n):
        lines.append(f"  %y{i} = linalg.copy ins(%a{i} : tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>")
        lines.append(f"  %a{i + 1} = arith.addf %y{i}, %x : tensor<8xf32>")
    lines += [f"  return %a{n} : tensor<8xf32>", "}"]
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("\n".join(lines))
        cpu_pipeline.split_empty_tensors(module.operation)
        module.operation.verify()
        empties = walk_ops(module.operation, lambda name: name == "tensor.empty")
        assert [len(list(e.results[0].uses)) for e in empties] == [k, k, k, 5]


def test_empties_whose_users_read_two_of_them_are_split():
    """Ops reading two large empties: splitting the first rewrites those ops' operands,
    which changes their `hash()` (an ir.Operation hashes its contents); the second's
    users were then looked up in a map of the ops by hash and not found (a KeyError that
    failed an 8-layer transformer step). Positions are kept by address (`op_id`)."""
    from mirax.lowering import cpu_pipeline
    from mirax.lowering.pass_base import op_id, walk_ops
    k = cpu_pipeline.EMPTY_USES
    n = k + 7
    lines = ["func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {",
             "  %e = tensor.empty() : tensor<8xf32>", "  %d = tensor.empty() : tensor<8xf32>",
             "  %a0 = arith.addf %x, %x : tensor<8xf32>"]
    for i in range(n):  # (each reads both: %e as an input, %d as its output)
        lines.append(f"  %y{i} = linalg.add ins(%a{i}, %e : tensor<8xf32>, tensor<8xf32>) outs(%d : tensor<8xf32>) -> tensor<8xf32>")
        lines.append(f"  %a{i + 1} = arith.addf %y{i}, %x : tensor<8xf32>")
    lines += [f"  return %a{n} : tensor<8xf32>", "}"]
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("\n".join(lines))
        op = walk_ops(module.operation, lambda name: name == "linalg.add")[-1]
        before = (hash(op), op_id(op))
        cpu_pipeline.split_empty_tensors(module.operation)
        module.operation.verify()
        assert hash(op) != before[0] and op_id(op) == before[1]  # (its operands were rewritten)
        empties = walk_ops(module.operation, lambda name: name == "tensor.empty")
        assert sorted(len(list(e.results[0].uses)) for e in empties) == [7, 7, k, k]


# ---- the vector math library (glibc's libmvec) -------------------------------------------

SIN_LOOP = b"""
define void @f(ptr noalias %a, ptr noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %p = getelementptr inbounds float, ptr %a, i64 %i
  %x = load float, ptr %p
  %y = call float @llvm.sin.f32(float %x)
  %q = getelementptr inbounds float, ptr %b, i64 %i
  store float %y, ptr %q
  %i1 = add nuw nsw i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
define void @_mlir_ciface_f(ptr %args) { ret void }
declare float @llvm.sin.f32(float)
"""


def _vector_library_or_skip():
    from mirax.runtime import llvm_codegen
    if tuning.vector_math_library() is None or not llvm_codegen.available():
        pytest.skip("no vector math library here (glibc's libmvec on Linux) or no libLLVM")
    return llvm_codegen


def test_vectorized_math_calls_the_vector_library(monkeypatch):
    """A loop calling sin, vectorized by LLVM, calls the library's vector sin (one call a
    vector), not libm's sinf once a lane; MIRAX_VECTOR_LIBRARY=none keeps libm's."""
    llvm_codegen = _vector_library_or_skip()
    obj = llvm_codegen.compile_partition(SIN_LOOP, None, True, b"_mlir_ciface_f", 2)
    assert re.search(rb"_ZGV[bden]N(4|8|16)v_sinf", obj) and b"\0sinf\0" not in obj
    if tuning.table()["elementwise"]["loop_vector_bits"] >= 512:  # AVX-512: its widest, 16 lanes
        assert b"_ZGVeN16v_sinf" in obj
    monkeypatch.setenv("MIRAX_VECTOR_LIBRARY", "none")
    obj = llvm_codegen.compile_partition(SIN_LOOP, None, True, b"_mlir_ciface_f", 2)
    assert b"_ZGV" not in obj and b"sinf" in obj


SCALE_LOOP = SIN_LOOP.replace(b"%y = call float @llvm.sin.f32(float %x)", b"%y = fmul float %x, 3.0")


@pytest.mark.skipif(not shutil.which("objdump"), reason="needs objdump to read the vectors' width")
def test_loops_vectorize_at_the_registers_width(tmp_path):
    """Every kernel function prefers the tuning table's `loop_vector_bits` (llvm_codegen
    `loop_attributes`): on AVX-512 a plain loop uses zmm registers (LLVM's own preference
    on Intel's server cores is 256 bits); capped at AVX2, ymm and no zmm."""
    from mirax.runtime import llvm_codegen
    if not llvm_codegen.available() or host_cpu.host().arch not in ("x86_64", "AMD64"):
        pytest.skip("x86 with libLLVM")
    obj = tmp_path / "k.o"
    obj.write_bytes(llvm_codegen.compile_partition(SCALE_LOOP, None, True, b"_mlir_ciface_f", 2))
    asm = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    assert "vmulps" in asm
    bits = tuning.table()["elementwise"]["loop_vector_bits"]
    assert ("%zmm" in asm) == (bits >= 512), bits
    if bits == 256:
        assert "%ymm" in asm


VECTOR_MATH = {  # mirax name: (numpy reference, arguments from x (-50..50) and y (0.1..3))
    "sin": (np.sin, lambda x, y: (x,)), "cos": (np.cos, lambda x, y: (x,)),
    "tan": (np.tan, lambda x, y: (x,)), "arctan": (np.arctan, lambda x, y: (x,)),
    "arcsin": (np.arcsin, lambda x, y: (x / 60,)), "arccos": (np.arccos, lambda x, y: (x / 60,)),
    "arctan2": (np.arctan2, lambda x, y: (x, y)), "power": (np.power, lambda x, y: (y, x / 10)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(VECTOR_MATH))
def test_vector_math_matches_numpy(name, dtype):
    """The library's functions (compiled: the loops are long enough to vectorize) within a
    few ulp of numpy over wide ranges, huge arguments included, and numpy's special values."""
    ref_fn, args = VECTOR_MATH[name]
    rng = np.random.default_rng(0)
    x = rng.uniform(-50, 50, 4099).astype(dtype)
    y = rng.uniform(0.1, 3, 4099).astype(dtype)
    if name in ("sin", "cos", "tan"):
        x[:64] *= np.asarray(1e30 if dtype == "float64" else 1e30, dtype)  # Payne-Hanek's range
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-30, -1e-30] * 2, dtype)
    f = mr.compile(getattr(mr, name))
    d = mr.float64 if dtype == "float64" else mr.float32
    for a in (args(x, y), args(special[:9], special[9:]) if name in ("arctan2", "power") else args(special, special)):
        got = np.asarray(f(*[mr.array(v, d) for v in a]))
        with np.errstate(all="ignore"):
            ref = ref_fn(*[v.astype(np.float64) for v in a])
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(np.isnan(got), np.isnan(ref.astype(dtype))), name
        ok = np.isfinite(ref)
        np.testing.assert_allclose(got[ok], ref[ok], rtol=2e-6 if dtype == "float32" else 4e-15,
                                   atol=1e-37 if dtype == "float32" else 1e-300)
        assert np.array_equal(np.isinf(got), np.isinf(ref.astype(dtype)))
        zero = ok & (ref == 0)
        assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero])), name


def test_bfloat16_rounding_without_the_runtime_call(tmp_path, monkeypatch, caplog):
    """f32 -> bfloat16 (mirax-expand-bf16-truncf): nearest, ties to even, NaN a NaN,
    overflow to inf, against an independent reference (the two bf16 neighbours of each
    value compared in float64); and the kernel links and loads from its .so (it called
    `__truncsfbf2`, which nothing provides: "undefined symbol", no disk cache)."""
    from mirax.runtime import disk_cache
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-40, 39, 4000)).astype(np.float32)
    x = np.concatenate([x, np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.3895314e38, 3.4e38, 1e-45,
                                     1.00390625, 1.01171875, -1.00390625], np.float32)])
    monkeypatch.setattr(disk_cache, "_warned", set())
    disk_cache.flush()  # (earlier tests' writes still queued)
    compiles, writes = cpu.stats.compiles, cpu.stats.disk_writes
    with caplog.at_level("WARNING"):
        got = np.asarray(mr.array(x).astype(mr.bfloat16).astype(mr.float32))
        disk_cache.flush()
    assert "undefined symbol" not in caplog.text
    assert cpu.stats.disk_writes - writes == cpu.stats.compiles - compiles > 0  # (each kernel linked)
    bits = x.view(np.uint32)
    down = (bits & 0xFFFF0000).view(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        up = ((bits & 0xFFFF0000) + 0x10000).view(np.float32).astype(np.float64)
    up = np.where(np.isinf(up) & np.isfinite(x), np.copysign(2.0 ** 128, up), up)  # (IEEE: past the top, inf)
    xd = x.astype(np.float64)
    tie_down = ((bits >> 16) & 1) == 0
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore", over="ignore"):
        pick_up = (np.abs(up - xd) < np.abs(xd - down)) | ((np.abs(up - xd) == np.abs(xd - down)) & ~tie_down)
        want = np.where(pick_up, up, down).astype(np.float32)
    np.testing.assert_array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.isnan(got[np.isnan(x)]).all() and (got[np.isinf(x)] == x[np.isinf(x)]).all()
    # from float64, rounded once: values a hair off bf16's halfway points in [1, 2), where
    # rounding to f32 first would round them onto the halfway point and then to even
    half = 1 + (2 * np.arange(1, 120) + 1) * 2.0 ** -9
    w = np.concatenate([half + 1e-12, half - 1e-12, half, rng.standard_normal(500) * 10.0 ** rng.integers(-60, 60, 500),
                        [1e300, -1e300, 1e-300]])
    got = np.asarray(mr.array(w, dtype=mr.float64).astype(mr.bfloat16).astype(mr.float64))
    m, e = np.frexp(w)  # w = m 2^e, 0.5 <= |m| < 1: bf16 keeps 8 bits, down to 2^-133 (subnormals)
    q = np.ldexp(1.0, np.maximum(e - 8, -133))
    lo = np.floor(w / q) * q
    pick_up = (w - lo > lo + q - w) | ((w - lo == lo + q - w) & (np.floor(w / q) % 2 == 1))
    want = np.where(pick_up, lo + q, lo)
    want = np.where(np.abs(want) >= 2.0 ** 128, np.copysign(np.inf, w), want)  # (past bf16's top)
    np.testing.assert_array_equal(got, want)
    assert "undefined symbol" not in caplog.text
