"""`mirax.linalg`: MLX's `mx.linalg` — norms, cross products, inverses, solves and the
matrix decompositions.

    L = mr.linalg.cholesky(A, stream=mr.cpu)            # A = L @ L.T
    U, S, Vt = mr.linalg.svd(A)                          # A = U[:, :k] * S @ Vt
    x = mr.linalg.solve(A, b)
    mr.linalg.norm(A, ord="nuc")

The decompositions are host primitives (dialect/decomp.py): LAPACK through numpy.linalg
on the CPU, eagerly, under grad/vjp/jvp/vmap and inside `mr.compile`
(runtime/host.py). As in MLX they refuse the GPU ("Explicitly pass a CPU stream");
`norm` (except its SVD orders) and `cross` are compositions and run on any device.
Every function works on the last two axes, with leading axes as a batch.
"""
from __future__ import annotations

import math

import numpy as np

from . import device as _device
from .array import Array, apply, array, where_text
from .dialect import dtypes as dt
from .dialect.core import MiraxError, broadcast_shapes

__all__ = ["norm", "inv", "tri_inv", "pinv", "cholesky", "cholesky_inv", "qr", "svd", "eigh", "eigvalsh",
           "eig", "eigvals", "lu", "lu_factor", "solve", "solve_triangular", "cross", "det", "slogdet"]


def _mr():
    import mirax
    return mirax


def _arr(x) -> Array:
    return x if isinstance(x, Array) else array(x)


def _err(msg):
    return MiraxError(f"{msg}{where_text()}")


def _on(stream):
    return _device.stream(_device._as_device(stream))


def _cpu(stream, name):
    """The `with` block running a decomposition: the CPU only, as MLX."""
    dev = _device._as_device(stream)
    if dev.type is _device.DeviceType.gpu:
        raise _err(f"[linalg::{name}] This op is not yet supported on the GPU. "
                   "Explicitly pass a CPU stream to run it.")
    return _device.stream(dev)


def _check(a, name, kinds=(dt.float32, dt.float64), square=False, what="Arrays"):
    if a.dtype not in kinds:
        names = ", ".join(d.name for d in kinds[:-1]) + (" or " if len(kinds) > 1 else "") + kinds[-1].name
        raise _err(f"[linalg::{name}] {what} must have type {names}. Received array with type {a.dtype.name}.")
    if a.ndim < 2:
        raise _err(f"[linalg::{name}] {what} must have >= 2 dimensions. Received array with {a.ndim} dimensions.")
    if square and a.shape[-1] != a.shape[-2]:
        raise _err(f"[linalg::{name}] Only defined for square matrices, got shape {a.shape}.")


def _at_least_float(d):
    return d if d.is_inexact else dt.promote(d, dt.float32)


# ---- norms -------------------------------------------------------------------------------

def _l2(a, axis, keepdims):
    mr = _mr()
    sq = mr.abs(a) * mr.abs(a) if a.dtype.kind == "c" else mr.square(a)
    return mr.sqrt(mr.sum(sq, axis=axis, keepdims=keepdims))


def _vector_norm(a, ord, axis, keepdims):
    mr = _mr()
    d = _at_least_float(a.dtype)
    if ord == 0:
        return mr.sum(a != 0, axis=axis, keepdims=keepdims).astype(d)
    if ord == 1:
        return mr.sum(mr.abs(a), axis=axis, keepdims=keepdims).astype(d)
    if ord == 2:
        return _l2(a, axis, keepdims)
    if ord == math.inf:
        return mr.max(mr.abs(a), axis=axis, keepdims=keepdims).astype(d)
    if ord == -math.inf:
        return mr.min(mr.abs(a), axis=axis, keepdims=keepdims).astype(d)
    return mr.power(mr.sum(mr.power(mr.abs(a), mr.array(ord, d)), axis=axis, keepdims=keepdims),
                    mr.array(1.0 / ord, d))


def _as_matrices(a, row, col):
    """`a` with axes (row, col) moved last, in that order."""
    mr = _mr()
    if row > col:
        return mr.moveaxis(mr.moveaxis(a, row, -1), col, -1)
    return mr.moveaxis(mr.moveaxis(a, col, -1), row, -2)


def _singular_values(a, row, col, keepdims, reduce, stream):
    mr = _mr()
    s = reduce(svd(_as_matrices(a, row, col), compute_uv=False, stream=stream))
    if keepdims:
        s = mr.expand_dims(s, sorted((row, col)))
    return s


