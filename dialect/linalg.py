"""Linear-algebra primitives: matmul.

`matmul` multiplies (..., M, K) by (..., K, N) with equal batch dims and one dtype; the
Python API broadcasts the batch dims, promotes, and handles 1-D operands first.

    %0 = "mirax.matmul"(%a, %b) : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>

Lowering: `linalg.matmul` (2-D) or `linalg.batch_matmul` (leading dims collapsed to
one with `tensor.reshape`) into a zero `linalg.fill`.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import Aval, MiraxError, primitive
from .reduction import _reshape
from ..lowering.emit import ttype

MATMUL_TEST = [dt.float32, dt.float64, dt.int32]


def _matmul_shape(avals):
    a, b = avals
    if a.dtype is not b.dtype:
        raise MiraxError(f"mirax.matmul: operand dtypes differ: {a.dtype.name} and {b.dtype.name}")
    if a.dtype.kind not in "iuf":
        raise MiraxError(f"mirax.matmul does not support dtype {a.dtype.name}")
    if a.ndim < 2 or b.ndim < 2 or a.ndim != b.ndim:
        raise MiraxError(f"mirax.matmul: operands must have equal rank >= 2, got shapes {a.shape} and {b.shape}")
    if a.shape[:-2] != b.shape[:-2]:
        raise MiraxError(f"mirax.matmul: batch dims differ: shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise MiraxError(f"mirax.matmul: contraction dims differ: shapes {a.shape} and {b.shape} "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    return Aval(a.shape[:-1] + (b.shape[-1],), a.dtype)


def _matmul_lower(e, ins, in_avals, out):
    a, b = in_avals
    x, y = ins
    if a.ndim == 2 and b.shape[1] == 1 and a.dtype is dt.float32:
        return _matrix_times_column(e, x, y, a, b, out)
    if a.ndim == 2:
        init = e.fill(0, out)
        return e.op(f"linalg.matmul ins({x}, {y} : {ttype(a)}, {ttype(b)}) outs({init} : {ttype(out)}) "
                    f"-> {ttype(out)}")
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    a3 = Aval((batch,) + a.shape[-2:], a.dtype)
    b3 = Aval((batch,) + b.shape[-2:], b.dtype)
    o3 = Aval((batch,) + out.shape[-2:], out.dtype)
    x3, y3 = _reshape(e, x, a, a3), _reshape(e, y, b, b3)
    init = e.fill(0, o3)
    r = e.op(f"linalg.batch_matmul ins({x3}, {y3} : {ttype(a3)}, {ttype(b3)}) outs({init} : {ttype(o3)}) "
             f"-> {ttype(o3)}")
    return _reshape(e, r, o3, out)


def _matrix_times_column(e, x, y, a, b, out):
    """(M, K) @ (K, 1) as the row reduction sum_k x[m, k] * y[k]: the form
    `mirax-fuse-reductions` vectorizes with partial sums and splits over the threads (a
    linalg.matmul with N = 1 was left to the generic lowering, a strict in-order f32 sum
    an element at a time: 4096x4096 by a vector 16 ms against numpy's 1.4; as a row
    reduction 1.45, Emerald Rapids, 2 threads). A (K, 1) argument (not a 1-D vector
    reshaped, whose reshapes fold away) keeps the collapse_shape before the reduction,
    which that pass does not vectorize (9.4 ms); reading it through the map
    (m, k) -> (k, 0) instead was vectorized as a gather, element by element (130 ms)."""
    m, k = a.shape
    col = Aval((k,), b.dtype)
    v = e.op(f"tensor.collapse_shape {y} [[0, 1]] : {ttype(b)} into {ttype(col)}")
    rows = Aval((m,), out.dtype)
    r = e.generic([x, v], [a, col], rows, lambda b_, p, q, acc: b_.op(f"arith.addf {acc}, {b_.op(f'arith.mulf {p}, {q} : f32')} : f32"),
                  ["affine_map<(d0, d1) -> (d0, d1)>", "affine_map<(d0, d1) -> (d1)>", "affine_map<(d0, d1) -> (d0)>"],
                  ["parallel", "reduction"], init=e.fill(0, rows))
    return e.op(f"tensor.expand_shape {r} [[0, 1]] output_shape [{m}, 1] : {ttype(rows)} into {ttype(out)}")


def _matmul_ref(a, b):
    return np.matmul(a, b).astype(a.dtype)


primitive("matmul", ["lhs", "rhs"], _matmul_shape, _matmul_lower, _matmul_ref,
          summary="batched matrix product (..., M, K) x (..., K, N) -> (..., M, N)",
          dtypes=MATMUL_TEST)


# ---- transform rules -----------------------------------------------------------------

def _rules():
    import mirax as mr
    from .rules import defbatch, defjvp, defvjp, move_to_front

    def mm(a, b):
        from mirax.array import apply
        return apply("matmul", [a, b])

    def conj_t(x):
        """The conjugate transpose of the last two axes (conjugate only for complex)."""
        x = mr.conjugate(x) if x.dtype.kind == "c" else x
        return mr.swapaxes(x, -1, -2)

    defjvp("matmul", lambda g, a, b, out: mm(g, b), lambda g, a, b, out: mm(a, g))
    defvjp("matmul", lambda ct, a, b, out: mm(ct, conj_t(b)), lambda ct, a, b, out: mm(conj_t(a), ct))

    def matmul_batch(args, dims):
        a, b = args
        da, db = dims
        if da is not None and db is not None:
            return mm(move_to_front(a, da), move_to_front(b, db)), 0
        if db is None:
            # (..., M, K) batched by B, rhs unbatched: fold B into the rows,
            # (..., B, M, K) -> (..., B*M, K), then split the rows of the result
            n = a.ndim - 1  # rank of the unbatched operands and result
            a = mr.moveaxis(a, da, n - 2)  # (..., B, M, K)
            bsz, m, k = a.shape[-3:]
            lead = a.shape[:-3]
            r = mm(mr.reshape(a, lead + (bsz * m, k)), b)  # (..., B*M, N)
            return mr.reshape(r, lead + (bsz, m, b.shape[-1])), n - 2
        # lhs unbatched, rhs (..., K, N) batched by B: fold B into the columns,
        # (..., K, B, N) -> (..., K, B*N), then split the columns of the result
        n = b.ndim - 1
        b = mr.moveaxis(b, db, n - 1)  # (..., K, B, N)
        k, bsz, nn = b.shape[-3:]
        lead = b.shape[:-3]
        r = mm(a, mr.reshape(b, lead + (k, bsz * nn)))  # (..., M, B*N)
        return mr.reshape(r, lead + (a.shape[-2], bsz, nn)), n - 1
    defbatch("matmul", matmul_batch)


_rules()
