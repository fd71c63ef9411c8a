"""The MLX-shaped Python API: creation, promotion, broadcasting, laziness, errors, trace."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mirax as mr
from mirax.device import cpu


def test_array_from_python_follows_mlx_dtypes():
    assert mr.array(1.0).dtype == mr.float32
    assert mr.array(1).dtype == mr.int32
    assert mr.array(True).dtype == mr.bool_
    assert mr.array([1, 2]).dtype == mr.int32
    assert mr.array(np.arange(3, dtype=np.int64)).dtype == mr.int64
    assert mr.array(np.zeros(2, np.float64)).dtype == mr.float32  # as MLX (ask for float64)
    assert mr.array(np.zeros(2, np.float64), mr.float64).dtype == mr.float64
    assert mr.array([1, 2], mr.float16).dtype == mr.float16
    assert mr.array(1 + 2j).dtype == mr.complex64


def test_promotion_matches_mlx():
    i32, f16, u8 = mr.array([1], mr.int32), mr.array([1], mr.float16), mr.array([1], mr.uint8)
    assert (i32 + f16).dtype == mr.float16
    assert (u8 + mr.array([1], mr.int8)).dtype == mr.int16
    assert (mr.array([1], mr.uint32) + i32).dtype == mr.int64
    assert (f16 + 1.0).dtype == mr.float16  # Python scalars are weak
    assert (i32 + 1.5).dtype == mr.float32
    assert (u8 + 1).dtype == mr.uint8
    assert (mr.array([1], mr.bfloat16) + f16).dtype == mr.float32
    assert (i32 / i32).dtype == mr.float32


def test_operators_and_methods(rng):
    a_np = rng.standard_normal((3, 4)).astype(np.float32)
    b_np = rng.standard_normal((4,)).astype(np.float32)
    a, b = mr.array(a_np), mr.array(b_np)
    np.testing.assert_allclose(np.asarray(a + b), a_np + b_np, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(2 - a), 2 - a_np, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(a * b / 2), a_np * b_np / 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(abs(a) ** 0.5), np.abs(a_np) ** 0.5, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(a > b), a_np > b_np)
    np.testing.assert_allclose(np.asarray(-a.T), -a_np.T)
    np.testing.assert_allclose(np.asarray(a.reshape(2, -1)), a_np.reshape(2, -1))
    np.testing.assert_allclose(np.asarray(a.astype(mr.float16)), a_np.astype(np.float16))
    np.testing.assert_allclose(np.asarray(mr.where(a > 0, a, 0.0)), np.where(a_np > 0, a_np, 0))
    assert a.shape == (3, 4) and a.ndim == 2 and a.size == 12 and len(a) == 3
    assert mr.array(3.5).item() == 3.5
    assert mr.array([[1, 2]]).tolist() == [[1, 2]]
    assert "array([1, 2], dtype=int32)" == repr(mr.array([1, 2]))


def test_creation():
    np.testing.assert_array_equal(np.asarray(mr.zeros((2, 3))), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(mr.ones((2,), mr.int32)), np.ones(2, np.int32))
    np.testing.assert_array_equal(np.asarray(mr.full((2, 2), 7)), np.full((2, 2), 7))
    np.testing.assert_array_equal(np.asarray(mr.eye(3, k=1)), np.eye(3, k=1))
    np.testing.assert_array_equal(np.asarray(mr.zeros_like(mr.ones((2,), mr.uint8))), np.zeros(2, np.uint8))
    assert mr.zeros((2, 0)).shape == (2, 0)


def test_arrays_are_lazy():
    x = mr.array(np.arange(21, dtype=np.float32).reshape(3, 1, 7))  # a shape no other test uses
    before = cpu.kernels.compiles
    y = mr.sin(x) * 3
    assert y._data is None and cpu.kernels.compiles == before
    mr.eval(y)
    assert y._data is not None and cpu.kernels.compiles == before + 2  # sin, multiply (3: a constant)
    mr.eval(mr.sin(x) * 3)
    assert cpu.kernels.compiles == before + 2  # cache hit


def test_an_eager_python_scalar_is_a_constant_not_an_op():
    """`x * 2.0` in eager code is one op: the scalar becomes an evaluated array of the
    result's dtype and shape (numpy's fill), not an array and a broadcast op with a
    kernel of its own; the values, dtypes and errors are those of the general path."""
    from mirax.ops import elementwise as ew
    xs = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    x = mr.array(xs)
    y = x * 2.0
    assert y._prim.name == "multiply" and [i._prim for i in y._inputs] == [None, None]
    z = 2.0 - x  # the scalar first
    assert z._prim.name == "subtract" and z._inputs[1] is x
    np.testing.assert_array_equal(np.asarray(z), 2.0 - xs)
    np.testing.assert_array_equal(np.asarray(y), xs * 2.0)
    assert np.signbit(np.asarray(mr.array([1.0, 2.0]) * -0.0)).all()  # (-0.0 is not 0.0's constant)
    assert np.isnan(np.asarray(mr.array([1.0]) + float("nan"))).all()
    half = mr.array(np.array([1.5, -3.0], np.float16))
    assert (half * 2).dtype == mr.float16 and np.asarray(half * 2).tolist() == [3.0, -6.0]
    assert (mr.array([1, 2], mr.int32) * 2.5).dtype == mr.float32  # promotion as before
    assert np.asarray(mr.array([1, 2], mr.uint8) + 3).tolist() == [4, 5]
    assert np.asarray(mr.array([True, False]) | True).tolist() == [True, True]
    with pytest.raises(ValueError, match="300 to uint8 would result in overflow"):
        mr.array([1, 2], mr.uint8) + 300
    # a trace keeps the broadcast (the IR, shapeless compiles); so does another device
    text = mr.compile(lambda t: t * 2.0).lower(x).as_text("mirax")
    assert "mirax.broadcast_to" in text
    big = ew.small_copy() + 1  # larger outputs: the threads' broadcast kernel
    assert (mr.zeros((big,)) + 1.0)._inputs[1]._prim.name == "broadcast_to"


def test_an_evaluated_operand_is_broadcast_at_once_in_eager_code():
    """`x + b` with an evaluated bias is one op: b broadcast by numpy when the op is
    recorded (its value then, as the op would read it); an operand not evaluated yet
    keeps its broadcast op, as does a trace."""
    xs, bs = np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, -2, 3, -4], np.float32)
    x, b = mr.array(xs), mr.array(bs)
    y = x + b
    assert y._prim.name == "add" and y._inputs[0] is x and y._inputs[1]._prim is None
    np.testing.assert_array_equal(np.asarray(y), xs + bs)
    p, q = x + b, x - b
    assert p._inputs[1] is q._inputs[1]  # the same buffer broadcast once (a bias every step)
    b2 = mr.array(bs * 2)
    np.testing.assert_array_equal(np.asarray(x + b2), xs + bs * 2)
    b[0] = 10.0  # rebound: a new buffer, broadcast anew
    np.testing.assert_array_equal(np.asarray(x + b)[:, 0], xs[:, 0] + 10)
    np.testing.assert_array_equal(np.asarray(y), xs + bs)  # (y keeps the value it was made of)
    lazy = mr.exp(b)  # not evaluated: recorded as broadcast_to
    z = x * lazy
    assert z._inputs[1]._prim.name == "broadcast_to"
    np.testing.assert_allclose(np.asarray(z), xs * np.exp(np.where(np.arange(4) == 0, 10, bs)), rtol=1e-6)
    w = mr.where(x > 5, b2, 0.5)  # the condition is lazy, b2 and 0.5 evaluated
    np.testing.assert_array_equal(np.asarray(w), np.where(xs > 5, bs * 2, np.float32(0.5)))
    assert "mirax.broadcast_to" in mr.compile(lambda t, c: t + c).lower(x, b).as_text("mirax")


def test_eager_reshape_and_basic_indexing_of_an_evaluated_array_are_numpy_results():
    """Outside traces, on the CPU, a reshape of an evaluated array is numpy's view of its
    buffer and a basic index (ints, slices, None, ...) numpy's, contiguous: no op, no
    kernel (x[0] took a slice and a reshape kernel, ~40 us); the values and errors are
    the ops', which a trace (or an array not evaluated yet) still records."""
    xs = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = mr.array(xs)
    r = x.reshape(12, 5)
    assert r._prim is None and np.shares_memory(r._data, x._data)
    np.testing.assert_array_equal(np.asarray(r), xs.reshape(12, 5))
    for key in [0, -1, (1, 2), (2, 3, 4), (slice(None), 1), (..., 2), (None, 1), (slice(None, None, -1),),
                (0, slice(4, 0, -2)), (slice(7, 9),), (1, None, slice(1, 3), ...)]:
        got = x[key]
        assert got._prim is None and got._data.flags.c_contiguous, key
        assert got.shape == np.asarray(xs[key]).shape, key
        np.testing.assert_array_equal(np.asarray(got), xs[key])
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        x[3]
    lazy = mr.exp(x)  # not evaluated: recorded
    assert lazy[0]._prim is not None and lazy.reshape(60)._prim is not None
    np.testing.assert_allclose(np.asarray(lazy[1, 2]), np.exp(xs[1, 2]), rtol=1e-6)
    text = mr.compile(lambda t: t[0].reshape(20)).lower(x).as_text("mirax")
    assert "mirax.reshape" in text