def _matrix_norm(a, ord, axis, keepdims, stream):
    mr = _mr()
    d = _at_least_float(a.dtype)
    row, col = (x % a.ndim if -a.ndim <= x < a.ndim else x for x in axis)
    if not (0 <= row < a.ndim and 0 <= col < a.ndim) or row == col:
        raise _err(f"[linalg::norm] Invalid axes {tuple(axis)} for an array of {a.ndim} dimensions.")
    if isinstance(ord, str):
        if ord in ("f", "fro"):
            return _l2(a, axis, keepdims)
        if ord == "nuc":
            return _singular_values(a, row, col, keepdims, lambda s: mr.sum(s, axis=-1), stream)
        raise _err(f"[linalg::norm] Invalid ord value '{ord}' for matrix norm.")
    if ord in (1, -1):
        c = col - (not keepdims and col > row)
        r = mr.sum(mr.abs(a), axis=row, keepdims=keepdims)
        return (mr.max if ord == 1 else mr.min)(r, axis=c, keepdims=keepdims).astype(d)
    if ord in (math.inf, -math.inf):
        r0 = row - (not keepdims and row > col)
        r = mr.sum(mr.abs(a), axis=col, keepdims=keepdims)
        return (mr.max if ord > 0 else mr.min)(r, axis=r0, keepdims=keepdims).astype(d)
    if ord in (2, -2):
        pick = (lambda s: mr.max(s, axis=-1)) if ord == 2 else (lambda s: mr.min(s, axis=-1))
        return _singular_values(a, row, col, keepdims, pick, stream).astype(d)
    raise _err(f"[linalg::norm] Invalid ord {ord} for matrix norm.")


def norm(a, /, ord=None, axis=None, keepdims=False, *, stream=None):
    """Vector or matrix norm (MLX's `mx.linalg.norm`, numpy's orders):

        mr.linalg.norm(x)                 # 2-norm of the flattened array
        mr.linalg.norm(m, ord="fro")      # also "nuc", inf, -inf, 1, -1, 2, -2 for matrices
        mr.linalg.norm(x, ord=3, axis=1)  # any p along one axis
    """
    a = _arr(a)
    if isinstance(axis, int):
        axis = [axis]
    elif axis is not None:
        axis = list(axis)
    with _on(stream):
        if ord is None:
            if axis is None:
                out = _l2(a.reshape(-1), [0], keepdims)
                return out.reshape((1,) * a.ndim) if keepdims else out
            if len(axis) > 2:
                raise _err("[linalg::norm] Received too many axes for norm.")
            return _l2(a, axis, keepdims)
        ax = list(range(a.ndim)) if axis is None else axis
        if isinstance(ord, str):
            if len(ax) != 2:
                raise _err(f"[linalg::norm] Norm '{ord}' only supported for matrices, but received "
                           f"{len(ax)} axis/axes.")
            return _matrix_norm(a, ord, ax, keepdims, stream)
        if len(ax) == 1:
            return _vector_norm(a, float(ord), ax, keepdims)
        if len(ax) == 2:
            return _matrix_norm(a, float(ord), ax, keepdims, stream)
        raise _err("[linalg::norm] Received too many axes for norm.")


# ---- inverses and factorizations --------------------------------------------------------------

def inv(a, *, stream=None):
    """Inverse of square matrices: `mr.linalg.inv(a) @ a` is the identity."""
    a = _arr(a)
    with _cpu(stream, "inv"):
        _check(a, "inv", square=True)
        return apply("inv", [a], tri=False, upper=False)


def tri_inv(a, upper=False, *, stream=None):
    """Inverse of triangular matrices; only the `upper` (or lower) triangle is read and
    the other triangle of the result is zero: `mr.linalg.tri_inv(L)`."""
    a = _arr(a)
    with _cpu(stream, "inv"):
        _check(a, "inv", square=True)
        return apply("inv", [a], tri=True, upper=bool(upper))


def cholesky(a, upper=False, *, stream=None):
    """Cholesky factor of symmetric positive definite matrices, from their lower (or
    `upper`) triangle: `L @ L.T == a`, or `U.T @ U == a`. For a matrix that is not
    positive definite the result is what LAPACK's potrf leaves (as MLX: no error)."""
    a = _arr(a)
    with _cpu(stream, "cholesky"):
        _check(a, "cholesky", square=True)
        return apply("cholesky", [a], upper=bool(upper))


