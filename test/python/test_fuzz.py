"""Random programs through the Python API (issue 11): hypothesis draws chains of
primitives over random shapes with broadcasting (fuzz_programs.py); each runs eagerly,
compiled, under `grad` (against central finite differences of the numpy program in
float64) and under `vmap` (against a loop), and is compared with numpy.

CI runs a small, reproducible budget; `make fuzz` a long random campaign:
    MIRAX_FUZZ_EXAMPLES=2000 pytest test/python/test_fuzz.py --hypothesis-show-statistics
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

import mirax as mr
from fuzz_programs import MIRAX, NUMPY, inputs_for, programs, run, run_all

EXAMPLES = int(os.environ.get("MIRAX_FUZZ_EXAMPLES", "15"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize="MIRAX_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def _seed(prog):
    return np.random.default_rng(abs(hash(repr(prog))) % 2**32)


def any_programs():
    """Programs over float32 or int32 inputs."""
    return st.sampled_from(["float32", "int32"]).flatmap(lambda d: programs(dtype=d))


def close(got, want):
    if np.dtype(got.dtype).kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@fuzz
@given(any_programs())
def test_eager_matches_numpy(prog):
    xs = inputs_for(prog, _seed(prog))
    want = run(prog, xs, NUMPY)
    got = run(prog, [mr.array(x) for x in xs], MIRAX)
    assert got.shape == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    close(np.asarray(got), want)


@settings(fuzz, max_examples=max(3, EXAMPLES // 3))
@given(programs())
def test_gpu_matches_numpy(prog):
    assume(not any(st_[1] == "bfloat16" for st_ in prog[1]))  # refused on the GPU, with its reason
    xs = inputs_for(prog, _seed(prog))
    want = run(prog, xs, NUMPY)
    with mr.stream(mr.gpu):
        got = run(prog, [mr.array(x) for x in xs], MIRAX)
        close(np.asarray(got), want)


@fuzz
@given(any_programs())
# found by this fuzzer: a compiled mean to a 0-d result crashed mirax-fuse-reductions
@example(prog=([(2,), (1,)], [("reduce", "mean", (0,), (0, False))], "float32"))
# found by this fuzzer: a 1-element cumsum fused into a broadcasting consumer summed again
# per consumer element (upstream fusion of a generic that read its own init)
@example(prog=([(2,)], [("reduce", "sum", (0,), (0, True)), ("cumsum", "cumsum", (1,), 0),
                        ("unary", "sin", (0,), None), ("where", "where", (2, 0), None)], "float32"))
# found by this fuzzer (returning every step): a compiled function returning one value
# twice (CSE merges equal steps) crashed upstream buffer-results-to-out-params
@example(prog=([(2,)], [("unary", "sin", (0,), None), ("unary", "sin", (0,), None)], "float32"))
def test_compiled_matches_eager(prog):
    """Every intermediate value is an output of the compiled function (many outputs,
    equal ones among them), compared with eager evaluation."""
    xs = [mr.array(x) for x in inputs_for(prog, _seed(prog))]
    eager = run_all(prog, xs, MIRAX)
    compiled = mr.compile(lambda *a: tuple(run_all(prog, a, MIRAX)))(*xs)
    assert len(compiled) == len(eager)
    for c, e in zip(compiled, eager):
        close(np.asarray(c), np.asarray(e))


@fuzz
@given(programs(smooth=True))
# found by this fuzzer: cumsum's rank-reducing slices were ambiguous for (1, 2, 1) along axis 2
@example(prog=([(1, 2, 1)], [("cumsum", "cumsum", (0,), -1)], "float32"))
# found by this fuzzer: an empty (0, 1) constant printed as `dense<[]>`, which says shape (0,)
@example(prog=([(1, 1), (1, 1)], [("slice", "slice", (0,), (0, slice(1, None, None)))], "float32"))
def test_grad_matches_finite_differences(prog):
    rng = _seed(prog)
    xs = inputs_for(prog, rng, np.float64)
    w = rng.uniform(-1, 1, np.shape(run(prog, xs, NUMPY)))

    def loss_np(x0):
        return float(np.sum(run(prog, [x0] + xs[1:], NUMPY) * w))

    def loss(x0, *rest):
        return (run(prog, [x0, *rest], MIRAX) * mr.array(w)).sum()
    g = np.asarray(mr.grad(loss)(*[mr.array(x) for x in xs]))
    fd = np.zeros_like(xs[0])
    eps = 1e-6
    for i in np.ndindex(xs[0].shape):
        hi, lo = xs[0].copy(), xs[0].copy()
        hi[i] += eps
        lo[i] -= eps
        fd[i] = (loss_np(hi) - loss_np(lo)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


@fuzz
@given(any_programs())
def test_vmap_matches_a_loop(prog):
    rng = _seed(prog)
    xs = inputs_for(prog, rng)
    batch = np.stack([xs[0], inputs_for(prog, rng)[0]])
    rest = [mr.array(x) for x in xs[1:]]
    got = mr.vmap(lambda b, *r: run(prog, [b, *r], MIRAX), in_axes=(0,) + (None,) * len(rest))(
        mr.array(batch), *rest)
    want = np.stack([run(prog, [b] + xs[1:], NUMPY) for b in batch])
    close(np.asarray(got), want)
