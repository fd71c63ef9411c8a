"""`mirax-jvp`: forward mode. `@f(x...) -> (y...)` gains
`@f_jvp(x..., tx...) -> (y..., ty...)`, with tangents for the arguments in `argnums`.

    mirax-opt --mirax-jvp="function=f argnums=0" f.mlir

Each op's tangent comes from its primitive's jvp rule; integer and bool values have
no tangent (zero).
"""
from __future__ import annotations

from ..dialect.core import MiraxError
from .interpret import apply_op, as_list, call_kind, emit_function, find_function, interpret, placeholders, \
    signature, tracing, zeros_for
from .options import TransformPass, int_list

NAME = "mirax-jvp"


def jvp_rule(prim, params, ins, aval, op=None):
    """The (primal, tangent) of one op given (primal, tangent) operands."""
    primals = [p for p, _ in ins]
    tangents = [t if t is not None and p.dtype.is_inexact else None for p, t in ins]
    out = apply_op(prim, params, primals, aval)
    if all(t is None for t in tangents) or not out.dtype.is_inexact:
        return out, None
    if prim.jvp is None:
        raise MiraxError(f"mirax.{prim.name} has no jvp rule")
    return out, prim.jvp(primals, tangents, out, **params)


def jvp_values(module, name, primals, tangents):
    """Interpret `@name` on primal arrays with tangents (None: zero); (outs, tangent outs)."""
    def call(op, callee, ins):
        kind, cf, n = call_kind(op)
        if cf is None or cf._jvp is None:  # differentiate the body
            return interpret(module, callee, ins, jvp_rule, call)
        ps = [p for p, _ in ins]
        outs = interpret(module, callee, ps, apply_op)
        ts = [t if t is not None else zeros_for(p.aval) for p, t in ins[:n]]
        if n == 1:  # MLX: one argument is passed as itself, not as a list
            touts = as_list(cf._jvp(ps[0], ts[0]))
        else:
            touts = as_list(cf._jvp(ps[:n], ts))
        return list(zip(outs, touts))
    pairs = interpret(module, name, list(zip(primals, tangents)), jvp_rule, call)
    return [p for p, _ in pairs], [t for _, t in pairs]


def jvp_function(module, name, new_name, argnums):
    ins, _ = signature(find_function(module, name))
    for i in argnums:
        if not 0 <= i < len(ins):
            raise MiraxError(f"{NAME}: argnum {i} out of range for @{name} with {len(ins)} arguments")
    ph = placeholders(ins + [ins[i] for i in argnums])
    primals, tph = ph[:len(ins)], ph[len(ins):]
    tangents = [None] * len(ins)
    for i, t in zip(argnums, tph):
        tangents[i] = t
    with tracing():
        outs, touts = jvp_values(module, name, primals, tangents)
        touts = [t if t is not None else zeros_for(o.aval) for o, t in zip(outs, touts)]
    emit_function(module, new_name, ph, outs + touts, source=name)


class MiraxJvp(TransformPass):
    name = NAME
    summary = "Add @f_jvp(x..., tx...) -> (y..., ty...): forward-mode derivatives of @f"
    options = {"function": ("", "the function to differentiate"),
               "argnums": ("0", "arguments that get tangents (comma separated)"),
               "result": ("", "name of the new function (default: <function>_jvp)")}
    suffix = "jvp"

    def transform(self, module, fn, new):
        jvp_function(module, fn, new, int_list(self.opts["argnums"]))
