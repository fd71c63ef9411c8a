"""Tracing: a Python function and example inputs become a `func.func` of mirax ops.

    m = mr.trace(lambda x, y: mr.exp(x) + y, mr.ones((2,)), mr.ones((2,)))
    print(m)   # func.func @main(%arg0: tensor<2xf32>, ...) { "mirax.exp" ... }

Concrete arrays met on the way (closed-over or created inside) become `mirax.constant`
ops. Each op carries the user's source line as its location.
"""
from __future__ import annotations

import numpy as np

from .dialect.core import op_text
from .array import STATE, Array, TraceError
from .tree import tree_leaves


class Tracer:
    """Marks the placeholder arrays of one trace."""

    def __init__(self, name):
        self.name = name


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


def to_mlir_text(placeholders, outputs, name="main") -> str:
    """The text of `func.func @name` computing `outputs` from `placeholders`."""
    from .array import _topo
    outs = [o for o in tree_leaves(outputs)]
    for o in outs:
        if not isinstance(o, Array):
            raise TypeError(f"traced function must return arrays, got {type(o).__name__}")
    names = {id(p): f"%arg{i}" for i, p in enumerate(placeholders)}
    lines = []
    counter = [0]

    def name_of(node):
        n = names.get(id(node))
        if n is None:
            n = emit(node)
        return n

    def emit(node):
        counter[0] += 1
        res = f"%{counter[0] - 1}"
        if node._prim is None:
            if node._data is None:
                raise TraceError("an input of another trace leaked into this one")
            from .ops.creation import constant
            c = constant(np.asarray(node._data), node.dtype)
            lines.append("    " + op_text(c._prim, res, [], [], c.aval, c._params))
        else:
            ins = [name_of(x) for x in node._inputs]
            lines.append("    " + op_text(node._prim, res, ins, [x.aval for x in node._inputs], node.aval,
                                          node._params, _loc_text(node._loc)))
        names[id(node)] = res
        return res

    # evaluate nodes in dependency order (inputs first), iteratively
    order = _topo_all(outs, names)
    for node in order:
        if id(node) not in names:
            emit(node)
    sig = ", ".join(f"%arg{i}: {p.aval.tensor_type()}" for i, p in enumerate(placeholders))
    rets = [names[id(o)] for o in outs]
    rtypes = ", ".join(o.aval.tensor_type() for o in outs)
    body = "\n".join(lines)
    ret = f"    return {', '.join(rets)} : {rtypes}" if outs else "    return"
    return f"  func.func @{name}({sig}) -> ({rtypes}) {{\n{body}\n{ret}\n  }}"


def _topo_all(outputs, known):
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
        for x in node._inputs:
            if id(x) not in seen:
                stack.append((x, False))
    return order


def trace(fun, *args, name="main"):
    """Trace `fun(*args)` into an MLIR module of mirax ops (an `ir.Module`)."""
    from mlir import ir
    from .runtime.context import context
    ph, out = trace_function(fun, args, name)
    text = "module {\n" + to_mlir_text(ph, out, name) + "\n}\n"
    with context():
        return ir.Module.parse(text)
