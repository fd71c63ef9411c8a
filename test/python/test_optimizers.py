"""mirax.optimizers: each update rule against a numpy transcription of its published
formula (as MLX states it), schedules against their formulas, clip_grad_norm, the
state tree, schedules as learning rates, and a least-squares fit.

Shapes are kept to (2, 3), (3,) and scalars so few kernels are compiled.
"""
import math

import numpy as np
import pytest

import mirax as mr
import mirax.optimizers as optim

STEPS = 3


# ---- helpers -----------------------------------------------------------------------------

def _problem(seed=0):
    """Parameters {"w": (2,3), "b": [(3,)]} and STEPS gradient trees, as numpy and mirax."""
    r = np.random.default_rng(seed)
    p = {"w": r.standard_normal((2, 3)).astype(np.float32), "b": [r.standard_normal(3).astype(np.float32)]}
    gs = [{"w": r.standard_normal((2, 3)).astype(np.float32), "b": [r.standard_normal(3).astype(np.float32)]}
          for _ in range(STEPS)]
    return p, gs


def _leaves(tree):
    return [tree["w"], tree["b"][0]]


def _to_mr(tree):
    return {"w": mr.array(tree["w"]), "b": [mr.array(tree["b"][0])]}


def _run(opt, ref_single, ref_init, seed=0, rtol=1e-5, atol=1e-6):
    """Run `opt` and the numpy rule side by side for STEPS steps, comparing each step."""
    p_np, gs = _problem(seed)
    params = _to_mr(p_np)
    ref_p = [x.astype(np.float64) for x in _leaves(p_np)]
    ref_s = [ref_init(x) for x in ref_p]
    for t in range(1, STEPS + 1):
        g = gs[t - 1]
        params = opt.apply_gradients(_to_mr(g), params)
        mr.eval(params, opt.state)
        for i, gi in enumerate(_leaves(g)):
            ref_p[i] = ref_single(gi.astype(np.float64), ref_p[i], ref_s[i], t)
        for got, want in zip(_leaves(params), ref_p):
            np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, err_msg=f"step {t}")
    assert int(opt.step) == STEPS
    return opt, ref_s


def _zeros(*names):
    return lambda p: {n: np.zeros_like(p) for n in names}


# ---- the update rules ----------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(momentum=0.9),
    dict(momentum=0.9, dampening=0.3),
    dict(momentum=0.8, nesterov=True),
    dict(momentum=0.9, weight_decay=0.1),
    dict(weight_decay=0.05),
])
def test_sgd(kw):
    lr, mu = 0.1, kw.get("momentum", 0.0)
    wd, tau, nest = kw.get("weight_decay", 0.0), kw.get("dampening", 0.0), kw.get("nesterov", False)

    def ref(g, p, s, t):
        g = g + wd * p
        if mu <= 0:
            return p - lr * g
        s["v"] = mu * s["v"] + (1 - tau) * g
        return p - lr * (g + mu * s["v"] if nest else s["v"])

    opt, ref_s = _run(optim.SGD(learning_rate=lr, **kw), ref, _zeros("v"))
    if mu > 0:
        np.testing.assert_allclose(np.asarray(opt.state["w"]["v"]), ref_s[0]["v"], rtol=1e-5, atol=1e-6)


