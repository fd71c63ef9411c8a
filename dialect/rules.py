"""Helpers that give a primitive its transform rules, in the style of JAX's `ad.defjvp`.

Rules are written with mirax's own array API, so they emit mirax ops and nest freely
(grad of grad, vmap of grad). The three rules of a primitive `p`:

    p.jvp(primals, tangents, out, **params) -> tangent or None       (None: zero)
    p.vjp(primals, cotangent, out, **params) -> [cotangent or None per operand]
    p.batch(args, dims, **params) -> (out, out_dim)                   (dims: int or None)

    defjvp("sin", lambda g, x, out: g * mr.cos(x))
    defvjp("sin", lambda ct, x, out: ct * mr.conjugate(mr.cos(x)))
"""
from __future__ import annotations

from .core import PRIMITIVES


def _mr():
    import mirax
    return mirax


def _sum(terms):
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    acc = terms[0]
    for t in terms[1:]:
        acc = acc + t
    return acc


def defjvp(name, *fns):
    """Per-operand jvp terms `fn(tangent, *primals, out, **params)`; None for an operand
    with no derivative. The tangent is the sum of the terms of nonzero tangents."""
    def jvp(primals, tangents, out, **params):
        return _sum(fn(t, *primals, out, **params) for fn, t in zip(fns, tangents)
                    if fn is not None and t is not None)
    PRIMITIVES[name].jvp = jvp


def defvjp(name, *fns):
    """Per-operand vjp terms `fn(cotangent, *primals, out, **params)`; None for an
    operand that gets no cotangent (indices, conditions)."""
    def vjp(primals, ct, out, **params):
        return [fn(ct, *primals, out, **params) if fn is not None else None for fn in fns]
    PRIMITIVES[name].vjp = vjp


def deflinear(name):
    """A primitive linear in all its operands: its jvp applies it to the tangents."""
    PRIMITIVES[name].jvp = _linear_jvp(name)


def _linear_jvp(name):
    def jvp(primals, tangents, out, **params):
        from mirax.array import apply
        from mirax.ops import zeros
        if all(t is None for t in tangents):
            return None
        ts = [t if t is not None else zeros(p.shape, p.dtype) for p, t in zip(primals, tangents)]
        return apply(name, ts, **params)
    return jvp


def defbatch(name, fn):
    PRIMITIVES[name].batch = fn


# ---- batching helpers -------------------------------------------------------------------

def move_to_front(x, d):
    """x with its batch dimension `d` moved to axis 0 (d None: unchanged)."""
    if d is None or d == 0:
        return x
    return _mr().moveaxis(x, d, 0)


def batch_size(args, dims):
    for a, d in zip(args, dims):
        if d is not None:
            return a.shape[d]
    raise ValueError("no batched operand")


def bring_all_to_front(args, dims):
    """Every operand with its batch dim first; unbatched operands broadcast to the batch."""
    mr = _mr()
    n = batch_size(args, dims)
    out = []
    for a, d in zip(args, dims):
        if d is None:
            out.append(mr.broadcast_to(mr.expand_dims(a, 0), (n,) + a.shape))
        else:
            out.append(move_to_front(a, d))
    return out


def elementwise_batch(name):
    """Batching for same-shape elementwise ops: align batch dims, apply, batch dim 0."""
    def batch(args, dims, **params):
        from mirax.array import apply
        return apply(name, bring_all_to_front(args, dims), **params), 0
    PRIMITIVES[name].batch = batch
