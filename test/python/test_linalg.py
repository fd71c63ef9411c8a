"""mirax.linalg against numpy: norms, cross, the decompositions (host primitives run by
LAPACK through numpy), their batching, derivatives (finite differences in float64),
vmap, compile (segments around host calls) and the GPU refusal."""
import math

import numpy as np
import pytest

import mirax as mr
from arrays import A
import mirax.linalg as la
from mirax.runtime import host


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def spd(rng, shape, dtype=np.float64):
    x = rng.normal(size=shape)
    return (x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


def check_grad(f, x, rtol=1e-5, atol=1e-6, eps=1e-6):
    """The gradient of a scalar function of a float64 array against central finite
    differences along two random directions."""
    g = np.asarray(mr.grad(f)(A(x)))
    for seed in (1, 2):
        t = np.random.default_rng(seed).normal(size=x.shape)
        fd = (f(A(x + eps * t)).item() - f(A(x - eps * t)).item()) / (2 * eps)
        np.testing.assert_allclose(np.sum(g * t), fd, rtol=rtol, atol=atol)


# ---- norms and cross -------------------------------------------------------------------------

@pytest.mark.parametrize("shape,keepdims", [((4,), False), ((2, 3), True), ((2, 3, 4), False)])
def test_norm_matches_numpy(shape, keepdims):
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape) - 5
    a = A(x)
    close(la.norm(a, keepdims=keepdims), np.linalg.norm(x, keepdims=keepdims))
    for axis in range(len(shape)):
        for o in [None, 0, 0.5, 1, 2, 3, -1, math.inf, -math.inf]:
            got = la.norm(a, ord=o, axis=axis, keepdims=keepdims)
            want = np.linalg.norm(x, ord=o, axis=axis, keepdims=keepdims)
            assert got.shape == want.shape and got.dtype == mr.float32
            close(got, want)
    if len(shape) >= 2:
        for axis in [(0, 1), (1, 0), (-1, -2)][: 3 if len(shape) == 3 else 2]:
            for o in [None, "fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]:
                got = la.norm(a, ord=o, axis=axis, keepdims=keepdims)
                want = np.linalg.norm(x, ord=o, axis=axis, keepdims=keepdims)
                assert got.shape == want.shape, (o, axis, keepdims)
                close(got, want, rtol=1e-5, atol=1e-4)


def test_norm_dtypes_and_errors():
    assert la.norm(A([3, 4])).dtype == mr.float32
    assert la.norm(A([3, 4]), ord=1).item() == 7.0
    assert la.norm(A([3.0, 4.0], mr.float64)).dtype == mr.float64
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    close(la.norm(A(z)), np.linalg.norm(z))
    with pytest.raises(ValueError, match="only supported for matrices"):
        la.norm(mr.ones((3,)), ord="fro")
    with pytest.raises(ValueError, match="too many axes"):
        la.norm(mr.ones((2, 2, 2)), ord=2)
    with pytest.raises(ValueError, match="Invalid ord"):
        la.norm(mr.ones((2, 2)), ord=3)
    with pytest.raises(ValueError, match="Invalid ord value"):
        la.norm(mr.ones((2, 2)), ord="max")


def test_cross_matches_numpy(rng):
    for sa, sb, axis in [((3,), (3,), -1), ((2, 1, 3), (1, 4, 3), -1), ((3, 2), (3, 2), 0),
                         ((2,), (3,), -1), ((3,), (2,), -1), ((5, 2), (5, 2), -1)]:
        x, y = rng.normal(size=sa).astype(np.float32), rng.normal(size=sb).astype(np.float32)
        got = la.cross(A(x), A(y), axis=axis)
        pad = [np.concatenate([v, np.zeros(v.shape[:-1] + (1,), v.dtype)], -1) if v.shape[axis] == 2 else v
               for v in (x, y)]  # a 2-vector has a zero third component
        want = np.cross(pad[0], pad[1], axis=axis)
        assert got.shape == want.shape
        close(got, want)
    got = la.cross(A([1, 2, 3]), A([4, 5, 6]))
    assert got.dtype == mr.int32 and got.tolist() == [-3, 6, -3]
    with pytest.raises(ValueError, match="size 2 or 3"):
        la.cross(A([1.0]), A([4.0]))


# ---- decompositions against numpy ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inverses(rng, dtype):
    x = (rng.normal(size=(2, 4, 4)) + 4 * np.eye(4)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    got = la.inv(A(x))
    assert got.dtype == A(x).dtype
    close(got, np.linalg.inv(x), tol, tol)
    for upper in (False, True):
        t = la.tri_inv(A(x), upper=upper)
        tri = np.triu(x) if upper else np.tril(x)
        close(t, np.linalg.inv(tri), tol, tol)
        zero = np.tril(np.ones((4, 4)), -1) if upper else np.triu(np.ones((4, 4)), 1)
        assert np.all(np.asarray(t)[..., zero > 0] == 0)
    a = spd(rng, (2, 4, 4), dtype)
    for upper in (False, True):
        c = la.cholesky(A(a), upper=upper)
        close(la.cholesky_inv(c, upper=upper), np.linalg.inv(a), 1e-4, 1e-5)
    p = la.pinv(A(x[:, :, :3]))
    close(p, np.linalg.pinv(x[:, :, :3]), 1e-4, 1e-5)
    assert la.pinv(mr.zeros((0, 3))).shape == (3, 0)


def test_cholesky_reads_one_triangle(rng):
    a = spd(rng, (3, 3, 3), np.float32)
    junk = a + np.triu(np.full((3, 3), 100.0, np.float32), 1)
    lo = la.cholesky(A(junk))
    close(lo, np.linalg.cholesky(a), 1e-5, 1e-5)
    up = la.cholesky(A(np.swapaxes(junk, -1, -2)), upper=True)
    close(up, np.swapaxes(np.linalg.cholesky(a), -1, -2), 1e-5, 1e-5)
    # not positive definite: no error; LAPACK stops at the first pivot (the first here)
    bad = np.asarray(la.cholesky(A(np.stack([a[0], -a[1]]))))
    close(bad[0], np.linalg.cholesky(a[0]), 1e-5, 1e-5)
    np.testing.assert_array_equal(bad[1], np.tril(-a[1]))
    s = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
    semi = s.T @ s / 81 + np.float32(1 / 9)  # singular: the last pivot rounds to about zero
    low = np.asarray(la.cholesky(A(semi)))
    close(low @ low.T, semi, 1e-6, 1e-6)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 3, 3)])
