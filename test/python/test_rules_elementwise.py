"""The elementwise primitives' jvp, vjp and batching rules, one row per primitive:
jvp against central finite differences in float64 (first and second order),
vjp/jvp consistency, and vmap against a Python loop."""
import numpy as np
import pytest

import mirax as mr
from arrays import A
from mirax.array import apply
from mirax.dialect.elementwise import BINARY, UNARY

NONDIFF = {"floor_divide", "sign", "floor", "ceil", "round", "logical_not", "stop_gradient", "equal", "not_equal", "less",
           "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "real", "imag", "conjugate"}


def _float64_ok(p):
    try:
        p.check([A(np.zeros(2)).aval] * len(p.operands), {})
        return True
    except ValueError:
        return False


UNARY_ROWS = sorted(n for n, p in UNARY.items() if n not in NONDIFF and _float64_ok(p))
BINARY_ROWS = sorted(n for n, p in BINARY.items() if n not in NONDIFF and _float64_ok(p))
EPS = 1e-6


def _input(name, shape, rng, k=0):
    p = (UNARY | BINARY)[name]
    lo, hi = p.test.get("domain") or (-2, 2)
    x = rng.uniform(lo, hi, size=shape)
    if name in ("abs", "maximum", "minimum", "remainder"):
        x = np.where(np.abs(x) < 0.1, 0.5, x)  # keep away from kinks
    if name in ("maximum", "minimum") and k == 1:
        x = x + 0.3  # no ties
    return x


def _fn(name):
    return lambda *xs: apply(name, list(xs))


def numeric_jvp(f, xs, ts):
    plus = f(*[A(x + EPS * t) for x, t in zip(xs, ts)])
    minus = f(*[A(x - EPS * t) for x, t in zip(xs, ts)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * EPS)


@pytest.mark.parametrize("name", UNARY_ROWS + BINARY_ROWS)
def test_jvp_matches_finite_differences(name, rng):
    n = len((UNARY | BINARY)[name].operands)
    xs = [_input(name, (3,), rng, k) for k in range(n)]
    ts = [rng.standard_normal(3) for _ in range(n)]
    f = _fn(name)
    _, (t,) = mr.jvp(f, [A(x) for x in xs], [A(t) for t in ts])
    np.testing.assert_allclose(np.asarray(t), numeric_jvp(f, xs, ts), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", UNARY_ROWS + BINARY_ROWS)
def test_second_derivative_matches_finite_differences(name, rng):
    n = len((UNARY | BINARY)[name].operands)
    xs = [_input(name, (3,), rng, k) for k in range(n)]
    f = _fn(name)

    def g(*args):  # first derivative along all-ones, by reverse mode
        return mr.grad(lambda *a: f(*a).sum())(*args)
    ts = [np.ones(3)] + [np.zeros(3)] * (n - 1)
    _, (t,) = mr.jvp(g, [A(x) for x in xs], [A(t) for t in ts])
    np.testing.assert_allclose(np.asarray(t), numeric_jvp(g, xs, ts), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", UNARY_ROWS + BINARY_ROWS)
def test_vjp_is_the_transpose_of_jvp(name, rng):
    n = len((UNARY | BINARY)[name].operands)
    xs = [A(_input(name, (2, 3), rng, k)) for k in range(n)]
    vs = [A(rng.standard_normal((2, 3))) for _ in range(n)]
    u = A(rng.standard_normal((2, 3)))
    f = _fn(name)
    _, (jv,) = mr.jvp(f, xs, vs)
    _, vjps = mr.vjp(f, xs, [u])
    lhs = sum(float((np.asarray(a) * np.asarray(b)).sum()) for a, b in zip(vjps, vs))
    rhs = float((np.asarray(u) * np.asarray(jv)).sum())
    assert abs(lhs - rhs) < 1e-8 * max(1.0, abs(rhs))


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY) + ["where", "astype"])
@pytest.mark.parametrize("in_axis", [0, 1])
def test_vmap_matches_a_loop(name, in_axis, rng):
    p = (UNARY | BINARY).get(name)
    if name == "where":
        args = [A(rng.random((4, 3)) < 0.5), A(rng.standard_normal((4, 3))),
                A(rng.standard_normal(3))]
        axes = (in_axis, in_axis, None)
        f = lambda c, x, y: mr.where(c, x, y)  # noqa: E731
    elif name == "astype":
        args, axes = [A(rng.standard_normal((4, 3)))], (in_axis,)
        f = lambda x: x.astype(mr.int32)  # noqa: E731
    else:
        d = p.test.get("dtypes", [mr.float32])[0]
        lo, hi = p.test.get("domain") or (-2, 2)
        n = len(p.operands)
        args = [A(rng.uniform(lo, hi, (4, 3)), d) for _ in range(n)]
        if d.kind == "b":
            args = [A(rng.random((4, 3)) < 0.5) for _ in range(n)]
        axes = (in_axis,) + (None,) * (n - 1) if n > 1 else (in_axis,)
        if n > 1:
            args[1] = args[1][0]  # the second operand is shared across the batch
        f = _fn(name)
    if in_axis == 1:
        args = [a.T if ax == 1 else a for a, ax in zip(args, axes)]
    got = mr.vmap(f, in_axes=axes)(*args)
    loop = []
    for b in range(4):
        ex = [(a[b] if ax == 0 else a[:, b]) if ax is not None else a for a, ax in zip(args, axes)]
        loop.append(np.asarray(f(*ex)))
    np.testing.assert_allclose(np.asarray(got), np.stack(loop), rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name,first,second", [("maximum", [0, 0, 1, 0], [1, 1, 0, 0]),
                                               ("minimum", [1, 0, 0, 0], [0, 1, 1, 0])])
def test_extremes_give_ties_to_the_second_operand_as_mlx(name, first, second):
    # MLX's rule: the first operand's share where it wins strictly (x > y for maximum),
    # the second's where x <= y: ties go to the second (relu = maximum(x, 0) has gradient
    # 0 at 0), a NaN to neither; jvp and vjp agree, compiled too
    x = A(np.array([-1.0, 2.0, 3.0, np.nan], np.float32))
    y = A(np.array([0.0, 2.0, 1.0, 0.0], np.float32))
    f = _fn(name)
    for grad in (mr.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1)),
                 mr.compile(mr.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1)))):
        gx, gy = grad(x, y)
        np.testing.assert_array_equal(np.asarray(gx), first)
        np.testing.assert_array_equal(np.asarray(gy), second)
    _, (tx,) = mr.jvp(lambda a: f(a, y), [x], [A(np.ones(4, np.float32))])
    _, (ty,) = mr.jvp(lambda b: f(x, b), [y], [A(np.ones(4, np.float32))])
    np.testing.assert_array_equal(np.asarray(tx), first)
    np.testing.assert_array_equal(np.asarray(ty), second)
    relu_grad = mr.grad(lambda a: mr.maximum(a, 0.0).sum())(A(np.array([-1.0, 0.0, 2.0], np.float32)))
    np.testing.assert_array_equal(np.asarray(relu_grad), [0, 0, 1])
