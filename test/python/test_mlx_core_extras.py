"""The last mlx.core names: the array-API aliases, minmax, unique, the memory queries, the
ArrayAt/ArrayIterator/ArrayLike types, fft.stft/istft, fast.cross_entropy,
fast.gated_delta_update, qqmm and gather_qqmm. Checked against numpy, or against values
real MLX 0.32.4 printed (written here as literals)."""
import os

import numpy as np
import pytest

import mirax as mr


# ---- aliases ---------------------------------------------------------------------------------

def test_elementwise_aliases_match_numpy(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mr.atan2(mr.array(a), mr.array(b))), np.arctan2(a, b), rtol=1e-6)
    i = rng.integers(0, 100, (5,)).astype(np.int32)
    s = np.array([0, 1, 2, 3, 4], np.int32)
    np.testing.assert_array_equal(np.asarray(mr.bitwise_left_shift(mr.array(i), mr.array(s))), i << s)
    np.testing.assert_array_equal(np.asarray(mr.bitwise_right_shift(mr.array(i), mr.array(s))), i >> s)
    np.testing.assert_allclose(np.asarray(mr.pow(mr.array(np.abs(a)), 1.5)), np.abs(a) ** 1.5, rtol=1e-5)
    assert mr.pow(2, 10).item() == 1024


def test_cumulative_aliases_take_dtype(rng):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    got = mr.cumulative_sum(mr.array(a), axis=1, dtype=mr.float32)
    assert got.dtype == mr.float32
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(a, axis=1))
    got = mr.cumulative_prod(mr.array(a), dtype=mr.int64)
    assert got.dtype == mr.int64
    np.testing.assert_array_equal(np.asarray(got), np.cumprod(a.ravel().astype(np.int64)))
    # MLX: int8 stays int8 without dtype; a bool cast then sums in int32; floats cast to int first
    assert mr.cumsum(mr.array(a)).dtype == mr.int8
    assert mr.cumsum(mr.array([True, True]), dtype=mr.bool_).tolist() == [1, 2]
    assert mr.cumulative_sum(mr.array([1.5, 2.5]), dtype=mr.int32).tolist() == [1, 3]
    got = mr.cumsum(mr.array([[1, 2], [3, 4]]), 1, reverse=True, dtype=mr.float16)
    assert got.dtype == mr.float16 and got.tolist() == [[3, 2], [7, 4]]


def test_matrix_norm_is_linalg_norm(rng):
    m = rng.standard_normal((4, 3)).astype(np.float32)
    assert mr.matrix_norm is mr.linalg.norm
    for ord in [None, "fro", np.inf, 1, -1]:
        np.testing.assert_allclose(np.asarray(mr.matrix_norm(mr.array(m), ord)), np.linalg.norm(m, ord), rtol=1e-5)


def test_minmax_matches_numpy(rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    lo, hi = mr.minmax(mr.array(a))
    assert lo.item() == a.min() and hi.item() == a.max()
    lo, hi = mr.minmax(mr.array(a), axis=1, keepdims=True)
    np.testing.assert_array_equal(np.asarray(lo), a.min(1, keepdims=True))
    np.testing.assert_array_equal(np.asarray(hi), a.max(1, keepdims=True))
    assert isinstance(mr.minmax(mr.array([1])), tuple)
    with pytest.raises(ValueError):
        mr.minmax(mr.array([], mr.float32))


# ---- memory ------------------------------------------------------------------------------------

def test_get_memory_limit_pairs_with_set():
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    old = mr.get_memory_limit()
    try:
        assert mr.set_memory_limit(ram) == old
        assert mr.get_memory_limit() == ram
        assert mr.set_memory_limit(123456789) == ram
        assert mr.get_memory_limit() == 123456789
    finally:
        mr.set_memory_limit(old)


def test_get_array_buffer_size_counts_each_buffer_once():
    a, b = mr.ones((3,)), mr.zeros((2, 5), mr.float16)
    mr.eval(a, b)
    assert mr.get_array_buffer_size(a) == 12
    assert mr.get_array_buffer_size(a, {"x": [a, b], "n": 5}, "text") == 12 + 20
    assert mr.get_array_buffer_size() == 0
    with pytest.raises(ValueError, match="evaluated"):
        mr.get_array_buffer_size(a + 1)


# ---- unique -----------------------------------------------------------------------------------

def test_unique_matches_numpy(rng):
    a = rng.integers(-3, 4, (4, 6)).astype(np.int32)
    vals, index, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True)
    got = mr.unique(mr.array(a), vals.size, True, True, True)
    np.testing.assert_array_equal(np.asarray(got[0]), vals)
    np.testing.assert_array_equal(np.asarray(got[1]), index)
    np.testing.assert_array_equal(np.asarray(got[2]), inverse.reshape(a.shape))
    np.testing.assert_array_equal(np.asarray(got[3]), counts)
    assert [g.dtype for g in got] == [mr.int32, mr.uint32, mr.uint32, mr.int32]
    f = rng.standard_normal(7).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(mr.unique(mr.array(np.concatenate([f, f])), 7)), np.unique(f))


