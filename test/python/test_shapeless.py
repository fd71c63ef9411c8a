"""mr.compile(shapeless=True) at new input shapes of the same ranks: the traced IR is
recorded again (no retrace) and must equal the eager result, or raise naming the op."""
import numpy as np
import pytest

import mirax as mr


def _rand(shape, seed=0):
    return mr.array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _check(fun, *shape_sets):
    """Compile `fun` shapeless, call it at each set of shapes; compare with eager and check
    that it was traced once."""
    cfun = mr.compile(fun, shapeless=True)
    for i, shapes in enumerate(shape_sets):
        args = [_rand(s, seed=i * 10 + k) for k, s in enumerate(shapes)]
        got, want = cfun(*args), fun(*args)
        assert got.shape == want.shape, (shapes, got.shape, want.shape)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert cfun.trace_count == 1


CASES = {
    "mean_keepdims": (lambda x: mr.mean(x, keepdims=True), [(2,)], [(4,)], [(7,)]),
    "mean_axis": (lambda x: mr.mean(x, axis=0), [(2, 3)], [(5, 3)], [(1, 4)]),
    "var_ddof": (lambda x: mr.var(x, axis=-1, ddof=1), [(2, 3)], [(4, 6)]),
    "std": (lambda x: mr.std(x), [(3, 2)], [(5, 5)]),
    "softmax": (lambda x: mr.softmax(x, axis=-1), [(2, 3)], [(4, 5)], [(1, 1)]),
    "layer_norm": (lambda x: (x - x.mean(-1, keepdims=True)) / mr.sqrt(x.var(-1, keepdims=True) + 1e-5),
                   [(2, 4)], [(3, 8)]),
    "broadcast": (lambda x, y: x * y + 1.0, [(2, 2), (2,)], [(3, 3), (3,)], [(3, 3), (1,)], [(1, 4), (4,)]),
    # a dim broadcast at trace time that is 1 on both sides later: must not keep the old size
    "broadcast_to_one": (lambda x: x * x.sum(-1, keepdims=True), [(3, 2)], [(1, 2)], [(4, 5)]),
    "where": (lambda c, x: mr.where(c > 0, x, 0.0), [(2, 3), (3,)], [(4, 5), (5,)]),
    "addmm": (lambda c, a, b: mr.addmm(c, a, b, alpha=2.0, beta=3.0),
              [(2, 4), (2, 3), (3, 4)], [(3, 5), (3, 6), (6, 5)]),
    "batched_matmul": (lambda a, b: a @ b, [(2, 1, 4, 2), (3, 2, 5)], [(3, 1, 2, 6), (2, 6, 3)]),
    "full_like": (lambda x: mr.zeros_like(x) + 2 * mr.ones_like(x) + mr.full_like(x, 3.0),
                  [(1, 1, 32)], [(2, 2, 16)]),
    "reshape_infer": (lambda x: x.reshape(6, -1), [(2, 3, 4)], [(2, 3, 8)]),
    "flatten": (lambda x: mr.flatten(x, 1) * 2, [(2, 3, 4)], [(5, 2, 2)]),
    "sum_all_keepdims": (lambda x: mr.sum(x, keepdims=True) / x, [(2, 3)], [(4, 1)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapeless_matches_eager(name):
    fun, *shape_sets = CASES[name]
    _check(fun, *shape_sets)


@pytest.mark.parametrize("reduction", [mr.sum, mr.mean, mr.max, mr.argmax, mr.prod])
def test_reduction_after_gather(reduction):
    buf = mr.array([10.0, 20.0, 30.0, 40.0, 50.0])

    def fun(buf, idx):
        return reduction(mr.take(buf, idx, axis=0))

    for ns in ([1, 2, 4], [3, 1]):
        cfun = mr.compile(fun, shapeless=True)
        for n in ns:
            idx = mr.arange(n)
            assert np.asarray(cfun(buf, idx)).tolist() == np.asarray(fun(buf, idx)).tolist(), (reduction, n)


def test_closure_not_seen_and_rank_retraces():
    y = [1.0]

    def fun(x):
        return x + y[0]

    cfun = mr.compile(fun, shapeless=True)
    np.testing.assert_allclose(np.asarray(cfun(mr.array([1.0, 2.0]))), [2.0, 3.0])
    y[0] = 2.0  # not retraced: the captured constant stays (as MLX)
    np.testing.assert_allclose(np.asarray(cfun(mr.array([1.0, 2.0, 3.0]))), [2.0, 3.0, 4.0])
    assert cfun.trace_count == 1
    out = cfun(mr.array([[1.0, 2.0]]))  # a new rank traces again
    assert cfun.trace_count == 2
    np.testing.assert_allclose(np.asarray(out), [[3.0, 4.0]])


def test_slice_of_changed_axis_raises():
    cfun = mr.compile(lambda x: x[1:] * 2, shapeless=True)
    np.testing.assert_allclose(np.asarray(cfun(mr.array([1.0, 2.0, 3.0]))), [4.0, 6.0])
    with pytest.raises(ValueError, match=r"mirax\.slice.*axis 0"):
        cfun(mr.array([1.0, 2.0, 3.0, 4.0]))
    # a slice along an axis that keeps its size follows the others
    cfun = mr.compile(lambda x: x[:, -1], shapeless=True)
    x = _rand((2, 3))
    np.testing.assert_allclose(np.asarray(cfun(x)), np.asarray(x[:, -1]))
    x = _rand((5, 3))
    np.testing.assert_allclose(np.asarray(cfun(x)), np.asarray(x[:, -1]))


def test_fixed_shapes_raise():
    b = mr.ones((2, 2))
    cfun = mr.compile(lambda a: mr.broadcast_to(a, b.shape), shapeless=True)
    assert cfun(mr.array([1.0])).shape == (2, 2)
    with pytest.raises(ValueError, match=r"broadcast_to.*\(3,\).*\(2, 2\)"):
        cfun(mr.array([1.0, 2.0, 3.0]))
    cfun = mr.compile(lambda x: x.reshape(6, -1), shapeless=True)
    assert cfun(mr.zeros((2, 3, 4))).shape == (6, 4)
    with pytest.raises(ValueError, match=r"shapeless=True.*mirax\.reshape"):
        cfun(mr.zeros((5, 5, 5)))


def test_error_names_user_line():
    cfun = mr.compile(lambda x: x[1:], shapeless=True)
    cfun(mr.zeros((3,)))
    with pytest.raises(ValueError, match="test_shapeless.py"):
        cfun(mr.zeros((4,)))
