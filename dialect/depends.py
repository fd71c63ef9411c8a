"""`depends`: `x` unchanged, with `dependency` as an operand (MLX's `depends`).

The dependency is an ordinary operand, so everything that walks operands (eval's
topological order, tracing, the transforms) reaches it with no special case: evaluating
the result evaluates the dependency first. The lowering returns `x` and never reads the
dependency, so after lowering, upstream DCE drops what only fed the dependency in a
compiled function (which has no side effects to keep).

    %2 = "mirax.depends"(%x, %d) : (tensor<3xf32>, tensor<2xi32>) -> tensor<3xf32>
"""
from __future__ import annotations

from .core import Aval, primitive
from . import dtypes as dt


def _depends_shape(avals):
    return Aval(avals[0].shape, avals[0].dtype)


def _depends_lower(e, ins, in_avals, out):
    return ins[0]


primitive("depends", ["x", "dependency"], _depends_shape, _depends_lower, lambda x, dependency: x,
          summary="x, evaluated after `dependency`", dtypes=[dt.float32, dt.int32])


def _rules():
    import mirax as mr
    from .core import PRIMITIVES
    from .rules import move_to_front

    p = PRIMITIVES["depends"]

    def jvp(primals, tangents, out):
        return tangents[0]  # None (zero) when x has no tangent

    def vjp(primals, ct, out):
        return [ct, None]

    def batch(args, dims):
        from mirax.array import apply
        (x, dep), (dx, dd) = args, dims
        if dx is None:  # only the dependency is batched: the value is the same for each example
            x = mr.broadcast_to(mr.expand_dims(x, 0), (dep.shape[dd],) + x.shape)
        else:
            x = move_to_front(x, dx)
        return apply("depends", [x, dep]), 0
    p.jvp, p.vjp, p.batch = jvp, vjp, batch


_rules()
