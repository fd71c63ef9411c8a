"""`mirax-results-in-place`: a result computed into a buffer of its own and copied into
its out-parameter at the end is computed in the out-parameter instead.

`buffer-results-to-out-params{hoist-static-allocs}` writes a result straight into the
caller's buffer only when the returned value is a `memref.alloc` itself. A tiled matmul
writes C through a reshaped view (`[M/mr][mr][N/nr][nr]`, matmul_codegen.py), so the
returned value is a `memref.collapse_shape` of a 4-d alloc, and the result was copied
at the end: every weight gradient of a training step held twice (in its buffer until the
copy, and in the output), and copied (a 32-layer MLP's compiled gradient kept 13 MB
more with `checkpoint` than without the packed products: the saving of checkpointing
was gone). This pass rewrites, in each function's entry block,

    %a = memref.alloc() : memref<128x4x8x16xf32>            %v = memref.expand_shape %out [[0, 1], [2, 3]]
    ... writes %a ...                                  ->       : memref<512x128xf32> into memref<128x4x8x16xf32>
    %c = memref.collapse_shape %a [[0, 1], [2, 3]]          ... writes %v ...
    memref.copy %c, %out                                    %c = memref.collapse_shape %v [[0, 1], [2, 3]]
    memref.dealloc %a

when `%out` is an argument of the function used by that copy alone, `%a` is a static
identity-layout alloc reached from the copied value through reshapes
(`memref.collapse_shape`/`memref.expand_shape`) only, and every other use of `%a` and of
its views comes before the copy (nothing writes the buffer after it, or reads it through
something this pass cannot follow).
"""
from __future__ import annotations

from mlir import ir

from .early_dealloc import _OPAQUE_PREFIXES, _memref_results, _top
from .pass_base import MiraxPass, defining_op, isa, op_id, user_op, walk_ops

NAME = "mirax-results-in-place"
_RESHAPES = ("memref.collapse_shape", "memref.expand_shape")


def _identity(t) -> bool:
    if not isa(ir.MemRefType, t):
        return False
    mt = ir.MemRefType(t)
    if not (mt.has_static_shape and isa(ir.AffineMapAttr, mt.layout)):
        return False
    m = ir.AffineMapAttr(mt.layout).value
    return m == ir.AffineMap.get_identity(m.n_dims) and m.n_symbols == 0


def _chain(value):
    """(alloc, [reshape ops from the alloc to `value`]) or None."""
    chain = []
    op = defining_op(value)
    while op is not None and op.name in _RESHAPES:
        if not _identity(op.operands[0].type):
            return None
        chain.append(op)
        op = defining_op(op.operands[0])
    if op is None or op.name != "memref.alloc" or len(op.operands) or not _identity(op.results[0].type):
        return None
    return op, chain[::-1]


def _uses_before(alloc, copy, block, index):
    """The alloc's deallocs, or None when the buffer (or a view of it) has a use that is
    not before `copy` in `block`, or that this pass cannot follow."""
    deallocs, work, seen = [], [alloc.results[0]], set()
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            u = user_op(use)
            if u == copy:
                continue
            if u.name == "memref.dealloc":
                deallocs.append(u)
                continue
            if u.name.startswith(_OPAQUE_PREFIXES):
                return None
            top = _top(u, block)
            if top is None or op_id(top) not in index or index[op_id(top)] > index[op_id(copy)]:
                return None
            work.extend(_memref_results(u))
    return deallocs


def _view_of(out, alloc, chain):
    """A view of `out` with the alloc's type: the chain's reshapes undone, last first."""
    from mlir.dialects import memref
    types = [alloc.results[0].type] + [op.results[0].type for op in chain]
    v = out
    for op, src_t in zip(reversed(chain), reversed(types[:-1])):
        groups = op.attributes["reassociation"]
        if op.name == "memref.collapse_shape":  # undo: expand back to the source's shape
            v = memref.ExpandShapeOp(src_t, v, groups, [], ir.MemRefType(src_t).shape).result
        else:
            v = memref.CollapseShapeOp(src_t, v, groups).result
    return v


def results_in_place(module) -> int:
    """Rewrite every such copy of `module`'s functions; returns how many."""
    done = 0
    for fn in walk_ops(module, lambda n: n == "func.func"):
        if not len(fn.regions[0].blocks):
            continue
        block = fn.regions[0].blocks[0]
        args = list(block.arguments)
        ops = [o for o in walk_ops(fn, lambda n: True) if o.block == block]
        index = {op_id(o): i for i, o in enumerate(ops)}  # (by address: rewrites change the users)
        # (the copies listed before any rewrite: a rewrite erases deallocs after its copy,
        # and reading an erased op's name crashed the interpreter)
        for copy in [o for o in ops if o.name == "memref.copy"]:
            src, out = copy.operands[0], copy.operands[1]
            if not any(out == a for a in args) or len(list(out.uses)) != 1 or not _identity(out.type):
                continue
            found = _chain(src)
            if found is None:
                continue
            alloc, chain = found
            if op_id(alloc) not in index or [int(d) for d in ir.MemRefType(src.type).shape] != \
                    [int(d) for d in ir.MemRefType(out.type).shape]:
                continue
            deallocs = _uses_before(alloc, copy, block, index)
            if deallocs is None:
                continue
            with ir.InsertionPoint(alloc), alloc.location:
                view = _view_of(out, alloc, chain)
            alloc.results[0].replace_all_uses_with(view)
            for d in deallocs:
                d.erase()
            copy.erase()
            alloc.erase()
            done += 1
    return done


class MiraxResultsInPlace(MiraxPass):
    name = NAME
    summary = "Compute a result copied into its out-parameter (through reshapes) in the out-parameter itself"

    def run(self, module):
        results_in_place(module)
