"""mirax.nn layers added for MLX parity (RNN, GRU, LSTM, Upsample, 3-D pooling, ALiBi),
Module methods, the initializers sparse/orthogonal and mirax.utils' tree functions,
against numpy references written here. Shapes are tiny and few: each distinct
(op, shape, dtype) compiles a kernel once."""
import gc
import weakref
from collections import namedtuple

import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
from mirax.utils import (tree_flatten, tree_map, tree_map_with_path, tree_merge, tree_reduce,
                         tree_unflatten)


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def npa(x):
    return np.asarray(x)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.fixture(autouse=True)
def _seed():
    mr.random.seed(0)


RNG = np.random.default_rng(0)
XS = RNG.normal(size=(2, 3, 4)).astype(np.float32)  # (N, L, D)
H0 = RNG.normal(size=(2, 5)).astype(np.float32)     # (N, H)
C0 = RNG.normal(size=(2, 5)).astype(np.float32)


# ---- recurrent layers: numpy step by step, from zero state when none is given ------------

def np_rnn(x, Wxh, Whh, b, h, act=np.tanh):
    h = np.zeros(x.shape[:-2] + (Whh.shape[0],)) if h is None else h
    out = []
    for t in range(x.shape[-2]):
        h = act(x[..., t, :] @ Wxh.T + h @ Whh.T + b)
        out.append(h)
    return np.stack(out, axis=-2)


def np_gru(x, Wx, Wh, b, bhn, h):
    H = Wh.shape[1]
    h = np.zeros(x.shape[:-2] + (H,)) if h is None else h
    out = []
    for t in range(x.shape[-2]):
        gx = x[..., t, :] @ Wx.T + b
        gh = h @ Wh.T
        r = sigmoid(gx[..., :H] + gh[..., :H])
        z = sigmoid(gx[..., H:2 * H] + gh[..., H:2 * H])
        n = np.tanh(gx[..., 2 * H:] + r * (gh[..., 2 * H:] + bhn))
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out, axis=-2)


def np_lstm(x, Wx, Wh, b, h, c):
    H = Wh.shape[1]
    h = np.zeros(x.shape[:-2] + (H,)) if h is None else h
    c = np.zeros(x.shape[:-2] + (H,)) if c is None else c
    hs, cs = [], []
    for t in range(x.shape[-2]):
        g = x[..., t, :] @ Wx.T + h @ Wh.T + b
        i, f, o = sigmoid(g[..., :H]), sigmoid(g[..., H:2 * H]), sigmoid(g[..., 3 * H:])
        gg = np.tanh(g[..., 2 * H:3 * H])
        c = f * c + i * gg
        h = o * np.tanh(c)
        hs.append(h)
        cs.append(c)
    return np.stack(hs, axis=-2), np.stack(cs, axis=-2)


def test_rnn_parameters_and_steps():
    rnn = nn.RNN(4, 5)
    assert sorted(k for k, _ in tree_flatten(rnn.parameters())) == ["Whh", "Wxh", "bias"]
    assert rnn.Wxh.shape == (5, 4) and rnn.Whh.shape == (5, 5) and rnn.bias.shape == (5,)
    bound = 1 / np.sqrt(5)
    assert all(np.abs(npa(p)).max() <= bound for _, p in tree_flatten(rnn.parameters()))
    p = {k: npa(v) for k, v in tree_flatten(rnn.parameters())}
    close(rnn(mr.array(XS)), np_rnn(XS, p["Wxh"], p["Whh"], p["bias"], None), rtol=1e-5)
    close(rnn(mr.array(XS), hidden=mr.array(H0)), np_rnn(XS, p["Wxh"], p["Whh"], p["bias"], H0), rtol=1e-5)
    # unbatched (L, D), no bias, another nonlinearity
    rnn = nn.RNN(4, 5, bias=False, nonlinearity=nn.relu)
    assert "bias" not in rnn.parameters() and rnn.bias is None
    y = rnn(mr.array(XS[0]))
    assert y.shape == (3, 5)
    close(y, np_rnn(XS[0], npa(rnn.Wxh), npa(rnn.Whh), 0.0, None, act=lambda v: np.maximum(v, 0)), rtol=1e-5)
    _, grads = nn.value_and_grad(rnn, lambda m, x: m(x).sum())(rnn, mr.array(XS[0]))
    assert set(grads) == {"Wxh", "Whh"} and grads["Whh"].shape == (5, 5)
    with pytest.raises(ValueError, match="callable"):
        nn.RNN(4, 5, nonlinearity="tanh")
    with pytest.raises(ValueError, match="RNN"):
        nn.RNN(4, 5)(mr.zeros((3, 6)))


