"""MLX names of mlx.core beyond the ops tables: view, as_strided, depends, hadamard_transform,
fp8, print options, mirax.fast, the further stream constructors, export/import and DOT."""
import io
import math
import os

import numpy as np
import pytest

import mirax as mr


# ---- view ----------------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "uint8"), ("float32", "int16"),
                                     ("int16", "uint8"), ("uint8", "float32"), ("uint8", "int64"),
                                     ("float32", "float64"), ("float64", "float32"), ("int32", "float16"),
                                     ("uint8", "complex64"), ("complex64", "uint16")])
def test_view_matches_numpy(src, dst, rng):
    x = (rng.standard_normal((3, 8)) * 100).astype(src) if src != "complex64" else \
        (rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8))).astype(np.complex64)
    got = mr.view(mr.array(x, getattr(mr, src)), getattr(mr, dst))
    want = x.view(dst)
    assert got.shape == want.shape and got.dtype == getattr(mr, dst)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8))


def test_view_method_scalar_bool_and_same_dtype():
    assert mr.array(-1, mr.int8).view(mr.uint8).item() == 255
    assert mr.array(1.0).view(mr.int32).item() == 0x3F800000
    assert mr.array(1.0).view(mr.uint32, stream=mr.cpu).item() == 0x3F800000
    np.testing.assert_array_equal(np.asarray(mr.array([True, False, True, True]).view(mr.int32)), [0x01010001])
    x = mr.array([1.0, 2.0])
    assert mr.view(x, mr.float32) is x
    # bfloat16 is the high half of float32
    np.testing.assert_array_equal(np.asarray(mr.array([1.0, -2.0], mr.bfloat16).view(mr.uint16)), [0x3F80, 0xC000])


def test_view_errors():
    with pytest.raises(ValueError, match=r"\[view\].*scalar"):
        mr.view(mr.array(1.0), mr.int8)
    with pytest.raises(ValueError, match=r"\[view\].*multiple"):
        mr.view(mr.array([1, 2, 3], mr.uint8), mr.int16)
    x = mr.array([1.0, 2.0], mr.float64)
    with pytest.raises(ValueError, match="no derivative"):
        mr.grad(lambda t: mr.view(t, mr.float32).sum())(x)
    with pytest.raises(ValueError, match="no derivative"):
        mr.jvp(lambda t: mr.view(t, mr.float32), [x], [mr.ones((2,), mr.float64)])


