"""`mr.compile(f, shapeless=True)`: the traced IR, specialized to new input shapes of the
same ranks without tracing `f` again (MLX's shapeless compile).

While a shapeless function is traced, ops that derive a shape from their operands record
that in the IR instead of a trace-time number:

    %0 = "mirax.broadcast_to"(%arg1) {mirax.implicit, shape = array<i64: 2, 3>} ...  # y in x * y
    %1 = "mirax.reshape"(%arg0) {shape = array<i64: 6, -1>} ...                        # -1 kept

An implicit broadcast (elementwise broadcasting, matmul batch dims, `full_like`, the
element count of `mean`/`var`) is emitted even between equal shapes, so each operand of
an elementwise op reaches it through one. `respecialize` then runs the IR twice: a shape
pass gives each implicit broadcast unknown dims where its operand has size 1 and unifies
the operands of elementwise ops (and matmul batch dims) to solve them; the value pass
records the ops at the solved shapes. Anything else that baked a size in (an explicit
`broadcast_to`, a fixed `reshape`, a slice along a dim that changed) keeps its
trace-time meaning or fails with the op's error and line, never a wrong value. Shapes
that the Python function itself reads (`x.shape[0]`) are constants, as in MLX.
"""
from __future__ import annotations

import weakref

from .array import STATE, Array, apply
from .dialect import PRIMITIVES
from .dialect.core import Aval, MiraxError

__all__ = ["tracing", "active", "broadcast", "respecialize"]

_ACTIVE = [0]  # depth of shapeless compile traces
IMPLICIT = "mirax.implicit"  # the unit attribute marking an implicit broadcast
_MARKED = weakref.WeakValueDictionary()  # id(node) -> node, for implicit broadcasts


class tracing:
    """Trace a shapeless function: implicit broadcasts are recorded as such."""

    def __enter__(self):
        _ACTIVE[0] += 1

    def __exit__(self, *exc):
        _ACTIVE[0] -= 1


def active():
    """Whether a shapeless compile trace is being recorded."""
    return _ACTIVE[0] > 0 and STATE.tracing > 0


def broadcast(a, shape):
    """`broadcast_to(a, shape)` for an implicit broadcast of a shapeless trace: emitted
    even when the shape does not change, and marked so that the shape follows the other
    operands at new input shapes."""
    node = apply("broadcast_to", [a], shape=tuple(int(s) for s in shape))
    _MARKED[id(node)] = node
    return node


def extra_attrs(node):
    """The attributes `to_mlir_text` adds to a node's op (the implicit-broadcast mark)."""
    return IMPLICIT if _MARKED.get(id(node)) is node else ""


# ---- the shape pass ------------------------------------------------------------------

class _Dim:
    """A dimension of the shape pass: a known size, or unknown until unified with a
    known one (a broadcast dim: 1 when nothing else sets it). Union-find."""

    __slots__ = ("parent", "size", "default")

    def __init__(self, size=None, default=None):
        self.parent = self
        self.size = size
        self.default = default

    def find(self):
        d = self
        while d.parent is not d:
            d.parent = d.parent.parent
            d = d.parent
        return d

    def value(self):
        """The solved size (an unknown one takes its default from now on)."""
        r = self.find()
        if r.size is None:
            r.size = r.default
        return r.size


def _unify(a, b, what):
    ra, rb = a.find(), b.find()
    if ra is rb:
        return
    if ra.size is not None and rb.size is not None and ra.size != rb.size:
        raise MiraxError(f"{what}: operand sizes {ra.size} and {rb.size} differ at the new input shapes")
    if ra.size is None:
        ra.parent = rb
        if rb.size is None and rb.default is None:
            rb.default = ra.default
    else:
        rb.parent = ra


class _Sym:
    """A value of the shape pass: its dims and dtype."""

    __slots__ = ("dims", "dtype")

    def __init__(self, dims, dtype):
        self.dims = list(dims)
        self.dtype = dtype

    def aval(self):
        return Aval(tuple(d.value() for d in self.dims), self.dtype)


def _known(aval):
    return _Sym([_Dim(s) for s in aval.shape], aval.dtype)


_ELEMENTWISE = None


def _elementwise(prim):
    global _ELEMENTWISE
    if _ELEMENTWISE is None:
        _ELEMENTWISE = {n for n, p in PRIMITIVES.items() if p.shape.__module__.endswith("dialect.elementwise")}
    return prim.name in _ELEMENTWISE


