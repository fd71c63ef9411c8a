"""`mr.compile` against MLX's compile guide (seeds/000), with `mr` for `mx`."""
import math
import os
import subprocess
import sys
from functools import partial

import numpy as np
import pytest

import mirax as mr


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_basics_same_result_and_no_recompile():
    def fun(x, y):
        return mr.exp(-x) + y

    x, y = mr.array(1.0), mr.array(2.0)
    close(fun(x, y), 2.36788)
    compiled_fun = mr.compile(fun)
    close(compiled_fun(x, y), 2.36788)
    assert compiled_fun.trace_count == 1
    compiled_fun(x, y)
    mr.compile(fun)(x, y)  # a new wrapper of the same function reuses the cache
    assert compiled_fun.trace_count == 1


def test_recompiles_on_shape_dtype_count_and_scalar_changes():
    def fun(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out

    c = mr.compile(fun)
    c(mr.array([1.0]))
    c(mr.array([2.0]))
    assert c.trace_count == 1
    c(mr.array([1.0, 2.0]))  # shape
    assert c.trace_count == 2
    c(mr.array([1, 2]))  # dtype
    assert c.trace_count == 3
    c(mr.array([1.0]), mr.array([1.0]))  # number of inputs
    assert c.trace_count == 4

    def scaled(x, s):
        return x * s
    cs = mr.compile(scaled)
    close(cs(mr.array(2.0), 3), 6.0)
    close(cs(mr.array(2.0), 4), 8.0)  # Python scalars are part of the key
    assert cs.trace_count == 2


def test_lambda_in_a_loop_compiles_each_time():
    a = mr.array(1.0)
    counts = []
    for _ in range(3):
        c = mr.compile(lambda x: mr.exp(mr.abs(x)))
        c(a)
        counts.append(c.trace_count)
    assert counts == [1, 1, 1]


def test_gelu_speedup_example_is_correct():
    def gelu(x):
        return x * (1 + mr.erf(x / math.sqrt(2))) / 2

    x = mr.random.uniform(shape=(4, 100, 64))
    close(mr.compile(gelu)(x), gelu(x))


def test_division_by_a_constant_is_within_an_ulp_and_keeps_inf_and_nan():
    # mirax-simplify multiplies by the reciprocal (as XLA does); 1/0 stays a division
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 100
    x[:4] = [0.0, -0.0, np.inf, np.nan]
    got = np.asarray(mr.compile(lambda v: v / 3.0)(mr.array(x)))
    want = x / np.float32(3.0)
    ulp = np.spacing(np.abs(want[4:]))
    assert np.all(np.abs(got[4:] - want[4:]) <= ulp)
    np.testing.assert_array_equal(got[:4], want[:4])
    half = np.asarray(mr.compile(lambda v: v / 2.0)(mr.array(x)))
    np.testing.assert_array_equal(half, x / np.float32(2.0))  # a power of two: exact
    by_zero = np.asarray(mr.compile(lambda v: v / 0.0)(mr.array(x[4:])))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(by_zero, x[4:] / np.float32(0.0))



def test_linear_weight_gradient_is_computed_in_the_weights_layout():
    # grad of x @ W.T wrt W traces as (x.T @ g).T; mirax-simplify makes it g.T @ x (no
    # transpose of the 784x512 result before the update reads it), values as numpy's
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 48)).astype(np.float32)
    w = rng.standard_normal((32, 48)).astype(np.float32)

    def loss(w, x):
        return mr.sum(mr.tanh(x @ w.T))
    step = mr.compile(lambda w, x: w - 0.5 * mr.grad(loss)(w, x))
    text = step.lower(mr.array(w), mr.array(x)).as_text("simplified")
    assert "tensor<48x32xf32>) -> tensor<32x48xf32>" not in text  # (the transposed product gone)
    assert text.count('"mirax.matmul"') == 2
    g = (1 - np.tanh(x @ w.T) ** 2).T @ x
    np.testing.assert_allclose(np.asarray(step(mr.array(w), mr.array(x))), w - 0.5 * g, rtol=1e-5, atol=1e-4)

def test_printing_inside_a_compiled_function_is_an_error_naming_the_line():
    @mr.compile
    def fun(x):
        z = -x
        print(z)
        return mr.exp(z)

    with pytest.raises(mr.TraceError) as err:
        fun(mr.array(5.0))
    assert "print(z)" in str(err.value)


