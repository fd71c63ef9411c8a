"""mirax.nn: Module trees, layers against numpy references, gradients against central
finite differences, losses, weights I/O.

Shapes are kept few on purpose: each distinct (op, shape, dtype) compiles a kernel once.
"""
import json
import math
import struct

import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
from mirax.utils import tree_flatten, tree_map, tree_unflatten

F64 = mr.float64


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def npa(x):
    return np.asarray(x)


@pytest.fixture(autouse=True)
def _seed():
    mr.random.seed(0)


X = np.random.default_rng(0).normal(size=(4, 6))  # the common input shape


def to64(model):
    return model.apply(lambda p: p.astype(F64) if p.dtype.kind == "f" else p)


def check_grads(model, fn, *args, n_dirs=2, eps=1e-6, rtol=1e-5):
    """nn.value_and_grad(model, fn) against central differences of fn along random
    directions of the trainable parameters (float64)."""
    value, grads = nn.value_and_grad(model, fn)(*args)
    params = model.trainable_parameters()
    flat = tree_flatten(params)
    gflat = dict(tree_flatten(grads))
    assert [k for k, _ in flat] == list(gflat)
    for (k, p) in flat:
        assert gflat[k].shape == p.shape, k
    close(value, fn(*args), rtol=1e-10)
    rng = np.random.default_rng(1)
    for _ in range(n_dirs):
        d = [(k, rng.normal(size=p.shape)) for k, p in flat]
        model.update(tree_unflatten([(k, p + mr.array(e * eps, F64)) for (k, p), (_, e) in zip(flat, d)]))
        fp = float(fn(*args))
        model.update(tree_unflatten([(k, p - mr.array(e * eps, F64)) for (k, p), (_, e) in zip(flat, d)]))
        fm = float(fn(*args))
        model.update(params)
        fd = (fp - fm) / (2 * eps)
        an = sum(float((npa(gflat[k]) * e).sum()) for k, e in d)
        assert abs(fd - an) <= rtol * max(1.0, abs(an)) + 1e-7, (fd, an)
    return grads


def sq_loss(model, *xs):
    w = mr.array(np.linspace(-1, 1, 24).reshape(4, 6), F64)  # weighs outputs of shape (4, 6)
    return lambda: (model(*xs) * w[..., :model(*xs).shape[-1]]).sum()


# ---- Module tree behaviour ---------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(6, 6), nn.Linear(6, 6)]
        self.norm = nn.LayerNorm(6)
        self.extra = {"scale": mr.ones((6,)), "blocks": [nn.Identity()]}
        self._private = mr.zeros((2,))
        self.name = "mlp"

    def __call__(self, x):
        x = nn.relu(self.layers[0](x))
        return self.norm(self.layers[1](x)) * self.extra["scale"]


def test_module_parameters_children_and_repr():
    m = MLP()
    p = m.parameters()
    assert set(p) == {"layers", "norm", "extra"}  # "_private" and plain attributes excluded
    assert [k for k, _ in tree_flatten(p)] == [
        "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
        "norm.weight", "norm.bias", "extra.scale"]
    assert m.layers[0].weight.shape == (6, 6) and m.name == "mlp" and "name" not in m
    ch = m.children()
    assert isinstance(ch["layers"][0], nn.Linear) and isinstance(ch["norm"], nn.LayerNorm)
    names = [k for k, _ in m.named_modules()]
    assert set(names) == {"", "layers.0", "layers.1", "norm", "extra.blocks.0"}
    assert len(m.modules()) == 5
    leaves = tree_flatten(m.leaf_modules(), is_leaf=nn.Module.is_module)
    assert len(leaves) == 4
    r = repr(m)
    assert r.startswith("MLP(\n") and "(layers.0): Linear(input_dims=6, output_dims=6, bias=True)" in r
    assert "(norm): LayerNorm(6, eps=1e-05, affine=True)" in r
    with pytest.raises(AttributeError):
        m.missing
    assert m.state is m


def test_module_update_apply_and_tree_node():
    m = MLP()
    new_w = mr.zeros((6, 6))
    m.update({"layers": [{}, {"weight": new_w}]})
    assert m.layers[1].weight is new_w
    with pytest.raises(ValueError):
        m.update({"nope": mr.zeros((1,))})
    m.update({"nope": mr.zeros((1,))}, strict=False)
    m.apply(lambda p: p.astype(mr.float16))
    assert m.layers[0].bias.dtype == mr.float16 and m._private.dtype == mr.float32
    # update_modules swaps layers
    m.update_modules({"layers": [nn.Linear(6, 6, bias=False), {}]})
    assert "bias" not in m.layers[0]
    # a Module is a tree node: its items, as a dict
    leaves = mr.tree.tree_leaves(m)
    assert all(isinstance(x, mr.Array) or isinstance(x, str) for x in leaves)
    doubled = tree_map(lambda x: x * 2, nn.Linear(2, 2).parameters())
    assert set(doubled) == {"weight", "bias"}
    lin = nn.Linear(2, 1)
    g = mr.grad(lambda m: (m["weight"] ** 2).sum())(lin)
    assert isinstance(g, dict) and set(g) == {"weight", "bias"}
    close(g["weight"], 2 * npa(lin.weight))