def _operand_avals(op):
    from .transforms.interpret import aval_of
    return [aval_of(v.type) for v in op.operands]


def _shape_pass(solved):
    """The handler of the shape pass; appends each implicit broadcast's dims to `solved`."""

    def handler(prim, params, ins, aval, op):
        if prim.name == "broadcast_to" and IMPLICIT in op.attributes:
            (x,) = ins
            # a new or size-1 dim takes its size from the other operands, 1 if all have 1
            lead = len(params["shape"]) - len(x.dims)
            dims = [_Dim(default=1) for _ in range(lead)]
            dims += [_Dim(default=1) if d.find().size == 1 else d for d in x.dims]
            solved.append(dims)
            return _Sym(dims, aval.dtype)
        if _elementwise(prim):
            for x in ins[1:]:
                if len(x.dims) == len(ins[0].dims):
                    for a, b in zip(ins[0].dims, x.dims):
                        _unify(a, b, f"mirax.{prim.name}")
            return _Sym(ins[0].dims, aval.dtype)
        if prim.name == "matmul" and len(ins[0].dims) == len(ins[1].dims):
            a, b = ins
            for da, db in zip(a.dims[:-2], b.dims[:-2]):
                _unify(da, db, "mirax.matmul")
            return _Sym(a.dims[:-1] + b.dims[-1:], aval.dtype)
        if prim.typed_result:
            return _known(aval)
        return _known(prim.check([x.aval() for x in ins], params))

    return handler


# ---- the value pass ------------------------------------------------------------------

def _value_pass(solved):
    """The handler recording the ops at the new shapes."""
    it = iter(solved)

    def handler(prim, params, ins, aval, op):
        if prim.name == "broadcast_to" and IMPLICIT in op.attributes:
            node = apply("broadcast_to", ins, shape=tuple(d.value() for d in next(it)))
            _MARKED[id(node)] = node
            return node
        if prim.name == "slice":
            params = _slice_params(params, _operand_avals(op)[0], ins[0].aval)
        if prim.name == "reshape" and -1 not in params["shape"]:
            params = _squeeze_params(params, _operand_avals(op)[0], ins[0].aval)
        if prim.typed_result:
            from .array import apply_typed
            return apply_typed(prim.name, ins, aval, **params)
        return apply(prim.name, ins, **params)

    return handler


def _slice_params(params, old, new):
    """A slice at a new operand shape: a whole axis stays whole; a part of an axis whose
    size changed cannot be told apart from a fixed one (`x[:2]` or `x[:-1]`)."""
    if old.shape == new.shape:
        return params
    stop = list(params["stop"])
    for i, (b, e, s, d0, d1) in enumerate(zip(params["start"], params["stop"], params["strides"],
                                             old.shape, new.shape)):
        if d0 == d1:
            continue
        if (b, e, s) != (0, d0, 1):
            raise MiraxError(f"mirax.slice: axis {i} was sliced as [{b}:{e}:{s}] at size {d0}; at the new "
                             f"size {d1} that slice cannot be re-derived (compile with shapeless=False)")
        stop[i] = d1
    return dict(params, stop=tuple(stop))


def _squeeze_params(params, old, new):
    """A reshape that only removed or inserted size-1 axes (squeeze, expand_dims, an
    integer index) keeps doing that at a new operand shape; other reshapes keep their
    shape (as MLX's Reshape)."""
    out = tuple(params["shape"])
    if old.shape == new.shape or [d for d in old.shape if d != 1] != [d for d in out if d != 1]:
        return params
    dims = iter(d for d0, d in zip(old.shape, new.shape) if d0 != 1)
    for d0, d in zip(old.shape, new.shape):
        if d0 == 1 and d != 1:
            return params  # a removed axis is no longer of size 1: the shape rule says so
    return dict(params, shape=tuple(1 if d == 1 else next(dims) for d in out))


def respecialize(module, name, in_avals, extra):
    """The outputs of `@name` of a traced shapeless `module` recorded at new input avals:
    (placeholders, outputs). `extra` are the lifted captured arrays (trailing arguments)."""
    from .transforms.interpret import interpret, placeholders
    solved = []
    interpret(module, name, [_known(a) for a in in_avals] + [_known(a.aval) for a in extra],
              _shape_pass(solved))
    ph = placeholders(in_avals)
    outs = interpret(module, name, ph + list(extra), _value_pass(solved))
    return ph, outs