def test_view_under_vmap_and_compile(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got = mr.vmap(lambda r: mr.view(r, mr.uint16))(mr.array(x))
    np.testing.assert_array_equal(np.asarray(got), x.view(np.uint16))
    got = mr.vmap(lambda c: mr.view(c, mr.int32), in_axes=1)(mr.array(x))
    np.testing.assert_array_equal(np.asarray(got), x.T.view(np.int32))
    with pytest.raises(ValueError, match="scalar"):
        mr.vmap(lambda r: mr.view(r, mr.uint8))(mr.array(x[0]))
    f = mr.compile(lambda t: mr.view(t * 2, mr.uint8).astype(mr.int32) + 1)
    np.testing.assert_array_equal(np.asarray(f(mr.array(x))), (x * 2).view(np.uint8).astype(np.int32) + 1)


# ---- as_strided ------------------------------------------------------------------------------

def test_as_strided_matches_numpy_strides():
    a = np.arange(20, dtype=np.float32)
    for shape, strides, offset in [((3, 3), (1, 1), 0), ((4, 2), (5, 2), 1), ((2, 3, 2), (6, 2, 1), 3),
                                   ((3,), (-2,), 10)]:
        want = np.lib.stride_tricks.as_strided(a[offset:], shape, [s * 4 for s in strides]) if min(strides) > 0 \
            else a[offset::strides[0]][:shape[0]]
        got = mr.as_strided(mr.array(a), shape, strides, offset)
        np.testing.assert_array_equal(np.asarray(got), want)
    m = mr.array(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(mr.as_strided(m)), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(mr.as_strided(m, (3, 2))), np.arange(6).reshape(3, 2))
    assert mr.as_strided(m, (0, 2), (1, 1)).shape == (0, 2)


def test_as_strided_errors_and_grad():
    with pytest.raises(ValueError, match="Negative dimensions"):
        mr.as_strided(mr.arange(4), (-1,), (1,))
    with pytest.raises(ValueError, match="reach element"):
        mr.as_strided(mr.arange(4), (3,), (2,))
    g = mr.grad(lambda x: mr.as_strided(x, (3, 2), (1, 1)).sum())(mr.arange(4.0))
    np.testing.assert_array_equal(np.asarray(g), [1, 2, 2, 1])  # windows overlap: counts per element


# ---- depends ---------------------------------------------------------------------------------

def test_depends_evaluates_dependencies():
    x = mr.array([1.0, 2.0]) * 3
    dep = mr.exp(mr.array([0.0, 1.0]))
    y = mr.depends(x, dep)
    assert dep._data is None  # still lazy
    mr.eval(y)
    assert dep._data is not None, "evaluating the result must evaluate the dependency"
    np.testing.assert_array_equal(np.asarray(y), [3.0, 6.0])
    d1, d2 = mr.array([1]) + 1, mr.array([2]) + 1
    a, b = mr.depends([mr.array([1.0]) + 0, mr.array([2.0]) + 0], [d1, d2])
    mr.eval(b)
    assert d1._data is not None and d2._data is not None and a._data is None
    with pytest.raises(TypeError, match="depends"):
        mr.depends(x, [1.0])


def test_depends_transforms():
    dep = mr.array([5.0])
    g = mr.grad(lambda x: (mr.depends(x, dep) ** 2).sum())(mr.array([1.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(g), [2.0, 4.0])
    out = mr.vmap(lambda d: mr.depends(mr.array([1.0, 2.0]), d))(mr.ones((3, 2)))
    np.testing.assert_array_equal(np.asarray(out), np.tile([1.0, 2.0], (3, 1)))
    f = mr.compile(lambda x, d: mr.depends(x + 1, d * 2))
    np.testing.assert_array_equal(np.asarray(f(mr.array([1.0]), mr.array([3.0]))), [2.0])


# ---- hadamard_transform ----------------------------------------------------------------------

def _sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def test_hadamard_powers_of_two(rng):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    got = mr.hadamard_transform(mr.array(x))
    np.testing.assert_allclose(np.asarray(got), x @ _sylvester(16).T / 4, rtol=1e-5, atol=1e-5)
    got = mr.hadamard_transform(mr.array(x), scale=0.5)
    np.testing.assert_allclose(np.asarray(got), x @ _sylvester(16).T * 0.5, rtol=1e-5, atol=1e-5)
    assert mr.hadamard_transform(mr.array([[1, 2]])).dtype == mr.float32
    assert mr.hadamard_transform(mr.ones((2, 8), mr.float16)).dtype == mr.float16
    np.testing.assert_allclose(np.asarray(mr.hadamard_transform(mr.array(2.0), 3.0)), 6.0)


@pytest.mark.parametrize("n", [12, 24, 20, 28])
def test_hadamard_sloane_sizes_are_orthonormal(n):
    # the transform of the identity is the scaled matrix; a Hadamard matrix H has H H^T = n I
    h = np.asarray(mr.hadamard_transform(mr.eye(n), scale=1.0))
    assert set(np.unique(h)) == {-1.0, 1.0}
    np.testing.assert_allclose(h @ h.T, n * np.eye(n), atol=1e-4)
    m = {12: 12, 24: 12, 20: 20, 28: 28}[n]
    np.testing.assert_allclose(h, np.kron(h[:m * (n // m):n // m, :m * (n // m):n // m], _sylvester(n // m)),
                               atol=1e-6)  # m x m blocks of Sylvester matrices


def test_hadamard_errors():
    with pytest.raises(ValueError, match="empty"):
        mr.hadamard_transform(mr.array([]))
    with pytest.raises(ValueError, match="m in"):
        mr.hadamard_transform(mr.ones((6,)))


# ---- fp8 ------------------------------------------------------------------------------------

def _e4m3_values():
    """All finite e4m3 magnitudes by code, from the format's definition."""
    vals = []
    for b in range(127):
        e, m = b >> 3, b & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


def _to_fp8_reference(x):
    vals = _e4m3_values()[:127]
    out = []
    for v in x:
        a = min(abs(float(v)), 448.0)
        d = np.abs(vals - a)
        best = np.flatnonzero(d == d.min())
        code = best[0] if len(best) == 1 or best[0] % 2 == 0 else best[1]  # ties to the even code
        out.append(int(code) | (0x80 if v < 0 or (v == 0 and math.copysign(1, v) < 0) else 0))
    return np.array(out, np.uint8)


def test_fp8_round_trip_and_reference(rng):
    vals = mr.array([448, 256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 0.015625])
    assert mr.array_equal(mr.from_fp8(mr.to_fp8(vals)), vals).item()
    assert mr.array_equal(mr.from_fp8(mr.to_fp8(-vals)), -vals).item()
    np.testing.assert_array_equal(np.asarray(mr.to_fp8(mr.array([1.0, -2.0, 1000.0, 2.0 ** -9]))), [56, 192, 126, 1])
    x = np.concatenate([rng.standard_normal(200) * 30, rng.standard_normal(50) * 0.01]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(mr.to_fp8(mr.array(x))), _to_fp8_reference(x))
    codes = np.arange(256, dtype=np.uint8)
    decoded = np.asarray(mr.from_fp8(mr.array(codes), mr.float32))
    mags = _e4m3_values()
    finite = (codes & 0x7F) != 0x7F
    want = np.where(codes & 0x80, -1, 1) * mags[np.minimum(codes & 0x7F, 126)]
    np.testing.assert_array_equal(decoded[finite], want[finite])
    assert mr.from_fp8(mr.array(codes)).dtype == mr.bfloat16
    assert mr.to_fp8(mr.array([1.0], mr.float16)).dtype == mr.uint8


def test_fp8_errors():
    with pytest.raises(ValueError, match="uint8"):
        mr.from_fp8(mr.array([1], mr.int32))
    with pytest.raises(ValueError, match="floating"):
        mr.from_fp8(mr.array([1], mr.uint8), mr.int32)
    with pytest.raises(ValueError, match="floating"):
        mr.to_fp8(mr.array([1, 2]))


# ---- print options ---------------------------------------------------------------------------

def test_printoptions():
    x = mr.array([1.123456789, 1e-9])
    default = repr(x)
    with mr.printoptions(precision=4):
        assert repr(x) == "array([1.1235, 0.0000], dtype=float32)"
        assert mr.get_printoptions().precision == 4
    assert repr(x) == default and mr.get_printoptions().precision == -1
    try:
        mr.set_printoptions(precision=2)
        assert repr(mr.sin(mr.array([1.123456789]))) == "array([0.90], dtype=float32)"
        assert repr(mr.array([1, 2])) == "array([1, 2], dtype=int32)"
    finally:
        mr.set_printoptions()
    assert repr(x) == default
    with pytest.raises(TypeError):
        mr.set_printoptions(precision=1.5)
    assert isinstance(mr.get_printoptions(), mr.PrintOptions)


# ---- mirax.fast ------------------------------------------------------------------------------

def test_fast_norms(rng):
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    rms = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(mr.fast.rms_norm(mr.array(x), mr.array(w), 1e-5)), rms * w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mr.fast.rms_norm(mr.array(x), None, 1e-5)), rms, rtol=1e-5, atol=1e-5)
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    got = mr.fast.layer_norm(mr.array(x), mr.array(w), mr.array(b), 1e-5)
    np.testing.assert_allclose(np.asarray(got), ln * w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mr.fast.layer_norm(mr.array(x), None, None, 1e-5)), ln, rtol=1e-5, atol=1e-5)
    assert mr.fast.rms_norm(mr.array(x, mr.float16), None, 1e-5).dtype == mr.float16
    with pytest.raises(ValueError, match=r"\[rms_norm\].*same size"):
        mr.fast.rms_norm(mr.array(x), mr.ones((4,)), 1e-5)
    with pytest.raises(ValueError, match=r"\[layer_norm\].*1 dimension"):
        mr.fast.layer_norm(mr.array(1.0), None, None, 1e-5)
    g = mr.grad(lambda t: mr.fast.rms_norm(t, None, 1e-5).sum())(mr.array(x))
    assert g.shape == x.shape


def _rope_reference(x, dims, traditional, base, scale, offset):
    t = x.shape[-2]
    pos = (np.arange(t)[:, None] + offset) * scale
    inv = base ** (-np.arange(0, dims, 2) / dims)
    theta = pos * inv
    c, s = np.cos(theta), np.sin(theta)
    out = x.copy()
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2], out[..., 1:dims:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        h = dims // 2
        x1, x2 = x[..., :h], x[..., h:dims]
        out[..., :h], out[..., h:dims] = x1 * c - x2 * s, x1 * s + x2 * c
    return out


@pytest.mark.parametrize("traditional", [False, True])
def test_fast_rope(traditional, rng):
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    got = mr.fast.rope(mr.array(x), 6, traditional=traditional, base=100.0, scale=0.5, offset=2)
    want = _rope_reference(x.astype(np.float64), 6, traditional, 100.0, 0.5, 2)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    # one offset per batch entry, and frequencies given instead of a base
    got = mr.fast.rope(mr.array(x), 8, traditional=traditional, base=None, scale=1.0,
                       offset=mr.array([0, 3]), freqs=mr.array(100.0 ** (np.arange(0, 8, 2) / 8)))
    for i, off in enumerate([0, 3]):
        want = _rope_reference(x[i].astype(np.float64), 8, traditional, 100.0, 1.0, off)
        np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        mr.fast.rope(mr.array(x), 5, traditional=False, base=10.0, scale=1.0, offset=0)
    with pytest.raises(ValueError, match="Neither base nor freqs"):
        mr.fast.rope(mr.array(x), 4, traditional=False, base=None, scale=1.0, offset=0)
    with pytest.raises(ValueError, match="at least 3"):
        mr.fast.rope(mr.ones((2, 4)), 4, traditional=False, base=10.0, scale=1.0, offset=0)


def _attention_reference(q, k, v, scale, mask=None, sinks=None):
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = scale * q @ k.swapaxes(-1, -2)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    if sinks is not None:
        s = np.concatenate([np.broadcast_to(sinks[None, :, None, None], s.shape[:-1] + (1,)), s], -1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if sinks is not None:
        p = p[..., 1:]
    return p @ v


def test_fast_scaled_dot_product_attention(rng):
    q = rng.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    Q, K, V = mr.array(q), mr.array(k), mr.array(v)
    sdpa = mr.fast.scaled_dot_product_attention
    np.testing.assert_allclose(np.asarray(sdpa(Q, K, V, scale=0.3)), _attention_reference(q, k, v, 0.3),
                               rtol=1e-5, atol=1e-5)
    causal = np.arange(2, 5)[:, None] >= np.arange(5)[None]  # queries are the last 3 positions
    np.testing.assert_allclose(np.asarray(sdpa(Q, K, V, scale=0.3, mask="causal")),
                               _attention_reference(q, k, v, 0.3, causal), rtol=1e-5, atol=1e-5)
    bmask = rng.random((1, 4, 3, 5)) < 0.7
    bmask[..., 0] = True
    np.testing.assert_allclose(np.asarray(sdpa(Q, K, V, scale=0.3, mask=mr.array(bmask))),
                               _attention_reference(q, k, v, 0.3, bmask), rtol=1e-5, atol=1e-5)
    add = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sdpa(Q, K, V, scale=0.3, mask=mr.array(add))),
                               _attention_reference(q, k, v, 0.3, add), rtol=1e-5, atol=1e-5)
    sinks = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sdpa(Q, K, V, scale=0.3, sinks=mr.array(sinks))),
                               _attention_reference(q, k, v, 0.3, sinks=sinks), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="invalid mask option"):
        sdpa(Q, K, V, scale=0.3, mask="full")
    with pytest.raises(ValueError, match="rank 4"):
        sdpa(Q[0], K, V, scale=0.3)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        sdpa(Q[:, :3], K, V, scale=0.3)