def test_freeze_unfreeze_and_train_eval():
    m = MLP()
    n_all = len(tree_flatten(m.trainable_parameters()))
    m.freeze()
    assert tree_flatten(m.trainable_parameters()) == []
    assert len(tree_flatten(m.parameters())) == n_all
    m.unfreeze(keys="bias")
    assert sorted(k for k, _ in tree_flatten(m.trainable_parameters())) == [
        "layers.0.bias", "layers.1.bias", "norm.bias"]
    m.unfreeze()
    m.layers[0].freeze(keys=["weight"])
    assert len(tree_flatten(m.trainable_parameters())) == n_all - 1
    m.freeze(recurse=False)  # only the module's own arrays ("extra.scale")
    assert "extra" not in tree_unflatten(tree_flatten(m.trainable_parameters()))
    assert m.training and m.layers[0].training
    m.eval()
    assert not m.training and not m.layers[1].training and not m.extra["blocks"][0].training
    m.train()
    assert m.norm.training
    # frozen parameters get no gradient
    lin = to64(nn.Linear(6, 3))
    lin.freeze(keys="bias")
    x = mr.array(X, F64)
    _, g = nn.value_and_grad(lin, lambda x: lin(x).sum())(x)
    assert set(g) == {"weight"}
    close(g["weight"], np.broadcast_to(X.sum(0), (3, 6)))