def cholesky_inv(a, upper=False, *, stream=None):
    """Inverse of A from its Cholesky factor `a` (L, or U with `upper`):
    `mr.linalg.cholesky_inv(mr.linalg.cholesky(A))`."""
    mr = _mr()
    a = _arr(a)
    with _cpu(stream, "cholesky_inv"):
        _check(a, "cholesky_inv", square=True)
        li = apply("inv", [a], tri=True, upper=bool(upper))
        return mr.matmul(li, mr.swapaxes(li, -1, -2)) if upper else mr.matmul(mr.swapaxes(li, -1, -2), li)


def pinv(a, *, stream=None):
    """Moore-Penrose pseudo-inverse through the SVD (singular values below
    10 * max(M, N) * eps * max(S) count as zero): `a @ pinv(a) @ a == a`."""
    mr = _mr()
    a = _arr(a)
    with _cpu(stream, "pinv"):
        _check(a, "pinv")
        m, n = a.shape[-2:]
        if a.size == 0:
            return mr.zeros(a.shape[:-2] + (n, m), a.dtype)
        u = apply("svd", [a], output=0, full=False, compute_uv=True)
        s = apply("svd", [a], output=1, full=False, compute_uv=True)
        vt = apply("svd", [a], output=2, full=False, compute_uv=True)
        s = mr.expand_dims(s, -2)
        cutoff = 10.0 * max(m, n) * float(np.finfo(a.dtype.storage).eps) * mr.max(s, axis=-1, keepdims=True)
        big = s > cutoff
        rs = mr.where(big, 1 / mr.where(big, s, mr.ones_like(s)), mr.zeros_like(s))
        return mr.matmul(mr.swapaxes(vt, -1, -2) * rs, mr.swapaxes(u, -1, -2))


def qr(a, *, stream=None):
    """Reduced QR factorization: `Q, R = mr.linalg.qr(a)` with `Q @ R == a`, Q (..., M, K)
    with orthonormal columns, R (..., K, N) upper triangular, K = min(M, N)."""
    a = _arr(a)
    with _cpu(stream, "qr"):
        _check(a, "qr")
        return apply("qr", [a], output=0), apply("qr", [a], output=1)


def svd(a, compute_uv=True, *, stream=None):
    """Singular value decomposition: `U, S, Vt = mr.linalg.svd(a)` with U (..., M, M),
    S (..., K) descending, Vt (..., N, N) and `U[..., :K] * S[..., None, :] @ Vt == a`;
    `compute_uv=False` gives S alone."""
    a = _arr(a)
    with _cpu(stream, "svd"):
        _check(a, "svd", (dt.float32, dt.float64, dt.complex64), what="Input array")
        if not compute_uv:
            return apply("svd", [a], output=1, full=True, compute_uv=False)
        return tuple(apply("svd", [a], output=i, full=True, compute_uv=True) for i in range(3))


def _uplo(UPLO, name):
    if UPLO not in ("L", "U"):
        raise _err(f"[linalg::{name}] UPLO must be 'L' or 'U', got {UPLO!r}.")
    return UPLO == "U"


def eigh(a, UPLO="L", *, stream=None):
    """Eigenvalues (ascending) and eigenvectors (columns) of real symmetric or complex
    Hermitian matrices, read from the lower (`UPLO="L"`) or upper triangle:
    `w, V = mr.linalg.eigh(a)` with `a @ V == V * w[..., None, :]`."""
    a = _arr(a)
    with _cpu(stream, "eigh"):
        _check(a, "eigh", (dt.float32, dt.float64, dt.complex64), square=True)
        up = _uplo(UPLO, "eigh")
        return (apply("eigh", [a], output=0, upper=up, vectors=True),
                apply("eigh", [a], output=1, upper=up, vectors=True))


def eigvalsh(a, UPLO="L", *, stream=None):
    """Eigenvalues (ascending) of real symmetric or complex Hermitian matrices:
    `mr.linalg.eigvalsh(a)`."""
    a = _arr(a)
    with _cpu(stream, "eigvalsh"):
        _check(a, "eigvalsh", (dt.float32, dt.float64, dt.complex64), square=True)
        return apply("eigh", [a], output=0, upper=_uplo(UPLO, "eigvalsh"), vectors=False)