def test_fast_custom_kernels_refuse_to_run():
    kernel = mr.fast.metal_kernel(name="copy", input_names=["a"], output_names=["out"],
                                  source="out[0] = a[0];")
    with pytest.raises(RuntimeError, match="No Metal back-end"):
        kernel(inputs=[mr.ones((2,))], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2,)],
               output_dtypes=[mr.float32])
    with pytest.raises(ValueError, match="Only supports the GPU"):
        kernel(inputs=[mr.ones((2,))], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2,)],
               output_dtypes=[mr.float32], stream=mr.cpu)
    kernel = mr.fast.cuda_kernel(name="copy", input_names=["a"], output_names=["out"], source="")
    with pytest.raises(RuntimeError, match="No CUDA back-end"):
        kernel(inputs=[mr.ones((2,))], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2,)],
               output_dtypes=[mr.float32])


# ---- streams ---------------------------------------------------------------------------------

def test_stream_constructors():
    s = mr.new_thread_local_stream(mr.cpu)
    t = mr.new_thread_unsafe_stream(mr.cpu)
    assert isinstance(s, mr.ThreadLocalStream) and s.device == mr.cpu
    assert s != t and repr(s).startswith("ThreadLocalStream(Device(cpu")
    with mr.stream(s):
        y = mr.array([1.0]) + 1
    assert y.device == mr.cpu and y.item() == 2.0
    assert mr.add(mr.array(1), 2, stream=t).item() == 3
    mr.clear_streams()
    assert mr.StreamContext is mr.stream
    with pytest.raises(TypeError):
        mr.new_thread_local_stream(s)