def test_save_load_npz_and_safetensors(tmp_path):
    m = MLP()
    m.layers[1].weight = m.layers[1].weight.astype(mr.float16)
    for ext in ("npz", "safetensors"):
        f = str(tmp_path / f"w.{ext}")
        m.save_weights(f)
        m2 = MLP()
        m2.load_weights(f)
        for (k, a), (k2, b) in zip(tree_flatten(m.parameters()), tree_flatten(m2.parameters())):
            assert k == k2 and a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(npa(a), npa(b))
    # the safetensors layout: u64 header size, JSON header, raw little-endian data
    raw = open(tmp_path / "w.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n])
    info = header["layers.1.weight"]
    assert info["dtype"] == "F16" and info["shape"] == [6, 6]
    b, e = info["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(raw[8 + n + b:8 + n + e], "<f2").reshape(6, 6),
                                  npa(m.layers[1].weight))
    # strictness
    small = nn.Linear(6, 6)
    with pytest.raises(ValueError, match="not in model"):
        small.load_weights(str(tmp_path / "w.npz"))
    with pytest.raises(ValueError, match="Missing"):
        small.load_weights([("weight", mr.zeros((6, 6)))])
    with pytest.raises(ValueError, match="shape"):
        small.load_weights([("weight", mr.zeros((6, 6))), ("bias", mr.zeros((3,)))])
    small.load_weights([("weight", mr.zeros((6, 6)))], strict=False)
    assert not npa(small.weight).any()
    with pytest.raises(ValueError, match="extension"):
        small.save_weights(str(tmp_path / "w.bin"))


def test_safetensors_dtypes_roundtrip(tmp_path):
    from mirax.nn import _io
    arrays = {"b": mr.array([[1.5, -2.25]], mr.bfloat16), "i": mr.array([1, -2, 3], mr.int64),
              "t": mr.array([True, False]), "u": mr.array([7], mr.uint8)}
    f = str(tmp_path / "a.safetensors")
    _io.save_safetensors(f, arrays, metadata={"format": "mlx"})
    back, meta = _io.load_safetensors(f, return_metadata=True)
    assert meta == {"format": "mlx"}
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape
        np.testing.assert_array_equal(npa(back[k]), npa(a))


# ---- layers: forward against numpy, gradients against finite differences -------------------

def test_linear_and_init_ranges():
    lin = to64(nn.Linear(6, 6))
    w, b = npa(lin.weight), npa(lin.bias)
    s = 1 / math.sqrt(6)
    assert w.shape == (6, 6) and b.shape == (6,) and np.abs(w).max() <= s and np.abs(b).max() <= s
    assert np.abs(w).max() > 0.8 * s
    x = mr.array(X, F64)
    close(lin(x), X @ w.T + b)
    assert "bias" not in nn.Linear(6, 6, bias=False)
    check_grads(lin, sq_loss(lin, x))


def test_bilinear():
    bl = to64(nn.Bilinear(6, 3, 6))
    x1, x2 = mr.array(X, F64), mr.array(X[:, :3] * 0.5, F64)
    w, b = npa(bl.weight), npa(bl.bias)
    ref = np.einsum("ni,oji,nj->no", X, w, X[:, :3] * 0.5) + b
    close(bl(x1, x2), ref)
    assert np.abs(w).max() <= 1 / math.sqrt(6)
    check_grads(bl, sq_loss(bl, x1, x2))


def test_embedding_identity_sequential():
    emb = to64(nn.Embedding(10, 6))
    assert emb.weight.shape == (10, 6)
    idx = mr.array([[1, 3, 3, 9], [0, 0, 2, 4], [5, 6, 7, 8], [1, 1, 1, 1]])
    close(emb(idx), npa(emb.weight)[npa(idx)])
    x = mr.array(X, F64)
    close(emb.as_linear(x), X @ npa(emb.weight).T)
    check_grads(emb, lambda: (emb(idx[:, :1].reshape(4)) * x).sum())
    assert nn.Identity(3, foo=1)(x) is x
    seq = to64(nn.Sequential(nn.Linear(6, 6), nn.Tanh(), lambda y: y * 2, nn.Linear(6, 6)))
    l0, l3 = seq.layers[0], seq.layers[3]
    ref = (2 * np.tanh(X @ npa(l0.weight).T + npa(l0.bias))) @ npa(l3.weight).T + npa(l3.bias)
    close(seq(x), ref)
    check_grads(seq, sq_loss(seq, x))


def _np_ln(x, axis=-1, eps=1e-5):
    return (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + eps)


def test_layer_norm_rms_norm():
    x = mr.array(X, F64)
    ln = to64(nn.LayerNorm(6))
    ln.update({"weight": mr.array(np.linspace(0.5, 1.5, 6), F64), "bias": mr.array(np.linspace(-1, 1, 6), F64)})
    close(ln(x), _np_ln(X) * np.linspace(0.5, 1.5, 6) + np.linspace(-1, 1, 6))
    check_grads(ln, sq_loss(ln, x))
    assert set(nn.LayerNorm(6, affine=False).parameters()) == set()
    assert set(nn.LayerNorm(6, bias=False).parameters()) == {"weight"}
    rms = to64(nn.RMSNorm(6))
    rms.weight = mr.array(np.linspace(0.5, 1.5, 6), F64)
    close(rms(x), X / np.sqrt((X ** 2).mean(-1, keepdims=True) + 1e-5) * np.linspace(0.5, 1.5, 6))
    check_grads(rms, sq_loss(rms, x))
    # half precision normalizes in float32
    y = nn.LayerNorm(6, affine=False)(mr.array(X, mr.float16))
    assert y.dtype == mr.float16
    close(y, _np_ln(X), rtol=1e-2, atol=1e-2)


def test_group_norm_instance_norm():
    xs = np.random.default_rng(2).normal(size=(2, 3, 4)) * 2 + 1
    x = mr.array(xs, F64)
    gn = to64(nn.GroupNorm(2, 4))
    gn.update({"weight": mr.array([1.0, 2.0, 3.0, 4.0], F64), "bias": mr.array([0.0, 1.0, 0.0, -1.0], F64)})
    # MLX's grouping: channel c belongs to group c % num_groups
    g = xs.reshape(2, -1, 2)
    ref = _np_ln(g.reshape(2, -1, 2).transpose(0, 2, 1).reshape(2, 2, -1)).reshape(2, 2, -1).transpose(0, 2, 1)
    ref = ref.reshape(2, 3, 4) * [1, 2, 3, 4] + [0, 1, 0, -1]
    close(gn(x), ref)
    check_grads(gn, lambda: (gn(x) * x).sum())
    gp = nn.GroupNorm(2, 4, pytorch_compatible=True, affine=False)
    grp = xs.reshape(2, 3, 2, 2).transpose(0, 2, 1, 3).reshape(2, 2, -1)
    ref = _np_ln(grp).reshape(2, 2, 3, 2).transpose(0, 2, 1, 3).reshape(2, 3, 4)
    close(gp(x), ref)
    inn = nn.InstanceNorm(4)
    close(inn(x), _np_ln(xs, axis=1))


def test_batch_norm_running_stats_and_grads():
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(4, 6)) * 3 + 2
    x = mr.array(xs, F64)
    bn = to64(nn.BatchNorm(6, momentum=0.25))
    assert set(bn.trainable_parameters()) == {"weight", "bias"}
    assert set(bn.parameters()) == {"weight", "bias", "running_mean", "running_var"}
    y = bn(x)
    close(y, _np_ln(xs, axis=0))
    close(bn.running_mean, 0.25 * xs.mean(0))
    close(bn.running_var, 0.75 + 0.25 * xs.var(0, ddof=1))
    # under nn.value_and_grad the running stats are updated (not leaked as traced values)
    before = npa(bn.running_mean)
    check_grads(bn, lambda: (bn(x) * x).sum(), n_dirs=1)
    assert not np.allclose(npa(bn.running_mean), before)
    mr.eval(bn.running_mean, bn.running_var)
    bn.unfreeze()
    assert set(bn.trainable_parameters()) == {"weight", "bias"}
    bn.eval()
    rm, rv = npa(bn.running_mean), npa(bn.running_var)
    close(bn(x), (xs - rm) / np.sqrt(rv + 1e-5))
    close(bn.running_mean, rm)  # eval does not update
    x3 = mr.array(xs.reshape(2, 2, 6), F64)
    bn3 = nn.BatchNorm(6, affine=False, track_running_stats=False)
    close(bn3(x3), _np_ln(xs, axis=0).reshape(2, 2, 6))
    assert set(bn3.parameters()) == set()