def eig(a, *, stream=None):
    """Eigenvalues and right eigenvectors (unit columns) of square matrices, always
    complex64: `w, V = mr.linalg.eig(a)`."""
    a = _arr(a)
    with _cpu(stream, "eig"):
        _check(a, "eig", (dt.float32, dt.float64, dt.complex64), square=True)
        return apply("eig", [a], output=0, vectors=True), apply("eig", [a], output=1, vectors=True)


def eigvals(a, *, stream=None):
    """Eigenvalues of square matrices, always complex64: `mr.linalg.eigvals(a)`."""
    a = _arr(a)
    with _cpu(stream, "eigvals"):
        _check(a, "eigvals", (dt.float32, dt.float64, dt.complex64), square=True)
        return apply("eig", [a], output=0, vectors=False)


def lu(a, *, stream=None):
    """LU factorization with partial pivoting: `P, L, U = mr.linalg.lu(a)` with
    `L[P, :] @ U == a` (P: uint32 row indices; L unit lower (M, K), U upper (K, N))."""
    mr = _mr()
    a = _arr(a)
    with _cpu(stream, "lu"):
        _check(a, "lu")
        packed = apply("lu", [a], output=0)
        rows = apply("lu", [a], output=2)
        m, n = a.shape[-2:]
        k = min(m, n)
        low, up = mr.tril(packed, -1), mr.triu(packed)
        if n != k:
            low = low[..., :, :k]
        elif m != k:
            up = up[..., :k, :]
        return rows, low + mr.eye(m, k, dtype=a.dtype), up


def lu_factor(a, *, stream=None):
    """Compact LU factorization: `LU, pivots = mr.linalg.lu_factor(a)`, L below the
    diagonal (unit diagonal implied), U on and above it; row i was swapped with row
    pivots[i] (uint32), in order, as LAPACK's getrf."""
    a = _arr(a)
    with _cpu(stream, "lu_factor"):
        _check(a, "lu_factor")
        return apply("lu", [a], output=0), apply("lu", [a], output=1)


def _solve_args(a, b, name):
    a, b = _arr(a), _arr(b)
    if a.ndim < 2:
        raise _err(f"[linalg::{name}] First input must have >= 2 dimensions. Received array with {a.ndim} dimensions.")
    if b.ndim < 1:
        raise _err(f"[linalg::{name}] Second input must have >= 1 dimensions. Received array with {b.ndim} dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise _err(f"[linalg::{name}] First input must be a square matrix. Received array with shape {a.shape}.")
    last = -2 if b.ndim > 1 else -1
    if a.shape[-1] != b.shape[last]:
        raise _err(f"[linalg::{name}] Last dimension of first input with shape {a.shape} must match second to "
                   f"last dimension of second input with shape {b.shape}.")
    d = dt.promote(a.dtype, b.dtype)
    if d not in (dt.float32, dt.float64):
        raise _err(f"[linalg::{name}] Input arrays must promote to float32 or float64. Received arrays with type "
                   f"{a.dtype.name} and {b.dtype.name}.")
    return a.astype(d), b.astype(d)


def solve(a, b, *, stream=None):
    """The solution X of `a @ X == b` (LAPACK's gesv); b is (..., N) or (..., N, K) and
    the batch dims broadcast: `mr.linalg.solve(a, b)`."""
    mr = _mr()
    with _cpu(stream, "solve"):
        a, b = _solve_args(a, b, "solve")
        vec = b.ndim == 1
        if vec:
            b = mr.expand_dims(b, -1)
        try:
            batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="[linalg::solve]")
        except MiraxError as err:
            raise _err(err) from None
        x = apply("solve", [mr.broadcast_to(a, batch + a.shape[-2:]), mr.broadcast_to(b, batch + b.shape[-2:])])
        return mr.squeeze(x, -1) if vec else x


def solve_triangular(a, b, *, upper=False, stream=None):
    """The solution X of `a @ X == b` for triangular `a` (its `upper` or lower triangle),
    as MLX: `tri_inv(a) @ b`."""
    mr = _mr()
    with _cpu(stream, "solve_triangular"):
        a, b = _solve_args(a, b, "solve_triangular")
        return mr.matmul(apply("inv", [a], tri=True, upper=bool(upper)), b)


# ---- determinants ------------------------------------------------------------------------