def test_small_eager_broadcasts_are_numpy_copies():
    """An eager `broadcast_to` whose output is below the threads' threshold is numpy's
    copy: no kernel per shape (a bias added to a batch of a new size compiled one)."""
    before = cpu.kernels.compiles
    for dtype in (np.float32, np.int8, np.bool_, np.complex64):
        v = np.arange(3).astype(dtype)
        got = mr.broadcast_to(mr.array(v), (5, 3))
        np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(v, (5, 3)))
    b16 = mr.broadcast_to(mr.array([1.5, -2.0], mr.bfloat16), (2, 3, 2))
    assert b16.dtype == mr.bfloat16 and np.asarray(b16.astype(mr.float32)).tolist() == [[[1.5, -2.0]] * 3] * 2
    assert cpu.kernels.compiles == before + 1  # the bfloat16 -> float32 cast only


def test_an_eval_builds_the_kernels_its_graph_misses_together(monkeypatch):
    """The first kernel an eval misses builds the graph's other missing kernels with it
    (runtime/cpu.py `compile_many`: MLIR's passes here while LLVM runs on other threads);
    one the batch could not build is built when its op runs, as before."""
    from mirax.runtime import cpu as cpu_runtime
    calls, real = [], cpu_runtime.compile_many

    def spy(texts, name="kernel"):
        calls.append(len(texts))
        out = real(texts, name)
        return [RuntimeError("left to its op") if "mirax.cos" in t else k for t, k in zip(texts, out)]
    monkeypatch.setattr(cpu_runtime, "compile_many", spy)
    xs = np.arange(13, dtype=np.float32).reshape(1, 13) / 13  # a shape no other test uses
    x = mr.array(xs)
    mr.eval(x)
    before = cpu.kernels.compiles
    y = mr.sin(x) + mr.cos(x) * mr.exp(x)
    mr.eval(y)
    assert calls == [5]  # sin, cos, exp, multiply, add: one batch
    assert cpu.kernels.compiles == before + 5  # four from the batch, cos when it ran
    np.testing.assert_allclose(np.asarray(y), np.sin(xs) + np.cos(xs) * np.exp(xs), rtol=1e-6)
    mr.eval(mr.sin(x) + mr.cos(x) * mr.exp(x))
    assert calls == [5] and cpu.kernels.compiles == before + 5  # all cached now
    mr.eval(mr.tanh(x))  # a graph that misses one kernel builds it alone
    assert calls == [5] and cpu.kernels.compiles == before + 6