def test_dropout_is_one_kernel_with_the_compositions_values(tmp_path, monkeypatch):
    """Eager Dropout's mask, product and scale are one kernel (`@fused`), one pass over x,
    and give the values of the ops one by one from the same key (the traced form)."""
    from mirax.nn.layers.dropout import _dropped
    from mirax.runtime import cpu
    monkeypatch.setenv("MIRAX_CACHE_DIR", str(tmp_path))  # (compiles counted, not disk hits)
    x = mr.array(np.random.default_rng(0).standard_normal((37, 19)).astype(np.float32))
    k = mr.random.key(11)
    mr.eval(k, x)
    before = cpu.stats.compiles
    y = npa(_dropped(k, x, 0.7, (37, 19)))
    assert cpu.stats.compiles - before == 1
    np.testing.assert_array_equal(y, npa(_dropped.composition(k, x, 0.7, (37, 19))))
    assert set(np.unique(y[y != 0] / npa(x)[y != 0]).round(5)) == {np.float32(1 / 0.7).round(5)}


def test_dropout_statistics_and_eval_identity():
    d = nn.Dropout(0.25)
    x = mr.ones((100, 100))
    y = npa(d(x))
    kept = y != 0
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs(kept.mean() - 0.75) < 0.02
    y2 = npa(d(x))
    assert (y2 != y).any()  # the global key advanced
    mr.random.seed(5)
    a = npa(d(x))
    mr.random.seed(5)
    np.testing.assert_array_equal(a, npa(d(x)))
    d.eval()
    assert d(x) is x
    assert nn.Dropout(0.0)(x) is x
    with pytest.raises(ValueError):
        nn.Dropout(1.0)
    d2 = nn.Dropout2d(0.5)
    m = npa(d2(mr.ones((2, 3, 3, 40))))
    assert (m == m[:, :1, :1, :]).all() and 0 < (m[0, 0, 0] != 0).mean() < 1
    assert repr(d) == "Dropout(p=0.25)"
    # gradients through dropout under nn.value_and_grad: the traced call draws the same
    # mask as an eager call from the same global key, and the key advances
    model = to64(nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5)))
    xg = mr.array(X, F64)
    mr.random.seed(7)
    y = npa(model(xg))
    mr.random.seed(7)
    _, g = nn.value_and_grad(model, lambda x: model(x).sum())(xg)
    close(g["layers"][0]["bias"], 2 * (y != 0).sum(0))
    k_after = npa(mr.random.state[0])
    mr.random.seed(7)
    model(xg)
    np.testing.assert_array_equal(npa(mr.random.state[0]), k_after)


