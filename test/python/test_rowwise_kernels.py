"""Row-wise kernels as mirax-fuse-reductions builds them (lowering/fuse_reductions.py):
column chunks of vectors with register accumulators, peeled last chunks, row temporaries
written in place, per-row scalars folded, next rows prefetched, row buffers on the stack.
Every shape class (rows shorter than a vector, odd sizes, one row, several reductions a
row) and the special values (-inf rows, NaN, +inf) against numpy in float64."""
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mirax as mr
from arrays import A
from rowwise import layer_norm, logsumexp, np_layer_norm, np_logsumexp, np_softmax, softmax
from mirax.lowering import tuning
from mirax.lowering.host_cpu import host

WIDTH = tuning.row_fusion_config(4096)["partial_sums"]  # the host's chunk width


def three(x):
    """Three reductions of a row (max, sum, sum of squares) and a row scalar from each."""
    m = mr.max(x, axis=-1, keepdims=True)
    s = mr.sum(x - m, axis=-1, keepdims=True)
    q = mr.sum((x - m) * (x - m), axis=-1, keepdims=True)
    return (x - m) * q / (s * s + 1.0)


def np_three(x):
    d = x - x.max(-1, keepdims=True)
    s = d.sum(-1, keepdims=True)
    return d * (d * d).sum(-1, keepdims=True) / (s * s + 1.0)


KERNELS = {"softmax": (softmax, np_softmax), "logsumexp": (logsumexp, np_logsumexp),
           "layer_norm": (layer_norm, np_layer_norm), "three": (three, np_three)}

# at least the tuning table's min_elements (compile fuses them), in every shape class:
# whole chunks, a peeled last chunk, rows shorter than two chunks or than one vector,
# one row, a prime row length
SHAPES = [(16, 4096), (17, 4100), (5, 16387), (64, 1030), (600, 2 * WIDTH + 1), (520, 2 * WIDTH),
          (700, 100), (20000, 3), (1, 70001), (3, 65537)]