# ---- export / import -------------------------------------------------------------------------

def test_export_import_round_trip(tmp_path):
    path = str(tmp_path / "f.mlxfn")
    mr.export_function(path, lambda x, y: x * y + 1, mr.ones((3,)), y=mr.ones((3,)))
    f = mr.import_function(path)
    x, y = mr.array([0.0, 1.0, 2.0]), mr.array([2.0, 2.0, 2.0])
    (out,) = f(x, y=y)
    np.testing.assert_array_equal(np.asarray(out), [1.0, 3.0, 5.0])
    (out,) = f((x,), {"y": y})
    np.testing.assert_array_equal(np.asarray(out), [1.0, 3.0, 5.0])
    # imported functions are ordinary mirax code: they differentiate, vmap and compile
    g = mr.grad(lambda t: f(t, y=y)[0].sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(np.asarray(mr.compile(lambda t: f(t, y=t)[0])(x)), [1.0, 2.0, 5.0])
    np.testing.assert_array_equal(np.asarray(mr.vmap(lambda t: f(t, y=t)[0])(mr.ones((2, 3)))), np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="No imported function"):
        f(mr.ones((4,)), y=mr.ones((4,)))
    with pytest.raises(ValueError, match="Inputs can either"):
        f(x, 1.0)


def test_export_no_inputs_and_bad_outputs(tmp_path):
    path = str(tmp_path / "g.mlxfn")
    mr.export_function(path, lambda: mr.zeros((2, 2)))
    (out,) = mr.import_function(path)()
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="Outputs"):
        mr.export_function(path, lambda: (mr.zeros((2,)), 1))
    with pytest.raises(ValueError, match="Inputs"):
        mr.export_function(path, lambda x: x, "hi")