def test_unique_padding_and_truncation_as_mlx():
    a = mr.array([2, 1, 2, 3, 1])
    assert mr.unique(a, 3).tolist() == [1, 2, 3]
    assert mr.unique(a, 5).tolist() == [1, 2, 3, 1, 1]   # padded with the smallest element
    v, i, inv, c = mr.unique(a, 4, True, True, True, fill_value=0)
    assert (v.tolist(), i.tolist(), inv.tolist(), c.tolist()) == ([1, 2, 3, 0], [1, 0, 3, 1], [1, 0, 1, 2, 0],
                                                                  [2, 2, 1, 0])
    v, i, inv, c = mr.unique(a, 2, True, True, True)      # truncated: 3's inverse clamps to the last slot
    assert (v.tolist(), i.tolist(), inv.tolist(), c.tolist()) == ([1, 2], [1, 0], [1, 0, 1, 1, 0], [2, 2])
    assert mr.unique(mr.array([3, 1]), 3, fill_value=2.7).tolist() == [1, 3, 2]
    v, inv = mr.unique(mr.array([[2.5, 1], [2.5, -1]]), 4, return_inverse=True)
    assert v.tolist() == [-1, 1, 2.5, -1] and inv.tolist() == [[2, 1], [2, 0]]
    v, i, inv, c = mr.unique(mr.array([3, 3]), 0, True, True, True)
    assert (v.shape, i.shape, inv.tolist(), c.shape) == ((0,), (0,), [0, 0], (0,))
    v, i, inv, c = mr.unique(mr.array([], mr.int32), 2, True, True, True, fill_value=9)
    assert (v.tolist(), i.tolist(), inv.shape, c.tolist()) == ([9, 9], [0, 0], (0,), [0, 0])
    assert mr.unique(mr.array([True, False, True]), 3).tolist() == [False, True, False]


def test_unique_nan_and_signed_zero_as_mlx():
    v, i, inv, c = mr.unique(mr.array([1.0, np.nan, np.nan, 0.0, -0.0]), 5, True, True, True)
    got = np.asarray(v)
    np.testing.assert_array_equal(got, [0, 1, np.nan, np.nan, 0])   # each NaN is its own element
    assert i.tolist() == [3, 0, 1, 2, 3] and inv.tolist() == [1, 2, 3, 0, 0] and c.tolist() == [2, 1, 1, 1, 0]


def test_unique_errors():
    with pytest.raises(ValueError, match="negative size"):
        mr.unique(mr.array([1]), -1)
    with pytest.raises(TypeError, match="size"):
        mr.unique(mr.array([1]), 2.0)
    with pytest.raises(ValueError, match="one element"):
        mr.unique(mr.array([1]), 2, fill_value=mr.array([1, 2]))
    with pytest.raises(ValueError, match="fill value is required"):
        mr.unique(mr.array([], mr.int32), 2)