# rows over several leading dims (a batch of attention scores): the row loop runs over
# all of them, one row an iteration
SHAPES += [(4, 33, 1030), (2, 3, 5, 4100), (40, 40, 40), (3, 50000, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_rowwise_matches_numpy(name, shape):
    fun, ref = KERNELS[name]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 3
    got = np.asarray(mr.compile(fun)(A(x)))
    # x - mean cancels in float32: rows of a few values then lose absolute accuracy
    atol = 2e-6 if name in ("softmax", "logsumexp") else 1e-4
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-5, atol=atol)


def _special(shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x[0, ::3] = -np.inf        # some -inf entries
    x[1] = -np.inf             # a row of -inf
    x[2, 5] = np.nan           # a NaN
    x[3, -1] = np.inf          # +inf last (in a peeled chunk when the width does not divide)
    x[4, 0] = np.inf           # +inf first
    x[5, :] = 1e30             # huge
    x[6, :7] = -1e30           # huge negative
    return x


@pytest.mark.parametrize("shape", [(8, 4096), (8, 4100), (9, 2 * WIDTH + 5), (8, 48), (8, 64)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["softmax", "logsumexp"])
def test_rowwise_special_values(name, shape):
    rows = max(shape[0], math.ceil(tuning.table()["row_fusion"]["min_elements"] / shape[1]))
    x = np.concatenate([_special(shape), np.zeros((rows - shape[0], shape[1]), np.float32)])
    fun, ref = KERNELS[name]
    got = np.asarray(mr.compile(fun)(A(x)))
    with np.errstate(invalid="ignore", over="ignore"):
        want = ref(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert np.isnan(got[2]).all() and (got[0] >= 0).all() if name == "softmax" else True
    if name == "logsumexp":
        assert got[1] == -np.inf and np.isnan(got[2]) and got[3] == np.inf and got[4] == np.inf


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(8, 4096), (8, 1030), (8, 2 * WIDTH + 1)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["logsumexp", "softmax"])
def test_rows_that_need_their_max(name, shape, dtype):
    """softmax and logsumexp sum with the max of a row's first chunk as the shift and
    compute the row's max only when that sum is not in [0.5, inf) (mirax-stable-shift):
    rows on both sides of that test, each as accurate as numpy's two passes."""
    rows = max(16, math.ceil(tuning.table()["row_fusion"]["min_elements"] / shape[1]))
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((rows, shape[1])) * 3).astype(np.float32)
    x[0, WIDTH + 5] = 1000.0                 # one element far above the first chunk: overflows
    x[1, :WIDTH] = -1e9                      # a masked first chunk (finite)
    x[2, :WIDTH] = -np.inf                   # a masked first chunk; the rest underflows
    x[2, WIDTH:] -= 200.0
    x[3] = rng.uniform(-80, 80, shape[1])    # some of it more than 88 above the first chunk
    x[4, :WIDTH] += 100.0                    # the first chunk well above the rest: no branch
    x[5] += 80.0                             # large, not overflowing
    x[6, -1] = 95.0                          # the last element (a peeled chunk) overflows
    x[7, :WIDTH] = np.float32(-3e38)         # the first chunk near -max: x - c overflows to inf
    x[3] *= 10 if dtype == "float64" else 1  # (beyond exp's f64 range too)
    x[0, WIDTH + 5] *= 10 if dtype == "float64" else 1
    fun, ref = KERNELS[name]
    got = np.asarray(mr.compile(fun)(A(x.astype(dtype), getattr(mr, dtype))))
    tol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, ref(x.astype(dtype).astype(np.float64)), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_rowwise_other_float_types(name, dtype):
    fun, ref = KERNELS[name]
    x = np.random.default_rng(5).standard_normal((40, 2100)).astype(dtype)
    got = np.asarray(mr.compile(fun)(A(x, getattr(mr, dtype))))
    assert got.dtype == np.dtype(dtype)
    tol = 2e-3 if dtype == "float16" else 1e-12
    np.testing.assert_allclose(got.astype(np.float64), ref(x.astype(np.float64)), rtol=tol, atol=tol)


def test_rowwise_integer_rows():
    x = np.random.default_rng(6).integers(-50, 50, (70, 1100)).astype(np.int32)
    got = np.asarray(mr.compile(lambda v: v * 3 - mr.sum(v, axis=-1, keepdims=True))(A(x)))
    np.testing.assert_array_equal(got, x * 3 - x.sum(-1, keepdims=True))


def test_rowwise_causal_mask_from_indices():
    """Elementwise ops reading the column index (a causal mask) in vectorized chunks."""
    n = 300

    def f(x):
        i = mr.arange(n)
        keep = i[None, :] <= i[:, None]
        return mr.softmax(mr.where(keep, x, -mr.inf), axis=-1)
    x = np.random.default_rng(7).standard_normal((n, n)).astype(np.float32)
    got = np.asarray(mr.compile(f)(A(x)))
    xm = np.where(np.tril(np.ones((n, n), bool)), x.astype(np.float64), -np.inf)
    np.testing.assert_allclose(got, np_softmax(xm), rtol=2e-5, atol=2e-6)


def test_rowwise_with_an_argmax():
    """A reduction the split does not handle (argmax: two results) beside split ones."""
    def f(x):
        return x - mr.max(x, axis=-1, keepdims=True) + mr.argmax(x, axis=-1, keepdims=True).astype(mr.float32)
    x = np.random.default_rng(8).standard_normal((64, 2050)).astype(np.float32)
    got = np.asarray(mr.compile(f)(A(x)))
    np.testing.assert_allclose(got, x - x.max(-1, keepdims=True) + x.argmax(-1)[:, None], rtol=1e-6)


def test_rowwise_broadcast_row_vector():
    """A row-invariant operand (layer norm's gain and bias) read in each chunk."""
    g = np.random.default_rng(9).standard_normal(1030).astype(np.float32)

    def f(x, gain):
        return layer_norm(x) * gain + gain
    x = np.random.default_rng(10).standard_normal((128, 1030)).astype(np.float32)
    got = np.asarray(mr.compile(f)(A(x), A(g)))
    want = np_layer_norm(x.astype(np.float64)) * g + g
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


# ---- structure -------------------------------------------------------------------------

def _stage(fun, shape, stage):
    return mr.compile(fun).lower(A(np.zeros(shape, np.float32))).as_text(stage)


@pytest.mark.parametrize("name", ["softmax", "logsumexp", "layer_norm"])
def test_rowwise_vector_accumulators(name):
    """Each reduction of a row keeps WIDTH partial results as a vector carried through its
    column loop (in registers, not a buffer), combined by a tree reduction; elementwise
    ops run on chunks of WIDTH columns; nothing is left as a linalg op in the row loop."""
    text = _stage(KERNELS[name][0], (64, 4096), "optimized")
    assert text.count("scf.forall ") == 1
    body = text.split("scf.forall ")[1].split("scf.forall.in_parallel")[0]
    assert "linalg." not in body
    carried = re.findall(r"scf\.for .*-> \(vector<1x(\d+)xf32>\)", body)
    # (softmax, logsumexp: the sum with the first chunk's shift, then the max and the sum
    # again on the branch of rows that need them, mirax-stable-shift)
    assert len(carried) == (2 if name == "layer_norm" else 3) and set(carried) == {str(WIDTH)}
    assert body.count("fastmath<reassoc>") == 2
    assert f"vector<{WIDTH}xf32>" in body


def centred_too(x, g):
    """A layer norm whose centred rows also feed a column sum (as a training step's
    backward pass reads them for a weight's gradient): a row group with two roots."""
    d = x - mr.mean(x, axis=-1, keepdims=True)
    y = d * mr.rsqrt(mr.mean(d * d, axis=-1, keepdims=True) + 1e-5)
    return y, mr.sum(d * g, axis=0)


@pytest.mark.parametrize("shape", [(64, 4096), (1536, 64)], ids=lambda s: "x".join(map(str, s)))
def test_rowwise_group_with_two_roots(shape):
    """Each root takes its part of the group: the row ops run in row loops (none left
    outside one; before, none was fused), the centred rows computed once, and both
    results match numpy."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    f = mr.compile(centred_too)
    y, e = f(mr.array(x), mr.array(g))
    d = x.astype(np.float64) - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(y), np_layer_norm(x.astype(np.float64)), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(e), (d * g).sum(0), rtol=1e-4, atol=1e-4)
    text = f.lower(mr.array(x), mr.array(g)).as_text("optimized")
    outside = re.sub(r"scf\.forall .*?scf\.forall\.in_parallel", "", text, flags=re.S)
    # (the column sum is no row op: it reads the centred rows the row loop wrote)
    assert '"parallel", "reduction"' not in outside and "arith.subf" not in outside
    assert text.count("arith.subf") == text.count("math.rsqrt") == 1


@pytest.mark.parametrize("cols", [48, 64, 100])
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_short_rows_are_vectorized(name, cols):
    """Rows shorter than two chunks of WIDTH (a transformer's 64 features, its 48
    attention scores) keep fewer partial sums, down to one vector, so that two chunks fit
    a row: still one vectorized row loop (before, they were left to LLVM's vectorizer and
    ran ~3x slower), and right."""
    lanes = host().f32_lanes
    width = WIDTH
    while width > lanes and cols < 2 * width:
        width //= 2
    x = np.random.default_rng(9).standard_normal((6144, cols)).astype(np.float32) * 3
    fun, ref = KERNELS[name]
    np.testing.assert_allclose(np.asarray(mr.compile(fun)(A(x))), ref(x.astype(np.float64)), rtol=2e-5, atol=1e-4)
    text = _stage(fun, (6144, cols), "optimized")
    body = text.split("scf.forall ")[1].split("scf.forall.in_parallel")[0]
    assert "linalg." not in body
    carried = set(re.findall(r"scf\.for .*-> \(vector<1x(\d+)xf32>\)", body))
    assert carried == {str(width)}  # (fewer than WIDTH where cols < 2 * WIDTH)


def test_fusing_a_group_copies_each_producer_once():
    """The fusion steps on a layer norm's gradient (16 producers, many used twice in the
    row): each fused copy is CSE'd before the next producer is fused, so the loop stays
    about the group's size (without: every copy took its own copies of the next
    producers, 91 KB of IR and 0.7 s for this group instead of 13 KB and 14 ms)."""
    import mirax.nn as nn
    from mlir import ir
    from mirax.lowering import fuse_reductions as fr
    from mirax.lowering.pass_base import run_transform, walk_ops
    from mirax.runtime.context import context
    ln = nn.LayerNorm(64)

    def loss(x, h):
        y = ln(x + h)
        return (y * y).sum()
    x = A(np.ones((32, 48, 64), np.float32))
    text = mr.compile(mr.grad(loss)).lower(x, x).as_text("linalg")
    fused = subprocess.run([os.path.join(os.path.dirname(sys.executable), "mirax-opt"), "--mirax-fuse"],
                           input=text, capture_output=True, text=True, check=True).stdout
    with context(), ir.Location.unknown():
        m = ir.Module.parse(fused)
        i64 = ir.IntegerType.get_signless(64)
        (block,) = fr._blocks(m.operation)
        fr._private_fills(block)
        (root, prods, *_), = fr.groups(block)
        root.attributes[fr.ROOT] = ir.IntegerAttr.get(i64, 0)
        for k, op in enumerate(prods):
            op.attributes[fr.PROD] = ir.IntegerAttr.get(i64, k)
        assert len(prods) >= 12
        steps, _ = fr._fuse_steps(0, [1, 1, 0], list(range(len(prods))))  # (no final CSE)
        run_transform(m.operation, ir.Module.parse(fr._wrap(steps)))
        (loop,) = walk_ops(m.operation, lambda n: n == "scf.forall")
        inside = walk_ops(loop, lambda n: n.startswith("linalg."))
        assert len(inside) <= 3 * (len(prods) + 1)  # (34 for 16 producers; 298 without)


def test_each_group_is_scheduled_in_a_function_of_its_own(monkeypatch):
    """The transform scripts of a row group see the group's ops only (a scratch function
    of the values they read), not the function around it: upstream's fusion prints each
    producer with the names of its whole top-level op, and fusing a training step's groups
    cost O(function) per producer (transformer step, 4 layers: 4.2 s -> 0.4 s)."""
    from mirax.lowering import fuse_reductions as fr
    from mirax.lowering.pass_base import walk_ops
    seen = []
    apply = fr._apply
    monkeypatch.setattr(fr, "_apply", lambda m, text: (seen.append(len(walk_ops(m, lambda n: True))),
                                                       apply(m, text))[1])

    def many(x):
        return tuple(softmax(x * (k + 1.0)) for k in range(6))
    x = A(np.random.default_rng(3).standard_normal((512, 1024)).astype(np.float32))
    text = mr.compile(many).lower(x).as_text("optimized")
    assert text.count("scf.forall ") >= 6
    one = mr.compile(softmax).lower(x).as_text("optimized")  # (a payload of one softmax)
    assert seen and max(seen) < 3 * one.count(" = ")
    for k, out in enumerate(mr.compile(many)(x)):
        np.testing.assert_allclose(np.asarray(out), np_softmax(np.asarray(x, np.float64) * (k + 1.0)),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("after", [False, True], ids=["read_before", "read_before_and_after"])
def test_producer_read_outside_its_row_loop(after):
    """A producer of a row group that an op before the loop reads (a matmul of the exps)
    keeps its original for that op; one read after the loop only gets the loop's rows."""
    def f(x, w):
        e = mr.exp(x - 1.0)
        y = e @ w
        s = e / mr.sum(e, axis=-1, keepdims=True)
        return (s, y, e * 2.0) if after else (s, y)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    w = rng.standard_normal((512, 64)).astype(np.float32)
    out = mr.compile(f)(A(x), A(w))
    e = np.exp(x.astype(np.float64) - 1)
    np.testing.assert_allclose(np.asarray(out[0]), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1]), e @ w, rtol=1e-4, atol=1e-3)
    if after:
        np.testing.assert_allclose(np.asarray(out[2]), 2 * e, rtol=1e-5)


