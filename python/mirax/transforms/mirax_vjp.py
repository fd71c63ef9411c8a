"""`mirax-vjp` and `mirax-grad`: reverse mode.

`mirax-vjp` turns `@f(x...) -> (y...)` into `@f_vjp(x..., cy...) -> (y..., gx...)`:
the outputs and the cotangents of the arguments in `argnums`. `mirax-grad` turns a
function whose first result is a scalar into `@f_grad(x...) -> (gx...)` (with
`value=true`: `-> (y..., gx...)`, the other results being auxiliary values without
gradients, as `value_and_grad`).

    mirax-opt --mirax-grad="function=loss argnums=0,1" model.mlir

The forward pass records each op; the backward pass walks them in reverse and calls
each primitive's vjp rule. Integer and bool values get no cotangent.

A checkpoint's body is re-run in the backward pass on its inputs passed through
`mirax.optimization_barrier`s, each `depends` on the cotangents of the body's results:
no CSE can merge the recomputation with the forward values (which would keep those alive
until the backward pass), and the traced order puts it after those cotangents, when the
forward values it replaces are dead.
"""
from __future__ import annotations

from ..array import STATE, at_loc, located, where_text
from ..dialect.core import MiraxError
from .interpret import apply_op, as_list, call_kind, emit_function, find_function, interpret, placeholders, \
    signature, tracing, zeros_for
from .options import TransformPass, int_list

NAME_VJP = "mirax-vjp"
NAME_GRAD = "mirax-grad"


class CallEntry:
    """A custom function or checkpoint on the tape: its rule, or its body to re-run."""

    def __init__(self, module, callee, cf, num_args, ins, outs, kind=None):
        self.module, self.callee, self.cf, self.ins, self.outs = module, callee, cf, ins, outs
        self.num_args, self.kind = num_args, kind

    def backward(self, cts):
        if self.cf is not None and self.cf._vjp is not None:
            cts = [c if c is not None else zeros_for(o.aval) for c, o in zip(cts, self.outs)]
            n = self.num_args  # closed-over values get no cotangent from the rule
            out = self.outs if len(self.outs) > 1 else self.outs[0]
            ct = cts if len(cts) > 1 else cts[0]
            primals = self.ins[0] if n == 1 else list(self.ins[:n])  # MLX: one argument unwrapped
            return as_list(self.cf._vjp(primals, ct, out)) + [None] * (len(self.ins) - n)
        # no rule: recompute the body's intermediates now, then pull back through them
        ins = list(self.ins)
        if self.kind == "checkpoint":  # kept apart from the forward values (module docstring)
            ins = [_recompute_input(x, cts) for x in ins]
        tape = Tape(self.module)
        outs = interpret(self.module, self.callee, ins, tape.record, tape.call)
        ct = backward(tape, outs, cts)
        return [ct.get(id(x)) for x in ins]


def _recompute_input(x, cts):
    """`x` as a recomputation's input: after the cotangents `cts` (None: zero) and
    behind an optimization barrier."""
    from ..array import apply
    from ..dialect.barrier import optimization_barrier
    for c in cts:
        if c is not None:
            x = apply("depends", [x, c])
    return optimization_barrier(x)


class Tape:
    """The ops of a forward pass, in order, with their array values."""

    def __init__(self, module=None):
        self.module = module
        self.entries = []

    def record(self, prim, params, ins, aval, op=None):
        out = apply_op(prim, params, ins, aval)
        self.entries.append((prim, params, ins, out, STATE.loc))  # interpret set the op's location
        return out

    def call(self, op, callee, ins):
        kind, cf, n = call_kind(op)
        if kind is None:  # a plain call: record its body
            return interpret(self.module, callee, ins, self.record, self.call)
        # custom function or checkpoint: keep only inputs and outputs
        outs = interpret(self.module, callee, ins, apply_op)
        self.entries.append(CallEntry(self.module, callee, cf, n, list(ins), outs, kind))
        return outs