def test_qr_and_svd(rng, shape):
    x = rng.normal(size=shape).astype(np.float32)
    q, r = la.qr(A(x))
    qn, rn = np.linalg.qr(x)
    assert q.shape == qn.shape and r.shape == rn.shape and q.dtype == mr.float32
    close(q @ r, x)
    close(np.asarray(r), np.triu(np.asarray(r)))
    u, s, vt = la.svd(A(x))
    un, sn, vtn = np.linalg.svd(x)
    assert (u.shape, s.shape, vt.shape) == (un.shape, sn.shape, vtn.shape)
    k = min(shape[-2:])
    close((u[..., :, :k] * mr.expand_dims(s, -2)) @ vt[..., :k, :], x)
    close(la.svd(A(x), compute_uv=False), sn)


def test_svd_complex_and_empty():
    z = np.array([[1 + 1j, 2 + 2j], [3 + 3j, 4 - 4j]], np.complex64)
    u, s, vt = la.svd(A(z))
    assert s.dtype == mr.float32 and u.dtype == mr.complex64
    close(s, np.linalg.svd(z, compute_uv=False))
    for shape in [(5, 0), (2, 0, 5)]:
        u, s, vt = la.svd(mr.zeros(shape))
        un, sn, vtn = np.linalg.svd(np.zeros(shape, np.float32))
        assert (u.shape, s.shape, vt.shape) == (un.shape, sn.shape, vtn.shape)
        np.testing.assert_array_equal(np.asarray(u), un)


