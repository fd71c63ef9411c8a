"""`custom_function` and `checkpoint`: functions the transforms treat as a unit.

Inside a traced function (a transform, later compile) a call to one becomes
`func.call @custom_N(...) {mirax.custom = "N"}` of a private function holding its body,
so the passes see the boundary: they use the function's own rules where it has them
(`.vjp`, `.jvp`, `.vmap`, MLX's signatures), and otherwise transform the body, with
reverse mode re-running it in the backward pass instead of keeping its intermediates
(which is what `checkpoint` asks for). Lowering inlines the call like any other.

    @mr.custom_function
    def ste(x):
        return mr.round(x)

    @ste.vjp
    def ste_vjp(primals, cotangent, output):
        return cotangent          # straight-through
"""
from __future__ import annotations

import functools
import itertools
import weakref

from .array import STATE, Array
from .tree import tree_flatten, tree_unflatten

_REGISTRY: "weakref.WeakValueDictionary[str, CustomFunction]" = weakref.WeakValueDictionary()
_ids = itertools.count()


class CallOutput:
    """The marker primitive of arrays produced by a traced call (see trace.py)."""

    name = "call_output"
    typed_result = True


CALL_OUTPUT = CallOutput()


class CallRecord:
    """One traced call: the callee's function text, attributes, inputs and outputs."""

    def __init__(self, fn, inputs, kind, key):
        self.fn = fn  # the CustomFunction (None for checkpoint's anonymous wrapper)
        self.inputs = inputs
        self.kind = kind  # "custom" or "checkpoint"
        self.key = key
        self.outputs = []
        self.body_text = None
        self.name = None


class CustomFunction:
    """A function with optional custom transform rules (MLX's `mx.custom_function`)."""

    def __init__(self, fun, kind="custom"):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.kind = kind
        self.key = str(next(_ids))
        self._vjp = self._jvp = self._vmap = None
        _REGISTRY[self.key] = self

    def vjp(self, fn):
        """`fn(primals, cotangents, outputs) -> cotangents of primals` (MLX signature:
        `primals` is the argument itself when the function has one, else their list)."""
        self._vjp = fn
        return fn

    def jvp(self, fn):
        """`fn(primals, tangents) -> tangents of outputs` (MLX signature: with one
        argument, `fn(x, tangent)`)."""
        self._jvp = fn
        return fn

    def vmap(self, fn):
        """`fn(inputs, axes) -> (outputs, out_axes)` (MLX signature: with one argument,
        `fn(x, axis)`)."""
        self._vmap = fn
        return fn

    def __call__(self, *args):
        leaves, treedef = tree_flatten(list(args))
        arrays = [x if isinstance(x, Array) else Array(x) for x in leaves]
        if not any(a._tracer is not None for a in arrays):
            return self.fun(*args)  # nothing transforms it: just run it
        return _traced_call(self, arrays, treedef)


def custom_function(fun):
    """Decorate `fun` so its `.vjp`, `.jvp`, `.vmap` rules replace differentiation."""
    return CustomFunction(fun)


def checkpoint(fun):
    """`fun` whose intermediates the backward pass recomputes instead of storing.
    Random numbers drawn inside use the same keys when recomputed. The recomputation
    runs on the inputs passed through `mirax.optimization_barrier`s, so under
    `mr.compile` no CSE merges it back into the forward values: those are freed after
    the forward pass, and the peak memory of a compiled gradient drops."""
    return CustomFunction(fun, kind="checkpoint")


def lookup(key):
    return _REGISTRY.get(key)


def _traced_call(cf, arrays, treedef):
    """Record a call of `cf` on traced arrays; returns its outputs (traced)."""
    from .trace import Tracer, placeholder, to_mlir_text
    tracer = Tracer("custom")
    ph = [placeholder(a.aval, tracer, i) for i, a in enumerate(arrays)]
    STATE.tracing += 1
    try:
        out = cf.fun(*tree_unflatten(treedef, ph))
    finally:
        STATE.tracing -= 1
    out_leaves, out_tree = tree_flatten(out)
    rec = CallRecord(cf, arrays, cf.kind, cf.key)
    rec.name = f"{cf.kind}_{cf.key}_{id(rec) & 0xFFFFFF:x}"
    rec.body_text, lifted = to_mlir_text(ph, out_leaves, rec.name, lift=False, private=True)
    # values of the enclosing trace the body closed over are passed as extra operands
    rec.num_args = len(arrays)
    rec.inputs = list(arrays) + list(lifted)
    outs = []
    for i, o in enumerate(out_leaves):
        a = Array._node(CALL_OUTPUT, tuple(rec.inputs), {"call": rec, "index": i}, o.aval)
        outs.append(a)
    rec.outputs = outs
    return tree_unflatten(out_tree, outs)