def test_multi_head_attention():
    rng = np.random.default_rng(4)
    q = rng.normal(size=(2, 3, 6))
    kv = rng.normal(size=(2, 4, 6))
    mha = to64(nn.MultiHeadAttention(6, 2, bias=True))
    assert set(mha.parameters()) == {"query_proj", "key_proj", "value_proj", "out_proj"}
    P = {k: (npa(v["weight"]), npa(v["bias"])) for k, v in mha.parameters().items()}

    def ref(q, k, v, mask=None):
        lin = lambda n, x: x @ P[n][0].T + P[n][1]  # noqa: E731
        Q, K, V = lin("query_proj", q), lin("key_proj", k), lin("value_proj", v)
        h = lambda t: t.reshape(*t.shape[:-1], 2, 3).transpose(0, 2, 1, 3)  # noqa: E731
        Q, K, V = h(Q), h(K), h(V)
        s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(3)
        if mask is not None:
            s = s + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ V
        o = o.transpose(0, 2, 1, 3).reshape(2, -1, 6)
        return lin("out_proj", o)

    Q, KV = mr.array(q, F64), mr.array(kv, F64)
    close(mha(Q, KV, KV), ref(q, kv, kv))
    cm = nn.MultiHeadAttention.create_additive_causal_mask(3)
    assert cm.dtype == mr.float32
    cmn = npa(cm)
    assert cmn[0, 1] < -1e38 and cmn[1, 0] == 0 and cmn[2, 2] == 0
    Q3 = Q
    mask64 = np.triu(np.full((3, 3), -1e9), 1)
    close(mha(Q3, Q3, Q3, mask=mr.array(mask64, F64)), ref(q, q, q, mask64))
    close(mha(Q3, Q3, Q3, mask="causal"), ref(q, q, q, mask64))
    close(mha(Q3, Q3, Q3, mask=mr.array(np.tril(np.ones((3, 3), bool)))), ref(q, q, q, mask64))
    check_grads(mha, lambda: (mha(Q, KV, KV) * Q).sum(), n_dirs=1)


def test_transformer_encoder_smoke():
    enc = to64(nn.TransformerEncoder(num_layers=1, dims=6, num_heads=2, mlp_dims=6))
    x = mr.array(X[:3].reshape(1, 3, 6), F64)
    y = enc(x, mask="causal")
    assert y.shape == (1, 3, 6) and np.isfinite(npa(y)).all()
    assert len(tree_flatten(enc.parameters())) == 4 + 2 * 4 + 2  # attention, 2 LayerNorms + 2 Linears, ln




def _np_conv(x, w, stride, pad):
    """Channels-last cross-correlation: x (N, *S, C), w (O, *K, C)."""
    nd = x.ndim - 2
    x = np.pad(x, [(0, 0)] + [(pad[i], pad[i]) for i in range(nd)] + [(0, 0)])
    K = w.shape[1:-1]
    out_sp = [(x.shape[1 + i] - K[i]) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((x.shape[0], *out_sp, w.shape[0]))
    for pos in np.ndindex(*out_sp):
        sl = tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + K[i]) for i in range(nd))
        patch = x[(slice(None),) + sl + (slice(None),)]
        out[(slice(None),) + pos + (slice(None),)] = np.tensordot(patch, w, axes=(list(range(1, nd + 2)),
                                                                                   list(range(1, nd + 2))))
    return out


def test_conv1d_conv2d():
    rng = np.random.default_rng(5)
    c1 = to64(nn.Conv1d(3, 4, 3, stride=2, padding=1))
    assert c1.weight.shape == (4, 3, 3) and not npa(c1.bias).any()
    assert np.abs(npa(c1.weight)).max() <= 1 / 3
    x1 = rng.normal(size=(2, 7, 3))
    c1.bias = mr.array([0.1, 0.2, 0.3, 0.4], F64)
    close(c1(mr.array(x1, F64)), _np_conv(x1, npa(c1.weight), (2,), (1,)) + npa(c1.bias))
    c2 = to64(nn.Conv2d(3, 4, (3, 2), padding=(1, 0)))
    assert c2.weight.shape == (4, 3, 2, 3)
    x2 = rng.normal(size=(2, 5, 4, 3))
    close(c2(mr.array(x2, F64)), _np_conv(x2, npa(c2.weight), (1, 1), (1, 0)))
    check_grads(c2, lambda: (c2(mr.array(x2, F64)) ** 2).sum(), n_dirs=1)
    assert "Conv2d(3, 4, kernel_size=(3, 2)" in repr(c2)


# ---- activations ---------------------------------------------------------------------------

def _sp(x):
    return np.logaddexp(x, 0)


def _erf(x):
    return np.vectorize(math.erf)(x)


