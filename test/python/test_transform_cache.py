"""The transform cache (mirax/transforms/cache.py): eager grad, value_and_grad, vjp, jvp,
vmap and nn.value_and_grad trace once per signature, and never compute with stale state:
closed-over arrays are read on every call, new shapes, dtypes, Python values and flags
retrace, value-dependent control flow and global random draws are not cached, nesting
still works, and the cache stays bounded."""
import collections
import gc
import weakref

import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim
from mirax.transforms import cache


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.fixture(autouse=True)
def fresh():
    saved = cache._JIT_AFTER[0], cache._CAPACITY[0]
    cache.clear()
    cache._JIT_AFTER[0] = 8
    yield
    cache._JIT_AFTER[0], cache._CAPACITY[0] = saved
    cache.clear()


def traces():
    return cache.cache_info()["traces"]


class Calls:
    """Counts the calls of a function body. (Not with a list: the cache keys the Python
    values a function reaches, so a list it appends to would change its key each call; a
    deque is opaque to it.)"""

    def __init__(self):
        self.log = collections.deque()

    def __call__(self):
        self.log.append(1)

    def __len__(self):
        return len(self.log)


# ---- the cache is used ---------------------------------------------------------------------

def test_second_call_skips_the_trace_and_the_pass():
    calls = Calls()

    def f(x):
        calls()
        return (x * x * x).sum()
    g = mr.grad(f)
    x = mr.array([1.0, 2.0])
    before = cache.cache_info()
    for _ in range(3):
        close(g(x), [3.0, 12.0])
    info = cache.cache_info()
    assert len(calls) == 1
    assert info["traces"] - before["traces"] == 1 and info["hits"] - before["hits"] == 2
    # a new wrapper of the same function (mr.grad(f) in a loop) hits the same entry
    close(mr.grad(f)(mr.array([3.0, 4.0])), [27.0, 48.0])
    assert len(calls) == 1


@pytest.mark.parametrize("transform", ["value_and_grad", "vjp", "jvp", "vmap"])
def test_every_transform_is_cached(transform):
    calls = Calls()

    def f(x):
        calls()
        return mr.sin(x) * 2.0

    def loss(x):  # (one function: a lambda written in `run` would be a new one each call)
        return f(x).sum()

    def run(x):
        if transform == "value_and_grad":
            return mr.value_and_grad(loss)(x)[1]
        if transform == "vjp":
            return mr.vjp(f, [x], [mr.ones_like(x)])[1][0]
        if transform == "jvp":
            return mr.jvp(f, [x], [mr.ones_like(x)])[1][0]
        return mr.vmap(f)(x)
    for k in range(3):
        x = mr.array(np.arange(4, dtype=np.float32) + k)
        want = (2 * np.sin(np.asarray(x)) if transform == "vmap" else 2 * np.cos(np.asarray(x)))
        close(run(x), want)
    assert len(calls) == 1


def test_the_compiled_tier_gives_the_same_results():
    cache._JIT_AFTER[0] = 2
    rng = np.random.default_rng(0)
    w = mr.array(rng.standard_normal((8, 8)).astype(np.float32))

    def loss(p, x):
        return mr.tanh(x @ p["w"] + p["b"]).sum() + (p["w"] ** 2).mean()
    g = mr.grad(loss)
    before = cache.cache_info()["compiled"]
    outs = []
    for k in range(5):
        p = {"w": w * (1 + k), "b": mr.array(np.full(8, 0.1 * k, np.float32))}
        x = mr.array(rng.standard_normal((4, 8)).astype(np.float32))
        got = g(p, x)
        with_uncached = _uncached(lambda: mr.grad(loss)(p, x))
        close(got["w"], with_uncached["w"], 1e-4)
        close(got["b"], with_uncached["b"], 1e-4)
        outs.append(got)
    assert cache.cache_info()["compiled"] == before + 1


def test_custom_functions_and_checkpoint_through_both_tiers():
    cache._JIT_AFTER[0] = 2

    @mr.custom_function
    def square(x):
        return x * x

    @square.vjp
    def square_vjp(primals, cotangent, output):
        return cotangent  # straight through

    def block(x):
        return mr.tanh(x @ mr.array([[1.0, 2.0], [3.0, 4.0]])) * x

    loss = lambda x: (square(mr.checkpoint(block)(x)) + block(x)).sum()  # noqa: E731
    g = mr.grad(loss)
    before = cache.cache_info()
    for k in range(5):  # replayed, then compiled
        x = mr.array([[0.1, -0.2], [0.3, 0.4]]) * (k + 1)
        close(g(x), _uncached(lambda: mr.grad(loss)(x)), 1e-5)
    after = cache.cache_info()
    assert after["compiled"] == before["compiled"] + 1 and after["compile_failed"] == before["compile_failed"]