def backward(tape, outputs, cotangents):
    """Cotangents of every recorded value, given those of `outputs` (None: zero).
    Returns a dict id(array) -> cotangent."""
    ct = {}

    def add(x, c):
        if c is None or not x.dtype.is_inexact:
            return
        if c.shape != x.shape:
            raise MiraxError(f"internal error: cotangent of shape {c.shape} for a value of shape {x.shape}")
        prev = ct.get(id(x))
        ct[id(x)] = c if prev is None else prev + c

    for o, c in zip(outputs, cotangents):
        add(o, c)
    for entry in reversed(tape.entries):
        if isinstance(entry, CallEntry):
            cts = [ct.pop(id(o), None) for o in entry.outs]
            if all(c is None for c in cts):
                continue
            for x, c in zip(entry.ins, entry.backward(cts)):
                add(x, c)
            continue
        prim, params, ins, out, loc = entry
        g = ct.pop(id(out), None)
        if g is None or not any(x.dtype.is_inexact for x in ins):
            continue
        with at_loc(loc):  # the backward ops of an op point at the op's line
            if prim.vjp is None:
                raise MiraxError(f"mirax.{prim.name} has no vjp rule{where_text()}")
            try:
                cts = prim.vjp(ins, g, out, **params)
            except MiraxError as err:
                raise located(err, loc) from None
            for x, c in zip(ins, cts):
                add(x, c)
    return ct


def vjp_values(module, name, primals, cotangents):
    """(outputs, cotangents of primals) of `@name` at `primals` (arrays)."""
    tape = Tape(module)
    outs = interpret(module, name, primals, tape.record, tape.call)
    ct = backward(tape, outs, cotangents)
    return outs, [ct.get(id(p)) for p in primals]


def _check_argnums(name, argnums, ins, pass_name):
    for i in argnums:
        if not 0 <= i < len(ins):
            raise MiraxError(f"{pass_name}: argnum {i} out of range for @{name} with {len(ins)} arguments")
        if not ins[i].dtype.is_inexact:
            raise MiraxError(f"{pass_name}: argument {i} of @{name} has dtype {ins[i].dtype.name}; only "
                             "floating-point and complex arguments can be differentiated")


def vjp_function(module, name, new_name, argnums):
    ins, outs_avals = signature(find_function(module, name))
    _check_argnums(name, argnums, ins, NAME_VJP)
    ph = placeholders(ins + outs_avals)
    primals, cph = ph[:len(ins)], ph[len(ins):]
    with tracing():
        outs, grads = vjp_values(module, name, primals, cph)
        grads = [grads[i] if grads[i] is not None else zeros_for(ins[i]) for i in argnums]
    emit_function(module, new_name, ph, outs + grads, source=name)


def grad_function(module, name, new_name, argnums, with_value=False):
    from ..ops import ones
    ins, outs_avals = signature(find_function(module, name))
    _check_argnums(name, argnums, ins, NAME_GRAD)
    if not outs_avals or outs_avals[0].shape != () or not outs_avals[0].dtype.is_inexact:
        got = outs_avals[0] if outs_avals else "nothing"
        raise MiraxError(f"{NAME_GRAD}: @{name} must return a floating-point scalar first, got {got}")
    primals = placeholders(ins)
    with tracing():
        seed = ones((), outs_avals[0].dtype)
        outs, grads = vjp_values(module, name, primals, [seed] + [None] * (len(outs_avals) - 1))
        grads = [grads[i] if grads[i] is not None else zeros_for(ins[i]) for i in argnums]
    emit_function(module, new_name, primals, (outs if with_value else []) + grads, source=name)


class MiraxVjp(TransformPass):
    name = NAME_VJP
    summary = "Add @f_vjp(x..., cy...) -> (y..., gx...): reverse-mode derivatives of @f"
    options = {"function": ("", "the function to differentiate"),
               "argnums": ("0", "arguments that get cotangents (comma separated)"),
               "result": ("", "name of the new function (default: <function>_vjp)")}
    suffix = "vjp"

    def transform(self, module, fn, new):
        vjp_function(module, fn, new, int_list(self.opts["argnums"]))


class MiraxGrad(TransformPass):
    name = NAME_GRAD
    summary = "Add @f_grad(x...) -> (gx...): the gradient of @f's scalar first result"
    options = {"function": ("", "the function to differentiate"),
               "argnums": ("0", "arguments to differentiate (comma separated)"),
               "value": (False, "also return @f's results first (value_and_grad)"),
               "result": ("", "name of the new function (default: <function>_grad)")}
    suffix = "grad"

    def transform(self, module, fn, new):
        grad_function(module, fn, new, int_list(self.opts["argnums"]), bool(self.opts["value"]))