ACTS = {
    "relu": (nn.relu, nn.ReLU, lambda x: np.maximum(x, 0)),
    "relu6": (nn.relu6, nn.ReLU6, lambda x: np.clip(x * 4, 0, 6) / 4),
    "gelu": (nn.gelu, nn.GELU, lambda x: x * (1 + _erf(x / np.sqrt(2))) / 2),
    "gelu_approx": (nn.gelu_approx, lambda: nn.GELU("tanh"),
                    lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "gelu_fast_approx": (nn.gelu_fast_approx, lambda: nn.GELU("fast"), lambda x: x / (1 + np.exp(-1.702 * x))),
    "silu": (nn.silu, nn.SiLU, lambda x: x / (1 + np.exp(-x))),
    "sigmoid": (nn.sigmoid, nn.Sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (nn.tanh, nn.Tanh, np.tanh),
    "softplus": (nn.softplus, nn.Softplus, _sp),
    "leaky_relu": (nn.leaky_relu, nn.LeakyReLU, lambda x: np.where(x > 0, x, 0.01 * x)),
    "elu": (nn.elu, nn.ELU, lambda x: np.where(x > 0, x, np.expm1(x))),
    "selu": (nn.selu, nn.SELU, lambda x: 1.0507 * np.where(x > 0, x, 1.67326 * np.expm1(x))),
    "mish": (nn.mish, nn.Mish, lambda x: x * np.tanh(_sp(x))),
    "log_softmax": (nn.log_softmax, nn.LogSoftmax, lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True))),
    "softmax": (nn.softmax, nn.Softmax, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    "hardswish": (nn.hardswish, nn.Hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "log_sigmoid": (nn.log_sigmoid, nn.LogSigmoid, lambda x: -_sp(-x)),
    "softsign": (nn.softsign, nn.Softsign, lambda x: x / (1 + np.abs(x))),
    "celu": (nn.celu, nn.CELU, lambda x: np.maximum(x, 0) + np.expm1(np.minimum(x, 0))),
}


def test_activations_forward_and_grad():
    xs = X * 2
    x = mr.array(xs, F64)
    for name, (f, cls, ref) in ACTS.items():
        xin = x * 4 if name == "relu6" else x
        close(f(xin) if name != "relu6" else f(xin) / 4, ref(xs), rtol=1e-6, atol=1e-7)
        close(cls()(x) if name != "relu6" else cls()(xin) / 4, ref(xs), rtol=1e-6, atol=1e-7)
    # gradients of the smooth ones (functions of x) against central differences
    rng = np.random.default_rng(6)
    d = rng.normal(size=xs.shape)
    eps = 1e-6
    for name in ["gelu", "gelu_approx", "silu", "softplus", "mish", "log_softmax", "selu", "elu"]:
        f = ACTS[name][0]
        g = mr.grad(lambda x: (f(x) * mr.array(xs, F64)).sum())(x)
        fp = float((f(mr.array(xs + eps * d, F64)) * mr.array(xs, F64)).sum())
        fm = float((f(mr.array(xs - eps * d, F64)) * mr.array(xs, F64)).sum())
        assert abs((fp - fm) / (2 * eps) - float((npa(g) * d).sum())) < 1e-5, name
    close(nn.glu(x), xs[:, :3] / (1 + np.exp(-xs[:, 3:])))
    close(nn.step(x), (xs >= 0).astype(np.int32))
    pr = nn.PReLU()
    close(pr(mr.array(xs, mr.float32)), np.where(xs > 0, xs, 0.25 * xs), rtol=1e-6)
    assert nn.gelu(mr.array(X, mr.float32)).dtype == mr.float32


# ---- losses ----------------------------------------------------------------------------------

def _red(v, reduction):
    return {"none": v, "mean": v.mean(), "sum": v.sum()}[reduction]


def _np_log_softmax(z, axis=-1):
    z = z - z.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_losses(reduction):
    L = nn.losses
    rng = np.random.default_rng(7)
    logits = X * 3
    tgt = np.array([0, 5, 2, 3])
    probs = np.exp(_np_log_softmax(rng.normal(size=(4, 6))))
    lg, tg, pb = mr.array(logits, F64), mr.array(tgt), mr.array(probs, F64)
    lsm = _np_log_softmax(logits)
    r = reduction
    close(L.cross_entropy(lg, tg, reduction=r), _red(-lsm[np.arange(4), tgt], r))
    close(L.cross_entropy(lg, pb, reduction=r), _red(-(lsm * probs).sum(-1), r))
    w = np.array([1.0, 0.5, 2.0, 0.0])
    close(L.cross_entropy(lg, tg, weights=mr.array(w, F64), reduction=r), _red(-lsm[np.arange(4), tgt] * w, r))
    ls = 0.1
    sm = (1 - ls) * -lsm[np.arange(4), tgt] + ls * -lsm.mean(-1)
    close(L.cross_entropy(lg, tg, label_smoothing=ls, reduction=r), _red(sm, r))
    lsm0 = _np_log_softmax(logits, axis=0)
    t0 = np.array([0, 3, 1, 2, 0, 1])
    close(L.cross_entropy(lg, mr.array(t0), axis=0, reduction=r), _red(-lsm0[t0, np.arange(6)], r))
    close(L.nll_loss(mr.array(lsm, F64), tg, reduction=r), _red(-lsm[np.arange(4), tgt], r))
    y01 = (rng.random(size=(4, 6)) > 0.5).astype(np.float64)
    sig = 1 / (1 + np.exp(-logits))
    bce = -(y01 * np.log(sig) + (1 - y01) * np.log(1 - sig))
    close(L.binary_cross_entropy(lg, mr.array(y01, F64), reduction=r), _red(bce, r))
    close(L.binary_cross_entropy(mr.array(sig, F64), mr.array(y01, F64), with_logits=False, reduction=r),
          _red(bce, r))
    p, t = X, X[::-1] * 0.7
    P, T = mr.array(p, F64), mr.array(t, F64)
    close(L.mse_loss(P, T, reduction=r), _red((p - t) ** 2, r))
    close(L.l1_loss(P, T, reduction=r), _red(np.abs(p - t), r))
    lq = _np_log_softmax(p)
    close(L.kl_div_loss(mr.array(lsm, F64), mr.array(lq, F64), reduction=r), _red((np.exp(lq) * (lq - lsm)).sum(-1), r))
    dd = np.abs(p - t)
    close(L.smooth_l1_loss(P, T, beta=0.5, reduction=r), _red(np.where(dd < 0.5, 0.5 * dd ** 2 / 0.5, dd - 0.25), r))
    close(L.huber_loss(P, T, delta=0.5, reduction=r),
          _red(np.where(dd <= 0.5, 0.5 * dd ** 2, 0.5 * (dd - 0.25)), r))
    close(L.hinge_loss(P, mr.array(np.sign(t), F64), reduction=r), _red(np.maximum(0, 1 - p * np.sign(t)), r))
    close(L.log_cosh_loss(P, T, reduction=r), _red(np.log(np.cosh(p - t)), r))


def test_loss_defaults_errors_and_grads():
    L = nn.losses
    P, T = mr.array(X, F64), mr.array(X[::-1], F64)
    assert L.mse_loss(P, T).shape == () and L.cross_entropy(P, mr.array([0, 1, 2, 3])).shape == (4,)
    assert L.binary_cross_entropy(P, T).shape == ()
    with pytest.raises(ValueError, match="reduction"):
        L.mse_loss(P, T, reduction="avg")
    with pytest.raises(ValueError, match="shape"):
        L.cross_entropy(P, mr.array([0, 1]))
    with pytest.raises(ValueError, match="shape"):
        L.mse_loss(P, T[:2])
    # stable for large logits
    big = mr.array([[1000.0, 0.0]], F64)
    close(L.cross_entropy(big, mr.array([1])), [1000.0])
    close(L.binary_cross_entropy(mr.array([800.0], F64), mr.array([0.0], F64), reduction="none"), [800.0])
    # gradient of cross_entropy wrt logits: softmax - onehot
    tg = np.array([0, 5, 2, 3])
    g = mr.grad(lambda z: L.cross_entropy(z, mr.array(tg), reduction="sum"))(P)
    sm = np.exp(_np_log_softmax(X))
    close(g, sm - np.eye(6)[tg])


# ---- nn.init and nn.value_and_grad --------------------------------------------------------------

def test_init():
    a = mr.zeros((64, 32))
    close(nn.init.constant(0.5)(a), np.full((64, 32), 0.5))
    u = npa(nn.init.uniform(-2, 3)(a))
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.1
    n = npa(nn.init.normal(1.0, 2.0)(a))
    assert abs(n.mean() - 1) < 0.1 and abs(n.std() - 2) < 0.1
    close(nn.init.identity()(mr.zeros((3, 3))), np.eye(3))
    with pytest.raises(ValueError):
        nn.init.identity()(a)
    lim = math.sqrt(6 / 96)
    gu = npa(nn.init.glorot_uniform()(a))
    assert np.abs(gu).max() <= lim and np.abs(gu).max() > 0.9 * lim
    assert abs(npa(nn.init.glorot_normal()(a)).std() - math.sqrt(2 / 96)) < 0.01
    hu = npa(nn.init.he_uniform()(a, mode="fan_out"))
    assert np.abs(hu).max() <= math.sqrt(3 / 64) and np.abs(hu).max() > 0.9 * math.sqrt(3 / 64)
    assert abs(npa(nn.init.he_normal()(a)).std() - 1 / math.sqrt(32)) < 0.01
    w = nn.init.he_normal(mr.float64)(mr.zeros((4, 3, 3, 2)), gain=2.0)
    assert w.dtype == mr.float64 and w.shape == (4, 3, 3, 2)
    mr.random.seed(1)
    a1 = npa(nn.init.normal()(a))
    mr.random.seed(1)
    np.testing.assert_array_equal(a1, npa(nn.init.normal()(a)))


def test_value_and_grad_aux_kwargs_and_restore():
    m = to64(MLP())
    x = mr.array(X, F64)
    before = {k: v for k, v in tree_flatten(m.parameters())}

    def loss_fn(x, scale=1.0):
        y = m(x)
        return (y ** 2).sum() * scale, y.shape[0] * mr.ones(())

    (loss, aux), g = nn.value_and_grad(m, loss_fn)(x, scale=2.0)
    close(loss, 2 * float((m(x) ** 2).sum()), rtol=1e-12)
    close(aux, 4.0)
    for k, v in tree_flatten(m.parameters()):
        assert v is before[k]  # parameters restored
    assert [k for k, _ in tree_flatten(g)] == [k for k, _ in tree_flatten(m.trainable_parameters())]
    # one SGD step lowers the loss
    loss2 = lambda: loss_fn(x)[0]  # noqa: E731
    l0 = float(loss2())
    _, g = nn.value_and_grad(m, lambda x: loss_fn(x)[0])(x)
    m.update(tree_map(lambda p, g: p - 0.01 * g, m.trainable_parameters(), g))
    assert float(loss2()) < l0
    # checkpointed module: same gradients
    lin = to64(nn.Linear(6, 6))
    _, g1 = nn.value_and_grad(lin, lambda: (nn.tanh(lin(x)) ** 2).sum())()
    ck = nn.checkpoint(lin)
    _, g2 = nn.value_and_grad(lin, lambda: (nn.tanh(ck(x)) ** 2).sum())()
    close(g1["weight"], g2["weight"])
    close(g1["bias"], g2["bias"])


# ---- pooling, positional encodings, compile ------------------------------------------------------

def test_pooling():
    x = X.reshape(2, 4, 3)
    close(nn.MaxPool1d(2)(mr.array(x, F64)), x.reshape(2, 2, 2, 3).max(2))
    close(nn.AvgPool1d(2, stride=1)(mr.array(x, F64)), (x[:, :-1] + x[:, 1:]) / 2)
    x2 = X.reshape(1, 4, 6, 1)
    ref = np.full((1, 5, 7, 1), -np.inf)
    xp = np.pad(x2, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-np.inf)
    for i in range(5):
        for j in range(7):
            ref[0, i, j, 0] = xp[0, i:i + 2, j:j + 2, 0].max()
    close(nn.MaxPool2d(2, stride=1, padding=1)(mr.array(x2, F64)), ref)
    close(nn.AvgPool2d((2, 3))(mr.array(x2, F64)), x2.reshape(1, 2, 2, 2, 3, 1).mean((2, 4)))
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))"