# ---- ArrayAt, ArrayIterator, ArrayLike ------------------------------------------------------------

def test_array_at_and_iterator_types():
    x = mr.array([[1, 2], [3, 4]])
    assert type(x.at) is mr.ArrayAt and isinstance(x.at[0], mr.ArrayAt)
    assert x.at[0, 1].add(5).tolist() == [[1, 7], [3, 4]]
    assert x.at[0][1].add(1).tolist() == [[1, 2], [4, 5]]   # indexing again replaces the index, as MLX
    with pytest.raises(ValueError, match="index"):
        x.at.add(1)
    it = iter(x)
    assert type(it) is mr.ArrayIterator and iter(it) is it
    assert next(it).tolist() == [1, 2] and next(it).tolist() == [3, 4]
    with pytest.raises(StopIteration):
        next(it)
    a, b = x
    assert a.tolist() == [1, 2] and b.tolist() == [3, 4]
    with pytest.raises(TypeError, match="0-d"):
        iter(mr.array(1))


class _Box:
    def __init__(self, values):
        self.values = values

    def __mlx_array__(self):
        return mr.array(self.values)


def test_array_like_protocol():
    box = _Box([1.0, 2.0])
    assert isinstance(box, mr.ArrayLike) and not isinstance([1.0], mr.ArrayLike)
    assert mr.array(box).tolist() == [1.0, 2.0]
    assert (mr.array(box, mr.int32) + 1).tolist() == [2, 3]
    assert mr.add(box, 1).tolist() == [2.0, 3.0]
    assert mr.array(mr.ArrayLike(box)).tolist() == [1.0, 2.0]
    assert mr.array(mr.ArrayLike(mr.array([5]))).tolist() == [5]
    with pytest.raises(TypeError, match="not an array"):
        mr.array(_BadBox())


class _BadBox:
    def __mlx_array__(self):
        return [1, 2]


# ---- stft, istft ----------------------------------------------------------------------------

def _np_window(window, win_length, n_fft):
    w = np.ones(win_length) if window is None else np.asarray(window, np.float64)
    left = (n_fft - len(w)) // 2
    return np.pad(w, (left, n_fft - len(w) - left))


def _np_stft(x, n_fft, hop=None, win_length=None, window=None, center=True, pad_mode="reflect", norm="backward",
             onesided=None):
    hop = hop or n_fft // 4
    w = _np_window(window, win_length or n_fft, n_fft)
    if center:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode=pad_mode)
    n = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[..., t * hop:t * hop + n_fft] * w for t in range(n)], -2)
    onesided = not np.iscomplexobj(x) if onesided is None else onesided
    spec = np.fft.rfft(frames.real, axis=-1, norm=norm) if onesided else np.fft.fft(frames, axis=-1, norm=norm)
    return np.swapaxes(spec, -1, -2)


def _np_istft(spec, n_fft, hop=None, window=None, center=True, norm="backward", length=None):
    hop = hop or n_fft // 4
    w = _np_window(window, n_fft, n_fft)
    frames = np.fft.irfft(np.swapaxes(spec, -1, -2), n=n_fft, axis=-1, norm=norm) * w
    t_count = spec.shape[-1]
    total = n_fft + hop * (t_count - 1)
    y, env = np.zeros(spec.shape[:-2] + (total,)), np.zeros(total)
    for t in range(t_count):
        y[..., t * hop:t * hop + n_fft] += frames[..., t, :]
        env[t * hop:t * hop + n_fft] += w * w
    y = y / np.where(env > 1e-11, env, 1)
    start = n_fft // 2 if center else 0
    if length is not None:
        y = y[..., start:start + length]
        return np.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, length - y.shape[-1])])
    return y[..., start:total - start] if center else y


@pytest.mark.parametrize("kw", [dict(n_fft=8), dict(n_fft=8, hop_length=3, win_length=6, pad_mode="constant"),
                                dict(n_fft=7, window="hann5", norm="ortho", pad_mode="edge"),
                                dict(n_fft=8, center=False, onesided=False, norm="forward"),
                                dict(n_fft=32)])
