"""`mirax-simplify`: CSE, DCE, safe identities and constant folding on mirax ops.

Upstream cse/canonicalize leave IRDL ops alone (they carry no side-effect information),
so mirax simplifies at its own level; every mirax op is pure.

    %0 = "mirax.reshape"(%x) {shape = array<i64: 4>} : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "mirax.add"(%0, %zero) ...           // %zero a splat integer 0
  becomes %x. Ops whose operands are all `mirax.constant` and whose result has at most
`FOLD_LIMIT` elements are evaluated and replaced by a `mirax.constant`: by the
primitive's numpy reference where that computes bit for bit what its kernel computes
(`EXACT_IN_NUMPY`: data movement, selection, IEEE's basic float arithmetic, integer
arithmetic and comparisons), else by mirax's own CPU kernel — never an approximation
of it (a kernel is a JIT compile, 20-30 ms the first time: a transformer step folds 14
ops of its causal mask and positions, 0.45 s of its first compile when they all were).
`stop_gradient` is kept: it means something to grad.
`optimization_barrier` is never folded, merged or seen through (dialect/barrier.py).
A division by a float splat constant becomes a multiplication by its reciprocal, as
XLA's algebraic simplifier does (exact for powers of two, else within an ulp); `x ** 2`
becomes `x * x` and `x ** 1` x (exact). `transpose(a.T @ b)` becomes `b.T @ a` (a
weight gradient in the weight's layout); `x > y` beside `maximum(x, y)` becomes
`maximum(x, y) > y` (relu's gradient mask from relu's output).

Each sweep visits a block's ops in order, replacing an op by a rule's value or by an
earlier equal op (CSE keys: name, operands, attributes, result types); the ops a rule
makes are simplified at once, so a sweep leaves nothing for the next to find but what
DCE frees (a transformer step: two sweeps, 116 -> 75 ms with the uniqued-attribute keys).
"""
from __future__ import annotations

import math

from mlir import ir

from ..dialect import PRIMITIVES
from ..dialect import dtypes as dt
from ..dialect.core import Aval
from ..dialect.distributed import COMMUNICATING
from .pass_base import MiraxPass, defining_op, isa, splat_attr, user_op

NAME = "mirax-simplify"
FOLD_LIMIT = 1024
KEEP = {"stop_gradient"}  # never folded, CSE'd away from its uses, or removed
OPAQUE = {"optimization_barrier"} | set(COMMUNICATING)  # never folded or merged


def _aval(t: ir.Type) -> Aval:
    rt = ir.RankedTensorType(t)
    return Aval(tuple(rt.shape), dt.from_mlir(str(rt.element_type)))


def _defining(v: ir.Value, name: str):
    """The op defining `v` when it is a `name` op, else None."""
    op = defining_op(v)
    return op if op is not None and op.name == name else None


def _splat(v: ir.Value):
    """The scalar of a splat mirax.constant defining `v` (int, float or bool), else None."""
    s = splat_attr(v, "mirax.constant")
    for cls in (ir.FloatAttr, ir.IntegerAttr):
        if s is not None and isa(cls, s):
            return cls(s).value
    return bool(ir.BoolAttr(s).value) if s is not None and isa(ir.BoolAttr, s) else None


def _constant_behind_broadcast(v):
    """(the mirax.broadcast_to defining `v` or None, the mirax.constant it or `v` is):
    a Python scalar beside an array (`x / 2.0`, `x ** 2`) is a broadcast constant."""
    bcast = _defining(v, "mirax.broadcast_to")
    return bcast, _defining(bcast.operands[0] if bcast is not None else v, "mirax.constant")


def _is_zero(v, kind, negative_zero_only):
    x = _splat(v)
    if x is None or x != 0:
        return False
    if kind == "f" and negative_zero_only:
        return math.copysign(1.0, x) < 0
    return True


