"""No silent wrong answers (issue 11): out-of-range indices follow one rule (JAX's:
gathers clamp, scatters drop, constants raise), integer division by zero gives numpy's
results, numpy views cannot write into mirax arrays, Python ints are never cut to a
narrower dtype, and wrapping mirax ops in the MLIR bindings costs no import."""
import os
import sys

import numpy as np
import pytest

import mirax as mr

DEVICES = [mr.cpu, mr.gpu]


def on(dev, f, *args):
    with mr.stream(dev):
        return np.asarray(f(*args))


# ---- out-of-range indices ----------------------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES, ids=str)
def test_gathers_clamp(dev):
    x = mr.arange(10) * 10
    i = mr.array([3, 12, -1, -20, 2**30])
    np.testing.assert_array_equal(on(dev, lambda: x[i]), [30, 90, 90, 0, 90])
    np.testing.assert_array_equal(on(dev, lambda: mr.take(x, i)), [30, 90, 90, 0, 90])
    np.testing.assert_array_equal(on(dev, lambda: mr.take_along_axis(x, i, axis=0)), [30, 90, 90, 0, 90])
    u = mr.array(np.array([3, 200], np.uint8))
    np.testing.assert_array_equal(on(dev, lambda: mr.take(x, u)), [30, 90])


@pytest.mark.parametrize("dev", DEVICES, ids=str)
def test_scatters_drop(dev):
    i = mr.array([1, 9, -1, -7, 2**30])
    u = mr.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(on(dev, lambda: mr.scatter_add(mr.zeros(5), i, u)), [0, 1, 0, 0, 3])
    x = mr.zeros((4, 5))
    got = on(dev, lambda: x.at[mr.array([1, 7, -1, -9]), 2].add(1.0))
    want = np.zeros((4, 5), np.float32)
    want[[1, 3], 2] = 1
    np.testing.assert_array_equal(got, want)
    got = on(dev, lambda: x.at[:, mr.array([0, 5, -5])].add(mr.array([[1.0, 2.0, 4.0]])))
    want = np.zeros((4, 5), np.float32)
    want[:, 0] = 5
    np.testing.assert_array_equal(got, want)


def test_scatter_drops_under_compile_and_vmap():
    f = lambda u, i: mr.scatter_add(mr.zeros(5), i, u)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(mr.compile(f)(mr.ones(3), mr.array([0, 7, 1]))), [1, 1, 0, 0, 0])
    got = mr.vmap(f)(mr.ones((2, 3)), mr.array([[0, 5, 1], [4, -1, -9]]))
    # row 0: 5 is out of range; row 1: -1 wraps to 4, -9 is out of range (must not reach row 0)
    np.testing.assert_array_equal(np.asarray(got), [[1, 1, 0, 0, 0], [0, 0, 0, 0, 2]])


def test_gradients_follow_the_rule():
    # a clamped gather read x[4] twice: its gradient goes there
    g = mr.grad(lambda x: mr.take(x, mr.array([1, 9, -1])).sum())(mr.arange(5.0))
    np.testing.assert_array_equal(np.asarray(g), [0, 1, 0, 0, 2])
    # a dropped update has no effect, so no gradient
    g = mr.grad(lambda u: mr.scatter_add(mr.zeros(5), mr.array([1, 9, -1]), u).sum())(mr.ones(3))
    np.testing.assert_array_equal(np.asarray(g), [1, 0, 1])


def test_constant_indices_out_of_range_raise():
    x = mr.arange(10)
    for f in (lambda: x[12], lambda: x[-11], lambda: x.at[10**9].add(1), lambda: x[[1, 10]],
              lambda: x.at[np.array([3, 10])].add(1)):
        with pytest.raises(IndexError, match="out of bounds"):
            f()