def test_stft_matches_numpy(kw, rng):
    x = rng.standard_normal((2, 37)).astype(np.float32)
    kw = dict(kw)
    window = np.hanning(5).astype(np.float32) if kw.pop("window", None) else None
    got = mr.fft.stft(mr.array(x), **kw, window=None if window is None else mr.array(window))
    kw["hop"] = kw.pop("hop_length", None)
    want = _np_stft(x, **kw, window=window)
    assert got.dtype == mr.complex64 and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)


def test_stft_complex_input(rng):
    x = (rng.standard_normal(23) + 1j * rng.standard_normal(23)).astype(np.complex64)
    got = mr.fft.stft(mr.array(x), 8)
    assert got.shape == (8, 12)   # two-sided for complex input
    np.testing.assert_allclose(np.asarray(got), _np_stft(x, 8), atol=2e-5)
    # onesided=True keeps the real part's non-negative frequencies, as MLX
    np.testing.assert_allclose(np.asarray(mr.fft.stft(mr.array(x), 8, onesided=True)),
                               _np_stft(x, 8, onesided=True), atol=2e-5)


@pytest.mark.parametrize("kw", [dict(n_fft=8), dict(n_fft=8, window="hann", center=False),
                                dict(n_fft=8, hop_length=3, length=30), dict(n_fft=8, norm="ortho", length=50),
                                dict(n_fft=8, hop_length=16)])
def test_istft_matches_numpy_and_inverts_stft(kw, rng):
    x = rng.standard_normal((2, 37)).astype(np.float32)
    kw = dict(kw)
    window = np.hanning(8).astype(np.float32) if kw.pop("window", None) else None
    length = kw.pop("length", None)
    spec = mr.fft.stft(mr.array(x), **kw, window=None if window is None else mr.array(window))
    got = mr.fft.istft(spec, **kw, window=None if window is None else mr.array(window), length=length)
    kw["hop"] = kw.pop("hop_length", None)
    want = _np_istft(np.asarray(spec), window=window, length=length, **kw)
    assert got.dtype == mr.float32 and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)
    if kw.get("hop") is None and window is None:   # full overlap: stft then istft gives x back
        n = got.shape[-1] if length is None else min(length, 37)
        np.testing.assert_allclose(np.asarray(got)[..., :n], x[..., :n], atol=2e-5)


def test_istft_two_sided_gives_the_real_part(rng):
    x = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    got = mr.fft.istft(mr.fft.stft(mr.array(x), 8), onesided=False)
    np.testing.assert_allclose(np.asarray(got), x.real, atol=2e-5)


def test_stft_istft_errors():
    x = mr.zeros((20,))
    for call, match in [(lambda: mr.fft.stft(x, 0), "n_fft must be positive"),
                        (lambda: mr.fft.stft(x, 8, hop_length=0), "hop_length must be positive"),
                        (lambda: mr.fft.stft(x, 8, win_length=9), "window length"),
                        (lambda: mr.fft.stft(x, 8, window=mr.ones((2, 4))), "one-dimensional"),
                        (lambda: mr.fft.stft(mr.array(1.0), 8), "at least one dimension"),
                        (lambda: mr.fft.stft(x, 32, center=False), "too short"),
                        (lambda: mr.fft.stft(x, 8, pad_mode="wrap"), "pad_mode"),
                        (lambda: mr.fft.stft(x, 8, norm="x"), "Invalid norm"),
                        (lambda: mr.fft.istft(mr.zeros((5,), mr.complex64)), "two dimensions"),
                        (lambda: mr.fft.istft(mr.zeros((5, 3), mr.complex64), win_length=9), "window length")]:
        with pytest.raises(ValueError, match=match):
            call()


# ---- fast.cross_entropy -------------------------------------------------------------------------