def _identity(op: ir.Operation):
    """A value equal to `op`'s result by a safe identity, or None."""
    name = op.name[len("mirax."):]
    rtype = op.results[0].type
    ops = list(op.operands)
    if name in ("reshape", "broadcast_to", "astype") and ops[0].type == rtype:
        return ops[0]
    if name == "transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        if perm == list(range(len(perm))):
            return ops[0]
        return None
    if name not in ("add", "subtract", "multiply", "divide"):
        return None
    try:
        d = _aval(rtype).dtype
    except TypeError:
        return None
    if d.kind not in "iuf":
        return None
    lhs, rhs = ops
    if name == "add":
        # x + 0.0 is not x for x = -0.0: only -0.0 is an additive identity of floats
        if _is_zero(rhs, d.kind, True) and lhs.type == rtype:
            return lhs
        if _is_zero(lhs, d.kind, True) and rhs.type == rtype:
            return rhs
    if name == "subtract" and _is_zero(rhs, d.kind, False) and lhs.type == rtype:
        return lhs
    if name == "multiply":
        if _splat(rhs) == 1 and lhs.type == rtype:
            return lhs
        if _splat(lhs) == 1 and rhs.type == rtype:
            return rhs
    if name == "divide" and _splat(rhs) == 1 and lhs.type == rtype:
        return lhs
    return None


# the smallest and largest normal magnitudes of each float dtype
_NORMAL = {"float16": (2.0 ** -14, 65504.0), "bfloat16": (2.0 ** -126, 3.3895313892515355e38),
           "float32": (2.0 ** -126, 3.4028234663852886e38), "float64": (2.0 ** -1022, 1.7976931348623157e308)}


def _reciprocal(op: ir.Operation):
    """`x / c` for a float splat constant `c` (or a broadcast of one: `x / 2.0`) as
    `x * (1/c)`, as XLA's algebraic simplifier writes it: a division costs 8-16 cycles a
    vector on x86 (AVX-512's vdivps runs on one port), a multiplication one; exact when c
    is a power of two, else within an ulp of the division. None when `c` is 0, inf, nan
    or its reciprocal is not a normal number of the dtype."""
    if op.name != "mirax.divide":
        return None
    try:
        d = _aval(op.results[0].type).dtype
    except TypeError:
        return None
    if d.kind != "f" or op.operands[0].type != op.results[0].type:
        return None
    rhs = op.operands[1]
    bcast, const = _constant_behind_broadcast(rhs)
    c = _splat(const.results[0]) if const is not None else None
    if not isinstance(c, float) or c == 0 or not math.isfinite(c):
        return None
    tiny, big = _NORMAL.get(d.name, _NORMAL["float32"])
    r = 1.0 / c
    if not tiny <= abs(r) <= big:
        return None
    ctype = const.results[0].type
    with op.context, op.location, ir.InsertionPoint(op):
        attr = ir.DenseElementsAttr.get_splat(ctype, ir.FloatAttr.get(ir.RankedTensorType(ctype).element_type, r))
        inv = ir.Operation.create("mirax.constant", results=[ctype], attributes={"value": attr}).results[0]
        if bcast is not None:
            inv = ir.Operation.create("mirax.broadcast_to", results=[rhs.type], operands=[inv],
                                      attributes={"shape": bcast.attributes["shape"]}).results[0]
        new = ir.Operation.create("mirax.multiply", results=[op.results[0].type], operands=[op.operands[0], inv])
    return new.results[0]


def _power(op: ir.Operation):
    """`x ** c` for a splat constant `c` (or a broadcast of one) of 1 or 2 as `x` or
    `x * x` (both exact; XLA's algebraic simplifier does the same), else None. A vector
    pow the LLVM code generator cannot turn into multiplies is a libm call per lane."""
    if op.name != "mirax.power" or op.operands[0].type != op.results[0].type:
        return None
    try:
        d = _aval(op.results[0].type).dtype
    except TypeError:
        return None
    _, const = _constant_behind_broadcast(op.operands[1])
    c = _splat(const.results[0]) if const is not None else None
    if d.kind not in "iuf" or isinstance(c, bool) or c not in (1, 2):
        return None
    x = op.operands[0]
    if c == 1:
        return x
    with op.context, op.location, ir.InsertionPoint(op):
        return ir.Operation.create("mirax.multiply", results=[op.results[0].type], operands=[x, x]).results[0]