@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_large_outputs_rows_stream_to_memory(name, aligned, monkeypatch):
    """Row loops of an output larger than the last-level cache (here lowered to 1 MiB)
    keep the row on the stack until its last pass, which writes the output with
    non-temporal stores when the row is 64-byte aligned (the pool's arrays are) and with
    the old loop when it is not; both right."""
    from mirax.runtime import buffers
    table = tuning.table()
    monkeypatch.setattr(tuning, "table", lambda: {**table, "elementwise": dict(table["elementwise"],
                                                                                 streaming_store_bytes=1 << 20)})
    monkeypatch.setenv("MIRAX_TEST_STREAMED_ROWS", "1")  # (a kernel of its own in the caches)
    if not aligned:  # the output 16 bytes past a line, as numpy's large arrays are
        monkeypatch.setattr(buffers, "_aligned", lambda raw, nbytes, dtype, shape: raw[
            (16 - raw.ctypes.data) % 64:][:nbytes].view(dtype).reshape(shape))
    fun, ref = KERNELS[name]
    x = np.random.default_rng(11).standard_normal((512, 4096)).astype(np.float32) * 3
    out = mr.compile(fun)(A(x))
    assert (np.asarray(out).ctypes.data % 64 == 0) == aligned
    np.testing.assert_allclose(np.asarray(out), ref(x.astype(np.float64)), rtol=2e-5, atol=1e-5)
    assert "nontemporal" in mr.compile(fun).lower(A(x)).as_text("llvm")