def _uncached(fn):
    cache.set_enabled(False)
    try:
        out = fn()
        mr.eval(out)
        return out
    finally:
        cache.set_enabled(True)


# ---- state the function reads is never stale ------------------------------------------------

@pytest.mark.parametrize("size", [3, 200])  # a constant-sized array and a lifted one
def test_closed_over_arrays_are_inputs_not_constants(size):
    w = mr.array(np.ones(size, np.float32)) * 1.0  # lazy when first traced

    def f(x):
        return (x * w).sum()
    g = mr.grad(f)
    x = mr.array(np.ones(size, np.float32))
    t0 = traces()
    close(g(x), np.ones(size))
    w = mr.array(np.full(size, 3.0, np.float32))  # rebinds the closure's cell
    close(g(x), np.full(size, 3.0))
    w[0] = 5.0  # in place
    want = np.full(size, 3.0)
    want[0] = 5.0
    close(g(x), want)
    w = w * 2  # lazy, not yet evaluated
    close(g(x), want * 2)
    assert traces() == t0 + 1


GLOBAL_W = mr.array([1.0, 2.0, 3.0])
SCALE = 1.0


def _global_loss(x):
    if SCALE > 1.5:  # Python control flow on a global
        return (x * GLOBAL_W * SCALE).sum()
    return (x * GLOBAL_W).sum()


def test_globals_are_read_on_every_call():
    global GLOBAL_W, SCALE
    g = mr.grad(_global_loss)
    x = mr.array([1.0, 1.0, 1.0])
    t0 = traces()
    try:
        close(g(x), [1.0, 2.0, 3.0])
        GLOBAL_W = mr.array([4.0, 5.0, 6.0])
        close(g(x), [4.0, 5.0, 6.0])
        SCALE = 2.0  # another branch: traced again
        close(g(x), [8.0, 10.0, 12.0])
        SCALE = 3.0
        close(g(x), [12.0, 15.0, 18.0])
        assert traces() == t0 + 3
    finally:
        GLOBAL_W, SCALE = mr.array([1.0, 2.0, 3.0]), 1.0


def test_object_attributes_and_bound_methods():
    class Model:
        def __init__(self):
            self.w = mr.array([1.0, 2.0])
            self.power = 2

        def loss(self, x):
            return ((x * self.w) ** self.power).sum()
    m = Model()
    x = mr.array([1.0, 1.0])
    close(mr.grad(m.loss)(x), 2 * np.array([1.0, 2.0]) ** 2)
    m.w = mr.array([3.0, 1.0])
    close(mr.grad(m.loss)(x), 2 * np.array([3.0, 1.0]) ** 2)
    m.power = 3
    close(mr.grad(m.loss)(x), 3 * np.array([3.0, 1.0]) ** 3)
    other = Model()  # another object, same method: its own state
    close(mr.grad(other.loss)(x), 2 * np.array([1.0, 2.0]) ** 2)


def test_nn_value_and_grad_sees_the_parameters_the_optimizer_updates():
    mr.random.seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    mr.eval(model.parameters())
    rng = np.random.default_rng(1)
    x = mr.array(rng.standard_normal((5, 4)).astype(np.float32))
    y = mr.array(rng.standard_normal((5, 2)).astype(np.float32))
    calls = Calls()

    def loss_fn(model, x, y):
        calls()
        return nn.losses.mse_loss(model(x), y, reduction="mean")
    vg = nn.value_and_grad(model, loss_fn)
    opt = optim.SGD(learning_rate=0.1)
    losses = []
    for step in range(12):  # past the compiled tier's threshold
        ref_loss, ref_grads = _uncached(lambda: nn.value_and_grad(model, loss_fn)(model, x, y))
        loss, grads = vg(model, x, y)
        close(loss, ref_loss, 1e-5)
        for (_, g), (_, r) in zip(mr.utils.tree_flatten(grads), mr.utils.tree_flatten(ref_grads)):
            close(g, r, 1e-5)
        opt.update(model, grads)  # lazy: not evaluated before the next call
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert len(calls) == 1 + 12  # one cached trace, and the uncached references