# ---- integer division -------------------------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES, ids=str)
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
def test_integer_division_by_zero_is_numpys(dev, dtype):
    d = np.dtype(dtype)
    info = np.iinfo(d)
    if d.kind == "i":
        a = np.array([7, -7, 0, 5, info.min, info.max], d)
        b = np.array([0, 0, 0, 0, -1, -1], d)  # and min // -1, which wraps in numpy
    else:
        a = np.array([7, 0, 5, info.max], d)
        b = np.array([0, 0, 0, 3], d)
    with np.errstate(all="ignore"):
        want_q, want_r = a // b, a % b
    np.testing.assert_array_equal(on(dev, mr.floor_divide, mr.array(a), mr.array(b)), want_q)
    np.testing.assert_array_equal(on(dev, mr.remainder, mr.array(a), mr.array(b)), want_r)
    f = mr.compile(lambda x, y: (x // y, x % y))
    q, r = f(mr.array(a), mr.array(b))
    np.testing.assert_array_equal(np.asarray(q), want_q)
    np.testing.assert_array_equal(np.asarray(r), want_r)


# ---- numpy views --------------------------------------------------------------------------

def test_numpy_views_are_read_only():
    y = mr.array([1.0, 2.0, 3.0])
    z = y * 2  # lazy: reads y's buffer when evaluated
    v = np.asarray(y)
    assert not v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        v[0] = 100
    c = np.array(y)  # a copy, writable, detached
    c[0] = 100
    np.testing.assert_array_equal(np.asarray(z), [2, 4, 6])
    np.testing.assert_array_equal(np.asarray(y), [1, 2, 3])
    assert np.asarray(y, dtype=np.float64).flags.writeable  # a conversion is a new array


# ---- Python ints ------------------------------------------------------------------------

def test_python_ints_are_never_cut():
    assert mr.array(7).dtype == mr.int32  # MLX: int32 when the value fits
    big = mr.array(2**40)
    assert big.dtype == mr.int64 and big.item() == 2**40
    assert mr.array(-2**31 - 1).dtype == mr.int64
    l = mr.array([1, 2**40])
    assert l.dtype == mr.int64 and l.tolist() == [1, 2**40]
    assert mr.array([[1, 2], [3, 4]]).dtype == mr.int32
    n = mr.array(np.int64(2**40))  # numpy scalars keep their dtype
    assert n.dtype == mr.int64 and n.item() == 2**40
    assert mr.array(np.int16(3)).dtype == mr.int16
    with pytest.raises(OverflowError):
        mr.array(2**70)
    # a Python int beside a narrower array: MLX's error, not a wrapped value
    with pytest.raises(ValueError, match="Converting 1099511627776 to int32 would result in overflow"):
        mr.array([1], mr.int32) + 2**40
    with pytest.raises(ValueError, match="to uint8 would result in overflow"):
        mr.array([1], mr.uint8) * 300
    with pytest.raises(ValueError, match="overflow"):
        mr.array(2**40, mr.int32)
    np.testing.assert_array_equal(np.asarray(mr.array([1], mr.int64) + 2**40), [2**40 + 1])
    # numpy arrays convert as numpy's astype does (an explicit cast)
    np.testing.assert_array_equal(np.asarray(mr.array(np.array([300]), mr.uint8)), [44])


# ---- the bindings' dialect module ---------------------------------------------------------

def test_wrapping_mirax_ops_imports_nothing():
    from mlir import ir
    from mirax.runtime.context import context
    text = ("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            + "".join(f'  %{i + 1} = "mirax.exp"(%{i if i else "a"}) : (tensor<4xf32>) -> tensor<4xf32>\n'
                      for i in range(50))
            + "  return %50 : tensor<4xf32>\n}\n")

    class Spy:
        names = []

        def find_spec(self, name, path=None, target=None):
            Spy.names.append(name)

    sys.meta_path.insert(0, Spy())
    try:
        with context(), ir.Location.unknown():
            m = ir.Module.parse(text)
            ops = list(m.body.operations[0].regions[0].blocks[0].operations)
    finally:
        sys.meta_path.pop(0)
    assert len(ops) == 51 and ops[0].operation.name == "mirax.exp"
    assert Spy.names == []  # before: one failed `import mlir.dialects.mirax` per op


@pytest.mark.parametrize("dev", DEVICES, ids=str)
def test_compiled_function_returning_a_value_twice(dev):
    """CSE makes one value of equal outputs; upstream buffer-results-to-out-params
    segfaulted on a function returning the same buffer twice (found by MLX's
    test_compile). mirax-distinct-results copies it for each later place."""
    x = mr.array([1.0, 2.0])
    with mr.stream(dev):
        outs = mr.compile(lambda x: (x + 1, x * 2, x + 1, x, x))(x)
        want = [[2, 3], [2, 4], [2, 3], [1, 2], [1, 2]]
        for o, w in zip(outs, want):
            np.testing.assert_array_equal(np.asarray(o), w)


def test_a_bad_number_in_a_mirax_variable_names_the_variable(monkeypatch):
    """`MIRAX_*` numbers (threads, cache sizes, capacities) that are not numbers raise a
    ValueError naming the variable and its value; `int('abc')` alone named neither."""
    from mirax.runtime.environment import number
    monkeypatch.setenv("MIRAX_TEST_NUMBER", "abc")
    with pytest.raises(ValueError, match=r"MIRAX_TEST_NUMBER='abc': expected an integer"):
        number("MIRAX_TEST_NUMBER", 1, int)
    for text, kind, want in (("", int, 7), ("12", int, 12), ("1e3", int, 1000), ("2.5", float, 2.5)):
        monkeypatch.setenv("MIRAX_TEST_NUMBER", text)
        assert number("MIRAX_TEST_NUMBER", 7, kind) == want
    monkeypatch.setenv("MIRAX_TEST_NUMBER", "-1")
    with pytest.raises(ValueError, match="expected at least 0"):
        number("MIRAX_TEST_NUMBER", 1, int, minimum=0)
    # read where kernels are compiled (the threads): the message, not a bare int() error
    import subprocess
    code = ("import numpy as np, mirax as mr\n"
            "try:\n"
            "    mr.eval(mr.compile(lambda a: a @ a)(mr.array(np.ones((256, 256), np.float32))))\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    env = dict(os.environ, MIRAX_NUM_THREADS="two", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "MIRAX_NUM_THREADS='two': expected an integer" in out.stdout, out.stderr[-2000:]