def test_rowwise_3d_rows_are_all_leading_dims():
    """softmax over the last axis of a 3-d array: one iteration of the row loop a row (both
    leading dims), vectorized and prefetched as in 2-d."""
    text = _stage(softmax, (8, 32, 1024), "optimized")
    assert re.search(r"scf\.forall \(%\w+, %\w+\) in \(8, 32\)", text), text
    assert text.count(f"-> (vector<1x1x{WIDTH}xf32>)") == 3  # (a sum, then the max and sum on the branch)
    assert "llvm.intr.prefetch" in _stage(softmax, (8, 32, 1024), "llvm")


def test_rowwise_writes_in_place():
    """softmax's exp is written into the output's row and scaled there: no row copy, no
    buffer allocated a row."""
    text = _stage(softmax, (64, 4096), "llvm")
    assert "memcpy" not in text and "@malloc" not in text


def test_softmax_divides_once_a_row():
    """mr.softmax scales the exps by the reciprocal of their sum, as MLX's kernels do: the
    one division of a row is outside its column loops (a vector division a chunk was an
    eighth of a 4096-wide softmax on AVX2)."""
    text = _stage(softmax, (64, 4096), "optimized")
    body = text.split("scf.forall ")[1].split("scf.forall.in_parallel")[0]
    loops = re.findall(r"scf\.for .*?\n(.*?)\n\s*\}", body, re.S)
    assert loops and not any("arith.divf" in loop for loop in loops), body
    assert "arith.divf" in body