def test_cross_entropy_matches_numpy(rng):
    logits = rng.standard_normal((3, 4, 7)).astype(np.float32)
    targets = rng.integers(0, 7, (3, 4))
    got = mr.fast.cross_entropy(mr.array(logits), mr.array(targets))
    m = logits.max(-1)
    lse = m + np.log(np.exp(logits - m[..., None]).sum(-1))
    want = lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    assert got.dtype == mr.float32 and got.shape == (3, 4)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    g = mr.grad(lambda t: mr.fast.cross_entropy(t, mr.array(targets)).sum())(mr.array(logits))
    p = np.exp(logits - lse[..., None])
    np.testing.assert_allclose(np.asarray(g), p - np.eye(7)[targets], atol=1e-6)


def test_cross_entropy_half_and_errors_as_mlx():
    logits, targets = mr.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]]), mr.array([2, 0])
    got = mr.fast.cross_entropy(logits.astype(mr.float16), targets)   # reduced in float16, as MLX's CPU
    assert got.dtype == mr.float32
    np.testing.assert_array_equal(np.asarray(got), np.array([0.408203, 0.798828], np.float16).astype(np.float32))
    assert abs(mr.fast.cross_entropy(logits[0], mr.array(1)).item() - 1.40761) < 1e-5
    for args, match in [((logits, targets[:1]), "targets shape"), ((logits, targets.astype(mr.float32)), "integer"),
                        ((mr.array(1.0), mr.array(1)), "at least 1 dimension"),
                        ((logits.astype(mr.int32), targets), "unsupported logits type")]:
        with pytest.raises(ValueError, match=match):
            mr.fast.cross_entropy(*args)


# ---- fast.gated_delta_update --------------------------------------------------------------------

def _np_gated_delta(q, k, v, g, beta, state=None, mask=None):
    b, t_count, hk, dk = q.shape
    hv, dv = v.shape[2:]
    state = np.zeros((b, hv, dv, dk)) if state is None else state.astype(np.float64)
    q, k = np.repeat(q, hv // hk, 2), np.repeat(k, hv // hk, 2)
    ys = []
    for t in range(t_count):
        new = state * g[:, t, :, None, None]
        delta = (v[:, t] - (new * k[:, t, :, None, :]).sum(-1)) * beta[:, t, :, None]
        new = new + k[:, t, :, None, :] * delta[..., None]
        y = (new * q[:, t, :, None, :]).sum(-1)
        if mask is not None:
            new = np.where(mask[:, t, None, None, None], new, state)
            y = np.where(mask[:, t, None, None], y, 0)
        state = new
        ys.append(y)
    return np.stack(ys, 1), state


@pytest.mark.parametrize("masked", [False, True])
def test_gated_delta_update_matches_numpy(masked, rng):
    b, t, hk, dk, hv, dv = 2, 5, 2, 4, 4, 3
    q, k = rng.standard_normal((b, t, hk, dk)), rng.standard_normal((b, t, hk, dk)) * 0.5
    v = rng.standard_normal((b, t, hv, dv))
    g, beta = rng.uniform(0.5, 1, (b, t, hv)), rng.uniform(0, 1, (b, t, hv))
    s0 = rng.standard_normal((b, hv, dv, dk)) if masked else None
    mask = np.array([[True, True, False, True, True], [False, False, False, True, False]]) if masked else None
    args = [mr.array(a.astype(np.float32)) for a in (q, k, v, g, beta)]
    y, state = mr.fast.gated_delta_update(*args, None if s0 is None else mr.array(s0.astype(np.float32)),
                                          None if mask is None else mr.array(mask))
    want_y, want_state = _np_gated_delta(q, k, v, g, beta, s0, mask)
    assert y.shape == (b, t, hv, dv) and state.shape == (b, hv, dv, dk)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(state), want_state, rtol=1e-4, atol=1e-4)