def _np_rope(x, dims, traditional, base=10000.0, offset=0):
    L = x.shape[-2]
    inv = base ** (-np.arange(0, dims // 2) * 2.0 / dims)
    th = (np.arange(L) + offset)[:, None] * inv[None]
    c, s = np.cos(th), np.sin(th)
    y = x.copy()
    if traditional:
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2], y[..., 1:dims:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        h = dims // 2
        x1, x2 = x[..., :h], x[..., h:dims]
        y[..., :h], y[..., h:dims] = x1 * c - x2 * s, x1 * s + x2 * c
    return y


def test_positional_encodings():
    x = X.reshape(1, 4, 6)
    close(nn.RoPE(4)(mr.array(x, F64)), _np_rope(x, 4, False))
    close(nn.RoPE(6, traditional=True)(mr.array(x, F64), offset=3), _np_rope(x, 6, True, offset=3))
    pe = nn.SinusoidalPositionalEncoding(6)
    assert pe.parameters() == {}
    sig = np.exp(np.linspace(0, math.log(1e-4), 3))
    p = np.arange(4.0)[:, None] * sig
    close(pe(mr.arange(4)), np.concatenate([np.sin(p), np.cos(p)], -1) * math.sqrt(2 / 6), rtol=1e-5)


def test_compile_captures_module_state():
    model = to64(nn.Sequential(nn.Linear(6, 6), nn.BatchNorm(6)))
    ref = to64(nn.Sequential(nn.Linear(6, 6), nn.BatchNorm(6)))
    ref.update(model.parameters())
    x = mr.array(X, F64)

    def make_step(m):
        loss_and_grad = nn.value_and_grad(m, lambda x: (m(x) * x).sum())

        def step(x):
            loss, g = loss_and_grad(x)
            m.update(tree_map(lambda p, g: p - 0.1 * g, m.trainable_parameters(), g))
            return loss
        return step

    step = mr.compile(make_step(model), inputs=model.state, outputs=model.state)
    eager = make_step(ref)
    for _ in range(2):
        close(step(x), eager(x))
    for (k, a), (_, b) in zip(tree_flatten(model.parameters()), tree_flatten(ref.parameters())):
        close(a, b, rtol=1e-10)
