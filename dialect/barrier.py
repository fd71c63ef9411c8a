"""`optimization_barrier`: `x` unchanged, opaque to CSE and folding until bufferization
(as `stablehlo.optimization_barrier` / JAX's `lax.optimization_barrier`).

Reverse mode re-runs a `checkpoint`ed body in the backward pass on its inputs passed
through barriers (transforms/mirax_vjp.py), so that no simplification can see that the
recomputation equals the forward values and merge the two (which would keep the forward
activations alive until the backward pass and save no memory):

    %b = "mirax.optimization_barrier"(%x) : (tensor<8x4xf32>) -> tensor<8x4xf32>

mirax-simplify neither folds nor merges it, and upstream cse/canonicalize leave it alone
(an IRDL op has no side-effect information). `convert-mirax-to-linalg` keeps it, with the
lowered type, between linalg ops; `mirax-lower-barriers` replaces it by its operand just
before bufferization (each pipeline runs it there), after the last CSE on tensors, so the
recomputed values get buffers of their own, allocated after the forward ones are freed.

One value per op: IRDL would force every value of a variadic operand to one type (see
irdl.py). The backward pass orders the recomputation after the cotangents with `depends`.
"""
from __future__ import annotations

from .core import Aval, primitive
from . import dtypes as dt

NAME = "optimization_barrier"


def _barrier_shape(avals):
    return Aval(avals[0].shape, avals[0].dtype)


def _barrier_lower(e, ins, in_avals, out):
    from ..lowering.emit import ttype
    t = ttype(out)  # kept as an op until bufferization (see the module docstring)
    return e.op(f'"mirax.{NAME}"({ins[0]}) : ({t}) -> {t}', "barrier")


primitive(NAME, ["x"], _barrier_shape, _barrier_lower, lambda x: x,
          summary="x, opaque to CSE and folding until bufferization",
          dtypes=[dt.float32, dt.int32, dt.bool_])


def optimization_barrier(x):
    """`x` through a `mirax.optimization_barrier` (traced: one op; eager: a copy)."""
    from mirax.array import apply
    return apply(NAME, [x])


def _rules():
    from .core import PRIMITIVES

    p = PRIMITIVES[NAME]

    def jvp(primals, tangents, out):
        # the tangent through a barrier too: forward mode over a recomputation keeps it apart
        t = tangents[0]
        return None if t is None else optimization_barrier(t)

    def vjp(primals, ct, out):
        return [ct]

    def batch(args, dims):
        return optimization_barrier(args[0]), dims[0]
    p.jvp, p.vjp, p.batch = jvp, vjp, batch


_rules()