def test_gated_delta_update_dtypes_and_errors():
    q = mr.zeros((1, 2, 1, 4), mr.bfloat16)
    v, g = mr.zeros((1, 2, 2, 3), mr.bfloat16), mr.ones((1, 2, 2))
    y, state = mr.fast.gated_delta_update(q, q, v, g, g)
    assert y.dtype == mr.bfloat16 and state.dtype == mr.float32   # as MLX: y in q, k, v's type
    y, _ = mr.fast.gated_delta_update(q, q, v, g.astype(mr.float16), g)
    assert y.dtype == mr.bfloat16
    with pytest.raises(ValueError, match="q and k"):
        mr.fast.gated_delta_update(q[0], q[0], v[0], g[0], g[0])
    with pytest.raises(ValueError, match="multiple of Hk"):
        mr.fast.gated_delta_update(mr.zeros((1, 2, 2, 4)), mr.zeros((1, 2, 2, 4)), mr.zeros((1, 2, 3, 3)),
                                   mr.ones((1, 2, 3)), mr.ones((1, 2, 3)))
    with pytest.raises(ValueError, match="gamma"):
        mr.fast.gated_delta_update(q, q, v, g[..., :1], g)
    with pytest.raises(ValueError, match="initial_state"):
        mr.fast.gated_delta_update(q, q, v, g, g, mr.zeros((1, 2, 4, 3)))
    with pytest.raises(ValueError, match="mask"):
        mr.fast.gated_delta_update(q, q, v, g, g, mask=mr.ones((1, 2)))


# ---- the floating-point quantization modes (what qqmm's nvfp4 and mxfp8 need) ---------------------

def _fp_weights():
    w = (np.linspace(-3, 5, 64, dtype=np.float32) ** 3 / 10).reshape(2, 32)
    w[1, :16] = 0   # an all-zero group
    return w


# what MLX 0.32.4 (CPU) returned for _fp_weights(): (packed words, scales)
_FP_PACKED = {
    "mxfp4": ([[3437096687, 2576984763, 0, 0], [0, 0, 858923553, 1431585859]], [[126], [129]]),
    "mxfp8": ([[4143512059, 4025611252, 3857246956, 3638354146, 3268005844, 2208214970, 942348545, 1397639233],
               [0, 0, 0, 0, 1886350700, 1970500209, 2037938038, 2088532858]], [[120], [122]]),
    "nvfp4": ([[3453939455, 2576984764, 638191, 1967263744], [0, 0, 1431585843, 2004248165]], [[46, 8], [0, 64]]),
}


@pytest.mark.parametrize("mode", sorted(_FP_PACKED))
def test_fp_quantize_is_bit_exact_with_mlx(mode):
    w_q, scales = mr.quantize(mr.array(_fp_weights()), mode=mode)
    assert w_q.dtype == mr.uint32 and scales.dtype == mr.uint8
    assert (w_q.tolist(), scales.tolist()) == _FP_PACKED[mode]
    w_hat = mr.dequantize(w_q, scales, mode=mode)
    assert w_hat.dtype == mr.bfloat16   # MLX's default for these modes
    err = np.abs(np.asarray(w_hat.astype(mr.float32)) - _fp_weights()).max()
    assert 0 < err < (0.6 if mode == "mxfp8" else 2.0)   # half a step of the format at the largest value
    if mode == "mxfp8":
        assert w_hat[0, :4].tolist() == [-2.75, -2.25, -2.0, -1.75]   # MLX's dequantize


def test_nvfp4_with_global_scale_as_mlx():
    gs = mr.array(np.float32(12.5))
    w_q, scales = mr.quantize(mr.array(_fp_weights()), mode="nvfp4", global_scale=gs)
    assert w_q.tolist() == [[3453873919, 2576984763, 638191, 1984040960], [0, 0, 1430537267, 2004248165]]
    assert scales.tolist() == [[108, 69], [0, 126]]
    w_hat = mr.dequantize(w_q, scales, mode="nvfp4", global_scale=gs, dtype=mr.float32)
    np.testing.assert_allclose(np.asarray(w_hat)[0, :8], [-2.6785714626312256, -2.6785714626312256, -1.7857142686843872,
                                                         -1.7857142686843872, -1.3392857313156128, -1.3392857313156128,
                                                         -1.3392857313156128, -0.8928571343421936], rtol=1e-6)


