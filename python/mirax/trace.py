"""Tracing: a Python function and example inputs become a `func.func` of mirax ops.

    m = mr.trace(lambda x, y: mr.exp(x) + y, mr.ones((2,)), mr.ones((2,)))
    print(m)   # func.func @main(%arg0: tensor<2xf32>, ...) { "mirax.exp" ... }

Concrete arrays met on the way (closed-over or created inside) become `mirax.constant`
ops. Each op carries the user's source line as its location.
"""
from __future__ import annotations

import itertools

import numpy as np

from .dialect.core import op_text
from .array import STATE, Array, TraceError, _host
from .tree import tree_leaves


class Tracer:
    """Marks the placeholder arrays of one trace. Traces started later (inner ones)
    have higher levels; a value belongs to the innermost trace among its inputs."""

    _levels = itertools.count()

    def __init__(self, name):
        self.name = name
        self.level = next(Tracer._levels)
        self.concrete = None  # the values the placeholders stand for, where known (grad, vjp, jvp)
        self.done = False  # the trace has finished


def placeholder(aval, tracer, index) -> Array:
    a = Array._node(None, (), {"index": index}, aval)
    a._tracer = tracer
    return a


def trace_function(fun, args, name="main"):
    """Run `fun` on placeholders shaped like `args`; return (placeholders, outputs)."""
    tracer = Tracer(name)
    leaves = [a if isinstance(a, Array) else Array(a) for a in args]
    ph = [placeholder(a.aval, tracer, i) for i, a in enumerate(leaves)]
    STATE.tracing += 1
    try:
        out = fun(*ph)
    finally:
        STATE.tracing -= 1
    return ph, out


def _loc_text(loc):
    if not loc:
        return None
    fn, line, _ = loc
    return f'loc("{fn}":{line}:1)'


LIFT_SIZE = 64  # captured arrays larger than this become arguments, not constants