def _det_args(a, name):
    a = _arr(a)
    if a.dtype.kind == "c":
        raise _err(f"[linalg::{name}] Complex inputs are not supported.")
    if a.ndim < 2:
        raise _err(f"[linalg::{name}] Arrays must have >= 2 dimensions. Received array with {a.ndim} dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise _err(f"[linalg::{name}] Only defined for square matrices.")
    return a.astype(_at_least_float(a.dtype))


def _det_small(a):
    """Determinants of 0x0 to 3x3 matrices, by cofactors."""
    mr = _mr()
    n = a.shape[-1]
    if n == 0:
        return mr.ones(a.shape[:-2], a.dtype)

    def e(i, j):
        return a[..., i, j]
    if n == 1:
        return e(0, 0)
    if n == 2:
        return e(0, 0) * e(1, 1) - e(0, 1) * e(1, 0)
    return (e(0, 0) * (e(1, 1) * e(2, 2) - e(1, 2) * e(2, 1))
            - e(0, 1) * (e(1, 0) * e(2, 2) - e(1, 2) * e(2, 0))
            + e(0, 2) * (e(1, 0) * e(2, 1) - e(1, 1) * e(2, 0)))


def _slogdet(a):
    mr = _mr()
    if a.shape[-1] <= 3:
        raw = _det_small(a)
        return mr.sign(raw), mr.log(mr.abs(raw))
    packed, pivots = apply("lu", [a], output=0), apply("lu", [a], output=1)
    diag = mr.diagonal(packed, axis1=-2, axis2=-1)
    swaps = mr.sum(pivots != mr.arange(a.shape[-1], dtype=dt.uint32), axis=-1).astype(dt.int32)
    negative = mr.sum(diag < 0, axis=-1).astype(dt.int32)
    sign = (1 - 2 * ((swaps + negative) % 2)).astype(a.dtype)
    logabs = mr.sum(mr.log(mr.abs(diag)), axis=-1)
    zero = mr.any(diag == 0, axis=-1)
    return (mr.where(zero, mr.zeros_like(sign), sign),
            mr.where(zero, mr.full(logabs.shape, -math.inf, a.dtype), logabs))


def slogdet(a, *, stream=None):
    """Sign and log of the absolute determinant: `sign, logabs = mr.linalg.slogdet(a)`
    (0 and -inf for a singular matrix)."""
    with _cpu(stream, "slogdet"):
        return _slogdet(_det_args(a, "slogdet"))


def det(a, *, stream=None):
    """Determinants of square matrices (cofactors up to 3x3, else through LU):
    `mr.linalg.det(a)`."""
    mr = _mr()
    with _cpu(stream, "det"):
        a = _det_args(a, "det")
        if a.shape[-1] <= 3:
            return _det_small(a)
        sign, logabs = _slogdet(a)
        return sign * mr.exp(logabs)


# ---- cross product -----------------------------------------------------------------------

def cross(a, b, axis=-1, *, stream=None):
    """Cross product of 3-vectors (or 2-vectors, with a zero third component) along
    `axis`, with broadcasting: `mr.linalg.cross(a, b)`."""
    mr = _mr()
    a, b = _arr(a), _arr(b)
    for x in (a, b):
        if not -x.ndim <= axis < x.ndim:
            raise _err(f"[linalg::cross] axis {axis} is out of bounds for an array of {x.ndim} dimensions.")
        if x.shape[axis] not in (2, 3):
            raise _err("[linalg::cross] The specified axis must have size 2 or 3.")
    with _on(stream):
        a2, b2 = a.shape[axis] == 2, b.shape[axis] == 2
        d = dt.promote(a.dtype, b.dtype)
        ash, bsh = list(a.shape), list(b.shape)
        ash[axis] = 3
        bsh[axis] = 3
        try:
            out = list(broadcast_shapes(tuple(ash), tuple(bsh), op="[linalg::cross]"))
        except MiraxError as err:
            raise _err(err) from None
        ax = axis % len(out)
        out[ax] = a.shape[axis]
        a = mr.broadcast_to(a.astype(d), tuple(out))
        out[ax] = b.shape[axis]
        b = mr.broadcast_to(b.astype(d), tuple(out))
        x = mr.split(a, a.shape[ax], axis=ax)
        y = mr.split(b, b.shape[ax], axis=ax)
        if a2 and b2:
            z = mr.zeros_like(x[0])
            parts = [z, z]
        elif b2:
            parts = [-(x[2] * y[1]), x[2] * y[0]]
        elif a2:
            parts = [x[1] * y[2], -(x[0] * y[2])]
        else:
            parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2]]
        parts.append(x[0] * y[1] - x[1] * y[0])
        return mr.concatenate(parts, axis=ax)