def test_eigh_and_eig(rng):
    x = rng.normal(size=(2, 4, 4)).astype(np.float32)
    for uplo in ("L", "U"):
        w, v = la.eigh(A(x), UPLO=uplo)
        wn = np.linalg.eigvalsh(x, UPLO=uplo)
        close(w, wn, 1e-4, 1e-4)
        close(la.eigvalsh(A(x), UPLO=uplo), wn, 1e-4, 1e-4)
        sym = np.tril(x) + np.swapaxes(np.tril(x, -1), -1, -2) if uplo == "L" else \
            np.triu(x) + np.swapaxes(np.triu(x, 1), -1, -2)
        close(A(sym) @ v, v * mr.expand_dims(w, -2), 1e-4, 1e-4)
    w, v = la.eig(A(x))
    assert w.dtype == mr.complex64 and v.dtype == mr.complex64
    wn, vn = np.linalg.eig(x)
    xv = np.einsum("bij,bjk->bik", x.astype(np.complex64), np.asarray(v))
    close(xv, np.asarray(v) * np.asarray(w)[:, None, :], 1e-4, 1e-4)
    close(np.sort_complex(np.asarray(la.eigvals(A(x))).ravel()), np.sort_complex(wn.ravel()), 1e-4, 1e-4)
    with pytest.raises(ValueError, match="UPLO"):
        la.eigh(A(x), UPLO="X")


