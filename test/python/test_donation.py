"""Buffer donation: a compiled step writes the new state over the old state's buffers
when nothing but the state holds the old arrays (mirax/compile.py `_donors`,
lowering/donate_arguments.py), and never where anything else can still see them."""
from functools import partial

import numpy as np
import pytest

import mirax as mr
import mirax.nn as nn
import mirax.optimizers as optim


def pointer(a):
    v = np.asarray(a)  # (a view: dropped on return, so it holds nothing afterwards)
    return v.__array_interface__["data"][0]


def sgd_step(model, lr=0.1):
    optimizer = optim.SGD(learning_rate=lr)
    optimizer.init(model.trainable_parameters())

    def loss_fn(model, x, y):
        return nn.losses.mse_loss(model(x), y)

    grad_fn = nn.value_and_grad(model, loss_fn)
    state = [model.state, optimizer.state]

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x, y):
        loss, grads = grad_fn(model, x, y)
        optimizer.update(model, grads)
        return loss
    return step


def data(seed=0, n=64, d=96, k=40):
    rng = np.random.default_rng(seed)
    return (mr.array(rng.standard_normal((n, d)).astype(np.float32)),
            mr.array(rng.standard_normal((n, k)).astype(np.float32)))


def mlp(seed=0):
    mr.random.seed(seed)
    return nn.Sequential(nn.Linear(96, 128), nn.ReLU(), nn.Linear(128, 40))


def weights(model):
    return [np.array(layer.weight) for layer in model.layers if hasattr(layer, "weight")]


def test_a_training_step_updates_its_parameters_in_their_buffers():
    """From the second step on (the first step's outputs are the state, held by nothing
    else), each parameter keeps its buffer, and the values are those of the same step
    without donation (the user holding the old parameters: nothing may be written over)."""
    x, y = data()
    model = mlp()
    step = sgd_step(model)
    step(x, y)
    before = [pointer(layer.weight) for layer in model.layers if hasattr(layer, "weight")]
    bias = pointer(model.layers[0].bias)
    for _ in range(3):
        step(x, y)
    assert [pointer(layer.weight) for layer in model.layers if hasattr(layer, "weight")] == before
    assert pointer(model.layers[0].bias) == bias

    held = mlp()
    ref = sgd_step(held)
    kept = []
    for _ in range(4):
        kept.append(held.parameters())  # every old parameter stays reachable
        ref(x, y)
    for a, b in zip(weights(model), weights(held)):
        np.testing.assert_array_equal(a, b)
    assert pointer(held.layers[0].weight) != pointer(kept[-1]["layers"][0]["weight"])


def test_arrays_the_user_still_holds_keep_their_values():
    """An old parameter held in a variable, viewed by numpy, or read by a lazy array not
    yet evaluated is not written over: it keeps its value, the step's result is right."""
    x, y = data(1)
    model = mlp(1)
    step = sgd_step(model)
    step(x, y)
    step(x, y)
    w0 = model.layers[0].weight
    w0_copy = np.array(w0)
    view = np.asarray(model.layers[2].weight)
    view_copy = view.copy()
    lazy = model.layers[0].bias * 2
    b_copy = np.array(model.layers[0].bias)

    twin = mlp(1)
    twin_step = sgd_step(twin)
    twin_step(x, y)
    twin_step(x, y)

    step(x, y)
    twin_step(x, y)
    np.testing.assert_array_equal(np.asarray(w0), w0_copy)
    np.testing.assert_array_equal(view, view_copy)
    np.testing.assert_array_equal(np.asarray(lazy), 2 * b_copy)
    for a, b in zip(weights(model), weights(twin)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(model.layers[0].weight), w0_copy)


def test_state_read_after_its_update_sees_the_old_value():
    """The traced function updates w, then reads the old w (the order a backward pass
    has: a weight's update is traced where its gradient is ready, the layer below reads
    the weight later): the update is written over w only after that read."""
    state = {"w": mr.array(np.arange(8, dtype=np.float32)), "v": mr.array(np.ones((8, 8), np.float32))}

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x):
        w, v = state["w"], state["v"]
        state["w"] = w - x
        state["v"] = v * 0.5 + (w[:, None] * w[None, :])  # reads the old w
        return (v @ w).sum() + w.sum()                      # and the old v and w

    w, v = np.arange(8, dtype=np.float32), np.ones((8, 8), np.float32)
    for _ in range(4):
        got = float(np.asarray(step(mr.array(1.5))))
        want = float((v @ w).sum() + w.sum())
        w, v = w - 1.5, v * 0.5 + np.outer(w, w)
        assert got == pytest.approx(want, rel=1e-6)
        np.testing.assert_allclose(np.asarray(state["w"]), w, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(state["v"]), v, rtol=1e-6)


def test_some_state_donated_some_held():
    """One state array held by the user is copied for the kernel, the others are written
    over: both come out right, the held one unchanged."""
    state = [mr.array(np.full(4096, 2.0, np.float32)), mr.array(np.full(4096, 3.0, np.float32))]

    @partial(mr.compile, inputs=state, outputs=state)
    def step():
        state[0] = state[0] * state[1]
        state[1] = state[1] + 1
        return state[0].sum()

    step()
    step()  # state: 2*3*4 = 24, 5
    held = state[1]
    p0 = pointer(state[0])
    out = step()
    assert float(np.asarray(out)) == 24 * 5 * 4096
    assert pointer(state[0]) == p0
    np.testing.assert_array_equal(np.asarray(held), 5.0)
    np.testing.assert_array_equal(np.asarray(state[1]), 6.0)


def test_state_that_swaps_or_repeats_is_not_written_over():
    """New state that is another slot's old value (passed through) keeps that old
    buffer: the slot whose value it was is not donated."""
    state = [mr.array(np.arange(4, dtype=np.float32)), mr.array(np.ones(4, np.float32))]

    @partial(mr.compile, inputs=state, outputs=state)
    def step():
        a, b = state
        state[0] = b         # b's old value, handed back
        state[1] = b * 2 + a  # must not be written into b's buffer
        return a.sum()

    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    for _ in range(3):
        step()
        a, b = b, b * 2 + a
        np.testing.assert_array_equal(np.asarray(state[0]), a)
        np.testing.assert_array_equal(np.asarray(state[1]), b)


def test_a_step_whose_donating_kernel_fails_runs_undonated(monkeypatch):
    """Where the kernel writing into the old state cannot be built (here: the pass taking
    the donated results off the out-parameters fails), the step runs the plain kernel."""
    import mirax.lowering.donate_arguments as donate

    def broken(module):
        if any(donate.donated_arguments(fn) for fn in donate.walk_ops(module, lambda n: n == "func.func")):
            raise donate.PassError(None, "broken on purpose")
        return 0
    monkeypatch.setattr(donate, "drop_donated_results", broken)
    state = [mr.array(np.full(77, 1.5, np.float32))]  # (a shape of its own: no cached kernel)

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x):
        state[0] = state[0] * x
        return state[0].sum()

    for k in range(1, 4):
        before = pointer(state[0])
        assert float(np.asarray(step(mr.array(2.0)))) == pytest.approx(77 * 1.5 * 2 ** k)
        assert pointer(state[0]) != before  # (a new buffer: not donated)
    np.testing.assert_array_equal(np.asarray(state[0]), 1.5 * 8)