def _compose_transpose(op: ir.Operation):
    """transpose(transpose(x, p), q) as one transpose of x (or x itself), else None."""
    if op.name != "mirax.transpose":
        return None
    inner = _defining(op.operands[0], "mirax.transpose")
    if inner is None:
        return None
    p = list(ir.DenseI64ArrayAttr(inner.attributes["permutation"]))
    q = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    perm = [p[i] for i in q]
    x = inner.operands[0]
    if perm == list(range(len(perm))) and x.type == op.results[0].type:
        return x
    with op.context, op.location, ir.InsertionPoint(op):
        new = ir.Operation.create("mirax.transpose", results=[op.results[0].type], operands=[x],
                                  attributes={"permutation": ir.DenseI64ArrayAttr.get(perm)})
    return new.results[0]


def _swaps_last_two(op) -> bool:
    """Whether `op` is a mirax.transpose of the last two dims only."""
    if op is None or op.name != "mirax.transpose":
        return False
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


def _transposed_product(op: ir.Operation):
    """`transpose(a @ b)` (the last two dims swapped) as `b.T @ a.T` when the product
    has no other use and one of its operands is itself such a transpose, which then
    folds away (`_compose_transpose`): the weight gradient of `x @ W.T`, `(x.T @ g).T`,
    becomes `g.T @ x`, the product written in W's own layout, and the SGD update after
    it reads it row by row instead of through a transpose (a 512x784 step ~5-14%
    faster, product and update). No more transposes than before, and the same terms
    summed over k (the tiled CPU kernels in the same order: equal bit for bit)."""
    if not _swaps_last_two(op):
        return None
    mm = _defining(op.operands[0], "mirax.matmul")
    if mm is None or len(list(mm.results[0].uses)) != 1:
        return None
    a, b = mm.operands
    rank = ir.RankedTensorType(op.results[0].type).rank
    if ir.RankedTensorType(a.type).rank != rank or ir.RankedTensorType(b.type).rank != rank:
        return None
    if not (_swaps_last_two(defining_op(a)) or _swaps_last_two(defining_op(b))):
        return None

    def swap(v):  # (v transposed as `op` transposes: the same permutation)
        vt = ir.RankedTensorType(v.type)
        shape = list(vt.shape)
        shape[-2:] = shape[-1], shape[-2]
        rt = ir.RankedTensorType.get(shape, vt.element_type, vt.encoding)
        return ir.Operation.create("mirax.transpose", results=[rt], operands=[v],
                                   attributes={"permutation": op.attributes["permutation"]}).results[0]
    with op.context, mm.location, ir.InsertionPoint(op):
        new = ir.Operation.create("mirax.matmul", results=[op.results[0].type], operands=[swap(b), swap(a)])
    return new.results[0]


# x > y is max(x, y) > y, and x < y is min(x, y) < y, for every float (NaN and signed
# zeros included: both sides false) and integer
_WINNER = {"mirax.greater": "mirax.maximum", "mirax.less": "mirax.minimum"}


def _won(op: ir.Operation):
    """`x > y` as `maximum(x, y) > y` (`x < y` as `minimum(x, y) < y`; either
    operand order of the extreme) when that maximum (minimum) is computed earlier in the
    block, else None: the mask of maximum's gradient (MLX's rule: `x > y`) then reads
    relu's output, which the backward pass keeps anyway, and a compiled MLP no longer
    keeps each layer's input to relu too (the forward kernel wrote both)."""
    extreme = _WINNER.get(op.name)
    if extreme is None:
        return None
    x, y = op.operands
    if x == y:
        return None
    for use in x.uses:
        m = user_op(use)
        if (m.name == extreme and set(m.operands) == {x, y} and len(m.operands) == 2
                and m.results[0].type == x.type and m.block == op.block and m.is_before_in_block(op)):
            with op.context, op.location, ir.InsertionPoint(op):
                new = ir.Operation.create(op.name, results=[op.results[0].type], operands=[m.results[0], y])
            return new.results[0]
    return None