def test_lu_and_lu_factor(rng):
    for shape in [(4, 4), (3, 5), (5, 3), (2, 3, 3)]:
        x = rng.normal(size=shape).astype(np.float32)
        p, low, up = la.lu(A(x))
        assert p.dtype == mr.uint32 and low.shape[-1] == up.shape[-2] == min(shape[-2:])
        close(mr.take_along_axis(low, mr.expand_dims(p.astype(mr.int32), -1), axis=-2) @ up, x)
    x = rng.normal(size=(5, 5)).astype(np.float32)
    packed, piv = la.lu_factor(A(x))
    perm = list(range(5))
    for i, j in enumerate(piv.tolist()):
        perm[i], perm[j] = perm[j], perm[i]
    lo = np.tril(np.asarray(packed), -1) + np.eye(5)
    close(lo @ np.triu(np.asarray(packed)), x[perm])
    singular = A([[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
    p, low, up = la.lu(singular)  # no error, as LAPACK
    close(low[p.astype(mr.int32)] @ up, np.asarray(singular))


def test_solve_and_determinants(rng):
    a = rng.normal(size=(3, 1, 4, 4)).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
    b = rng.normal(size=(2, 4, 3)).astype(np.float32)
    close(la.solve(A(a), A(b)), np.linalg.solve(a, b), 1e-4, 1e-5)
    v = rng.normal(size=(4,)).astype(np.float32)
    close(la.solve(A(a[0, 0]), A(v)), np.linalg.solve(a[0, 0], v), 1e-4, 1e-5)
    t = np.triu(a[0, 0])
    close(la.solve_triangular(A(t), A(v), upper=True), np.linalg.solve(t, v), 1e-4, 1e-5)
    close(la.solve_triangular(A(a[0, 0]), A(v)), np.linalg.solve(np.tril(a[0, 0]), v), 1e-4, 1e-5)
    x = rng.normal(size=(3, 5, 5))
    close(la.det(A(x, mr.float64)), np.linalg.det(x), 1e-10, 1e-10)
    close(la.det(A(x[:, :3, :3])), np.linalg.det(x[:, :3, :3]), 1e-5, 1e-5)
    sign, logabs = la.slogdet(A(x, mr.float64))
    sn, ln = np.linalg.slogdet(x)
    close(sign, sn)
    close(logabs, ln, 1e-10, 1e-10)
    s0, l0 = la.slogdet(mr.zeros((4, 4)))
    assert s0.item() == 0 and l0.item() == -math.inf
    assert la.solve(A([[1.0, 0.0], [0.0, 2.0]]), A([1, 2])).dtype == mr.float32


def test_input_errors():
    for fn in (la.inv, la.cholesky, la.qr, la.svd, la.eigh, la.eig, la.lu, la.lu_factor, la.eigvals):
        with pytest.raises(ValueError, match="dimensions"):
            fn(A([1.0, 2.0]))
    for fn in (la.inv, la.cholesky, la.qr, la.lu):
        with pytest.raises(ValueError, match="type"):
            fn(A([[0, 1], [1, 0]]))
    for fn in (la.inv, la.cholesky, la.eigh, la.eig, la.eigvalsh):
        with pytest.raises(ValueError, match="square"):
            fn(mr.ones((2, 3)))
    with pytest.raises(ValueError, match="must match"):
        la.solve(mr.ones((3, 3)), mr.ones((2,)))
    with pytest.raises(ValueError, match="square"):
        la.solve(mr.ones((3, 2)), mr.ones((3,)))
    with pytest.raises(ValueError, match="promote to float32"):
        la.solve(A([[1, 0], [0, 1]]), A([1, 1]))
    with pytest.raises(ValueError, match="Complex"):
        la.det(A(np.eye(2, dtype=np.complex64)))


def test_decompositions_refuse_the_gpu_and_compositions_do_not():
    for fn in (la.inv, la.cholesky, la.qr, la.svd, la.eigh, la.eigvalsh, la.eig, la.lu, la.pinv, la.det):
        with pytest.raises(ValueError, match="not yet supported on the GPU"):
            fn(mr.eye(3), stream=mr.gpu)
    with pytest.raises(ValueError, match="not yet supported on the GPU"):
        la.norm(mr.eye(3), ord=2, stream=mr.gpu)
    with pytest.raises(ValueError, match="not yet supported on the GPU"):
        with mr.stream(mr.gpu):
            la.solve(mr.eye(3), mr.ones((3,)))
    if not mr.is_available(mr.gpu):
        pytest.skip("no GPU device here")
    x = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    close(la.norm(A(x), stream=mr.gpu), np.linalg.norm(x))
    close(la.norm(A(x), ord=1, axis=0, stream=mr.gpu), np.linalg.norm(x, ord=1, axis=0))
    close(la.cross(A([1.0, 0, 0]), A([0.0, 1, 0]), stream=mr.gpu), [0, 0, 1])


# ---- derivatives -------------------------------------------------------------------------------

def test_grads_match_finite_differences(rng):
    x = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    a = spd(rng, (3, 3))
    w = A(rng.normal(size=(3, 3)))
    check_grad(lambda m: (la.inv(m) * w).sum(), x)
    check_grad(lambda m: (la.tri_inv(m, upper=True) * w).sum(), x)
    check_grad(lambda m: (la.tri_inv(m) * w).sum(), x)
    for upper in (False, True):
        check_grad(lambda m: (la.cholesky(m, upper=upper) * w).sum(), a)
        check_grad(lambda m: (la.eigvalsh(m, UPLO="U" if upper else "L") * A([1.0, -2.0, 0.5])).sum(), x)
    # eigenvectors and singular vectors: functions that do not see their signs
    check_grad(lambda m: ((la.eigh(m)[1] ** 2) * w).sum(), x)
    check_grad(lambda m: (la.svd(m, compute_uv=False) * A([1.0, 2.0, -1.0])).sum(), x)
    check_grad(lambda m: ((lambda u, s, vt: (u * u * w).sum() + (vt * vt * w).sum())(*la.svd(m))), x)
    for shape in [(4, 3), (3, 4)]:
        r = rng.normal(size=shape)
        wp = A(rng.normal(size=shape[::-1]))
        check_grad(lambda m: (la.pinv(m) * wp).sum(), r)
        check_grad(lambda m: la.norm(m, ord="nuc") + la.norm(m, ord=2), r)
    tall = rng.normal(size=(4, 3))
    wq, wr = A(rng.normal(size=(4, 3))), A(rng.normal(size=(3, 3)))
    check_grad(lambda m: (la.qr(m)[0] * wq).sum() + (la.qr(m)[1] * wr).sum(), tall)
    b = rng.normal(size=(3, 2))
    wb = A(rng.normal(size=(3, 2)))
    check_grad(lambda m: (la.solve(m, A(b)) * wb).sum(), x)
    check_grad(lambda v: (la.solve(A(x), v) * wb).sum(), b)
    check_grad(lambda m: (la.solve_triangular(m, A(b), upper=True) * wb).sum(), x)
    y = rng.normal(size=(5, 5))
    check_grad(lambda m: la.det(m), y, rtol=1e-4)
    check_grad(lambda m: la.slogdet(m)[1], y)
    wl = A(rng.normal(size=(5, 5)))
    check_grad(lambda m: (la.lu_factor(m)[0] * wl).sum(), y)
    check_grad(lambda m: la.cholesky_inv(la.cholesky(m)).sum(), a)


def test_jvp_matches_finite_differences(rng):
    x = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    t = rng.normal(size=(3, 3))
    for f in (la.inv, lambda m: la.cholesky(m + m.T), lambda m: la.qr(m)[1], lambda m: la.svd(m)[1],
              lambda m: la.eigvalsh(m), lambda m: la.lu(m)[2]):
        _, tan = mr.jvp(f, [A(x)], [A(t)])
        eps = 1e-6
        fd = (np.asarray(f(A(x + eps * t))) - np.asarray(f(A(x - eps * t)))) / (2 * eps)
        close(tan[0], fd, 1e-5, 1e-6)


def test_eig_has_no_derivative():
    with pytest.raises(ValueError, match="not implemented"):
        mr.grad(lambda m: mr.real(la.eigvals(m)).sum())(mr.eye(2))


# ---- vmap and compile ----------------------------------------------------------------------------

def test_vmap(rng):
    x = rng.normal(size=(3, 4, 4)).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
    close(mr.vmap(la.inv)(A(x)), np.linalg.inv(x), 1e-5, 1e-5)
    xt = np.transpose(x, (1, 0, 2))
    close(mr.vmap(lambda m: la.svd(m, compute_uv=False), in_axes=1)(A(xt)),
          np.linalg.svd(x, compute_uv=False), 1e-5, 1e-5)
    b = rng.normal(size=(4,)).astype(np.float32)
    close(mr.vmap(la.solve, in_axes=(0, None))(A(x), A(b)), np.linalg.solve(x, b[:, None])[..., 0],
          1e-4, 1e-5)
    bb = rng.normal(size=(3, 4)).astype(np.float32)
    close(mr.vmap(la.solve, in_axes=(None, 0))(A(x[0]), A(bb)),
          np.linalg.solve(x[0], bb.T).T, 1e-4, 1e-5)
    close(mr.vmap(lambda m: la.eigh(m)[0])(A(x)), np.linalg.eigvalsh(x), 1e-4, 1e-4)
    close(mr.vmap(mr.grad(lambda m: la.det(m)))(A(x, mr.float64)),
          np.linalg.det(x)[:, None, None] * np.swapaxes(np.linalg.inv(x), -1, -2), 1e-4, 1e-4)


def test_compile_runs_host_calls_between_segments(rng):
    a = spd(rng, (2, 4, 4), np.float32)
    b = rng.normal(size=(2, 4, 2)).astype(np.float32)

    def f(m, v):
        low = la.cholesky(m * 2)            # host call on a compiled value
        y = la.solve(low, v) + 1            # host result -> host call -> compiled op
        w, vec = la.eigh(m)                 # two results of one host call
        return y * 3, mr.exp(w).sum(), vec ** 2, v

    cf = mr.compile(f)
    want = f(A(a), A(b))
    got = cf(A(a), A(b))
    for g, w_ in zip(got, want):
        close(g, np.asarray(w_), 1e-5, 1e-5)
    again = cf(A(a + 1), A(b))
    close(again[0], np.asarray(f(A(a + 1), A(b))[0]), 1e-5, 1e-5)
    assert cf.trace_count == 1
    close(mr.compile(mr.grad(lambda m: la.inv(m).sum()))(A(a[0])),
          np.asarray(mr.grad(lambda m: la.inv(m).sum())(A(a[0]))), 1e-5, 1e-5)


def test_host_split_program_stages(rng):
    def f(m):
        return mr.exp(la.inv(la.inv(m * 2) + 1)).sum() + m.sum()
    x = (rng.normal(size=(3, 3)) + 3 * np.eye(3)).astype(np.float32)
    module = mr.trace(f, A(x))
    assert host.has_host_ops(str(module))
    prog = host.HostSplitProgram(str(module))
    assert len(prog.calls) == 2 and [c[0] for c in prog.calls] == [0, 1]
    assert [s.kernel is not None for s in prog.segments] == [True, True, True]
    out, = prog([x])
    close(out, np.exp(np.linalg.inv(np.linalg.inv(2 * x) + 1)).sum() + x.sum(), 1e-4, 1e-4)
    with pytest.raises(ValueError, match="no linalg lowering"):
        mr.compile(f).lower(A(x)).as_text("linalg")