def test_disable_compile_lets_print_work(capsys):
    @mr.compile
    def fun(x):
        z = -x
        print(z)
        return mr.exp(z)

    mr.disable_compile()
    try:
        close(fun(mr.array(5.0)), math.exp(-5))
    finally:
        mr.enable_compile()
    assert "array(-5" in capsys.readouterr().out


def test_mirax_disable_compile_environment_variable():
    code = ("import mirax as mr\n"
            "f = mr.compile(lambda x: x + 1)\n"
            "f(mr.array(1.0)); print(f.trace_count)\n")
    env = dict(os.environ, MIRAX_DISABLE_COMPILE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_pure_functions_return_state_or_capture_outputs():
    state = []

    @mr.compile
    def fun(x, y):
        z = x + y
        state.append(z)
        return mr.exp(z), state

    _, st = fun(mr.array(1.0), mr.array(2.0))
    close(st[0], 3.0)

    state2 = []

    @partial(mr.compile, outputs=state2)
    def fun2(x, y):
        z = x + y
        state2.append(z)
        return mr.exp(z)

    fun2(mr.array(1.0), mr.array(2.0))
    close(state2[0], 3.0)
    fun2(mr.array(2.0), mr.array(2.0))  # cached: the output slot is written again
    close(state2[0], 4.0)


def test_state_left_alone_is_handed_back_not_copied():
    """State the function does not change (SGD's velocities at momentum 0) comes back as
    the same array: the kernel neither takes it as a result nor copies it."""
    state = [mr.array(np.arange(6, dtype=np.float32)), mr.array(np.ones(6, np.float32))]
    keep = state[1]

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x):
        state[0] = state[0] * x
        return state[0].sum() + x

    out = step(mr.array(2.0))
    close(out, 32.0)
    assert state[1] is keep
    np.testing.assert_array_equal(np.asarray(state[0]), 2 * np.arange(6))
    step(mr.array(2.0))  # cached
    np.testing.assert_array_equal(np.asarray(state[0]), 4 * np.arange(6))
    assert state[1] is keep and np.asarray(keep).tolist() == [1.0] * 6
    text = mr.compile(lambda x, y: (x * 2, y)).lower(mr.array(1.0), mr.array(3.0)).as_text("mirax")
    assert "-> tensor<f32> attributes" in text  # one result: y is not the kernel's

    ident = mr.compile(lambda x, y: (y, x + 1))  # a returned input is that input
    a, b = mr.array(5.0), mr.array(7.0)
    r = ident(a, b)
    assert r[0] is b
    close(r[1], 6.0)
    whole = mr.compile(lambda x: x)  # (nothing left to compute: the plain path)
    close(whole(mr.array(3.0)), 3.0)


def test_state_updated_in_place_is_a_result_not_handed_back():
    """`state[0] *= 2` inside a compiled function rebinds the traced placeholder's object
    to the product (as MLX's in-place operators: the same array object takes the new
    value); the new state must be written back, not taken for state left alone (it was:
    the object was the input's, so the state kept its old value)."""
    state = [mr.array(1.0)]

    @partial(mr.compile, inputs=state, outputs=state)
    def fun(y):
        x = state[0]
        if y.dtype == mr.float32:
            state[0] = 2 * y
            return [x, y, x + y]
        state[0] *= 2
        return x + y  # (x is state[0]'s object: the doubled value, as uncompiled and in MLX)

    for _ in range(3):
        fun(mr.array(1.0))
        close(state[0], 2.0)
        close(fun(mr.array(1)), 5.0)
        close(state[0], 4.0)


def test_captured_state_as_the_last_call_left_it_reuses_its_executable():
    """A training step's next call finds its executable by the state's arrays being the
    last call's outputs (no cache key built); state the user replaced, reshaped or grew
    takes the full lookup (a retrace where shapes changed), and the results stay right."""
    state = {"w": mr.array(np.ones(4, np.float32)), "n": [mr.array(0.0)]}

    @partial(mr.compile, inputs=state, outputs=state)
    def step(x):
        state["w"] = state["w"] * x
        state["n"][0] = state["n"][0] + 1
        return state["w"].sum()

    close(step(mr.array(2.0)), 8.0)
    close(step(mr.array(2.0)), 16.0)
    assert step._state_memo is not None and step.trace_count == 1
    close(step(mr.array(0.5)), 8.0)  # (the memo's path: same shapes, the state it wrote)
    state["w"] = mr.array(np.full(4, 3.0, np.float32))  # replaced by the user: the full lookup
    close(step(mr.array(1.0)), 12.0)
    assert step.trace_count == 1
    state["w"] = mr.array(np.ones(6, np.float32))  # reshaped: a new trace
    close(step(mr.array(1.0)), 6.0)
    assert step.trace_count == 2
    state["extra"] = mr.array(1.0)  # grown: the traced function never saw it
    close(step(mr.array(2.0)), 12.0)
    close(state["n"][0], 6.0)
    assert step.trace_count == 3