def test_mxfp8_scale_is_the_exponent_rounded_up():
    # e8m0: the smallest power of two with amax / 2^e <= 448 (exact at powers of two)
    for amax, e in [(1.0, -8), (1.5, -8), (3.0, -7), (448.0, 0), (500.0, 1), (0.01, -15)]:
        w = np.zeros((1, 32), np.float32)
        w[0, 0] = amax
        assert mr.quantize(mr.array(w), mode="mxfp8")[1].item() - 127 == e


def test_fp_modes_in_quantized_matmul(rng):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = rng.standard_normal((5, 64)).astype(np.float32)
    for mode in ["mxfp4", "mxfp8", "nvfp4"]:
        w_q, scales = mr.quantize(mr.array(w), mode=mode)
        w_hat = np.asarray(mr.dequantize(w_q, scales, mode=mode, dtype=mr.float32))
        got = mr.quantized_matmul(mr.array(x), w_q, scales, mode=mode)
        np.testing.assert_allclose(np.asarray(got), x @ w_hat.T, rtol=1e-5, atol=1e-5)


def test_fp_mode_errors_as_mlx():
    w_q, scales = mr.quantize(mr.array(_fp_weights()), mode="mxfp8")
    for call, match in [(lambda: mr.dequantize(w_q, scales.astype(mr.float32), mode="mxfp8"), "Scale type must be uint8"),
                        (lambda: mr.dequantize(w_q, scales, scales, mode="mxfp8"), "Biases must be null"),
                        (lambda: mr.dequantize(w_q, scales[:, :0], mode="mxfp8"), "Shape of scales does not match"),
                        (lambda: mr.quantize(mr.array(_fp_weights()), mode="mxfp8", bits=4), "requires bits to be 8"),
                        (lambda: mr.quantize(mr.array(_fp_weights()), mode="nvfp4", global_scale=mr.array([1.0, 2.0])),
                         "must be a scalar"),
                        (lambda: mr.quantize(mr.array(_fp_weights()), mode="nvfp4",
                                             global_scale=mr.array(1.0, mr.float16)), "dtype float32")]:
        with pytest.raises(ValueError, match=match):
            call()


# ---- qqmm, gather_qqmm --------------------------------------------------------------------------

def _round_trip(a):
    return mr.dequantize(*mr.quantize(a, 32, 8), group_size=32, bits=8)


def test_qqmm_affine_is_the_product_of_both_quantized_operands(rng):
    x = mr.array(rng.standard_normal((3, 64)).astype(np.float32))
    w = mr.array(rng.standard_normal((5, 64)).astype(np.float32))
    got = mr.qqmm(x, w, mode="affine", group_size=32, bits=8)
    assert got.shape == (3, 5) and got.dtype == mr.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(_round_trip(x)) @ np.asarray(_round_trip(w)).T,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x) @ np.asarray(w).T, atol=0.3)   # 8 bits: close
    assert mr.qqmm(x[0], w, mode="affine", group_size=32, bits=8).shape == (5,)
    got3 = mr.qqmm(x[None], w, mode="affine", group_size=32, bits=8)   # batched x: flattened, then unflattened
    assert got3.shape == (1, 3, 5) and np.array_equal(np.asarray(got3)[0], np.asarray(got))