def test_sgd_rejects_bad_nesterov():
    with pytest.raises(ValueError):
        optim.SGD(0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.SGD(0.1, momentum=0.9, dampening=0.1, nesterov=True)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_adam(bias_correction):
    lr, (b1, b2), eps = 0.05, (0.8, 0.95), 1e-8

    def ref(g, p, s, t):
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        if bias_correction:
            return p - (lr / (1 - b1 ** t)) * s["m"] / (np.sqrt(s["v"]) / np.sqrt(1 - b2 ** t) + eps)
        return p - lr * s["m"] / (np.sqrt(s["v"]) + eps)

    opt, ref_s = _run(optim.Adam(lr, betas=[b1, b2], eps=eps, bias_correction=bias_correction),
                      ref, _zeros("m", "v"))
    np.testing.assert_allclose(np.asarray(opt.state["b"][0]["v"]), ref_s[1]["v"], rtol=1e-5, atol=1e-7)


def test_adam_bias_correction_first_step_is_sign_like():
    # With bias correction, step 1 moves each weight by ~lr * sign(g).
    opt = optim.Adam(0.1, bias_correction=True)
    g = mr.array([3.0, -0.5, 2.0])
    new = opt.apply_gradients({"x": g}, {"x": mr.zeros((3,))})
    np.testing.assert_allclose(np.asarray(new["x"]), [-0.1, 0.1, -0.1], rtol=1e-4)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_adamw(bias_correction):
    lr, (b1, b2), eps, wd = 0.05, (0.9, 0.999), 1e-8, 0.1

    def ref(g, p, s, t):
        p = p * (1 - lr * wd)
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        if bias_correction:
            return p - (lr / (1 - b1 ** t)) * s["m"] / (np.sqrt(s["v"]) / np.sqrt(1 - b2 ** t) + eps)
        return p - lr * s["m"] / (np.sqrt(s["v"]) + eps)

    _run(optim.AdamW(lr, weight_decay=wd, bias_correction=bias_correction), ref, _zeros("m", "v"))


def test_adamw_default_weight_decay():
    assert optim.AdamW(1e-3).weight_decay == 0.01


def test_rmsprop():
    lr, a, eps = 0.01, 0.9, 1e-8

    def ref(g, p, s, t):
        s["v"] = a * s["v"] + (1 - a) * g * g
        return p - lr * g / (np.sqrt(s["v"]) + eps)

    _run(optim.RMSprop(lr, alpha=a, eps=eps), ref, _zeros("v"))


def test_adagrad():
    lr, eps = 0.1, 1e-8

    def ref(g, p, s, t):
        s["v"] = s["v"] + g * g
        return p - lr * g / (np.sqrt(s["v"]) + eps)

    _run(optim.Adagrad(lr, eps=eps), ref, _zeros("v"))


def test_adadelta():
    lr, rho, eps = 1.0, 0.9, 1e-6

    def ref(g, p, s, t):
        s["v"] = rho * s["v"] + (1 - rho) * g * g
        d = np.sqrt(s["u"] + eps) / np.sqrt(s["v"] + eps) * g
        s["u"] = rho * s["u"] + (1 - rho) * d * d
        return p - lr * d

    _run(optim.AdaDelta(lr, rho=rho, eps=eps), ref, _zeros("v", "u"))


def test_adamax():
    lr, (b1, b2), eps = 0.02, (0.9, 0.99), 1e-8

    def ref(g, p, s, t):
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = np.maximum(b2 * s["v"], np.abs(g))
        return p - lr * s["m"] / (s["v"] + eps)

    _run(optim.Adamax(lr, betas=[b1, b2], eps=eps), ref, _zeros("m", "v"))


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lion(wd):
    lr, (b1, b2) = 0.01, (0.9, 0.99)

    def ref(g, p, s, t):
        c = b1 * s["m"] + (1 - b1) * g
        s["m"] = b2 * s["m"] + (1 - b2) * g
        if wd > 0:
            p = (1 - lr * wd) * p
        return p - lr * np.sign(c)

    _run(optim.Lion(lr, betas=[b1, b2], weight_decay=wd), ref, _zeros("m"))


@pytest.mark.parametrize("kw", [dict(), dict(learning_rate=0.05, relative_step=False, beta_1=0.9, weight_decay=0.1)])
def test_adafactor(kw):
    eps1, eps2, clip, decay = 1e-30, 1e-3, 1.0, -0.8
    beta_1, wd = kw.get("beta_1"), kw.get("weight_decay", 0.0)

    def rms(x):
        return np.sqrt(np.mean(x * x))

    def init(p):
        s = ({"row": np.zeros(p.shape[:-1]), "col": np.zeros(p.shape[-1:])} if p.ndim >= 2
             else {"sq": np.zeros_like(p)})
        s["avg"] = np.zeros_like(p)
        return s

    def ref(g, p, s, t):
        step_size = min(1e-2, 1 / math.sqrt(t)) if kw.get("relative_step", True) else kw["learning_rate"]
        lr = max(eps2, rms(p)) * step_size
        b2 = 1.0 - t ** decay
        u = g * g + eps1
        if p.ndim >= 2:
            s["row"] = b2 * s["row"] + (1 - b2) * u.mean(-1)
            s["col"] = b2 * s["col"] + (1 - b2) * u.mean(-2)
            r = 1 / np.sqrt(s["row"] / s["row"].mean(-1, keepdims=True))
            c = 1 / np.sqrt(s["col"])
            u = np.outer(r, c) * g
        else:
            s["sq"] = b2 * s["sq"] + (1 - b2) * u
            u = g / np.sqrt(s["sq"])
        u = lr * (u / max(1.0, rms(u) / clip))
        if beta_1 is not None:
            s["avg"] = beta_1 * s["avg"] + (1 - beta_1) * u
            u = s["avg"]
        if wd:
            p = p - wd * lr * p
        return p - u

    opt, _ = _run(optim.Adafactor(**kw), ref, init, rtol=1e-4, atol=1e-6)
    assert opt.state["w"]["exp_avg_sq_row"].shape == (2,)
    assert opt.state["w"]["exp_avg_sq_col"].shape == (3,)
    assert opt.state["b"][0]["exp_avg_sq"].shape == (3,)


# ---- schedules -----------------------------------------------------------------------------

STEPS_TO_CHECK = [0, 1, 3, 10, 17, 40]


def _values(schedule, steps=STEPS_TO_CHECK):
    return [float(schedule(mr.array(s, mr.uint64))) for s in steps]


def test_exponential_decay():
    got = _values(optim.exponential_decay(0.1, 0.9))
    np.testing.assert_allclose(got, [0.1 * 0.9 ** s for s in STEPS_TO_CHECK], rtol=1e-5)
    assert float(optim.exponential_decay(0.1, 0.9)(2)) == pytest.approx(0.081, rel=1e-6)  # plain ints too


def test_step_decay():
    got = _values(optim.step_decay(0.1, 0.5, 10))
    np.testing.assert_allclose(got, [0.1 * 0.5 ** (s // 10) for s in STEPS_TO_CHECK], rtol=1e-6)


@pytest.mark.parametrize("end", [0.0, 0.01])
def test_cosine_decay(end):
    init, n = 0.1, 20
    got = _values(optim.cosine_decay(init, n, end))
    want = [end + (init - end) * 0.5 * (1 + math.cos(math.pi * min(s, n) / n)) for s in STEPS_TO_CHECK]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_cosine_decay_end_is_keyword():
    assert float(optim.cosine_decay(1.0, 10, end=0.5)(100)) == pytest.approx(0.5)


def test_linear_schedule():
    got = _values(optim.linear_schedule(0.0, 0.1, 10))
    np.testing.assert_allclose(got, [0.1 * min(s, 10) / 10 for s in STEPS_TO_CHECK], rtol=1e-6, atol=1e-8)
    got = _values(optim.linear_schedule(1.0, 0.5, 20))
    np.testing.assert_allclose(got, [1.0 - 0.5 * min(s, 20) / 20 for s in STEPS_TO_CHECK], rtol=1e-6)
    with pytest.raises(ValueError):
        optim.linear_schedule(0.0, 1.0, 0)


def test_join_schedules_boundaries():
    warm = optim.linear_schedule(0.0, 0.1, 10)
    cos = optim.cosine_decay(0.1, 20)
    const = lambda step: mr.array(0.003)  # noqa: E731
    sched = optim.join_schedules([warm, cos, const], [10, 30])
    steps = [0, 5, 9, 10, 11, 20, 29, 30, 31, 100]

    def want(s):
        if s < 10:
            return 0.1 * s / 10
        if s < 30:
            return 0.05 * (1 + math.cos(math.pi * min(s - 10, 20) / 20))
        return 0.003
    np.testing.assert_allclose(_values(sched, steps), [want(s) for s in steps], rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError):
        optim.join_schedules([warm, cos], [])
    with pytest.raises(ValueError):
        optim.join_schedules([], [])


# ---- schedules as learning rates -------------------------------------------------------------

def test_schedule_as_learning_rate_is_used_each_step():
    sched = optim.exponential_decay(0.5, 0.5)
    opt = optim.SGD(learning_rate=sched)
    assert float(opt.learning_rate) == pytest.approx(0.5)
    x = {"x": mr.array([1.0, 2.0, 3.0])}
    g = {"x": mr.array([1.0, 1.0, 1.0])}
    expected = np.array([1.0, 2.0, 3.0])
    for t in range(4):
        x = opt.apply_gradients(g, x)
        expected = expected - 0.5 * 0.5 ** t  # the step-t update uses schedule(t)
        np.testing.assert_allclose(np.asarray(x["x"]), expected, rtol=1e-6)
        assert float(opt.learning_rate) == pytest.approx(0.5 * 0.5 ** t)
    assert "learning_rate" in opt.state and int(opt.step) == 4


def test_learning_rate_setter_float_and_schedule():
    opt = optim.Adam(learning_rate=0.1)
    opt.learning_rate = 0.2
    assert opt.learning_rate.dtype == mr.float32 and float(opt.learning_rate) == pytest.approx(0.2)
    opt.learning_rate = optim.linear_schedule(0.0, 1.0, 10)
    opt.apply_gradients({"x": mr.ones((3,))}, {"x": mr.ones((3,))})
    opt.apply_gradients({"x": mr.ones((3,))}, {"x": mr.ones((3,))})
    assert float(opt.learning_rate) == pytest.approx(0.1)  # schedule(1), used by the 2nd update
    opt.learning_rate = 0.3  # a float replaces the schedule
    opt.apply_gradients({"x": mr.ones((3,))}, {"x": mr.ones((3,))})
    assert float(opt.learning_rate) == pytest.approx(0.3)


def test_mlx_docstring_examples():
    opt = optim.SGD(learning_rate=optim.exponential_decay(1e-1, 0.9))
    for _ in range(5):
        opt.update({}, {})
    assert float(opt.learning_rate) == pytest.approx(0.06561, rel=1e-5)
    opt = optim.SGD(learning_rate=optim.step_decay(1e-1, 0.9, 10))
    for _ in range(21):
        opt.update({}, {})
    assert float(opt.learning_rate) == pytest.approx(0.081, rel=1e-5)


# ---- clip_grad_norm ------------------------------------------------------------------------

def test_clip_grad_norm():
    g_np = {"w": np.array([[3.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32), "b": [np.array([0.0, 4.0, 0.0], np.float32)]}
    g = _to_mr(g_np)
    clipped, norm = optim.clip_grad_norm(g, max_norm=1.0)
    assert float(norm) == pytest.approx(5.0)
    scale = 1.0 / (5.0 + 1e-6)
    np.testing.assert_allclose(np.asarray(clipped["w"]), g_np["w"] * scale, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"][0]), g_np["b"][0] * scale, rtol=1e-6)
    total = math.sqrt(sum(float(np.sum(np.asarray(x) ** 2)) for x in _leaves(clipped)))
    assert total == pytest.approx(1.0, rel=1e-5)

    same, norm = optim.clip_grad_norm(g, max_norm=10.0)  # under the limit: unchanged
    assert float(norm) == pytest.approx(5.0)
    np.testing.assert_array_equal(np.asarray(same["w"]), g_np["w"])
    np.testing.assert_array_equal(np.asarray(same["b"][0]), g_np["b"][0])


def test_clip_grad_norm_integer_gradients_and_bad_max_norm():
    # as MLX: the factor is float32, so integer gradients come back scaled as float32
    clipped, norm = optim.clip_grad_norm({"a": mr.array([30, 40])}, max_norm=1.0)
    assert float(norm) == pytest.approx(50.0) and clipped["a"].dtype == mr.float32
    np.testing.assert_allclose(np.asarray(clipped["a"]), [0.6, 0.8], rtol=1e-5)
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm({"a": mr.array([1.0])}, max_norm=-1.0)


@pytest.mark.parametrize("make", [optim.RMSprop, optim.Adagrad, optim.AdaDelta])
def test_zero_epsilon_is_rejected(make):
    with pytest.raises(ValueError, match=">0"):
        make(learning_rate=0.1, eps=0.0)


def _newton_schulz5(x, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if tall else x


@pytest.mark.parametrize("kw", [dict(), dict(nesterov=False, weight_decay=0.0, ns_steps=3)])
def test_muon(kw):
    lr, mu, wd = 0.02, kw.get("momentum", 0.95), kw.get("weight_decay", 0.01)
    nesterov, steps = kw.get("nesterov", True), kw.get("ns_steps", 5)

    def ref(g, p, s, t):
        g = g + wd * p
        s["v"] = mu * s["v"] + (1 - mu) * g
        u = (1 - mu) * g + mu * s["v"] if nesterov else s["v"]
        if u.ndim < 2:  # vectors take the plain momentum step
            return p - lr * u
        return p - lr * max(1, u.shape[0] / u.shape[1]) ** 0.5 * _newton_schulz5(u, steps)

    _run(optim.Muon(lr, **kw), ref, _zeros("v"), rtol=1e-4, atol=1e-5)


def test_muon_orthogonalizes_and_flattens_higher_rank():
    # NS5 maps a matrix to roughly U V^T of its SVD: singular values pushed to about 1
    g = np.random.default_rng(3).standard_normal((3, 2, 2)).astype(np.float32)
    opt = optim.Muon(learning_rate=1.0, momentum=0.0, weight_decay=0.0, nesterov=False)
    p = opt.apply_gradients({"w": mr.array(g)}, {"w": mr.zeros((3, 2, 2))})["w"]
    assert p.shape == (3, 2, 2)
    sv = np.linalg.svd(-np.asarray(p).reshape(3, 4), compute_uv=False)
    assert np.all((sv > 0.6) & (sv < 1.25)), sv
    np.testing.assert_allclose(np.asarray(p).reshape(3, 4), -_newton_schulz5(g.reshape(3, 4), 5), rtol=1e-4, atol=1e-5)


# ---- the state tree -------------------------------------------------------------------------

def test_state_tree_structure():
    opt = optim.Adam(learning_rate=1e-2)
    assert set(opt.state) == {"step", "learning_rate"}
    assert opt.state["step"].dtype == mr.uint64 and int(opt.step) == 0
    params = {"w": mr.ones((2, 3)), "b": [mr.zeros((3,))]}
    opt.init(params)
    assert list(opt.state) == ["step", "learning_rate", "w", "b"]
    assert isinstance(opt.state["b"], list) and len(opt.state["b"]) == 1
    assert set(opt.state["w"]) == {"m", "v"} and opt.state["w"]["m"].shape == (2, 3)
    assert opt.state["b"][0]["v"].shape == (3,)

    slot_dict = opt.state["w"]
    old_m = slot_dict["m"]
    grads = {"w": mr.ones((2, 3)), "b": [mr.ones((3,))]}
    opt.apply_gradients(grads, params)
    # the containers stay; their leaves are replaced (what a compiled step needs)
    assert opt.state["w"] is slot_dict and slot_dict["m"] is not old_m
    assert int(opt.step) == 1

    leaves = mr.utils.tree_flatten(opt.state)
    assert [k for k, _ in leaves] == ["step", "learning_rate", "w.m", "w.v", "b.0.m", "b.0.v"]
    assert all(isinstance(v, mr.Array) for _, v in leaves)


def test_state_can_be_swapped_and_restored():
    p = {"x": mr.array([1.0, 2.0, 3.0])}
    g = {"x": mr.array([0.5, -1.0, 2.0])}
    a = optim.SGD(0.1, momentum=0.9)
    p1 = a.apply_gradients(g, p)
    saved = mr.utils.tree_map(lambda x: x, a.state)
    b = optim.SGD(0.1, momentum=0.9)
    b.state = saved
    np.testing.assert_allclose(np.asarray(a.apply_gradients(g, p1)["x"]), np.asarray(b.apply_gradients(g, p1)["x"]))


def test_parameters_may_be_a_superset_of_gradients():
    opt = optim.SGD(0.5)
    params = {"a": mr.array([1.0, 1.0, 1.0]), "frozen": mr.array([7.0, 7.0, 7.0])}
    new = opt.apply_gradients({"a": mr.array([1.0, 2.0, 3.0])}, params)
    assert list(new) == ["a"]
    np.testing.assert_allclose(np.asarray(new["a"]), [0.5, 0.0, -0.5])


# ---- update() on models -------------------------------------------------------------------------

class _TinyModule(dict):
    """A stand-in for mirax.nn.Module: a dict of arrays and children with update()."""

    def trainable_parameters(self):
        return {k: v.trainable_parameters() if isinstance(v, _TinyModule) else v for k, v in self.items()}

    def update(self, params):
        for k, v in params.items():
            if isinstance(self.get(k), _TinyModule):
                self[k].update(v)
            else:
                self[k] = v
        return self


def test_update_module_stand_in():
    model = _TinyModule(w=mr.array([1.0, 2.0, 3.0]), sub=_TinyModule(b=mr.array([0.0, 0.0, 0.0])))
    opt = optim.SGD(0.1)
    sub = model["sub"]
    opt.update(model, {"w": mr.array([1.0, 1.0, 1.0]), "sub": {"b": mr.array([-1.0, 0.0, 1.0])}})
    assert model["sub"] is sub
    np.testing.assert_allclose(np.asarray(model["w"]), [0.9, 1.9, 2.9], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(sub["b"]), [0.1, 0.0, -0.1], rtol=1e-6)


def test_update_plain_dict_and_list_in_place():
    model = {"layers": [{"w": mr.array([1.0, 1.0, 1.0])}, {"w": mr.array([2.0, 2.0, 2.0])}]}
    layer0 = model["layers"][0]
    grads = {"layers": [{"w": mr.array([1.0, 1.0, 1.0])}, {"w": mr.array([2.0, 2.0, 2.0])}]}
    optim.SGD(0.25).update(model, grads)
    assert model["layers"][0] is layer0
    np.testing.assert_allclose(np.asarray(model["layers"][0]["w"]), [0.75] * 3)
    np.testing.assert_allclose(np.asarray(model["layers"][1]["w"]), [1.5] * 3)


def test_multi_optimizer():
    params = {"w": mr.array([1.0, 1.0, 1.0]), "b": mr.array([1.0, 1.0, 1.0])}
    grads = {"w": mr.array([1.0, 1.0, 1.0]), "b": mr.array([1.0, 1.0, 1.0])}
    opt = optim.MultiOptimizer([optim.SGD(0.5), optim.SGD(0.1)], [lambda path, g: path.startswith("w")])
    opt.update(params, grads)
    np.testing.assert_allclose(np.asarray(params["w"]), [0.5] * 3)
    np.testing.assert_allclose(np.asarray(params["b"]), [0.9] * 3)
    assert len(opt.state["states"]) == 2 and "w" in opt.state["states"][0] and "b" in opt.state["states"][1]


def test_multi_optimizer_muon_for_matrices_with_parameterless_layers():
    import mirax.nn as nn
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    opt = optim.MultiOptimizer([optim.Muon(learning_rate=0.01), optim.AdamW(learning_rate=0.01)],
                               [lambda path, g: g.ndim >= 2])
    _, grads = nn.value_and_grad(model, lambda m, x: m(x).sum())(model, mr.ones((1, 3)))
    w, b = model.layers[0].weight, model.layers[0].bias
    opt.update(model, grads)
    assert not np.array_equal(np.asarray(w), np.asarray(model.layers[0].weight))
    assert not np.array_equal(np.asarray(b), np.asarray(model.layers[0].bias))
    assert "weight" in opt.state["states"][0]["layers"][0] and "bias" in opt.state["states"][1]["layers"][0]


# ---- training ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: optim.SGD(0.1, momentum=0.9),
    lambda: optim.Adam(0.1, bias_correction=True),
    lambda: optim.AdamW(optim.join_schedules([optim.linear_schedule(0.0, 0.1, 5), optim.cosine_decay(0.1, 200, 0.01)],
                                             [5]), weight_decay=0.0),
])
def test_least_squares_converges(make):
    r = np.random.default_rng(1)
    X = r.standard_normal((16, 3)).astype(np.float32)
    w_true = np.array([1.5, -2.0, 0.5], np.float32)
    y = X @ w_true + 0.3
    Xm, ym = mr.array(X), mr.array(y)

    def loss_fn(params, x, t):
        return mr.mean(mr.square(x @ params["w"] + params["b"] - t))

    params = {"w": mr.zeros((3,)), "b": mr.array(0.0)}
    opt = make()
    step = mr.value_and_grad(loss_fn)
    first = None
    for _ in range(100):
        loss, grads = step(params, Xm, ym)
        opt.update(params, grads)
        mr.eval(params, opt.state)
        first = float(loss) if first is None else first
    assert float(loss) < 1e-3 * first
    np.testing.assert_allclose(np.asarray(params["w"]), w_true, atol=5e-2)
    assert float(params["b"]) == pytest.approx(0.3, abs=5e-2)


def test_with_nn_linear():
    import mirax.nn as nn
    model = nn.Linear(3, 1)
    before = {k: np.asarray(v) for k, v in mr.utils.tree_flatten(model.trainable_parameters())}
    opt = optim.SGD(0.1, momentum=0.5)
    opt.init(model.trainable_parameters())
    assert set(opt.state) == {"step", "learning_rate", "weight", "bias"}
    x = mr.array(np.ones((4, 3), np.float32))
    _, grads = nn.value_and_grad(model, lambda inp: mr.sum(model(inp)))(x)
    opt.update(model, grads)
    after = dict(mr.utils.tree_flatten(model.trainable_parameters()))
    assert set(after) == set(before) == {"weight", "bias"}
    np.testing.assert_allclose(np.asarray(after["bias"]), before["bias"] - 0.1 * 4, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(after["weight"]), before["weight"] - 0.1 * 4, rtol=1e-5)


def test_state_captured_by_compile():
    r = np.random.default_rng(2)
    X = mr.array(r.standard_normal((16, 3)).astype(np.float32))
    y = mr.array(r.standard_normal(16).astype(np.float32))

    def loss_fn(params, x, t):
        return mr.mean(mr.square(x @ params["w"] + params["b"] - t))

    def make():
        params = {"w": mr.zeros((3,)), "b": mr.array(0.0)}
        opt = optim.Adam(optim.exponential_decay(0.1, 0.9), bias_correction=True)
        opt.init(params)
        return params, opt

    def train_step(params, opt, x, t):
        loss, grads = mr.value_and_grad(loss_fn)(params, x, t)
        opt.update(params, grads)
        return loss

    p_ref, o_ref = make()
    p_c, o_c = make()
    state = [p_c, o_c.state]
    compiled = mr.compile(lambda x, t: train_step(p_c, o_c, x, t), inputs=state, outputs=state)
    for _ in range(3):
        want = train_step(p_ref, o_ref, X, y)
        got = compiled(X, y)
        mr.eval(p_ref, o_ref.state)
        assert float(got) == pytest.approx(float(want), rel=1e-5)
        np.testing.assert_allclose(np.asarray(p_c["w"]), np.asarray(p_ref["w"]), rtol=1e-5, atol=1e-7)
    assert int(o_c.step) == 3
    assert float(o_c.learning_rate) == pytest.approx(0.1 * 0.9 ** 2, rel=1e-5)
    np.testing.assert_allclose(np.asarray(o_c.state["w"]["m"]), np.asarray(o_ref.state["w"]["m"]), rtol=1e-5)