def test_gru_matches_numpy():
    gru = nn.GRU(4, 5)
    assert gru.Wx.shape == (15, 4) and gru.Wh.shape == (15, 5) and gru.b.shape == (15,) and gru.bhn.shape == (5,)
    args = [npa(gru.Wx), npa(gru.Wh), npa(gru.b), npa(gru.bhn)]
    close(gru(mr.array(XS)), np_gru(XS, *args, None), rtol=1e-5)
    close(gru(mr.array(XS), hidden=mr.array(H0)), np_gru(XS, *args, H0), rtol=1e-5)
    gru = nn.GRU(4, 5, bias=False)
    assert set(gru.parameters()) == {"Wx", "Wh"}
    close(gru(mr.array(XS[0])), np_gru(XS[0], npa(gru.Wx), npa(gru.Wh), 0.0, 0.0, None), rtol=1e-5)


def test_lstm_matches_numpy_with_hidden_and_cell():
    lstm = nn.LSTM(4, 5)
    assert lstm.Wx.shape == (20, 4) and lstm.Wh.shape == (20, 5) and lstm.bias.shape == (20,)
    args = [npa(lstm.Wx), npa(lstm.Wh), npa(lstm.bias)]
    h, c = lstm(mr.array(XS))
    hn, cn = np_lstm(XS, *args, None, None)
    close(h, hn, rtol=1e-5)
    close(c, cn, rtol=1e-5)
    h, c = lstm(mr.array(XS), hidden=mr.array(H0), cell=mr.array(C0))
    hn, cn = np_lstm(XS, *args, H0, C0)
    close(h, hn, rtol=1e-5)
    close(c, cn, rtol=1e-5)


def test_recurrent_grads_and_compile():
    lstm = nn.LSTM(4, 5)
    x = mr.array(XS)

    def loss(model, x):
        h, c = model(x)
        return (h * h).sum() + c.sum()

    value, grads = nn.value_and_grad(lstm, loss)(lstm, x)
    assert {k: g.shape for k, g in tree_flatten(grads)} == {k: p.shape for k, p in tree_flatten(lstm.parameters())}
    # finite differences along a random direction of Wh
    d = RNG.normal(size=lstm.Wh.shape).astype(np.float32)
    Wh, eps = lstm.Wh, 1e-2
    lstm.Wh = Wh + mr.array(eps * d)
    fp = float(loss(lstm, x))
    lstm.Wh = Wh - mr.array(eps * d)
    fm = float(loss(lstm, x))
    lstm.Wh = Wh
    np.testing.assert_allclose((fp - fm) / (2 * eps), float((npa(grads["Wh"]) * d).sum()), rtol=2e-3)
    # compiled forward and compiled value_and_grad agree with eager
    gru = nn.GRU(4, 5)
    close(mr.compile(lambda x: gru(x))(x), gru(x), rtol=1e-5)
    loss_and_grad = nn.value_and_grad(lstm, loss)
    step = mr.compile(lambda x: loss_and_grad(lstm, x), inputs=lstm.state)  # MLX's idiom
    v2, g2 = step(x)
    close(v2, value, rtol=1e-5)
    for (k, a), (_, b) in zip(tree_flatten(g2), tree_flatten(grads)):
        close(a, b, rtol=1e-4, atol=1e-5)


# ---- Upsample: interpolation matrices per axis, built in numpy --------------------------

def np_coords(N, s, align_corners):
    M = int(N * s)
    i = np.arange(M, dtype=np.float64)
    if align_corners:
        return i * (N - 1) / max(M - 1, 1)
    return (i + 0.5) * N / M - 0.5  # pixel centres (M = N * s exactly in these tests)