def test_nn_value_and_grad_keeps_updating_batch_norm_statistics():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm(4))
    mr.eval(model.parameters())
    x = mr.array(np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32))

    def loss_fn(x):
        return model(x).sum()
    vg = nn.value_and_grad(model, loss_fn)
    means = []
    for _ in range(3):
        vg(x)
        means.append(np.asarray(model.layers[1].running_mean).copy())
    assert not np.allclose(means[0], means[1]) and not np.allclose(means[1], means[2])
    # the same three steps uncached
    model2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm(4))
    model2.update(mr.utils.tree_map(lambda a: a, model.parameters()))
    model2.layers[1].running_mean = mr.zeros(4)
    model2.layers[1].running_var = mr.ones(4)
    model.layers[1].running_mean = mr.zeros(4)
    model.layers[1].running_var = mr.ones(4)
    vg2 = nn.value_and_grad(model2, lambda x: model2(x).sum())
    for _ in range(3):
        vg(x)
        _uncached(lambda: vg2(x))
    close(model.layers[1].running_mean, model2.layers[1].running_mean)
    close(model.layers[1].running_var, model2.layers[1].running_var)


def test_stored_state_is_not_cached():
    """A plain grad whose function stores into the state it reads runs as before."""
    box = {"count": mr.array(0.0)}

    def f(x):
        box["count"] = box["count"] + 1.0
        return (x * x).sum()
    g = mr.grad(f)
    for _ in range(3):
        close(g(mr.array([1.0])), [2.0])
    assert box["count"].item() == 3.0


# ---- what changes the trace retraces --------------------------------------------------------

def test_new_shapes_dtypes_and_python_values_retrace():
    calls = Calls()

    def f(x, n, mode="sum"):
        calls()
        y = x ** n
        return y.sum() if mode == "sum" else y.mean()
    g = mr.grad(f)
    close(g(mr.array([1.0, 2.0]), 2), [2.0, 4.0])
    close(g(mr.array([1.0, 2.0, 3.0]), 2), [2.0, 4.0, 6.0])  # shape
    close(g(mr.array([1.0, 2.0], dtype=mr.float16), 2), [2.0, 4.0], 1e-3)  # dtype
    assert g(mr.array([1.0, 2.0], dtype=mr.float16), 2).dtype == mr.float16
    close(g(mr.array([1.0, 2.0]), 3), [3.0, 12.0])  # a Python scalar
    close(g(mr.array([1.0, 2.0]), 3, mode="mean"), [1.5, 6.0])  # a keyword
    assert len(calls) == 5
    close(g(mr.array([1.0, 2.0]), 2), [2.0, 4.0])
    close(g(mr.array([1.0, 2.0]), 3, mode="mean"), [1.5, 6.0])
    assert len(calls) == 5


def test_argnums_and_argnames_are_part_of_the_key():
    def f(x, y):
        return (x * y * y).sum()
    x, y = mr.array([1.0, 2.0]), mr.array([3.0, 4.0])
    close(mr.grad(f)(x, y), [9.0, 16.0])
    close(mr.grad(f, argnums=1)(x, y), [6.0, 16.0])
    gx, gy = mr.grad(f, argnums=(0, 1))(x, y)
    close(gx, [9.0, 16.0])
    close(gy, [6.0, 16.0])
    pos, kw = mr.grad(f, argnums=0, argnames="y")(x, y=y)
    close(pos, [9.0, 16.0])
    close(kw["y"], [6.0, 16.0])
    # a non-differentiated argument is an input, not a constant
    close(mr.grad(f)(x, mr.array([1.0, 1.0])), [1.0, 1.0])


def test_vmap_axes_are_part_of_the_key():
    def f(a, b):
        return a * b
    a = mr.array([[1.0, 2.0], [3.0, 4.0]])
    b = mr.array([10.0, 20.0])
    close(mr.vmap(f, in_axes=(0, None))(a, b), np.array([[1, 2], [3, 4]]) * np.array([10, 20]))
    close(mr.vmap(f, in_axes=(1, None))(a, b), np.array([[1, 3], [2, 4]]) * np.array([10, 20]))
    close(mr.vmap(f, in_axes=(0, None), out_axes=1)(a, b), (np.array([[1, 2], [3, 4]]) * np.array([10, 20])).T)


# ---- not cached: the trace depends on values ------------------------------------------------