def test_an_op_the_batch_cannot_prepare_is_left_to_its_own_run(monkeypatch):
    """An error while preparing the batch (here the cos kernel's key, once) is not
    raised by the op that missed first: that node is left out, and builds when it runs."""
    import mirax.device as device
    from mirax.runtime import cpu as cpu_runtime
    calls, real_many, real_key = [], cpu_runtime.compile_many, device.kernel_key
    failed = []

    def key(name, *a, **k):  # the cos node's key fails once: in the batch's preparation
        if name == "cos" and not failed:
            failed.append(name)
            raise RuntimeError("no key this time")
        return real_key(name, *a, **k)
    monkeypatch.setattr(device, "kernel_key", key)
    monkeypatch.setattr(cpu_runtime, "compile_many", lambda texts, name="kernel": calls.append(len(texts))
                        or real_many(texts, name))
    xs = np.arange(19, dtype=np.float32) / 19  # a shape no other test uses
    x = mr.array(xs)
    y = mr.exp(x) * mr.cos(x) + mr.sin(x)
    np.testing.assert_allclose(np.asarray(y), np.exp(xs) * np.cos(xs) + np.sin(xs), rtol=1e-6)
    assert failed == ["cos"] and calls == [4]  # exp, multiply, sin, add; cos on its own