def test_closed_over_arrays_are_constants_unless_captured():
    state = [mr.array(1.0)]

    @mr.compile
    def fun(x):
        return x + state[0]

    close(fun(mr.array(1.0)), 2.0)
    state[0] = mr.array(5.0)
    close(fun(mr.array(1.0)), 2.0)

    state = [mr.array(1.0)]

    @mr.compile
    def fun_arg(x, state):
        return x + state[0]

    close(fun_arg(mr.array(1.0), state), 2.0)
    state[0] = mr.array(5.0)
    close(fun_arg(mr.array(1.0), state), 6.0)

    state = [mr.array(1.0)]

    @partial(mr.compile, inputs=state)
    def fun_in(x):
        return x + state[0]

    close(fun_in(mr.array(1.0)), 2.0)
    state[0] = mr.array(5.0)
    close(fun_in(mr.array(1.0)), 6.0)


def test_large_closed_over_arrays_are_constants_too():
    w = mr.array(np.arange(100, dtype=np.float32))
    f = mr.compile(lambda x: x * w)
    close(f(mr.ones((100,))), np.arange(100))


def test_random_state_captured_by_compile_advances():
    state = [mr.random.state]

    @partial(mr.compile, inputs=state, outputs=state)
    def noisy(x):
        return x + mr.random.uniform(shape=x.shape)

    mr.random.seed(0)
    a = np.asarray(noisy(mr.zeros((4,))))
    b = np.asarray(noisy(mr.zeros((4,))))
    assert not np.allclose(a, b)  # the key advanced between calls
    mr.random.seed(0)
    close(noisy(mr.zeros((4,))), a)  # and replays from the seed
    assert noisy.trace_count == 1


def test_compiling_transformed_functions():
    grad_fn = mr.grad(mr.exp)
    compiled_grad_fn = mr.compile(grad_fn)
    close(grad_fn(mr.array(1.0)), math.e)
    close(compiled_grad_fn(mr.array(1.0)), math.e)


def test_compiled_functions_calling_compiled_functions_and_transforms_of_compiled():
    @mr.compile
    def inner(x):
        return mr.exp(-mr.abs(x))

    def outer(x):
        return inner(inner(x))

    fun = mr.compile(outer)
    x = mr.array([0.5, -1.0])
    close(fun(x), outer(x))
    close(mr.grad(lambda x: inner(x).sum())(x), -np.sign(np.asarray(x)) * np.exp(-np.abs(np.asarray(x))))
    # a function with no outputs compiles too (the guide's outer returns None)
    assert mr.compile(lambda x: None)(x) is None


def test_shapeless_does_not_retrace_and_static_shapes_fail_clearly():
    def fun(x, y):
        return mr.abs(x + y)

    c = mr.compile(fun, shapeless=True)
    close(c(mr.array([1.0]), mr.array([-2.0])), [1.0])
    close(c(mr.array([1.0, -6.0]), mr.array([-2.0, 3.0])), [1.0, 3.0])
    assert c.trace_count == 1  # a new rank would trace again, as MLX (test_shapeless.py)

    def fun_reshape(x):
        return x.reshape(x.shape[0] * x.shape[1], -1)

    cr = mr.compile(fun_reshape, shapeless=True)
    assert cr(mr.random.uniform(shape=(2, 3, 4))).shape == (6, 4)
    with pytest.raises(ValueError, match="reshape"):
        cr(mr.random.uniform(shape=(5, 5, 3)))

    def fun_flatten(x):
        return x.flatten(0, 1)

    cf = mr.compile(fun_flatten, shapeless=True)
    assert cf(mr.random.uniform(shape=(2, 3, 4))).shape == (6, 4)
    assert cf(mr.random.uniform(shape=(5, 5, 3))).shape == (25, 3)
    assert cf.trace_count == 1