def _broadcast_splat(const: ir.Operation, op: ir.Operation):
    """A broadcast of a splat constant (a Python scalar beside an array: `x * 2`) as the
    same splat at the new shape: no kernel to compile and run (a cold one costs ~40 ms,
    once per new shape), None when the constant is not a plain splat."""
    try:
        value = ir.DenseElementsAttr(const.attributes["value"])
        if not value.is_splat:
            return None
        attr = ir.DenseElementsAttr.get_splat(op.results[0].type, value.get_splat_value())
    except (ValueError, TypeError, KeyError):
        return None
    with op.context, op.location, ir.InsertionPoint(op):
        new = ir.Operation.create("mirax.constant", results=[op.results[0].type], attributes={"value": attr})
    return new.results[0]


# primitives whose numpy reference computes exactly what their kernel computes, by the
# kinds of dtype their operands and result have (all of them): moves and selections of
# any dtype; IEEE-754's correctly rounded basic operations on f32/f64; integer and
# boolean arithmetic (two's complement, wrapping), comparisons, logic and conversions
# (no integer division or remainder: C truncates where numpy floors)
_ANY = {"reshape", "broadcast_to", "transpose", "slice", "concatenate", "where"}
_IEEE = {"add", "subtract", "multiply", "divide", "negative", "abs"}
_INTEGER = {"add", "subtract", "multiply", "negative", "abs", "maximum", "minimum", "less", "less_equal",
            "greater", "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_not",
            "arange", "astype"}
EXACT_IN_NUMPY = _ANY | _IEEE | _INTEGER


def _numpy_fold(prim, params, inputs, ins, out):
    """`prim` evaluated by its numpy reference when that is exact (EXACT_IN_NUMPY), as an
    array of `out`'s shape and storage dtype; None otherwise."""
    import numpy as np
    name, storage = prim.name, out.dtype.storage
    dtypes = [a.dtype for a in ins] + [out.dtype]
    exact = (name in _ANY
             or (name in _IEEE and all(d in (dt.float32, dt.float64) for d in dtypes))
             or (name in _INTEGER and all(d.storage.kind in "iub" and d is not dt.bfloat16 for d in dtypes)))
    if not exact:
        return None
    kw = dict(params)
    if name == "arange":  # (start + i * step in f64; exact where every value is an integer)
        kw.update(n=out.shape[0], dtype=storage)
    with np.errstate(all="ignore"):  # (IEEE's overflows and NaNs, as the kernel's)
        value = np.asarray(prim.reference(*inputs, **kw))
    if name == "arange" and value.dtype != storage:
        cast = value.astype(storage)
        if not np.array_equal(cast, value):
            return None
        value = cast
    if value.shape != tuple(out.shape) or value.dtype != storage:
        return None  # (a reference that promotes: the kernel decides)
    return value


def _fold(op: ir.Operation):
    """A new mirax.constant holding `op`'s value when all its operands are constants."""
    name = op.name[len("mirax."):]
    prim = PRIMITIVES.get(name)
    if prim is None or name in KEEP or name == "constant":
        return None
    consts = [_defining(v, "mirax.constant") for v in op.operands]
    if any(c is None for c in consts):
        return None
    try:
        out = _aval(op.results[0].type)
        ins = [_aval(v.type) for v in op.operands]
    except (ValueError, TypeError):
        return None
    if out.size > FOLD_LIMIT or any(a.dtype in (dt.bfloat16, dt.complex64) for a in ins + [out]):
        return None
    if name == "broadcast_to":
        splat = _broadcast_splat(consts[0], op)
        if splat is not None:
            return splat
    from ..dialect.creation import attr_to_numpy, dense_attr
    from ..device import cpu
    try:
        params = prim.params_from_ir(op)
        inputs = [attr_to_numpy(c.attributes["value"], a.dtype) for c, a in zip(consts, ins)]
        value = _numpy_fold(prim, params, inputs, ins, out)
        if value is None:
            value = cpu.run(prim, params, ins, out, inputs)
        with op.context, op.location:
            attr = dense_attr(value, out.dtype)
    except Exception:  # an op the CPU path cannot run here: leave it unfolded
        return None
    with op.context, op.location, ir.InsertionPoint(op):
        new = ir.Operation.create("mirax.constant", results=[op.results[0].type],
                                  attributes={"value": attr})
    return new.results[0]