def test_eager_batch_off_builds_each_kernel_when_its_op_runs(monkeypatch):
    """MIRAX_EAGER_BATCH=0 (device.BUILD_TOGETHER): no batch, the same values."""
    import mirax.device as device
    from mirax.runtime import cpu as cpu_runtime
    monkeypatch.setattr(device, "BUILD_TOGETHER", False)
    monkeypatch.setattr(cpu_runtime, "compile_many", lambda *a, **k: pytest.fail("built as a batch"))
    xs = np.arange(17, dtype=np.float32) / 17  # a shape no other test uses
    x = mr.array(xs)
    before = cpu.kernels.compiles
    y = mr.sin(x) * mr.cos(x) + mr.exp(x)
    np.testing.assert_allclose(np.asarray(y), np.sin(xs) * np.cos(xs) + np.exp(xs), rtol=1e-6)
    assert cpu.kernels.compiles == before + 5


def test_bfloat16_round_trip():
    x = mr.array([1.0, 2.5, -3.25], mr.bfloat16)
    np.testing.assert_array_equal(np.asarray(x * 2), [2.0, 5.0, -6.5])
    assert (x * 2).dtype == mr.bfloat16


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3), st.integers(0, 2))
def test_binary_broadcasting_matches_numpy(shape, drop):
    rng = np.random.default_rng(len(shape) * 7 + drop)
    a_np = rng.standard_normal(shape).astype(np.float32)
    b_shape = [1 if i % 2 else s for i, s in enumerate(shape[drop:])]
    b_np = rng.standard_normal(b_shape).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mr.array(a_np) - mr.array(b_np)), a_np - b_np, rtol=1e-6)


def test_shape_error_names_op_shapes_and_user_line():
    with pytest.raises(ValueError) as err:
        mr.ones((2, 3)) + mr.ones((4,))
    msg = str(err.value)
    assert "add" in msg and "(2, 3)" in msg and "(4,)" in msg
    assert "test_api.py" in msg and "mr.ones((2, 3)) + mr.ones((4,))" in msg


def test_bad_reshape_and_axis_and_dtype_errors():
    with pytest.raises(ValueError, match="reshape"):
        mr.ones((2, 3)).reshape(4, 2)
    with pytest.raises(ValueError, match="transpose"):
        mr.transpose(mr.ones((2, 3)), (0, 5))
    with pytest.raises(TypeError, match="not a mirax dtype"):
        mr.ones((2,), dtype="float128")
    with pytest.raises(ValueError, match="bool"):
        -mr.array([True])


def test_devices():
    assert mr.default_device() == mr.cpu
    mr.set_default_device(mr.cpu)
    with pytest.raises(TypeError):
        mr.set_default_device("gpu")


def test_trace_gives_mirax_ir_with_locations():
    m = mr.trace(lambda x, y: mr.exp(x) * y + 1.0, mr.ones((2,)), mr.ones((2,)))
    text = str(m)
    assert "func.func @main(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>) -> tensor<2xf32>" in text
    assert '"mirax.exp"' in text and '"mirax.multiply"' in text and '"mirax.constant"' in text
    assert "test_api.py" in m.operation.get_asm(enable_debug_info=True)


def test_evaluating_inside_a_trace_raises():
    def f(x):
        return mr.array(x.item())
    with pytest.raises(mr.TraceError, match="inside a traced function"):
        mr.trace(f, mr.ones(()))
