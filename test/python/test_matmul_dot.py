"""Skinny products as dot products along K (lowering/matmul_dot.py): products a few
vectors wide at most, `x @ W.T` (W stored N x K) and `x @ w` (w stored K x N), against numpy."""
import re

import numpy as np
import pytest
from mlir import ir

from mirax.lowering import host_cpu, matmul_codegen as mc, matmul_dot, tuning
from mirax.tune import matmul_text

needs_openmp = pytest.mark.skipif(mc.openmp_library() is None, reason="no LLVM OpenMP runtime")
TRANSPOSED_B = mc.TRANSPOSED_B


def _t(*shape):
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def product_text(m, n, k, transposed=True, accumulate=False):
    """`@mm(A, B[, C]) = A @ B` (B stored N x K and read transposed, or K x N), from zeros
    (the tuner's text) or, `accumulate`, from C."""
    if not accumulate:
        return matmul_text(None, m, n, k, transpose_b=transposed)
    b = _t(n, k) if transposed else _t(k, n)
    maps = f"indexing_maps = {TRANSPOSED_B} " if transposed else ""
    return f"""
func.func @mm(%a: {_t(m, k)}, %b: {b}, %c: {_t(m, n)}) -> {_t(m, n)} attributes {{llvm.emit_c_interface}} {{
  %r = linalg.matmul {maps}ins(%a, %b : {_t(m, k)}, {b}) outs(%c : {_t(m, n)}) -> {_t(m, n)}
  return %r : {_t(m, n)}
}}"""


def rewritten(text, host=None):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        n = matmul_dot.dot_products(module, host=host)
        module.operation.verify()
        return n, str(module)


@pytest.mark.parametrize("lanes,registers,n,blocks", [
    (16, 32, 10, (4, 5)),   # AVX-512: 20 accumulators, 18 loads for 40 multiply-adds a step
    (8, 16, 10, (3, 3)),    # AVX2: 16 registers, chunks of 3 columns (the last one 1)
    (16, 32, 1, (8, 1)),    # a matrix-vector product: 8 rows of A a step
    (4, 32, 4, (5, 4)),     # NEON, 4 columns
    (16, 32, 16, (5, 4)),   # one whole vector of columns: 4 chunks of 4
])
def test_register_blocks_fill_the_registers(lanes, registers, n, blocks):
    mr, nr = matmul_dot.register_blocks(lanes, registers, n)
    assert (mr, nr) == blocks
    assert mr * nr + mr + nr <= registers - 1


def test_which_products_are_dot_products():
    """A few vectors of columns at most (one, or columns the outer products' tile would
    pad), K long enough for the lane sums, f32, B plain or transposed."""
    h = host_cpu.PRESETS["avx512"]
    assert rewritten(product_text(256, 10, 512), h)[0] == 1
    assert rewritten(product_text(256, 16, 512, transposed=False), h)[0] == 1
    assert rewritten(product_text(256, 40, 1024), h)[0] == 1         # 3 vectors, padded as tiles
    assert rewritten(product_text(256, 65, 1024), h)[0] == 0         # over MAX_VECTORS = 4
    assert rewritten(product_text(1536, 10, 32), h)[0] == 0          # K under 4 vectors
    assert rewritten(product_text(1536, 40, 128), h)[0] == 0         # K under 4 x 3 vectors
    assert rewritten(product_text(256, 10, 512).replace("f32", "f64"), h)[0] == 0
    with tuning.override(matmul_dot={"max_vectors": 0}):  # (off: the tiled products' tests)
        assert rewritten(product_text(256, 10, 512), h)[0] == 0
    avx2 = host_cpu.PRESETS["avx2"]
    assert rewritten(product_text(256, 10, 512), avx2)[0] == 1       # 2 AVX2 vectors, padded
    assert rewritten(product_text(256, 33, 1024), avx2)[0] == 0      # 5 AVX2 vectors
    # whole vectors the preset host's own tile pads (AVX-512's 32 columns: 48 -> 64), on
    # any host this runs on (an AVX2 process's 16-column tile divides 48: it said no)
    assert rewritten(product_text(1024, 48, 1024), h)[0] == 1


def test_dot_products_read_rows_along_k():
    """The loops as the module doc draws them: a forall over row blocks, 4 x 5 vector
    accumulators on AVX-512 (twice: 10 columns), lane sums, no matmul left; a K x N
    B transposed first."""
    _, text = rewritten(product_text(256, 10, 512), host_cpu.PRESETS["avx512"])
    assert "linalg.matmul" not in text and "scf.forall" in text
    assert text.count("vector.fma") == 2 * 4 * 5 + 2 * 5  # (4 rows a step, then the rest one at a time)
    assert "vector.reduction <add>" in text and "fastmath<reassoc>" in text
    assert "vector<16xf32>" in text
    _, text = rewritten(product_text(640, 6, 100, transposed=False), host_cpu.PRESETS["avx2"])
    assert "linalg.transpose" in text and "vector<8xf32>" in text
    # 100 = 12 * 8 + 4: one masked step at 96 (a read without in_bounds: padded with zeros)
    assert re.search(r"vector.transfer_read %\S+\[%\S+, %c96\], %\S+ : tensor<6x100xf32>", text)


@needs_openmp
@pytest.mark.parametrize("m,n,k,transposed,accumulate", [
    (256, 10, 512, True, False),   # an MLP's logits: x @ W.T
    (100, 3, 777, True, False),    # rows and K that fill no whole block or vector
    (370, 16, 64, False, False),   # B stored K x N, one whole vector of columns
    (300, 40, 256, True, False),   # columns in 8 chunks of 5 (AVX-512)
    (1536, 24, 256, False, False),  # a transformer's logits, longer K
    (2048, 48, 512, False, False),
    (1000, 1, 300, True, True),    # a matrix-vector product onto C
    (19, 7, 4096, False, True),
])
def test_dot_products_match_numpy(rng, m, n, k, transposed, accumulate):
    """Dot products where this host takes them (every one-vector case here), else the
    tiled products: numpy's values either way."""
    text = product_text(m, n, k, transposed, accumulate)
    if n <= host_cpu.host().f32_lanes:
        assert rewritten(text)[0] == 1
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    ref = a.astype(np.float64) @ (b.T if transposed else b).astype(np.float64)
    if accumulate:
        ref = ref + c  # (before the call: as with tiled products, C's argument is written in place)
    mm = mc.compile_standalone(text, "mm")
    out = np.full((m, n), np.nan, np.float32)  # every element must be written
    mm([a, b, c] if accumulate else [a, b], [out])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * np.sqrt(k) * np.abs(a).max() * np.abs(b).max())


@needs_openmp
def test_a_compiled_classifier_head_matches_numpy(rng):
    """`x @ w.T + b` through mr.compile (the product read as dot products, the bias a
    loop of its own) matches numpy."""
    import mirax as mr
    x = rng.standard_normal((64, 256), dtype=np.float32)
    w = rng.standard_normal((10, 256), dtype=np.float32)
    bias = rng.standard_normal((10,), dtype=np.float32)
    f = mr.compile(lambda x, w, b: x @ w.T + b)
    out = np.asarray(f(mr.array(x), mr.array(w), mr.array(bias)))
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T + bias, rtol=1e-4, atol=1e-4)