def np_linear_matrix(N, s, align_corners):
    u = np.clip(np_coords(N, s, align_corners), 0, N - 1)
    W = np.zeros((len(u), N))
    for r, v in enumerate(u):
        lo, hi = int(np.floor(v)), int(np.ceil(v))
        W[r, lo] += 1 - (v - lo)
        W[r, hi] += v - lo
    return W


def keys_cubic(d, a=-0.75):
    d = abs(d)
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    if d < 2:
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return 0.0


def np_cubic_matrix(N, s, align_corners):
    u = np_coords(N, s, align_corners)
    W = np.zeros((len(u), N))
    for r, v in enumerate(u):
        base = int(np.floor(v))
        for tap in range(base - 1, base + 3):
            W[r, min(max(tap, 0), N - 1)] += keys_cubic(v - tap)
    return W


def apply_2d(x, Wh, Ww):
    return np.einsum("ip,jq,bpqc->bijc", Wh, Ww, x)


IMG = RNG.normal(size=(1, 3, 4, 2)).astype(np.float32)


@pytest.mark.parametrize("mode,matrix", [("linear", np_linear_matrix), ("cubic", np_cubic_matrix)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_interpolation_matches_numpy(mode, matrix, align_corners):
    y = nn.Upsample(scale_factor=2, mode=mode, align_corners=align_corners)(mr.array(IMG))
    assert y.shape == (1, 6, 8, 2) and y.dtype == mr.float32
    close(y, apply_2d(IMG, matrix(3, 2, align_corners), matrix(4, 2, align_corners)), rtol=1e-5, atol=1e-5)


def test_upsample_nearest_and_examples():
    x = mr.arange(1, 5).reshape((1, 2, 2, 1))
    y = nn.Upsample(scale_factor=2)(x)
    assert y.dtype == mr.int32
    np.testing.assert_array_equal(npa(y)[0, :, :, 0], np.repeat(np.repeat([[1, 2], [3, 4]], 2, 0), 2, 1))
    # MLX's documented example: linear, corners aligned
    y = nn.Upsample(scale_factor=2, mode="linear", align_corners=True)(x).squeeze()
    close(y[0], [1, 4 / 3, 5 / 3, 2])
    close(y[:, 0], [1, 5 / 3, 7 / 3, 3])
    # per-axis factors: upscaling by 1.5 takes round((i + 0.5) * 3/4 - 0.5) = 0, 1, 1, 2 (half to
    # even), downscaling by 0.5 takes every other pixel
    z = nn.upsample_nearest(mr.array(IMG), (1.5, 0.5))
    np.testing.assert_array_equal(npa(z), IMG[:, [0, 1, 1, 2]][:, :, [0, 2]])
    # one spatial axis
    close(nn.upsample_linear(mr.array(IMG[:, 0]), (2.0,)),
          np.einsum("jq,bqc->bjc", np_linear_matrix(4, 2, False), IMG[:, 0]), rtol=1e-5)
    # downscale with corners aligned: one output pixel, the first input one
    close(nn.Upsample(scale_factor=0.5, mode="linear", align_corners=True)(x), [[[[1.0]]]])


def test_upsample_errors_and_grad():
    with pytest.raises(ValueError, match="unsupported"):
        nn.Upsample(2, mode="bilinear")
    with pytest.raises(ValueError, match="at least 3D"):
        nn.Upsample(2)(mr.zeros((4, 2)))
    with pytest.raises(ValueError, match="One scale per spatial"):
        nn.Upsample((2, 2, 2))(mr.zeros((1, 2, 2, 1)))
    with pytest.raises(ValueError, match="each spatial dimension"):
        nn.upsample_linear(mr.zeros((1, 2, 2, 1)), (2.0,))
    # linear upsampling is linear: its gradient of sum(w * y) is W^T w, per axis
    up = nn.Upsample(scale_factor=2, mode="linear")
    w = RNG.normal(size=(1, 6, 8, 2)).astype(np.float32)
    g = mr.grad(lambda x: (up(x) * mr.array(w)).sum())(mr.array(IMG))
    close(g, np.einsum("ip,jq,bijc->bpqc", np_linear_matrix(3, 2, False), np_linear_matrix(4, 2, False), w),
          rtol=1e-5, atol=1e-5)
    close(mr.compile(up)(mr.array(IMG)), up(mr.array(IMG)), rtol=1e-6)


# ---- pooling ------------------------------------------------------------------------------

def np_pool(x, k, s, p, kind):
    n = len(k)
    pad = [(0, 0)] + [(q, q) for q in p] + [(0, 0)]
    x = np.pad(x, pad, constant_values=-np.inf if kind == "max" else 0)
    sizes = x.shape[1:1 + n]
    outs = [(sz - kk) // ss + 1 for sz, kk, ss in zip(sizes, k, s)]
    y = np.zeros((x.shape[0], *outs, x.shape[-1]))
    for idx in np.ndindex(*outs):
        win = x[(slice(None),) + tuple(slice(i * ss, i * ss + kk) for i, ss, kk in zip(idx, s, k))]
        axes = tuple(range(1, n + 1))
        y[(slice(None),) + idx] = win.max(axis=axes) if kind == "max" else win.mean(axis=axes)
    return y


VOL = RNG.normal(size=(2, 4, 5, 3, 2)).astype(np.float32)


@pytest.mark.parametrize("cls,kind", [(nn.MaxPool3d, "max"), (nn.AvgPool3d, "avg")])
def test_pool3d_matches_numpy(cls, kind):
    close(cls(kernel_size=2)(mr.array(VOL)), np_pool(VOL, (2, 2, 2), (2, 2, 2), (0, 0, 0), kind))
    close(cls(kernel_size=(2, 3, 1), stride=(1, 2, 1), padding=(1, 1, 0))(mr.array(VOL)),
          np_pool(VOL, (2, 3, 1), (1, 2, 1), (1, 1, 0), kind))
    assert str(cls(kernel_size=3, stride=3, padding=1)) == \
        f"{cls.__name__}(kernel_size=(3, 3, 3), stride=(3, 3, 3), padding=(1, 1, 1))"
    with pytest.raises(ValueError, match="3 integer"):
        cls(kernel_size=(2, 2))
    with pytest.raises(ValueError, match="positive"):
        cls(kernel_size=2, stride=0)


def test_pool3d_grad_and_compile():
    x = mr.array(VOL)
    # the gradient of a non-overlapping max pool's sum is 1 at each window's maximum
    g = npa(mr.grad(lambda v: nn.MaxPool3d(2)(v).sum())(x))
    want = np.zeros_like(VOL)
    for b, i, j, k, c in np.ndindex(2, 2, 2, 1, 2):
        win = VOL[b, 2 * i:2 * i + 2, 2 * j:2 * j + 2, 2 * k:2 * k + 2, c]
        di, dj, dk = np.unravel_index(np.argmax(win), win.shape)
        want[b, 2 * i + di, 2 * j + dj, 2 * k + dk, c] = 1
    np.testing.assert_array_equal(g, want)
    pool = nn.AvgPool3d(kernel_size=2, stride=1)
    close(mr.compile(pool)(x), pool(x), rtol=1e-6)


def test_pool_defaults_stride_is_kernel():
    x = VOL[:, :, :, 0]  # (N, H, W, C)
    close(nn.MaxPool2d(2)(mr.array(x)), np_pool(x, (2, 2), (2, 2), (0, 0), "max"))
    close(nn.AvgPool1d(3, padding=1)(mr.array(x[:, 0])), np_pool(x[:, 0], (3,), (3,), (1,), "avg"))


# ---- ALiBi --------------------------------------------------------------------------------

def test_alibi_slopes_and_bias():
    slopes = nn.ALiBi.create_alibi_slope(8, mr.float32)
    assert slopes.shape == (8, 1, 1)
    close(slopes[:, 0, 0], [2.0 ** -(h + 1) for h in range(8)])
    # 6 heads: the 4-head slopes, then every other 8-head slope
    close(nn.ALiBi.create_alibi_slope(6, mr.float32)[:, 0, 0], [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])
    scores = RNG.normal(size=(2, 4, 3, 5)).astype(np.float32)
    i, j = np.arange(3)[:, None] + 2, np.arange(5)[None, :]
    want = scores - (np.array([2.0 ** (-2 * (h + 1)) for h in range(4)])[:, None, None] * np.abs(i - j))
    close(nn.ALiBi()(mr.array(scores), offset=2), want)
    mask = RNG.normal(size=(3, 5)).astype(np.float32)
    close(nn.ALiBi()(mr.array(scores), offset=2, mask=mr.array(mask)), want + mask)
    assert nn.ALiBi()(mr.array(scores).astype(mr.float16)).dtype == mr.float16
    close(mr.compile(lambda s: nn.ALiBi()(s, offset=2))(mr.array(scores)), want)
    with pytest.raises(ValueError, match="ALiBi"):
        nn.ALiBi()(mr.zeros((3, 3)))


# ---- Module methods -----------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
        self.steps = mr.array([1, 2], dtype=mr.int32)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_set_dtype_casts_floating_only():
    m = Net()
    m.set_dtype(mr.float16)
    assert m.layers[0].weight.dtype == mr.float16 and m.steps.dtype == mr.int32
    m.set_dtype(mr.float32, predicate=None)
    assert m.layers[2].bias.dtype == mr.float32 and m.steps.dtype == mr.float32
    m = Net()
    m.set_dtype(mr.float16, predicate=lambda d: d == mr.int32)
    assert m.steps.dtype == mr.float16 and m.layers[0].weight.dtype == mr.float32


def test_training_mode_goes_through_set_training_mode():
    seen = []

    class Probe(nn.Module):
        def _set_training_mode(self, mode):
            seen.append(mode)
            super()._set_training_mode(mode)

    m = nn.Sequential(Probe(), nn.Dropout(0.5))
    m.eval()
    assert seen == [False] and not m.layers[0].training and not m.layers[1].training
    m.train()
    assert seen == [False, True] and m.layers[1].training


def test_update_and_update_modules_bounds():
    m = nn.Sequential(nn.Linear(2, 2))
    w = mr.ones((2, 2))
    with pytest.raises(ValueError, match="out of bounds"):
        m.update({"layers": [{}, {"weight": w}]})
    m.update({"layers": [{"weight": w}, {"weight": w}]}, strict=False)
    assert m.layers[0].weight is w and len(m.layers) == 1
    m.load_weights([("layers.0.bias", mr.zeros((2,))), ("layers.1.weight", w)], strict=False)
    close(m.layers[0].bias, [0, 0])
    # {} leaves a module as it is; anything else that is not a module is an error
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    new = nn.Linear(2, 4)
    m.update_modules({"layers": [{}, new]})
    assert m.layers[1] is new
    with pytest.raises(ValueError, match="invalid type"):
        m.update_modules({"layers": [0, 1]})
    with pytest.raises(ValueError, match="out of bounds"):
        m.update_modules({"layers": [{}, {}, new]})


def test_module_methods_leave_no_reference_cycles():
    # a cycle would keep the parameters alive until the next gc pass (MLX's test_circular_leaks)
    gc.disable()
    try:
        m = nn.Sequential(nn.Linear(2, 2))
        ref = weakref.ref(m)
        m.update_modules({})
        m.update({"layers": [{}]})
        m.freeze(keys="bias", strict=True)
        m.train()
        del m
        assert ref() is None
    finally:
        gc.enable()


def test_freeze_strict_keys_are_checked_model_wide():
    m = Net()
    m.freeze(keys="bias", strict=True)  # in the Linears only, not in ReLU or Net
    assert sorted(k for k, _ in tree_flatten(m.trainable_parameters())) == ["layers.0.weight", "layers.2.weight",
                                                                             "steps"]
    with pytest.raises(KeyError, match="nope"):
        m.freeze(keys="nope", strict=True)
    m.unfreeze(keys=["bias"], strict=True)
    assert len(tree_flatten(m.trainable_parameters())) == 5
    with pytest.raises(KeyError):
        m.layers[0].freeze(keys="nope", recurse=False, strict=True)


def test_transforms_call_functions_with_the_module():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    x = mr.array([[1.0, -2.0]])
    g = mr.grad(lambda model: model.layers[0](x).sum())(m)
    assert isinstance(g, dict)
    close(g["layers"][0]["weight"], np.tile(npa(x), (3, 1)))
    out = mr.compile(lambda model, x: model(x))(m, x)
    close(out, m(x))


# ---- initializers -------------------------------------------------------------------------

def test_sparse_and_orthogonal_initializers():
    w = nn.init.sparse(sparsity=0.5, mean=3.0, std=0.1)(mr.zeros((4, 5)))
    wn = npa(w)
    assert w.shape == (4, 5) and w.dtype == mr.float32
    assert ((wn == 0).sum(axis=1) == 3).all()  # ceil(0.5 * 5) per row
    assert np.all(np.abs(wn[wn != 0] - 3.0) < 1.0)
    with pytest.raises(ValueError, match="2 dimensions"):
        nn.init.sparse(0.5)(mr.zeros((2, 2, 2)))
    for shape in [(3, 5), (5, 3)]:
        q = npa(nn.init.orthogonal(gain=2.0)(mr.zeros(shape)))
        small = q @ q.T if shape[0] < shape[1] else q.T @ q
        close(small, 4 * np.eye(3), atol=1e-5)
    with pytest.raises(ValueError, match="2D"):
        nn.init.orthogonal()(mr.zeros((4,)))


# ---- mirax.utils: MLX's tree functions ------------------------------------------------------

def test_tree_flatten_prefix_destination_and_unflatten():
    tree = {"a": [1, {"b": 2}], "c": (3, None)}
    flat = tree_flatten(tree)
    assert flat == [("a.0", 1), ("a.1.b", 2), ("c.0", 3), ("c.1", None)]
    assert tree_flatten([[[0]]], prefix=".hello") == [("hello.0.0.0", 0)]
    assert tree_flatten({"a": {"b": 1}}, destination={}) == {"a.b": 1}
    assert tree_flatten({"a": [1, 2]}, is_leaf=lambda x: isinstance(x, list)) == [("a", [1, 2])]
    with pytest.raises(ValueError, match="destination"):
        tree_flatten([1], destination=set())
    assert tree_unflatten(flat) == {"a": [1, {"b": 2}], "c": [3, None]}
    assert tree_unflatten({"hello.world": 42}) == {"hello": {"world": 42}}
    assert tree_unflatten([("1", "b"), ("3", "d")]) == [{}, "b", {}, "d"]
    assert tree_unflatten([("01", "a"), ("1", "b")]) == {"01": "a", "1": "b"}
    assert tree_unflatten([("", 5)]) == 5


def test_tree_map_reduce_merge():
    Pair = namedtuple("Pair", "x y")
    tree = {"p": Pair(1, 2), "l": [3]}
    assert tree_map(lambda a, b: a + b, tree, {"p": Pair(10, 20), "l": [30, 40], "extra": 0}) == \
        {"p": Pair(11, 22), "l": [33]}
    paths = tree_map_with_path(lambda path, v: path, tree)
    assert paths == {"p": Pair("p.0", "p.1"), "l": ["l.0"]}
    assert tree_map_with_path(lambda path, v: path, [1], path="root") == ["root.0"]
    assert tree_reduce(lambda acc, v: acc + v, {"a": [1, 2, 3], "b": [4, 5]}, 0) == 15
    assert tree_reduce(lambda acc, v: acc * v, [2, (3, 4)]) == 24
    assert tree_reduce(lambda acc, v: acc + len(v), {"a": [1, 2], "b": [3]}, 0,
                       is_leaf=lambda v: isinstance(v, list)) == 3
    assert tree_merge({"a": 1, "l": [1, {}]}, {"b": 2, "l": [None, 3]}) == {"a": 1, "b": 2, "l": [1, 3]}
    assert tree_merge(Pair(1, None), Pair(None, 2)) == Pair(1, 2)
    assert tree_merge({"a": 1}, {"a": 2}, lambda p, q: p * 10 + q) == {"a": 12}
    with pytest.raises(ValueError, match="merge function"):
        tree_merge({"a": 1}, {"a": 2})
    with pytest.raises(ValueError, match="Cannot merge"):
        tree_merge([], {})