def to_mlir_text(placeholders, outputs, name="main", lift=True, private=False, loc=None, lift_size=LIFT_SIZE,
                 lift_ids=()):
    """(text of `func.func @name`, lifted arrays): the function computing `outputs`
    from `placeholders`. With `lift`, captured concrete arrays of more than LIFT_SIZE
    elements become extra trailing arguments (returned, to be passed by the caller);
    smaller ones become `mirax.constant` ops. Values of enclosing traces (closed over by
    a function traced inside another transform) are always lifted. Calls of custom
    functions and checkpoints become `func.call`s of private functions, whose text
    comes first.

    `loc` ((file, line, source); default: the user's frame) locates the function, its
    arguments and return, and ops without a source line of their own. `lift_size`
    replaces LIFT_SIZE (sharded compile lifts every captured array of 2 or more elements:
    shard-partition cannot split a constant that is not a splat). With `lift`, the arrays
    whose `id` is in `lift_ids` are lifted whatever their size (the transform cache lifts
    the state a function closes over, whose values change between calls)."""
    from .array import STATE, user_frame
    floc = _loc_text(loc or STATE.loc or user_frame())
    at = f" {floc}" if floc else ""
    outs = list(tree_leaves(outputs))
    for o in outs:
        if not isinstance(o, Array):
            raise TypeError(f"a traced function must return arrays, got {type(o).__name__}")
    from .custom import CALL_OUTPUT
    from .fused import FUSED
    from .shapeless import extra_attrs
    # a placeholder updated in place (`x[i] = v`) is its new value now; its argument is the
    # placeholder it was
    placeholders = [p._origin if p._origin is not None else p for p in placeholders]
    names = {id(p): f"%arg{i}" for i, p in enumerate(placeholders)}
    current = placeholders[0]._tracer if placeholders else None

    def outer(node):
        """A value of an enclosing trace: an input here, not something to trace."""
        t = node._tracer
        return t is not None and t is not current and (current is None or t.level < current.level)
    lifted = []
    lines = []
    callees = []
    counter = [0]

    def emit_call(rec):
        res = f"%{counter[0]}"
        counter[0] += 1
        n = len(rec.outputs)
        ins = [names[id(x)] for x in rec.inputs]
        in_types = ", ".join(x.aval.tensor_type() for x in rec.inputs)
        out_types = ", ".join(o.aval.tensor_type() for o in rec.outputs)
        lhs = f"{res}:{n} = " if n > 1 else f"{res} = " if n == 1 else ""
        lines.append(f'    {lhs}func.call @{rec.name}({", ".join(ins)}) {{mirax.{rec.kind} = "{rec.key}", mirax.num_args = {rec.num_args} : i64}} : '
                     f"({in_types}) -> ({out_types})")
        for i, o in enumerate(rec.outputs):
            names[id(o)] = f"{res}#{i}" if n > 1 else res
        callees.append(rec.body_text)

    def emit(node):
        if node._prim is CALL_OUTPUT:
            rec = node._params["call"]
            if id(node) not in names:
                emit_call(rec)
            return
        if outer(node):
            names[id(node)] = f"%arg{len(placeholders) + len(lifted)}"
            lifted.append(node)
            return
        if node._prim is FUSED:  # an eager composite (fused.py): its value (then a leaf), a constant here
            from .array import eval as _eval
            _eval(node)
        if node._prim is None:
            if node._data is None:
                raise TraceError("a traced array was used outside its transform (stored in a "
                                 "variable and used after the transform returned?)")
            if lift and (node.size > lift_size or id(node) in lift_ids):
                names[id(node)] = f"%arg{len(placeholders) + len(lifted)}"
                lifted.append(node)
                return
            from .dialect.creation import dense_text
            res = f"%{counter[0]}"
            cloc = _loc_text(node._loc)
            lines.append(f'    {res} = "mirax.constant"() {{value = {dense_text(_host(node._data, node.aval), node.dtype)}}} : '
                         f"() -> {node.aval.tensor_type()}" + (f" {cloc}" if cloc else at))
        else:
            res = f"%{counter[0]}"
            ins = [names[id(x)] for x in node._inputs]
            lines.append("    " + op_text(node._prim, res, ins, [x.aval for x in node._inputs], node.aval,
                                          node._params, _loc_text(node._loc) or floc, extra_attrs(node)))
        counter[0] += 1
        names[id(node)] = res

    for node in _topo_all(outs, names, lambda n: outer(n) or n._prim is FUSED):
        emit(node)
    args = list(placeholders) + lifted
    sig = ", ".join(f"%arg{i}: {p.aval.tensor_type()}{at}" for i, p in enumerate(args))
    rets = [names[id(o)] for o in outs]
    rtypes = ", ".join(o.aval.tensor_type() for o in outs)
    body = "\n".join(lines)
    ret = (f"    return {', '.join(rets)} : {rtypes}" if outs else "    return") + at
    vis = "private " if private else ""
    text = f"  func.func {vis}@{name}({sig}) -> ({rtypes}) {{\n{body}\n{ret}\n  }}{at}"
    return "\n".join(callees + [text]), lifted


def _topo_all(outputs, known, stop=lambda node: False):
    """Nodes reachable from `outputs` (not through `known` ones or past `stop` ones),
    inputs before users."""
    order, seen = [], set(known)
    stack = [(o, False) for o in outputs]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if stop(node):
            continue
        for x in node._inputs:
            if id(x) not in seen:
                stack.append((x, False))
    return order


def trace(fun, *args, name="main", **kwargs):
    """Trace `fun(*args)` into an MLIR module of mirax ops (an `ir.Module`).

    Called with an array first, it is MLX's `mx.trace` instead: the sum along a
    diagonal, `mr.trace(a, offset=0, axis1=0, axis2=1, dtype=None)`."""
    if not callable(fun) or isinstance(fun, Array):
        from .ops.composite import matrix_trace
        return matrix_trace(fun, *args, **kwargs)
    from mlir import ir
    from .runtime.context import context
    ph, out = trace_function(fun, args, name)
    text, _ = to_mlir_text(ph, out, name, lift=False)
    text = "module {\n" + text + "\n}\n"
    with context():
        return ir.Module.parse(text)