def test_control_flow_on_array_values_is_not_cached():
    def f(x):
        if x.sum().item() > 0:  # evaluates a traced value
            return (x * x).sum()
        return (-x * x * x).sum()
    g = mr.grad(f)
    close(g(mr.array([1.0, 2.0])), [2.0, 4.0])
    close(g(mr.array([-1.0, -2.0])), [-3.0, -12.0])
    close(g(mr.array([1.0, 2.0])), [2.0, 4.0])


def test_global_random_draws_are_not_cached():
    def f(x):
        return (x * mr.random.normal(x.shape)).sum()
    g = mr.grad(f)
    x = mr.ones((16,))
    mr.random.seed(0)
    a, b = np.asarray(g(x)), np.asarray(g(x))
    assert not np.allclose(a, b)  # a new draw each call
    mr.random.seed(0)
    close(g(x), a)
    close(g(x), b)  # the key advances as without the cache


def test_dropout_through_nn_value_and_grad_draws_per_call():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    mr.eval(model.parameters())
    x = mr.ones((4, 8))
    vg = nn.value_and_grad(model, lambda x: model(x).sum())
    mr.random.seed(1)
    g1 = np.asarray(vg(x)[1]["layers"][0]["weight"])
    g2 = np.asarray(vg(x)[1]["layers"][0]["weight"])
    assert not np.allclose(g1, g2)
    mr.random.seed(1)
    g1u = np.asarray(_uncached(lambda: vg(x))[1]["layers"][0]["weight"])
    close(g1, g1u)


# ---- nesting --------------------------------------------------------------------------------

def test_nested_transforms_keep_working():
    f = lambda x: (x ** 3).sum()  # noqa: E731
    gg = mr.grad(lambda x: mr.grad(f)(x).sum())
    vg = mr.vmap(mr.grad(f))
    cg = mr.compile(mr.grad(f))
    for k in range(3):
        x = mr.array([1.0, 2.0]) + k
        xn = np.asarray(x)
        close(gg(x), 6 * xn)
        close(vg(x), 3 * xn ** 2)
        close(cg(x), 3 * xn ** 2)
        close(mr.jvp(mr.grad(f), [x], [mr.ones_like(x)])[1][0], 6 * xn)


def test_disable_compile_turns_the_cache_off():
    calls = Calls()

    def f(x):
        calls()
        return (x * x).sum()
    mr.disable_compile()
    try:
        for _ in range(3):
            mr.grad(f)(mr.array([1.0]))
    finally:
        mr.enable_compile()
    assert len(calls) == 3


# ---- bounded --------------------------------------------------------------------------------

def test_lambdas_in_a_loop_do_not_leak():
    x = mr.array([1.0, 2.0])
    size0 = cache.cache_info()["size"]
    for k in range(50):
        close(mr.grad(lambda x: (x * k).sum())(x), [k, k])
    gc.collect()
    assert cache.cache_info()["size"] <= size0 + 1  # dead functions' entries are dropped


def test_the_cache_is_a_bounded_lru():
    cache.set_capacity(4)
    x = mr.array([1.0, 2.0])
    funs = [(lambda k: (lambda x: (x * k).sum()))(k) for k in range(10)]  # alive
    for k, f in enumerate(funs):
        close(mr.grad(f)(x), [k, k])
        assert cache.cache_info()["size"] <= 4
    t = traces()
    mr.grad(funs[-1])(x)  # recent: still cached
    assert traces() == t
    mr.grad(funs[0])(x)  # evicted: traced again
    assert traces() == t + 1


def test_entries_do_not_keep_the_function_or_its_state_alive():
    big = mr.array(np.ones(1000, np.float32))

    def make():
        w = mr.array(np.ones(1000, np.float32))
        return (lambda x: (x * w).sum()), weakref.ref(w)
    f, wref = make()
    mr.grad(f)(big)
    fref = weakref.ref(f)
    del f
    gc.collect()
    assert fref() is None and wref() is None


def test_mirax_imported_through_a_path_with_dots_is_still_library_code(tmp_path):
    """Code of mirax names its file by the path it was imported from ("bench/../python"
    when a script puts that on sys.path): it is still mirax's, whose globals the cache
    does not walk (it walked 620 objects a call of nn.value_and_grad)."""
    import os
    import subprocess
    import sys
    pkg = os.path.dirname(os.path.dirname(mr.__file__))  # .../python
    dotted = os.path.join(pkg, "..", os.path.basename(pkg))
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import mirax.nn.utils as u\n"
            "from mirax.transforms import cache\n"
            "assert '..' in u.__file__, u.__file__\n"
            "print(cache._library(u.value_and_grad.__code__))" % dotted)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