def test_lower_prints_each_stage(tmp_path):
    f = mr.compile(lambda x: mr.exp(x) * 2)
    low = f.lower(mr.ones((8,)))
    assert '"mirax.exp"' in low.as_text("mirax")
    assert "linalg.generic" in low.as_text("linalg")
    assert "llvm.func @main" in low.as_text("llvm")
    assert low.as_text("optimized").count("linalg.generic") == 1  # exp and the multiply fused
    with pytest.raises(ValueError, match="stage"):
        low.as_text("hlsl")
    env = dict(os.environ, MIRAX_DUMP_IR=str(tmp_path))
    code = "import mirax as mr\nmr.compile(lambda x: x * 3)(mr.ones((2,)))\n"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    names = sorted(p.name.split(".")[-2] for p in tmp_path.iterdir())
    assert names == ["linalg", "llvm", "mirax", "optimized", "simplified"]
    blocked = tmp_path / "a file"  # a directory that cannot be made: the error names the variable
    blocked.write_text("")
    env["MIRAX_DUMP_IR"] = str(blocked / "dumps")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "MIRAX_DUMP_IR=" in out.stderr and "cannot write the IR dumps" in out.stderr


def test_compiling_training_graphs_as_in_the_guide():
    import mirax.nn as nn
    import mirax.optimizers as optim

    def run(compiled):
        mr.random.seed(0)
        x = mr.random.uniform(shape=(4, 10))
        y = mr.array([0, 1, 0, 1])
        model = nn.Linear(10, 1)
        optimizer = optim.SGD(learning_rate=0.1, momentum=0.8)

        def loss_fn(model, x, y):
            logits = model(x).squeeze()
            return nn.losses.binary_cross_entropy(logits, y)

        losses = []
        if not compiled:
            loss_and_grad_fn = nn.value_and_grad(model, loss_fn)
            for _ in range(10):
                loss, grads = loss_and_grad_fn(model, x, y)
                optimizer.update(model, grads)
                mr.eval(model.parameters(), optimizer.state)
                losses.append(loss.item())
            return losses, None
        state = [model.state, optimizer.state]

        @partial(mr.compile, inputs=state, outputs=state)
        def step(x, y):
            loss_and_grad_fn = nn.value_and_grad(model, loss_fn)
            loss, grads = loss_and_grad_fn(model, x, y)
            optimizer.update(model, grads)
            return loss

        for _ in range(10):
            loss = step(x, y)
            mr.eval(state)
            losses.append(loss.item())
        return losses, step

    plain, _ = run(False)
    compiled, step = run(True)
    np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-6)
    assert plain[-1] < plain[0]
    assert step.trace_count <= 2  # the optimizer's state appears on the first update


@pytest.mark.parametrize("value,dtype", [
    (np.array([0.1, -2.5, np.nan, -np.inf], np.float32), mr.float32),
    (np.arange(3, dtype=np.float16) / 3, mr.float16),
    (np.array([1.5, 3.0, -0.0078125], np.float32), mr.bfloat16),
    (np.array([0.1, 1e-300]), mr.float64),
    (np.array([True, False]), mr.bool_),
    (np.array([1 + 2j, 3j], np.complex64), mr.complex64),
    (np.array([2 ** 31 - 1, -5], np.int32), mr.int32),
    (np.array([255, 0], np.uint8), mr.uint8),
])
def test_captured_constants_round_trip_exactly(value, dtype):
    a = mr.array(value, dtype)
    back = mr.compile(lambda: a)()
    assert back.dtype == dtype
    np.testing.assert_array_equal(np.asarray(back), np.asarray(a))


def test_outputs_are_freed_without_the_garbage_collector_and_buffers_recycled():
    import gc
    import weakref
    from mirax.runtime import buffers
    f = mr.compile(lambda x: x * 3)
    x = mr.ones((1024, 512))  # 2 MB: large enough to be pooled
    gc.disable()
    try:
        r = f(x)
        mr.eval(r)
        ref = weakref.ref(r)
        del r
        assert ref() is None  # no reference cycle holds a result
        before = len(buffers._pool)
        for _ in range(5):
            mr.eval(f(x))
        assert len(buffers._pool) <= before + 1
    finally:
        gc.enable()


def test_row_reductions_beside_0d_ops_compile():
    """mirax-fuse-reductions met a 0-d generic (a traced scalar) beside a row reduction."""
    f = mr.compile(lambda x, s: (x.reshape(-1, 1) * s + 1).sum(axis=1) + (s * 2))
    np.testing.assert_allclose(np.asarray(f(mr.arange(6.0), mr.array(3.0))), np.arange(6.0) * 3 + 1 + 6)
    g = mr.compile(lambda x, s: mr.softmax(x, axis=-1) * (s + 1) + s * s)
    np.testing.assert_allclose(np.asarray(g(mr.ones((2, 3)), mr.array(2.0))), np.full((2, 3), 5.0), rtol=1e-6)
