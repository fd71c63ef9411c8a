"""Collectives: host primitives that exchange arrays between the processes of an MPI
job (runtime/mpi.py, mpi4py on numpy buffers), as MLX's `mx.distributed` ops.

    %0 = "mirax.all_sum"(%x) {group = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "mirax.all_gather"(%x) {group = 0 : i64} : (tensor<2x3xf32>) -> tensor<4x3xf32>
    %2 = "mirax.recv"(%like) {src = 0 : i64, group = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>

`group` is the process group's id in this process (0: the world); the result shape of
`all_gather`/`sum_scatter` depends on the group's size, known when the op is built.
Like the LAPACK ops they run eagerly on the CPU and between the compiled segments of
`mr.compile` (runtime/host.py); `mirax-simplify` never folds or merges them (each one
is communication every rank must take part in).

Derivatives follow MLX: a loss computed after a collective is the same on every rank,
so the vjp of `all_sum` passes the cotangent through (summing it would count the loss
once per rank) and that of `all_gather` takes this rank's block; `sum_scatter`'s
is `all_gather`. `all_max`/`all_min` send the derivative to the ranks holding the
extreme (split between ties). `send`/`recv` have none (as in MLX).
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .core import I64, Aval, MiraxError, primitive
from ..runtime import host, mpi

GROUP = {"group": I64()}
COLLECTIVE_TEST = [dt.float32, dt.float64, dt.int32]
# never folded by mirax-simplify or merged with an equal op: each one communicates
COMMUNICATING = {"all_sum", "all_max", "all_min", "all_gather", "sum_scatter", "send", "recv"}


def _group_size(op, group):
    try:
        return mpi.group(group).size
    except ValueError as err:
        raise MiraxError(f"mirax.{op}: {err}") from None


def _reduce_shape(op):
    def shape(avals, group):
        x, = avals
        _group_size(op, group)
        if x.dtype is dt.bfloat16:
            raise MiraxError(f"mirax.{op}: bfloat16 is reduced as float32 (mirax.distributed.{op} converts it)")
        if op != "all_sum" and x.dtype.kind == "c":
            raise MiraxError(f"mirax.{op}: complex values have no order, got {x.dtype.name}{list(x.shape)}")
        return x
    return shape


def _gather_shape(avals, group):
    x, = avals
    n = _group_size("all_gather", group)
    return Aval((n * x.shape[0],) + x.shape[1:] if x.ndim else (n,), x.dtype)


def _scatter_shape(avals, group):
    x, = avals
    n = _group_size("sum_scatter", group)
    if x.dtype is dt.bfloat16:
        raise MiraxError("mirax.sum_scatter: bfloat16 is reduced as float32 (mirax.distributed.sum_scatter converts it)")
    if x.ndim == 0 or x.shape[0] % n:
        raise MiraxError(f"mirax.sum_scatter: invalid shape {list(x.shape)} for a group of size {n}: axis 0 must "
                         "exist and be divisible by the group size")
    return Aval((x.shape[0] // n,) + x.shape[1:], x.dtype)


def _peer_shape(op, peer):
    def shape(avals, group, **params):
        n = _group_size(op, group)
        p = params[peer]
        if n == 1:
            raise MiraxError(f"mirax.{op}: cannot {op} in a singleton group")
        if not 0 <= p < n:
            raise MiraxError(f"mirax.{op}: invalid {'destination' if peer == 'dst' else 'source'}={p} "
                             f"for a group of size {n}")
        return avals[0]
    return shape


# The numpy references hold for a group of one process (the table's test process);
# test_distributed.py checks groups of 2 and 4 processes against numpy.
def _one(x, group):
    return np.array(x)


def _gather_one(x, group):
    return np.array(x).reshape((x.shape[0],) + x.shape[1:] if x.ndim else (1,))


# arrays on the GPU are read to host memory, exchanged, and the result uploaded
for _name, _fn in (("all_sum", lambda x, group: mpi.all_reduce(x, group, "sum")),
                   ("all_max", lambda x, group: mpi.all_reduce(x, group, "max")),
                   ("all_min", lambda x, group: mpi.all_reduce(x, group, "min")),
                   ("all_gather", lambda x, group: mpi.all_gather(x, group)),
                   ("sum_scatter", lambda x, group: mpi.sum_scatter(x, group)),
                   ("send", lambda x, dst, group: mpi.send(x, dst, group)),
                   ("recv", lambda like, src, group: mpi.recv(like, src, group))):
    host.register(_name, _fn, family="distributed", gpu_through_host=True)

for _name, _what in (("all_sum", "sum"), ("all_max", "maximum"), ("all_min", "minimum")):
    primitive(_name, ["x"], _reduce_shape(_name), host.host_lowering(_name), _one, attrs=GROUP,
              summary=f"the elementwise {_what} of x over the processes of the group", dtypes=COLLECTIVE_TEST)
primitive("all_gather", ["x"], _gather_shape, host.host_lowering("all_gather"), _gather_one, attrs=GROUP,
          summary="x of every process of the group, concatenated along axis 0 (0-d: stacked)",
          dtypes=COLLECTIVE_TEST)
primitive("sum_scatter", ["x"], _scatter_shape, host.host_lowering("sum_scatter"), _one, attrs=GROUP,
          summary="the sum of x over the group, of which process r keeps block r of axis 0",
          dtypes=COLLECTIVE_TEST)
primitive("send", ["x"], _peer_shape("send", "dst"), host.host_lowering("send"), _one,
          attrs={"dst": I64(), **GROUP}, summary="send x to process dst of the group; the result is x")
primitive("recv", ["like"], _peer_shape("recv", "src"), host.host_lowering("recv"), _one,
          attrs={"src": I64(), **GROUP}, summary="an array shaped like `like`, received from process src")


# ---- transform rules -------------------------------------------------------------------

def _rules():
    import mirax as mr
    from mirax.array import apply
    from .core import PRIMITIVES
    from .rules import defbatch, deflinear, move_to_front

    def setrules(name, jvp, vjp):
        PRIMITIVES[name].jvp = jvp
        PRIMITIVES[name].vjp = vjp

    def same_dim(name):
        def batch(args, dims, **params):
            return apply(name, [args[0]], **params), dims[0]
        defbatch(name, batch)

    deflinear("all_sum")
    PRIMITIVES["all_sum"].vjp = lambda primals, ct, out, group: [ct]
    same_dim("all_sum")

    # max/min: the ranks holding the extreme share its derivative
    def extreme(name):
        def share(x, out, group):
            hit = x == out
            return hit, apply("all_sum", [mr.astype(hit, x.dtype)], group=group)

        def jvp(primals, tangents, out, group):
            t, = tangents
            if t is None:
                return None
            hit, count = share(primals[0], out, group)
            return apply("all_sum", [mr.where(hit, t, mr.zeros_like(t))], group=group) / count

        def vjp(primals, ct, out, group):
            hit, count = share(primals[0], out, group)
            return [mr.where(hit, ct, mr.zeros_like(ct)) / count]
        setrules(name, jvp, vjp)
        same_dim(name)
    extreme("all_max")
    extreme("all_min")

    # all_gather/sum_scatter work on axis 0: a batch dim goes to axis 1 (a 0-d operand
    # gets a leading axis of 1 first, so the batch stays second)
    def axis0(name):
        def batch(args, dims, group):
            x = move_to_front(args[0], dims[0])
            x = mr.swapaxes(x, 0, 1) if x.ndim > 1 else mr.expand_dims(x, 0)
            return apply(name, [x], group=group), 1
        defbatch(name, batch)

    def gather_vjp(primals, ct, out, group):
        x = primals[0]
        rank = mpi.group(group).rank
        n = x.shape[0] if x.ndim else 1
        block = ct[rank * n:(rank + 1) * n]
        return [block if x.ndim else mr.reshape(block, ())]
    deflinear("all_gather")
    PRIMITIVES["all_gather"].vjp = gather_vjp
    axis0("all_gather")

    deflinear("sum_scatter")
    PRIMITIVES["sum_scatter"].vjp = lambda primals, ct, out, group: [apply("all_gather", [ct], group=group)]
    axis0("sum_scatter")

    def no_derivative(name):
        def rule(*_args, **_params):
            raise MiraxError(f"mirax.{name}: point-to-point communication has no derivative (MLX has none either)")
        return rule
    setrules("send", no_derivative("send"), no_derivative("send"))
    same_dim("send")
    # what is received does not depend on the operand, which only gives shape and dtype
    setrules("recv", lambda primals, tangents, out, **params: None, lambda primals, ct, out, **params: [None])
    same_dim("recv")


_rules()
