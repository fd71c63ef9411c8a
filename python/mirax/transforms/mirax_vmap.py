"""`mirax-vmap`: `@f(x...) -> (y...)` gains `@f_vmap` mapping it over a batch axis.

    mirax-opt --mirax-vmap="function=f in-axes=0,none out-axes=0 batch-size=8" f.mlir

`in-axes` gives each argument's batch axis (`none`: not batched), `out-axes` each
result's. Every op is batched by its primitive's batching rule: no per-example loop.
"""
from __future__ import annotations

from ..dialect.core import MiraxError
from .interpret import apply_op, as_list, call_kind, emit_function, find_function, interpret, placeholders, \
    signature, tracing
from .options import TransformPass, int_list

NAME = "mirax-vmap"


def batch_rule(prim, params, ins, aval, op=None):
    """The (value, batch dim) of one op given (value, batch dim) operands."""
    xs = [x for x, _ in ins]
    dims = [d for _, d in ins]
    if all(d is None for d in dims):
        return apply_op(prim, params, xs, aval), None
    if prim.batch is None:
        raise MiraxError(f"mirax.{prim.name} has no batching rule")
    return prim.batch(xs, dims, **params)


def move_batch_axis(x, d, out_axis, size):
    """x with its batch dim at `out_axis` (broadcast when x is not batched)."""
    import mirax as mr
    if d is None:
        x = mr.broadcast_to(mr.expand_dims(x, 0), (size,) + x.shape)
        d = 0
    if out_axis is None:
        out_axis = d
    if not -x.ndim <= out_axis < x.ndim:
        raise MiraxError(f"{NAME}: out-axis {out_axis} out of range for a result of shape {x.shape}")
    out_axis %= x.ndim
    return x if d == out_axis else mr.moveaxis(x, d, out_axis)


def vmap_values(module, name, args, in_axes, out_axes, size):
    def call(op, callee, ins):
        kind, cf, n = call_kind(op)
        if cf is None or cf._vmap is None or any(d is not None for _, d in ins[n:]):
            return interpret(module, callee, ins, batch_rule, call)  # batch the body
        if n == 1:  # MLX: one argument (and its axis) passed as itself
            outs, axes = cf._vmap(ins[0][0], ins[0][1])
        else:
            outs, axes = cf._vmap([x for x, _ in ins[:n]], [d for _, d in ins[:n]])
        return list(zip(as_list(outs), as_list(axes)))
    outs = interpret(module, name, list(zip(args, in_axes)), batch_rule, call)
    if len(out_axes) == 1 and len(outs) > 1:
        out_axes = out_axes * len(outs)
    if len(out_axes) != len(outs):
        raise MiraxError(f"{NAME}: {len(out_axes)} out-axes for @{name} with {len(outs)} results")
    return [move_batch_axis(x, d, oa, size) for (x, d), oa in zip(outs, out_axes)]


def vmap_function(module, name, new_name, in_axes, out_axes, size):
    ins, outs = signature(find_function(module, name))
    if len(in_axes) == 1 and len(ins) > 1:
        in_axes = in_axes * len(ins)
    if len(in_axes) != len(ins):
        raise MiraxError(f"{NAME}: {len(in_axes)} in-axes for @{name} with {len(ins)} arguments")
    batched = []
    for a, ax in zip(ins, in_axes):
        if ax is None:
            batched.append(a)
            continue
        if not -a.ndim - 1 <= ax <= a.ndim:
            raise MiraxError(f"{NAME}: in-axis {ax} out of range for an argument of shape {a.shape}")
        ax = ax % (a.ndim + 1)
        batched.append(type(a)(a.shape[:ax] + (size,) + a.shape[ax:], a.dtype))
    ph = placeholders(batched)
    axes = [None if ax is None else ax % (a.ndim + 1) for a, ax in zip(ins, in_axes)]
    with tracing():
        results = vmap_values(module, name, ph, axes, out_axes or [0], size)
    emit_function(module, new_name, ph, results, source=name)


class MiraxVmap(TransformPass):
    name = NAME
    summary = "Add @f_vmap: @f mapped over a batch axis of its arguments"
    options = {"function": ("", "the function to map"),
               "in-axes": ("0", "batch axis of each argument, or none (comma separated)"),
               "out-axes": ("0", "batch axis of each result"),
               "batch-size": (0, "the size of the batch axis"),
               "result": ("", "name of the new function (default: <function>_vmap)")}
    suffix = "vmap"

    def transform(self, module, fn, new):
        try:
            size = int(self.opts["batch-size"])
        except ValueError:
            raise ValueError(f"{NAME}: option batch-size={self.opts['batch-size']!r} is not an integer") from None
        if size <= 0:
            raise MiraxError(f"{NAME}: needs batch-size=<n> (a positive size)")
        vmap_function(module, fn, new, int_list(self.opts["in-axes"], allow_none=True),
                      int_list(self.opts["out-axes"], allow_none=True), size)