def test_exporter_traces_shapeless_constants_and_metadata(tmp_path):
    path = str(tmp_path / "h.mlxfn")
    constant = mr.zeros((16, 256))
    mr.eval(constant)
    with mr.exporter(path, lambda *a: constant + sum(a), metadata='{"v": 1}') as ex:
        for i in range(4):
            ex(*[mr.array(1)] * i)
    assert os.path.getsize(path) < constant.nbytes + 8192  # the closed-over array is stored once
    with pytest.raises(RuntimeError, match="closed"):
        ex(mr.array(1))
    f, meta = mr.import_function(path, return_metadata=True)
    assert meta == '{"v": 1}'
    assert f(mr.array(2), mr.array(3))[0][0, 0].item() == 5
    with mr.exporter(path, lambda *a: sum(a), shapeless=True) as ex:
        ex(mr.array(1))
        ex(mr.array(1), mr.array(2))
    f = mr.import_function(path)
    assert f(mr.array(5), mr.array(7))[0].item() == 12
    with pytest.raises(ValueError):
        f(mr.array(10), mr.array([5, 10]))  # shapeless keeps ranks and dtypes
    with pytest.raises(TypeError):
        mr.export_function(path, lambda x: x, mr.array(1), metadata={"a": 1})


def test_export_to_dot():
    x = mr.array(1.0)
    y = mr.exp(x) + x
    buf = io.StringIO()
    mr.export_to_dot(buf, y, x=x)
    text = buf.getvalue()
    assert text.startswith("digraph {") and text.endswith("}")
    assert '{ rank=source; "x"; }' in text and 'label ="exp"' in text and 'label ="add"' in text
    assert '{ rank=sink; "C"; }' in text  # B is exp's result, an intermediate
    with pytest.raises(ValueError, match="file-like"):
        mr.export_to_dot(3, y)


@pytest.mark.skipif(not mr.is_available(mr.gpu), reason="no Vulkan device")
def test_view_and_depends_on_the_gpu():
    x = np.array([[1.5, -2.25, 3.0, 1e-3]], np.float32)
    b = np.arange(16, dtype=np.uint8).reshape(2, 8)
    with mr.stream(mr.gpu):
        for d in ["uint8", "int64", "int32"]:
            np.testing.assert_array_equal(np.asarray(mr.view(mr.array(x), getattr(mr, d))), x.view(d))
        np.testing.assert_array_equal(np.asarray(mr.view(mr.array(b), mr.uint32)), b.view(np.uint32))
        np.testing.assert_array_equal(np.asarray(mr.depends(mr.array(x) + 1, mr.array(b) * 2)), x + 1)


def test_default_repr_is_mlx_format():
    assert repr(mr.array(1.0)) == "array(1, dtype=float32)"
    assert repr(mr.array([1.123456789])) == "array([1.12346], dtype=float32)"
    assert repr(mr.array([1] * 7)) == "array([1, 1, 1, ..., 1, 1, 1], dtype=int32)"
    assert repr(mr.array([[1, 2]] * 6)).count("\n") == 5 and "..." not in repr(mr.array([[1, 2]] * 6))
    assert repr(mr.array([True, False])) == "array([True, False], dtype=bool)"
