"""Affine quantization (mr.quantize, dequantize, quantized_matmul, gather_qmm) against a
numpy model of MLX's CPU algorithm, bit for bit, plus values recorded from MLX 0.32.4
itself; then the quantized nn layers and nn.quantize."""
import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn

BITS = (2, 3, 4, 5, 6, 8)


# ---- a numpy model of MLX's affine quantization (mlx/backend/cpu/quantized.cpp) --------

def ref_quantize(w, group_size, bits):
    """Per group, in float32: the edge of larger magnitude is quantized exactly, values
    round half to even and clip to [0, 2**bits - 1]; element i of a row takes bits
    [i*bits, (i+1)*bits) of a little-endian bit stream of uint32 words."""
    w = np.asarray(w)
    n_bins = np.float32((1 << bits) - 1)
    g = w.reshape(-1, group_size).astype(np.float32)
    w_max, w_min = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    mask = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7))
    scale = np.where(mask, scale, -scale)
    edge = np.where(mask, w_min, w_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        q0 = np.rint(edge / scale)
        scale = np.where(q0 != 0, edge / q0, scale).astype(np.float32)
    bias = np.where(q0 == 0, np.float32(0), edge).astype(np.float32)
    q = np.clip(np.rint((g - bias) / scale), 0, n_bins).astype(np.uint64).reshape(w.shape[:-1] + (-1,))
    n = q.shape[-1]
    pos = np.arange(n * bits)
    stream = (q[..., pos // bits] >> (pos % bits).astype(np.uint64)) & 1
    words = stream.reshape(q.shape[:-1] + (n * bits // 32, 32))
    packed = (words << np.arange(32, dtype=np.uint64)).sum(-1).astype(np.uint32)
    gshape = w.shape[:-1] + (w.shape[-1] // group_size,)
    return packed, scale.reshape(gshape).astype(w.dtype), bias.reshape(gshape).astype(w.dtype)


def ref_unpack(wq, bits):
    wq = np.asarray(wq).astype(np.uint64)
    pos = np.arange(wq.shape[-1] * 32)
    stream = (wq[..., pos // 32] >> (pos % 32).astype(np.uint64)) & 1
    el = stream.reshape(wq.shape[:-1] + (-1, bits))
    return (el << np.arange(bits, dtype=np.uint64)).sum(-1)


def ref_dequantize(wq, scales, biases, group_size, bits):
    """q * scale + bias in the scales' dtype, as MLX's dequantize."""
    d = np.result_type(scales.dtype, biases.dtype)
    q = ref_unpack(wq, bits).astype(d).reshape(scales.shape + (group_size,))
    out = q * scales[..., None].astype(d) + biases[..., None].astype(d)
    return out.reshape(np.shape(wq)[:-1] + (-1,))


def _np(x):
    return np.array(x)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ---- quantize / dequantize ------------------------------------------------------------

@pytest.mark.parametrize("bits,group_size", [(b, 64) for b in BITS] + [(4, 32), (3, 128)])
def test_quantize_matches_mlx_algorithm_bit_for_bit(bits, group_size, rng):
    w = rng.normal(size=(3, 256)).astype(np.float32)
    wq, scales, biases = mr.quantize(mr.array(w), group_size=group_size, bits=bits)
    rq, rs, rb = ref_quantize(w, group_size, bits)
    assert wq.dtype == mr.uint32 and wq.shape == (3, 256 * bits // 32)
    assert scales.dtype == mr.float32 and scales.shape == (3, 256 // group_size)
    np.testing.assert_array_equal(_np(wq), rq)
    np.testing.assert_array_equal(_np(scales), rs)
    np.testing.assert_array_equal(_np(biases), rb)
    w_hat = mr.dequantize(wq, scales, biases, group_size=group_size, bits=bits)
    np.testing.assert_array_equal(_np(w_hat), ref_dequantize(rq, rs, rb, group_size, bits))
    # within half a step, except past the far edge, which the nudged scale may leave
    # uncovered by less than one unnudged step (n_bins + 1) / n_bins times the scale
    step = np.repeat(np.abs(rs), group_size, axis=-1)
    err = np.abs(_np(w_hat) - w)
    assert np.all(err <= step * (1 << bits) / ((1 << bits) - 1) * (1 + 1e-5))
    assert np.mean(err <= 0.5 * step * (1 + 1e-5)) > 0.9


# Recorded from mlx 0.32.4 (CPU): mx.quantize(w, 32, bits) of the w built in the test.
MLX_WORDS = {
    2: [4183554646, 1103090799, 469321470, 3218108388],
    3: [2782573724, 2503472546, 1679409068, 2871344052, 4284024285, 2080032814],
    4: [3432469608, 3663934859, 3055634638, 1627622910, 574074041, 326818966, 649976402, 1810801936],
    5: [651470192, 1931876046, 3273446682, 3718974003, 1484806119, 250275603, 1844087849, 1432621469,
        1612935134, 1849547564],
    6: [3679266337, 946720537, 3668348465, 1178471545, 1341960578, 1548749695, 3719515303, 1784163443,
        281505507, 1004975624, 1904223692, 1864351157],
    8: [1313431686, 3502677871, 827295159, 3685312826, 1048757736, 3009619480, 2144600050, 1578303532,
        3033910688, 756956280, 3822823523, 254834107, 3920650529, 611435249, 3093239552, 1858732023],
}
MLX_SCALES = {2: [-0.590932309627533, -1.0394277572631836], 4: [-0.14773307740688324, -0.2598569393157959],
              8: [-0.008819885551929474, -0.014537450857460499]}


def test_quantize_matches_values_recorded_from_mlx():
    w = (np.sin(np.arange(64, dtype=np.float32) * 0.7) * np.linspace(0.5, 2.0, 64, dtype=np.float32))
    w = w.reshape(1, 64).astype(np.float32)
    w[0, 32:] += 0.25
    for bits, words in MLX_WORDS.items():
        wq, scales, biases = mr.quantize(mr.array(w), 32, bits)
        np.testing.assert_array_equal(_np(wq)[0], np.array(words, np.uint32))
        np.testing.assert_array_equal(_np(biases)[0], np.array([1.181864619255066, 2.078855514526367], np.float32))
        if bits in MLX_SCALES:
            np.testing.assert_array_equal(_np(scales)[0], np.array(MLX_SCALES[bits], np.float32))
        np.testing.assert_array_equal(ref_quantize(w, 32, bits)[0][0], np.array(words, np.uint32))


def test_quantize_edge_groups():
    """Constant groups (no spread) and all-zero groups come back exactly; a group of
    negatives quantizes its minimum exactly."""
    w = np.concatenate([np.full((1, 32), 0.7, np.float32), np.zeros((1, 32), np.float32),
                        -np.linspace(0.1, 3.0, 32, dtype=np.float32)[None]], axis=1)
    wq, s, b = mr.quantize(mr.array(w), 32, 4)
    rq, rs, rb = ref_quantize(w, 32, 4)
    np.testing.assert_array_equal(_np(wq), rq)
    np.testing.assert_array_equal(_np(s), rs)
    np.testing.assert_array_equal(_np(b), rb)
    w_hat = _np(mr.dequantize(wq, s, b, 32, 4))
    np.testing.assert_array_equal(w_hat[0, :64], w[0, :64])
    assert w_hat[0, 64:].min() == np.float32(-3.0)
    assert _np(b)[0, 1] == 0 and _np(b)[0, 2] == np.float32(-3.0)


def test_quantize_half_precision_and_batch(rng):
    w = rng.normal(size=(2, 3, 64)).astype(np.float16)
    wq, s, b = mr.quantize(mr.array(w), 64, 4)
    rq, rs, rb = ref_quantize(w, 64, 4)
    assert wq.shape == (2, 3, 8) and s.dtype == mr.float16 and b.dtype == mr.float16 and s.shape == (2, 3, 1)
    np.testing.assert_array_equal(_np(wq), rq)
    np.testing.assert_array_equal(_np(s), rs)
    np.testing.assert_array_equal(_np(b), rb)
    w_hat = mr.dequantize(wq, s, b, 64, 4)
    assert w_hat.dtype == mr.float16
    np.testing.assert_array_equal(_np(w_hat), ref_dequantize(rq, rs, rb, 64, 4))
    assert mr.dequantize(wq, s, b, 64, 4, dtype=mr.float32).dtype == mr.float32
    bq, bs, _ = mr.quantize(mr.array(w).astype(mr.bfloat16), 64, 4)
    assert bs.dtype == mr.bfloat16 and bq.dtype == mr.uint32


def test_quantize_defaults_and_stream():
    w = mr.array(np.linspace(-1, 1, 256, dtype=np.float32).reshape(2, 128))
    wq, s, b = mr.quantize(w)  # group_size 64, bits 4
    assert wq.shape == (2, 16) and s.shape == (2, 2)
    np.testing.assert_array_equal(_np(mr.dequantize(wq, s, b, stream=mr.cpu)), _np(mr.dequantize(wq, s, b, 64, 4)))


@pytest.mark.parametrize("call,message", [
    (lambda w: mr.quantize(w, 48, 4), "divisible by the quantization group size 48"),
    (lambda w: mr.quantize(w[:, :96], 96, 4), "group size 96 is not supported"),
    (lambda w: mr.quantize(w, 64, 7), "number of bits 7 is not supported"),
    (lambda w: mr.quantize(w, mode="int4"), "Invalid quantization mode 'int4'"),
    (lambda w: mr.quantize(w, 64, mode="mxfp4"), "mxfp4 quantization requires group size 32 but got 64"),
    (lambda w: mr.quantize(w.astype(mr.int32)), "Only real floating types can be quantized"),
    (lambda w: mr.quantize(w[0]), "at least 2 dimensions"),
    (lambda w: mr.quantize(w, global_scale=mr.array(1.0)), "Global scale"),
])
def test_quantize_errors(call, message):
    w = mr.array(np.ones((2, 128), np.float32))
    with pytest.raises(ValueError, match=message):
        call(w)


def test_dequantize_errors():
    wq, s, b = mr.quantize(mr.array(np.ones((2, 128), np.float32)), 64, 4)
    with pytest.raises(ValueError, match="should be uint32"):
        mr.dequantize(wq.astype(mr.int32), s, b, 64, 4)
    with pytest.raises(ValueError, match="Biases must be provided"):
        mr.dequantize(wq, s, None, 64, 4)
    with pytest.raises(ValueError, match="incompatible based on bits and group_size"):
        mr.dequantize(wq, s, b, 32, 4)
    with pytest.raises(ValueError, match="same shape"):
        mr.dequantize(wq, s, b[:, :1], 64, 4)
    with pytest.raises(ValueError, match="Only real floating types"):
        mr.dequantize(wq, s, b, 64, 4, dtype=mr.int32)


# ---- quantized_matmul / gather_qmm -----------------------------------------------------

def _quantized(rng, shape, group_size=32, bits=4):
    w = rng.normal(size=shape).astype(np.float32)
    wq, s, b = mr.quantize(mr.array(w), group_size, bits)
    return wq, s, b, ref_dequantize(*ref_quantize(w, group_size, bits), group_size, bits)


@pytest.mark.parametrize("bits", [3, 4])
def test_quantized_matmul_against_numpy(bits, rng):
    wq, s, b, w_hat = _quantized(rng, (16, 64), bits=bits)
    x = rng.normal(size=(2, 3, 64)).astype(np.float32)
    y = mr.quantized_matmul(mr.array(x), wq, s, b, transpose=True, group_size=32, bits=bits)
    assert y.shape == (2, 3, 16) and y.dtype == mr.float32
    np.testing.assert_allclose(_np(y), x @ w_hat.T, rtol=1e-5, atol=1e-5)
    xt = rng.normal(size=(3, 16)).astype(np.float32)
    yt = mr.quantized_matmul(mr.array(xt), wq, s, b, transpose=False, group_size=32, bits=bits)
    np.testing.assert_allclose(_np(yt), xt @ w_hat, rtol=1e-5, atol=1e-5)


def test_quantized_matmul_dtypes_and_errors(rng):
    wq, s, b, _ = _quantized(rng, (8, 32))
    x16 = mr.array(rng.normal(size=(2, 32)).astype(np.float16))
    assert mr.quantized_matmul(x16, wq, s, b, group_size=32).dtype == mr.float32
    assert mr.quantized_matmul(x16, wq, s.astype(mr.float16), b.astype(mr.float16), group_size=32).dtype == mr.float16
    with pytest.raises(ValueError, match="does not match the expanded quantized matrix"):
        mr.quantized_matmul(mr.ones((2, 16)), wq, s, b, group_size=32)
    assert mr.quantized_matmul(mr.ones((2, 32), dtype=mr.int32), wq, s, b, group_size=32).dtype == mr.float32
    with pytest.raises(ValueError, match="Only real floating types"):
        mr.quantized_matmul(x16, wq, s.astype(mr.int32), b.astype(mr.int32), group_size=32)


def test_quantized_matmul_grad(rng):
    wq, s, b, w_hat = _quantized(rng, (8, 64))
    x = rng.normal(size=(3, 64)).astype(np.float32)
    c = rng.normal(size=(3, 8)).astype(np.float32)

    def f(x, s, b):
        return (mr.quantized_matmul(x, wq, s, b, group_size=32) * mr.array(c)).sum()
    gx, gs, gb = mr.grad(f, argnums=(0, 1, 2))(mr.array(x), s, b)
    np.testing.assert_allclose(_np(gx), c @ w_hat, rtol=1e-5, atol=1e-5)
    dw = (c.T @ x).reshape(8, 2, 32)  # the cotangent of w_hat, by group
    q = ref_unpack(_np(wq), 4).astype(np.float32).reshape(8, 2, 32)
    np.testing.assert_allclose(_np(gb), dw.sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(gs), (dw * q).sum(-1), rtol=1e-5, atol=1e-4)
    with pytest.raises(TypeError, match="uint32"):  # the packed weights have no gradient
        mr.grad(lambda w: mr.quantized_matmul(mr.array(x), w, s, b, group_size=32).sum())(wq)


def test_quantized_ops_compile_and_vmap(rng):
    w = rng.normal(size=(2, 8, 64)).astype(np.float32)
    rq = [ref_quantize(w[i], 32, 4) for i in range(2)]
    cq = mr.compile(lambda w: mr.quantize(w, 32, 4))(mr.array(w[0]))
    for got, want in zip(cq, rq[0]):
        np.testing.assert_array_equal(_np(got), want)
    vq = mr.vmap(lambda w: mr.quantize(w, 32, 4))(mr.array(w))
    for j in range(3):
        np.testing.assert_array_equal(_np(vq[j]), np.stack([rq[0][j], rq[1][j]]))
    wq, s, b = (mr.array(a) for a in rq[0])
    w_hat = ref_dequantize(*rq[0], 32, 4)
    np.testing.assert_array_equal(_np(mr.compile(lambda a, s, b: mr.dequantize(a, s, b, 32, 4))(wq, s, b)), w_hat)
    x = rng.normal(size=(3, 64)).astype(np.float32)
    qmm = mr.compile(lambda x: mr.quantized_matmul(x, wq, s, b, group_size=32, bits=4))
    np.testing.assert_allclose(_np(qmm(mr.array(x))), x @ w_hat.T, rtol=1e-5, atol=1e-5)
    vx = mr.vmap(lambda x: mr.quantized_matmul(x, wq, s, b, group_size=32, bits=4))(mr.array(x))
    np.testing.assert_allclose(_np(vx), x @ w_hat.T, rtol=1e-5, atol=1e-5)


def test_gather_qmm_against_numpy(rng):
    wq, s, b, w_hat = _quantized(rng, (3, 8, 64))
    x = rng.normal(size=(2, 1, 5, 64)).astype(np.float32)
    li = np.array([[0], [1]], np.int32)
    ri = np.array([[2, 0, 1], [1, 1, 0]], np.int32)
    xf = x.reshape(-1, 5, 64)
    pairs = list(zip(np.broadcast_to(li, (2, 3)).ravel(), ri.ravel()))
    want = np.stack([xf[i] @ w_hat[j].T for i, j in pairs]).reshape(2, 3, 5, 8)

    def f(x):
        return mr.gather_qmm(x, wq, s, b, lhs_indices=mr.array(li), rhs_indices=mr.array(ri), group_size=32)
    np.testing.assert_allclose(_np(f(mr.array(x))), want, rtol=1e-5, atol=1e-5)
    g = _np(mr.grad(lambda x: f(x).sum())(mr.array(x))).reshape(-1, 5, 64)
    g_want = np.zeros_like(xf)
    for i, j in pairs:
        g_want[i] += np.ones((5, 8), np.float32) @ w_hat[j]
    np.testing.assert_allclose(g, g_want, rtol=1e-5, atol=1e-5)
    # without indices it is quantized_matmul; rhs alone pairs every x batch with one expert
    y = mr.gather_qmm(mr.array(x), wq, s, b, group_size=32)
    np.testing.assert_allclose(_np(y), x @ np.swapaxes(w_hat, -1, -2), rtol=1e-5, atol=1e-5)
    y = mr.gather_qmm(mr.array(x), wq, s, b, rhs_indices=mr.array(np.array([2], np.int32)), group_size=32,
                      sorted_indices=True)
    np.testing.assert_allclose(_np(y), x @ w_hat[2].T, rtol=1e-5, atol=1e-5)


def test_quantized_ops_on_gpu(rng):
    w = rng.normal(size=(8, 64)).astype(np.float32)
    x = rng.normal(size=(2, 64)).astype(np.float32)
    rq, rs, rb = ref_quantize(w, 32, 3)
    w_hat = ref_dequantize(rq, rs, rb, 32, 3)
    with mr.stream(mr.gpu):
        wq, s, b = mr.quantize(mr.array(w), 32, 3)
        y = mr.quantized_matmul(mr.array(x), wq, s, b, group_size=32, bits=3)
        w_back = mr.dequantize(wq, s, b, 32, 3)
    np.testing.assert_array_equal(_np(wq), rq)
    np.testing.assert_array_equal(_np(s), rs)
    np.testing.assert_allclose(_np(w_back), w_hat, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_np(y), x @ w_hat.T, rtol=1e-5, atol=1e-5)


# ---- nn ------------------------------------------------------------------------------

def test_quantized_linear_from_linear(rng):
    lin = nn.Linear(64, 8)
    ql = lin.to_quantized(group_size=32, bits=8)
    assert isinstance(ql, nn.QuantizedLinear) and (ql.group_size, ql.bits, ql.mode) == (32, 8, "affine")
    assert sorted(ql.parameters()) == ["bias", "biases", "scales", "weight"]
    assert ql.weight.dtype == mr.uint32 and ql.weight.shape == (8, 16) and ql.scales.shape == (8, 2)
    assert list(ql.trainable_parameters()) == ["bias"]  # MLX: the taken-over bias stays trainable
    w = _np(lin.weight)
    w_hat = ref_dequantize(*ref_quantize(w, 32, 8), 32, 8)
    x = rng.normal(size=(3, 64)).astype(np.float32)
    np.testing.assert_allclose(_np(ql(mr.array(x))), x @ w_hat.T + _np(lin.bias), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(ql(mr.array(x))), _np(lin(mr.array(x))), atol=0.05)
    assert "input_dims=64, output_dims=8, bias=True, group_size=32, bits=8" in repr(ql)
    fresh = nn.QuantizedLinear(64, 4, bias=False)
    assert (fresh.group_size, fresh.bits) == (64, 4) and "bias" not in fresh
    assert list(fresh.trainable_parameters()) == [] and fresh(mr.ones((1, 64))).shape == (1, 4)
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        nn.QuantizedLinear(64, 4, mode="int8")
    with pytest.raises(ValueError, match="Quantized activations"):
        lin.to_quantized(quantize_input=True)


def test_quantized_embedding(rng):
    emb = nn.Embedding(10, 64)
    qe = emb.to_quantized(group_size=32, bits=4)
    assert isinstance(qe, nn.QuantizedEmbedding) and qe.weight.shape == (10, 8)
    assert sorted(qe.parameters()) == ["biases", "scales", "weight"] and list(qe.trainable_parameters()) == []
    table = ref_dequantize(*ref_quantize(_np(emb.weight), 32, 4), 32, 4)
    idx = np.array([[3, 0], [9, 3]])
    np.testing.assert_array_equal(_np(qe(mr.array(idx))), table[idx])
    x = rng.normal(size=(2, 64)).astype(np.float32)
    np.testing.assert_allclose(_np(qe.as_linear(mr.array(x))), x @ table.T, rtol=1e-5, atol=1e-5)
    assert "10, 64, group_size=32, bits=4, mode=affine" in repr(qe)
    with pytest.raises(ValueError, match="Quantized input"):
        emb.to_quantized(quantize_input=True)


def test_nn_quantize_model():
    model = nn.Sequential(nn.Embedding(16, 64), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    nn.quantize(model, group_size=32, bits=4)
    kinds = [type(m).__name__ for m in model.layers]
    assert kinds == ["QuantizedEmbedding", "QuantizedLinear", "ReLU", "QuantizedLinear"]
    assert model.layers[1].bits == 4 and model.layers[1].group_size == 32
    assert model(mr.array([1, 2])).shape == (2, 64)

    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Embedding(16, 64))
    seen = []

    def predicate(path, m):
        seen.append(path)
        if path == "layers.0":
            return {"group_size": 64, "bits": 8}
        return isinstance(m, nn.Linear)
    nn.quantize(model, class_predicate=predicate)
    assert seen == ["layers.0", "layers.1", "layers.2"]
    assert [type(m).__name__ for m in model.layers] == ["QuantizedLinear", "QuantizedLinear", "Embedding"]
    assert (model.layers[0].bits, model.layers[1].bits) == (8, 4)
    with pytest.raises(ValueError, match="Unable to quantize"):
        nn.quantize(nn.Sequential(nn.ReLU()), class_predicate=lambda p, m: True)
    with pytest.raises(ValueError, match="must return a bool or a dict"):
        nn.quantize(nn.Sequential(nn.Linear(64, 64)), class_predicate=lambda p, m: 1)