def _cse_key(op: ir.Operation):
    return (op.name, tuple(op.operands), tuple((k, _attribute_key(op, k)) for k in op.attributes),
            tuple(r.type for r in op.results))


def _attribute_key(op, name):
    """The attribute itself (uniqued in its context: equal attributes are equal keys, and
    printing them was a third of this pass), or the text of one the bindings cannot wrap
    (complex constants: Dense.read)."""
    try:
        return op.attributes[name]
    except TypeError:
        from ..dialect.core import Dense
        return str(Dense.read(op, name))


def _blocks(op: ir.Operation):
    for region in op.regions:
        for block in region.blocks:
            yield block
            for child in block.operations:
                yield from _blocks(child.operation)


def _simplify_block(block: ir.Block) -> bool:
    changed = False
    seen, kept = {}, set()  # CSE key -> value; the results of the ops kept so far
    for op in list(block.operations):
        changed |= _simplify_op(op.operation, seen, kept) is not None
    return changed


def _simplify_op(op: ir.Operation, seen: dict, kept: set):
    """Simplify or CSE `op` against the ops before it (`seen`): the value its result was
    replaced by (`op` erased), or None (kept, and recorded in `seen` and `kept`).

    A rule's value defined by an op the rule made (a folded constant, a composed
    transpose) is simplified and CSE'd at once: left to the next sweep, those made a
    transformer step take three sweeps instead of two."""
    if not op.name.startswith("mirax.") or len(op.results) != 1:
        return None
    if op.name[len("mirax."):] in OPAQUE:  # a barrier, or one exchanging messages
        return None
    repl = None
    if op.name[len("mirax."):] not in KEEP:
        repl = (_identity(op) or _compose_transpose(op) or _transposed_product(op) or _fold(op) or _reciprocal(op)
                or _power(op) or _won(op))
    if repl is None:
        key = _cse_key(op)
        repl = seen.get(key)
        if repl is None:
            seen[key] = op.results[0]
            kept.add(op.results[0])
            return None
    else:
        repl = _settle(repl, op.block, seen, kept)
    op.results[0].replace_all_uses_with(repl)
    op.erase()
    return repl


def _settle(value, block, seen: dict, kept: set):
    """`value` as `_simplify_op` leaves it when a rule made the op defining it (and that
    op's new operands, first): ops of `block` the sweep has not kept yet, so new ones."""
    made = defining_op(value)
    if (made is None or value in kept or made.block != block or not made.name.startswith("mirax.")
            or len(made.results) != 1 or made.name[len("mirax."):] in OPAQUE):
        return value
    for v in list(made.operands):
        _settle(v, block, seen, kept)
    return _simplify_op(made, seen, kept) or value


def _dce_block(block: ir.Block) -> bool:
    changed = False
    for op in reversed(list(block.operations)):
        op = op.operation
        if op.name.startswith("mirax.") and all(not list(r.uses) for r in op.results):
            op.erase()
            changed = True
    return changed


def simplify(module, max_iterations=10) -> None:
    """Simplify every block of `module` until nothing changes."""
    root = module.operation if isinstance(module, ir.Module) else module
    for _ in range(max_iterations):
        changed = False
        for block in list(_blocks(root)):
            changed |= _simplify_block(block)
            changed |= _dce_block(block)
        if not changed:
            return


class MiraxSimplify(MiraxPass):
    name = NAME
    summary = "CSE, DCE, safe algebraic identities and constant folding of mirax ops"
    options = {"max-iterations": (10, "sweeps at most, stopping when nothing changes")}

    def __init__(self, **options):
        super().__init__(**options)
        try:
            self.opts["max-iterations"] = int(self.opts["max-iterations"])
        except (TypeError, ValueError):
            raise ValueError(f"pass '{self.name}': max-iterations must be an integer, "
                             f"got {self.opts['max-iterations']!r}") from None

    def run(self, module: ir.Operation):
        simplify(module, self.opts["max-iterations"])
