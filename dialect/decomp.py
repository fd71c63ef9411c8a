"""Matrix decompositions: host primitives run by LAPACK through numpy.linalg on the CPU
(runtime/host.py), as MLX runs them on the CPU only.

    %0 = "mirax.inv"(%a) {tri = false, upper = false} : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %u = "mirax.svd"(%a) {output = 0 : i64, full = true, compute_uv = true} : (tensor<4x3xf32>) -> tensor<4x4xf32>

Every op works on the last two axes; leading axes are a batch. A decomposition with
several results is one op per result (`output`); the host computes them once.
`inv` (tri: only the `upper`/lower triangle is read), `cholesky` (reads one triangle),
`qr` (Q, R; reduced), `svd` (U, S, Vt), `eigh` (w, V; one triangle), `eig` (complex
w, V), `lu` (packed LU, LAPACK pivots, row permutation P with A = L[P] @ U), `solve`.
Derivatives: the classic formulas (inverse, Cholesky, symmetric eigenproblem, thin
SVD, QR with rows >= columns, square LU, solve); `eig` has none, as in MLX.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64, Aval, Bool, MiraxError, primitive
from ..runtime.host import host_lowering, register

FLOAT = (dt.float32, dt.float64)
FLOAT_OR_COMPLEX = (dt.float32, dt.float64, dt.complex64)


def _matrix(a, op, dtypes=FLOAT, square=True):
    if a.dtype not in dtypes:
        names = ", ".join(d.name for d in dtypes)
        raise MiraxError(f"mirax.{op}: arrays must have type {names}, got {a.dtype.name}")
    if a.ndim < 2:
        raise MiraxError(f"mirax.{op}: arrays must have >= 2 dimensions, got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise MiraxError(f"mirax.{op}: only defined for square matrices, got shape {a.shape}")


def _real(d):
    return dt.float32 if d is dt.complex64 else d


def _output(output, n, op):
    if not 0 <= output < n:
        raise MiraxError(f"mirax.{op}: output must be in [0, {n}), got {output}")


# ---- host functions (numpy in, numpy out) ---------------------------------------------

def _sym(a, upper):
    """The symmetric (Hermitian) matrix LAPACK sees when it reads one triangle of `a`."""
    t = np.triu(a) if upper else np.tril(a)
    off = np.triu(a, 1) if upper else np.tril(a, -1)
    return t + np.conj(np.swapaxes(off, -1, -2))


def _inv(a, tri, upper):
    if tri:
        a = np.triu(a) if upper else np.tril(a)
    try:
        r = np.linalg.inv(a)
    except np.linalg.LinAlgError:
        raise ValueError("[linalg::inv] the matrix is singular: it has no inverse") from None
    if tri:  # exact zeros in the other triangle, as LAPACK's trtri leaves them
        r = np.triu(r) if upper else np.tril(r)
    return r.astype(a.dtype, copy=False)


def _cholesky(a, upper):
    s = _sym(a, upper)
    try:
        low = np.linalg.cholesky(s)
    except np.linalg.LinAlgError:
        # not positive definite: MLX returns what LAPACK's potrf leaves (no error)
        flat = s.reshape((-1,) + s.shape[-2:])
        low = np.stack([_partial_cholesky(m) for m in flat]).reshape(s.shape)
    return np.swapaxes(low, -1, -2).copy() if upper else low


def _partial_cholesky(a):
    """Unblocked Cholesky (LAPACK's potf2) of one matrix: at the first non-positive pivot
    it stops, leaving that pivot unrooted and the columns after it as they were."""
    low = np.tril(a).copy()
    for j in range(a.shape[-1]):
        d = low[j, j] - low[j, :j] @ low[j, :j]
        if not d > 0:
            low[j, j] = d
            break
        low[j, j] = np.sqrt(d)
        low[j + 1:, j] = (low[j + 1:, j] - low[j + 1:, :j] @ low[j, :j]) / low[j, j]
    return low


def _qr(a):
    q, r = np.linalg.qr(a, mode="reduced")
    return q, r


def _svd(a, full, compute_uv):
    if not compute_uv:
        return None, np.linalg.svd(a, compute_uv=False), None
    u, s, vt = np.linalg.svd(a, full_matrices=full)
    return u, s, vt


def _eigh(a, upper, vectors):
    uplo = "U" if upper else "L"
    if not vectors:
        return np.linalg.eigvalsh(a, UPLO=uplo), None
    w, v = np.linalg.eigh(a, UPLO=uplo)
    return w, v


def _eig(a, vectors):
    if not vectors:
        return np.linalg.eigvals(a).astype(np.complex64), None
    w, v = np.linalg.eig(a)
    return w.astype(np.complex64), v.astype(np.complex64)


def _lu(a):
    """LAPACK's getrf (partial pivoting, row by row) on a batch: (packed LU, pivots as
    0-based row swaps, P with A = L[P] @ U)."""
    m, n = a.shape[-2:]
    lead = a.shape[:-2]
    x = np.array(a, copy=True).reshape((-1, m, n))
    nb, k = x.shape[0], min(m, n)
    pivots = np.zeros((nb, k), np.uint32)
    perm = np.tile(np.arange(m), (nb, 1))
    b = np.arange(nb)
    for j in range(k):
        p = j + np.argmax(np.abs(x[:, j:, j]), axis=1)
        pivots[:, j] = p
        rows = x[b, j].copy()
        x[b, j] = x[b, p]
        x[b, p] = rows
        pr = perm[b, j].copy()
        perm[b, j] = perm[b, p]
        perm[b, p] = pr
        piv = x[:, j, j]
        nz = piv != 0  # a zero pivot means a zero column: nothing to eliminate (getrf's info > 0)
        x[:, j + 1:, j] = np.where(nz[:, None], x[:, j + 1:, j] / np.where(nz, piv, 1)[:, None], x[:, j + 1:, j])
        x[:, j + 1:, j + 1:] -= x[:, j + 1:, j:j + 1] * x[:, j:j + 1, j + 1:]
    rows_of = np.argsort(perm, axis=1).astype(np.uint32)
    return x.reshape(a.shape), pivots.reshape(lead + (k,)), rows_of.reshape(lead + (m,))


def _solve(a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise ValueError("[linalg::solve] the matrix is singular: the system has no unique solution") from None


register("inv", _inv)
register("cholesky", _cholesky)
register("qr", _qr)
register("svd", _svd)
register("eigh", _eigh)
register("eig", _eig)
register("lu", _lu)
register("solve", _solve)


def _pick(fn):
    """The numpy reference of one result of a multi-result primitive."""
    def ref(*xs, output, **params):
        return fn(*xs, **params)[output]
    return ref


# ---- declarations ----------------------------------------------------------------------

def _inv_shape(avals, tri, upper):
    a, = avals
    _matrix(a, "inv")
    return a


def _cholesky_shape(avals, upper):
    a, = avals
    _matrix(a, "cholesky")
    return a


def _qr_shape(avals, output):
    a, = avals
    _matrix(a, "qr", square=False)
    _output(output, 2, "qr")
    m, n = a.shape[-2:]
    k = min(m, n)
    return Aval(a.shape[:-1] + (k,) if output == 0 else a.shape[:-2] + (k, n), a.dtype)


def _svd_shape(avals, output, full, compute_uv):
    a, = avals
    _matrix(a, "svd", FLOAT_OR_COMPLEX, square=False)
    _output(output, 3, "svd")
    if not compute_uv and output != 1:
        raise MiraxError("mirax.svd: without compute_uv only the singular values (output 1) exist")
    lead, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    if output == 1:
        return Aval(lead + (k,), _real(a.dtype))
    if output == 0:
        return Aval(lead + (m, m if full else k), a.dtype)
    return Aval(lead + (n if full else k, n), a.dtype)


def _eigh_shape(avals, output, upper, vectors):
    a, = avals
    _matrix(a, "eigh", FLOAT_OR_COMPLEX)
    _output(output, 2, "eigh")
    if not vectors and output != 0:
        raise MiraxError("mirax.eigh: without vectors only the eigenvalues (output 0) exist")
    return Aval(a.shape[:-1], _real(a.dtype)) if output == 0 else a


def _eig_shape(avals, output, vectors):
    a, = avals
    _matrix(a, "eig", FLOAT_OR_COMPLEX)
    _output(output, 2, "eig")
    if not vectors and output != 0:
        raise MiraxError("mirax.eig: without vectors only the eigenvalues (output 0) exist")
    return Aval(a.shape[:-1] if output == 0 else a.shape, dt.complex64)


def _lu_shape(avals, output):
    a, = avals
    _matrix(a, "lu", square=False)
    _output(output, 3, "lu")
    m, n = a.shape[-2:]
    if output == 0:
        return a
    return Aval(a.shape[:-2] + ((min(m, n),) if output == 1 else (m,)), dt.uint32)


def _solve_shape(avals):
    a, b = avals
    _matrix(a, "solve")
    if b.dtype is not a.dtype:
        raise MiraxError(f"mirax.solve: operand dtypes differ: {a.dtype.name} and {b.dtype.name}")
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
        raise MiraxError(f"mirax.solve: the right-hand side must be (..., {a.shape[-1]}, K) with the batch dims "
                         f"of the matrix, got shapes {a.shape} and {b.shape}")
    return b


DECOMP_TEST = [dt.float32, dt.float64]


def _well_conditioned(x):
    """A test operand made diagonally dominant (test hint `prepare`: the primitive table
    draws uniform values, which may make a nearly singular matrix)."""
    return x + 4 * x.shape[-1] * np.eye(x.shape[-1], dtype=x.dtype)

primitive("inv", ["x"], _inv_shape, host_lowering("inv"), _inv, attrs={"tri": Bool(), "upper": Bool()},
          summary="inverse of square matrices (tri: of the upper/lower triangle)", dtypes=DECOMP_TEST,
          prepare=lambda xs: [_well_conditioned(xs[0])])
primitive("cholesky", ["x"], _cholesky_shape, host_lowering("cholesky"), _cholesky, attrs={"upper": Bool()},
          summary="Cholesky factor of the symmetric matrix of one triangle", dtypes=DECOMP_TEST,
          prepare=lambda xs: [x @ np.swapaxes(x, -1, -2) + x.shape[-1] * np.eye(x.shape[-1], dtype=x.dtype)
                              for x in xs])
primitive("qr", ["x"], _qr_shape, host_lowering("qr"), _pick(_qr), attrs={"output": I64()},
          summary="reduced QR factorization: Q (output 0), R (output 1)", dtypes=DECOMP_TEST)
primitive("svd", ["x"], _svd_shape, host_lowering("svd"), _pick(_svd),
          attrs={"output": I64(), "full": Bool(), "compute_uv": Bool()},
          summary="singular value decomposition: U (output 0), S (output 1), Vt (output 2)", dtypes=DECOMP_TEST)
primitive("eigh", ["x"], _eigh_shape, host_lowering("eigh"), _pick(_eigh),
          attrs={"output": I64(), "upper": Bool(), "vectors": Bool()},
          summary="symmetric/Hermitian eigendecomposition of one triangle: w (output 0, ascending), V (output 1)",
          dtypes=DECOMP_TEST)
primitive("eig", ["x"], _eig_shape, host_lowering("eig"), _pick(_eig), attrs={"output": I64(), "vectors": Bool()},
          summary="eigendecomposition of square matrices: complex w (output 0), V (output 1)",
          dtypes=DECOMP_TEST)
primitive("lu", ["x"], _lu_shape, host_lowering("lu"), _pick(_lu), attrs={"output": I64()},
          summary="LU factorization with partial pivoting: packed LU (0), pivots (1), row permutation (2)",
          dtypes=DECOMP_TEST)
primitive("solve", ["a", "b"], _solve_shape, host_lowering("solve"), _solve,
          summary="solution X of A X = B for square A (..., N, N) and B (..., N, K)", dtypes=DECOMP_TEST,
          prepare=lambda xs: [_well_conditioned(xs[0])] + xs[1:])


# ---- transform rules -------------------------------------------------------------------

def _rules():
    import mirax as mr
    from mirax.array import apply
    from .rules import defbatch, move_to_front, bring_all_to_front

    T = lambda x: mr.swapaxes(x, -1, -2)  # noqa: E731

    def mm(a, b):
        return mr.matmul(a, b)

    def real_only(a, op):
        if a.dtype.kind == "c":
            raise MiraxError(f"mirax.{op}: derivatives of complex matrices are not supported")

    def sym(d, upper):
        """The change of the symmetric matrix read from one triangle, for a change d."""
        return (mr.triu(d) + T(mr.triu(d, 1))) if upper else (mr.tril(d) + T(mr.tril(d, -1)))

    def sym_t(g, upper):
        """The adjoint of `sym`: a cotangent of the symmetric matrix back onto the input."""
        return (mr.triu(g) + mr.triu(T(g), 1)) if upper else (mr.tril(g) + mr.tril(T(g), -1))

    def gap_inverse(w):
        """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it."""
        n = w.shape[-1]
        diff = mr.expand_dims(w, -2) - mr.expand_dims(w, -1)
        eye = mr.eye(n, dtype=w.dtype) > 0
        return mr.where(eye, mr.zeros_like(diff), 1 / mr.where(eye, mr.ones_like(diff), diff))

    def single(name, rule_batch=None):
        def batch(args, dims, **params):
            return apply(name, [move_to_front(args[0], dims[0])], **params), 0
        defbatch(name, rule_batch or batch)

    def setrules(name, jvp, vjp):
        from .core import PRIMITIVES
        PRIMITIVES[name].jvp = jvp
        PRIMITIVES[name].vjp = vjp

    # inverse: dX = -X dA X (of the triangle read, for tri)
    def inv_mask(d, tri, upper):
        return (mr.triu(d) if upper else mr.tril(d)) if tri else d

    def inv_jvp(primals, tangents, out, tri, upper):
        t, = tangents
        return None if t is None else -mm(mm(out, inv_mask(t, tri, upper)), out)

    def inv_vjp(primals, ct, out, tri, upper):
        return [inv_mask(-mm(mm(T(out), ct), T(out)), tri, upper)]
    setrules("inv", inv_jvp, inv_vjp)
    single("inv")

    # Cholesky A = L L^T: dL = L phi(L^-1 dA L^-T), phi = strict lower part + half the diagonal
    def phi(x):
        return mr.tril(x, -1) + mr.tril(mr.triu(x)) / 2

    def chol_parts(a, out, upper):
        real_only(a, "cholesky")
        low = T(out) if upper else out
        return low, apply("inv", [low], tri=True, upper=False)

    def chol_jvp(primals, tangents, out, upper):
        t, = tangents
        if t is None:
            return None
        low, linv = chol_parts(primals[0], out, upper)
        dl = mm(low, phi(mm(mm(linv, sym(t, upper)), T(linv))))
        return T(dl) if upper else dl

    def chol_vjp(primals, ct, out, upper):
        low, linv = chol_parts(primals[0], out, upper)
        ct_l = T(ct) if upper else ct
        g = mm(mm(T(linv), phi(mm(T(low), ct_l))), linv)
        return [sym_t(g, upper)]
    setrules("cholesky", chol_jvp, chol_vjp)
    single("cholesky")

    # symmetric eigenproblem: dw = diag(V^T dS V), dV = V (F * (V^T dS V))
    def eigh_parts(a, upper):
        real_only(a, "eigh")
        w = apply("eigh", [a], output=0, upper=upper, vectors=True)
        v = apply("eigh", [a], output=1, upper=upper, vectors=True)
        return w, v

    def eigh_jvp(primals, tangents, out, output, upper, vectors):
        t, = tangents
        if t is None:
            return None
        w, v = eigh_parts(primals[0], upper)
        p = mm(mm(T(v), sym(t, upper)), v)
        if output == 0:
            return mr.diagonal(p, axis1=-2, axis2=-1)
        return mm(v, gap_inverse(w) * p)

    def eigh_vjp(primals, ct, out, output, upper, vectors):
        w, v = eigh_parts(primals[0], upper)
        inner = mr.expand_dims(ct, -1) * mr.eye(w.shape[-1], dtype=w.dtype) if output == 0 \
            else gap_inverse(w) * mm(T(v), ct)
        return [sym_t(mm(mm(v, inner), T(v)), upper)]
    setrules("eigh", eigh_jvp, eigh_vjp)
    single("eigh")

    # SVD A = U diag(s) Vt: the thin-SVD formulas (JAX's svd_jvp_rule); full U or Vt of a
    # non-square matrix are not unique, so they have none
    def svd_parts(a, output, full):
        real_only(a, "svd")
        m, n = a.shape[-2:]
        if full and m != n and output != 1:
            raise MiraxError("mirax.svd: the derivatives of the full U and Vt of a non-square matrix are not "
                             "defined (their extra columns are arbitrary); differentiate the singular values "
                             "or use a square matrix")
        k = min(m, n)
        u = apply("svd", [a], output=0, full=full, compute_uv=True)
        s = apply("svd", [a], output=1, full=full, compute_uv=True)
        vt = apply("svd", [a], output=2, full=full, compute_uv=True)
        if full:
            u, vt = u[..., :, :k], vt[..., :k, :]
        return u, s, vt

    def svd_jvp(primals, tangents, out, output, full, compute_uv):
        t, = tangents
        if t is None:
            return None
        a = primals[0]
        u, s, vt = svd_parts(a, output, full)
        v = T(vt)
        dp = mm(mm(T(u), t), v)
        if output == 1:
            return mr.diagonal(dp, axis1=-2, axis2=-1)
        f = gap_inverse(s * s)
        row, col = mr.expand_dims(s, -2), mr.expand_dims(s, -1)
        m, n = a.shape[-2:]
        if output == 0:
            dss = dp * row
            du = mm(u, f * (dss + T(dss)))
            if m > n:
                dav = mm(t, v)
                du = du + (dav - mm(u, mm(T(u), dav))) / row
            return du
        sds = col * dp
        dv = mm(v, f * (sds + T(sds)))
        if n > m:
            dau = mm(T(t), u)
            dv = dv + (dau - mm(v, mm(vt, dau))) / row
        return T(dv)

    def svd_vjp(primals, ct, out, output, full, compute_uv):
        a = primals[0]
        u, s, vt = svd_parts(a, output, full)
        k = s.shape[-1]
        m, n = a.shape[-2:]
        if output == 1:
            return [mm(u * mr.expand_dims(ct, -2), vt)]
        f = gap_inverse(s * s)
        row, col = mr.expand_dims(s, -2), mr.expand_dims(s, -1)
        if output == 0:
            ct = ct[..., :, :k] if full else ct
            j = f * mm(T(u), ct)
            g = mm(mm(u, (j + T(j)) * row), vt)
            if m > n:
                g = g + mm((ct - mm(u, mm(T(u), ct))) / row, vt)
            return [g]
        ctv = T(ct[..., :k, :] if full else ct)
        v = T(vt)
        j = f * mm(vt, ctv)
        g = mm(mm(u, col * (j + T(j))), vt)
        if n > m:
            g = g + mm(u, T((ctv - mm(v, mm(vt, ctv))) / row))
        return [g]
    setrules("svd", svd_jvp, svd_vjp)
    single("svd")

    # QR (rows >= columns): X = dA R^-1, C = Q^T X, O = tril(C, -1) - its transpose,
    # dQ = Q O + X - Q C, dR = (C - O) R
    def qr_parts(a):
        real_only(a, "qr")
        m, n = a.shape[-2:]
        if m < n:
            raise MiraxError(f"mirax.qr: derivatives need at least as many rows as columns, got shape {a.shape}")
        q = apply("qr", [a], output=0)
        r = apply("qr", [a], output=1)
        return q, r, apply("inv", [r], tri=True, upper=True)

    def qr_jvp(primals, tangents, out, output):
        t, = tangents
        if t is None:
            return None
        q, r, rinv = qr_parts(primals[0])
        x = mm(t, rinv)
        c = mm(T(q), x)
        low = mr.tril(c, -1)
        o = low - T(low)
        return mm(q, o) + x - mm(q, c) if output == 0 else mm(c - o, r)

    def qr_vjp(primals, ct, out, output):
        q, r, rinv = qr_parts(primals[0])
        kk = -mm(T(q), ct) if output == 0 else mm(ct, T(r))
        gc = kk + mr.tril(T(kk) - kk, -1)
        gx = mm(q, gc) + (ct if output == 0 else 0)
        return [mm(gx, T(rinv))]
    setrules("qr", qr_jvp, qr_vjp)
    single("qr")

    # LU of a square matrix, A[perm] = L U: X = L^-1 dA[perm] U^-1, dL = L tril(X, -1),
    # dU = triu(X) U; the pivots and the permutation are piecewise constant
    def lu_parts(a):
        real_only(a, "lu")
        if a.shape[-1] != a.shape[-2]:
            raise MiraxError(f"mirax.lu: derivatives are defined for square matrices, got shape {a.shape}")
        lu = apply("lu", [a], output=0)
        rows_of = apply("lu", [a], output=2)
        n = a.shape[-1]
        low = mr.tril(lu, -1) + mr.eye(n, dtype=a.dtype)
        up = mr.triu(lu)
        return (rows_of, apply("inv", [low], tri=True, upper=False), apply("inv", [up], tri=True, upper=True),
                low, up)

    def lu_jvp(primals, tangents, out, output):
        t, = tangents
        if t is None or output != 0:
            return None
        rows_of, linv, uinv, low, up = lu_parts(primals[0])
        perm = mr.argsort(rows_of, axis=-1)
        x = mm(mm(linv, mr.take_along_axis(t, mr.expand_dims(perm, -1), axis=-2)), uinv)
        return mm(low, mr.tril(x, -1)) + mm(mr.triu(x), up)

    def lu_vjp(primals, ct, out, output):
        if output != 0:
            return [None]
        rows_of, linv, uinv, low, up = lu_parts(primals[0])
        gx = mr.tril(mm(T(low), ct), -1) + mr.triu(mm(ct, T(up)))
        g = mm(mm(T(linv), gx), T(uinv))
        return [mr.take_along_axis(g, mr.expand_dims(rows_of, -1), axis=-2)]
    setrules("lu", lu_jvp, lu_vjp)
    single("lu")

    # eig: MLX does not differentiate it either
    def eig_none(*_args, **_params):
        raise MiraxError("mirax.eig: derivatives of eig/eigvals are not implemented (MLX has none); "
                         "for symmetric matrices use eigh")
    setrules("eig", eig_none, eig_none)
    single("eig")

    # solve A X = B: dX = A^-1 (dB - dA X); cotangents B: A^-T ct, A: -(A^-T ct) X^T
    def solve_jvp(primals, tangents, out):
        a, b = primals
        ta, tb = tangents
        rhs = None
        if tb is not None:
            rhs = tb
        if ta is not None:
            rhs = -mm(ta, out) if rhs is None else rhs - mm(ta, out)
        return None if rhs is None else apply("solve", [a, rhs])

    def solve_vjp(primals, ct, out):
        a, b = primals
        gb = apply("solve", [T(a), ct])
        return [-mm(gb, T(out)), gb]
    setrules("solve", solve_jvp, solve_vjp)

    def solve_batch(args, dims):
        return apply("solve", bring_all_to_front(args, dims)), 0
    defbatch("solve", solve_batch)


_rules()