@pytest.mark.parametrize("cols", [4100, 2 * WIDTH + 3])
def test_rowwise_peeled_chunks_stay_on_the_stack(cols):
    text = _stage(softmax, (max(16, 70000 // cols), cols), "llvm")
    assert "@malloc" not in text
    assert "llvm.intr.prefetch" in text


@pytest.mark.skipif("avx512f" not in host().features, reason="vscalefps: AVX-512 hosts only")
def test_rowwise_exp_scales_with_scalef_on_avx512():
    """The vectorized exps of a row loop scale by 2^m with AVX-512's scalef on the float m
    (one vscalefps a register, no int-to-float conversion); a row whose vectors are not
    whole registers (the 4 columns past 4096's chunks) with llvm.ldexp."""
    text = _stage(softmax, (64, 4096), "llvm")
    assert "llvm.x86.avx512.mask.scalef.ps.512" in text and "llvm.ldexp" not in text
    text = _stage(softmax, (16, 4100), "llvm")
    assert "llvm.x86.avx512.mask.scalef.ps.512" in text
    assert re.search(r"llvm.ldexp.*vector<4xf32>", text)


def test_logsumexp_sums_exps_by_vreduceps_on_avx512():
    """On AVX-512 hosts logsumexp's exps, which it only sums, are 2^t by vreduceps and
    vscalefps (approx.reduced_exps); softmax's, which it writes, keep the Cody-Waite form."""
    if not {"avx512f", "avx512dq"} <= host().features:
        pytest.skip("AVX-512 DQ hosts only")
    assert "llvm.x86.avx512.mask.reduce.ps.512" in _stage(logsumexp, (64, 4096), "llvm")
    assert "reduce.ps" not in _stage(softmax, (64, 4096), "llvm")


@pytest.mark.parametrize("scale, offset", [(1, 0), (30, 0), (10, 1000), (10, -1000), (0.01, 50)])
def test_logsumexp_of_wide_and_offset_rows(scale, offset):
    """Rows spread over tens (exps from 2^-100 to 2^100 of the first chunk's) or far from 0:
    within a few float32 roundings of the result in float64 (every host: the summed exps'
    t = x log2(e) is rounded, on AVX-512 and on the other hosts' fast branch, a relative
    error |t| 2^-24 of the larger terms, about the log's own rounding)."""
    x = (np.random.default_rng(12).standard_normal((64, 4096)) * scale + offset).astype(np.float32)
    got = np.asarray(mr.compile(logsumexp)(A(x))).astype(np.float64)
    want = np_logsumexp(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (np.abs(got - want) <= 4 * ulp).all(), np.max(np.abs(got - want) / ulp)


def test_rowwise_exp_bit_identical_to_elementwise_exp():
    """A row loop's exp gives the bits of the elementwise kernel's exp (the same polynomial,
    vectorized by LLVM) for every input: without ldexp (AVX2, NEON) its chunks whose lanes
    all have |x| < 86 skip the clamp and scale by 2^m as an integer add to the exponent
    field (approx.split_exp_range); a chunk with a value past that, a NaN or an infinity
    takes the full path."""
    def exp_times_max(x):
        return mr.exp(x) * mr.max(x, axis=-1, keepdims=True)
    x = np.random.default_rng(6).standard_normal((64, 4096)).astype(np.float32)
    x[1, :2] = [85.99, -85.99]              # both fast: m = +-124, the extreme exponents
    x[1, 40:42] = [-0.3466, 0.3466]          # fast: m = 0 with y just under 1 and just over
    x[2, 3], x[3, 40] = 86.0, 88.5           # slow: near the overflow
    x[4, 5:8] = [-100, -104, -150]           # slow: subnormal results, then 0
    x[5, 9] = 89.0                           # overflows to inf
    x[6, 10:12] = [np.nan, np.inf]           # a NaN and an inf in one chunk
    x[7, 12:14] = [np.inf, -np.inf]
    x[8, -1] = -87.2                         # in the last chunk
    compiled = mr.compile(exp_times_max)
    text = compiled.lower(A(x)).as_text("llvm")
    if "avx512f" not in host().features:
        assert "1118568448" in text  # the bits of 86.0: the fast-path test
    got = np.asarray(compiled(A(x)))
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.asarray(mr.compile(mr.exp)(A(x)))
        want = e * x.max(-1, keepdims=True)
    np.testing.assert_array_equal(got, want)
    assert e[7, 12] == e[6, 11] == e[5, 9] == np.inf and e[7, 13] == e[4, 7] == 0 and np.isnan(e[6, 10])
    assert np.isfinite(e[:5]).all() and 0 < e[4, 5] < np.finfo(np.float32).tiny


FIRST_COMPILE = r"""
import sys
import numpy as np
import mirax as mr
x = mr.array(np.linspace(-3, 3, 64 * 4096, dtype=np.float32).reshape(64, 4096))
y = mr.compile(lambda x: mr.softmax(x, axis=-1))(x)
mr.eval(y)
assert abs(float(y.sum()) - 64) < 1e-2
print("mlir.dialects.llvm" in sys.modules)
"""


def test_first_compile_does_not_import_the_llvm_dialect_module(tmp_path):
    """The passes after the ldexp rewrite (early dealloc, kernel outlining) look at every
    op; wrapping them in OpViews would import mlir.dialects.llvm at the first llvm op
    (~40 ms of a fresh process's first compile)."""
    env = dict(os.environ, MIRAX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", FIRST_COMPILE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


FIRST_GELU = r"""
import math, sys
import numpy as np
import mirax as mr
assert "mlir.dialects.linalg" not in sys.modules
x = mr.array(np.linspace(-3, 3, 32 * 4096, dtype=np.float32).reshape(32, 4096))
y = mr.compile(lambda x: x * (1 + mr.erf(x / math.sqrt(2))) / 2)(x)
mr.eval(y)
print(" ".join(m for m in ("mlir.dialects.transform", "mlir.dialects.vector", "mlir.dialects.affine",
                           "mlir.dialects.linalg") if m in sys.modules))
"""


def test_first_compile_imports_no_dialect_package_it_does_not_use(tmp_path):
    """A gelu's first compile runs transform scripts through the interpreter's native module
    (the `mlir.dialects.transform` package is ~4 ms to import, for op classes the text
    scripts never use), imports `mlir.dialects.vector` only where it builds vector ops
    (~3 ms; AVX2 hosts pin gelu's constants with vector ops) and lists a row loop's ops
    without OpViews (an `affine.apply` among them imported `mlir.dialects.affine`, ~1.7 ms).
    Neither `import mirax` nor the compile imports `mlir.dialects.linalg` (its OpDSL
    definitions, 60-75 ms: the bindings find dialect/bindings.py's light module first)."""
    env = dict(os.environ, MIRAX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", FIRST_GELU], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    imported = out.stdout.split()
    assert "mlir.dialects.transform" not in imported and "mlir.dialects.linalg" not in imported
    if "avx512f" in host().features:
        assert "mlir.dialects.vector" not in imported and "mlir.dialects.affine" not in imported


def test_rowwise_prefetches_next_rows():
    text = _stage(logsumexp, (64, 4096), "llvm")
    pf = re.findall(r"llvm\.intr\.prefetch.*rw = (\d)", text)
    assert pf and set(pf) == {"0"}  # the input only (logsumexp writes one value a row)
    assert len(pf) == WIDTH * 4 // max(host().line, host().vector_bits // 8)  # one a cache line of the chunk
    text = _stage(softmax, (64, 4096), "llvm")
    assert set(re.findall(r"llvm\.intr\.prefetch.*rw = (\d)", text)) == {"0", "1"}  # the output for writing


# ---- full reductions: rows, then the row results (dialect/reduction.py) -----------------

@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("shape", [(512, 512), (3 * 65536,), (4, 64, 1024)])
def test_full_reductions_match_numpy(op, shape):
    x = np.random.default_rng(3).uniform(0.999, 1.001, shape).astype(np.float32)
    got = np.asarray(mr.compile(lambda v: getattr(mr, op)(v))(mr.array(x)))
    want = getattr(np, op)(x.astype(np.float64))
    # (a float32 product of 2^18 factors drifts by ~1e-4 in any order: numpy's too)
    np.testing.assert_allclose(got, want, rtol=3e-4 if op == "prod" else 1e-5)
    kept = np.asarray(mr.compile(lambda v: getattr(mr, op)(v, keepdims=True))(mr.array(x)))
    assert kept.shape == (1,) * len(shape)


def test_full_reductions_keep_nan_ints_and_f64():
    x = np.random.default_rng(4).standard_normal((512, 512)).astype(np.float32)
    x[300, 7] = np.nan
    assert np.isnan(np.asarray(mr.compile(lambda v: mr.max(v))(mr.array(x))))
    assert np.isnan(np.asarray(mr.compile(lambda v: mr.sum(v))(mr.array(x))))
    i = np.random.default_rng(5).integers(-1000, 1000, (256, 1024)).astype(np.int32)
    assert int(np.asarray(mr.compile(lambda v: mr.sum(v))(mr.array(i)))) == int(i.sum())
    assert int(np.asarray(mr.compile(lambda v: mr.min(v))(mr.array(i)))) == int(i.min())
    d = np.random.default_rng(6).standard_normal((1024, 256))
    np.testing.assert_allclose(np.asarray(mr.compile(lambda v: mr.sum(v * v))(mr.array(d, mr.float64))), (d * d).sum(), rtol=1e-12)
    p = np.random.default_rng(7).standard_normal(65537).astype(np.float32)  # prime: one reduction
    np.testing.assert_allclose(np.asarray(mr.compile(lambda v: mr.sum(v))(mr.array(p))), p.astype(np.float64).sum(),
                               rtol=1e-4, atol=1e-3)


def test_full_reduction_runs_as_vectorized_rows():
    """sum(x * x) over a whole 1024 x 1024 array: one row loop (the square fused into it,
    rows vectorized with a reassociated tree at the end), then a reduction of the row sums,
    where it was one serial chain of scalar adds (8x slower than the row sums)."""
    text = _stage(lambda v: mr.sum(v * v), (1024, 1024), "optimized")
    assert text.count("scf.forall ") == 1
    body = text.split("scf.forall ")[1].split("scf.forall.in_parallel")[0]
    assert "linalg." not in body and "arith.mulf" in body
    assert re.search(r"scf\.for .*-> \(vector<1x\d+xf32>\)", body)
    assert "vector.reduction <add>" in body


def test_full_variance_runs_as_two_row_loops():
    """var over a whole array: its mean, a one-element value, is read by the second pass's
    rows as a scalar (no group edge), and the two row sums' zero fills, merged by CSE, are
    one each again: both passes are vectorized row loops (21.5 -> 2.7 ms for 4096^2 on an
    Intel AVX-512 host), with numpy's result."""
    text = _stage(lambda v: mr.var(v), (1024, 1024), "optimized")
    assert text.count("scf.forall ") == 2 and text.count("vector.reduction <add>") == 2
    x = np.random.default_rng(8).standard_normal((1024, 1024)).astype(np.float32) + 3
    np.testing.assert_allclose(np.asarray(mr.compile(lambda v: mr.var(v))(mr.array(x))), x.astype(np.float64).var(),
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(mr.compile(lambda v: mr.std(v, ddof=1))(mr.array(x))),
                               x.astype(np.float64).std(ddof=1), rtol=1e-5)


@pytest.mark.parametrize("shape", [(300, 700), (64, 4096), (5, 9, 1000)])
def test_argmax_argmin_as_two_row_reductions(shape):
    """argmax/argmin on the CPU: the rows' max (min), then the first index equal to it;
    numpy's first occurrence, a NaN's first index, ties, inf, every axis, compiled and eager."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[(2,) * len(shape)] = np.nan
    x[(4,) + (7,) * (len(shape) - 1)] = np.nan
    x[1] = 3.0
    x[(3,) + (8,) * (len(shape) - 1)] = np.inf
    for ax in range(len(shape)):
        for f, nf in ((mr.argmax, np.argmax), (mr.argmin, np.argmin)):
            want = nf(x, axis=ax)
            np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: f(v, axis=ax))(mr.array(x))), want)
            np.testing.assert_array_equal(np.asarray(f(mr.array(x), axis=ax)), want)
    i = np.random.default_rng(1).integers(0, 5, (200, 333)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda v: mr.argmax(v, axis=1))(mr.array(i))), i.argmax(1))


@pytest.mark.parametrize("n", [1 << 16, 3 * 4096 * 5, 4096 * 4096 // 16])
def test_flat_argmax_as_rows_then_one(n):
    """argmax/argmin of a whole array (axis=None) on the CPU: the argmax of each row of a
    (rows, cols) view, then the first row holding the best of those: numpy's first
    occurrence (ties across rows, a NaN, an inf), compiled and eager, floats and ints."""
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    cases = [x]
    t = x.copy()
    t[[n // 3, n // 7, n - 1]] = 9.0      # ties in different rows: the first wins
    cases.append(t)
    t = t.copy()
    t[[n // 2, n // 5]] = np.nan          # the first NaN
    cases.append(t)
    t = x.copy()
    t[n - 2] = np.inf
    t[5] = -np.inf
    cases.append(t)
    cases.append(np.random.default_rng(8).integers(-3, 4, n).astype(np.int32))
    for v in cases:
        for f, nf in ((mr.argmax, np.argmax), (mr.argmin, np.argmin)):
            want = nf(v.reshape(-1, 8))  # (2-d: the path for a flattened array)
            got = mr.compile(lambda a: f(a))(mr.array(v.reshape(-1, 8)))
            assert int(np.asarray(got)) == want and np.asarray(got).dtype == np.uint32
            assert int(np.asarray(f(mr.array(v)))) == nf(v)
    kept = mr.compile(lambda a: mr.argmax(a, keepdims=True))(mr.array(cases[1].reshape(-1, 16)))
    assert np.asarray(kept).shape == (1, 1) and int(np.asarray(kept)[0, 0]) == np.argmax(cases[1])


def test_flat_argmax_runs_as_vectorized_rows():
    text = _stage(lambda v: mr.argmax(v), (4096 * 4096 // 16,), "optimized")
    assert text.count("scf.forall ") == 1 and "vector.transfer_read" in text


def test_identical_row_groups_share_one_schedule(monkeypatch):
    """Identical row groups (layer norms of one shape: a network's layers) are scheduled
    once; the others take a copy of the first's loop. (Here the second and third: the
    first reads the fill CSE left before it, the others private copies placed apart.) The
    kernels compute right and are those scheduled one by one."""
    from mlir import ir
    from mlir.passmanager import PassManager
    from mirax.lowering import fuse_reductions as fr
    from mirax.lowering.cpu_pipeline import MiraxCpuPipeline
    from mirax.runtime.context import context

    def three(a, b, c):
        return layer_norm(a), layer_norm(b), layer_norm(c)
    xs = [np.random.default_rng(k).standard_normal((64, 1030)).astype(np.float32) for k in range(3)]
    for got, x in zip(mr.compile(three)(*map(A, xs)), xs):
        np.testing.assert_allclose(np.asarray(got), np_layer_norm(x), atol=1e-4)
    linalg = mr.compile(three).lower(*map(A, xs)).as_text("linalg")
    applied = []
    real = fr._apply
    monkeypatch.setattr(fr, "_apply", lambda m, t: (applied.append(t), real(m, t))[1])
    texts, counts = {}, {}
    for reuse in ("0", "1"):
        monkeypatch.setenv("MIRAX_ROW_GROUP_REUSE", reuse)
        applied.clear()
        with context(), ir.Location.unknown():
            module = ir.Module.parse(linalg)
            pm = PassManager("builtin.module")
            MiraxCpuPipeline().add_tensor_passes(pm)
            pm.run(module.operation)
            texts[reuse] = module.operation.get_asm(enable_debug_info=False)
        counts[reuse] = len(applied)
    assert counts == {"0": 6, "1": 4}  # (fusion and vectorization a group; none for the third)
    assert texts["1"] == texts["0"] and texts["1"].count("scf.forall") >= 3