@pytest.mark.parametrize("mode", ["nvfp4", "mxfp8"])
def test_qqmm_fp_modes(mode, rng):
    x = mr.array(rng.standard_normal((2, 64)).astype(np.float32))
    w = mr.array(rng.standard_normal((4, 64)).astype(np.float32))

    def read_back(a, gs=None):
        return np.asarray(mr.dequantize(*mr.quantize(a, mode=mode, global_scale=gs), mode=mode, global_scale=gs,
                                        dtype=mr.float32))
    want = read_back(x) @ read_back(w).T
    np.testing.assert_allclose(np.asarray(mr.qqmm(x, w, mode=mode)), want, rtol=1e-5, atol=1e-5)
    w_q, scales = mr.quantize(w, mode=mode)   # w given packed
    np.testing.assert_allclose(np.asarray(mr.qqmm(x, w_q, scales, mode=mode)), want, rtol=1e-5, atol=1e-5)
    if mode == "nvfp4":
        gx, gw = mr.abs(x).max(), mr.abs(w).max()
        got = mr.qqmm(x, w, mode=mode, global_scale_x=gx, global_scale_w=gw)
        np.testing.assert_allclose(np.asarray(got), read_back(x, gx) @ read_back(w, gw).T, rtol=1e-5, atol=1e-5)
        assert np.array_equal(np.asarray(mr.qqmm(x, w)), np.asarray(mr.qqmm(x, w, mode="nvfp4")))   # the default


def test_qqmm_matches_mlx_for_a_vector():
    # MLX 0.32.4's CPU runs qqmm for one row with a packed w; its result on these inputs
    x = mr.array(np.linspace(-1, 1, 32, dtype=np.float32)[None])
    w = mr.array(np.cos(np.arange(64, dtype=np.float32)).reshape(2, 32))
    got = mr.qqmm(x, *mr.quantize(w, mode="mxfp8"), mode="mxfp8")
    np.testing.assert_allclose(np.asarray(got), [[-0.4172515869140625, 0.85150146484375]], rtol=1e-6)


def test_gather_qqmm_affine(rng):
    x = mr.array(rng.standard_normal((2, 3, 64)).astype(np.float32))
    w = mr.array(rng.standard_normal((2, 5, 64)).astype(np.float32))
    lhs, rhs = mr.array([0, 1, 1]), mr.array([1, 0, 1])
    got = mr.gather_qqmm(x, w, lhs_indices=lhs, rhs_indices=rhs, mode="affine", group_size=32, bits=8)
    xs, ws = np.asarray(_round_trip(x)), np.asarray(_round_trip(w))
    want = np.stack([xs[i] @ ws[j].T for i, j in [(0, 1), (1, 0), (1, 1)]])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    w_q, scales = mr.quantize(w, mode="mxfp8")   # a packed w, as MLX's mixture-of-experts use; no indices:
    got = mr.gather_qqmm(x, w_q, scales, mode="mxfp8")   # pairwise over the batch
    w_hat = np.asarray(mr.dequantize(w_q, scales, mode="mxfp8", dtype=mr.float32))
    x_hat = np.asarray(mr.dequantize(*mr.quantize(x, mode="mxfp8"), mode="mxfp8", dtype=mr.float32))
    np.testing.assert_allclose(np.asarray(got), x_hat @ np.swapaxes(w_hat, -1, -2), rtol=1e-5, atol=1e-5)


def test_qqmm_errors_as_mlx():
    x, w = mr.zeros((2, 64)), mr.zeros((4, 64))
    w_q, scales, _ = mr.quantize(w, 32, 8)
    for call, match in [(lambda: mr.qqmm(x, w, mode="foo"), r"\[qqmm\] Invalid quantization mode 'foo'"),
                        (lambda: mr.qqmm(x.astype(mr.int32), w, mode="affine"), "first argument dtype == int32"),
                        (lambda: mr.qqmm(x, w[:, :32], mode="affine"), "must match last dimension"),
                        (lambda: mr.qqmm(x, w_q, mode="affine"), "Scales must be provided"),
                        (lambda: mr.qqmm(x, w, mode="affine", global_scale_x=mr.array(1.0)), "only supported for 'nvfp4'"),
                        (lambda: mr.qqmm(x, w, global_scale_x=mr.array(1.0)), "both global_scale_x and global_scale_w"),
                        (lambda: mr.qqmm(mr.zeros((2, 2, 64)), mr.zeros((2, 4, 64)), mode="affine"), "Only 2D"),
                        (lambda: mr.gather_qqmm(x, w, rhs_indices=mr.array([0.5]), mode="affine", group_size=32,
                                                bits=8), "integer")]:
        with pytest.raises(ValueError, match=match):
            call()
